"""Many in-process clients' local training as one computation (a simulation speed-up).

With the local runtime every client's ``fit`` is a few SGD steps on a small graph, and a step
is dozens of small kernels whose fixed cost is paid once per client. When K clients start a
round from the same global model, their local steps can be taken at once:

* their inputs are laid side by side as one block-diagonal graph (client k's rows at an offset;
  no edge joins two blocks);
* every parameter is stacked to ``[K, ...]`` (row k is client k's copy): a layer multiplies each
  client's rows by its own weights, and each edge uses its own client's parameters;
* the loss is ``Σ_k mean_k(NLL)``: the blocks do not interact, so one backward pass gives each
  client exactly the gradient of its own loss, and SGD (elementwise) moves each row as the
  client's own optimiser would.

Each client ends the round with the weights it would have reached alone, up to float summation
order (tests/test_batched_clients.py, tests/test_fedgat_batched.py). Dropout masks come from
each client's own generator in the order of its own ``fit``. Nothing crosses the federation
boundary here: the runtime still counts one ``fit`` message each way per client.

Evaluation is simpler: every client scores the same global model, so one eval-mode forward
pass of that model over the union of their inputs gives every client's predictions
(:func:`predict_union`).

This module holds the model-independent part (:class:`Blocks`, :func:`fit_stacked`,
:func:`predict_union`) and the GCN training step (its gradient written out, :func:`gcn_step`);
the GAT training forward (through autograd) is in :mod:`fedgl.algorithms.fedgat.batched`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from fedgl.algorithms.base import client_seed
from fedgl.federation.aggregate import State
from fedgl.models.base import SPARSE_INPUT_DENSITY, dropout, scatter_sum, sparse_rows
from fedgl.models.gcn import GCN, edges_into

Forward = Callable[[dict[str, Tensor], "Blocks", Sequence[torch.Generator]], Tensor]
#: one local step's loss and gradients: ``(params, blocks, generators, 1 / n_k) -> K losses``
Step = Callable[[dict[str, Tensor], "Blocks", Sequence[torch.Generator], Tensor], Tensor]


@dataclass
class BlockInput:
    """One client's input: rows, named edge sets (row indices), optional edge weights, and the
    rows whose outputs are used with their labels ``y`` (the training nodes when training, all
    own nodes when evaluating)."""

    x: Tensor
    edges: dict[str, Tensor]
    out_rows: Tensor
    y: Tensor
    edge_weight: Tensor | None = None


class Blocks:
    """The clients' inputs as one block-diagonal graph; client k's rows are contiguous."""

    def __init__(self, inputs: Sequence[BlockInput]) -> None:
        self.k = len(inputs)
        self.row_sizes = [int(b.x.size(0)) for b in inputs]
        self.total = sum(self.row_sizes)
        offsets = torch.tensor([0] + self.row_sizes[:-1]).cumsum(0).tolist()
        dev = inputs[0].x.device
        self.client_of = torch.cat([torch.full((n,), k, dtype=torch.long)
                                    for k, n in enumerate(self.row_sizes)]).to(dev)
        self.x = [b.x for b in inputs]
        self._x_all: Tensor | None = None
        self._distinct: tuple[Tensor, Tensor] | None = None
        self._distinct_sparse: tuple[Tensor, Tensor] | None = None
        self._own_columns: dict[int, Tensor] = {}
        self._out_edges: tuple[tuple[Tensor, Tensor | None] | None] | None = None
        self._block_diagonal: tuple[tuple[Tensor, Tensor] | None] | None = None
        self.edges = {name: torch.cat([b.edges[name] + o
                                       for b, o in zip(inputs, offsets, strict=True)], 1)
                      for name in inputs[0].edges}
        weights = [b.edge_weight for b in inputs]
        self.edge_weight = None if weights[0] is None else torch.cat(weights)
        self.out_rows = torch.cat([b.out_rows + o for b, o in zip(inputs, offsets, strict=True)])
        self.out_sizes = [int(b.out_rows.numel()) for b in inputs]
        self.y = torch.cat([b.y for b in inputs])
        self.num_train = [int(b.y.numel()) for b in inputs]
        self.out_client = torch.cat([torch.full((n,), k, dtype=torch.long)
                                     for k, n in enumerate(self.num_train)]).to(dev)

    @property
    def x_all(self) -> Tensor:
        """All clients' input rows in union order (concatenated once, then kept)."""
        if self._x_all is None:
            self._x_all = torch.cat(self.x)
        return self._x_all

    def distinct_x(self) -> tuple[Tensor, Tensor]:
        """``(rows, index)`` with ``x_all == rows[index]`` bit for bit, computed once: clients
        that hold the same received row (a node in several clients' neighbourhoods) share one
        copy of it. Rows are grouped by a 64-bit hash of their bits (in chunks: a sort of the
        whole matrix would double the memory), and every row is then compared with its group's
        first row bit for bit; should any hash collide, every row stays its own."""
        if self._distinct is None:
            # client by client: the union of the inputs (Cora's ten clients: 155 MB) is never
            # put together; the hashes, groups and rows are those of the union's
            bits = [_row_bits(x) for x in self.x]
            step = max(1, (1 << 18) // max(bits[0].shape[1], 1))
            _, first, index = np.unique(np.concatenate([_row_hashes(b, step) for b in bits]),
                                        return_index=True, return_inverse=True)
            index = index.reshape(-1)
            rep = first[index]
            same = all(bool(np.array_equal(_take_rows(bits, np.arange(a, min(a + step, self.total))),
                                           _take_rows(bits, rep[a:a + step])))
                       for a in range(0, self.total, step))
            self._distinct = ((_take_rows(self.x, first), torch.from_numpy(index)) if same
                              else (self.x_all, torch.arange(self.total)))
        return self._distinct

    def distinct_x_for_linear(self) -> tuple[Tensor, Tensor]:
        """:meth:`distinct_x` with its rows in CSR form where they are sparse
        (:func:`~fedgl.models.base.sparse_rows`), for a first layer that only multiplies them;
        computed once."""
        if self._distinct_sparse is None:
            rows, index = self.distinct_x()
            self._distinct_sparse = (sparse_rows(rows), index)
        return self._distinct_sparse

    def own_columns(self, width: int) -> Tensor:
        """``[rows, width]``: row r's columns ``k·width … k·width + width − 1`` (k its client) in
        a layout with every client's ``width`` outputs side by side; computed once a width."""
        if width not in self._own_columns:
            self._own_columns[width] = (self.client_of.unsqueeze(1) * width
                                        + torch.arange(width, device=self.client_of.device))
        return self._own_columns[width]

    def sparse_block_diagonal(self) -> tuple[Tensor, Tensor] | None:
        """The inputs as one block-diagonal CSR matrix ``D`` (``[rows, K · width]``: row r of
        client k holds its features in columns ``k·width …``) and ``Dᵀ`` (CSR), where they are
        sparse (:func:`~fedgl.models.base.sparse_rows`'s bound) and on the CPU; else None.
        Computed once: with ``W`` the K weights stacked ``[K · width, out]``, ``D W`` is every
        client's ``H_k W_kᵀ`` and ``Dᵀ G`` every client's ``G_kᵀ H_k`` (transposed), one sparse
        product each."""
        if self._block_diagonal is None:
            self._block_diagonal = (self._build_block_diagonal(),)
        return self._block_diagonal[0]

    def _build_block_diagonal(self) -> tuple[Tensor, Tensor] | None:
        first = self.x[0]
        # the density counted per client: no dense union of inputs that stay dense
        if first.dim() != 2 or first.device.type != "cpu" or not first.is_floating_point() \
                or self.total == 0 or sum(int(torch.count_nonzero(x)) for x in self.x) \
                > SPARSE_INPUT_DENSITY * sum(x.numel() for x in self.x):
            return None
        width = first.size(1)
        with warnings.catch_warnings():   # CSR support is "beta" on every conversion
            warnings.simplefilter("ignore", UserWarning)
            csr = torch.cat(self.x).to_sparse_csr()
            crow, values = csr.crow_indices(), csr.values()
            row = torch.repeat_interleave(torch.arange(self.total), crow.diff())
            col = csr.col_indices() + self.client_of[row] * width
            shape = (self.total, self.k * width)
            d = torch.sparse_csr_tensor(crow, col, values, shape,
                                        check_invariants=False)  # valid by construction
            dt = torch.sparse_coo_tensor(torch.stack([col, row]), values,
                                         shape[::-1]).coalesce().to_sparse_csr()
        return d, dt

    def out_edges(self, name: str = "edge_index") -> tuple[Tensor, Tensor | None] | None:
        """``(edge_index, edge_weight)``: the edges whose target is one of ``out_rows``, in
        their order, targets renumbered by position in ``out_rows``; for a last layer that sums
        only the rows it returns. None where ``out_rows`` repeats a row. Computed once."""
        if self._out_edges is None:
            self._out_edges = (edges_into(self.out_rows, self.edges[name], self.edge_weight,
                                          self.total),)
        return self._out_edges[0]

    def split(self, h: Tensor) -> tuple[Tensor, ...]:
        """Union rows -> each client's rows."""
        return h.split(self.row_sizes)


def _take_rows(parts: Sequence[Any], rows: np.ndarray) -> Any:
    """``cat(parts)[rows]`` (torch tensors or numpy arrays) without the concatenation."""
    ends = np.cumsum([len(p) for p in parts])
    owner = np.searchsorted(ends, rows, side="right")
    first = parts[0]
    if isinstance(first, Tensor):
        out = first.new_empty((len(rows),) + tuple(first.shape[1:]))
    else:
        out = np.empty((len(rows),) + first.shape[1:], dtype=first.dtype)
    for k, part in enumerate(parts):
        at = np.flatnonzero(owner == k)
        if len(at):
            local = rows[at] - (ends[k] - len(part))
            if isinstance(part, Tensor):
                out[torch.from_numpy(at)] = part[torch.from_numpy(local)]
            else:
                out[at] = part[local]
    return out


def _row_bits(x: Tensor) -> np.ndarray:
    """The rows' bit patterns as unsigned integers (a view: no copy)."""
    kind = {2: np.uint16, 4: np.uint32, 8: np.uint64}[x.element_size()]
    return x.detach().contiguous().numpy().view(kind)


def _row_hashes(bits: np.ndarray, step: int) -> np.ndarray:
    """A 64-bit hash of each row (``Σ_c bits[r, c] · a_c`` mod 2^64, fixed odd ``a_c``),
    ``step`` rows at a time."""
    if not len(bits):
        return np.zeros(0, np.uint64)
    coef = np.random.default_rng(0).integers(1, 1 << 62, bits.shape[1],
                                             dtype=np.uint64) | np.uint64(1)
    return np.concatenate([(bits[a:a + step].astype(np.uint64) * coef).sum(axis=1,
                                                                            dtype=np.uint64)
                           for a in range(0, len(bits), step)])


def per_client_linear(parts: Sequence[Tensor], w: Tensor) -> Tensor:
    """``cat_k(parts[k] @ w[k]ᵀ)``. A loop of K plain matmuls beats a padded ``bmm`` on CPU,
    and ``unbind``'s backward stacks the K gradients once (``w[k]``'s would zero-fill K
    ``[K, ...]`` buffers)."""
    return torch.cat([h @ wk.t() for h, wk in zip(parts, w.unbind(0), strict=True)])


#: The most multiply-adds for which a layer runs its K clients' products as one product with
#: every client's weights side by side (K times the arithmetic, one kernel instead of K): Cora's
#: 16 → 7 output layer (0.8 M) takes it; its 1,433 → 16 input layer (172 M) keeps K products.
SIDE_BY_SIDE_WORK = 1 << 22


def _side_by_side(blocks: Blocks, out: int, fan_in: int) -> bool:
    return blocks.total * blocks.k * out * fan_in <= SIDE_BY_SIDE_WORK


def sparse_products(blocks: Blocks, out: int, fan_in: int) -> bool:
    """Whether a ``fan_in → out`` layer on the clients' own inputs multiplies them as one
    block-diagonal CSR product (:class:`ClientLinear`)."""
    return not _side_by_side(blocks, out, fan_in) and blocks.sparse_block_diagonal() is not None


class ClientLinear:
    """``H ↦ H W_kᵀ`` on each client's rows (``w`` stacked ``[K, out, in]``) with its two
    gradients, for a step that writes its backward out (:func:`gcn_step`).

    A narrow layer (``rows · K · out · in`` at most :data:`SIDE_BY_SIDE_WORK`) multiplies all
    rows by all K weights side by side, ``H [W_1; …; W_K]ᵀ``, and keeps each row's own client's
    ``out`` columns; its gradients go through the same side-by-side layout, with ``G`` placed in
    each row's own columns (zeros elsewhere): ``∂W = G_sideᵀ H`` and ``∂H = G_side [W_1; …; W_K]``.
    A wide one loops over the clients (``per_client_linear``; ``∂W_k = G_kᵀ H_k``), except on
    the clients' own inputs where these are sparse (FedGCN's received rows on Cora: 7 %
    non-zero): there both products are one block-diagonal CSR product
    (:meth:`Blocks.sparse_block_diagonal`), about a third of the K dense products' time on Cora's
    ten clients (0.17 against 0.46 ms forward, 0.15 against 0.47 ms for the weight gradient)."""

    def __init__(self, blocks: Blocks, w: Tensor) -> None:
        self.blocks, self.w = blocks, w
        _, self.out, self.fan_in = w.shape
        self.side_by_side = _side_by_side(blocks, self.out, self.fan_in)

    def _sparse(self, h: Sequence[Tensor] | Tensor) -> tuple[Tensor, Tensor] | None:
        """The clients' own sparse inputs as one block-diagonal CSR product
        (:meth:`Blocks.sparse_block_diagonal`), where these are its inputs and it applies."""
        if h is not self.blocks.x or self.side_by_side:
            return None
        return self.blocks.sparse_block_diagonal()

    def _whole(self, h: Sequence[Tensor] | Tensor) -> Tensor:
        if isinstance(h, Tensor):
            return h
        return self.blocks.x_all if h is self.blocks.x else torch.cat(list(h))

    def _parts(self, h: Sequence[Tensor] | Tensor) -> Sequence[Tensor]:
        return self.blocks.split(h) if isinstance(h, Tensor) else h

    def _stacked(self) -> Tensor:
        return self.w.reshape(-1, self.fan_in)

    def forward(self, h: Sequence[Tensor] | Tensor) -> Tensor:
        sparse = self._sparse(h)
        if sparse is not None:
            return sparse[0] @ self.w.transpose(1, 2).reshape(-1, self.out)
        if not self.side_by_side:
            return per_client_linear(self._parts(h), self.w)
        return (self._whole(h) @ self._stacked().t()).gather(1, self.blocks.own_columns(self.out))

    def _side(self, g: Tensor) -> Tensor:
        cols = self.blocks.own_columns(self.out)
        return g.new_zeros(g.size(0), self.w.size(0) * self.out).scatter_(1, cols, g)

    def weight_grad(self, g: Tensor, h: Sequence[Tensor] | Tensor) -> Tensor:
        """``∂W_k = G_kᵀ H_k``, stacked ``[K, out, in]``."""
        sparse = self._sparse(h)
        if sparse is not None:   # in the layout :func:`fit_stacked` stores such a weight in
            return (sparse[1] @ g).view(-1, self.fan_in, self.out).transpose(1, 2)
        if self.side_by_side:
            return (self._side(g).t() @ self._whole(h)).view_as(self.w)
        return torch.stack([gk.t() @ x for gk, x in
                            zip(self.blocks.split(g), self._parts(h), strict=True)])

    def input_grad(self, g: Tensor) -> Tensor:
        """``∂H_k = G_k W_k`` on each client's rows."""
        if self.side_by_side:
            return self._side(g) @ self._stacked()
        return torch.cat([gk @ wk for gk, wk in
                          zip(self.blocks.split(g), self.w.unbind(0), strict=True)])


def per_client_dropout(h: Tensor, blocks: Blocks, p: float,
                       generators: Sequence[torch.Generator]) -> list[Tensor]:
    """Each client's rows with its own dropout mask (its own generator, its own order)."""
    parts = blocks.split(h)
    if p == 0.0:
        return list(parts)
    return [dropout(part, p, True, g) for part, g in zip(parts, generators, strict=True)]


def sgd_step(params: Sequence[Tensor], lr: float, weight_decay: float) -> None:
    """One step of ``torch.optim.SGD(params, lr, weight_decay=...)`` without momentum, as torch
    takes it on the CPU (its single-tensor form: the same operations, so the same values bit
    for bit; tests/test_gcn_layer.py). Written out because constructing a torch optimizer
    imports ``torch._dynamo``, about a second of a run's start-up."""
    with torch.no_grad():
        for p in params:
            if p.grad is None:
                continue
            grad = p.grad if weight_decay == 0 else p.grad.add(p, alpha=weight_decay)
            p.add_(grad, alpha=-lr)


def autograd_step(forward: Forward) -> Step:
    """The :data:`Step` of a stacked ``forward`` (log-probabilities of ``blocks.out_rows``):
    the loss ``Σ_k mean_k(NLL)`` and its gradient by autograd."""

    def step(params: dict[str, Tensor], blocks: Blocks, gens: Sequence[torch.Generator],
             inv_n: Tensor) -> Tensor:
        nll = F.nll_loss(forward(params, blocks, gens), blocks.y, reduction="none")
        per_client = scatter_sum(nll.double(), blocks.out_client, blocks.k) * inv_n
        per_client.sum().backward()
        return per_client.detach()

    return step


def fit_stacked(clients: Sequence[Any], weights: State, local_steps: int, round: int,
                blocks: Blocks, step: Step) -> list[dict]:
    """The SGD loop of K clients at once. ``clients`` all have training nodes; ``step`` sets
    every parameter's gradient of ``Σ_k mean_k(NLL)`` and returns the K losses
    (:func:`autograd_step` for a forward, :func:`gcn_step` for the GCN). Each client's
    generator is seeded by (seed, client, round), as in its own ``fit``."""
    first = clients[0]
    cfg = first.config
    ref = first.model.state_dict()
    wants = getattr(step, "transposed", None)   # names of weights stored transposed
    transposed = wants(blocks) if wants is not None else ()
    params = {name: _stacked(weights[name].to(device=first.device, dtype=ref[name].dtype),
                             blocks.k, name in transposed).requires_grad_()
              for name in ref}
    for c in clients:
        c.generator.manual_seed(client_seed(c.seed, c.data.client_id) + round)
    gens = [c.generator for c in clients]
    # torch's SGD runs as sgd_step on the CPU; elsewhere it may take its multi-tensor form
    opt = None if torch.device(first.device).type == "cpu" else torch.optim.SGD(
        list(params.values()), lr=cfg.lr, weight_decay=cfg.weight_decay)
    inv_n = 1.0 / torch.tensor(blocks.num_train, dtype=torch.float64, device=first.device)
    first.model.train()
    losses = []
    for _ in range(local_steps):
        for p in params.values():
            p.grad = None
        per_client = step(params, blocks, gens, inv_n)
        if opt is None:
            sgd_step(list(params.values()), cfg.lr, cfg.weight_decay)
        else:
            opt.step()
        losses.append(per_client)
    mean_loss = torch.stack(losses).mean(0).tolist()
    out = []
    for k, c in enumerate(clients):
        state = {name: t[k].detach().clone(memory_format=torch.contiguous_format).cpu()
                 for name, t in params.items()}
        if getattr(c, "keep_model", True):  # its model holds its local result, as after ``fit``
            c.hold_weights(state)
        out.append({"weights": state, "num_train": blocks.num_train[k], "loss": mean_loss[k]})
    return out


def _stacked(w: Tensor, k: int, transposed: bool) -> Tensor:
    """``w`` repeated ``[K, ...]``; ``transposed`` (a matrix): stored as ``[K, in, out]`` and
    returned as its ``[K, out, in]`` view, the layout in which a step's products and gradients
    need no transposing copy (:meth:`ClientLinear.forward` on sparse inputs). The values, and
    every elementwise update of them, are the same either way."""
    if not transposed:
        return w.unsqueeze(0).repeat(k, *([1] * w.dim()))
    return w.t().unsqueeze(0).repeat(k, 1, 1).transpose(1, 2)


def fit_many_or_idle(clients: Sequence[Any], weights: State,
                     fit_active: Callable[[list[Any]], list[dict]]) -> list[dict]:
    """Clients without training nodes return the global model unchanged (as their ``fit``
    does); the others go through ``fit_active`` together. Results in ``clients`` order."""
    active = [c for c in clients if bool(c._masks["train"].any())]
    results: dict[int, dict] = {}
    for c in clients:
        if c not in active:
            c.load_weights(weights)
            results[id(c)] = {"weights": c.get_weights(), "num_train": 0, "loss": float("nan")}
    if active:
        for c, out in zip(active, fit_active(active), strict=True):
            results[id(c)] = out
    return [results[id(c)] for c in clients]


def cached_blocks(cache: dict | None, slot: str, key: tuple,
                  build: Callable[[], Blocks]) -> Blocks:
    """The blocks kept in ``cache[slot]`` under ``key`` (the identities of the clients' cached
    inputs, which change only when a pre-training round re-runs), built on a miss. The cache
    belongs to the runtime that hosts the clients (it holds all of them anyway), never to a
    client; None: build every time."""
    if cache is None:
        return build()
    cached = cache.get(slot)
    if cached is None or cached[0] != key:
        cached = cache[slot] = (key, build())
    return cached[1]


@torch.no_grad()
def predict_union(clients: Sequence[Any], weights: State, key: tuple,
                  block_input: Callable[[Any], BlockInput],
                  run: Callable[[torch.nn.Module, Blocks], Tensor],
                  cache: dict | None = None) -> list[Tensor]:
    """Every client's ``predict(weights)`` from one eval-mode forward pass of the shared model
    over the union of their inputs; ``run(model, blocks)`` returns the log-probabilities of
    ``blocks.out_rows``."""
    first = clients[0]
    blocks = cached_blocks(cache, "evaluate", key,
                           lambda: Blocks([block_input(c) for c in clients]))
    first.load_weights(weights)
    first.model.eval()
    return list(run(first.model, blocks).split(blocks.out_sizes))


def uniform_group(clients: Sequence[Any]) -> bool:
    """At least two clients of one class on one device, with plaintext models: what any
    batched path needs (an encrypted model is decrypted per client)."""
    return (len(clients) >= 2 and len({type(c) for c in clients}) == 1
            and len({c.device for c in clients}) == 1
            and not getattr(clients[0].config, "encrypt_models", False)
            and not getattr(clients[0], "secure_models", False))  # models held for a secure sum


# Batching pays off for many small clients (fixed kernel costs shared); for large ones the
# stacked autograd graph (and the cached union of inputs) only costs memory: FedGCN 2-hop, 10
# clients on an arxiv-sized graph took 52.7 s/round and 5.0 GB batched vs 19.4 s and 3.3 GB
# one by one (docs/performance.md). Evaluation has no autograd graph: a larger bound.
MAX_BATCHED_TRAIN_ROWS = 100_000
MAX_BATCHED_EVAL_ROWS = 400_000


def _too_large(clients: Sequence[Any], train: bool = True) -> bool:
    if train:
        return sum(int(c._train_inputs().x.size(0)) for c in clients) > MAX_BATCHED_TRAIN_ROWS
    return sum(int(c._cached_inputs().x.size(0)) for c in clients) > MAX_BATCHED_EVAL_ROWS


def _same_input_kind(clients: Sequence[Any]) -> bool:
    return len({c._cached_inputs().pre_aggregated for c in clients}) == 1


def fit_gcn_clients(clients: Sequence[Any], weights: State, local_steps: int, round: int,
                    cache: dict | None = None) -> list[dict] | None:
    """Batched ``fit`` of GCN clients (:class:`~fedgl.algorithms.base.GNNClient` with a
    :class:`~fedgl.models.gcn.GCN`) on their receptive-field-restricted training inputs."""
    if not _same_input_kind(clients) or _too_large(clients):
        return None

    def block_input(c: Any) -> BlockInput:
        inp = c._train_inputs()
        train = c._masks["train"].nonzero().flatten()
        return BlockInput(inp.x, {"edge_index": inp.edge_index}, inp.own_rows, c._y[train],
                          inp.edge_weight)

    def fit_active(active: list[Any]) -> list[dict]:
        key = tuple(id(c._train_inputs()) for c in active)
        blocks = cached_blocks(cache, "fit", key,
                               lambda: Blocks([block_input(c) for c in active]))
        step = gcn_step(active[0].model, active[0]._cached_inputs().pre_aggregated)
        return fit_stacked(active, weights, local_steps, round, blocks, step)

    return fit_many_or_idle(clients, weights, fit_active)


def predict_gnn_clients(clients: Sequence[Any], weights: State,
                        cache: dict | None = None) -> list[Tensor] | None:
    """Batched ``predict`` of GCN/SAGE clients on their full inputs."""
    if not _same_input_kind(clients) or _too_large(clients, train=False):
        return None
    pre = clients[0]._cached_inputs().pre_aggregated
    kwargs = {"pre_aggregated": True} if pre else {}

    def block_input(c: Any) -> BlockInput:
        inp = c._cached_inputs()
        return BlockInput(inp.x, {"edge_index": inp.edge_index}, inp.own_rows, c._y,
                          inp.edge_weight)

    def run(model: torch.nn.Module, b: Blocks) -> Tensor:
        # pre-aggregated rows (FedGCN's received sums) repeat across clients: the first layer's
        # product once per distinct row, on their CSR form where sparse (a GCN's on the CPU;
        # otherwise the rows as they are)
        share = pre and isinstance(model, GCN) and b.x[0].device.type == "cpu"
        extra = {"distinct": b.distinct_x_for_linear()} if share else {}
        if isinstance(model, GCN):   # the last layer sums only the rows it scores
            extra["out_edges"] = b.out_edges()
        # with ``distinct`` the model reads only those rows: the union is not put together
        x = extra["distinct"][0] if share else b.x_all
        return model(x, b.edges["edge_index"], b.edge_weight, out_rows=b.out_rows,
                     **kwargs, **extra)

    key = tuple(id(c._cached_inputs()) for c in clients)
    return predict_union(clients, weights, key, block_input, run, cache)


def gcn_step(model: torch.nn.Module, pre_aggregated: bool) -> Step:
    """One training step of ``GCN.forward`` (fedgl.models.gcn) with per-client parameters, per
    block, and its gradient written out (no autograd graph: Cora's ten clients' three steps took
    6.3–6.7 ms against autograd's 9.1 ms, docs/performance.md). With ``H_0`` the inputs and, per
    layer l, ``Z_l = Ã(H_l W_lᵀ) + b_l`` (``Ã`` the weighted edges; skipped for a
    pre-aggregated first layer) and ``H_{l+1} = M_l ⊙ relu(Z_l)`` (``M_l`` the dropout mask
    scaled by ``1/(1-p)``), the loss ``Σ_k mean_{i∈k} −log softmax(Z_L)_{i,y_i}`` has

        G_L = (softmax(Z_L) − onehot(y)) / n_k   (rows of ``out_rows``, else 0)
        ∂b_l = Σ_{i∈k} G_l[i],   E_l = Ãᵀ G_l,   ∂W_l = E_lᵀ H_l (per client),
        G_{l−1} = (E_l W_l) ⊙ M_{l−1} ⊙ [Z_{l−1} > 0].

    The same operations autograd would run, so each client's gradient equals its own
    ``fit``'s up to float summation order (tests/test_batched_clients.py)."""
    layers = len(model.convs)
    p_drop = float(model.dropout)

    def transposed(blocks: Blocks) -> tuple[str, ...]:
        """The first layer's weight, where it multiplies the clients' sparse inputs: stored
        ``[K, in, out]`` by :func:`fit_stacked`, so that neither ``D W`` nor ``∂W = (Dᵀ G)ᵀ``
        copies it transposed (three 0.9 MB copies a step on Cora's ten clients)."""
        out, fan_in = model.convs[0].lin.weight.shape
        return ("convs.0.lin.weight",) if sparse_products(blocks, out, fan_in) else ()

    def step(params: dict[str, Tensor], blocks: Blocks, gens: Sequence[torch.Generator],
             inv_n: Tensor) -> Tensor:
        src, dst = blocks.edges["edge_index"]
        ew = None if blocks.edge_weight is None else blocks.edge_weight.unsqueeze(-1)
        co, q = blocks.client_of, 1.0 - p_drop
        inputs: Sequence[Tensor] | Tensor = blocks.x
        kept = []  # per layer: its inputs, whether it aggregates, Z_l, the dropout's keep mask
        with torch.no_grad():
            for i in range(layers):
                w, b = params[f"convs.{i}.lin.weight"], params[f"convs.{i}.bias"]
                h = ClientLinear(blocks, w).forward(inputs)
                agg = not (i == 0 and pre_aggregated)
                if agg:  # Ã (H W): GCNLayer with given weights
                    h = scatter_sum(h[src] if ew is None else h[src] * ew, dst, blocks.total)
                z = h + b[co]
                keep = None
                layer_inputs = inputs
                if i < layers - 1:
                    a = torch.relu(z)
                    if p_drop > 0.0:  # as models.base.dropout: (a · keep) / (1 − p)
                        keep = per_client_keep(z, blocks, p_drop, gens)
                        a = a * keep / q
                    inputs = a
                kept.append((layer_inputs, agg, z, keep))
            log_p = torch.log_softmax(z[blocks.out_rows], dim=-1)
            rows = torch.arange(blocks.y.numel(), device=log_p.device)
            per_client = scatter_sum(-log_p[rows, blocks.y].double(), blocks.out_client,
                                     blocks.k) * inv_n
            scale = inv_n.to(log_p.dtype)[blocks.out_client]
            g_out = log_p.exp() * scale.unsqueeze(-1)
            g_out[rows, blocks.y] -= scale
            g = torch.zeros_like(z)
            g[blocks.out_rows] = g_out
            for i in reversed(range(layers)):
                layer_inputs, agg, _, _ = kept[i]
                w = params[f"convs.{i}.lin.weight"]
                params[f"convs.{i}.bias"].grad = scatter_sum(g, co, blocks.k)
                if agg:
                    g = scatter_sum(g[dst] if ew is None else g[dst] * ew, src, blocks.total)
                linear = ClientLinear(blocks, w)
                params[f"convs.{i}.lin.weight"].grad = linear.weight_grad(g, layer_inputs)
                if i > 0:
                    g = linear.input_grad(g)
                    _, _, z_prev, keep_prev = kept[i - 1]
                    if keep_prev is not None:
                        g = g / q * keep_prev
                    g = g * (z_prev > 0)
        return per_client

    step.transposed = transposed  # type: ignore[attr-defined]   # read by fit_stacked
    return step


def per_client_keep(h: Tensor, blocks: Blocks, p: float,
                    generators: Sequence[torch.Generator]) -> Tensor:
    """The dropout keep mask (0/1, ``h``'s dtype) of :func:`per_client_dropout`: each client's
    rows from its own generator, drawn in the same order (so the same mask)."""
    # each client's uniforms drawn into its rows of one buffer (the same numbers as its own
    # ``keep_mask``: one generator, the same count, in row order), then one comparison
    u = torch.empty(h.shape, device=h.device)
    for part, g in zip(blocks.split(u), generators, strict=True):
        torch.rand(part.shape, generator=g, device=h.device, out=part)
    return (u >= p).to(h.dtype)
