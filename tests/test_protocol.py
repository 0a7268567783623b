"""The wire is a protocol: messages are data (no pickle, no Python objects), each role accepts
only the message types it declares, with their schemas, and clients check the plans a server
sends before they reveal anything. Every attack drives a deviating server through the runtime
(local and Ray) against unmodified clients and fails if the attack works."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
import torch

from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.errors import ConfigError
from fedgl.federation.codec import Encoded, WireError, decode, encode
from fedgl.federation.messages import SparseRows
from fedgl.federation.protocol import (
    Arr,
    Endpoint,
    Int,
    ProtocolViolation,
    handler_table,
    handles,
)
from fedgl.privacy.identity import AttackDetected, Identity, make_roster
from fedgl.privacy.secagg import SecAggClient
from tests.helpers import fedgcn_federation, random_graph, random_partition


@pytest.fixture(scope="module")
def small():
    graph = random_graph(nodes=100, seed=11)
    return graph, random_partition(graph.num_nodes, 4, seed=11)


# ---------------------------------------------------------------------- the encoding
def test_every_payload_kind_survives_the_wire_exactly():
    payload = {
        "f32": torch.randn(3, 4), "i64": torch.arange(5), "flags": torch.tensor([True, False]),
        "empty": torch.zeros(0, 7), "half": torch.randn(2).half(), "np": np.arange(6.0).reshape(2, 3),
        "np_scalar": np.float32(1.5), "int": 3, "float": 0.25, "nan": float("nan"), "text": "ok",
        "none": None, "bool": True, "raw": b"\x00\x01", "tuple": (1, torch.ones(2)),
        "by_client": {0: [torch.ones(1)], 7: []},
        "sparse": SparseRows.from_dense(torch.tensor([[0.0, 2.0], [0.0, 0.0], [1.0, 0.0]])),
    }
    enc = encode("test.kinds", payload)
    assert enc.nbytes == len(enc.to_bytes())
    msg_type, got = decode(Encoded.from_bytes(enc.to_bytes()))
    assert msg_type == "test.kinds"
    assert set(got) == set(payload)
    for key in ("f32", "i64", "flags", "empty", "half"):
        assert got[key].dtype == payload[key].dtype and torch.equal(got[key], payload[key])
    assert np.array_equal(got["np"], payload["np"]) and got["np_scalar"] == np.float32(1.5)
    assert type(got["np_scalar"]) is np.float32
    assert got["int"] == 3 and isinstance(got["int"], int) and got["float"] == 0.25
    assert np.isnan(got["nan"]) and got["text"] == "ok" and got["none"] is None
    assert got["raw"] == b"\x00\x01" and isinstance(got["tuple"], tuple)
    assert set(got["by_client"]) == {0, 7}  # integer keys stay integers
    assert torch.equal(got["sparse"].to_dense(), payload["sparse"].to_dense())
    got["f32"].add_(1)  # the receiver's copy is its own
    assert not torch.equal(got["f32"], payload["f32"])


@pytest.mark.parametrize("value", [object(), {1.5: 2}, torch.ones(2).to_sparse(), {"f": print}])
def test_python_objects_do_not_cross(value):
    with pytest.raises(WireError, match="cannot cross the wire"):
        encode("test.obj", {"v": value})


def _raw(header: dict, buffers: list[bytes]) -> bytes:
    head = json.dumps(header).encode()
    out = b"FGW1" + struct.pack("<I", len(head)) + head
    for b in buffers:
        out += struct.pack("<Q", len(b)) + b
    return out


@pytest.mark.parametrize("header,buffers,match", [
    ({"type": "t", "payload": {"$T": 0, "dtype": "float32", "shape": [3]}}, [b"\0" * 8],
     "size does not match"),
    ({"type": "t", "payload": {"$T": 1, "dtype": "float32", "shape": [1]}}, [b"\0" * 4],
     "does not carry"),
    ({"type": "t", "payload": {"$N": 0, "dtype": "|O", "shape": [1]}}, [b"\0" * 8],
     "unknown array dtype"),
    ({"type": "t", "payload": {"$W": "pickle", "v": 1}}, [], "unknown value type"),
    ({"type": "t", "payload": {"$D": [[0, {"$B": 0}]]}}, [b"a", b"b"], "does not name"),
    ({"type": "t", "payload": {"a": 1}}, [], "malformed payload"),
    ({"type": "t", "payload": [{"$B": 0}, {"$B": 0}]}, [b"a"], "twice"),
])
def test_malformed_messages_are_refused_by_the_decoder(header, buffers, match):
    with pytest.raises(WireError, match=match):
        decode(Encoded.from_bytes(_raw(header, buffers)))


def test_truncated_and_foreign_bytes_are_refused():
    good = encode("t", {"x": torch.ones(4)}).to_bytes()
    with pytest.raises(WireError, match="truncated"):
        Encoded.from_bytes(good[:-3])
    with pytest.raises(WireError, match="magic"):
        Encoded.from_bytes(b"\x80\x04K\x01." + good)  # e.g. a pickle stream


# ---------------------------------------------------------------------- declared handlers
class _Counter:
    def __init__(self):
        self.total = 0
        self.protocol_state = "ready"

    @handles("test.add", phases=("train",), schema={"x": Arr(("int64",), ndim=1, rows=4)})
    def add(self, x):
        self.total += int(x.sum())
        return {"total": self.total}

    @handles("test.close", schema={"code": Int(0, 9)}, states=("ready",), enters="closed")
    def close(self, code):
        return {}

    def secret(self):
        return {"total": self.total}


@pytest.mark.parametrize("msg_type,payload,phase,match", [
    ("secret", {}, "train", "not a message type"),
    ("test.add", {"x": torch.ones(2, dtype=torch.long)}, "eval", "not accepted in phase eval"),
    ("test.add", {"x": torch.ones(2)}, "train", "dtype float32"),
    ("test.add", {"x": torch.ones(5, dtype=torch.long)}, "train", "dimension 0 is 5 > 4"),
    ("test.add", {"x": torch.ones(1, 1, dtype=torch.long)}, "train", "2 dimensions"),
    ("test.add", {}, "train", "missing field 'x'"),
    ("test.add", {"x": torch.ones(1, dtype=torch.long), "y": 1}, "train", "unexpected field"),
    ("test.close", {"code": 10}, "train", "outside"),
])
def test_the_endpoint_refuses_what_the_role_does_not_declare(msg_type, payload, phase, match):
    role = _Counter()
    ep = Endpoint(role, "client 0")
    with pytest.raises(ProtocolViolation, match=match) as err:
        ep.handle(encode(msg_type, payload), phase)
    assert "\n" not in str(err.value) and ep.refused == [str(err.value)]
    assert role.total == 0 and role.protocol_state == "ready"  # nothing changed


def test_states_order_the_steps():
    ep = Endpoint(_Counter())
    ep.handle(encode("test.close", {"code": 1}), "train")
    with pytest.raises(ProtocolViolation, match="out of order"):
        ep.handle(encode("test.close", {"code": 1}), "train")


def test_set_up_steps_and_internals_are_not_message_types():
    types = {h.method for h in handler_table(FedGCNClient).values()}
    assert {"fit", "evaluate", "block_sums", "secure_upload"} <= types
    assert not types & {"provision", "install_identity", "_release", "encode_weights",
                        "decode_weights", "load_weights", "predict", "hold_model"}


# ---------------------------------------------------------------------- attacks, both runtimes
def _federation(small, runtime, request, pretrain=True, **cfg):
    if runtime == "ray":
        request.getfixturevalue("local_ray")
    server = fedgcn_federation(*small, runtime=runtime, **cfg)
    request.addfinalizer(server.runtime.close)
    if pretrain:
        server.pretrain()
    return server


RUNTIMES = ["local", pytest.param("ray", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("ray") is None, reason="ray is not installed"))]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_server_cannot_call_methods_by_name_or_provision_clients(small, runtime, request):
    """The server asks for a client's internal release (its exact partial sums) and sends a
    roster with a phantom party as if it were set-up: both refused, one line each."""
    server = _federation(small, runtime, request, hops=1, secure_sum="mask")
    rt = server.runtime
    with pytest.raises(ProtocolViolation, match="'_release' is not a message type") as err:
        rt.call("_release", None, phase="pretrain", clients=[0])
    assert "\n" not in str(err.value)
    roster, idents = make_roster(range(5))
    with pytest.raises(ProtocolViolation, match="'provision' is not a message type"):
        rt.call("provision", {"plain": {"key": idents[4].private_bytes(),
                                        "roster": roster.to_dict(), "mode": "mask",
                                        "threshold": 0}}, phase="pretrain", clients=[1])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_client_is_not_a_decryption_oracle(small, runtime, request):
    """With plaintext models, the server wraps a ciphertext under the clients' CKKS key as the
    'global model' of an ordinary fit: the client refuses instead of decrypting it."""
    pytest.importorskip("tenseal")
    from fedgl.privacy.he import EncryptedModel

    server = _federation(small, runtime, request, False, hops=1, secure_sum="he")
    seen = {}
    send = server.runtime.call

    def record(msg_type, args=None, **kw):  # the server keeps what it was sent
        out = send(msg_type, args, **kw)
        if msg_type == "fedgcn.secure_upload":
            seen.update(out)
        return out

    server.runtime.call = record
    server.pretrain()
    server.runtime.call = send
    victim = next(k for k, r in seen.items() if r["blocks"] and r["blocks"][0])
    fake = EncryptedModel((seen[victim]["blocks"][0][0],), 1.0)
    with pytest.raises(AttackDetected, match="decryption-oracle"):
        server.runtime.call("fedavg.fit", {"weights": fake, "local_steps": 1, "round": 1},
                            phase="train", clients=[1])


def _mask_session(server):
    """A fresh secure session up to the upload: hello (announcing rows), checked keys."""
    session = os.urandom(16)
    hello = server.runtime.call("fedgcn.privacy_hello", {"session": session, "announce": True},
                                phase="pretrain")
    directory = server.secagg.directory({k: h["adv"] for k, h in hello.items()})
    keys = server.runtime.call("secagg.keys", {"session": session, "directory": directory},
                               phase="pretrain")
    return session, hello, server.secagg.relay(keys)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_plan_listing_rows_twice_is_refused(small, runtime, request):
    """Mask mode: a plan listing each of client 1's rows twice (in two blocks with different
    co-members) would let the server solve for every row. Refused before any masked value."""
    server = _federation(small, runtime, request, False, hops=2, secure_sum="mask")
    session, hello, relayed = _mask_session(server)
    n = len(hello[1]["ids"])
    rows = torch.arange(n)
    half = rows[:n // 2]
    for plan_rows, match in ((torch.cat([half, half]), "more than once"),
                             (torch.tensor([0, n + 5]), "does not hold")):
        plan = {"block_ids": torch.tensor([0, 1]),
                "block_sizes": torch.tensor([len(plan_rows) - len(plan_rows) // 2,
                                             len(plan_rows) // 2]),
                "rows": plan_rows,
                "use_own": torch.zeros(hello[1]["num_requested"], dtype=torch.bool),
                "peers": torch.tensor([2, 3]), "peer_counts": torch.tensor([1, 1])}
        with pytest.raises(AttackDetected, match=match):
            server.runtime.call("fedgcn.secure_upload", {1: {"session": session, "plan": plan,
                                                             "received": relayed[1]}},
                                phase="pretrain", clients=[1])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_robust_refuses_survivors_that_leave_a_segment_alone(small, runtime, request):
    """Robust mode: client 1's only co-member in a block is claimed dropped. Unmasking would
    hand the server client 1's rows of that block; client 1 refuses to sign the survivors (and
    the other clients unmask only with every survivor's signature)."""
    server = _federation(small, runtime, request, False, hops=2, secure_sum="robust")
    session, hello, relayed = _mask_session(server)
    n = len(hello[1]["ids"])
    plan = {"block_ids": torch.tensor([0]), "block_sizes": torch.tensor([n]),
            "rows": torch.arange(n),
            "use_own": torch.zeros(hello[1]["num_requested"], dtype=torch.bool),
            "peers": torch.tensor([2]), "peer_counts": torch.tensor([1])}
    server.runtime.call("fedgcn.secure_upload", {1: {"session": session, "plan": plan,
                                                     "received": relayed[1]}},
                        phase="pretrain", clients=[1])
    out = server.runtime.call("secagg.consistency", {"session": session, "survivors": [0, 1, 3]},
                              phase="pretrain", clients=[1])[1]
    assert "sig" not in out and "would have no other contributor" in out["refused"]
    with pytest.raises(AttackDetected, match="after refusing"):  # and never reveals shares
        server.runtime.call("secagg.unmask", {"session": session, "signatures": {}},
                            phase="pretrain", clients=[1])


def test_a_client_refuses_an_unsafe_threshold_however_it_is_set():
    roster, idents = make_roster(range(4))
    with pytest.raises(ConfigError, match="threshold 2 of 4 clients is unsafe"):
        SecAggClient(0, idents[0], roster, "robust", threshold=2)
    with pytest.raises(ConfigError, match="unsafe"):
        SecAggClient(0, idents[0], roster, "robust", threshold=5)
    assert SecAggClient(0, idents[0], roster, "robust", threshold=3).threshold == 3
    assert SecAggClient(0, Identity(), roster, "robust").threshold == 3


def test_docs_list_every_message_type_of_every_role():
    from pathlib import Path

    from fedgl.algorithms.boundary.client import BoundaryClient
    from fedgl.algorithms.fedgat.client import FedGATClient
    from fedgl.algorithms.fedsage_plus.client import FedSagePlusClient
    from fedgl.algorithms.glasu.client import GlasuClient
    from fedgl.algorithms.minibatch.client import MiniBatchClient

    docs = (Path(__file__).parents[1] / "docs" / "protocol.md").read_text()
    for cls in (FedGCNClient, FedGATClient, BoundaryClient, FedSagePlusClient, MiniBatchClient,
                GlasuClient):
        for msg_type in handler_table(cls):
            assert f"| `{msg_type}` |" in docs, (cls.__name__, msg_type)


# ---------------------------------------------------------------------- a deviating client
@pytest.mark.parametrize("hops", [1, 2])
@pytest.mark.parametrize("lie,match", [
    ("unowned", "which no other client owns"),
    ("own", "a node id more than once"),
    ("stranger", "has no neighbour at client"),
])
def test_the_server_refuses_a_client_announcing_nodes_it_has_no_edge_to(hops, lie, match):
    """Client 0 is modified to also ask for the sums of nodes it has no edge to: a node id no
    client owns, one of its own nodes again as a 'neighbour', or a node of a client that has no
    neighbour at client 0 (on a graph where clients 0 and 2 share no edge)."""
    from fedgl.algorithms.fedgcn.checks import ClientMisbehaved
    from fedgl.algorithms.fedgcn.server import FedGCNServer
    from fedgl.algorithms.runner import build_federation
    from fedgl.config import Config
    from fedgl.data.partition import Partition
    from tests.helpers import graph_from_edges

    # 3 clients in a chain: nodes 0-3 at client 0, 4-7 at client 1, 8-11 at client 2
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8), (8, 9), (9, 10),
             (10, 11), (0, 5), (6, 11)]
    graph = graph_from_edges(edges + [(b, a) for a, b in edges], 12)
    part = Partition(np.repeat(np.arange(3), 4), 3)
    owned = {k: torch.from_numpy(part.nodes_of(k)) for k in range(3)}
    extra = {"unowned": lambda c: torch.tensor([graph.num_nodes + 7]),
             "own": lambda c: c.data.node_ids[:1] if c.data.client_id == 0 else owned[0][:0],
             "stranger": lambda c: owned[2][:1] if c.data.client_id == 0 else owned[0][:0]}[lie]

    class Liar(FedGCNClient):
        def _touched(self):
            mine = super()._touched()
            add = extra(self) if self.data.client_id == 0 else mine[:0]
            return torch.cat([mine, add])

    cfg = Config.from_dict({"clients": 3, "hops": hops, "progress": False})
    server = build_federation(graph, part, cfg, 0, Liar, FedGCNServer)
    with pytest.raises(ClientMisbehaved, match=match) as err:
        server.pretrain()
    assert "\n" not in str(err.value)
    honest = build_federation(graph, part, cfg, 0, FedGCNClient, FedGCNServer)
    honest.pretrain()  # the same federation without the lie runs
