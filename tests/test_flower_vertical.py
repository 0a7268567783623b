"""GLASU (the vertical setting) deployed on Flower: vertical shards on disk (each client's own
feature columns, edges and, at a label holder, labels), the party's GLASU client built from its
shard alone, and a loopback federation that reproduces the local runtime exactly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fedgl.config import Config
from fedgl.data.shard_format import read_shard, shard_paths, write_shard
from fedgl.data.vertical import VerticalClientData, vertical_split
from fedgl.errors import ConfigError, DataError
from fedgl.privacy.policy import ClientPolicy
from tests.flower_helpers import (
    PLAINTEXT,
    assert_same_ledger,
    deployed_run,
    needs_flwr,
    write_deployment_files,
)

#: a small deployed GLASU run on Cora (per-client computation, as each party computes alone)
GLASU_RUN = {"algorithm": "glasu", "dataset": "cora", "clients": 3, "layers": 2, "hidden": 16,
             "agg_layers": "2", "stale_steps": 2, "rounds": 4, "eval_every": 2,
             "progress": False, "batch_clients": False}


def tiny_vertical(client_id: int = 1, labels: bool = True) -> VerticalClientData:
    g = torch.Generator().manual_seed(client_id)
    n = 5
    return VerticalClientData(
        client_id=client_id, num_nodes=n, columns=torch.tensor([1, 4, 6]),
        x=torch.rand(n, 3, generator=g), edge_index=torch.tensor([[1, 0, 3, 4], [0, 1, 4, 3]]),
        y=torch.tensor([0, 1, 1, 0, 2]) if labels else None,
        train_mask=torch.tensor([True, True, False, False, False]) if labels else None,
        val_mask=torch.tensor([False, False, True, False, False]) if labels else None,
        test_mask=torch.tensor([False, False, False, True, True]) if labels else None,
        num_classes=3)


def _rewrite_arrays(manifest: Path, arrays: dict[str, np.ndarray]) -> None:
    """Replace a shard's arrays and make the manifest agree with them (dtype, shape, SHA-256),
    as a careless or hostile writer could: only the vertical checks stand in the way."""
    import hashlib
    import io

    meta = json.loads(manifest.read_text())
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    data = buf.getvalue()
    (manifest.parent / meta["npz"]).write_bytes(data)
    meta["npz_sha256"] = hashlib.sha256(data).hexdigest()
    meta["arrays"] = {n: {"dtype": str(a.dtype), "shape": list(a.shape)} for n, a in arrays.items()}
    manifest.write_text(json.dumps(meta))


# ---------------------------------------------------------------------- vertical shard files
@pytest.mark.parametrize("labels", [True, False])
def test_vertical_shard_roundtrip_is_exact(tmp_path: Path, labels: bool) -> None:
    shard = tiny_vertical(2, labels)
    manifest = write_shard(shard, tmp_path, {"dataset": "tiny"})
    back = read_shard(manifest)
    assert isinstance(back, VerticalClientData)
    assert (back.client_id, back.num_nodes, back.num_classes) == (2, 5, 3)
    for name in ("columns", "x", "edge_index", "y", "train_mask", "val_mask", "test_mask"):
        want, got = getattr(shard, name), getattr(back, name)
        if want is None:
            assert got is None, name
        else:
            assert torch.equal(got, want) and got.dtype == want.dtype, name
    meta = json.loads(manifest.read_text())
    assert meta["setting"] == "vertical" and meta["labels"] is labels
    assert meta["num_features"] == 3 and meta["arrays"]["x"]["shape"] == [5, 3]
    assert ("y" in meta["arrays"]) is labels


def test_inconsistent_vertical_shards_are_refused(tmp_path: Path) -> None:
    manifest, npz = shard_paths(tmp_path, 1)
    good = tiny_vertical(1)

    def arrays(**change: object) -> dict[str, np.ndarray]:
        base = {n: getattr(good, n).numpy() for n in ("columns", "x", "edge_index", "y",
                                                      "train_mask", "val_mask", "test_mask")}
        base.update(change)
        return {k: v for k, v in base.items() if v is not None}

    cases = [
        (arrays(x=good.x[:, :2].numpy()), "not \\[num_nodes=5, columns=3\\]"),
        (arrays(columns=np.array([4, 1, 6])), "sorted distinct"),
        (arrays(edge_index=np.array([[0, 9], [9, 0]])), "node ids below 5"),
        (arrays(val_mask=None), "all three masks"),
        (arrays(y=np.zeros(4, dtype=np.int64)), "y must be int64 \\[5\\]"),
        (arrays(node_ids=np.arange(5)), "not a vertical shard"),
        (arrays(columns=None), "not a vertical shard"),
    ]
    for bad, needle in cases:
        write_shard(good, tmp_path)
        _rewrite_arrays(manifest, bad)
        with pytest.raises(DataError, match=needle):
            read_shard(manifest)
    # the manifest's facts must be the arrays'
    write_shard(good, tmp_path)
    meta = json.loads(manifest.read_text())
    meta["num_features"] = 4
    manifest.write_text(json.dumps(meta))
    with pytest.raises(DataError, match="num_features 4"):
        read_shard(manifest)
    write_shard(tiny_vertical(1, labels=False), tmp_path)
    meta = json.loads(manifest.read_text())
    meta["labels"] = True
    manifest.write_text(json.dumps(meta))
    with pytest.raises(DataError, match="'labels' disagrees"):
        read_shard(manifest)
    # a tampered array file is refused as for horizontal shards
    write_shard(good, tmp_path)
    data = bytearray(npz.read_bytes())
    data[-40] ^= 0xFF
    npz.write_bytes(bytes(data))
    with pytest.raises(DataError, match="SHA-256"):
        read_shard(manifest)


@pytest.mark.parametrize("label_holders", ["all", "one"])
def test_vertical_shard_command_writes_the_local_runs_split(tmp_path: Path, data_root: Path,
                                                            label_holders: str) -> None:
    """``fedgl shard --algorithm glasu`` writes exactly the parts a local GLASU run makes for the
    same seed and keys, each client's only."""
    from fedgl.cli import main
    from fedgl.data.datasets import load_graph

    out = tmp_path / "shards"
    assert main(["shard", "--algorithm", "glasu", "--dataset", "cora", "--clients", "3",
                 "--seed", "4", "--edge-share", "0.7", "--label-holders", label_holders,
                 "--out", str(out)]) == 0
    graph = load_graph(Config.from_dict({"dataset": "cora"}))
    local = vertical_split(graph, 3, feature_split="random", edge_share=0.7,
                           labels=label_holders, seed=4)
    cols = []
    for m, want in enumerate(local):
        got = read_shard(out / f"client-{m}.json")
        assert isinstance(got, VerticalClientData) and got.client_id == m
        assert torch.equal(got.columns, want.columns) and torch.equal(got.x, want.x)
        assert torch.equal(got.x, graph.x[:, got.columns])   # its own columns of every node
        assert torch.equal(got.edge_index, want.edge_index)
        assert got.has_labels is (label_holders == "all" or m == 0)
        if got.has_labels:
            assert torch.equal(got.y, graph.y) and torch.equal(got.train_mask, graph.train_mask)
        cols.append(got.columns)
    assert torch.equal(torch.sort(torch.cat(cols)).values, torch.arange(graph.num_features))
    fed = json.loads((out / "federation.json").read_text())
    assert fed["setting"] == "vertical" and fed["num_features"] == graph.num_features
    assert fed["label_holders_ids"] == ([0, 1, 2] if label_holders == "all" else [0])


def test_glasu_client_is_built_only_from_a_fitting_shard() -> None:
    from fedgl.algorithms.glasu.client import GlasuClient
    from fedgl.algorithms.glasu.deployed import glasu_client
    from tests.flower_helpers import tiny_shard

    cfg = Config.from_dict({"algorithm": "glasu", "clients": 3, "layers": 2, "hidden": 4})
    assert isinstance(glasu_client(tiny_vertical(1), cfg, 0), GlasuClient)
    with pytest.raises(ConfigError, match="horizontal but glasu is vertical"):
        glasu_client(tiny_shard(1), cfg, 0)
    one = Config.from_dict({**cfg.to_dict(), "label_holders": "one"})
    with pytest.raises(ConfigError, match="holds labels but the run's label_holders is 'one'"):
        glasu_client(tiny_vertical(1), one, 0)
    with pytest.raises(ConfigError, match="lacks labels"):
        glasu_client(tiny_vertical(0, labels=False), one, 0)
    with pytest.raises(ConfigError, match="outside the run's 3 clients"):
        glasu_client(tiny_vertical(3), cfg, 0)


def test_a_resumable_glasu_run_keeps_each_partys_model_in_its_own_state_dir(
        tmp_path: Path) -> None:
    """A GLASU run that checkpoints (or resumes) needs the party's --state-dir: the party keeps
    its model's checkpoint there (``runs/<run tag>/glasu-state``), never under the server's
    --out, and answers ``glasu.save_state`` with the digest only."""
    from fedgl.deployment.party import Party
    from fedgl.privacy.identity import write_keys
    from tests.test_flower_operations import send

    roster = write_keys(tmp_path / "keys", 3)
    manifest = write_shard(tiny_vertical(1), tmp_path / "shard", {"dataset": "tiny"})
    key = tmp_path / "keys" / "client-1.key"
    cfg = Config.from_dict({"algorithm": "glasu", "clients": 3, "layers": 2, "hidden": 4,
                            "checkpoint_every": 1, "out": str(tmp_path / "server-out")})
    setup = {"config": cfg.to_dict(), "seed": 0, "run_tag": "a1b2", "resumed": False}
    party = Party(manifest, key, roster, ClientPolicy(secure_sum="none"))
    send(party, "party.hello", {"challenge": b"\x06" * 32})
    head, _ = send(party, "party.setup", setup)
    assert "keep its own model's checkpoints: start it with --state-dir DIR" in head["refused"]
    # not resumable: no state folder needed, none used
    party = Party(manifest, key, roster, ClientPolicy(secure_sum="none"))
    send(party, "party.hello", {"challenge": b"\x06" * 32})
    plain = {**setup, "config": cfg.replace(checkpoint_every=0).to_dict()}
    assert "refused" not in send(party, "party.setup", plain)[0]
    assert party.endpoint.role.state_dir is None

    state = tmp_path / "state"
    party = Party(manifest, key, roster, ClientPolicy(secure_sum="none"), state_dir=state)
    send(party, "party.hello", {"challenge": b"\x06" * 32})
    assert "refused" not in send(party, "party.setup", setup)[0]
    own = state / "runs" / "a1b2" / "glasu-state" / "client-1"
    assert Path(party.endpoint.role.state_dir) == own
    head, (_, saved) = send(party, "glasu.save_state", {"round": 1}, phase="train")
    assert "refused" not in head and set(saved) == {"digest"} and len(saved["digest"]) == 64
    assert [f.name for f in own.iterdir()] == ["glasu-client-1-round-1.pt"]
    assert not (tmp_path / "server-out").exists()


# ---------------------------------------------------------------------- loopback federation
def assert_vertical_same_as_local(deployed: dict, keys: dict, setups: int = 1) -> None:
    """Every history row (losses, every accuracy, each label holder's test accuracy), value
    bytes, wire bytes and message counts equal ``fedgl.api.run(**keys)``'s (its phases; the
    deployment's set-up messages come on top: ``setups`` hellos and set-ups per client)."""
    from fedgl.api import run

    local = run(**keys).repeats[0]
    rep = deployed["repeats"][0]
    assert rep["extra"]["runtime"] == "flower" and rep["extra"]["setting"] == "vertical"

    def timeless(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if "seconds" not in k} for r in rows]

    assert timeless(rep["history"]) == timeless(json.loads(json.dumps(local.history)))
    # the local run's phases but its set-up (its 'setup.facts'); a deployment's set-up is its
    # own: each client one hello and one set-up, whose reply brings the facts
    assert_same_ledger(rep["ledger"], local.ledger)
    clients = len(rep["extra"]["flower"]["nodes"])
    assert local.ledger["messages"]["setup"] == {"up": clients, "down": clients}
    assert rep["ledger"]["messages"]["setup"] == {"up": 2 * clients * setups,
                                                  "down": 2 * clients * setups}
    assert rep["extra"]["params"] == json.loads(json.dumps(local.extra["params"]))
    for row in rep["extra"]["flower"]["per_round"]:
        assert row["flower_bytes"] >= row["ledger_wire_bytes"] > 0


@needs_flwr
@pytest.mark.slow   # a loopback federation takes minutes on 2 cores
def test_loopback_glasu_equals_local(tmp_path: Path, data_root: Path) -> None:
    """Three GLASU parties, each a separate process with only its own vertical shard and key,
    over Flower: the same history, ledger value and wire bytes and messages as the local run."""
    root = write_deployment_files(tmp_path, 3, ("--algorithm", "glasu"))
    deployed = deployed_run(root, "glasu", GLASU_RUN, PLAINTEXT)
    assert_vertical_same_as_local(deployed, GLASU_RUN)
    assert len(deployed["repeats"][0]["history"]) == GLASU_RUN["rounds"]


@needs_flwr
@pytest.mark.slow
def test_loopback_glasu_labels_at_one_client_equals_local(tmp_path: Path, data_root: Path) -> None:
    """Labels at client 0 only (GLASU appendix B.2: it draws the batches and sends the others
    the top gradient; only its shard holds labels) with concatenated embeddings, over Flower."""
    keys = {**GLASU_RUN, "label_holders": "one", "backbone": "gcn", "aggregate": "concat"}
    root = write_deployment_files(tmp_path, 3, ("--algorithm", "glasu", "--label-holders",
                                                "one"))
    assert [read_shard(root / "shards" / f"client-{m}.json").has_labels for m in range(3)] == \
        [True, False, False]
    deployed = deployed_run(root, "glasu-one", keys, PLAINTEXT)
    assert_vertical_same_as_local(deployed, keys)


@needs_flwr
@pytest.mark.slow
def test_deployed_glasu_resumed_after_the_server_died_equals_the_uninterrupted_run(
        tmp_path: Path, data_root: Path) -> None:
    """The ServerApp is killed after its first checkpoint; the parties (each with its own
    --state-dir) and the SuperLink stay up; ``fedgl server --resume`` continues: every party
    restores the model it saved itself, and history and ledger are the uninterrupted local
    run's. The server's checkpoint holds only its batch stream and the parties' digests."""
    import subprocess

    from fedgl.checkpoint import load_checkpoint
    from fedgl.deployment.loopback import Loopback
    from tests.flower_helpers import kill_server_at_first_checkpoint, server_cmd

    root = write_deployment_files(tmp_path, 3, ("--algorithm", "glasu"))
    out = root / "out-resume"
    with Loopback(root / "fed-resume", root / "shards", root / "keys", 3,
                  [*PLAINTEXT, "--state-dir", str(root / "state-{k}")]) as fed:
        kill_server_at_first_checkpoint(
            fed, server_cmd(root, fed, out, {**GLASU_RUN, "checkpoint_every": 1}), out)
        ckpt = load_checkpoint(out)
        assert 1 <= ckpt.progress.round < GLASU_RUN["rounds"]
        assert set(ckpt.progress.weights) == {"server_generator", "clients"}
        assert {m: set(c) for m, c in ckpt.progress.weights["clients"].items()} == \
            {str(m): {"round", "digest"} for m in range(3)}
        resumed = subprocess.run(server_cmd(root, fed, out, {}) + ["--resume", str(out)],
                                 capture_output=True, text=True, timeout=900, check=False)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert not (out / "checkpoint.pt").exists()
    deployed = json.loads((out / "result.json").read_text())
    assert_vertical_same_as_local(deployed, GLASU_RUN, setups=2)
    rep = deployed["repeats"][0]
    assert [e["round"] for e in rep["extra"]["failures"] if e["action"] == "resumed"] == \
        [ckpt.progress.round]
    for m in range(3):   # each party's model files in its own state folder, none at the server
        own = list((root / f"state-{m}").rglob(f"glasu-client-{m}-round-*.pt"))
        assert own and all(f"state-{m}" in str(f) for f in own)
    assert not list(out.rglob("glasu-client-*"))
    assert rep["extra"]["flower"]["bytes"]["checkpoint"]["up"] > 0


@needs_flwr
@pytest.mark.slow
def test_deployed_glasu_party_killed_mid_run_is_dropped_and_the_survivors_finish(
        tmp_path: Path, data_root: Path) -> None:
    """Under ``on_client_failure: drop`` a party whose process dies in the middle of training
    is dropped: its block is zero from then on (tested exactly in tests/test_glasu_party_drop.py),
    the two survivors finish every round, and it gets no message after the failure."""
    from fedgl.deployment.loopback import Loopback
    from tests.flower_helpers import run_server_killing_a_client, server_cmd

    root = write_deployment_files(tmp_path, 3, ("--algorithm", "glasu"))
    out = root / "out-drop"
    keys = {**GLASU_RUN, "on_client_failure": "drop"}
    with Loopback(root / "fed-drop", root / "shards", root / "keys", 3, PLAINTEXT) as fed:
        code, err = run_server_killing_a_client(
            fed, server_cmd(root, fed, out, keys, message_timeout=60), 2,
            "train.glasu__local_updates")
    assert code == 0, err[-2000:]
    rep = json.loads((out / "result.json").read_text())["repeats"][0]
    assert rep["final"]["rounds"] == GLASU_RUN["rounds"]
    assert all(math.isfinite(h["train_loss"]) for h in rep["history"])
    dropped = [e for e in rep["extra"]["failures"] if e["action"] == "dropped"]
    assert [e["client"] for e in dropped] == [2]
    evaluated = [h for h in rep["history"] if "client_test_acc" in h]
    assert evaluated and all(set(h["client_test_acc"]) == {"0", "1"} for h in evaluated)
    sent = rep["ledger"]["bytes_per_client"]["train"]["down"]   # broadcasts: equal per client
    assert 0 < sent["2"] < sent["0"] == sent["1"]
