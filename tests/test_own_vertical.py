"""Vertical alignment by PSI: three parties with columns about overlapping entities find the
common ones, align their rows and GLASU trains on the intersection."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch

from fedgl.data.own.ingest import IngestSpec, vertical_arrays
from fedgl.data.own.secret import make_secret, read_secret
from fedgl.privacy.vertical_align import align_in_process


def write_parties(root: Path, seed: int = 0) -> dict:
    """Party k holds entities ``universe[k::...]``-style overlapping sets, two own columns, its
    own edges; party 0 also the label and split. Returns the truth."""
    rng = np.random.default_rng(seed)
    universe = [f"P{rng.integers(10**8)}-{i}" for i in range(90)]
    label = {s: ("a" if rng.random() < 0.5 else "b") for s in universe}
    split = {s: ("train", "train", "val", "test")[i % 4] for i, s in enumerate(universe)}
    held = [set(rng.choice(90, size=70, replace=False).tolist()) for _ in range(3)]
    truth = {"universe": universe, "held": [], "x": [], "edges": []}
    for k in range(3):
        ids = [universe[i] for i in sorted(held[k])]
        x = np.round(rng.normal(size=(len(ids), 2)) + np.array([[1.0 if label[s] == "a" else
                                                                  -1.0] for s in ids]), 3)
        lines = ["id,c1,c2" + (",label,split" if k == 0 else "")]
        lines += [f"{s},{x[i, 0]},{x[i, 1]}" + (f",{label[s]},{split[s]}" if k == 0 else "")
                  for i, s in enumerate(ids)]
        (root / f"nodes{k}.csv").write_text("\n".join(lines) + "\n")
        edges = {tuple(sorted(rng.choice(90, size=2, replace=False).tolist())) for _ in range(150)}
        (root / f"edges{k}.csv").write_text("source,target\n" + "".join(
            f"{universe[a]},{universe[b]}\n" for a, b in sorted(edges)))
        truth["held"].append(ids)
        truth["x"].append(dict(zip(ids, x.tolist(), strict=True)))
        truth["edges"].append({(universe[a], universe[b]) for a, b in edges})
    truth["label"] = label
    return truth


@pytest.fixture
def aligned(tmp_path: Path):
    truth = write_parties(tmp_path)
    make_secret(tmp_path / "secret")
    tables = [vertical_arrays(IngestSpec(
        str(tmp_path / f"nodes{k}.csv"), str(tmp_path / f"edges{k}.csv"), k,
        label_column="label" if k == 0 else None, split_column="split" if k == 0 else None),
        read_secret(tmp_path / "secret")) for k in range(3)]
    shards, figures = align_in_process(tables)
    return truth, tables, shards, figures


def test_every_party_holds_exactly_the_intersection_in_one_order(aligned) -> None:
    truth, tables, shards, figures = aligned
    common = set(truth["held"][0]) & set(truth["held"][1]) & set(truth["held"][2])
    assert figures["common"] == len(common) and 0 < len(common) < 70
    # the row order, recovered from each party's own ids: the same entity in row r everywhere
    rows = []
    for k, shard in enumerate(shards):
        x_to_id = {tuple(np.float32(v).tolist()): s for s, v in truth["x"][k].items()}
        rows.append([x_to_id[tuple(r)] for r in shard.x.tolist()])
    assert rows[0] == rows[1] == rows[2] and set(rows[0]) == common
    for k, shard in enumerate(shards):
        assert shard.num_nodes == len(common) and shard.columns.tolist() == [2 * k, 2 * k + 1]
        # its own edges among common entities, both directions, nothing else
        index = {s: r for r, s in enumerate(rows[0])}
        want = {(index[a], index[b]) for a, b in truth["edges"][k] if a in index and b in index}
        want |= {(b, a) for a, b in want}
        assert set(map(tuple, shard.edge_index.T.tolist())) == want
    assert shards[0].has_labels and not shards[1].has_labels and not shards[2].has_labels
    assert [("a", "b")[int(v)] for v in shards[0].y] == [truth["label"][s] for s in rows[0]]


def test_psi_counts_every_message_in_the_ledger(aligned) -> None:
    _, _, _, figures = aligned
    # per party: start, K - 1 = 2 blinds, the result; each value 32 bytes
    assert figures["messages"] == {"down": 3 * 4, "up": 3 * 4}
    assert figures["sizes"] == {"0": 70, "1": 70, "2": 70}
    assert figures["bytes"]["up"] >= 3 * 3 * 70 * 32


def test_psi_messages_hold_only_blinded_values(tmp_path: Path, monkeypatch) -> None:
    import hashlib

    import fedgl.federation.runtime as rt
    from fedgl.data.own.secret import pseudonyms

    truth = write_parties(tmp_path)
    make_secret(tmp_path / "secret")
    secret = read_secret(tmp_path / "secret")
    tables = [vertical_arrays(IngestSpec(
        str(tmp_path / f"nodes{k}.csv"), str(tmp_path / f"edges{k}.csv"), k,
        label_column="label" if k == 0 else None, split_column="split" if k == 0 else None),
        secret) for k in range(3)]
    seen: list[bytes] = []
    decode = rt.decode

    def spy(message):
        seen.append(message.to_bytes())
        return decode(message)

    monkeypatch.setattr(rt, "decode", spy)
    encode = rt.encode

    def spy_encode(t, payload):
        message = encode(t, payload)
        seen.append(message.to_bytes())
        return message

    monkeypatch.setattr(rt, "encode", spy_encode)
    align_in_process(tables)
    blob = b"".join(seen)
    assert len(blob) > 32 * 210
    for s in truth["universe"]:
        p = bytes(pseudonyms(secret, [s])[0])
        for needle in (s.encode(), p, hashlib.sha256(b"fedgl-psi/1" + p).digest()):
            assert needle not in blob, s


@pytest.mark.filterwarnings("ignore:.*click.utils.*:DeprecationWarning")
def test_glasu_trains_on_the_aligned_intersection(aligned) -> None:
    from fedgl.algorithms.glasu.deployed import glasu_client, run_vertical
    from fedgl.api import as_config
    from fedgl.federation.runtime import LocalRuntime

    pytest.importorskip("flwr")
    _, _, shards, _ = aligned
    cfg = as_config(algorithm="glasu", clients=3, rounds=4, eval_every=2, label_holders="one",
                    progress=False)

    class Local(LocalRuntime):
        flower_bytes: dict = defaultdict(lambda: {"up": 0, "down": 0})
        calls = 0

    runtime = Local({s.client_id: glasu_client(s, cfg, cfg.seed) for s in shards})
    import time

    rep = run_vertical(runtime, cfg, cfg.seed, time.perf_counter())   # asks 'setup.facts'
    assert rep.ledger["messages"]["setup"] == {"up": 3, "down": 3}
    assert rep.partition["num_nodes"] == shards[0].num_nodes
    assert [h["round"] for h in rep.history] == [1, 2, 3, 4]
    assert 0.0 <= rep.final["test_acc"] <= 1.0 and rep.ledger["bytes"]["train"]["up"] > 0
    assert torch.isfinite(torch.tensor(rep.final["train_loss"]))


def test_a_psi_party_refuses_what_an_honest_server_never_sends() -> None:
    """Blinding beyond K - 1 sets (an oracle for guessed values), a second start, a result
    before the start or one that is not a placement of the party's ids: refused, one line."""
    from fedgl.federation.codec import encode
    from fedgl.federation.protocol import Endpoint, ProtocolViolation
    from fedgl.privacy.psi import PsiParty

    party = PsiParty(0, np.arange(5 * 16, dtype=np.uint8).reshape(5, 16), parties=2)
    ep = Endpoint(party, "client 0")

    def send(t: str, payload: dict) -> None:
        ep.handle(encode(t, payload), "setup")

    with pytest.raises(ProtocolViolation, match="state"):
        send("psi.result", {"positions": np.array([0])})
    send("psi.start", {})
    with pytest.raises(ProtocolViolation):
        send("psi.start", {})
    send("psi.blind", {"values": bytes(range(32))})
    with pytest.raises(ProtocolViolation, match="already blinded"):
        send("psi.blind", {"values": bytes(range(32))})
    with pytest.raises(ProtocolViolation, match="not a placement"):
        send("psi.result", {"positions": np.array([0, 0])})
    with pytest.raises(ProtocolViolation, match="not a placement"):
        send("psi.result", {"positions": np.array([7])})
    send("psi.result", {"positions": np.array([1, 3])})
    # the common ids in their pseudonyms' byte order (here: their positions' order)
    assert party.common is not None and sorted(party.common.tolist()) == party.common.tolist()
    assert len(party.common) == 2


def ingest_parties(tmp_path: Path, parties: int) -> None:
    """A secret, then ``fedgl ingest --vertical`` of the first ``parties`` tables of
    :func:`write_parties` (labels at party 0) into ``party<k>``."""
    from fedgl.cli import main

    assert main(["secret", "--out", str(tmp_path / "secret")]) == 0
    for k in range(parties):
        labels = ["--label-column", "label", "--split-column", "split"] if k == 0 else []
        assert main(["ingest", "--vertical", "--nodes", str(tmp_path / f"nodes{k}.csv"),
                     "--edges", str(tmp_path / f"edges{k}.csv"), "--client-id", str(k),
                     *labels, "--name", "telco", "--secret", str(tmp_path / "secret"),
                     "--out", str(tmp_path / f"party{k}")]) == 0


@pytest.mark.filterwarnings("ignore:.*click.utils.*:DeprecationWarning")
def test_run_shards_aligns_vertical_ingests_and_runs_glasu(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    """fedgl ingest --vertical per party (raw ids only in ids.csv), then fedgl run --shards: PSI in
    process, GLASU over exactly the aligned parts; result.json names the data and the PSI."""
    import json

    from fedgl.cli import main

    truth = write_parties(tmp_path)
    ingest_parties(tmp_path, 3)
    said = capsys.readouterr().out   # the folder holds the party's own values: it stays there
    assert "features and labels" in said and "keep it here" in said
    assert "pseudonyms only" not in said
    # the raw ids stay in the party's private ids.csv; every other file names pseudonyms only
    folders = [tmp_path / f"party{k}" for k in range(3)]
    written = b"".join(p.read_bytes() for f in folders for p in f.iterdir() if p.name != "ids.csv")
    assert not any(s.encode() in written for s in truth["universe"])
    for f, held in zip(folders, truth["held"], strict=True):   # each party's own ids, its own only
        kept = {line.split(",", 1)[1] for line in (f / "ids.csv").read_text().splitlines()[1:]}
        assert kept == set(held)
    assert main(["run", "--shards", *[str(tmp_path / f"party{k}") for k in range(3)],
                 "--algorithm", "glasu", "--rounds", "3", "--no-progress", "--out",
                 str(tmp_path / "res")]) == 0
    result = json.loads((tmp_path / "res" / "result.json").read_text())
    assert result["config"]["dataset"] == "own:telco"
    assert result["config"]["label_holders"] == "one"
    psi = result["environment"]["data"]["psi"]
    rep = result["repeats"][0]
    assert rep["partition"]["columns"] == [2, 2, 2] and rep["partition"]["label_holders"] == [0]
    assert psi["common"] > 0 and rep["extra"]["mode"] == "glasu"
    assert len(rep["history"]) == 3


def test_blinding_with_threads_gives_the_same_values() -> None:
    """A party that blinds with several threads sends exactly the values one thread sends (the
    same key; more values than one thread's task, so the threads share them)."""
    from fedgl.privacy.psi import PsiParty

    rng = np.random.default_rng(3)
    ids = rng.integers(0, 256, size=(9000, 16), dtype=np.uint8)
    one = PsiParty(0, ids, 3)
    many = PsiParty(0, ids, 3, key=one.key_bytes(), threads=3)
    a, b = one.start()["values"], many.start()["values"]
    assert len(a) == 9000 * 32 and a == b
    values = PsiParty(1, ids, 3).start()["values"]
    assert one.blind(values)["values"] == many.blind(values)["values"]
    with pytest.raises(ValueError, match="at least 1"):
        PsiParty(0, ids, 3, threads=0)


def test_run_shards_over_two_vertical_ingests_takes_the_clients_from_them(tmp_path: Path) -> None:
    """Two parties, GLASU's defaults otherwise (3 clients): the shards decide the clients, as
    docs/own-data.md's two-party command runs; a setting the user chose that differs is
    refused in one line."""
    import json

    from fedgl.cli import main

    write_parties(tmp_path)
    ingest_parties(tmp_path, 2)
    parties = [str(tmp_path / f"party{k}") for k in range(2)]
    assert main(["run", "--shards", *parties, "--algorithm", "glasu", "--rounds", "2",
                 "--no-progress", "--out", str(tmp_path / "res")]) == 0
    result = json.loads((tmp_path / "res" / "result.json").read_text())
    assert result["config"]["clients"] == 2
    assert main(["run", "--shards", *parties, "--algorithm", "glasu", "--rounds", "2",
                 "--clients", "5", "--no-progress", "--out", str(tmp_path / "res5")]) == 2
    # GLASU's default is 3 clients: given on the command line, it is the user's and refused too
    assert main(["run", "--shards", *parties, "--algorithm", "glasu", "--rounds", "2",
                 "--clients", "3", "--no-progress", "--out", str(tmp_path / "res3")]) == 2
    assert not (tmp_path / "res3").exists()
