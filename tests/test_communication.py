"""The ledger's pre-training bytes equal FedGCN appendix F's formulas (plus ids and degrees)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedgl.data.partition import Partition
from fedgl.federation.ledger import Ledger
from fedgl.federation.messages import copy_payload, payload_nbytes
from fedgl.federation.protocol import Arr, handles
from fedgl.federation.runtime import LocalRuntime
from tests.helpers import fedgcn_federation, graph_from_edges, random_graph, random_partition

F32, I64 = 4, 8


def _path_graph():
    """0-1-2-3-4 with d = 3; client 0 owns {0,1,2}, client 1 owns {3,4}.

    Closed neighbourhoods: Ñ0={0,1} Ñ1={0,1,2} Ñ2={1,2,3} Ñ3={2,3,4} Ñ4={3,4}; the clients
    storing them: c(Ñ)= {0},{0},{0,1},{0,1},{1} -> Σ|c(Ñ_i)| = 7 rows uploaded.
    N(V_0) = {0,1,2,3} (4 rows), N(V_1) = {2,3,4} (3 rows); one remote neighbour each.
    """
    graph = graph_from_edges([(0, 1), (1, 2), (2, 3), (3, 4)], 5, num_features=3)
    return graph, Partition(np.array([0, 0, 0, 1, 1]), 2)


def _pretrain_ledger(graph, part, hops) -> Ledger:
    server = fedgcn_federation(graph, part, hops=hops, min_client_size=1)
    server.pretrain()
    return server.runtime.ledger


def test_one_hop_bytes_by_hand():
    graph, part = _path_graph()
    led = _pretrain_ledger(graph, part, hops=1)
    d, n = 3, 5
    # up: Σ|c(Ñ_i)| d values + one id per row + one "rows wanted" count per client
    assert led.bytes("pretrain", "up") == 7 * d * F32 + 7 * I64 + 2 * I64
    # down: N d values, no ids (rows come back in the order the client asked for)
    assert led.bytes("pretrain", "down") == n * d * F32
    assert led.per_client("pretrain", "down") == {0: 3 * d * F32, 1: 2 * d * F32}


def test_two_hop_bytes_by_hand():
    graph, part = _path_graph()
    led = _pretrain_ledger(graph, part, hops=2)
    d = 3
    # up adds the degree of every own node (N of them)
    assert led.bytes("pretrain", "up") == 7 * d * F32 + 7 * I64 + 2 * I64 + 5 * I64
    # down: Σ_k |N(V_k)| d values, plus the degree of each remote neighbour
    assert led.bytes("pretrain", "down") == (4 + 3) * d * F32 + 2 * I64
    # three calls per client (announce rows, upload the one block, receive it), each a request
    # and a reply
    assert led.messages("pretrain") == 12


def _formula_counts(graph, part):
    """Σ_i |c(Ñ_i)|, and Σ_k |N(V_k)| with N(V_k) including V_k, from the full graph."""
    owner = torch.from_numpy(part.owner)
    src, dst = graph.edge_index
    n = graph.num_nodes
    pairs = torch.cat([torch.stack([torch.arange(n), owner]),              # self-loops
                       torch.stack([dst, owner[src]])], dim=1)             # neighbours' owners
    c_sum = torch.unique(pairs[0] * part.num_clients + pairs[1]).numel()
    nv = sum(torch.unique(torch.cat([torch.from_numpy(part.nodes_of(k)),
                                     src[owner[dst] == k]])).numel()
             for k in range(part.num_clients))
    return c_sum, nv


@pytest.mark.parametrize("hops", [1, 2])
def test_bytes_match_appendix_formula_on_random_graph(hops):
    graph = random_graph(nodes=200, seed=7)
    part = random_partition(graph.num_nodes, 6, seed=7)
    led = _pretrain_ledger(graph, part, hops)
    c_sum, nv = _formula_counts(graph, part)
    n, d, k = graph.num_nodes, graph.num_features, part.num_clients
    # Values alone are Appendix F: 1-hop Σ|c(N_i)|d + Nd, 2-hop Σ|c(N_i)|d + Σ_k|N(V_k)|d.
    values = c_sum * d + (n * d if hops == 1 else nv * d)
    ids_and_counts = c_sum * I64 + k * I64
    degrees = 0 if hops == 1 else n * I64 + (nv - n) * I64
    assert led.bytes("pretrain") == values * F32 + ids_and_counts + degrees


def test_zero_hop_sends_nothing_before_training():
    graph = random_graph(nodes=60, seed=8)
    part = random_partition(graph.num_nodes, 3, seed=8)
    assert _pretrain_ledger(graph, part, hops=0).bytes("pretrain") == 0


def test_training_round_bytes_are_model_size_per_client():
    graph = random_graph(nodes=60, seed=9)
    part = random_partition(graph.num_nodes, 3, seed=9)
    server = fedgcn_federation(graph, part, hops=2, rounds=1, eval_every=1)
    server.pretrain()
    list(server.rounds())
    model_bytes = sum(v.numel() * v.element_size() for v in server.weights.values())
    led = server.runtime.ledger
    # down: weights + local_steps + round number; up: weights + num_train + loss
    assert led.bytes("train", "down") == 3 * (model_bytes + 2 * I64)
    assert led.bytes("train", "up") == 3 * (model_bytes + 2 * I64)


class _Echo:
    def __init__(self):
        self.kept = None

    @handles("test.keep", schema={"t": Arr(("float32",))})
    def keep(self, t):
        self.kept = t
        t.add_(1)  # mutate what it received
        return {"t": t}


def test_runtime_copies_payloads_and_counts_both_directions():
    client = _Echo()
    rt = LocalRuntime({0: client})
    sent = torch.zeros(4, dtype=torch.float32)
    out = rt.call("test.keep", {"t": sent}, phase="train")
    assert torch.equal(sent, torch.zeros(4))  # the server's tensor is untouched
    out[0]["t"].add_(5)
    assert torch.equal(client.kept, torch.ones(4))  # the client's copy is its own
    assert rt.ledger.bytes("train", "down") == 16 and rt.ledger.bytes("train", "up") == 16


def test_payload_sizes():
    assert payload_nbytes({"a": torch.zeros(3, 2), "b": [1, 2.0], "c": None, "d": True}) == 24 + 16 + 1
    assert payload_nbytes(np.zeros(5, dtype=np.int32)) == 20
    x = {"x": [torch.ones(2)]}
    y = copy_payload(x)
    assert y["x"][0].data_ptr() != x["x"][0].data_ptr()
