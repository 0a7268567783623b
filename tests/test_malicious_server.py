"""A malicious server against real FedGCN clients, for each secure mode (mask, robust, he).

The server sends every declared message type in every phase and state (before, during and after
the secure pre-training; honest, replayed and crafted payloads), in two worlds that differ only
in client 0's private features (same graph, same seeds). Every reply is reduced to what the
server can read of it: masked vectors, ciphertexts, keys, signatures, sealed secrets and shares
become their kind (their content is random or encrypted); every other value is kept exactly. The
two worlds' transcripts must be equal: no reply reveals client 0's input. Every refusal is one
line. A plaintext federation is the control: there the same comparison finds the difference.

Released by design and excluded from the comparison (docs/threat-model.md): ``fedavg.fit``'s
mean training ``loss`` and, under ``he`` (no secure models), ``fedavg.evaluate``'s
correct-prediction counts, both in clear; with secure models the counts go through the secure
sum (tests/test_evaluate_once.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.algorithms.fedgcn.server import FedGCNServer
from fedgl.algorithms.runner import build_federation
from fedgl.config import Config
from fedgl.errors import FedglError, RunAborted
from fedgl.federation.codec import wire_types
from fedgl.federation.protocol import handler_table
from tests.helpers import random_graph, random_partition

MODES = {
    "mask": {"secure_sum": "mask", "secure_models": True},
    "robust": {"secure_sum": "robust", "secure_models": True},
    "he": {"secure_sum": "he", "encrypt_models": True, "oracle_eval": False},
}
#: reply fields released in clear by design (see the module docstring)
RELEASED = {"fedavg.fit": {"loss"}, "fedavg.evaluate": {"correct"}}
#: reply fields that name a fresh random key (the CKKS key's id)
RANDOM = {"key_id"}
PHASES = ("pretrain", "train", "eval")


def _world(mode: dict, victim_shift: bool, runtime: str = "local"):
    graph = random_graph(nodes=60, seed=5)
    part = random_partition(graph.num_nodes, 3, seed=5)
    if victim_shift:  # client 0's private features, and nothing else, differ
        x = graph.x.clone()
        own = torch.from_numpy(part.nodes_of(0))
        x[own] += torch.randn(len(own), x.size(1), generator=torch.Generator().manual_seed(1))
        graph = dataclasses.replace(graph, x=x)
    cfg = Config.from_dict({"clients": 3, "hops": 2, "rounds": 1, "progress": False,
                            "dropout": 0.0, "leakage_report": False, "runtime": runtime, **mode})
    return build_federation(graph, part, cfg, 0, FedGCNClient, FedGCNServer)


def _view(value: Any, released: set[str] = frozenset()) -> Any:
    """What the server reads of a reply (see the module docstring)."""
    if isinstance(value, bytes):
        return "<bytes>"
    if isinstance(value, np.ndarray) and value.dtype == np.uint64:
        return ("<masked>", value.shape)
    if any(type(value) is wt.cls for wt in wire_types().values()) or \
            type(value).__name__ == "EncryptedModel":
        return "<ciphertext>"
    if isinstance(value, torch.Tensor | np.ndarray):
        return (str(value.dtype), tuple(value.shape), np.asarray(value).tolist())
    if isinstance(value, dict):
        return tuple(sorted((str(k), "<released>" if k in released else
                             "<random>" if k in RANDOM else _view(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_view(v) for v in value)
    return value


class Transcript:
    """Every message the malicious server sends, one client at a time, and what came back."""

    def __init__(self, server) -> None:
        self.server, self.lines, self.calls = server, [], []
        self.refusals = 0

    def send(self, label: str, msg_type: str, args: Any, phase: str,
             clients: list[int] | None = None) -> dict[int, Any]:
        rt, out = self.server.runtime, {}
        for k in clients if clients is not None else rt.client_ids:
            payload = args[k] if isinstance(args, dict) and k in args and all(
                isinstance(i, int) for i in args) else (args or {})
            try:
                reply = rt.call(msg_type, {k: payload}, phase=phase, clients=[k])[k]
            except (RunAborted, FedglError) as exc:  # ProtocolViolation, AttackDetected, ...
                line = str(exc)
                assert "\n" not in line, line
                self.refusals += 1
                self.lines.append((label, msg_type, phase, k, "refused", line))
                continue
            out[k] = reply
            self.lines.append((label, msg_type, phase, k, "reply",
                               _view(reply, RELEASED.get(msg_type, set()))))
        return out

    def record_honest(self) -> None:
        """The server's own protocol steps are recorded too (the calls, for replaying)."""
        rt = self.server.runtime
        call = rt.call

        def recording(msg_type, args=None, *, phase, clients=None):
            out = call(msg_type, args, phase=phase, clients=clients)
            self.calls.append((msg_type, args, phase, sorted(out), out))
            for k, reply in sorted(out.items()):
                self.lines.append(("honest", msg_type, phase, k, "reply",
                                   _view(reply, RELEASED.get(msg_type, set()))))
            return out

        rt.call = recording

    def stop_recording(self) -> None:
        del self.server.runtime.call


def _everything(t: Transcript, label: str, phases: tuple[str, ...]) -> None:
    """Every declared message type, empty payload, in every phase."""
    for msg_type in sorted(handler_table(FedGCNClient)):
        for phase in phases:
            t.send(label, msg_type, {}, phase)


def _malformed(t: Transcript, label: str, phase: str) -> None:
    """Every declared message type with each of its fields of the wrong kind, and with one
    field too many."""
    for msg_type, handler in sorted(handler_table(FedGCNClient).items()):
        if handler.schema:
            t.send(label, msg_type, dict.fromkeys(handler.schema, "crafted"), phase)
        t.send(label, msg_type, {**dict.fromkeys(handler.schema, None), "extra": 1}, phase)


def _attack(mode: dict, victim_shift: bool, runtime: str = "local",
            phases: tuple[str, ...] = PHASES) -> Transcript:
    server = _world(mode, victim_shift, runtime)
    zeros = {k: torch.zeros_like(v) for k, v in server.weights.items()}
    t = Transcript(server)
    _everything(t, "before pre-training", phases)
    t.send("fit before pre-training", "fedavg.fit", {"weights": server.weights,
                                                     "local_steps": 1}, "train")
    t.record_honest()
    server.pretrain()
    t.stop_recording()
    honest = list(t.calls)
    for msg_type, args, phase, clients, _ in honest:  # replayed, each to each client again
        t.send("replayed", msg_type, args, phase, clients)
    for msg_type, args, phase, clients, out in honest:  # crafted: rows twice, zero sums, ...
        if msg_type == "fedgcn.secure_upload":
            crafted = {}
            for k in clients:
                plan = dict(args[k]["plan"])
                if plan["rows"].numel():
                    plan["rows"] = torch.cat([plan["rows"][:1], plan["rows"][:-1]])
                crafted[k] = {**args[k], "plan": plan}
            t.send("crafted plan", msg_type, crafted, phase, clients)
        if msg_type == "fedgcn.secure_receive" and "sums" in next(iter(args.values())):
            t.send("crafted sums", msg_type, {k: {**a, "sums": torch.zeros_like(a["sums"])}
                                              for k, a in args.items()}, phase, clients)
        if msg_type == "fedgcn.secure_upload" and "blocks" in out[clients[0]]:
            # HE: client 0's own (unsummed) ciphertexts handed to client 1 as its sums
            t.send("crafted blocks", "fedgcn.secure_receive", {1: {
                "session": args[1]["session"], "blocks": out[0]["blocks"][:1]}}, phase, [1])
    t.record_honest()
    try:
        server.pretrain()  # a second session over the same inputs (robust: refused)
    except (RunAborted, FedglError) as exc:
        assert "\n" not in str(exc)
        t.lines.append(("second session", "", "pretrain", -1, "refused", str(exc)))
    t.stop_recording()
    _everything(t, "after pre-training", phases)
    for phase in phases:
        _malformed(t, "malformed", phase)
    t.record_honest()
    list(server.rounds())
    t.stop_recording()
    for msg_type, args, phase, clients, _ in t.calls[len(honest):]:  # replayed again
        t.send("replayed round", msg_type, args, phase, clients)
    t.send("crafted model", "fedavg.fit", {"weights": zeros, "local_steps": 1, "round": 1},
           "train")
    _everything(t, "after training", phases)
    server.runtime.close()
    return t


def _same(a: Transcript, b: Transcript) -> None:
    assert len(a.lines) == len(b.lines)
    for left, right in zip(a.lines, b.lines, strict=True):
        assert left == right, (left[:4], "differs with client 0's features")


@pytest.mark.parametrize("mode", sorted(MODES))
def test_no_reply_reveals_one_clients_input(mode):
    a, b = _attack(MODES[mode], False), _attack(MODES[mode], True)
    _same(a, b)
    answered = {line[0] for line in a.lines if line[4] == "reply"}
    assert {"honest", "replayed", "replayed round"} <= answered, answered  # the attack ran
    plain = [line for line in a.lines if line[1] in ("fedgcn.partial_sums", "fedgcn.block_sums",
                                                     "fedgcn.announce_rows")]
    assert plain and all(line[4] == "refused" and "is not a message type" in line[5]
                         for line in plain)


def test_the_comparison_finds_a_plaintext_clients_input():
    """Control: with plaintext sums the same attack's transcripts differ (the partial sums)."""
    a, b = _attack({}, False), _attack({}, True)
    differ = {left[1] for left, right in zip(a.lines, b.lines, strict=True) if left != right}
    assert "fedgcn.block_sums" in differ or "fedgcn.partial_sums" in differ, differ


@pytest.mark.skipif(__import__("importlib").util.find_spec("ray") is None,
                    reason="ray is not installed")
def test_no_reply_reveals_one_clients_input_on_ray(local_ray):
    """The same attack on Ray actors (the mask mode with secure models: one representative
    mode, every type in phase pretrain only: Ray's round trips are slow): equal transcripts,
    plaintext steps not message types."""
    a, b = (_attack(MODES["mask"], shift, "ray", ("pretrain",)) for shift in (False, True))
    _same(a, b)
    plain = [line for line in a.lines if line[1] == "fedgcn.partial_sums"]
    assert plain and all("is not a message type of FedGCNClient" in line[5] for line in plain)
