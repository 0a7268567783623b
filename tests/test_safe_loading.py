"""Files cannot run code: a crafted checkpoint or Planetoid pickle is refused unread, with one
line (exit 2 on the CLI), and its payload (writing a file) never runs."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import pytest
import torch

import fedgl
from fedgl.checkpoint import CHECKPOINT_FILE, load_checkpoint
from fedgl.data.datasets import PLANETOID_SUFFIXES, load_dataset
from fedgl.data.planetoid import read_planetoid
from fedgl.errors import DataError
from tests import _cli_helpers
from tests._cli_helpers import assert_user_error
from tests.helpers import interrupt_at

cli_fixture = _cli_helpers.cli_fixture  # the `cli` fixture


class WritesAFile:
    """Unpickling this object calls ``open(target, "w")``: it creates the file."""

    def __init__(self, target: Path) -> None:
        self.target = str(target)

    def __reduce__(self):
        return (open, (self.target, "w"))


def _payload_works(tmp_path: Path, blob_path: Path, target: Path) -> None:
    """Control: plain pickle really runs the payload (so the refusal below means something)."""
    with open(blob_path, "rb") as f:
        handle = pickle.load(f) if blob_path.suffix != ".pt" else torch.load(f, weights_only=False)
    if hasattr(handle, "close"):
        handle.close()
    assert target.exists()
    target.unlink()


def test_crafted_checkpoint_does_not_run(tmp_path, cli):
    target = tmp_path / "pwned"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ckpt = run_dir / CHECKPOINT_FILE
    torch.save({"config": {}, "completed": [], "progress": None,
                "rng": {"torch": WritesAFile(target)}}, ckpt)
    control = tmp_path / "control.pt"
    control.write_bytes(ckpt.read_bytes())
    _payload_works(tmp_path, control, target)

    with pytest.raises(DataError, match="tensors and plain data") as err:
        load_checkpoint(run_dir)
    assert "\n" not in str(err.value)
    assert not target.exists()
    res = cli("run", "--resume", run_dir)
    assert_user_error(res, "checkpoint", "refused")
    assert not target.exists()


def test_checkpoint_roundtrip_is_weights_only(tmp_path):
    """A real checkpoint (weights, history, ledger, RNG states) loads with weights_only=True and
    the resumed run continues (the full resume-equality tests live in test_checkpoint.py)."""
    out = tmp_path / "run"

    stop = interrupt_at(2)

    with pytest.raises(KeyboardInterrupt):
        fedgl.run(dataset="sbm", sbm_nodes=120, clients=2, rounds=4, progress=False,
                  checkpoint_every=1, out=str(out), on_round=stop)
    outer = torch.load(out / CHECKPOINT_FILE, weights_only=True)  # versioned, checksummed
    raw = torch.load(io.BytesIO(outer["payload"].numpy().tobytes()), weights_only=True)
    assert raw["progress"]["round"] == 2 and isinstance(raw["rng"]["torch"], torch.Tensor)
    assert fedgl.run(resume=out, progress=False).repeats[0].history


def _planetoid_copy(tmp_path: Path, data_root: Path) -> Path:
    raw = tmp_path / "root" / "Cora" / "raw"
    raw.mkdir(parents=True)
    for s in PLANETOID_SUFFIXES:
        (raw / f"ind.cora.{s}").symlink_to(data_root / "Cora" / "raw" / f"ind.cora.{s}")
    return raw


def test_crafted_planetoid_file_does_not_run(tmp_path, data_root, cli):
    target = tmp_path / "pwned"
    raw = _planetoid_copy(tmp_path, data_root)
    (raw / "ind.cora.x").unlink()
    with open(raw / "ind.cora.x", "wb") as f:
        pickle.dump(WritesAFile(target), f, protocol=2)
    _payload_works(tmp_path, raw / "ind.cora.x", target)

    with pytest.raises(DataError, match="refused") as err:
        load_dataset("cora", str(tmp_path / "root"))
    assert "\n" not in str(err.value) and "io.open" in str(err.value)
    assert not target.exists()
    res = cli("run", "--dataset", "cora", "--data-root", tmp_path / "root", "--rounds", "1",
              "--no-progress")
    assert_user_error(res, "ind.cora.x", "refused")
    assert not target.exists()


def test_damaged_planetoid_file_is_a_one_line_error(tmp_path, data_root):
    raw = _planetoid_copy(tmp_path, data_root)
    (raw / "ind.cora.graph").unlink()
    (raw / "ind.cora.graph").write_bytes(b"\x80\x02not a pickle")
    with pytest.raises(DataError, match="ind.cora.graph") as err:
        load_dataset("cora", str(tmp_path / "root"))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("key,folder", [("cora", "Cora"), ("citeseer", "CiteSeer")])
def test_restricted_reader_equals_pyg(data_root, key, folder):
    """The restricted reader gives exactly PyG's features, labels, edges and split."""
    pyg = pytest.importorskip("torch_geometric.io")
    from fedgl.data.graph import clean_edge_index

    raw = data_root / folder / "raw"
    ref, got = pyg.read_planetoid_data(str(raw), key), read_planetoid(raw, key)
    n = ref.x.size(0)
    assert torch.equal(ref.x.float(), got["x"]) and torch.equal(ref.y, got["y"])
    assert torch.equal(clean_edge_index(ref.edge_index, n), clean_edge_index(got["edge_index"], n))
    for m in ("train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(ref, m), got[m])
