"""GAT clients: the shared training mechanics (:class:`GATClient`) and the FedGAT party.

A FedGAT client (Ambekar et al., Algorithm 2) computes the first GAT layer for its own nodes and
for every node its later layers need (the (L-1)-hop expansion, notes §5.12) from what it received
in the pre-training round, then runs ordinary GAT layers on the edges it knows, and trains with
FedAvg. Two backends give the same first layer:

* ``protocol``: from the obfuscation matrices (:mod:`fedgl.algorithms.fedgat.protocol`), every
  step, with the current parameters (eqs. 12, 14, 7);
* ``fast``: edge-wise polynomial attention on raw feature rows that the server sends instead
  (what the matrices encode; see docs/fedgat.md for what each backend discloses).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from fedgl.algorithms.base import GNNClient, ModelInputs
from fedgl.algorithms.fedgat.common import build_gat, cap_in_degree, scale_features
from fedgl.algorithms.fedgat.protocol import MatrixStore, VectorStore
from fedgl.config import Config
from fedgl.data.client_data import ClientData
from fedgl.federation.aggregate import State
from fedgl.federation.protocol import Any_, Arr, MapOf, Opt, Seq, Str, handles
from fedgl.models.gat import add_self_loops


@dataclass
class GATView:
    """What a GAT client's forward pass runs on, in its row space (own nodes first).

    ``x``: feature rows (None when layer 1 comes from matrices); ``edges1``: the edges layer 1
    aggregates over; ``edges_up``: the edges of layers 2..L (both with self-loops);
    ``out_rows``: rows whose outputs are used; ``subset``: rows whose layer-1 output is needed
    (None: all)."""

    x: Tensor | None
    edges1: Tensor
    edges_up: Tensor
    out_rows: Tensor
    num_rows: int
    subset: Tensor | None = None


def restrict_view(view: GATView, rows: Tensor, layers: int) -> GATView:
    """The view restricted to the receptive field of ``rows``: layer 1 only where layers 2..L
    read it, upper layers on the induced edges; outputs at ``rows`` are unchanged."""
    keep = torch.zeros(view.num_rows, dtype=torch.bool, device=rows.device)
    keep[rows] = True
    src, dst = view.edges_up
    for _ in range(layers - 1):
        keep[src[keep[dst]]] = True
    up = view.edges_up[:, keep[src] & keep[dst]]
    e1 = view.edges1[:, keep[view.edges1[1]]]
    if view.x is None:  # layer 1 from matrices indexed by row: keep the row space
        return GATView(None, e1, up, rows, view.num_rows, keep.nonzero().flatten())
    # feature rows: keep only those layer 1 reads, renumbered in order
    need = keep.clone()
    need[e1[0]] = True
    idx = need.nonzero().flatten()
    new = torch.full((view.num_rows,), -1, dtype=torch.long, device=rows.device)
    new[idx] = torch.arange(idx.numel(), device=rows.device)
    return GATView(view.x[idx], new[e1], new[up], new[rows], int(idx.numel()),
                   new[keep.nonzero().flatten()])


class GATClient(GNNClient):
    """A client training a GAT (exact, or with FedGAT's polynomial first layer) with FedAvg.

    Local optimiser: SGD (``lr``, ``weight_decay``), or Adam (FedGAT appendix C), whose moment
    estimates stay with the client across rounds (the model is loaded into the same parameters
    each round)."""

    approximate = False

    def __init__(self, data: ClientData, config: Config, seed: int) -> None:
        super().__init__(data, config, seed)
        self.x_own = scale_features(data.x, config.gat_features)
        self.model = build_gat(config, data.num_features, data.num_classes,
                               self.approximate).to(self.device)
        if data.x.dtype == torch.float64:
            self.model = self.model.double()
        self._opt: torch.optim.Optimizer | None = None
        self._view: GATView | None = None
        self._train_view_cache: GATView | None = None

    # ----------------------------------------------------------------- views
    def view(self) -> GATView:
        """The full view (built once by :meth:`build_view`, moved to the device)."""
        if self._view is None:
            v = self.build_view()
            to = lambda t: None if t is None else t.to(self.device)  # noqa: E731
            self._view = GATView(to(v.x), to(v.edges1), to(v.edges_up), to(v.out_rows),
                                 v.num_rows, to(v.subset))
        return self._view

    @abstractmethod
    def build_view(self) -> GATView:
        """This client's full view: features or layer-1 matrices, edges, output rows."""

    def model_inputs(self) -> ModelInputs:
        v = self.view()
        return ModelInputs(v.x if v.x is not None else torch.zeros(v.num_rows, 0), v.edges_up,
                           None, v.out_rows)

    def _train_view(self) -> GATView:
        if self._train_view_cache is None:
            train_rows = self.view().out_rows[self._masks["train"]]
            self._train_view_cache = restrict_view(self.view(), train_rows, self.config.layers)
        return self._train_view_cache

    def first_layer(self, view: GATView) -> Tensor:
        return self.model.first_layer(view.x, view.edges1)

    def forward_view(self, view: GATView) -> Tensor:
        h = self.first_layer(view)
        return self.model.upper(h, view.edges_up, generator=self.generator,
                                out_rows=view.out_rows)

    def _local_edges(self) -> Tensor:
        """In-edges of own nodes (global ids), degree-capped as configured."""
        return cap_in_degree(self.data.edge_index, self.config.fedgat_max_degree, self.seed)

    # ----------------------------------------------------------------- training
    def _optimizer(self) -> torch.optim.Optimizer:
        """SGD, or Adam whose moment estimates stay with the client across rounds."""
        cfg = self.config
        if cfg.gat_optimizer == "sgd":
            return torch.optim.SGD(self.model.parameters(), lr=cfg.lr,
                                   weight_decay=cfg.weight_decay)
        if self._opt is None:
            self._opt = torch.optim.Adam(self.model.parameters(), lr=cfg.lr,
                                         weight_decay=cfg.weight_decay)
        return self._opt

    def load_weights(self, weights: State) -> None:
        self._held = None   # replaced before it was ever read
        ref = self.model.state_dict()
        self.model.load_state_dict({k: v.to(device=self.device, dtype=ref[k].dtype)
                                    for k, v in weights.items()})

    def _train_forward(self) -> Callable[[], Tensor]:
        view = self._train_view()
        return lambda: self.forward_view(view)

    @classmethod
    def fit_many(cls, clients: list[GATClient], weights: State, local_steps: int,
                 round: int = 1, *, cache: dict | None = None) -> list[dict] | None:
        """Every client's :meth:`fit` as one batched computation (in-process clients that start
        from the same model), or None where that would not reproduce ``fit``
        (:mod:`.batched`)."""
        from fedgl.algorithms.fedgat.batched import can_fit_together, fit_together

        if not can_fit_together(clients):
            return None
        return fit_together(clients, weights, local_steps, round, cache)

    @classmethod
    def _predict_many(cls, clients: list[GATClient], weights: State,
                      cache: dict | None = None) -> list[Tensor] | None:
        """One forward pass over the union of the clients' views (feature rows only: the
        protocol backend's layer 1 comes from per-client matrix stores)."""
        from fedgl.algorithms.batched import BlockInput, predict_union

        if any(c.view().x is None for c in clients):
            return None

        def block_input(c: GATClient) -> BlockInput:
            v = c.view()
            return BlockInput(v.x, {"edges1": v.edges1, "edges_up": v.edges_up}, v.out_rows,
                              c._y)

        def run(model: torch.nn.Module, b) -> Tensor:
            h = model.first_layer(b.x_all, b.edges["edges1"])
            return model.upper(h, b.edges["edges_up"], out_rows=b.out_rows)

        key = tuple(id(c.view()) for c in clients)
        return predict_union(clients, weights, key, block_input, run, cache)

    @torch.no_grad()
    def predict(self, weights: State) -> Tensor:
        self.load_weights(weights)
        self.model.eval()
        return self.forward_view(self.view())


class FedGATClient(GATClient):
    """A FedGAT party: owns its :class:`ClientData`; after pre-training also the rows the server
    sent for the nodes its layers need (matrices, or feature rows with the ``fast`` backend)."""

    approximate = True

    def __init__(self, data: ClientData, config: Config, seed: int) -> None:
        super().__init__(data, config, seed)
        self.remote_rows: Tensor | None = None      # sorted global ids of non-owned rows
        self.remote_edges: Tensor | None = None     # edges into non-owned rows (global ids)
        self.remote_x: Tensor | None = None         # fast backend: their feature rows
        self._messages: list[dict] = []
        self.store: MatrixStore | VectorStore | None = None

    # ----------------------------------------------------------------- pre-training round
    @handles("fedgat.upload", phases=("pretrain",))
    def fedgat_upload(self) -> dict:
        """Step 1 (paper §4): the client's node ids, their (scaled) features, and the edges
        incident to them (the server builds Ñ_i from everyone's edges)."""
        return {"ids": self.data.node_ids.clone(), "x": self.x_own.clone(),
                "edge_index": self.data.edge_index.clone()}

    @handles("fedgat.graph", phases=("pretrain",), optional=("x",), schema={
        "rows": Arr(("int64",), ndim=1), "edge_index": Arr(("int64",), ndim=2, rows=2),
        "x": Opt(Arr(ndim=2))})
    def fedgat_graph(self, rows: Tensor, edge_index: Tensor, x: Tensor | None = None) -> None:
        """The remote rows this client's layers need, the edges into those of them it must run
        a layer on, and (``fast``) their feature rows."""
        self.remote_rows, self.remote_edges, self.remote_x = rows, edge_index, x
        self._messages, self.store = [], None
        self._view = self._train_view_cache = None

    @handles("fedgat.matrices", phases=("pretrain",),
             schema={"nodes": Seq(MapOf(Str(max_len=64), Any_()))})
    def fedgat_matrices(self, nodes: list[dict]) -> None:
        """Step 2's per-node matrices (several calls; see :mod:`.protocol`)."""
        self._messages.extend(nodes)
        self.store = None
        self._view = self._train_view_cache = None

    # ----------------------------------------------------------------- forward
    def _row_of(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """(row of each id, whether the id is a row at all)."""
        n_own = self.data.num_nodes
        rows = torch.full_like(ids, -1)
        own = self.data.owns(ids)
        rows[own] = self.data.global_to_local(ids[own])
        rem = self.remote_rows
        if rem is not None and rem.numel():
            pos = torch.searchsorted(rem, ids).clamp(max=rem.numel() - 1)
            hit = ~own & (rem[pos] == ids)
            rows[hit] = n_own + pos[hit]
        return rows, rows >= 0

    def build_view(self) -> GATView:
        if self.remote_rows is None:
            raise RuntimeError("FedGAT client used before the pre-training round")
        n = self.data.num_nodes + self.remote_rows.numel()
        edges = torch.cat([self._local_edges(), self.remote_edges], dim=1)
        rows, known = self._row_of(edges.flatten())
        rows = rows.view(2, -1)
        edges = add_self_loops(rows[:, known.view(2, -1).all(0)], n)
        out_rows = torch.arange(self.data.num_nodes)
        if self.config.fedgat_backend == "fast":
            x = torch.cat([self.x_own, self.remote_x.to(self.x_own.dtype)])
            return GATView(x, edges, edges, out_rows, n)
        return GATView(None, edges, edges, out_rows, n)

    def _store(self) -> MatrixStore | VectorStore:
        if self.store is None:
            if not self._messages:
                raise RuntimeError("FedGAT protocol client has no matrices; run pre-training")
            ids = torch.tensor([m["id"] for m in self._messages])
            rows, _ = self._row_of(ids)
            row_of = dict(zip(ids.tolist(), rows.tolist(), strict=True))
            d = self.data.num_features
            n = self.data.num_nodes + self.remote_rows.numel()
            if self.config.vec_fedgat:
                self.store = VectorStore(self._messages, row_of, d, n)
            else:
                own = {int(i): self.x_own[r] for i, r in zip(ids.tolist(), rows.tolist(),
                                                              strict=True)
                       if r < self.data.num_nodes}
                self.store = MatrixStore(self._messages, row_of, own, d, n)
            self._messages = []
        return self.store

    def first_layer(self, view: GATView) -> Tensor:
        if self.config.fedgat_backend == "fast":
            return super().first_layer(view)
        return self._store().first_layer(self.model.first, view.subset)
