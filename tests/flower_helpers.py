"""Helpers for the loopback Flower federation tests (one SuperLink and one SuperNode process per
client, all on 127.0.0.1): shards and keys on disk, a deployed run, and its comparison with the
local runtime."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from fedgl.data.client_data import ClientData
from fedgl.privacy.identity import write_keys

needs_flwr = pytest.mark.skipif(importlib.util.find_spec("flwr") is None,
                                reason="flwr is not installed (pip install 'fedgl[flower]')")


def tiny_shard(client_id: int = 1, test_node: bool = False) -> ClientData:
    """Three own nodes (2, 5, 9) with random features and one remote neighbour (7); node 9 is a
    test node when ``test_node``."""
    g = torch.Generator().manual_seed(client_id)
    ids = torch.tensor([2, 5, 9])
    return ClientData(client_id=client_id, node_ids=ids, x=torch.rand(3, 4, generator=g),
                      y=torch.tensor([0, 1, 1]), train_mask=torch.tensor([True, False, True]),
                      val_mask=torch.tensor([False, True, False]),
                      test_mask=torch.tensor([False, False, test_node]),
                      edge_index=torch.tensor([[5, 7, 2], [2, 5, 9]]), num_classes=2)


def write_deployment_files(root: Path, clients: int = 3, shard_args: tuple[str, ...] = ()) -> Path:
    """Roster and keys in ``root/keys``, Cora shards from ``fedgl shard`` in ``root/shards``."""
    from fedgl.cli import main

    if importlib.util.find_spec("flwr") is None:
        pytest.skip("flwr is not installed (pip install 'fedgl[flower]')")
    write_keys(root / "keys", clients)
    assert main(["shard", "--dataset", "cora", "--clients", str(clients), *shard_args, "--out",
                 str(root / "shards")]) == 0
    return root


#: ``fedgl client``'s flag that asks for plaintext by name (its default is the protective
#: policy: the robust secure sum, secure models, the edge check, two contributors, a bound)
PLAINTEXT = ["--secure-sum", "none"]

#: ``fedgl client``'s flags that, beside a named secure-sum mode, drop the other protective
#: defaults (the edge check, two contributors, a feature bound, secure models): for runs that
#: test something else and ask for none of them
AS_ASKED = ["--adjacency-check", "node", "--min-contributors", "1", "--feature-bound", "none",
            "--no-secure-models"]

RUN = {"algorithm": "fedgcn", "dataset": "cora", "clients": 3, "hops": 2, "rounds": 2,
       "local_steps": 2, "progress": False, "oracle_eval": False, "batch_clients": False}


def deployed_run(root: Path, name: str, keys: dict, client_args: list[str],
                 tls: bool = False, clients: int = 3) -> dict:
    """Run ``fedgl server`` with ``keys`` as flags against a loopback federation of ``clients``
    SuperNodes started with ``client_args``; the result.json it wrote."""
    from fedgl.deployment.loopback import Loopback

    out = root / f"out-{name}"
    flags = [f"--{k.replace('_', '-')}" + ("" if v is True else f"={v}")
             for k, v in keys.items() if v is not False]
    flags += [f"--no-{k.replace('_', '-')}" for k, v in keys.items() if v is False]
    with Loopback(root / f"fed-{name}", root / "shards", root / "keys", clients, client_args,
                  tls=tls) as fed:
        proc = subprocess.run([sys.executable, "-m", "fedgl.cli", "server", "--superlink",
                               fed.address, "--roster", str(root / "keys" / "roster.json"),
                               *fed.tls_flags, "--out", str(out), "--join-timeout", "120",
                               "--message-timeout", "300", *flags],
                              capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((out / "result.json").read_text())
    # the ServerApp's log is kept in --out: who joined, every round, the end
    log = (out / "server.log").read_text()
    rounds = result["config"]["rounds"]
    for needle in ("organisations joined and proved their roster keys",
                   f"round {rounds}/{rounds}: ", "finished in"):
        assert needle in log, (needle, log[-1500:])
    for k in range(clients):   # each organisation's terminal: the end, and where its files are
        said = (root / f"fed-{name}" / f"client-{k}.log").read_text()
        assert f"finished after round {rounds}; files in" in said, said[-1500:]
    card_path = out / "model" / "model.json"
    if card_path.is_file() and sorted(json.loads(card_path.read_text())["files"]) == ["global"]:
        # every organisation received the coordinator's model: the same digest everywhere
        digest = json.loads(card_path.read_text())["sha256"]
        assert f"model handed over to {clients} of {clients} organisations" in log, log[-1500:]
        for k in range(clients):
            own = root / f"fed-{name}" / f"client-{k}-out"
            assert json.loads((own / "model" / "model.json").read_text())["sha256"] == digest
    return result


def assert_same_ledger(deployed: dict, local: dict, *, setup: bool = False) -> None:
    """Value bytes, wire bytes and message counts of every phase of the local run's ledger
    equal the deployed run's; the set-up phase only with ``setup`` (a local run asks
    ``setup.facts``, a deployment's hello and set-up round trips carry the facts)."""
    for key in ("bytes", "wire_bytes", "messages"):
        phases = [p for p in local[key] if setup or p != "setup"]
        assert {p: deployed[key][p] for p in phases} == {p: local[key][p] for p in phases}, key


def assert_same_as_local(deployed: dict, keys: dict) -> None:
    """History, value bytes, wire bytes and message counts equal ``fedgl.api.run(**keys)``'s."""
    from fedgl.api import run

    local = run(**keys).repeats[0]
    rep = deployed["repeats"][0]
    assert rep["extra"]["runtime"] == "flower"
    columns = ("round", "train_loss", "train_acc", "val_acc", "test_acc")
    assert [{c: h.get(c) for c in columns} for h in rep["history"]] == \
        [{c: h.get(c) for c in columns} for h in local.history]
    nodes = rep["extra"]["flower"].get("nodes")   # absent where no Flower carried the run
    # the local run's phases, its set-up ('setup.facts' to every client) included where the
    # deployed driver asked in-process; over Flower the set-up is the deployment's own
    assert_same_ledger(rep["ledger"], local.ledger, setup=nodes is None)
    n = rep["partition"]["clients"]   # the shards' count, from their facts
    assert local.ledger["messages"]["setup"] == {"up": n, "down": n}
    if nodes is not None:   # each client: one hello, one set-up (whose reply brings the facts)
        assert rep["ledger"]["messages"]["setup"] == {"up": 2 * len(nodes), "down": 2 * len(nodes)}
    # what Flower carried: fedgl's wire bytes plus Flower's framing, measured per round
    for row in rep["extra"]["flower"].get("per_round", []):
        assert row["flower_bytes"] >= row["ledger_wire_bytes"] > 0


class InProcessFlower:
    """The parties' roles behind a local runtime, with the counters the deployed driver reads
    from a Flower runtime (nothing travels through Flower here)."""

    def __init__(self, roles: dict) -> None:
        from fedgl.federation.runtime import LocalRuntime

        self.local = LocalRuntime(roles)
        self.flower_bytes: dict = defaultdict(lambda: {"up": 0, "down": 0})
        self.calls = 0

    def __getattr__(self, name: str):
        return getattr(self.local, name)


def set_up_parties(parties: list, cfg: Any, run_tag: str) -> None:
    """The set-up messages (hello, set-up) to in-process parties as the relay hands them
    over; none may be refused."""
    from fedgl.deployment.party import HELLO, SETUP, SETUP_PHASE
    from fedgl.federation.codec import encode

    for party in parties:
        for msg_type, payload in ((HELLO, {"challenge": bytes(32)}),
                                  (SETUP, {"config": cfg.to_dict(), "seed": cfg.seed,
                                           "run_tag": run_tag, "resumed": False})):
            head, _ = party.answer({"op": "message", "phase": SETUP_PHASE, "node_id": 1,
                                    "run_id": 1}, encode(msg_type, payload).to_bytes())
            assert "refused" not in head, head


def deployed_in_process(root: Path, keys: dict) -> dict:
    """``keys`` through the deployed server's driver, over parties built from ``root``'s shards
    and keys exactly as ``fedgl client`` builds them; the result as ``result.json`` holds it."""
    from fedgl.api import as_config
    from fedgl.deployment.party import Party
    from fedgl.deployment.server_app import run_deployed
    from fedgl.privacy.policy import ClientPolicy

    cfg = as_config(**keys)
    plaintext = ClientPolicy(secure_sum="none")   # named: these runs are the plaintext ones
    parties = [Party(root / "shards" / f"client-{k}.json", root / "keys" / f"client-{k}.key",
                     root / "keys" / "roster.json", plaintext) for k in range(cfg.clients)]
    set_up_parties(parties, cfg, "inprocess")
    # the driver asks every role 'setup.facts' itself here (no set-up reply carried them)
    runtime = InProcessFlower({p.client_id: p.endpoint.role for p in parties})
    result = json.loads(json.dumps(run_deployed(runtime, cfg, cfg.seed, {}).to_dict(),
                                   default=str))
    # nothing travelled through Flower here: no Flower bytes to set beside the ledger's
    result["repeats"][0]["extra"]["flower"].pop("per_round", None)
    return result


def wait_for(what: Callable[[], bool], proc: subprocess.Popen, timeout: float = 900) -> None:
    """Poll ``what`` every 0.5 s while ``proc`` runs (its stderr tail if it exits first)."""
    deadline = time.monotonic() + timeout
    while not what():
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def run_server_killing_a_client(fed: Any, server_cmd: list[str], client: int,
                                marker: str) -> tuple[int, str]:
    """Run ``server_cmd`` against the loopback federation ``fed``, kill client ``client``'s
    process once its log shows the message type ``marker``, and wait for the server:
    ``(exit code, stderr)``."""
    server = subprocess.Popen(server_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        log = fed.folder / f"client-{client}.log"
        wait_for(lambda: marker in log.read_text(), server)
        fed.kill_client(client)
        _, err = server.communicate(timeout=900)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return server.returncode, err


def server_cmd(root: Path, fed: Any, out: Path, keys: dict[str, Any],
               message_timeout: int = 300) -> list[str]:
    """``fedgl server`` against the loopback federation ``fed`` with ``keys`` as flags."""
    flags = [f"--{k.replace('_', '-')}" + ("" if v is True else f"={v}")
             for k, v in keys.items() if v is not False]
    flags += [f"--no-{k.replace('_', '-')}" for k, v in keys.items() if v is False]
    return [sys.executable, "-m", "fedgl.cli", "server", "--superlink", fed.address, "--roster",
            str(root / "keys" / "roster.json"), *fed.tls_flags, "--out", str(out),
            "--join-timeout", "120", "--message-timeout", str(message_timeout), *flags]


def serverapp_pids(address: str) -> list[int]:
    """The Flower ServerApp processes serving the SuperLink at ``address`` (this test's own)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(c.endswith(b"flwr-serverapp") for c in cmd) and address.encode() in cmd:
            pids.append(int(proc.name))
    return pids


def kill_server_at_first_checkpoint(fed: Any, cmd: list[str], out: Path) -> None:
    """Start ``fedgl server`` (``cmd``, which checkpoints into ``out``) and kill it and its
    ServerApp once the first checkpoint is written; the parties and the SuperLink stay up."""
    import os
    import signal

    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        wait_for(lambda: (out / "checkpoint.pt").is_file(), first)
        for pid in serverapp_pids(fed.address):
            os.kill(pid, signal.SIGKILL)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()


def deployed_predict(folder: Path, shards: Path, keys: Path, model: Path, out: Path,
                     client_args: list[str]) -> dict:
    """``fedgl server --predict MODEL`` against a loopback federation of 3 SuperNodes over
    ``shards`` (their folders ``folder/client-<k>-out``); the ``prediction.json`` it wrote."""
    from fedgl.deployment.loopback import Loopback

    with Loopback(folder, shards, keys, 3, client_args) as fed:
        proc = subprocess.run([sys.executable, "-m", "fedgl.cli", "server", "--superlink",
                               fed.address, "--roster", str(keys / "roster.json"),
                               *fed.tls_flags, "--out", str(out), "--join-timeout", "120",
                               "--message-timeout", "300", "--predict", str(model)],
                              capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((out / "prediction.json").read_text())
