"""NeighGen (FedSage+, Zhang et al. 2021 §4): a missing-neighbour generator.

- encoder: a 2-layer GCN on the (impaired) local subgraph, ``z_v = relu(Â relu(Â X W_0) W_1)``
  (``latent_dim`` outputs);
- dGen, the count head: ``n̂_v = relu(z_v w + b)``, trained with smooth L1 against the true
  number of missing neighbours (clipped at ``num_pred``);
- fGen, the feature generator: ``H_v = tanh(MLP(z_v + ε))`` with ε ~ N(0, I), reshaped to
  ``num_pred x d`` generated neighbour features.

The feature-matching loss of a generated feature ``H_vp`` against a candidate set ``U`` is the
greedy ``min_{u ∈ U} ||H_vp - x_u||² / d`` (the reference's ``F.mse_loss``: a mean over the d
feature dimensions, so the loss weight b means what it means there); locally U is v's hidden
neighbours and only the first ``min(n_v, num_pred)`` generated rows count; at another client j,
U is ``cross_candidates`` of j's nodes drawn per generated node as the reference draws them (the
local neighbours of one random node of j; 0: all of j's nodes) and every generated row counts
(computed by j, which returns only parameter gradients).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCNConv

from fedgl.models.base import dropout


class FeatureGenerator(nn.Module):
    """fGen: latent (+ noise) -> ``num_pred x d`` features in (-1, 1)."""

    def __init__(self, latent_dim: int, hidden: int, num_pred: int, num_features: int,
                 drop: float = 0.5) -> None:
        super().__init__()
        self.num_pred, self.num_features, self.drop = num_pred, num_features, drop
        self.fc1 = nn.Linear(latent_dim, 256)
        self.fc2 = nn.Linear(256, hidden)
        self.out = nn.Linear(hidden, num_pred * num_features)

    def forward(self, z_noisy: Tensor, generator: torch.Generator | None = None) -> Tensor:
        h = torch.relu(self.fc2(torch.relu(self.fc1(z_noisy))))
        h = dropout(h, self.drop, self.training, generator)
        return torch.tanh(self.out(h)).view(-1, self.num_pred, self.num_features)


class NeighGen(nn.Module):
    """Encoder, count head and feature generator (see module docstring)."""

    def __init__(self, num_features: int, encoder_hidden: int, latent_dim: int, gen_hidden: int,
                 num_pred: int, drop: float = 0.5) -> None:
        super().__init__()
        self.enc1 = GCNConv(num_features, encoder_hidden)
        self.enc2 = GCNConv(encoder_hidden, latent_dim)
        self.count = nn.Linear(latent_dim, 1)
        self.fgen = FeatureGenerator(latent_dim, gen_hidden, num_pred, num_features, drop)
        self.drop = drop

    def encode(self, x: Tensor, edge_index: Tensor, generator: torch.Generator | None) -> Tensor:
        h = dropout(torch.relu(self.enc1(x, edge_index)), self.drop, self.training, generator)
        return torch.relu(self.enc2(h, edge_index))

    def counts(self, z: Tensor) -> Tensor:
        return torch.relu(self.count(z)).squeeze(-1)


def local_match_loss(gen: Tensor, x: Tensor, pairs: Tensor, missing: Tensor) -> Tensor:
    """Mean over valid (v, p) of ``min_{u ∈ hidden N(v)} ||gen[v, p] - x[u]||² / d``.

    ``gen``: [n, P, d] for the batch nodes; ``pairs``: [2, M] (batch row v, row u of ``x``), one
    column per hidden neighbour; ``missing``: [n] true missing counts. Valid: p < min(n_v, P)."""
    n, p_max, _ = gen.shape
    valid = torch.arange(p_max).unsqueeze(0) < missing.clamp(max=p_max).unsqueeze(1)
    if pairs.size(1) == 0 or not valid.any():
        return gen.sum() * 0.0
    v, u = pairs
    dist = ((gen[v] - x[u].unsqueeze(1)) ** 2).mean(-1)  # [M, P]
    best = torch.full((n, p_max), float("inf"), dtype=gen.dtype)
    best = best.scatter_reduce(0, v.unsqueeze(1).expand(-1, p_max), dist, "amin")
    return best[valid].mean()


def nearest_rows(rows: Tensor, x: Tensor, cand: Tensor | None = None,
                 budget: int = 1 << 22) -> Tensor:
    """Row of ``x`` nearest (squared Euclidean) to every row of ``rows`` (no gradient).

    ``cand`` None: over all rows of ``x``; else ``cand`` [R, C]: over the C candidate rows listed
    for each row. Computed in row chunks whose temporaries hold about ``budget`` floats at most
    (chunk x len(x) distances, or chunk x C x d gathered candidates), so memory stays
    O(budget + R) whatever ``len(x)`` is (an all-pairs ``cdist`` would hold R x len(x))."""
    out = torch.empty(rows.size(0), dtype=torch.long)
    if rows.size(0) == 0:
        return out
    width = x.size(0) if cand is None else cand.size(1) * x.size(1)
    step = max(1, budget // max(width, 1))
    with torch.no_grad():
        for a in range(0, rows.size(0), step):
            r = rows[a:a + step]
            if cand is None:
                out[a:a + step] = torch.cdist(r, x).argmin(dim=1)
            else:
                c = cand[a:a + step]
                dist = ((r.unsqueeze(1) - x[c]) ** 2).sum(-1)  # [chunk, C]
                out[a:a + step] = c.gather(1, dist.argmin(dim=1, keepdim=True)).squeeze(1)
    return out


def cross_match_loss(gen: Tensor, x: Tensor, cand: Tensor | None = None,
                     budget: int = 1 << 22) -> Tensor:
    """Mean over every generated row of ``min_{u ∈ U_v} ||gen[v, p] - x[u]||² / d``.

    ``cand`` None: ``U_v`` is every row of ``x`` (all pairs); else ``cand`` [n, C] lists the
    candidate rows ``U_v`` of batch node v (shared by its ``P`` generated rows). The minimum is
    found without gradient in bounded chunks (:func:`nearest_rows`), then the loss is formed on
    the chosen rows only: the same value and the same gradient as the autograd minimum (whose
    gradient flows through the arg-min alone), in O(n·P·d) memory."""
    n, p, d = gen.shape
    flat = gen.reshape(-1, d)
    if flat.size(0) == 0 or x.size(0) == 0:
        return gen.sum() * 0.0
    c = None if cand is None else cand.repeat_interleave(p, dim=0)
    best = nearest_rows(flat.detach(), x, c, budget)
    return ((flat - x[best]) ** 2).mean(-1).mean()


def sample_candidates(n: int, count: int, rowptr: Tensor, col: Tensor,
                      generator: torch.Generator | None) -> Tensor:
    """``count`` candidate rows for each of ``n`` generated nodes, drawn as the reference's
    cross-client term draws them: a uniformly random own node c with at least one local
    neighbour, then ``count`` of c's local neighbours uniformly with replacement (local CSR
    ``rowptr``/``col``). Without any local edge: ``count`` uniformly random own nodes. [n, count]."""
    num = rowptr.numel() - 1
    deg = rowptr[1:] - rowptr[:-1]
    has = (deg > 0).nonzero().flatten()
    if has.numel() == 0:
        return torch.randint(num, (n, count), generator=generator)
    c = has[torch.randint(has.numel(), (n,), generator=generator)]
    off = (torch.rand(n, count, generator=generator) * deg[c].unsqueeze(1)).long()
    off = torch.minimum(off, deg[c].unsqueeze(1) - 1)
    return col[rowptr[c].unsqueeze(1) + off]


def count_loss(pred: Tensor, missing: Tensor, num_pred: int) -> Tensor:
    return F.smooth_l1_loss(pred, missing.clamp(max=num_pred).to(pred.dtype))
