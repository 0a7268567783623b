"""The cross-organisation deployment on Flower: shards on disk, parties built from their own
shard and key, and a loopback federation (one SuperLink, one SuperNode process per client, all
on 127.0.0.1) that reproduces the local runtime's accuracy and protocol bytes exactly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedgl.config import Config
from fedgl.data.client_data import ClientData
from fedgl.data.shard_format import read_shard, shard_paths, write_shard
from fedgl.errors import ConfigError, DataError, RunAborted
from fedgl.privacy.identity import write_keys
from tests.flower_helpers import (
    AS_ASKED,
    PLAINTEXT,
    RUN,
    assert_same_as_local,
    deployed_run,
    needs_flwr,
    run_server_killing_a_client,
    tiny_shard,
    write_deployment_files,
)


# ---------------------------------------------------------------------- shard files
def test_shard_roundtrip_is_exact(tmp_path: Path) -> None:
    shard = tiny_shard()
    manifest = write_shard(shard, tmp_path, {"dataset": "tiny"})
    back = read_shard(manifest)
    assert isinstance(back, ClientData) and back.client_id == 1 and back.num_classes == 2
    for name, tensor in shard.tensors().items():
        assert torch.equal(getattr(back, name), tensor), name
        assert getattr(back, name).dtype == tensor.dtype
    meta = json.loads(manifest.read_text())
    assert meta["format"] == "fedgl-shard/1" and meta["arrays"]["x"]["shape"] == [3, 4]
    assert read_shard(tmp_path).client_id == 1   # the one manifest in a folder


def test_tampered_or_mismatched_shard_is_refused(tmp_path: Path) -> None:
    manifest, npz = shard_paths(tmp_path, 1)
    write_shard(tiny_shard(), tmp_path)
    data = bytearray(npz.read_bytes())
    data[-40] ^= 0xFF
    npz.write_bytes(bytes(data))
    with pytest.raises(DataError, match="SHA-256"):
        read_shard(manifest)
    manifest.write_text("{\"format\": \"other\"}")
    with pytest.raises(DataError, match="not a fedgl-shard/1"):
        read_shard(manifest)


def test_shard_command_writes_own_nodes_only(tmp_path: Path, data_root: Path) -> None:
    from fedgl.cli import main
    from fedgl.data.datasets import load_graph

    out = tmp_path / "shards"
    assert main(["shard", "--dataset", "cora", "--clients", "3", "--out", str(out)]) == 0
    graph = load_graph(Config.from_dict({"dataset": "cora"}))
    seen = []
    for k in range(3):
        shard = read_shard(out / f"client-{k}.json")
        ids = shard.node_ids
        seen.append(ids)
        assert torch.equal(shard.x, graph.x[ids]) and torch.equal(shard.y, graph.y[ids])
        assert bool(shard.owns(shard.edge_index[1]).all())   # every edge ends at an own node
    assert torch.equal(torch.sort(torch.cat(seen)).values, torch.arange(graph.num_nodes))
    assert main(["shard", "--dataset", "cora", "--clients", "3", "--out", str(out)]) == 2


# ---------------------------------------------------------------------- the party
@needs_flwr
def test_party_needs_its_own_roster_key(tmp_path: Path) -> None:
    from fedgl.deployment.party import Party, hello_message
    from fedgl.privacy.policy import ClientPolicy

    roster = write_keys(tmp_path / "keys", 3)
    manifest = write_shard(tiny_shard(1), tmp_path / "shard")
    with pytest.raises(ConfigError, match="not client 1's roster key"):
        Party(manifest, tmp_path / "keys" / "client-2.key", roster)
    write_keys(tmp_path / "other", 1)   # a roster without client 1
    with pytest.raises(ConfigError, match="not in the roster"):
        Party(manifest, tmp_path / "keys" / "client-1.key", tmp_path / "other" / "roster.json")

    from fedgl.federation.codec import Encoded, decode, encode

    party = Party(manifest, tmp_path / "keys" / "client-1.key", roster, ClientPolicy("robust"))
    where = {"op": "message", "phase": "setup", "node_id": 2**64 - 5, "run_id": 7}
    head, body = party.answer(where, encode("party.hello", {"challenge": b"\xab" * 32})
                              .to_bytes())
    hello = decode(Encoded.from_bytes(body))[1]
    msg = hello_message(b"\xab" * 32, 2**64 - 5, 7, party.roster)
    assert party.roster.verify(1, msg, hello["signature"])
    assert not party.roster.verify(1, hello_message(b"x" * 32, 2**64 - 5, 7, party.roster),
                                   hello["signature"])
    # the server cannot lower the client's own safety settings
    cfg = Config.from_dict({"algorithm": "fedgcn", "clients": 3, "secure_sum": "none"})
    head, _ = party.answer(where, encode("party.setup", {
        "config": cfg.to_dict(), "seed": 0, "run_tag": "t0", "resumed": False}).to_bytes())
    assert "runs 'robust'" in head["refused"]
    assert party.endpoint is None
    head, _ = party.answer({**where, "phase": "train"}, encode("fedavg.fit", {}).to_bytes())
    assert "before this run's 'party.setup'" in head["refused"]


@needs_flwr
def test_client_and_server_bad_input_is_one_line(tmp_path: Path, capsys) -> None:
    from fedgl.cli import main
    from fedgl.deployment.commands import free_port

    roster = write_keys(tmp_path / "keys", 3)
    manifest = write_shard(tiny_shard(1), tmp_path / "shard")
    nowhere = f"127.0.0.1:{free_port()}"
    client = ["client", "--superlink", nowhere, "--data", str(manifest), "--roster", str(roster),
              "--insecure"]
    cases = [
        (client + ["--key", str(tmp_path / "keys" / "client-2.key")], "not client 1's roster key"),
        (client + ["--key", str(tmp_path / "keys" / "client-1.key")], "is unreachable"),
        (client[:-1] + ["--key", str(tmp_path / "keys" / "client-1.key")], "--insecure"),
        (["server", "--superlink", nowhere, "--roster", str(roster), "--insecure", "--clients",
          "3", "--algorithm", "glasu-simulated", "--out", str(tmp_path / "o")],
         "is simulation-only"),
        (["server", "--superlink", nowhere, "--roster", str(roster), "--insecure", "--clients",
          "4", "--out", str(tmp_path / "o")], "the roster"),
    ]
    for argv, needle in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("fedgl: error: ") and needle in err[0], err
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------- waiting for replies
class ReplyingGrid:
    """A Flower grid whose clients reply at given pulls: ``{message id: pull number}``."""

    def __init__(self, reply_at: dict[str, int], pushed: list[str | None]) -> None:
        self.reply_at, self.pushed = reply_at, pushed
        self.pulls: list[set[str]] = []

    def push_messages(self, messages: list) -> list[str | None]:
        assert len(messages) == len(self.pushed)
        return list(self.pushed)

    def pull_messages(self, message_ids: set[str]) -> list:
        from types import SimpleNamespace

        self.pulls.append(set(message_ids))
        return [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=i))
                for i in sorted(message_ids) if self.reply_at.get(i) == len(self.pulls)]


#: importing the runtime imports Flower, whose CLI library warns about its own dependency
FLWR_IMPORT = pytest.mark.filterwarnings("ignore:.*click.utils.*:DeprecationWarning")


@needs_flwr
@FLWR_IMPORT
def test_exchange_collects_every_reply_and_stops_pulling_then() -> None:
    from fedgl.federation.flower.runtime import exchange

    grid = ReplyingGrid({"a": 1, "b": 4, "c": 6}, ["a", "b", "c"])
    replies = exchange(grid, [object()] * 3, timeout=None)
    assert sorted(r.metadata.reply_to_message_id for r in replies) == ["a", "b", "c"]
    # each pull asks only for the replies still missing; none after the last one came
    assert grid.pulls == [{"a", "b", "c"}] + [{"b", "c"}] * 3 + [{"c"}] * 2


@needs_flwr
@FLWR_IMPORT
def test_exchange_returns_what_came_when_the_timeout_passes() -> None:
    """A silent client: the exchange ends at the timeout with the others' replies; a message
    Flower could not push (no id) is not waited for."""
    from fedgl.federation.flower.runtime import exchange

    grid = ReplyingGrid({"a": 2}, ["a", "b", None])
    replies = exchange(grid, [object()] * 3, timeout=1.0)
    assert [r.metadata.reply_to_message_id for r in replies] == ["a"]
    assert grid.pulls[0] == {"a", "b"} and all(p == {"b"} for p in grid.pulls[2:])
    assert len(grid.pulls) > 2


class FailingGrid:
    """Client 0's message cannot be pushed; client 1's SuperNode is gone, so the SuperLink
    itself answers (from its own node id, 0) with Flower's "node unavailable" error."""

    def push_messages(self, messages: list) -> list[str | None]:
        return [{11: None, 12: "m12"}[int(m.metadata.dst_node_id)] for m in messages]

    def pull_messages(self, message_ids: set[str]) -> list:
        from types import SimpleNamespace

        error = SimpleNamespace(code=5, reason="Error: Node Unavailable")
        return [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id="m12",
                                                         src_node_id=0),
                                has_error=lambda: True, error=error)]


@needs_flwr
@FLWR_IMPORT
def test_a_lost_client_is_named_with_the_real_reason_and_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The SuperLink's error reply for a lost SuperNode is matched to that client by the message
    it answers (not reported as silence for the whole timeout); an undeliverable message says
    so."""
    from flwr.supercore.task_identity import TaskIdentity

    from fedgl.federation.flower.runtime import FlowerRuntime

    for name in ("_run_id", "_node_id", "_task_id"):  # a Message is made inside a run
        monkeypatch.setattr(TaskIdentity, name, 1)
    rt = FlowerRuntime(FailingGrid(), {0: 11, 1: 12}, timeout=600.0, on_client_failure="drop")
    assert rt.call("fedavg.evaluate", {}, phase="eval") == {}
    why = {e["client"]: e["error"] for e in rt.events}
    assert "could not deliver" in why[0]
    assert "stopped reporting to the SuperLink after 0 s" in why[1]
    assert not any("600" in w for w in why.values())
    with pytest.raises(RunAborted, match="client 1 failed.*stopped reporting"):
        FlowerRuntime(FailingGrid(), {0: 11, 1: 12}, on_client_failure="abort",
                      timeout=600.0).call("fedavg.evaluate", {}, phase="eval", clients=[1])


class SilentGrid:
    """Pushes every message; nobody ever replies."""

    def push_messages(self, messages: list) -> list[str]:
        return [f"m{int(m.metadata.dst_node_id)}" for m in messages]

    def pull_messages(self, message_ids: set[str]) -> list:
        return []


@needs_flwr
@FLWR_IMPORT
def test_the_server_log_names_whom_it_waits_for_and_who_was_dropped(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The deployed run's log (printed by ``fedgl server``, kept in ``--out``): a line every
    ``wait_every`` seconds naming the clients still missing, and the drop with its reason."""
    from flwr.supercore.task_identity import TaskIdentity

    from fedgl.deployment.server_log import ServerLog, Tail
    from fedgl.federation.flower.runtime import FlowerRuntime

    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)
    log = ServerLog(tmp_path / "server.log")
    tail = Tail(tmp_path / "server.log")
    rt = FlowerRuntime(SilentGrid(), {0: 11, 1: 12}, timeout=0.5, on_client_failure="drop")
    rt.log, rt.wait_every = log, 0.1
    assert rt.call("fedavg.evaluate", {}, phase="eval") == {}
    log.round_line(1, 5, {"train_loss": 0.5, "val_acc": 0.25, "test_acc": float("nan")}, 2_500)
    log.close()
    lines = [line.split(" ", 1)[1] for line in tail.new_lines()]
    waits = [x for x in lines if x.startswith("waiting for clients 0, 1 ('fedavg.evaluate'")]
    assert len(waits) >= 2
    dropped = [x for x in lines if x.startswith("client ")]
    assert [x.split(" dropped")[0] for x in dropped] == ["client 0", "client 1"]
    assert all("no reply after" in x and "(--message-timeout 0.5 s)" in x for x in dropped)
    assert lines[-1].startswith("round 1/5: loss 0.5000, val acc 0.2500; 2.5 kB sent in all")
    assert tail.new_lines() == []


# ---------------------------------------------------------------------- loopback federation
@pytest.fixture(scope="module")
def deployment_files(tmp_path_factory: pytest.TempPathFactory, data_root: Path) -> Path:
    return write_deployment_files(tmp_path_factory.mktemp("deploy"))


@needs_flwr
@pytest.mark.slow   # each loopback federation takes minutes on 2 cores; the robust one runs always
def test_loopback_fedgcn_two_hop_over_tls_equals_local(deployment_files: Path) -> None:
    """Flower's TLS (trial certificates): the SuperLink serves TLS, clients and server verify."""
    deployed = deployed_run(deployment_files, "plain", RUN, PLAINTEXT, tls=True)
    assert_same_as_local(deployed, RUN)
    assert deployed["repeats"][0]["extra"]["flower"]["refused_nodes"] == []


@needs_flwr
def test_loopback_fedgcn_robust_secure_sum_equals_local(deployment_files: Path) -> None:
    """The default run's deployment check: three client processes, each with only its own shard
    and key, over Flower's TLS, FedGCN 2-hop with the robust secure sum = the local runtime."""
    # no leakage report in the local reference run (about 10 s on Cora; it has its own tests)
    keys = {**RUN, "secure_sum": "robust", "leakage_report": False}
    deployed = deployed_run(deployment_files, "robust", keys, ["--secure-sum", "robust",
                                                                  *AS_ASKED], tls=True)
    assert_same_as_local(deployed, keys)


@needs_flwr
@pytest.mark.slow   # minutes on 2 cores
def test_loopback_fedgcn_robust_secure_models_equals_local(deployment_files: Path) -> None:
    """The robust secure sum with secure models (the clients' default) and no DP, three rounds:
    rounds 1 and 2's evaluation counts ride in rounds 2 and 3's model sums (one secure sum per
    round); history, bytes and message counts equal the local runtime's."""
    keys = {**RUN, "rounds": 3, "secure_sum": "robust", "secure_models": True,
            "leakage_report": False}
    deployed = deployed_run(deployment_files, "robust-models", keys,
                            ["--secure-sum", "robust", "--adjacency-check", "node",
                             "--min-contributors", "1", "--feature-bound", "none"])
    assert_same_as_local(deployed, keys)
    phases = deployed["repeats"][0]["ledger"]["messages"]
    assert phases["eval"]["down"] == 3 * (1 + 5)   # the last round's evaluation and its sum


@needs_flwr
@pytest.mark.slow
def test_loopback_swift_fedgnn_equals_local(tmp_path: Path, data_root: Path) -> None:
    """Swift-FedGNN: local mini-batch steps and, every ``period`` iterations, the server-mediated
    cross-client step, over Flower (shards with Swift's recipe: METIS, normalised features)."""
    keys = {"algorithm": "swift-fedgnn", "dataset": "cora", "clients": 3, "rounds": 6,
            "eval_every": 3, "period": 3, "cross_clients": 2, "progress": False,
            "oracle_eval": False}
    (tmp_path / "run.yaml").write_text(json.dumps(keys))   # the run's file writes its shards
    root = write_deployment_files(tmp_path, 3, (str(tmp_path / "run.yaml"),))
    deployed = deployed_run(root, "swift", keys, PLAINTEXT)
    assert_same_as_local(deployed, keys)
    assert deployed["repeats"][0]["extra"]["communicating_iterations"] == 2


@needs_flwr
@pytest.mark.slow
def test_client_refuses_a_weaker_run(deployment_files: Path) -> None:
    """Clients started with --secure-sum robust refuse a run that asks for none: one line."""
    from fedgl.deployment.loopback import Loopback

    root = deployment_files
    with Loopback(root / "fed-refuse", root / "shards", root / "keys", 3,
                  ["--secure-sum", "robust"]) as fed:
        proc = subprocess.run([sys.executable, "-m", "fedgl.cli", "server", "--superlink",
                               fed.address, "--roster", str(root / "keys" / "roster.json"),
                               "--insecure", "--out", str(root / "out-refuse"), "--dataset",
                               "cora", "--clients", "3", "--rounds", "1", "--no-progress"],
                              capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 2   # the configuration is what the party refused: bad input
    assert "refused the run" in proc.stderr and "runs 'robust'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (root / "out-refuse" / "result.json").exists()


@needs_flwr
@pytest.mark.slow
def test_client_killed_mid_run_is_dropped(deployment_files: Path) -> None:
    """``on_client_failure: drop``: a client whose process dies during training is dropped and
    the others finish the run; the event is recorded."""
    from fedgl.deployment.loopback import Loopback

    root = deployment_files
    out = root / "out-killed"
    with Loopback(root / "fed-killed", root / "shards", root / "keys", 3, PLAINTEXT) as fed:
        code, err = run_server_killing_a_client(fed, [
            sys.executable, "-m", "fedgl.cli", "server", "--superlink", fed.address, "--roster",
            str(root / "keys" / "roster.json"), "--insecure", "--out", str(out), "--dataset",
            "cora", "--clients", "3", "--hops", "2", "--rounds", "4", "--no-progress",
            "--on-client-failure", "drop", "--message-timeout", "60"], 2, "train.fedavg__fit")
    assert code == 0, err[-2000:]
    rep = json.loads((out / "result.json").read_text())["repeats"][0]
    assert rep["final"]["rounds"] == 4
    dropped = [e for e in rep["extra"]["failures"] if e["action"] == "dropped"]
    assert [e["client"] for e in dropped] == [2]
    uploads = rep["ledger"]["bytes_per_client"]["train"]["up"]
    assert uploads.get("2", 0) < uploads["0"] == uploads["1"]   # 2 stopped, 0 and 1 went on
