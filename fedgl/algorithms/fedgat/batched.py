"""Many in-process GAT clients' local training as one computation (a simulation speed-up).

With the local runtime every client's ``fit`` is a few optimiser steps on a small graph, and a
step is ~100 small kernels whose fixed cost is paid once per client. When K clients start a
round from the same global model, :func:`fit_together` takes their local steps at once:

* their training views are laid side by side as one block-diagonal graph (client k's rows at
  an offset; no edge joins two blocks);
* every parameter is stacked to ``[K, ...]`` (row k is client k's copy): layer ``l`` multiplies
  each client's rows by its own ``W_k`` and each edge uses its own client's attention vectors;
* the loss is ``Σ_k mean_k(NLL)``: the blocks do not interact, so one backward pass gives each
  client exactly the gradient of its own loss, and SGD (elementwise) moves each row as the
  client's own optimiser would.

Each client ends the round with the weights it would have reached alone, up to float summation
order (tests/test_fedgat_batched.py compares with sequential ``fit``). Dropout masks are drawn
from each client's own generator in the same order as in its own ``fit``. Only used where this
holds: the fast backend or the exact GAT first layer, SGD, every client on the same device.
Nothing crosses the federation boundary here: the runtime still counts one ``fit`` message
each way per client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.utils import scatter, softmax

from fedgl.algorithms.base import client_seed
from fedgl.federation.aggregate import State
from fedgl.models.base import dropout
from fedgl.models.gat import GAT
from fedgl.models.poly_attention import PolyGATConv

if TYPE_CHECKING:
    from fedgl.algorithms.fedgat.client import GATClient


def can_fit_together(clients: Sequence[GATClient]) -> bool:
    """Whether :func:`fit_together` reproduces these clients' own ``fit``."""
    if len(clients) < 2 or len({type(c) for c in clients}) != 1:
        return False
    cfg = clients[0].config
    protocol = clients[0].approximate and cfg.fedgat_backend == "protocol"
    return (cfg.gat_optimizer == "sgd" and not protocol
            and len({c.device for c in clients}) == 1)


class _Blocks:
    """The clients' training views as one block-diagonal graph (built once, then cached)."""

    def __init__(self, clients: Sequence[GATClient]) -> None:
        views = [c._train_view() for c in clients]
        self.row_sizes = [v.num_rows for v in views]
        self.k = len(views)
        self.total = sum(self.row_sizes)
        offsets = torch.tensor([0] + self.row_sizes[:-1]).cumsum(0).tolist()
        dev = clients[0].device
        # union row r belongs to client_of[r]; each client's rows are contiguous, in order
        self.client_of = torch.cat([torch.full((n,), k, dtype=torch.long)
                                    for k, n in enumerate(self.row_sizes)]).to(dev)
        self.x = [v.x for v in views]
        self.edges1 = torch.cat([v.edges1 + o for v, o in zip(views, offsets, strict=True)], 1)
        self.edges_up = torch.cat([v.edges_up + o for v, o in zip(views, offsets, strict=True)],
                                  1)
        self.out_rows = torch.cat([v.out_rows + o for v, o in zip(views, offsets, strict=True)])
        trains = [c._masks["train"].nonzero().flatten() for c in clients]
        self.y = torch.cat([c._y[t] for c, t in zip(clients, trains, strict=True)])
        self.num_train = [int(t.numel()) for t in trains]
        self.out_client = torch.cat([torch.full((n,), k, dtype=torch.long)
                                     for k, n in enumerate(self.num_train)]).to(dev)


def _layer(conv: torch.nn.Module, p: dict[str, Tensor], prefix: str, blocks: _Blocks,
           parts: Sequence[Tensor], edges: Tensor) -> Tensor:
    """One GAT layer (``GATConv`` or ``PolyGATConv`` semantics) with per-client parameters;
    ``parts[k]`` are client k's input rows."""
    heads, c = conv.heads, conv.out_channels
    w = p[prefix + "lin.weight"]                                   # [K, heads*c, d]
    att = torch.stack([p[prefix + "att_dst"].view(blocks.k, heads, c),
                       p[prefix + "att_src"].view(blocks.k, heads, c)], dim=1)  # [K, 2, h, c]
    # one product per client (a loop of K plain matmuls beats a padded bmm on CPU; unbind's
    # backward stacks the K gradients once, where w[k]'s would zero-fill K [K, ...] buffers)
    xw = torch.cat([h @ wk.t() for h, wk in zip(parts, w.unbind(0), strict=True)])
    xw = xw.view(-1, heads, c)
    k_of = blocks.client_of
    s_dst = (xw * att[:, 0][k_of]).sum(-1)                         # [total, heads]
    s_src = (xw * att[:, 1][k_of]).sum(-1)
    src, dst = edges
    if isinstance(conv, PolyGATConv):
        if conv.cap:  # the per-head rescaling of PolyGATConv.attention_vectors, per client
            b = torch.einsum("kshc,khcd->kshd", att, w.view(blocks.k, heads, c, -1))
            norm = b.norm(dim=3).sum(dim=1)                        # ‖b_1‖ + ‖b_2‖, [K, h]
            scale = torch.clamp(conv.attention.radius / norm.clamp_min(1e-30), max=1.0)
            s_src, s_dst = s_src * scale[k_of], s_dst * scale[k_of]
        e_hat = conv.attention(s_dst[dst] + s_src[src], conv.basis)
        alpha = e_hat / scatter(e_hat, dst, dim=0, dim_size=blocks.total, reduce="sum")[dst]
    else:
        alpha = softmax(F.leaky_relu(s_src[src] + s_dst[dst], conv.negative_slope), dst,
                        num_nodes=blocks.total)
    out = scatter(xw[src] * alpha.unsqueeze(-1), dst, dim=0, dim_size=blocks.total,
                  reduce="sum")
    out = out.reshape(blocks.total, heads * c) if conv.concat else out.mean(dim=1)
    return out + p[prefix + "bias"][k_of]


def _forward(model: GAT, p: dict[str, Tensor], blocks: _Blocks,
             generators: Sequence[torch.Generator]) -> Tensor:
    """Log-probabilities of every client's output rows (``GAT.forward`` per block)."""
    h = _layer(model.convs[0], p, "convs.0.", blocks, blocks.x, blocks.edges1)
    for i, conv in enumerate(model.convs[1:], start=1):
        parts = F.elu(h).split(blocks.row_sizes)
        if model.dropout > 0:  # each client's mask from its own generator, in its own order
            parts = [dropout(part, model.dropout, True, g)
                     for part, g in zip(parts, generators, strict=True)]
        h = _layer(conv, p, f"convs.{i}.", blocks, parts, blocks.edges_up)
    return torch.log_softmax(h[blocks.out_rows], dim=-1)


def fit_together(clients: Sequence[GATClient], weights: State, local_steps: int,
                 round: int) -> list[dict]:
    """``[client.fit(weights, local_steps, round) for client in clients]``, as one computation.
    Clients without training nodes return the global model unchanged, as ``fit`` does."""
    active = [c for c in clients if bool(c._masks["train"].any())]
    results: dict[int, dict] = {}
    for c in clients:
        if c not in active:
            c.load_weights(weights)
            results[id(c)] = {"weights": c.get_weights(), "num_train": 0, "loss": float("nan")}
    if active:
        for c, out in zip(active, _fit_active(active, weights, local_steps, round), strict=True):
            results[id(c)] = out
    return [results[id(c)] for c in clients]


def _fit_active(clients: Sequence[GATClient], weights: State, local_steps: int,
                round: int) -> list[dict]:
    first = clients[0]
    cfg = first.config
    # the views only change when a pre-training round re-runs (new view objects)
    key = tuple(id(c._train_view()) for c in clients)
    cached = getattr(first, "_batched_blocks", None)
    if cached is None or cached[0] != key:
        cached = (key, _Blocks(clients))
        first._batched_blocks = cached
    blocks = cached[1]
    ref = first.model.state_dict()
    params = {name: weights[name].to(device=first.device, dtype=ref[name].dtype)
              .unsqueeze(0).repeat(blocks.k, *([1] * ref[name].dim())).requires_grad_()
              for name in ref}
    gens = [c.generator for c in clients]
    for c in clients:
        c.generator.manual_seed(client_seed(c.seed, c.data.client_id) + round)
    opt = torch.optim.SGD(list(params.values()), lr=cfg.lr, weight_decay=cfg.weight_decay)
    inv_n = 1.0 / torch.tensor(blocks.num_train, dtype=torch.float64, device=first.device)
    losses = []
    model = first.model
    model.train()
    for _ in range(local_steps):
        opt.zero_grad(set_to_none=True)
        nll = F.nll_loss(_forward(model, params, blocks, gens), blocks.y, reduction="none")
        per_client = scatter(nll.double(), blocks.out_client, dim=0, dim_size=blocks.k,
                             reduce="sum") * inv_n
        per_client.sum().backward()
        opt.step()
        losses.append(per_client.detach())
    mean_loss = torch.stack(losses).mean(0).tolist()
    out = []
    for k, c in enumerate(clients):
        state = {name: t[k].detach().clone().cpu() for name, t in params.items()}
        c.load_weights(state)  # the client's model holds its local result, as after ``fit``
        out.append({"weights": state, "num_train": blocks.num_train[k], "loss": mean_loss[k]})
    return out

