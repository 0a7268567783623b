"""Nodes that arrive after a deployed run, scored by the organisations themselves.

Three banks ingest today's tables (some test accounts not opened yet), place their shards and
train on a loopback Flower federation. Tomorrow every account exists: each bank re-ingests its
tables with the same secret and places its shard again; ``fedgl server --predict MODEL_DIR``
runs the set-up exchange over tomorrow's shards (only the rows the new accounts change: each bank
kept today's exchange in its own state folder) and hands the model to every bank, which scores
its own accounts, by its own account ids, in its own folder. Each bank's scores equal the local
trial's, ``fedgl predict`` over tomorrow's ingest folders (the whole exchange), the new accounts
included.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fedgl.cli import main
from tests.flower_helpers import PLAINTEXT, deployed_predict, deployed_run, needs_flwr
from tests.own_data_helpers import BANKS, _csv, ingest_banks, place_shards, write_banks

RUN = {"algorithm": "fedgcn", "hops": 2, "rounds": 4, "local_steps": 2, "progress": False,
       "batch_clients": False, "oracle_eval": False, "dataset": "own:banks", "clients": 3}


def _tables(root: Path, truth: dict, keep: set[str]) -> None:
    """Each bank's nodes and edges among the accounts in ``keep`` (write_banks' columns)."""
    for b, name in enumerate(BANKS):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        rows = [[i, *map(str, x), lab, sp] for i, x, lab, sp, bank in
                zip(truth["ids"], truth["x"], truth["label"], truth["split"], truth["bank"],
                    strict=True) if bank == b and i in keep]
        _csv(folder / "nodes.csv", ["account", "f1", "f2", "f3", "f4", "is_fraud", "split"], rows)
        owner = dict(zip(truth["ids"], truth["bank"], strict=True))
        edges = [[a, c] for a, c in truth["edges"] if a in keep and c in keep
                 and b in (owner[a], owner[c])]
        _csv(folder / "edges.csv", ["source", "target"], edges)


def _rows(path: Path) -> dict[str, dict]:
    return {r["id"]: r for r in csv.DictReader(path.open())}


@needs_flwr
def test_new_accounts_scored_deployed_equal_the_local_trial(tmp_path: Path) -> None:
    import fedgl

    truth = write_banks(tmp_path / "tables", nodes_per_bank=24)
    tests = [i for i, sp in zip(truth["ids"], truth["split"], strict=True) if sp == "test"]
    new = {tests[0]}   # opened tomorrow (one account: most rows keep their sums)
    assert main(["secret", "--out", str(tmp_path / "secret")]) == 0
    today, tomorrow = tmp_path / "today", tmp_path / "tomorrow"
    _tables(today, truth, set(truth["ids"]) - new)
    _tables(tomorrow, truth, set(truth["ids"]))
    place_shards(today, ingest_banks(today, tmp_path / "secret"))
    # each bank keeps its records, and its pre-training exchange, in its own state folder
    kept = [*PLAINTEXT, "--state-dir", str(tmp_path / "state-{k}")]
    deployed_run(today, "train", RUN, kept)
    model = today / "out-train" / "model"

    later = ingest_banks(tomorrow, tmp_path / "secret")   # the same secret
    place_shards(tomorrow, later)   # (its new keys unused: the organisations keep today's)
    shards = tomorrow / "shards"
    out = tmp_path / "scored"
    summary = deployed_predict(tmp_path / "fed", shards, today / "keys", model, out, kept)
    assert len(summary["organisations"]) == 3
    local = fedgl.predict(model, shards=later)   # nothing kept: the whole exchange
    # the banks kept today's exchange: tomorrow's covers only the rows the new account changes
    # (with more new accounts, most of these 72 densely linked rows change and the server runs
    # the whole exchange; the bytes at Cora's size are in bench_new_nodes.py)
    restricted = summary["restricted_exchange"]
    assert restricted["restricted"] and 0 < restricted["changed_rows"] <= 72, restricted
    assert all(any((tmp_path / f"state-{k}").rglob("fedgcn-exchange.npz")) for k in range(3))
    local.write(tmp_path / "local")
    scored_new = set()
    for k, name in enumerate(BANKS):
        mine = _rows(tmp_path / "fed" / f"client-{k}-out" / "scores.csv")
        trial = _rows(tmp_path / "local" / f"{name}-ingest.csv")
        bank_ids = {i for i, b in zip(truth["ids"], truth["bank"], strict=True) if b == k}
        assert set(mine) == set(trial) == bank_ids   # its own accounts, by its own ids
        for i, row in mine.items():
            assert row["prediction"] == trial[i]["prediction"], i
            for c in ("p_fraud", "p_ok"):
                assert float(row[c]) == pytest.approx(float(trial[i][c]), abs=1e-6), (i, c)
        scored_new |= set(mine) & new
    assert scored_new == new   # every account opened after training has its score
    # nothing the coordinator wrote names an account
    written = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert not any(i.encode() in written for i in truth["ids"])
