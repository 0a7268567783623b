"""The organisations' own data: fedgl ingest, set-up by pseudonyms, fedgl run --shards."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedgl.cli import main
from fedgl.data.client_data import split_graph
from fedgl.data.own.placement import OwnedGraph, setup_in_process
from fedgl.data.own.secret import read_secret
from fedgl.data.partition import Partition
from fedgl.privacy.policy import ClientPolicy
from tests.own_data_helpers import BANKS, ingest_banks, place_shards, whole_graph, write_banks

FIELDS = ("node_ids", "x", "y", "train_mask", "val_mask", "test_mask", "edge_index")
RUN = {"algorithm": "fedgcn", "hops": 2, "rounds": 3, "local_steps": 2, "progress": False,
       "batch_clients": False}


@pytest.fixture
def banks(tmp_path: Path) -> tuple[Path, dict, list[Path]]:
    truth = write_banks(tmp_path)
    assert main(["secret", "--out", str(tmp_path / "secret")]) == 0
    return tmp_path, truth, ingest_banks(tmp_path, tmp_path / "secret")


def _assert_records_the_own_partition(config: dict) -> None:
    """A result over the organisations' own shards records their partition, and none of the
    keys a partitioner would have read; the stored config builds the same configuration (a
    model card's, ``fedgl run --config``), as does one stored by an earlier fedgl (which wrote
    the default partition and β)."""
    from fedgl.config import Config
    from fedgl.config.schema import OWN_DECIDED

    assert config["partition"] == "own"
    assert not set(OWN_DECIDED) & set(config), sorted(set(OWN_DECIDED) & set(config))
    if config["runtime"] == "flower":   # a deployed run's record: reloaded on the local runtime
        config = {**config, "runtime": "local"}
    assert Config.from_stored(config).to_dict() == config
    earlier = {**config, "partition": "dirichlet", "beta": 1.0, "min_client_size": 10}
    assert Config.from_stored(earlier).to_dict() == config


def test_own_data_configs_name_their_own_partition() -> None:
    """``own:NAME`` records partition ``own`` (any algorithm, either setting); another
    partition or a partition key over it, or ``own`` over another data set, is one line."""
    from fedgl.api import as_config
    from fedgl.errors import ConfigError

    for algorithm in ("fedgcn", "swift-fedgnn", "glasu"):
        cfg = as_config(algorithm=algorithm, dataset="own:banks")
        assert cfg.partition == "own" and cfg.to_dict()["partition"] == "own"
        assert "beta" not in cfg.to_dict() and cfg.beta == 1.0   # read nowhere
    assert as_config(dataset="cora").to_dict()["partition"] == "dirichlet"
    assert as_config(dataset="cora").replace(dataset="own:banks").partition == "own"
    for keys, named in (({"partition": "iid"}, "--partition"), ({"beta": 0.5}, "--beta"),
                        ({"partition": "metis", "metis_max_degree": 4}, "--metis-max-degree"),
                        ({"edge_share": 0.5}, "--edge-share")):
        with pytest.raises(ConfigError, match="shards decide the partition") as err:
            as_config(dataset="own:banks", **keys)
        assert named in str(err.value)
    with pytest.raises(ConfigError, match="--dataset own:NAME"):
        as_config(dataset="cora", partition="own")


def test_shards_equal_the_whole_graph_split_by_bank(banks: tuple) -> None:
    root, truth, dirs = banks
    shards, sources, facts = setup_in_process(dirs)
    graph, owner = whole_graph(truth, read_secret(root / "secret"))
    assert facts["num_nodes"] == len(truth["ids"]) and facts["clients"] == 3
    for mine, ref in zip(shards, split_graph(graph, Partition(owner, 3)), strict=True):
        for f in FIELDS:
            assert torch.equal(getattr(mine, f), getattr(ref, f)), (mine.client_id, f)
    assert all(s["dataset"] == "own:banks" and s["dropped_edges"] == 0 for s in sources)


def test_run_shards_equals_the_whole_graph_run(banks: tuple) -> None:
    from fedgl.api import run, run_shards

    root, truth, dirs = banks
    graph, owner = whole_graph(truth, read_secret(root / "secret"))
    mine = run_shards(dirs, **RUN)
    ref = run(graph=OwnedGraph(graph.name, graph.x, graph.y, graph.edge_index, graph.train_mask,
                               graph.val_mask, graph.test_mask, 2, owner=owner),
              clients=3, **RUN)
    a, b = mine.repeats[0], ref.repeats[0]
    assert [{k: v for k, v in h.items()} for h in a.history] == b.history
    assert a.ledger["bytes"] == b.ledger["bytes"]
    assert mine.config["dataset"] == "own:banks" and mine.config["clients"] == 3
    _assert_records_the_own_partition(mine.config)
    assert [s["provenance"]["nodes_file"] for s in mine.environment["data"]["shards"]] == \
        ["nodes.csv"] * 3


def test_cli_run_shards_records_provenance_and_refuses_other_settings(banks: tuple, capsys
                                                                      ) -> None:
    root, _, dirs = banks
    out = root / "res"
    assert main(["run", "--shards", *map(str, dirs), "--rounds", "2", "--no-progress",
                 "--out", str(out)]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["dataset"] == "own:banks"
    assert result["environment"]["data"]["partition"] == "the organisations' own"
    _assert_records_the_own_partition(result["config"])
    # the stored config runs again as it is (fedgl run --config result's config)
    import yaml

    (root / "again.yaml").write_text(yaml.safe_dump(result["config"]))
    assert main(["run", str(root / "again.yaml"), "--shards", *map(str, dirs),
                 "--no-progress", "--out", str(root / "res-again")]) == 0
    again = json.loads((root / "res-again" / "result.json").read_text())
    assert again["config"] == {**result["config"], "out": str(root / "res-again")}
    assert again["repeats"][0]["history"] == result["repeats"][0]["history"]
    capsys.readouterr()
    assert main(["run", "--shards", *map(str, dirs), "--dataset", "cora", "--no-progress",
                 "--out", str(root / "res2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dataset 'cora' (shard: 'own:banks')" in err[0]
    assert not (root / "res2").exists()
    assert main(["run", "--shards", *map(str, dirs), "--clients", "5", "--no-progress",
                 "--out", str(root / "res3")]) == 2
    assert "clients 5 (shard: 3)" in capsys.readouterr().err
    # a value the user gave is theirs even where it equals the default (10 clients)
    assert main(["run", "--shards", *map(str, dirs), "--clients", "10", "--no-progress",
                 "--out", str(root / "res4")]) == 2
    assert "clients 10 (shard: 3)" in capsys.readouterr().err
    assert not (root / "res4").exists()


def test_the_server_receives_no_raw_id(banks: tuple, monkeypatch) -> None:
    """Everything set-up and the server receive (the requests, every reply message of a run)
    holds pseudonyms only."""
    import fedgl.federation.runtime as rt
    from fedgl.api import run_shards

    root, truth, dirs = banks
    received: list[bytes] = []
    for d in dirs:
        received += [p.read_bytes() for p in sorted(d.glob("request-*"))]
    decode = rt.decode

    def spy(message):   # the server decodes every reply it receives
        received.append(message.to_bytes())
        return decode(message)

    monkeypatch.setattr(rt, "decode", spy)
    run_shards(dirs, **RUN)
    assert len(received) > 6
    for raw in truth["ids"]:
        needle = raw.encode()
        assert not any(needle in blob for blob in received), raw
    # the request files do hold the pseudonyms the positions are made from
    assert b"fedgl-ids/1" in received[0]


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="pyarrow not installed")
def test_parquet_tables_give_the_csv_shards(tmp_path: Path) -> None:
    write_banks(tmp_path / "csv")
    write_banks(tmp_path / "pq", parquet=True)
    assert main(["secret", "--out", str(tmp_path / "secret")]) == 0
    a, _, _ = setup_in_process(ingest_banks(tmp_path / "csv", tmp_path / "secret"))
    b, _, _ = setup_in_process(ingest_banks(tmp_path / "pq", tmp_path / "secret", parquet=True))
    for s, t in zip(a, b, strict=True):
        for f in FIELDS:
            assert torch.equal(getattr(s, f), getattr(t, f)), f


def test_index_and_place_by_command_equal_the_in_process_setup(banks: tuple) -> None:
    from fedgl.data.shard_format import read_ids, read_shard

    root, truth, dirs = banks
    assert main(["index", *[str(d / f"request-{k}.json") for k, d in enumerate(dirs)],
                 "--out", str(root / "setup")]) == 0
    shards, _, _ = setup_in_process(dirs)
    for k, d in enumerate(dirs):
        assert main(["place", "--ingest", str(d), "--positions",
                     str(root / "setup" / f"positions-{k}.json"), "--out",
                     str(root / "shards")]) == 0
        placed = read_shard(root / "shards" / f"client-{k}.json")
        for f in FIELDS:
            assert torch.equal(getattr(placed, f), getattr(shards[k], f)), f
        # beside the shard, privately: each node's raw id, the bank's own and no other's
        ids = read_ids(root / "shards" / f"client-{k}.json", k)
        assert ids is not None and sorted(ids) == placed.node_ids.tolist()
        assert sorted(ids.values()) == sorted(r for r, b in zip(truth["ids"], truth["bank"],
                                                                strict=True) if b == k)
        where = dict(zip(truth["ids"], truth["split"], strict=True))
        for i, node in enumerate(placed.node_ids.tolist()):
            split = where[ids[node]]
            assert bool(getattr(placed, f"{split}_mask")[i]), (node, ids[node])


# ---------------------------------------------------------------------- bad tables
NODES = "id,f1,f2,label\na,1,2,x\nb,0,1,y\nc,3,1,x\n"
EDGES = "source,target\na,b\nb,c\nc,z9\n"
BAD = {
    "duplicate": ("id,f1,f2,label\na,1,2,x\nb,0,1,y\na,3,1,x\n", EDGES, "appears twice"),
    "no own endpoint": (NODES, "source,target\na,b\nq,z9\n", "no own endpoint"),
    "non-numeric": ("id,f1,f2,label\na,1,2,x\nb,zero,1,y\nc,3,1,x\n", EDGES, "not a number"),
    "missing feature": ("id,f1,f2,label\na,1,2,x\nb,,1,y\nc,3,1,x\n", EDGES, "is missing"),
    "infinite feature": ("id,f1,f2,label\na,1,2,x\nb,inf,1,y\nc,3,1,x\n", EDGES, "finite"),
    "empty nodes": ("id,f1,f2,label\n", EDGES, "is empty"),
    "empty edges": (NODES, "source,target\n", "is empty"),
    "label not a class": ("id,f1,f2,label\na,1,2,0.5\nb,0,1,1\nc,3,1,0\n", EDGES, "not a class"),
    "one class": ("id,f1,f2,label\na,1,2,x\nb,0,1,x\nc,3,1,x\n", EDGES, "at least 2"),
    "ragged row": ("id,f1,f2,label\na,1,2,x\nb,0,1\nc,3,1,x\n", EDGES, "cells"),
    "no id column": ("key,f1,f2,label\na,1,2,x\nb,0,1,y\n", EDGES, "no column 'id'"),
}


def _ingest(tmp_path: Path, nodes: str, edges: str, secret: bytes | None = None,
            extra: tuple[str, ...] = (), client_id: int = 0) -> int:
    (tmp_path / "n.csv").write_text(nodes)
    (tmp_path / "e.csv").write_text(edges)
    if secret is None:
        if not (tmp_path / "s").exists():
            assert main(["secret", "--out", str(tmp_path / "s")]) == 0
    else:
        (tmp_path / "s").write_bytes(secret)
    return main(["ingest", "--nodes", str(tmp_path / "n.csv"), "--edges", str(tmp_path / "e.csv"),
                 "--client-id", str(client_id), "--label-column", "label", "--secret",
                 str(tmp_path / "s"),
                 "--out", str(tmp_path / "out"), *extra])


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_table_is_one_line_and_writes_nothing(tmp_path: Path, capsys, case: str) -> None:
    nodes, edges, words = BAD[case]
    assert _ingest(tmp_path, nodes, edges) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("secret,words", [(b"0123456789abcdef", "fewer than 32"),
                                          (b"\x00" * 40, "not random")])
def test_a_short_or_constant_secret_is_refused(tmp_path: Path, capsys, secret: bytes,
                                               words: str) -> None:
    assert _ingest(tmp_path, NODES, EDGES, secret=secret) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]
    assert not (tmp_path / "out").exists()


def test_a_good_table_ingests(tmp_path: Path) -> None:
    assert _ingest(tmp_path, NODES, EDGES) == 0
    meta = json.loads((tmp_path / "out" / "ingest.json").read_text())
    assert (meta["num_nodes"], meta["num_features"], meta["num_remote"], meta["classes"]) == \
        (3, 2, 1, ["x", "y"])
    request = json.loads((tmp_path / "out" / "request-0.json").read_text())
    # public facts only: no feature name, class name, value or file name
    assert set(request) == {"format", "client_id", "name", "num_nodes", "num_remote",
                            "num_features", "num_classes", "classes_sha256", "secret_check",
                            "settings_sha256", "npz", "npz_sha256"}
    assert sorted(np.load(tmp_path / "out" / "request-0.npz").files) == ["own", "remote"]


@pytest.mark.parametrize("change,words", [
    (("--feature-columns", "f1"), "feature widths differ"),
    (("--classes", "x", "y", "w"), "class lists differ"),
    (("--name", "other"), "data set names"),
    ("secret", "federation secrets differ"),
])
def test_organisations_that_disagree_are_refused_at_setup(tmp_path: Path, capsys, change,
                                                          words: str) -> None:
    """Feature widths, class lists, names and secrets are compared from the requests alone,
    before any value crosses; nothing is written."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert _ingest(a, NODES, EDGES) == 0
    other = "id,f1,f2,label\nz9,1,1,x\nz8,2,2,y\n"
    if change == "secret":
        assert _ingest(b, other, "source,target\nz9,c\n", client_id=1) == 0
    else:
        (b / "s").write_bytes((a / "s").read_bytes())
        assert main(["ingest", "--nodes", str(_w(b / "n.csv", other)), "--edges",
                     str(_w(b / "e.csv", "source,target\nz9,c\n")), "--client-id", "1",
                     "--label-column", "label", "--secret", str(b / "s"), "--out",
                     str(b / "out"), *change]) == 0
    capsys.readouterr()
    assert main(["index", str(a / "out"), str(b / "out"), "--out", str(tmp_path / "setup")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not (tmp_path / "setup").exists()


def _w(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_an_id_owned_twice_is_refused_at_setup(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert _ingest(a, NODES, EDGES) == 0
    (b / "s").write_bytes((a / "s").read_bytes())
    assert main(["ingest", "--nodes", str(_w(b / "n.csv", "id,f1,f2,label\nc,1,1,x\nq,2,2,y\n")),
                 "--edges", str(_w(b / "e.csv", "source,target\nq,c\n")), "--client-id", "1",
                 "--label-column", "label", "--secret", str(b / "s"), "--out",
                 str(b / "out")]) == 0
    capsys.readouterr()
    assert main(["index", str(a / "out"), str(b / "out"), "--out", str(tmp_path / "setup")]) == 2
    assert "owned by more than one organisation" in capsys.readouterr().err


def test_banks_fixture_has_cross_bank_edges(banks: tuple) -> None:
    _, truth, _ = banks
    bank = dict(zip(truth["ids"], truth["bank"], strict=True))
    assert any(bank[a] != bank[b] for a, b in truth["edges"]) and len(BANKS) == 3


@pytest.mark.slow
def test_loopback_deployment_of_ingested_shards_equals_run_shards(banks: tuple) -> None:
    """The same shards deployed on a loopback Flower federation (set-up by fedgl index, each
    organisation's fedgl place; the config names own:banks) give the result of fedgl run
    --shards; nothing the server wrote holds a raw id."""
    from fedgl.api import run_shards
    from tests.flower_helpers import PLAINTEXT, assert_same_ledger, deployed_run

    pytest.importorskip("flwr")
    root, truth, dirs = banks
    place_shards(root, dirs)
    keys = {**RUN, "oracle_eval": False}
    deployed = deployed_run(root, "own", {**keys, "dataset": "own:banks", "clients": 3}, PLAINTEXT)
    trial = run_shards(dirs, **keys)
    local = trial.repeats[0]
    rep = deployed["repeats"][0]
    assert deployed["environment"]["data"] == trial.environment["data"]
    columns = ("round", "train_loss", "train_acc", "val_acc", "test_acc")
    assert [{c: h.get(c) for c in columns} for h in rep["history"]] == \
        [{c: h.get(c) for c in columns} for h in local.history]
    # every phase but the set-up: the local run asks 'setup.facts'; a deployment's hello and
    # set-up round trips carry the facts
    assert_same_ledger(rep["ledger"], local.ledger)
    assert rep["ledger"]["messages"]["setup"] == {"up": 6, "down": 6}
    assert deployed["config"]["dataset"] == "own:banks"
    _assert_records_the_own_partition(deployed["config"])
    assert {k: v for k, v in deployed["config"].items() if k not in ("runtime", "out")} == \
        {k: v for k, v in trial.config.items() if k not in ("runtime", "out")}
    server_files = [p.read_bytes() for p in (root / "out-own").rglob("*") if p.is_file()]
    server_files += [p.read_bytes() for p in (root / "setup").rglob("*") if p.is_file()]
    for raw in truth["ids"]:
        assert not any(raw.encode() in blob for blob in server_files), raw


def test_a_yaml_mapping_file_gives_the_flags(tmp_path: Path) -> None:
    (tmp_path / "n.csv").write_text(NODES)
    (tmp_path / "e.csv").write_text(EDGES)
    assert main(["secret", "--out", str(tmp_path / "s")]) == 0
    (tmp_path / "map.yaml").write_text("nodes: n.csv\nedges: e.csv\nclient_id: 2\n"
                                       "label_column: label\nfeature_columns: [f2]\n"
                                       f"secret: {tmp_path / 's'}\n")
    assert main(["ingest", str(tmp_path / "map.yaml"), "--out", str(tmp_path / "out")]) == 0
    meta = json.loads((tmp_path / "out" / "ingest.json").read_text())
    assert (meta["client_id"], meta["feature_columns"]) == (2, ["f2"])
    (tmp_path / "bad.yaml").write_text("nodes: n.csv\ncolour: red\n")
    assert main(["ingest", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "o2")]) == 2


def test_missing_flags_and_folders_are_one_line(tmp_path: Path, capsys) -> None:
    assert main(["ingest", "--nodes", "n.csv", "--out", str(tmp_path / "o")]) == 2
    assert "needs --edges, --client-id, --secret" in capsys.readouterr().err
    assert main(["run", "--shards", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no ingest.json" in err[0]


@pytest.mark.slow
def test_a_deployed_run_under_other_settings_is_refused_at_setup(banks: tuple) -> None:
    """A Swift-FedGNN configuration naming Cora, METIS and normalised features over the banks'
    own shards: the parties refuse it at set-up, the server stops with one line (exit 1, as for
    set-up refusal: the configuration is bad input) and writes no result."""
    import subprocess
    import sys

    from fedgl.deployment.loopback import Loopback
    from tests.flower_helpers import PLAINTEXT

    pytest.importorskip("flwr")
    root, _, dirs = banks
    place_shards(root, dirs)
    with Loopback(root / "fed", root / "shards", root / "keys", 3, PLAINTEXT) as fed:
        proc = subprocess.run([sys.executable, "-m", "fedgl.cli", "server", "--superlink",
                               fed.address, "--roster", str(root / "keys" / "roster.json"),
                               *fed.tls_flags, "--out", str(root / "out"), "--join-timeout",
                               "120", "--algorithm", "swift-fedgnn", "--dataset", "cora",
                               "--clients", "3", "--cross-clients", "2", "--partition", "metis",
                               "--normalize-features", "--rounds", "1", "--no-progress"],
                              capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "refused the run" in err[0], err
    assert "dataset 'cora' (shard: 'own:banks')" in err[0]
    assert "normalize_features True (shard: False)" in err[0]
    assert not (root / "out" / "result.json").exists()


def test_an_organisation_without_labels_names_the_classes(tmp_path: Path, capsys) -> None:
    (tmp_path / "n.csv").write_text("id,f1\na,1\nb,2\n")
    (tmp_path / "e.csv").write_text("source,target\na,b\n")
    assert main(["secret", "--out", str(tmp_path / "s")]) == 0
    flags = ["ingest", "--nodes", str(tmp_path / "n.csv"), "--edges", str(tmp_path / "e.csv"),
             "--client-id", "0", "--secret", str(tmp_path / "s")]
    assert main([*flags, "--out", str(tmp_path / "o1")]) == 2
    assert "--classes" in capsys.readouterr().err and not (tmp_path / "o1").exists()
    assert main([*flags, "--classes", "fraud", "ok", "--out", str(tmp_path / "o2")]) == 0
    meta = json.loads((tmp_path / "o2" / "ingest.json").read_text())
    assert meta["classes"] == ["fraud", "ok"] and meta["num_nodes"] == 2


def test_a_settings_refusal_at_setup_stops_the_server_as_bad_input(banks: tuple) -> None:
    """The deployed server's set-up (``party.setup`` to every party, as the Flower runtime
    relays it: a party's refusal comes back as a protocol violation) ends in a ConfigError, one
    line naming what differs (``fedgl server`` exit 2), not an aborted run (exit 1)."""
    from fedgl.api import as_config
    from fedgl.deployment.party import HELLO, SETUP, Party
    from fedgl.errors import ConfigError, RunAborted
    from fedgl.federation.protocol import ProtocolViolation
    from tests.test_flower_operations import send

    pytest.importorskip("flwr")
    from fedgl.deployment.server_app import setup_clients

    root, _, dirs = banks
    place_shards(root, dirs)
    parties = [Party(root / "shards" / f"client-{k}.json", root / "keys" / f"client-{k}.key",
                     root / "keys" / "roster.json", ClientPolicy(secure_sum="none")) for k in range(3)]

    class Relay:   # FlowerRuntime.call's contract: a refusal raises ProtocolViolation
        on_client_failure = "abort"

        def call(self, msg_type, payload, phase):
            replies = {}
            for p in parties:
                head, reply = send(p, msg_type, payload, phase=phase)
                if "refused" in head:
                    raise ProtocolViolation(f"client {p.client_id} refused a message: "
                                            f"{head['refused']}")
                replies[p.client_id] = reply[1]
            return replies

    for p in parties:
        send(p, HELLO, {"challenge": b"\x07" * 32})
    cfg = as_config(algorithm="fedgcn", dataset="cora", clients=3)
    with pytest.raises(ConfigError, match="dataset 'cora' \\(shard: 'own:banks'\\)") as exc:
        setup_clients(Relay(), cfg, 0, "a1b2", False)
    assert not isinstance(exc.value, RunAborted) and "\n" not in str(exc.value)
    assert SETUP == "party.setup"
    # the same shards under their own settings set up
    for p in parties:
        send(p, HELLO, {"challenge": b"\x08" * 32})
    ok = as_config(algorithm="fedgcn", dataset="own:banks", clients=3)
    relay = Relay()
    assert set(setup_clients(relay, ok, 0, "a1b2", False)) == set()
    # the deployed result records the shards' provenance as the local trial does
    from fedgl.data.own.placement import owned_graph

    shards, sources, facts = setup_in_process(dirs)
    assert relay.data == owned_graph(shards, sources, facts["name"]).provenance
    assert [s["provenance"]["nodes_file"] for s in relay.data["shards"]] == ["nodes.csv"] * 3


def test_partition_keys_over_own_shards_are_refused(banks: tuple, capsys) -> None:
    """The shards decide the partition: --partition or --beta over own shards would not run but
    be written into result.json, so they are refused in one line, in the local trial and before
    a deployed run is submitted."""
    from fedgl.privacy.identity import write_keys

    root, _, dirs = banks
    for flags, named in ((["--partition", "iid"], "--partition"),
                         (["--beta", "0.5"], "--beta"),
                         (["--min-client-size", "3"], "--min-client-size")):
        assert main(["run", "--shards", *map(str, dirs), *flags, "--no-progress",
                     "--out", str(root / "r")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "shards decide the partition" in err[0] and named in err[0], err
        assert not (root / "r").exists()
    write_keys(root / "keys", 3)
    assert main(["server", "--superlink", "127.0.0.1:9", "--insecure", "--roster",
                 str(root / "keys" / "roster.json"), "--dataset", "own:banks", "--clients", "3",
                 "--beta", "0.5", "--no-progress", "--out", str(root / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--beta" in err[0] and "unreachable" not in err[0], err
    assert not (root / "s").exists()


def test_placed_horizontal_shards_to_run_shards_name_what_they_are(banks: tuple,
                                                                   capsys) -> None:
    root, _, dirs = banks
    place_shards(root, dirs)
    capsys.readouterr()
    assert main(["run", "--shards", str(root / "shards"), "--no-progress",
                 "--out", str(root / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "horizontal shard" in err[0] and "fedgl ingest" in err[0], err
    assert "glasu" not in err[0]
