"""The vertical setting: every client sees the same node set, each holds its own feature columns
and its own edge set (GLASU, DESIGN.md "Two settings, one boundary").

With ``X = [X_1, ..., X_M]`` (disjoint column blocks, ``d = Σ_m d_m``) and ``E_m ⊆ E``:

- **feature split** (``feature_split``): ``random`` permutes the ``d`` column ids with a seeded
  generator and cuts the permutation into ``M`` near-equal blocks (``numpy.array_split``: sizes
  differ by at most one); ``contiguous`` cuts ``0..d-1`` in order. Each block is kept sorted.
- **edge split** (``edge_share`` = s): client ``m`` keeps ``round(s · |E|)`` of the undirected
  edges, drawn without replacement by its own seeded generator, independently of the other
  clients (so edge sets may overlap, and ``∪_m E_m`` usually misses about ``(1-s)^M`` of ``E``).
  It stores both directions of every kept edge.
- **labels** (``labels``): ``all`` gives every client the labels and split masks; ``one`` gives
  them to client 0 only (GLASU appendix B.2); the others hold ``y = None`` and no masks.

The split is a set-up step: :func:`vertical_split` hands each organisation copies of its own
data, after which no client object may reach the full graph, and the server holds none of it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fedgl.data.graph import GraphData
from fedgl.errors import ConfigError, DataError

FEATURE_SPLITS = ("random", "contiguous")
LABEL_HOLDERS = ("all", "one")


@dataclass
class VerticalClientData:
    """Data owned by one client in the vertical setting.

    ``columns`` are the global ids of the feature columns held (sorted); ``x`` is
    ``[num_nodes, len(columns)]`` over the shared node set (global node ids are row indices);
    ``edge_index`` is ``[2, E_m]``, both directions of each kept undirected edge, sorted by
    (destination, source). ``y`` and the masks are ``None`` at a client without labels.
    """

    client_id: int
    num_nodes: int
    columns: Tensor
    x: Tensor
    edge_index: Tensor
    y: Tensor | None
    train_mask: Tensor | None
    val_mask: Tensor | None
    test_mask: Tensor | None
    num_classes: int

    setting = "vertical"

    @property
    def num_features(self) -> int:
        return int(self.x.size(1))

    @property
    def has_labels(self) -> bool:
        return self.y is not None

    @property
    def num_edges(self) -> int:
        """Undirected edges held."""
        return int(self.edge_index.size(1)) // 2

    def digest(self) -> str:
        """Checksum of what this client holds (columns, edges, labels), to verify a re-loaded
        shard is the one the driver split."""
        h = hashlib.sha256()
        for t in (self.columns, self.edge_index, self.y):
            if t is not None:
                h.update(t.numpy().tobytes())
        return h.hexdigest()


def validate_vertical(num_features: int, clients: int, feature_split: str, edge_share: float,
                      labels: str = "all") -> None:
    """One-line errors for split parameters that cannot work."""
    if clients < 1:
        raise ConfigError(f"clients must be at least 1 in the vertical setting (got {clients})")
    if clients > num_features:
        raise ConfigError(f"vertical setting: {clients} clients but only {num_features} feature "
                          f"columns; use --clients {num_features} or fewer")
    if feature_split not in FEATURE_SPLITS:
        raise ConfigError(f"feature_split must be one of {', '.join(FEATURE_SPLITS)} "
                          f"(got {feature_split!r})")
    if not 0.0 < edge_share <= 1.0:
        raise ConfigError(f"edge_share must be in (0, 1] (got {edge_share}); e.g. --edge-share 0.8")
    if labels not in LABEL_HOLDERS:
        raise ConfigError(f"labels must be one of {', '.join(LABEL_HOLDERS)} (got {labels!r})")


def split_features(num_features: int, clients: int, method: str = "random",
                   seed: int = 0) -> list[np.ndarray]:
    """Disjoint sorted column blocks covering ``0..num_features-1`` (see module docstring)."""
    validate_vertical(num_features, clients, method, 1.0)
    order = (np.random.default_rng(np.random.SeedSequence([seed, 0xFEA7])).permutation(num_features)
             if method == "random" else np.arange(num_features))
    return [np.sort(block).astype(np.int64) for block in np.array_split(order, clients)]


def undirected_edges(edge_index: Tensor) -> Tensor:
    """``[2, E]`` with each undirected edge once (source < destination)."""
    return edge_index[:, edge_index[0] < edge_index[1]]


def keep_edges(edge_index: Tensor, share: float, seed: int, client: int) -> Tensor:
    """Client ``client``'s seeded share of the undirected edges, both directions, sorted by
    (destination, source)."""
    und = undirected_edges(edge_index)
    n_keep = int(round(share * und.size(1)))
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xED6E, client]))
    pick = torch.from_numpy(np.sort(rng.permutation(und.size(1))[:n_keep]).astype(np.int64))
    kept = und[:, pick]
    both = torch.cat([kept, kept.flip(0)], dim=1)
    num = int(edge_index.max()) + 1 if edge_index.numel() else 1
    order = torch.argsort(both[1] * num + both[0])
    return both[:, order].contiguous()


def vertical_shard(graph: GraphData, clients: int, client: int, *, feature_split: str = "random",
                   edge_share: float = 0.8, labels: str = "all", seed: int = 0,
                   full_edges: bool = False) -> VerticalClientData:
    """One client's vertical data (copies). ``full_edges`` gives it every edge (the simulated
    centralised baseline) regardless of ``edge_share``."""
    validate_vertical(graph.num_features, clients, feature_split, edge_share, labels)
    if not 0 <= client < clients:
        raise DataError(f"client {client} out of range for {clients} clients")
    cols = split_features(graph.num_features, clients, feature_split, seed)[client]
    col_t = torch.from_numpy(cols)
    edges = (graph.edge_index.clone() if full_edges or edge_share >= 1.0
             else keep_edges(graph.edge_index, edge_share, seed, client))
    holds = labels == "all" or client == 0
    return VerticalClientData(
        client_id=client, num_nodes=graph.num_nodes, columns=col_t.clone(),
        x=graph.x[:, col_t].clone(), edge_index=edges,
        y=graph.y.clone() if holds else None,
        train_mask=graph.train_mask.clone() if holds else None,
        val_mask=graph.val_mask.clone() if holds else None,
        test_mask=graph.test_mask.clone() if holds else None,
        num_classes=graph.num_classes)


def vertical_split(graph: GraphData, clients: int, *, feature_split: str = "random",
                   edge_share: float = 0.8, labels: str = "all", seed: int = 0,
                   full_edges: bool = False) -> list[VerticalClientData]:
    """Every client's vertical data (see :func:`vertical_shard`)."""
    validate_vertical(graph.num_features, clients, feature_split, edge_share, labels)
    return [vertical_shard(graph, clients, m, feature_split=feature_split, edge_share=edge_share,
                           labels=labels, seed=seed, full_edges=full_edges)
            for m in range(clients)]


def split_stats(parts: list[VerticalClientData], graph: GraphData) -> dict:
    """What the split gave each client (for results): columns, edges, and edge coverage."""
    und = undirected_edges(graph.edge_index)
    n = graph.num_nodes
    covered = torch.zeros(0, dtype=torch.long)
    for p in parts:
        covered = torch.unique(torch.cat([covered, p.edge_index[1] * n + p.edge_index[0]]))
    return {"setting": "vertical", "clients": len(parts),
            "columns": [int(p.columns.numel()) for p in parts],
            "edges": [p.num_edges for p in parts],
            "graph_edges": int(und.size(1)),
            "union_edge_coverage": float(covered.numel() / max(1, 2 * und.size(1))),
            "label_holders": [p.client_id for p in parts if p.has_labels]}
