"""Planetoid files come only from the data root or fedgl's own cache, and every cached or
downloaded file is checked before anything parses it. "Online" is simulated: ``_online`` is
monkeypatched and the fetcher copies from the shared data root (nothing downloads)."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest
import scipy.sparse as sp
import torch

from fedgl.data import datasets, planetoid_cache
from fedgl.data.datasets import PLANETOID_SUFFIXES, load_dataset
from fedgl.errors import DataError
from tests import _cli_helpers
from tests._cli_helpers import assert_user_error

cli_fixture = _cli_helpers.cli_fixture  # the `cli` fixture
offline_fixture = _cli_helpers.offline_fixture  # the `offline` fixture
ORIGINAL_TOARRAY = sp.csr_matrix.toarray


class WritesAFile:
    """Unpickling (or ``torch.load(weights_only=False)``) this creates ``target``."""

    def __init__(self, target: Path) -> None:
        self.target = str(target)

    def __reduce__(self):
        return (open, (self.target, "w"))


@pytest.fixture
def user_cache(tmp_path, monkeypatch) -> Path:
    """An empty user cache and an empty data root; the machine 'online' with a fetcher that
    serves the shared Cora/CiteSeer files and records every URL it is asked for."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "root").mkdir()
    return tmp_path / "cache" / "fedgl" / "planetoid"


@pytest.fixture
def online(monkeypatch, data_root):
    fetched: list[str] = []

    def fake_fetch(url: str, dest: Path, timeout: float = 60.0) -> None:
        fetched.append(url)
        name = url.rsplit("/", 1)[1]
        folder = "Cora" if ".cora." in name else "CiteSeer"
        shutil.copy(data_root / folder / "raw" / name, dest)

    monkeypatch.setattr(datasets, "_online", lambda *a, **k: True)
    monkeypatch.setattr(planetoid_cache, "fetch", fake_fetch)
    return fetched


def _plant_cora(cache: Path, data_root: Path) -> Path:
    raw = cache / "Cora" / "raw"
    raw.mkdir(parents=True)
    for s in PLANETOID_SUFFIXES:
        shutil.copy(data_root / "Cora" / "raw" / f"ind.cora.{s}", raw)
    return raw


def test_download_is_checked_and_kept_in_fedgls_cache(tmp_path, user_cache, online, data_root):
    got = load_dataset("cora", str(tmp_path / "root"))
    ref = load_dataset("cora", str(data_root))
    assert torch.equal(got.x, ref.x) and torch.equal(got.edge_index, ref.edge_index)
    assert len(online) == len(PLANETOID_SUFFIXES)
    assert all(u.startswith("https://github.com/kimiyoung/planetoid/") for u in online)
    raw = user_cache / "Cora" / "raw"
    sums = json.loads((raw / planetoid_cache.MANIFEST).read_text())
    assert sums == planetoid_cache.PINNED_SHA256["cora"]
    assert sorted(p.name for p in user_cache.iterdir()) == ["Cora"]  # no temporary left
    online.clear()
    load_dataset("cora", str(tmp_path / "root"))  # the second load reads the verified cache
    assert online == []


def test_tampered_download_is_refused_and_not_kept(tmp_path, user_cache, online, monkeypatch):
    target = tmp_path / "pwned"
    fetch = planetoid_cache.fetch

    def evil_fetch(url: str, dest: Path, timeout: float = 60.0) -> None:
        fetch(url, dest)
        if url.endswith(".graph"):
            dest.write_bytes(pickle.dumps(WritesAFile(target), protocol=2))

    monkeypatch.setattr(planetoid_cache, "fetch", evil_fetch)
    with pytest.raises(DataError, match="does not match the SHA-256") as err:
        load_dataset("cora", str(tmp_path / "root"))
    assert "\n" not in str(err.value) and "ind.cora.graph" in str(err.value)
    assert not target.exists()
    assert not (user_cache / "Cora").exists() and list(user_cache.iterdir()) == []


def test_unpinned_download_goes_through_the_restricted_reader(tmp_path, user_cache, online,
                                                              monkeypatch):
    """A dataset without pinned sums (PubMed's case) is parsed by the restricted reader before it
    is kept: a crafted file is refused and nothing reaches the cache."""
    target = tmp_path / "pwned"
    monkeypatch.setattr(planetoid_cache, "PINNED_SHA256", {})
    fetch = planetoid_cache.fetch

    def evil_fetch(url: str, dest: Path, timeout: float = 60.0) -> None:
        fetch(url, dest)
        if url.endswith(".allx"):
            dest.write_bytes(pickle.dumps(WritesAFile(target), protocol=2))

    monkeypatch.setattr(planetoid_cache, "fetch", evil_fetch)
    with pytest.raises(DataError, match="refused") as err:
        load_dataset("cora", str(tmp_path / "root"))
    assert "\n" not in str(err.value) and "io.open" in str(err.value)
    assert not target.exists() and list(user_cache.iterdir()) == []
    monkeypatch.setattr(planetoid_cache, "fetch", fetch)  # an honest download is kept, with
    load_dataset("cora", str(tmp_path / "root"))          # the sums it was checked with
    raw = user_cache / "Cora" / "raw"
    (raw / "ind.cora.ty").write_bytes((raw / "ind.cora.ty").read_bytes() + b"\0")
    with pytest.raises(DataError, match="does not match"):
        load_dataset("cora", str(tmp_path / "root"))


@pytest.mark.parametrize("online_now", [True, False])
def test_planted_cache_files_are_refused_unread(tmp_path, user_cache, online, monkeypatch, cli,
                                                data_root, online_now):
    """The attack: the data root lacks Cora, and the user cache holds planted files (a raw
    pickle and the processed/ files PyG's loader would torch.load). fedgl refuses the raw file
    by its checksum, never opens the others, runs nothing and changes no class."""
    if not online_now:
        monkeypatch.setattr(datasets, "_online", lambda *a, **k: False)
    target = tmp_path / "pwned"
    raw = _plant_cora(user_cache, data_root)
    (raw / "ind.cora.x").write_bytes(pickle.dumps(WritesAFile(target), protocol=2))
    processed = user_cache / "Cora" / "processed"
    processed.mkdir()
    for name in ("data.pt", "pre_transform.pt", "pre_filter.pt"):
        torch.save(WritesAFile(target), processed / name)
    with pytest.raises(DataError, match="refused unread") as err:
        load_dataset("cora", str(tmp_path / "root"))
    assert "\n" not in str(err.value) and "ind.cora.x" in str(err.value)
    res = cli("run", "--dataset", "cora", "--data-root", tmp_path / "root", "--rounds", "1",
              "--no-progress", "--out", tmp_path / "out")
    assert_user_error(res, "ind.cora.x", "refused", out=tmp_path / "out")
    assert online == [] and not target.exists()
    assert sp.csr_matrix.toarray is ORIGINAL_TOARRAY
    # control: the planted processed file does run code when loaded the way PyG's loader did
    handle = torch.load(processed / "data.pt", weights_only=False)
    handle.close()
    assert target.exists()


def test_verified_cache_is_used_offline(tmp_path, user_cache, data_root, offline):
    _plant_cora(user_cache, data_root)  # byte-identical to the published files
    got = load_dataset("cora", str(tmp_path / "root"))
    assert got.num_nodes == 2708


def test_tx_from_another_dataset_is_one_line(tmp_path, data_root, cli):
    raw = tmp_path / "root" / "Cora" / "raw"
    raw.mkdir(parents=True)
    for s in PLANETOID_SUFFIXES:
        shutil.copy(data_root / "Cora" / "raw" / f"ind.cora.{s}", raw)
    shutil.copy(data_root / "CiteSeer" / "raw" / "ind.citeseer.tx", raw / "ind.cora.tx")
    with pytest.raises(DataError, match="different datasets") as err:
        load_dataset("cora", str(tmp_path / "root"))
    assert "\n" not in str(err.value) and "ind.cora.tx 3703" in str(err.value)
    res = cli("run", "--dataset", "cora", "--data-root", tmp_path / "root", "--rounds", "1",
              "--no-progress", "--out", tmp_path / "out")
    assert_user_error(res, "features", "different datasets", out=tmp_path / "out")


def test_datasets_lists_a_truncated_file_as_damaged(tmp_path, data_root, cli):
    raw = tmp_path / "root" / "Cora" / "raw"
    raw.mkdir(parents=True)
    for s in PLANETOID_SUFFIXES:
        shutil.copy(data_root / "Cora" / "raw" / f"ind.cora.{s}", raw)
    res = cli("datasets", "--data-root", tmp_path / "root")
    assert res.code == 0 and "cora               available" in res.out
    data = (raw / "ind.cora.allx").read_bytes()
    (raw / "ind.cora.allx").write_bytes(data[: len(data) // 3])
    res = cli("datasets", "--data-root", tmp_path / "root")
    assert res.code == 0
    line = next(ln for ln in res.out.splitlines() if ln.strip().startswith("cora"))
    assert "damaged" in line and "ind.cora.allx" in line and "truncated" in line
    (raw / "ind.cora.test.index").write_text("")
    res = cli("datasets", "--data-root", tmp_path / "root")
    assert "damaged" in res.out
