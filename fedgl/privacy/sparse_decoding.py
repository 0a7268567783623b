"""The value-level decoder of :mod:`fedgl.privacy.value_decoding`, as a sparse fixed point.

Same attack, same rules, same result; only the order in which the rules are applied changes.
The reference visits one row at a time (a Python loop over rows and passes); this module
applies every rule to every open cell of the system at once, pass after pass, with array
operations over the cells that are still unknown.

Why the order does not matter: every rule only ever *adds* a known cell, and what it adds is
the truth. The released value of row i in column f is ``v = Σ_j c_j a_{x_jf}`` (noiseless), so
after subtracting the known cells the residual is the sum of the unknown cells' true levels:

- the all-lowest rule fires only when every other assignment is more than ``4·tol`` away (the
  ``extremes`` condition), so it fires only on the truth;
- the enumeration decides a cell only when every assignment in the tolerance cluster of the
  residual agrees on it, and the true assignment is in that cluster.

With more cells known a rule that fired still fires (fewer unknowns, the same true residual, a
cluster that can only shrink) and the enumeration bound can only be met more often. The rules
are monotone, so the cells they determine form one least fixed point, reached by any fair order
of application: the reference's row-by-row passes and this module's all-at-once passes alike.
The rows flagged ``unresolved`` (an enumeration above :data:`MAX_COMBINATIONS`) are those
that still have such a cell at the fixed point, in both. The reference stops after
``MAX_PASSES`` passes; this module runs to the fixed point (each pass decides a cell or stops).
``tests/test_leakage_fast.py`` checks equality with the reference on real and random systems.

Sparse form (the alphabet's lowest level is 0, as for bag-of-words features): a row-cell whose
residual is 0 makes every unknown contributor's cell 0 at once, so after the first step the
only unknown cells are those of nodes whose every row is non-zero in that column, a small
fraction. Each pass then expands the unknown cells to (row, column, node) triples, groups them
by row-cell, and applies the rules to those row-cells only. When the fast form does not apply
(lowest level not 0, a single level, the all-lowest rule disabled) or two rules disagree
(impossible for exact sums; a safeguard), :func:`decode_sparse` returns None and the caller
runs the reference.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from fedgl.privacy import value_decoding as vd

#: the enumeration runs on row-cells of at most this many unknowns first, and on larger ones
#: only when nothing else is left to apply (other cells decoded meanwhile make them smaller)
_STAGES = (4, 8)
#: elements of the per-chunk arrays of the enumeration (groups x assignments x unknowns)
_CHUNK = 4_000_000


def decode_sparse(indptr: np.ndarray, members: np.ndarray, coef: np.ndarray,
                  values: np.ndarray, alphabet: np.ndarray, seed: np.ndarray | None = None,
                  seed_levels: np.ndarray | None = None) -> vd.Decoded | None:
    """:func:`fedgl.privacy.value_decoding.decode` by sparse passes, or None where it does not
    apply (see the module docstring)."""
    n, f = len(coef), values.shape[1]
    n_rows = len(indptr) - 1
    levels = np.asarray(alphabet, dtype=np.float64)
    if levels.size < 2 or levels[0] != 0.0 or f == 0 or n == 0:
        return None
    tol = vd.TOLERANCE * max(1.0, float(np.abs(levels).max()))
    gap = float(np.diff(levels).min())
    if not float(coef.min(initial=np.inf)) * gap > 4 * tol:
        return None
    members = np.asarray(members, dtype=np.int64)
    entry_row = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(indptr))
    a = sp.csr_matrix((coef[members], members, indptr), shape=(n_rows, n))
    rows_of = _node_rows(entry_row, members, n)
    known = np.zeros((n, f), dtype=bool)
    lev = np.zeros((n, f), dtype=np.int8)
    seeded = np.zeros(n, dtype=bool)
    if seed is not None and seed.any():
        seeded = np.asarray(seed, dtype=bool)
        known[seeded] = True
        lev[seeded] = seed_levels
    # step 0: the all-lowest rule on every row-cell at the seeded state
    res0 = values - a[:, np.flatnonzero(seeded)] @ levels[lev[seeded]] if seeded.any() \
        else values
    open_cells = sp.csr_matrix(np.abs(res0) > tol, dtype=np.int32)
    del res0
    per_node = (sp.csr_matrix((np.ones(len(members), dtype=np.int32), (members, entry_row)),
                              shape=(n, n_rows)) @ open_cells).tocoo()
    row_count = np.bincount(members, minlength=n)
    if (~seeded & (row_count == 0)).any():   # a node in no row: left to the reference
        return None
    keep = (per_node.data == row_count[per_node.row]) & ~seeded[per_node.row]
    unknown = np.sort(per_node.row[keep].astype(np.int64) * f + per_node.col[keep])
    del per_node, open_cells
    known[:] = True
    known[unknown // f, unknown % f] = False
    ptr, node_rows = rows_of
    # row-cells to visit: those with an unknown cell (the pattern of incidence x unknown cells,
    # row-major, so the keys come sorted and distinct)
    cells = sp.csr_matrix((np.ones(unknown.size, dtype=np.int32), (unknown // f, unknown % f)),
                          shape=(n, f))
    touched = (sp.csr_matrix((np.ones(len(members), dtype=np.int32), members, indptr),
                             shape=(n_rows, n)) @ cells).tocsr()
    touched.sort_indices()
    dirty = np.repeat(np.arange(n_rows, dtype=np.int64) * f, np.diff(touched.indptr)) \
        + touched.indices
    left = unknown.size
    del unknown, cells, touched
    capped = np.zeros(0, dtype=np.int64)         # row-cells with a cell above the bound
    pending = np.zeros(0, dtype=np.int64)        # row-cells left for a later stage
    stage = 0
    while left:
        limit = _STAGES[stage] if stage < len(_STAGES) else None
        step = _pass(dirty, limit, known, lev, indptr, members, coef, values, levels, tol, f)
        if step is None:
            return None
        new_key, new_level, newly_capped, deferred = step
        capped = np.union1d(capped[~_member(capped, dirty)], newly_capped)
        pending = np.union1d(pending[~_member(pending, dirty)], deferred)
        if not new_key.size:
            if not pending.size:
                break
            stage, dirty = stage + 1, pending      # the cheaper rules are exhausted
            continue
        nj, ncol = new_key // f, new_key % f
        known[nj, ncol] = True
        lev[nj, ncol] = new_level
        left -= new_key.size
        dirty = np.unique(node_rows[_ranges(ptr[nj], ptr[nj + 1])] * f
                          + np.repeat(ncol, ptr[nj + 1] - ptr[nj]))
        stage = 0
    if not left:
        capped = np.zeros(0, dtype=np.int64)
    capped_rows = np.unique(capped // f)
    nodes = known.all(axis=1)
    flagged = np.zeros(n, dtype=bool)
    if capped_rows.size:
        starts, ends = indptr[capped_rows], indptr[capped_rows + 1]
        flagged[members[_ranges(starts, ends)]] = True
    return vd.Decoded(known, lev, nodes, flagged & ~nodes)


def _node_rows(entry_row: np.ndarray, members: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """Rows of each node (CSR of the transpose): (pointers, row indices)."""
    order = np.argsort(members, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(members, minlength=n))])
    return ptr, entry_row[order]


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(s, e)`` for each pair."""
    counts = ends - starts
    if not counts.sum():
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return np.arange(int(counts.sum()), dtype=np.int64) + offsets


def _member(keys: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Mask of ``keys`` found in the sorted array ``sorted_set``."""
    if not sorted_set.size:
        return np.zeros(len(keys), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, keys), len(sorted_set) - 1)
    return sorted_set[at] == keys


def _pass(dirty, limit, known, lev, indptr, members, coef, values, levels, tol, f):
    """One application of the rules to every row-cell ``i·f + column`` in ``dirty`` that has
    an unknown cell, the enumeration only up to ``limit`` unknowns (None: the bound). Returns
    (keys ``j·f + column`` of the newly known cells, their levels, the visited row-cells with a
    cell above the enumeration bound, those left for a later stage), or None when two rules
    disagree."""
    empty = np.zeros(0, dtype=np.int64)
    d_row, d_col = dirty // f, dirty % f
    sizes = indptr[d_row + 1] - indptr[d_row]
    t_node = members[_ranges(indptr[d_row], indptr[d_row + 1])]   # ascending within a row
    t_col = np.repeat(d_col, sizes)
    t_cell = np.repeat(np.arange(len(dirty)), sizes)
    t_known = known[t_node, t_col]
    # the known part of each row-cell: unknown cells hold level 0, which adds 0
    part = np.zeros(len(dirty))
    has = sizes > 0
    if has.any():
        part[has] = np.add.reduceat(coef[t_node] * levels[lev[t_node, t_col]],
                                    (np.cumsum(sizes) - sizes)[has])
    p_all = np.bincount(t_cell[~t_known], minlength=len(dirty))
    cell_ids = np.flatnonzero(p_all)
    if not cell_ids.size:
        return empty, np.zeros(0, dtype=np.int8), empty, empty
    t_node, t_col, t_cell = t_node[~t_known], t_col[~t_known], t_cell[~t_known]
    p = p_all[cell_ids]
    starts = np.cumsum(p) - p
    c_row, c_col, c_key = d_row[cell_ids], d_col[cell_ids], dirty[cell_ids]
    weight = np.add.reduceat(coef[t_node], starts)
    res = values[c_row, c_col] - part[cell_ids]
    low = np.abs(res) <= tol
    high = ~low & (np.abs(res - weight * levels[-1]) <= tol)
    small = len(levels) ** p.astype(np.float64) <= vd.MAX_COMBINATIONS
    rest = ~low & ~high
    cell_of = np.repeat(np.arange(len(cell_ids)), p)
    by_low, by_high = low[cell_of], high[cell_of]
    new_key = [t_node[by_low] * f + t_col[by_low], t_node[by_high] * f + t_col[by_high]]
    new_level = [np.zeros(int(by_low.sum()), dtype=np.int8),
                 np.full(int(by_high.sum()), len(levels) - 1, dtype=np.int8)]
    later = rest & small & (p > (limit if limit is not None else p.max()))
    enum = np.flatnonzero(rest & small & ~later)
    for q in np.unique(p[enum]):
        cells = enum[p[enum] == q]
        key, level = _enumerate(cells, int(q), starts, c_row, c_col, res, t_node, coef,
                                levels, tol, f)
        new_key.append(key)
        new_level.append(level)
    keys, level = np.concatenate(new_key), np.concatenate(new_level)
    keys, first, inverse = np.unique(keys, return_index=True, return_inverse=True)[:3]
    level_first = level[first]
    if (level_first[inverse.reshape(-1)] != level).any():
        return None
    return keys, level_first, c_key[rest & ~small], c_key[later]


def _enumerate(cells, q, starts, c_row, c_col, res, t_node, coef, levels, tol, f):
    """The enumeration rule on row-cells with ``q`` unknown contributors each: group the cells
    by (row, unknown contributors), sort each group's ``L^q`` subset sums, and decide the cells
    on which every assignment in the residual's tolerance cluster agrees."""
    nodes = t_node[starts[cells][:, None] + np.arange(q)]            # cells x q, ascending
    groups, group_of = _unique_rows(np.column_stack([c_row[cells], nodes]))
    grid = vd._grid(len(levels), q)
    step = max(1, _CHUNK // len(grid))
    keys, lvls = [], []
    order = np.argsort(group_of, kind="stable")
    bounds = np.searchsorted(group_of[order], np.arange(0, len(groups) + step, step))
    for b in range(len(bounds) - 1):
        g0, g1 = b * step, min((b + 1) * step, len(groups))
        if g0 >= g1:
            break
        mine = order[bounds[b]:bounds[b + 1]]
        key, lvl = _decide(groups[g0:g1, 1:], group_of[mine] - g0, cells[mine], nodes[mine],
                           grid, c_col, res, coef, levels, tol, f)
        keys.append(key)
        lvls.append(lvl)
    if not keys:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int8)
    return np.concatenate(keys), np.concatenate(lvls)


def _unique_rows(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(m, axis=0, return_inverse=True)`` (the same rows, order and inverse), by a
    lexicographic sort of the columns: several times faster than the structured comparison."""
    if not len(m):
        return m, np.zeros(0, dtype=np.int64)
    order = np.lexsort(m.T[::-1])
    ordered = m[order]
    new = np.ones(len(m), dtype=bool)
    new[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    inverse = np.empty(len(m), dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return ordered[new], inverse


def _decide(group_nodes, g, cells, nodes, grid, c_col, res, coef, levels, tol, f):
    """Decide the cells of one chunk of groups (see :func:`_enumerate`): a cell is decided in
    the unknowns on which every assignment of its residual's cluster agrees, provided the
    window ``[v - tol, v + tol]`` lies in one cluster (the reference's rule)."""
    size, q = grid.shape
    sums = (levels[grid] @ coef[group_nodes].T).T                      # groups x L^q
    order = np.argsort(sums, axis=1, kind="stable")
    sums = np.take_along_axis(sums, order, axis=1)
    cluster = np.concatenate([np.zeros((len(sums), 1), dtype=np.int32),
                              np.cumsum(np.diff(sums, axis=1) > tol, axis=1, dtype=np.int32)],
                             axis=1)
    v = res[cells]
    k1, k2 = np.zeros(len(cells), dtype=np.int64), np.zeros(len(cells), dtype=np.int64)
    step = max(1, _CHUNK // size)
    for s in range(0, len(cells), step):
        mine = sums[g[s:s + step]]
        k1[s:s + step] = (mine < (v[s:s + step] - tol)[:, None]).sum(axis=1)
        k2[s:s + step] = (mine <= (v[s:s + step] + tol)[:, None]).sum(axis=1) - 1
    ok = (k1 <= k2) & (k1 < size)
    k1c, k2c = np.minimum(k1, size - 1), np.clip(k2, 0, size - 1)
    c_id = cluster[g, k1c]
    ok &= c_id == cluster[g, k2c]
    cells, g, nodes, c_id, k1c = cells[ok], g[ok], nodes[ok], c_id[ok], k1c[ok]
    first = np.zeros(len(cells), dtype=np.int64)
    last = np.zeros(len(cells), dtype=np.int64)
    for s in range(0, len(cells), step):
        mine = cluster[g[s:s + step]]
        first[s:s + step] = (mine < c_id[s:s + step, None]).sum(axis=1)
        last[s:s + step] = (mine <= c_id[s:s + step, None]).sum(axis=1)
    span = last - first
    pos = _ranges(first, last)
    members = grid[order[np.repeat(g, span), pos]]                    # cluster rows x q
    at = np.concatenate([[0], np.cumsum(span)[:-1]])
    lo = np.minimum.reduceat(members, at, axis=0) if len(cells) else members
    hi = np.maximum.reduceat(members, at, axis=0) if len(cells) else members
    s, t = np.nonzero(lo == hi)
    return nodes[s, t] * f + c_col[cells[s]], lo[s, t].astype(np.int8)
