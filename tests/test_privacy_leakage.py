"""The min-contributors rule and the exact-disclosure leakage report."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedgl
from fedgl.config import Config
from fedgl.data.partition import Partition
from fedgl.privacy.leakage import leakage_report
from tests.helpers import fedgcn_federation, graph_from_edges, random_graph, random_partition


def _path():
    """0-1-2-3-4; client 0 owns {0,1,2}, client 1 owns {3,4}.

    1-hop: row 2 (client 0) holds one remote node (3); row 3 (client 1) one remote node (2).
    2-hop adds remote rows: client 0 gets row 3 (remote nodes 3, 4: two) and client 1 gets
    row 2 (remote nodes 1, 2: two)."""
    graph = graph_from_edges([(0, 1), (1, 2), (2, 3), (3, 4)], 5, num_features=3)
    return graph, Partition(np.array([0, 0, 0, 1, 1]), 2)


def _sums(graph, part, **cfg):
    server = fedgcn_federation(graph, part, min_client_size=1, **cfg)
    server.pretrain()
    return {k: server.runtime.local_client(k).received_sums for k in (0, 1)}, server


def _own_partial(graph, part, k, hops, row):
    server = fedgcn_federation(graph, part, min_client_size=1, hops=hops)
    client = server.runtime.local_client(k)
    touched, exact, _, _ = client._release()
    return exact[(touched == row).nonzero().item()]


@pytest.mark.parametrize("secure_sum", ["none", "mask", "he"])
@pytest.mark.parametrize("hops", [1, 2])
def test_single_remote_neighbour_rows_are_dropped(hops, secure_sum):
    graph, part = _path()
    plain, _ = _sums(graph, part, hops=hops)
    ruled, server = _sums(graph, part, hops=hops, min_contributors=2, secure_sum=secure_sum)
    # Client 0, row of node 2 (local position 2): only its own part (nodes 1, 2) remains.
    assert torch.allclose(ruled[0][2], _own_partial(graph, part, 0, hops, 2), atol=1e-5)
    assert not torch.allclose(ruled[0][2], plain[0][2], atol=1e-3)
    # Client 1, row of node 3 (local position 0): only its own part (nodes 3, 4).
    assert torch.allclose(ruled[1][0], _own_partial(graph, part, 1, hops, 3), atol=1e-5)
    # Rows with no remote node are untouched.
    assert torch.allclose(ruled[0][:2], plain[0][:2], atol=1e-5)
    if hops == 2:  # remote rows with two remote nodes are kept whole
        assert torch.allclose(ruled[0][3], plain[0][3], atol=1e-5)
        assert torch.allclose(ruled[1][2], plain[1][2], atol=1e-5)
    # The remote node's features no longer reach the suppressed row at all.
    x = graph.x.clone()
    x[3] += 10
    moved, _ = _sums(graph.with_features(x), part, hops=hops, min_contributors=2,
                     secure_sum=secure_sum)
    assert torch.allclose(moved[0][2], ruled[0][2], atol=1e-5)


def test_contributor_counts_are_counted_by_the_ledger():
    graph, part = _path()
    _, plain = _sums(graph, part, hops=1)
    _, ruled = _sums(graph, part, hops=1, min_contributors=2)
    up = ruled.runtime.ledger.bytes("pretrain", "up") - plain.runtime.ledger.bytes("pretrain", "up")
    assert up == 7 * 8  # one int64 count per uploaded row (Σ|c(Ñ_i)| = 7)
    assert ruled.privacy_stats["suppressed_rows"] == 2


def test_report_on_the_path_graph():
    graph, part = _path()
    for hops, rows in ((1, [3, 2]), (2, [4, 3])):
        rep = leakage_report(graph, part, Config.from_dict({"clients": 2, "hops": hops}))
        assert [c["received_rows"] for c in rep["per_client"]] == rows
        assert [c["exact_disclosure_rows"] for c in rep["per_client"]] == [1, 1]
        assert "analysis" in rep["label"]
    ruled = leakage_report(graph, part, Config.from_dict({"clients": 2, "min_contributors": 2}))
    assert ruled["total"]["exact_disclosure_rows"] == 0
    assert ruled["total"]["rows_suppressed_by_min_contributors"] == 2


@pytest.mark.parametrize("hops", [1, 2])
def test_report_matches_a_brute_force_count(hops):
    graph = random_graph(nodes=80, seed=15)
    part = random_partition(graph.num_nodes, 4, seed=15)
    rep = leakage_report(graph, part, Config.from_dict({"clients": 4, "hops": hops}))
    owner = part.owner
    nbrs = {i: {i} for i in range(graph.num_nodes)}
    for s, t in graph.edge_index.t().tolist():
        nbrs[t].add(s)
    for k in range(4):
        own = {i for i in range(graph.num_nodes) if owner[i] == k}
        rows = own if hops == 1 else {i for i in nbrs if nbrs[i] & own}
        single = sum(1 for i in rows if sum(1 for j in nbrs[i] if owner[j] != k) == 1)
        assert rep["per_client"][k]["received_rows"] == len(rows)
        assert rep["per_client"][k]["exact_disclosure_rows"] == single


def test_every_fedgcn_result_carries_the_report():
    graph = random_graph(nodes=90, seed=16)
    res = fedgl.run(graph=graph, clients=3, rounds=1, progress=False, min_client_size=5)
    extra = res.repeats[0].extra
    assert extra["leakage"]["hops"] == 2 and len(extra["leakage"]["per_client"]) == 3
    assert extra["privacy"]["secure_sum"] == "none"


def _closed_neighbourhoods(graph):
    nbrs = {i: {i} for i in range(graph.num_nodes)}
    for s, t in graph.edge_index.t().tolist():
        nbrs[t].add(s)
    return nbrs


@pytest.mark.parametrize("min_contributors", [1, 2])
def test_recoverable_count_matches_a_rank_test_per_node(min_contributors):
    """Independent check: node j is counted iff rank([A; e_j]) == rank(A) for the client's
    received-rows system A (rows × remote nodes)."""
    graph = random_graph(nodes=70, seed=21)
    part = random_partition(graph.num_nodes, 3, seed=21)
    rep = leakage_report(graph, part, Config.from_dict(
        {"clients": 3, "hops": 2, "min_contributors": min_contributors}))
    nbrs, owner = _closed_neighbourhoods(graph), part.owner
    for k in range(3):
        own = {i for i in range(graph.num_nodes) if owner[i] == k}
        rows = [sorted(j for j in nbrs[i] if owner[j] != k) for i in sorted(nbrs) if nbrs[i] & own]
        rows = [r for r in rows if r and not 0 < len(r) < min_contributors]
        cols = sorted({j for r in rows for j in r})
        a = np.zeros((len(rows), len(cols)))
        for i, r in enumerate(rows):
            a[i, [cols.index(j) for j in r]] = 1
        base = np.linalg.matrix_rank(a)
        solvable = sum(np.linalg.matrix_rank(np.vstack([a, np.eye(len(cols))[c]])) == base
                       for c in range(len(cols)))
        assert rep["per_client"][k]["remote_nodes_recoverable"] == solvable


def test_min_contributors_does_not_stop_differencing():
    """With --min-contributors 2 no delivered row is one remote node, yet a 2-hop client solves
    the rows it really received (least squares over the messages) and gets remote nodes' exact
    features: as many as the report counts with known degree."""
    graph = random_graph(nodes=90, seed=22)
    part = random_partition(graph.num_nodes, 3, seed=22)
    rep = leakage_report(graph, part, Config.from_dict({"clients": 3, "hops": 2,
                                                        "min_contributors": 2}))
    assert rep["total"]["exact_disclosure_rows"] == 0
    server = fedgcn_federation(graph, part, hops=2, min_contributors=2, min_client_size=1)
    server.pretrain()
    nbrs, owner = _closed_neighbourhoods(graph), part.owner
    deg = {i: len(nbrs[i]) for i in nbrs}  # d̃ = degree + 1
    recovered_total = 0
    for k in range(3):
        client = server.runtime.local_client(k)
        touched, own_part, _, _ = client._release()
        remote_part = (client.received_sums - own_part).double().numpy()
        rows, rhs = [], []
        for r, i in enumerate(touched.tolist()):
            remote = sorted(j for j in nbrs[i] if owner[j] != k)
            if len(remote) >= 2:  # delivered (rows with one remote node were withheld)
                rows.append(remote)
                rhs.append(remote_part[r])
        cols = sorted({j for r in rows for j in r})
        a = np.zeros((len(rows), len(cols)))
        for i, r in enumerate(rows):
            a[i, [cols.index(j) for j in r]] = 1
        z = np.linalg.lstsq(a, np.array(rhs), rcond=None)[0]
        known_deg = set(touched.tolist())  # 2-hop: degrees of every received row's node
        exact = [j for c, j in enumerate(cols) if j in known_deg and np.allclose(
            z[c] * np.sqrt(deg[j]), graph.x[j].double().numpy(), atol=1e-4)]
        assert len(exact) <= rep["per_client"][k]["recoverable_with_known_degree"]
        recovered_total += len(exact)
    assert recovered_total == rep["total"]["recoverable_with_known_degree"] > 0
