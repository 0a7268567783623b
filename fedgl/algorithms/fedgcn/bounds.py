"""Public value bounds on what FedGCN's clients send (``feature_bound``, ``update_bound``).

With ``feature_bound B`` every party takes, as a public fact of the data set, that every feature
value satisfies ``|x_j[f]| ≤ B`` (e.g. 1 for 0/1 or row-normalised features). A client's partial
sum of row i is ``S_k[i] = Σ_{j ∈ V_k ∩ Ñ(i)} d̃_j^{-1/2} x_j``. Its terms are i itself (only when
k owns i, ``d̃_i^{-1/2} ≤ 1``) and neighbours j of i (``d̃_j ≥ 2``, so ``d̃_j^{-1/2} ≤ 2^{-1/2}``),
at most ``d̃_i − 1`` of them, and at most the client's own node count. An honest client therefore
never sends a value beyond

- own row i: ``B (d̃_i^{-1/2} + min(d̃_i − 1, n_k − 1) / √2)``;
- a remote row i: ``B min(d̃_i − 1, n_k) / √2`` (``n_k / √2`` when i's degree is unknown);
- a full sum (all clients): ``B (d̃_i^{-1/2} + (d̃_i − 1) / √2)``;

with DP, ``B`` becomes ``min(B, C)`` (clipped rows) plus ``SLACK_SIGMAS`` noise deviations per
value (per contributing client). The server checks every plaintext upload against these
(degrees are the owners' announcements); a receiving client checks the full sums it gets, which
covers the masked and HE modes, where the server cannot see a single client's values. A value
inside the bound is not detectable: a bound limits how far a modified client can move a sum,
not whether it does (docs/threat-model.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch
from torch import Tensor

from fedgl.federation.messages import SparseRows

#: DP noise allowance per value: P(|N(0, σ²)| > 12σ) < 4e-33, so an honest release is never
#: refused in practice
SLACK_SIGMAS = 12.0
#: relative allowance for float rounding in the sums (float32 sums of up to ~10^4 terms)
REL_TOL = 1e-3
_HALF = 2.0 ** -0.5


def value_bound(config) -> float | None:
    """The per-value bound of the released features (``min(B, C)`` with DP), or None (off)."""
    bound = getattr(config, "feature_bound", None)
    if bound is None:
        return None
    if config.dp_epsilon is not None:
        return min(float(bound), float(config.dp_clip))
    return float(bound)


def noise_sigma(config) -> float:
    """σ of the DP noise on each released value (0 without DP)."""
    if config.dp_epsilon is None:
        return 0.0
    from fedgl.privacy.dp import GaussianMechanism

    return float(GaussianMechanism(config.dp_epsilon, config.dp_delta, config.dp_clip).sigma)


def row_max_abs(values: Tensor | SparseRows | np.ndarray) -> np.ndarray:
    """The largest |value| of every row (0 for an empty row)."""
    if isinstance(values, SparseRows):
        rows = values.shape[0]
        out = np.zeros(rows, dtype=np.float64)
        if values.nnz:
            absval = np.abs(values.values.astype(np.float64))
            indptr = values.indptr.astype(np.int64)
            nonempty = indptr[1:] > indptr[:-1]
            out[nonempty] = np.maximum.reduceat(absval, indptr[:-1][nonempty])
        return out
    arr = values.detach().cpu().double().numpy() if isinstance(values, Tensor) \
        else np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return np.zeros(arr.shape[0] if arr.ndim else 0, dtype=np.float64)
    return np.abs(arr).max(axis=1)


def full_sum_limits(deg: np.ndarray, bound: float, sigma: float) -> np.ndarray:
    """Largest |value| of a full sum ``S[i]`` over every client, per row of degree ``deg``
    (degree 0: unknown, no limit)."""
    d = np.maximum(deg.astype(np.float64), 1)
    limit = bound * (d ** -0.5 + (d - 1) * _HALF)
    limit = limit * (1 + REL_TOL) + SLACK_SIGMAS * sigma * np.sqrt(d)
    return np.where(deg > 0, limit, np.inf)  # degree unknown (its owner left): unchecked


def first_excess(values: Tensor | SparseRows | np.ndarray, limits: np.ndarray) -> int | None:
    """Index of the first row with a value beyond its limit (or not finite), else None."""
    top = row_max_abs(values)
    bad = ~(top <= limits)  # NaN compares False: refused too
    return int(np.argmax(bad)) if bad.any() else None


class UploadBounds:
    """The server's bound on each client's partial sums, from the announcements: every client's
    own ids (the leading ``len(degrees)`` of ``ids``) and their degrees. With ``edges`` (the
    per-edge adjacency check) a client's remote row is bounded by the number of its nodes that
    the row's owner confirmed as neighbours, instead of the row's degree."""

    def __init__(self, announced: Mapping[int, dict], bound: float, sigma: float,
                 edges: bool = False) -> None:
        self.bound, self.sigma = bound, sigma
        own = {k: m["ids"][:len(m["degrees"])] for k, m in announced.items()}
        self.num_own = {k: len(o) for k, o in own.items()}
        ids = torch.cat(list(own.values())) if own else torch.zeros(0, dtype=torch.long)
        deg = torch.cat([m["degrees"] for m in announced.values()]) if own else ids
        who = torch.cat([torch.full((len(o),), k, dtype=torch.long) for k, o in own.items()]) \
            if own else ids
        order = torch.argsort(ids)
        self.ids, self.deg, self.owner = (ids[order].numpy(), deg[order].numpy(),
                                          who[order].numpy())
        self.top = int(max([int(m["ids"].max()) for m in announced.values() if len(m["ids"])],
                           default=0)) + 1
        self.edge_keys = self.edge_counts = None
        if edges:  # owner j announced (v, u): client owner(u) has one more neighbour of v
            keys = []
            for m in announced.values():
                e = m["cross_edges"].numpy()
                asker = self._owners(e[1])
                keys.append((asker * self.top + e[0])[asker >= 0])
            self.edge_keys, self.edge_counts = np.unique(
                np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64), return_counts=True)

    def _owners(self, ids: np.ndarray) -> np.ndarray:
        if not len(self.ids):
            return np.full(len(ids), -1, dtype=np.int64)
        pos = np.clip(np.searchsorted(self.ids, ids), 0, len(self.ids) - 1)
        return np.where(self.ids[pos] == ids, self.owner[pos], -1)

    def limits(self, k: int, ids: np.ndarray) -> np.ndarray:
        """Largest |value| client k may send in the rows of ``ids``."""
        n_k = self.num_own.get(k, 0)
        deg = np.zeros(len(ids), dtype=np.float64)
        owner = np.full(len(ids), -1, dtype=np.int64)
        if len(self.ids):
            pos = np.clip(np.searchsorted(self.ids, ids), 0, len(self.ids) - 1)
            known = self.ids[pos] == ids
            deg[known] = self.deg[pos[known]]
            owner[known] = self.owner[pos[known]]
        mine = owner == k
        neighbours = np.where(deg > 0, np.minimum(deg - 1, n_k), n_k).astype(np.float64)
        if self.edge_keys is not None and len(self.edge_keys):
            key = k * self.top + ids
            pos = np.clip(np.searchsorted(self.edge_keys, key), 0, len(self.edge_keys) - 1)
            found = (self.edge_keys[pos] == key) & ~mine & (owner >= 0)
            neighbours[found] = np.minimum(neighbours[found], self.edge_counts[pos[found]])
        neighbours[mine] = np.minimum(deg[mine] - 1, n_k - 1)
        limit = self.bound * (neighbours * _HALF + np.where(mine, np.maximum(deg, 1) ** -0.5, 0))
        return limit * (1 + REL_TOL) + SLACK_SIGMAS * self.sigma

    def check(self, k: int, ids: np.ndarray, values: Tensor | SparseRows) -> str | None:
        """None when client k's rows ``ids`` with ``values`` are within the bound, else why."""
        if len(ids) == 0:
            return None
        row = first_excess(values, self.limits(k, np.asarray(ids)))
        if row is None:
            return None
        top = float(row_max_abs(values)[row])
        return (f"a partial sum beyond the public feature bound (row of node {int(ids[row])}: "
                f"|value| {top:.6g} > {float(self.limits(k, np.asarray(ids[row:row + 1]))[0]):.6g}"
                f" for --feature-bound {self.bound:g})")


def update_norm(weights: Mapping[str, Tensor], reference: Mapping[str, Tensor]) -> float:
    """L2 norm of ``weights − reference`` over every parameter (inf when keys or shapes differ,
    NaN when a value is not finite)."""
    if set(weights) != set(reference):
        return math.inf
    total = 0.0
    for name, ref in reference.items():
        w = weights[name]
        if not isinstance(w, Tensor) or tuple(w.shape) != tuple(ref.shape):
            return math.inf
        total += float((w.double() - ref.double()).pow(2).sum())
    return math.sqrt(total)
