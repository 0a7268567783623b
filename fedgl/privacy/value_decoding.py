"""Value-level decoding of released sums: the attack behind the leakage report's exact counts.

A released row is ``v_i = Σ_{j ∈ C_i} c_j x_j`` over a few contributors ``C_i`` with known
positive coefficients (FedGCN: ``c_j = d̃_j^{-1/2}``, derivable from announced degrees or the
structure) and features from a small alphabet (Cora and CiteSeer: 0/1). Column by column, the
value is one of at most ``L^m`` subset sums of the coefficients, and when the coefficients are
generic only one assignment of levels produces it: the row then gives every contributor's
feature in that column exactly, although no linear algebra over the reals would (one row, many
unknowns).

:func:`decode` runs this attack on a system of rows and counts what it determines. Per row and
per column it keeps the cells (contributor, column) already known, subtracts them, and:

- if the rest equals the all-lowest (all-highest) level sum, every unknown cell is at the lowest
  (highest) level (sparse binary features: a zero reveals a zero in every contributor);
- otherwise, with at most :data:`MAX_COMBINATIONS` assignments of the unknown cells, it
  enumerates them (grouping columns by which cells are unknown), sorts their sums, and decides
  a cell where every assignment within :data:`TOLERANCE` of the value agrees on it.

Newly known cells are subtracted from every row of their node and those rows are visited again,
until nothing changes (bounded by :data:`MAX_PASSES`). A node is decoded when every one of its
cells is known. Cells whose combinations exceed the bound are left undecided and their rows
flagged (``unresolved``): a stronger attack may do better there, so the count is a lower bound
of what an attacker learns, never a guess.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

#: values closer than this (relative to the largest level) are indistinguishable: the released
#: rows are float32 sums (≈1e-7 relative error), and an attacker cannot tell them apart.
TOLERANCE = 1e-5
#: at most this many level assignments are enumerated for one group of unknown cells
#: (2^12 for binary features); larger groups are left undecided (``unresolved``).
MAX_COMBINATIONS = 4096
#: a feature alphabet with more distinct values than this is not decoded (continuous features).
MAX_LEVELS = 4
#: passes over the rows whose unknowns changed; each pass either decides a cell or stops.
MAX_PASSES = 64


@dataclass
class Decoded:
    """What :func:`decode` determined: ``levels[j, f]`` (index into the alphabet) where
    ``known[j, f]``; ``nodes`` (every cell known); ``unresolved`` (nodes not decoded that sit in
    a row whose cells exceeded :data:`MAX_COMBINATIONS`)."""

    known: np.ndarray
    levels: np.ndarray
    nodes: np.ndarray
    unresolved: np.ndarray


def feature_alphabet(x: np.ndarray, max_levels: int = MAX_LEVELS) -> np.ndarray | None:
    """The sorted distinct feature values when there are at most ``max_levels`` (an attacker's
    guess for bag-of-words features), else None. Read in row chunks, stopping at the first
    chunk that shows too many values, so a large matrix is never sorted or copied whole."""
    if x.size == 0:
        return None
    levels = np.zeros(0, dtype=x.dtype)
    step = max(1, 1_000_000 // max(1, x.shape[1] if x.ndim > 1 else 1))
    for start in range(0, len(x), step):
        levels = np.union1d(levels, np.unique(x[start:start + step]))
        if levels.size > max_levels:
            return None
    return levels


@lru_cache(maxsize=64)
def _grid(num_levels: int, p: int) -> np.ndarray:
    """Every assignment of ``p`` cells to ``num_levels`` levels: (L^p, p) level indices."""
    axes = np.indices((num_levels,) * p, dtype=np.int8).reshape(p, -1)
    return np.ascontiguousarray(axes.T)


def decode(indptr: np.ndarray, members: np.ndarray, coef: np.ndarray, values: Any,
           alphabet: np.ndarray, seed: np.ndarray | None = None,
           seed_levels: np.ndarray | None = None) -> Decoded:
    """:func:`decode_reference`, computed by :func:`fedgl.privacy.sparse_decoding.decode_sparse`
    (the same fixed point, by array passes over the open cells) where that applies."""
    from fedgl.privacy.sparse_decoding import decode_sparse

    fast = decode_sparse(indptr, members, coef, values, alphabet, seed, seed_levels)
    if fast is not None:
        return fast
    return decode_reference(indptr, members, coef, values, alphabet, seed, seed_levels)


def decode_all(systems: Sequence[tuple[Any, ...]]) -> Iterable[Decoded]:
    """:func:`decode` of each system (a tuple of its arguments), in order; computed on stacks
    of systems by :func:`fedgl.privacy.stacked_decoding.decode_stacked` (the same result,
    each pass over every system's open cells at once), yielded one stack at a time."""
    from fedgl.privacy.stacked_decoding import decode_stacked

    return decode_stacked(systems)


def decode_reference(indptr: np.ndarray, members: np.ndarray, coef: np.ndarray,
                     values: Any, alphabet: np.ndarray, seed: np.ndarray | None = None,
                     seed_levels: np.ndarray | None = None) -> Decoded:
    """Run the attack on rows ``values[i] = Σ_t coef[members[t]] · alphabet[x[members[t]]]``
    for ``t`` in ``indptr[i]:indptr[i+1]`` (CSR over ``len(coef)`` unknown nodes).

    ``seed`` (bool per node) marks nodes already known to the attacker (e.g. by linear algebra)
    with their level indices ``seed_levels`` (rows of those nodes). ``values`` may be a SciPy
    sparse matrix (read densely here)."""
    if hasattr(values, "toarray"):
        values = values.toarray()
    n, f = len(coef), values.shape[1]
    levels = np.asarray(alphabet, dtype=np.float64)
    tol = TOLERANCE * max(1.0, float(np.abs(levels).max()))
    known = np.zeros((n, f), dtype=bool)
    lev = np.zeros((n, f), dtype=np.int8)
    if seed is not None and seed.any():
        known[seed] = True
        lev[seed] = seed_levels
    gap = float(np.diff(levels).min()) if levels.size > 1 else np.inf
    # the all-lowest / all-highest rule needs every other sum to be more than tol away
    extremes = levels.size > 1 and float(coef.min(initial=np.inf)) * gap > 4 * tol
    capped = np.zeros(len(indptr) - 1, dtype=bool)
    col_rows = _transpose(indptr, members, n)
    dirty = np.arange(len(indptr) - 1)
    for _ in range(MAX_PASSES):
        changed = np.zeros(n, dtype=bool)
        for i in dirty:
            mem = members[indptr[i]:indptr[i + 1]]
            if not mem.size:
                continue
            new, capped[i] = _decode_row(mem, coef[mem], values[i], known, lev, levels, tol,
                                         extremes)
            if new:
                changed[mem] = True
        if not changed.any():
            break
        dirty = np.unique(np.concatenate([col_rows[1][col_rows[0][j]:col_rows[0][j + 1]]
                                          for j in np.flatnonzero(changed)]))
    nodes = known.all(axis=1) if f else np.ones(n, dtype=bool)
    flagged = np.zeros(n, dtype=bool)
    for i in np.flatnonzero(capped):
        flagged[members[indptr[i]:indptr[i + 1]]] = True
    return Decoded(known, lev, nodes, flagged & ~nodes)


def _transpose(indptr: np.ndarray, members: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of each node (CSR of the transpose): (pointers, row indices)."""
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    order = np.argsort(members, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(members, minlength=n))])
    return ptr, rows[order]


def _decode_row(mem, cm, value, known, lev, levels, tol, extremes) -> tuple[bool, bool]:
    """Decide what one row reveals (in place in ``known``/``lev``); returns (anything new,
    some cells left undecided by the enumeration bound)."""
    kn = known[mem]
    unk = ~kn
    cols = np.flatnonzero(unk.any(axis=0))
    if not cols.size:
        return False, False
    res = value[cols] - cm @ (levels[lev[mem][:, cols]] * kn[:, cols])
    u = unk[:, cols]
    weight = cm @ u  # Σ of unknown coefficients per column
    new = False
    rest = np.ones(len(cols), dtype=bool)
    if extremes:
        for level, target in ((0, weight * levels[0]), (len(levels) - 1, weight * levels[-1])):
            hit = rest & (np.abs(res - target) <= tol)
            if hit.any():
                t, c = np.nonzero(u[:, hit])
                hc = cols[hit][c]
                known[mem[t], hc] = True
                lev[mem[t], hc] = level
                rest &= ~hit
                new = True
    if not rest.any():
        return new, False
    cols, res, u = cols[rest], res[rest], u[:, rest]
    p = u.sum(axis=0)
    small = len(levels) ** p.astype(np.float64) <= MAX_COMBINATIONS
    capped = bool((~small).any())
    if not small.any():
        return new, capped
    cols, res, u = cols[small], res[small], u[:, small]
    patterns, inverse = np.unique(u.T, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    for q, pattern in enumerate(patterns):
        pos = np.flatnonzero(pattern)
        sel = np.flatnonzero(inverse == q)
        grid = _grid(len(levels), len(pos))
        sums = levels[grid] @ cm[pos]
        order = np.argsort(sums, kind="stable")
        sums, grid = sums[order], grid[order]
        cluster = np.concatenate([[0], np.cumsum(np.diff(sums) > tol)])
        starts = np.flatnonzero(np.concatenate([[True], np.diff(cluster) > 0]))
        lo = np.minimum.reduceat(grid, starts, axis=0)
        hi = np.maximum.reduceat(grid, starts, axis=0)
        v = res[sel]
        k1 = np.searchsorted(sums, v - tol, side="left")
        k2 = np.searchsorted(sums, v + tol, side="right") - 1
        ok = (k1 <= k2) & (k1 < len(sums))
        k1c, k2c = np.minimum(k1, len(sums) - 1), np.clip(k2, 0, len(sums) - 1)
        ok &= cluster[k1c] == cluster[k2c]
        c_id = cluster[k1c]
        det = ok[:, None] & (lo[c_id] == hi[c_id])
        if not det.any():
            continue
        s, t = np.nonzero(det)
        known[mem[pos[t]], cols[sel[s]]] = True
        lev[mem[pos[t]], cols[sel[s]]] = lo[c_id[s], t]
        new = True
    return new, capped
