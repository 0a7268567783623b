"""The federation boundary: a client holds only what it owns or received (DESIGN.md)."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import nn

from fedgl.data.graph import GraphData
from tests.helpers import fedgcn_federation, random_graph, random_partition


def _perturb_others(graph: GraphData, owner: np.ndarray, client: int, seed: int = 9) -> GraphData:
    x = graph.x.clone()
    others = torch.from_numpy(owner != client)
    g = torch.Generator().manual_seed(seed)
    x[others] = torch.randn(int(others.sum()), x.size(1), generator=g) * 5
    return graph.with_features(x)


def _one_step(graph, part, hops, received=None):
    """Client 0's weights after one local round from the same initial model."""
    server = fedgcn_federation(graph, part, hops=hops, dropout=0.0)
    server.pretrain()
    client = server.runtime.local_client(0)
    if received is not None:
        client.receive_sums(*received)
    sums = (client.received_sums, client.remote_deg_tilde)
    out = client.fit(server.weights, local_steps=2)["weights"]
    return out, sums


def _same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


def test_zero_hop_client_ignores_other_clients_features():
    graph = random_graph(nodes=120, seed=1)
    part = random_partition(graph.num_nodes, 4, seed=1)
    base, _ = _one_step(graph, part, hops=0)
    moved, _ = _one_step(_perturb_others(graph, part.owner, 0), part, hops=0)
    assert _same(base, moved)


def test_one_and_two_hop_clients_see_remote_features_only_through_sums():
    graph = random_graph(nodes=120, seed=2)
    part = random_partition(graph.num_nodes, 4, seed=2)
    perturbed = _perturb_others(graph, part.owner, 0)
    for hops in (1, 2):
        base, base_sums = _one_step(graph, part, hops)
        moved, moved_sums = _one_step(perturbed, part, hops)
        # The perturbation reaches client 0 (its received sums change) ...
        assert not torch.allclose(base_sums[0], moved_sums[0])
        assert not _same(base, moved)
        # ... and only through them: with the original sums injected, nothing differs.
        replay, _ = _one_step(perturbed, part, hops, received=base_sums)
        assert _same(base, replay), f"{hops}-hop client depends on remote features directly"


def _tensors(obj, seen=None):
    """Every tensor reachable from an object's attributes (containers, dataclasses, modules)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v, seen)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _tensors(v, seen)
    elif isinstance(obj, nn.Module):
        yield from obj.state_dict().values()
    elif dataclasses.is_dataclass(obj) or hasattr(obj, "__dict__"):
        if isinstance(obj, type | torch.Generator | torch.device):
            return
        yield from _tensors(vars(obj), seen)


def _has_row(t: torch.Tensor, row: torch.Tensor) -> bool:
    return t.dim() == 2 and t.size(1) == row.numel() and bool((t == row).all(1).any())


def test_no_party_holds_rows_of_nodes_it_neither_owns_nor_received():
    graph = random_graph(nodes=120, seed=3)
    part = random_partition(graph.num_nodes, 4, seed=3)
    for hops in (0, 1, 2):
        server = fedgcn_federation(graph, part, hops=hops)
        server.pretrain()
        next(server.rounds())  # one round through the runtime: batched fit and evaluate
        # (kept by the runtime: the blocks, and the labels and masks the counts need)
        assert set(server.runtime._batch_cache) == {"fit", "evaluate", "counts"}
        for k in server.runtime.client_ids:
            client = server.runtime.local_client(k)
            client.fit(server.weights, local_steps=1)  # populate every cache
            client.evaluate(server.weights)
            own = set(client.data.node_ids.tolist())
            n_own = len(own)
            allowed_rows = n_own if hops < 2 else n_own + len(client.data.remote_neighbors())
            tensors = list(_tensors(client))
            for t in tensors:
                if t.dim() == 2 and t.size(1) == graph.num_features:
                    assert t.size(0) <= allowed_rows
            for node in range(graph.num_nodes):
                if node not in own:
                    assert not any(_has_row(t, graph.x[node]) for t in tensors), \
                        f"client {k} holds raw features of remote node {node} ({hops}-hop)"
        # The server's own state (its runtime is the network, not the server) holds no
        # feature row of any node after the protocol.
        state = {k: v for k, v in vars(server).items() if k != "runtime"}
        for t in _tensors(state):
            assert not (t.dim() == 2 and t.size(1) == graph.num_features and t.size(0) > 0 and
                        any(_has_row(t, graph.x[n]) for n in range(graph.num_nodes)))


def test_client_data_contains_only_incident_edges_and_own_rows():
    graph = random_graph(nodes=90, seed=4)
    part = random_partition(graph.num_nodes, 3, seed=4)
    server = fedgcn_federation(graph, part, hops=2)
    for k in server.runtime.client_ids:
        d = server.runtime.local_client(k).data
        own = torch.from_numpy(part.nodes_of(k))
        assert torch.equal(d.node_ids, own)
        assert torch.equal(d.x, graph.x[own])
        assert bool(d.owns(d.edge_index[1]).all())
        expected = int(torch.isin(graph.edge_index[1], own).sum())
        assert d.edge_index.size(1) == expected
