"""Vertical alignment deployed: each organisation takes part in the PSI from its own ingest, one
command per step, its messages files an untrusted relay passes around, and writes its own GLASU
vertical shard; a GLASU deployment over those shards equals ``fedgl run --shards`` over the
organisations' ingest folders."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedgl.cli import main
from fedgl.data.own.ingest import VERTICAL_FORMAT, read_npz
from fedgl.data.own.secret import pseudonyms, read_secret
from fedgl.data.shard_format import read_ids, read_shard
from fedgl.privacy.policy import ClientPolicy
from fedgl.privacy.vertical_align import align_in_process
from tests.test_own_vertical import write_parties

FIELDS = ("columns", "x", "edge_index", "y", "train_mask", "val_mask", "test_mask")
#: GLASU over the aligned parties (per-party computation, as each organisation computes alone)
GLASU = {"algorithm": "glasu", "rounds": 3, "eval_every": 1, "layers": 2, "hidden": 8,
         "progress": False, "batch_clients": False}


def ingest_parties(root: Path, parties: int = 3) -> tuple[dict, list[Path]]:
    truth = write_parties(root)
    assert main(["secret", "--out", str(root / "secret")]) == 0
    dirs = []
    for k in range(parties):
        labels = ["--label-column", "label", "--split-column", "split"] if k == 0 else []
        assert main(["ingest", "--vertical", "--nodes", str(root / f"nodes{k}.csv"), "--edges",
                     str(root / f"edges{k}.csv"), "--client-id", str(k), *labels, "--name",
                     "telco", "--secret", str(root / "secret"), "--out",
                     str(root / f"party{k}")]) == 0
        dirs.append(root / f"party{k}")
    return truth, dirs


def psi_by_files(root: Path, dirs: list[Path]) -> Path:
    """The whole route by command: every party starts, the relay passes each set around the
    ring (each party blinds it once), intersects, and every party places its shard. Every file
    the relay handles is in ``root/relay``; the shards in ``root/shards``."""
    relay = root / "relay"
    k = len(dirs)
    current = {}
    for j, d in enumerate(dirs):
        current[j] = relay / f"set-{j}-hop-0.psi"
        assert main(["psi", "start", "--ingest", str(d), "--parties", str(k), "--out",
                     str(current[j])]) == 0
    for hop in range(1, k):
        for j in range(k):
            nxt = relay / f"set-{j}-hop-{hop}.psi"
            assert main(["psi", "blind", "--ingest", str(dirs[(j + hop) % k]), "--set",
                         str(current[j]), "--out", str(nxt)]) == 0
            current[j] = nxt
    assert main(["psi", "intersect", *[str(current[j]) for j in range(k)], "--out",
                 str(relay / "results")]) == 0
    for j, d in enumerate(dirs):
        assert main(["psi", "place", "--ingest", str(d), "--result",
                     str(relay / "results" / f"result-{j}.psi"), "--out",
                     str(root / "shards")]) == 0
    return relay


@pytest.fixture
def placed(tmp_path: Path) -> tuple[Path, dict, list[Path]]:
    truth, dirs = ingest_parties(tmp_path)
    psi_by_files(tmp_path, dirs)
    return tmp_path, truth, dirs


def test_the_file_route_gives_the_in_process_alignment(placed: tuple) -> None:
    """Each party's placed shard equals, field by field, the part the in-process trial aligns
    (``fedgl run --shards``): the same intersection in the same row order, the pseudonyms'."""
    root, truth, dirs = placed
    local, figures = align_in_process([read_npz(d, "vertical.json", VERTICAL_FORMAT)
                                       for d in dirs])
    common = set(truth["held"][0]) & set(truth["held"][1]) & set(truth["held"][2])
    secret = read_secret(root / "secret")
    order = sorted(common, key=lambda s: bytes(pseudonyms(secret, [s])[0]))
    digests = set()
    for k, want in enumerate(local):
        got = read_shard(root / "shards" / f"client-{k}.json")
        assert got.num_nodes == want.num_nodes == len(common) == figures["common"]
        for f in FIELDS:
            a, b = getattr(got, f), getattr(want, f)
            assert (a is None and b is None) or torch.equal(a, b), (k, f)
        # row r is the r-th common entity in pseudonym order: its own columns of it
        want_x = torch.tensor([truth["x"][k][s] for s in order], dtype=torch.float32)
        assert torch.equal(got.x, want_x)
        # beside it, privately: row r's raw id, for the scores its client writes
        assert read_ids(root / "shards" / f"client-{k}.json", k) == dict(enumerate(order))
        meta = json.loads((root / "shards" / f"client-{k}.json").read_text())
        src = meta["source"]
        assert src["dataset"] == "own:telco" and src["clients"] == 3
        assert src["label_holders"] == "one" and src["psi"]["common"] == len(common)
        assert src["settings"] == {"dataset": "own:telco", "clients": 3,
                                   "normalize_features": False}
        digests.add(src["common_sha256"])
    assert len(digests) == 1
    relay = json.loads((root / "relay" / "results" / "psi.json").read_text())
    assert relay["common"] == len(common) and relay["sizes"] == [70, 70, 70]


def test_nothing_the_relay_handles_holds_an_id(placed: tuple) -> None:
    """Every file the relay receives or sends (sets at every hop, results, its summary) holds
    no raw id, no pseudonym and no hashed point u(s) of any id, common or not."""
    root, truth, _ = placed
    blob = b"".join(p.read_bytes() for p in sorted((root / "relay").rglob("*")) if p.is_file())
    assert len(blob) > 3 * 3 * 70 * 32
    secret = read_secret(root / "secret")
    for s in truth["universe"]:
        p = bytes(pseudonyms(secret, [s])[0])
        for needle in (s.encode(), p, hashlib.sha256(b"fedgl-psi/1" + p).digest()):
            assert needle not in blob, s


def test_a_party_refuses_what_an_honest_relay_never_sends(tmp_path: Path, capsys) -> None:
    """Its own set, a set it already blinded, more than K - 1 sets, a second start, another
    party's result or one that is not a placement of its ids: one line, exit 2, nothing
    written."""
    _, dirs = ingest_parties(tmp_path)
    relay = tmp_path / "relay"
    starts = []
    for j, d in enumerate(dirs):
        starts.append(relay / f"s{j}.psi")
        assert main(["psi", "start", "--ingest", str(d), "--parties", "3", "--out",
                     str(starts[-1])]) == 0
    capsys.readouterr()

    def refused(args: list[str], words: str) -> None:
        assert main(["psi", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err

    refused(["start", "--ingest", str(dirs[0]), "--parties", "3", "--out", str(relay / "x")],
            "already started a PSI")
    refused(["blind", "--ingest", str(dirs[0]), "--set", str(starts[0]), "--out",
             str(relay / "x")], "own set")
    assert main(["psi", "blind", "--ingest", str(dirs[1]), "--set", str(starts[0]), "--out",
                 str(relay / "b01")]) == 0
    refused(["blind", "--ingest", str(dirs[1]), "--set", str(relay / "b01"), "--out",
             str(relay / "x")], "already blinded")
    assert main(["psi", "blind", "--ingest", str(dirs[1]), "--set", str(starts[2]), "--out",
                 str(relay / "b21")]) == 0
    # its budget (K - 1 = 2) is spent: a third set, even a fresh one, is refused
    refused(["blind", "--ingest", str(dirs[1]), "--set", str(starts[2]), "--out",
             str(relay / "x")], "blinds no more")
    refused(["blind", "--ingest", str(dirs[2]), "--set", str(relay / "s9"), "--out",
             str(relay / "x")], "does not exist")
    refused(["blind", "--ingest", str(dirs[2]), "--set", str(starts[0]), "--out",
             str(relay / "x"), "--threads", "0"], "at least 1")
    assert not (relay / "x").exists()
    # the intersection needs every party's fully blinded set
    refused(["intersect", str(relay / "b01"), str(relay / "b21"), str(starts[1]), "--out",
             str(relay / "r")], "not by every one")
    assert not (relay / "r").exists()


def test_a_party_refuses_a_result_that_is_not_its_own(tmp_path: Path, capsys) -> None:
    from fedgl.federation.codec import Encoded, decode, encode

    _, dirs = ingest_parties(tmp_path)
    relay = psi_by_files(tmp_path, dirs)
    result = relay / "results" / "result-1.psi"
    payload = decode(Encoded.from_bytes(result.read_bytes()))[1]
    capsys.readouterr()

    def bad(change: dict, words: str, party: int = 1) -> None:
        f = relay / "bad.psi"
        f.write_bytes(encode("psi.result", {**payload, **change}).to_bytes())
        assert main(["psi", "place", "--ingest", str(dirs[party]), "--result", str(f),
                     "--out", str(tmp_path / "s2")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
        assert not (tmp_path / "s2").exists()

    # the party already placed its shard: any further result is refused
    bad({}, "already placed")
    # a party that has not placed yet: a fresh PSI for parties 0..2
    root2 = tmp_path / "again"
    root2.mkdir()
    _, dirs2 = ingest_parties(root2)
    for j, d in enumerate(dirs2):
        assert main(["psi", "start", "--ingest", str(d), "--parties", "3", "--out",
                     str(root2 / f"s{j}")]) == 0
    dirs[1] = dirs2[1]
    capsys.readouterr()
    n = int(payload["sizes"][1])
    bad({"client_id": 2}, "for client 2 of 3")
    bad({"offsets": [0, 2, 5, 6]}, "column offsets")
    bad({"label_holders": [0, 1, 2]}, "its labels")
    bad({"positions": np.array([0, 0], dtype=np.int64)}, "not a placement")
    bad({"positions": np.array([n], dtype=np.int64)}, "not a placement")
    bad({"name": "other"}, "data set")
    f = relay / "wrong.psi"
    f.write_bytes(encode("psi.set", {"origin": 1}).to_bytes())
    assert main(["psi", "place", "--ingest", str(dirs[1]), "--result", str(f), "--out",
                 str(tmp_path / "s2")]) == 2
    assert "not a 'psi.result'" in capsys.readouterr().err


def test_deployed_glasu_over_the_placed_shards_equals_run_shards(placed: tuple,
                                                                 monkeypatch) -> None:
    """The parties as ``fedgl client`` builds them from their placed shards and own keys, under
    the deployed server's driver: the history and ledger of ``fedgl run --shards`` over the
    ingest folders; no message the server receives holds an id."""
    import fedgl.federation.runtime as rt
    from fedgl.api import run_shards
    from fedgl.privacy.identity import write_keys
    from tests.flower_helpers import deployed_in_process

    pytest.importorskip("flwr")
    root, truth, dirs = placed
    write_keys(root / "keys", 3)
    received: list[bytes] = []
    decode = rt.decode

    def spy(message):   # the server decodes every reply it receives
        received.append(message.to_bytes())
        return decode(message)

    monkeypatch.setattr(rt, "decode", spy)
    deployed = deployed_in_process(root, {**GLASU, "dataset": "own:telco", "clients": 3,
                                          "label_holders": "one"})
    monkeypatch.setattr(rt, "decode", decode)
    local = run_shards(dirs, **GLASU).repeats[0]
    rep = deployed["repeats"][0]
    # the trial over the placed shards themselves is the same run
    trial = run_shards([root / "shards"], **GLASU)
    assert trial.repeats[0].history == local.history
    assert trial.repeats[0].ledger["bytes"] == local.ledger["bytes"]
    assert trial.config["dataset"] == "own:telco" and trial.config["label_holders"] == "one"
    assert trial.environment["data"]["common_sha256"] == json.loads(
        (root / "shards" / "client-0.json").read_text())["source"]["common_sha256"]

    def timeless(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if "seconds" not in k} for r in rows]

    assert len(rep["history"]) == GLASU["rounds"]
    assert timeless(rep["history"]) == timeless(json.loads(json.dumps(local.history)))
    for key in ("bytes", "messages"):
        assert {p: rep["ledger"][key][p] for p in local.ledger[key]} == local.ledger[key], key
    assert len(received) > 10
    blob = b"".join(received)
    secret = read_secret(root / "secret")
    for s in truth["universe"]:
        assert s.encode() not in blob and bytes(pseudonyms(secret, [s])[0]) not in blob, s


def test_a_deployed_run_under_other_settings_is_refused_by_the_party(placed: tuple) -> None:
    """A GLASU configuration naming other clients or another data set over the placed shards:
    the party refuses it at set-up in one line naming the keys."""
    from fedgl.deployment.party import SETUP, SETUP_PHASE, Party
    from fedgl.privacy.identity import write_keys
    from tests.test_flower_operations import send

    root, _, _ = placed
    write_keys(root / "keys", 3)
    party = Party(root / "shards" / "client-1.json", root / "keys" / "client-1.key",
                  root / "keys" / "roster.json", ClientPolicy(secure_sum="none"))
    send(party, "party.hello", {"challenge": b"\x06" * 32})
    cfg = {"algorithm": "glasu", "dataset": "cora", "clients": 3, "label_holders": "one"}
    head, _ = send(party, SETUP, {"config": cfg, "seed": 0, "run_tag": "a1", "resumed": False})
    assert "dataset 'cora' (shard: 'own:telco')" in head["refused"]
    assert SETUP_PHASE == "setup"


def test_a_placed_partys_set_up_names_the_entities_it_was_aligned_on(placed: tuple) -> None:
    """The set-up reply's facts carry the shard's ``common_sha256``, which the server's
    set-up compares across parties (tests/test_setup_facts.py)."""
    from fedgl.deployment.party import SETUP, Party
    from fedgl.privacy.identity import write_keys
    from tests.test_flower_operations import send

    root, _, _ = placed
    write_keys(root / "keys", 3)
    party = Party(root / "shards" / "client-1.json", root / "keys" / "client-1.key",
                  root / "keys" / "roster.json", ClientPolicy(secure_sum="none"))
    send(party, "party.hello", {"challenge": b"\x07" * 32})
    cfg = {**GLASU, "dataset": "own:telco", "clients": 3, "label_holders": "one"}
    head, (_, reply) = send(party, SETUP, {"config": cfg, "seed": 0, "run_tag": "a2",
                                           "resumed": False})
    assert "refused" not in head, head
    digest = json.loads((root / "shards" / "client-1.json").read_text())["source"]
    assert reply["facts"]["alignment"] == digest["common_sha256"]


@pytest.mark.slow
def test_loopback_glasu_over_psi_placed_shards_equals_run_shards(placed: tuple) -> None:
    """Three organisations, each a SuperNode with only its own placed shard and key, over a
    loopback Flower federation: the history and ledger values of ``fedgl run --shards`` over
    their ingest folders; nothing the server wrote and nothing the relay handled holds an id."""
    from fedgl.api import run_shards
    from fedgl.privacy.identity import write_keys
    from tests.flower_helpers import PLAINTEXT, assert_same_ledger, deployed_run

    pytest.importorskip("flwr")
    root, truth, dirs = placed
    write_keys(root / "keys", 3)
    keys = {**GLASU, "dataset": "own:telco", "clients": 3, "label_holders": "one"}
    deployed = deployed_run(root, "psi", keys, PLAINTEXT)
    local = run_shards(dirs, **GLASU).repeats[0]
    rep = deployed["repeats"][0]

    def timeless(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if "seconds" not in k} for r in rows]

    assert rep["extra"]["runtime"] == "flower"
    assert timeless(rep["history"]) == timeless(json.loads(json.dumps(local.history)))
    # every phase but the set-up: the local run asks 'setup.facts'; a deployment's hello and
    # set-up round trips carry the facts (the alignment digest of the placed shards among them)
    assert_same_ledger(rep["ledger"], local.ledger)
    assert rep["ledger"]["messages"]["setup"] == {"up": 6, "down": 6}
    assert deployed["config"]["dataset"] == "own:telco"
    seen = [p.read_bytes() for p in (root / "out-psi").rglob("*") if p.is_file()]
    seen += [p.read_bytes() for p in (root / "relay").rglob("*") if p.is_file()]
    secret = read_secret(root / "secret")
    for s in truth["universe"]:
        p = bytes(pseudonyms(secret, [s])[0])
        assert not any(s.encode() in blob or p in blob for blob in seen), s


def test_the_relay_refuses_sets_that_do_not_agree(placed: tuple, capsys) -> None:
    """Sets from parties that used other secrets or data set names, labels at a party other
    than 0 alone, a set shorter than its origin started, one party's set twice: one line each,
    exit 2, no result written."""
    from fedgl.federation.codec import Encoded, decode, encode

    root, _, _ = placed
    relay = root / "relay"
    final = [relay / f"set-{j}-hop-2.psi" for j in range(3)]
    payload = decode(Encoded.from_bytes(final[2].read_bytes()))[1]
    capsys.readouterr()

    def refused(change: dict, words: str, values: bytes | None = None,
                others: tuple[int, ...] = (0, 1)) -> None:
        bad = relay / "bad.psi"
        facts = {**payload["facts"], **change}
        bad.write_bytes(encode("psi.set", {**payload, "facts": facts,
                                           "values": values or payload["values"]}).to_bytes())
        assert main(["psi", "intersect", *[str(final[j]) for j in others], str(bad), "--out",
                     str(root / "r2")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
        assert not (root / "r2").exists()

    refused({"secret_check": "0" * 32}, "federation secrets differ")
    refused({"name": "other"}, "data set names differ")
    refused({"num_classes": 2, "classes_sha256": "a" * 64}, "parties [0, 2] hold labels")
    refused({}, "not the 70 values", values=payload["values"][:-32])
    refused({"count": "70"}, "lacks an integer 'count'")
    refused({}, "two sets come from client 2", others=(0, 2))


def test_a_trial_refuses_shards_of_different_psi_results(placed: tuple, capsys) -> None:
    root, _, _ = placed
    manifest = root / "shards" / "client-2.json"
    meta = json.loads(manifest.read_text())
    meta["source"]["common_sha256"] = "0" * 64
    manifest.write_text(json.dumps(meta))
    assert main(["run", "--shards", str(root / "shards"), "--algorithm", "glasu", "--rounds", "1",
                 "--no-progress", "--out", str(root / "res")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "different PSI results" in err[0], err
    assert not (root / "res").exists()


def test_labels_at_every_party_place_label_holding_shards(tmp_path: Path) -> None:
    """Every party ingests a label column (the same classes): the relay's result names all of
    them label holders and each placed shard holds its own labels, as the in-process alignment
    gives them."""
    truth = write_parties(tmp_path)
    assert main(["secret", "--out", str(tmp_path / "secret")]) == 0
    dirs = []
    for k in range(3):
        lines = (tmp_path / f"nodes{k}.csv").read_text().splitlines()
        if k:   # add the label column at parties 1 and 2
            lines = [lines[0] + ",label"] + [f"{r},{truth['label'][r.split(',')[0]]}"
                                             for r in lines[1:]]
            (tmp_path / f"nodes{k}.csv").write_text("\n".join(lines) + "\n")
        split = ["--split-column", "split"] if k == 0 else []
        assert main(["ingest", "--vertical", "--nodes", str(tmp_path / f"nodes{k}.csv"),
                     "--edges", str(tmp_path / f"edges{k}.csv"), "--client-id", str(k),
                     "--label-column", "label", *split, "--name", "telco", "--secret",
                     str(tmp_path / "secret"), "--out", str(tmp_path / f"party{k}")]) == 0
        dirs.append(tmp_path / f"party{k}")
    psi_by_files(tmp_path, dirs)
    local, _ = align_in_process([read_npz(d, "vertical.json", VERTICAL_FORMAT) for d in dirs])
    for k, want in enumerate(local):
        got = read_shard(tmp_path / "shards" / f"client-{k}.json")
        assert got.has_labels and torch.equal(got.y, want.y)
        assert torch.equal(got.train_mask, want.train_mask) and torch.equal(got.x, want.x)
        src = json.loads((tmp_path / "shards" / f"client-{k}.json").read_text())["source"]
        assert src["label_holders"] == "all"
    assert torch.equal(local[0].y, local[1].y)   # the same entities in the same rows
