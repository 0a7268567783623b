"""What FedGAT parties see (docs/fedgat.md, notes/fedgat.md §3.4).

* Boundary: a FedGAT client depends on other clients' features only through what the server
  sent it in the pre-training round; a DistGAT client not at all; the server receives every
  feature (paper, Step 1) but keeps none after the round.
* The paper's client-side privacy claim does not hold: a curious client recovers every
  neighbour's feature vector exactly from the matrices it receives (eigendecomposition of the
  M_2i(s); traces of a remote node's M_1j(s)); Vector FedGAT hands them over in K_1i's rows.
"""

from __future__ import annotations

import copy
from functools import partial

import torch

from fedgl.algorithms.fedgat import GATFedAvgServer, gat_initial_weights, scale_features
from fedgl.algorithms.fedgat.dist_gat import DistGATClient
from fedgl.algorithms.runner import build_federation
from fedgl.config import Config
from tests.helpers import random_graph, random_partition
from tests.test_boundary import _has_row, _perturb_others, _tensors
from tests.test_fedgat_protocol import fedgat_federation


def _graph64(nodes=60, seed=1):
    g = random_graph(nodes=nodes, seed=seed)
    return g.with_features(g.x.double())


def _perturbed(graph, owner):
    """Other clients' features replaced (test_boundary's perturbation, kept in float64)."""
    moved = _perturb_others(graph.with_features(graph.x.float()), owner, 0)
    return moved.with_features(moved.x.double())


def _received(client) -> dict:
    """Everything client 0 got in the pre-training round (its state after it)."""
    client._store() if client.config.fedgat_backend == "protocol" else None
    return {"rows": client.remote_rows, "edges": client.remote_edges, "x": client.remote_x,
            "store": copy.deepcopy(client.store)}


def _fit(server, received=None):
    client = server.runtime.local_client(0)
    if received is not None:
        client.fedgat_graph(received["rows"], received["edges"], received["x"])
        client.store = received["store"]
    return client.fit(server.weights, local_steps=2)["weights"]


def _same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


def test_fedgat_client_sees_remote_features_only_through_received_messages():
    graph = _graph64(seed=2)
    part = random_partition(graph.num_nodes, 3, seed=2)
    moved_graph = _perturbed(graph, part.owner)
    for backend in ("fast", "protocol"):
        base_server = fedgat_federation(graph, part, fedgat_backend=backend)
        got = _received(base_server.runtime.local_client(0))
        base = _fit(base_server)
        moved = _fit(fedgat_federation(moved_graph, part, fedgat_backend=backend))
        assert not _same(base, moved)  # the perturbation reaches client 0 ...
        replay = _fit(fedgat_federation(moved_graph, part, fedgat_backend=backend), got)
        assert _same(base, replay), f"{backend}: client 0 reads remote features directly"


def test_distgat_client_ignores_other_clients_features():
    graph = _graph64(seed=3)
    part = random_partition(graph.num_nodes, 3, seed=3)
    out = []
    for g in (graph, _perturbed(graph, part.owner)):
        cfg = Config.from_dict({"algorithm": "distgat", "clients": 3, "min_client_size": 1,
                                "progress": False})
        init = gat_initial_weights(cfg, g.num_features, g.num_classes, 0)
        server = build_federation(g, part, cfg, 0, DistGATClient,
                                  partial(GATFedAvgServer, gat_weights=init))
        out.append(server.runtime.local_client(0).fit(server.weights, local_steps=2)["weights"])
    assert _same(*out)


def test_server_receives_all_features_but_keeps_none():
    graph = _graph64(seed=4)
    part = random_partition(graph.num_nodes, 3, seed=4)
    for backend in ("fast", "protocol"):
        server = fedgat_federation(graph, part, fedgat_backend=backend)
        up = server.runtime.ledger.bytes("pretrain", "up")
        assert up >= graph.num_nodes * graph.num_features * 8  # Step 1: every feature row
        state = {k: v for k, v in vars(server).items() if k != "runtime"}
        x = scale_features(graph.x, "l2")
        for t in _tensors(state):
            assert not any(_has_row(t, x[n]) for n in range(graph.num_nodes))


def test_protocol_client_holds_no_raw_remote_row_but_fast_and_vector_clients_do():
    graph = _graph64(seed=5)
    part = random_partition(graph.num_nodes, 3, seed=5)
    x = scale_features(graph.x, "l2")
    for variant, leaks in (({"fedgat_backend": "protocol"}, False),
                           ({"fedgat_backend": "protocol", "vec_fedgat": True}, True),
                           ({"fedgat_backend": "fast"}, True)):
        server = fedgat_federation(graph, part, **variant)
        client = server.runtime.local_client(0)
        client.fit(server.weights, local_steps=1)
        tensors = list(_tensors(client))
        if variant.get("vec_fedgat"):
            tensors += [b.k1[i] for b in client.store.buckets for i in range(b.k1.size(0))]
        remote = [n for n in range(graph.num_nodes) if part.owner[n] != 0]
        held = [n for n in remote if any(_has_row(t, x[n]) for t in tensors)]
        assert bool(held) == leaks, variant


def _own_node_message(server, client_id: int = 0):
    """A node of ``client_id`` with >= 3 neighbours, and the matrices the client received."""
    client = server.runtime.local_client(client_id)
    msgs = {m["id"]: m for m in client._messages}
    owned = set(client.data.node_ids.tolist())
    for i, msg in msgs.items():
        if i in owned and msg["K1"].numel() >= 8:
            return i, msg
    raise AssertionError("no suitable node")


def test_eigendecomposition_attack_recovers_every_neighbour_exactly():
    """Notes §3.4: M_2i(s) = Σ_j h_j(s) U_j share the eigenvectors v_j of the rank-1 U_j, with
    eigenvalues h_j(s); diagonalising one random combination reveals every h_j."""
    graph = _graph64(nodes=40, seed=6)
    part = random_partition(graph.num_nodes, 2, seed=6)
    server = fedgat_federation(graph, part, fedgat_backend="protocol")
    node, msg = _own_node_message(server)
    m2, idx = msg["M2"], msg["idx2"]
    deg = msg["K1"].numel() // 2
    coeffs = torch.randn(m2.size(0), generator=torch.Generator().manual_seed(0),
                         dtype=torch.float64)
    vals, vecs = torch.linalg.eig(torch.einsum("s,sab->ab", coeffs, m2))
    keep = vals.abs().argsort(descending=True)[:deg]            # the deg non-zero eigenvalues
    v = vecs[:, keep]
    w = torch.linalg.pinv(v)
    recovered = torch.stack([torch.diagonal(w @ m2[s].to(v.dtype) @ v).real
                             for s in range(m2.size(0))], dim=1)  # [deg, S]
    x = scale_features(graph.x, "l2")
    nbrs = torch.cat([graph.edge_index[0, graph.edge_index[1] == node], torch.tensor([node])])
    truth = x[nbrs][:, idx]
    for row in truth:  # every neighbour (remote ones included) is among the recovered rows
        assert float((recovered - row).abs().max(dim=1).values.min()) < 1e-8
    remote = [int(j) for j in nbrs if part.owner[int(j)] != 0]
    assert remote, "the attacked node should have a remote neighbour"


def test_trace_attack_reveals_a_remote_nodes_features():
    """For a remote row j the client receives M_1j(s) = h_j(s) P_j with trace(P_j) = |Ñ_j|
    (a rank-|Ñ_j| projector): h_j(s) = trace(M_1j(s)) / (m / 2)."""
    graph = _graph64(nodes=40, seed=7)
    part = random_partition(graph.num_nodes, 2, seed=7)
    server = fedgat_federation(graph, part, fedgat_backend="protocol")
    client = server.runtime.local_client(0)
    x = scale_features(graph.x, "l2")
    remote_msgs = [m for m in client._messages if "M1" in m]
    assert remote_msgs
    for m in remote_msgs:
        deg = m["K1"].numel() // 2
        h = torch.zeros(graph.num_features, dtype=torch.float64)
        h[m["idx1"]] = torch.diagonal(m["M1"], dim1=1, dim2=2).sum(1) / deg
        assert torch.allclose(h, x[m["id"]], atol=1e-10)


def test_obfuscation_randomness_is_not_derived_from_the_run_seed():
    """Two federations with the same (public) seed receive different obfuscated matrices (OS
    randomness), and the client's forward pass is the same (the obfuscation cancels)."""
    graph = _graph64()
    part = random_partition(graph.num_nodes, 3, seed=1)
    a = fedgat_federation(graph, part, fedgat_backend="protocol")
    b = fedgat_federation(graph, part, fedgat_backend="protocol")
    ra, rb = _received(a.runtime.local_client(0)), _received(b.runtime.local_client(0))
    ta = [t for t in _tensors(ra["store"]) if t.dim() == 2 and t.size(0) == t.size(1) > 1]
    tb = [t for t in _tensors(rb["store"]) if t.dim() == 2 and t.size(0) == t.size(1) > 1]
    assert ta and len(ta) == len(tb)
    assert not any(torch.allclose(x, y) for x, y in zip(ta, tb, strict=True))
    for key, w in _fit(a).items():
        assert torch.allclose(w, _fit(b)[key], atol=1e-8), key
