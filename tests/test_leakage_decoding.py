"""The leakage report never understates: value-level decoding of the released rows, and the
server's view, checked on a hand-built graph (exact counts) and on Cora against an attack
written here, run on the rows the clients really received."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from fedgl.api import load_graph
from fedgl.config import Config
from fedgl.data.graph import GraphData, clean_edge_index
from fedgl.data.partition import Partition
from fedgl.data.shards import make_partition
from fedgl.privacy.leakage import leakage_report, server_view
from fedgl.privacy.value_decoding import decode, feature_alphabet
from tests.helpers import fedgcn_federation

X_HAND = [[1, 0, 1, 0], [0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 1, 1]]


def _hand(edges, x=X_HAND, owner=(0, 1, 1, 1)):
    n = len(x)
    ei = torch.tensor(edges, dtype=torch.long).t()
    every = torch.ones(n, dtype=torch.bool)
    graph = GraphData("hand", torch.tensor(x, dtype=torch.float32), torch.zeros(n, dtype=torch.long),
                      clean_edge_index(ei, n), every, every.clone(), every.clone(), 2)
    return graph, Partition(np.array(owner), 2)


def _cfg(**kw):
    return Config.from_dict({"clients": 2, "hops": 1, **kw})


def test_two_remote_nodes_with_generic_scales_are_decoded():
    """0-1, 0-2, 2-3; client 0 owns node 0. Its 1-hop row holds x1/√2 + x2/√3: with
    --min-contributors 2 the row is delivered, linear algebra finds nothing (one row, two
    unknowns), and the values decode both nodes exactly (the four subset sums differ)."""
    graph, part = _hand([(0, 1), (0, 2), (2, 3)])
    rep = leakage_report(graph, part, _cfg(min_contributors=2))
    c0, c1 = rep["per_client"]
    assert c0["exact_disclosure_rows"] == 0 and c0["remote_nodes_recoverable"] == 0
    assert c0["exact_remote_nodes"] == 2
    assert c1["exact_remote_nodes"] == 0  # its rows with node 0 alone are withheld
    assert rep["total"]["exact_remote_nodes"] == 2 and rep["value_decoding"]["applicable"]
    # without the filter client 1 reads node 0 from a single row
    assert leakage_report(graph, part, _cfg())["total"]["exact_remote_nodes"] == 3


def test_equal_scales_hide_the_columns_where_the_nodes_differ():
    """0-1, 0-2 (node 3 isolated): nodes 1 and 2 have the same degree, so x1/√2 + x2/√2 cannot
    tell them apart where they differ; they differ in two columns, so neither is decoded.
    With identical features every column is 0 or 2/√2 and both are."""
    graph, part = _hand([(0, 1), (0, 2)])
    assert leakage_report(graph, part, _cfg(min_contributors=2))["total"]["exact_remote_nodes"] \
        == 0
    same = [X_HAND[0], X_HAND[1], X_HAND[1], X_HAND[3]]
    graph, part = _hand([(0, 1), (0, 2)], x=same)
    assert leakage_report(graph, part, _cfg(min_contributors=2))["total"]["exact_remote_nodes"] \
        == 2


def test_known_values_count_the_columns_a_row_gives_away_though_no_node_is_exact():
    """Counted by hand. 0-1, 0-2 (node 3 isolated), client 0 owns node 0, min contributors 2:
    client 0's one row holds x1/√2 + x2/√2 = [1, 2, 1, 0]/√2 (x1 = 0110, x2 = 1100). Neither
    node is exact (columns 0 and 2 read 1 of 2 either way), yet column 1 (2: both are 1) and
    column 3 (0: both are 0) are: 4 of the 8 remote values are known. Client 1's rows of node 0
    alone are withheld: nothing remote, nothing known."""
    graph, part = _hand([(0, 1), (0, 2)])
    rep = leakage_report(graph, part, _cfg(min_contributors=2))
    c0, c1 = rep["per_client"]
    assert c0["exact_remote_nodes"] == 0
    assert (c0["remote_values"], c0["known_values"], c0["known_values_share"]) == (8, 4, 0.5)
    assert (c1["remote_values"], c1["known_values"], c1["known_values_share"]) == (0, 0, 0.0)
    assert (rep["total"]["known_values"], rep["total"]["known_values_share"]) == (4, 0.5)
    # an exact node's values are all known: without the filter client 1 reads node 0 (4
    # values) from a single row, and client 0's row is as before
    rep = leakage_report(graph, part, _cfg())
    assert [c["known_values"] for c in rep["per_client"]] == [4, 4]
    assert rep["total"]["exact_remote_nodes"] == 1
    # the plaintext server reads every partial sum: each node alone in one of them (x0 in
    # S_0[1], x1 in S_1[1], x2 in S_1[2], x3 in S_1[3]), so all 16 values
    view = rep["server_view"]
    assert (view["values"], view["values_known"], view["values_known_share"]) == (16, 16, 1.0)


def test_three_levels_are_decoded():
    x = [[1, 0.5, 0, 0], [0.5, 1, 0, 0.5], [0, 0.5, 1, 1], [1, 1, 1, 0]]
    graph, part = _hand([(0, 1), (0, 2), (2, 3)], x=x)
    rep = leakage_report(graph, part, _cfg(min_contributors=2))
    assert rep["value_decoding"]["alphabet"] == [0.0, 0.5, 1.0]
    assert rep["per_client"][0]["exact_remote_nodes"] == 2


def test_server_view_of_the_hand_graph():
    """Plaintext: nodes 0 and 1 are alone in a partial sum (S_0[1] = x0/√3, S_1[1] = x1/√2),
    then S_1[0] and S_1[2] give x2 and x3. Mask, 1-hop: the server unmasks S[0], S[1], S[2]
    (two clients each): S[1] = x0/√3 + x1/√2 decodes both, then the others follow. With
    --min-contributors 2 only S[0] = x0/√3 + x1/√2 + x2/√3 is sent: x1 decodes, x0 and x2
    (same scale, different features) do not. HE: nothing."""
    graph, part = _hand([(0, 1), (0, 2), (2, 3)])
    plain = leakage_report(graph, part, _cfg())["server_view"]
    assert (plain["nodes_in_single_contributor_rows"], plain["nodes_exact"]) == (2, 4)
    masked = leakage_report(graph, part, _cfg(secure_sum="mask"))["server_view"]
    assert (masked["nodes_recoverable"], masked["nodes_exact"]) == (1, 4)
    ruled = leakage_report(graph, part, _cfg(secure_sum="mask", min_contributors=2))
    assert ruled["server_view"]["nodes_exact"] == 1
    assert leakage_report(graph, part, _cfg(secure_sum="he"))["server_view"]["nodes_exact"] == 0
    assert server_view(graph, part, _cfg(hops=0))["nodes_exact"] == 0


def test_decoder_leaves_large_rows_unresolved_not_guessed(monkeypatch):
    """A row of three unknown nodes with generic scales, decoded; with the enumeration bound
    below 2^3 its cells are left open and the nodes reported unresolved."""
    import fedgl.privacy.value_decoding as vd

    coef = np.array([0.5, 0.7071, 0.8660])
    x = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 1]], dtype=float)  # node x column
    values = (coef @ x)[None, :]
    indptr, members = np.array([0, 3]), np.array([0, 1, 2])
    got = decode(indptr, members, coef, values, np.array([0.0, 1.0]))
    assert got.nodes.all() and (got.levels == x).all() and not got.unresolved.any()
    monkeypatch.setattr(vd, "MAX_COMBINATIONS", 4)
    bounded = decode(indptr, members, coef, values, np.array([0.0, 1.0]))
    assert not bounded.nodes.any() and bounded.unresolved.all()


def test_a_system_above_the_decoding_bound_is_unresolved(monkeypatch):
    """Too many cells to decode: the nodes linear algebra did not find are counted unresolved,
    none guessed."""
    import fedgl.privacy.leakage as leakage

    graph, part = _hand([(0, 1), (0, 2), (2, 3)])
    monkeypatch.setattr(leakage, "MAX_DECODE_CELLS", 0)
    c0 = leakage_report(graph, part, _cfg(min_contributors=2))["per_client"][0]
    assert (c0["exact_remote_nodes"], c0["exact_unresolved"]) == (0, 2)


def test_continuous_features_are_not_decoded():
    assert feature_alphabet(np.random.default_rng(0).normal(size=(50, 4))) is None
    assert list(feature_alphabet(np.array([[0.0, 1.0], [1.0, 1.0]]))) == [0.0, 1.0]


# ------------------------------------------------------------------------------ Cora
def _closed(graph):
    nbrs = [{i} for i in range(graph.num_nodes)]
    for s, t in graph.edge_index.t().tolist():
        nbrs[t].add(s)
    return nbrs


def _simple_attack(rows, x, coef, max_unknowns=6, tol=1e-4):
    """An attack independent of the report's: whole rows ``(remote nodes, remote part)``,
    binary features. A row is decoded when, after subtracting the nodes already decoded, at
    most ``max_unknowns`` nodes are left and every column's value matches one assignment of
    them only; repeated until nothing changes. Returns {node: decoded features}."""
    decoded: dict[int, np.ndarray] = {}
    progress = True
    while progress:
        progress = False
        for nodes, value in rows:
            left = [j for j in nodes if j not in decoded]
            if not left or len(left) > max_unknowns:
                continue
            rest = value - sum((coef[j] * decoded[j] for j in nodes if j in decoded),
                               np.zeros_like(value))
            combos = np.array(list(itertools.product((0.0, 1.0), repeat=len(left))))
            sums = combos @ np.array([coef[j] for j in left])
            match = np.abs(sums[:, None] - rest[None, :]) <= tol  # combos x columns
            if not (match.sum(axis=0) == 1).all():
                continue
            pick = combos[match.argmax(axis=0)]  # columns x nodes
            for t, j in enumerate(left):
                decoded[j] = pick[:, t]
            progress = True
    return {j: v for j, v in decoded.items() if np.array_equal(v, x[j])}


@pytest.fixture(scope="module")
def cora(data_root):
    cfg = Config.from_dict({"dataset": "cora", "data_root": str(data_root), "clients": 10,
                            "hops": 2, "beta": 1.0, "seed": 0, "progress": False})
    graph = load_graph(cfg)
    return cfg, graph, make_partition(graph, cfg, cfg.seed)


@pytest.mark.parametrize("min_contributors,secure_sum", [(1, "none"), (2, "none"), (2, "mask")])
def test_cora_report_counts_at_least_what_a_simple_attack_decodes(cora, min_contributors,
                                                                   secure_sum):
    """The attack runs on each client's really received sums (minus its own part), knowing
    every row's contributors and degrees; the report's exact count is never below it."""
    cfg, graph, part = cora
    cfg = cfg.replace(min_contributors=min_contributors, secure_sum=secure_sum)
    rep = leakage_report(graph, part, cfg)
    assert rep["value_decoding"]["alphabet"] == [0.0, 1.0]
    server = fedgcn_federation(graph, part, hops=2, min_contributors=min_contributors,
                               secure_sum=secure_sum, min_client_size=1)
    server.pretrain()
    nbrs, owner = _closed(graph), part.owner
    coef = {j: len(nbrs[j]) ** -0.5 for j in range(graph.num_nodes)}
    x = graph.x.double().numpy()
    found_total = 0
    for k in range(part.num_clients):
        client = server.runtime.local_client(k)
        touched, own_part, _, _ = client._release()
        remote_part = (client.received_sums - own_part).double().numpy()
        rows = []
        for r, i in enumerate(touched.tolist()):
            remote = [j for j in nbrs[i] if owner[j] != k]
            if remote and not 0 < len(remote) < min_contributors:  # delivered
                rows.append((remote, remote_part[r]))
        found = _simple_attack(rows, x, coef)
        assert rep["per_client"][k]["exact_remote_nodes"] >= len(found)
        found_total += len(found)
    assert found_total > 0
    assert rep["total"]["exact_remote_nodes"] >= found_total
    assert rep["total"]["exact_remote_nodes"] >= rep["total"]["remote_nodes_recoverable"]
    if min_contributors == 2:  # the row filter does not stop value decoding
        assert rep["total"]["exact_disclosure_rows"] == 0
        assert found_total > rep["total"]["remote_nodes_recoverable"]


@pytest.mark.parametrize("secure_sum", ["none", "mask"])
def test_cora_server_view_counts_at_least_what_a_simple_attack_decodes(cora, secure_sum):
    """The server's rows (plaintext: each client's partial sums over its own nodes; mask: the
    full sums of rows two or more clients touch), rebuilt here in float32 from the graph."""
    cfg, graph, part = cora
    cfg = cfg.replace(secure_sum=secure_sum)
    view = server_view(graph, part, cfg)
    nbrs, owner = _closed(graph), part.owner
    coef = {j: len(nbrs[j]) ** -0.5 for j in range(graph.num_nodes)}
    x = graph.x.double().numpy()
    x32 = graph.x.numpy()
    rows = []
    for i in range(graph.num_nodes):
        clients = {int(owner[j]) for j in nbrs[i]}
        groups = [[j for j in nbrs[i] if owner[j] == k] for k in clients] \
            if secure_sum == "none" else ([sorted(nbrs[i])] if len(clients) >= 2 else [])
        for nodes in groups:
            value = sum(np.float32(coef[j]) * x32[j] for j in nodes).astype(np.float64)
            rows.append((nodes, value))
    found = _simple_attack(rows, x, coef)
    assert len(found) > 0 and view["nodes_exact"] >= len(found)
    if secure_sum == "none":
        single = {nodes[0] for nodes, _ in rows if len(nodes) == 1}
        assert view["nodes_in_single_contributor_rows"] == len(single)


def test_paper_code_one_hop_clients_receive_their_neighbours_rows():
    """1-hop in the released code's variant returns the rows of V_k ∪ N(V_k), as 2-hop does:
    the report counts those rows (and what they disclose), not only the own ones."""
    graph, part = _hand([(0, 1), (0, 2), (2, 3)])
    eq33 = leakage_report(graph, part, _cfg())
    wide = leakage_report(graph, part, _cfg(one_hop_variant="paper-code"))
    two_hop = leakage_report(graph, part, _cfg(hops=2))
    assert [c["received_rows"] for c in eq33["per_client"]] == [1, 3]
    assert [c["received_rows"] for c in wide["per_client"]] == [3, 4]
    assert wide["total"] == two_hop["total"]


def test_the_leakage_report_can_be_skipped():
    import fedgl

    small = dict(dataset="sbm", sbm_nodes=120, sbm_features=6, clients=3, rounds=1, hops=1,
                 progress=False, oracle_eval=False)
    assert "leakage" in fedgl.run(**small).repeats[0].extra
    skipped = fedgl.run(**small, leakage_report=False).repeats[0].extra
    assert "leakage" not in skipped and "privacy" in skipped
