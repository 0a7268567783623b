"""The stacked execution of GLASU's in-process clients (glasu/batched.py) and the pieces it is
built from: it is the clients' own computation — the same node sets, messages and bytes, and
the same losses and weights up to float rounding — only run as one."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fedgl.algorithms.glasu.blocks import RowSparse, build_block, is_simple, sampled_block
from fedgl.data.sampling import CSRGraph, expand_nodes
from tests.glasu_helpers import glasu_federation, glasu_params
from tests.helpers import random_graph


def _sparse_graph(nodes: int = 150, seed: int = 3):
    """An SBM graph whose features are ~85% zeros (bag-of-words-like: the sparse input path)."""
    g = random_graph(nodes=nodes, seed=seed)
    keep = torch.rand(g.x.shape, generator=torch.Generator().manual_seed(seed)) < 0.15
    return dataclasses.replace(g, x=g.x * keep)


def test_grouped_expansion_equals_one_call_per_group():
    graphs = [random_graph(nodes=60, seed=s) for s in range(3)]
    n = 60
    csrs = [CSRGraph.from_edge_index(g.edge_index, n) for g in graphs]
    union = CSRGraph.from_edge_index(
        torch.cat([g.edge_index + m * n for m, g in enumerate(graphs)], dim=1), 3 * n)
    seeds = [torch.tensor([3, 17, 40]), torch.tensor([5]), torch.tensor([0, 1, 2, 59])]
    for fanout in (2, 1000, -1):  # 1000: no node has more neighbours (group draws no keys)
        alone = [expand_nodes(c, s, fanout, torch.Generator().manual_seed(m))[0]
                 for m, (c, s) in enumerate(zip(csrs, seeds, strict=True))]
        gens = [torch.Generator().manual_seed(m) for m in range(3)]
        ids, counts = expand_nodes(union, torch.cat([s + m * n for m, s in enumerate(seeds)]),
                                   fanout, group_size=n, group_counts=[3, 1, 4], generators=gens)
        assert counts == [a.numel() for a in alone]
        for m, part in enumerate(torch.split(ids, counts)):
            assert torch.equal(part - m * n, alone[m])
            assert torch.equal(part[: seeds[m].numel()] - m * n, seeds[m])  # seeds first


def test_sampled_blocks_and_row_gathers_equal_the_reference():
    g = random_graph(nodes=80, seed=5)
    csr = CSRGraph.from_edge_index(g.edge_index, 80)
    assert is_simple(csr)
    dst = torch.tensor([7, 3, 50])
    src = expand_nodes(csr, dst, 3, torch.Generator().manual_seed(0))[0]
    ref, fast = build_block(g.edge_index, 80, src, dst), sampled_block(csr, src, dst, True)
    assert torch.equal(ref.adj.indices(), fast.adj.indices())
    assert torch.equal(ref.adj.values(), fast.adj.values())
    assert torch.equal(ref.dst_in_src, fast.dst_in_src)
    x = _sparse_graph(nodes=40).x
    rows = torch.tensor([9, 0, 33, 9])
    assert torch.equal(RowSparse.from_dense(x).gather(rows).to_dense(), x[rows])


@pytest.mark.parametrize("backbone,agg,q", [("gcnii", "2", 2), ("gcnii", "4", 1),
                                             ("gcn", "2", 3)])
def test_stacked_clients_equal_the_clients_one_by_one(backbone, agg, q):
    graph = _sparse_graph()
    p = glasu_params(graph, clients=3, agg=agg, stale_steps=q, backbone=backbone, hidden=8,
                     dropout=0.5, optimizer="adam", lr=0.01)
    one, stacked = glasu_federation(graph, p), glasu_federation(graph, p, batch=True)
    for _ in range(3):
        a, b = one.train_round(), stacked.train_round()
        assert b["train_loss"] == pytest.approx(a["train_loss"], abs=1e-6)
    assert "glasu" in stacked.runtime._batch_cache  # the stacked path did run
    for m in range(3):
        ca, cb = one.runtime.local_client(m), stacked.runtime.local_client(m)
        assert all(torch.equal(ca.sets[j], cb.sets[j]) for j in range(p.layers + 1))
        for k, v in ca.parameters_dict().items():
            assert torch.allclose(v, cb.parameters_dict()[k], atol=1e-6), k
    la, lb = one.runtime.ledger, stacked.runtime.ledger
    assert la.bytes("train") == lb.bytes("train") and la.messages("train") == lb.messages("train")
    assert one.evaluate()["test_acc"] == pytest.approx(stacked.evaluate()["test_acc"], abs=1e-6)


def test_one_sort_by_target_then_key_equals_the_two_pass_sort():
    from fedgl.data.sampling import _by_target_then_key

    gen = torch.Generator().manual_seed(1)
    target = torch.sort(torch.randint(0, 50, (2000,), generator=gen)).values
    for keys in (torch.rand(2000, generator=gen, dtype=torch.float64),
                 torch.randint(0, 4, (2000,), generator=gen).double() / 4):  # many exact ties
        two_pass = torch.argsort(keys)
        two_pass = two_pass[torch.argsort(target[two_pass], stable=True)]
        assert torch.equal(_by_target_then_key(target, keys, 50), two_pass)
