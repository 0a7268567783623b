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
fraction. That step reads only the non-zeros of the released values (given dense or sparse)
and of the seeded nodes' contributions, ``r⁰ = v - Σ_seeded c_j a_{x_j}``.

Then each row-cell that holds an unknown cell keeps its unknown contributors at step 0
(ascending: per open row-cell, its row's unseeded contributors whose cell is unknown) and,
kept current as cells are decided, its residual ``r = r⁰ - Σ_{decided j} c_j a_{x_j}``, its
count ``p`` of unknowns and their coefficient sum ``w``. A pass visits the row-cells touched
by the cells decided in the previous pass that still hold an unknown, applies the all-lowest
(``|r| ≤ tol``) and all-highest (``|r - w·a_max| ≤ tol``) rules and the enumeration bound from
``(r, p, w)`` alone, and gathers the unknown contributors only of the row-cells a rule acts on.
The enumeration groups row-cells by their unknowns' coefficients (FedGCN's ``d̃^{-1/2}`` take
few values, so many row-cells share one group), sorts each group's ``L^q`` subset sums once
(directly for a few, else by merging the sums so far shifted by each level, ``L`` sorted runs
per unknown) and finds every cell's window in its own group with one ``searchsorted`` over the
groups' sorted sums laid end to end as complex keys ``group + i·sum`` (NumPy orders complex
numbers lexicographically: the same comparisons as within the group). The residuals are the
reference's up to rounding in the last bits (a different order of the same additions), far
inside the tolerance.

When the fast form does not apply (lowest level not 0, a single level, the all-lowest rule
disabled, a node in no row) or two rules disagree (impossible for exact sums; a safeguard),
:func:`decode_sparse` returns None and the caller runs the reference.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from fedgl.privacy import value_decoding as vd

#: the enumeration runs on row-cells of at most this many unknowns first, and on larger ones
#: only when nothing else is left to apply (other cells decoded meanwhile make them smaller)
_STAGES = (4, 8)
#: up to this many assignments, the subset sums are sorted directly, not merged unknown by unknown
_DIRECT = 64
#: elements of the per-chunk arrays of the enumeration (groups x assignments x unknowns)
_CHUNK = 4_000_000
#: (open row-cell, contributor) candidates examined at once for the unknown contributors
_CANDIDATES = 250_000


def decode_sparse(indptr: np.ndarray, members: np.ndarray, coef: np.ndarray,
                  values: np.ndarray | sp.spmatrix, alphabet: np.ndarray,
                  seed: np.ndarray | None = None,
                  seed_levels: np.ndarray | None = None) -> vd.Decoded | None:
    """:func:`fedgl.privacy.value_decoding.decode` by sparse passes, or None where it does not
    apply (see the module docstring). ``values`` may be dense or a SciPy sparse matrix (the
    released rows of sparse features: only their non-zeros are read)."""
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
    indptr = np.asarray(indptr, dtype=np.int64)
    row_count = np.bincount(members, minlength=n)
    seeded = np.zeros(n, dtype=bool) if seed is None else np.asarray(seed, dtype=bool)
    if (~seeded & (row_count == 0)).any():   # a node in no row: left to the reference
        return None
    entry_row = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(indptr))
    rows_of = _node_rows(entry_row, members, n)
    # each row's contributors that are not seeded, ascending: the only possible unknowns
    order = np.lexsort((members, entry_row))
    order = order[~seeded[members[order]]]
    f_node, f_row = members[order], entry_row[order]
    f_ptr = np.concatenate([[0], np.cumsum(np.bincount(f_row, minlength=n_rows))])
    known = np.ones((n, f), dtype=bool)
    lev = np.zeros((n, f), dtype=np.int8)
    v = sp.csr_matrix(values, dtype=np.float64)
    v.sum_duplicates()                       # canonical: row-major keys, sorted and distinct
    # step 0: the all-lowest rule on every row-cell at the seeded state, on the non-zeros of
    # the residual ``values - Σ_seeded c_j a_{x_j}`` (both sparse; the sum in row order)
    if seeded.any():
        s_levels = np.asarray(seed_levels, dtype=np.int8).reshape(-1, f)
        lev[seeded] = s_levels
        s_nodes = np.flatnonzero(seeded)
        s_row, s_col = np.nonzero(s_levels)
        x_seeded = sp.csr_matrix((levels[s_levels[s_row, s_col]], (s_row, s_col)),
                                 shape=(len(s_nodes), f))
        a = sp.csr_matrix((coef[members], members, indptr), shape=(n_rows, n))
        res0 = (v - a[:, s_nodes] @ x_seeded).tocsr()
        res0.sum_duplicates()
    else:
        res0 = v
    big = np.abs(res0.data) > tol
    o_ptr = np.concatenate([[0], np.cumsum(big)])[res0.indptr]
    o_col = res0.indices[big].astype(np.int64)
    open_cells = sp.csr_matrix((np.ones(len(o_col), dtype=np.int32), o_col, o_ptr),
                               shape=(n_rows, f))
    o_row = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(o_ptr))
    o_res = res0.data[big]
    del res0, v
    # the unknown cells: a free node's cells whose every row is open in that column
    per_node = (sp.csr_matrix((np.ones(len(f_node), dtype=np.int32), (f_node, f_row)),
                              shape=(n, n_rows)) @ open_cells).tocoo()
    keep = per_node.data == row_count[per_node.row]
    known[per_node.row[keep], per_node.col[keep]] = False
    left = int(keep.sum())
    del per_node, open_cells, keep
    known_flat, lev_flat = known.reshape(-1), lev.reshape(-1)
    ptr, node_rows = rows_of
    # the row-cells with an unknown cell (all open at step 0), in key order ``i·f + column``,
    # each with its unknown contributors in ascending order: per open row-cell, its row's
    # free contributors whose cell in that column is unknown
    u_members, cell = _unknown_contributors(o_row, o_col, f_ptr, f_node, known_flat, f)
    first = np.flatnonzero(np.concatenate([[True], cell[1:] != cell[:-1]])) if cell.size \
        else np.zeros(0, dtype=np.int64)
    u_key = o_row[cell[first]] * f + o_col[cell[first]]       # sorted, distinct
    u_res = o_res[cell[first]]              # each row-cell's residual at the seeded state
    u_ptr = np.append(first, len(cell))
    del cell, first, o_row, o_col, o_res
    # per row-cell, kept current as cells are decided: its residual (less the decided cells'
    # contributions), its unknown contributors' count and the sum of their coefficients
    u_left = np.diff(u_ptr)
    u_weight = np.add.reduceat(coef[u_members], u_ptr[:-1]) if len(u_key) else np.zeros(0)
    system = (u_ptr, u_members, u_key, u_res, u_weight, u_left)
    classes = np.unique(coef, return_inverse=True)[::-1]     # (class of each node, values)
    # row-cells (positions in u_key) with a cell above the bound, and those left for a later
    # stage, as masks, with the positions ever set in each (to list them)
    capped = np.zeros(len(u_key), dtype=bool)
    pending = np.zeros(len(u_key), dtype=bool)
    n_pending = 0
    capped_seen, pending_seen = [], []
    dirty = reset = np.arange(len(u_key), dtype=np.int64)
    stage = 0
    while left:
        limit = _STAGES[stage] if stage < len(_STAGES) else None
        new_key, new_level, newly_capped, deferred = _pass(dirty, limit, known_flat, lev_flat,
                                                           system, classes, levels, tol, f)
        # the row-cells touched since the last pass are re-assessed (those left without an
        # unknown are neither capped nor pending any more)
        capped[reset] = False
        capped[newly_capped] = True
        capped_seen.append(newly_capped)
        n_pending -= int(pending[reset].sum())
        pending[reset] = False
        pending[deferred] = True
        pending_seen.append(deferred)
        n_pending += len(deferred)
        if not new_key.size:
            if not n_pending:
                break
            dirty = _distinct(np.concatenate(pending_seen))   # the cheaper rules are exhausted
            dirty = reset = dirty[pending[dirty]]
            stage, pending_seen = stage + 1, [dirty]
            continue
        # the same cell decided twice in a pass: the levels must agree (a safeguard)
        lev_flat[new_key] = new_level
        if (lev_flat[new_key] != new_level).any():
            return None
        new_key = _distinct(new_key)
        known_flat[new_key] = True
        left -= new_key.size
        reset = _update(new_key, lev_flat[new_key], system, (ptr, node_rows), coef, levels, f)
        dirty = reset[u_left[reset] > 0]
        stage = 0
    if left and capped_seen:
        at = _distinct(np.concatenate(capped_seen))
        capped_rows = _distinct(u_key[at[capped[at]]] // f)
    else:
        capped_rows = np.zeros(0, dtype=np.int64)
    nodes = known.all(axis=1)
    flagged = np.zeros(n, dtype=bool)
    if capped_rows.size:
        starts, ends = indptr[capped_rows], indptr[capped_rows + 1]
        flagged[members[_ranges(starts, ends)]] = True
    return vd.Decoded(known, lev, nodes, flagged & ~nodes)


def _unknown_contributors(o_row, o_col, f_ptr, f_node, known_flat, f):
    """Per open row-cell (``o_row``, ``o_col``, in key order), its row's free contributors
    (``f_ptr``, ``f_node``: ascending per row) whose cell in that column is unknown: (the
    contributors, the index of each one's row-cell), in row-cell order. In chunks of at most
    :data:`_CANDIDATES` candidates, so that the temporaries stay small."""
    small = np.int32 if len(known_flat) < 2 ** 31 else np.int64    # keys j·f + column
    count = f_ptr[o_row + 1] - f_ptr[o_row]
    ends = np.cumsum(count)
    members, cells = [], []
    lo = 0
    while lo < len(o_row):
        hi = max(lo + 1, int(np.searchsorted(ends, ends[lo] - count[lo] + _CANDIDATES,
                                             side="right")))
        cand = f_node[_ranges(f_ptr[o_row[lo:hi]], f_ptr[o_row[lo:hi] + 1])].astype(small)
        at = np.flatnonzero(~known_flat[cand * f + np.repeat(o_col[lo:hi].astype(small),
                                                             count[lo:hi])])
        members.append(cand[at].astype(np.int64))
        start = ends[lo:hi] - count[lo:hi] - (ends[lo] - count[lo])
        cells.append(np.searchsorted(start, at, side="right") - 1 + lo)
        lo = hi
    if not members:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(members), np.concatenate(cells)


def _node_rows(entry_row: np.ndarray, members: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """Rows of each node (CSR of the transpose): (pointers, row indices)."""
    order = np.argsort(members, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(members, minlength=n))])
    return ptr, entry_row[order]


def _distinct(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` for a 1-d array, by a sort (NumPy's hashing ``unique`` is many times
    slower on these integer keys)."""
    s = np.sort(a)
    if s.size < 2:
        return s
    return s[np.concatenate([[True], s[1:] != s[:-1]])]


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(s, e)`` for each pair."""
    counts = ends - starts
    if not counts.sum():
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return np.arange(int(counts.sum()), dtype=np.int64) + offsets


def _update(new_key, new_level, system, rows_of, coef, levels, f) -> np.ndarray:
    """The decided cells ``new_key`` (keys ``j·f + column``, distinct, with their levels) leave
    every row-cell of their node in their column: one unknown fewer, their coefficient off
    the unknowns' sum, ``c_j · a_level`` off the residual. Returns those row-cells (positions
    in the keys, distinct); each is there, as its cell was unknown."""
    u_key, u_res, u_weight, u_left = system[2:]
    ptr, node_rows = rows_of
    nj, ncol = new_key // f, new_key % f
    count = ptr[nj + 1] - ptr[nj]
    keys = node_rows[_ranges(ptr[nj], ptr[nj + 1])] * f + np.repeat(ncol, count)
    order = np.argsort(keys)       # NumPy's default sort (vectorised), many times the stable
    pos = np.searchsorted(u_key, keys[order])       # ascending needles: a cheap search
    c = np.repeat(coef[nj], count)[order]
    first = np.flatnonzero(np.concatenate([[True], pos[1:] != pos[:-1]]))
    at = pos[first]
    u_left[at] -= np.diff(np.append(first, len(pos)))
    u_weight[at] -= np.add.reduceat(c, first)
    u_res[at] -= np.add.reduceat(c * levels[np.repeat(new_level, count)[order]], first)
    return at


def _pass(dirty, limit, known_flat, lev_flat, system, classes, levels, tol, f):
    """One application of the rules to every row-cell in ``dirty`` (positions in the keys
    ``i·f + column`` of the row-cells with an unknown cell, ``system = (pointers, unknown
    contributors at the seeded state, keys, current residuals, unknowns' coefficient sums,
    unknowns' counts)``), each with an unknown cell, the enumeration only up to ``limit``
    unknowns (None: the bound). The rules read the row-cell's current residual (its residual
    at the seeded state less its contributors decided since), its unknowns' count and their
    coefficients' sum; only the row-cells a rule applies to gather their unknown contributors.
    Returns (keys ``j·f + column`` of the newly known cells, their levels, the visited
    row-cells with a cell above the enumeration bound, those left for a later stage); a cell
    decided by two row-cells appears twice (the caller checks that their levels agree)."""
    u_ptr, u_members, u_key, u_res, u_weight, u_left = system
    p = u_left[dirty]
    res = u_res[dirty]
    low = np.abs(res) <= tol
    high = ~low & (np.abs(res - u_weight[dirty] * levels[-1]) <= tol)
    small = p <= _most_unknowns(len(levels))
    rest = ~low & ~high
    later = rest & small & (p > (limit if limit is not None else p.max(initial=0)))
    act = np.flatnonzero(low | high | (rest & small & ~later))
    capped, deferred = dirty[rest & ~small], dirty[later]
    if not act.size:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int8), capped, deferred
    # the unknown contributors of the row-cells acted on (ascending within a row-cell)
    c_pos = dirty[act]
    c_col = u_key[c_pos] % f
    t_node = u_members[_ranges(u_ptr[c_pos], u_ptr[c_pos + 1])]
    t_key = t_node * f + np.repeat(c_col, u_ptr[c_pos + 1] - u_ptr[c_pos])
    unk = ~known_flat[t_key]
    t_node, t_key = t_node[unk], t_key[unk]
    p, low, high = p[act], low[act], high[act]
    starts = np.cumsum(p) - p
    cell_of = np.repeat(np.arange(len(act)), p)
    by_low, by_high = low[cell_of], high[cell_of]
    new_key = [t_key[by_low], t_key[by_high]]
    new_level = [np.zeros(int(by_low.sum()), dtype=np.int8),
                 np.full(int(by_high.sum()), len(levels) - 1, dtype=np.int8)]
    enum = np.flatnonzero(~low & ~high)
    res = res[act]
    enum = enum[np.argsort(p[enum])]
    sizes = p[enum]
    bounds = np.flatnonzero(np.concatenate([[True], sizes[1:] != sizes[:-1], [True]])) \
        if enum.size else np.zeros(0, dtype=np.int64)
    for b0, b1 in zip(bounds[:-1], bounds[1:], strict=False):
        cells, q = enum[b0:b1], sizes[b0]
        key, level = _enumerate(cells, int(q), starts, c_col, res, t_node, classes, levels,
                                tol, f)
        new_key.append(key)
        new_level.append(level)
    return np.concatenate(new_key), np.concatenate(new_level), capped, deferred


def _most_unknowns(n_levels: int) -> int:
    """The most unknowns ``q`` with ``L^q ≤`` :data:`fedgl.privacy.value_decoding.MAX_COMBINATIONS`
    (the enumeration bound, as the reference tests it)."""
    q = 0
    while float(n_levels) ** (q + 1) <= vd.MAX_COMBINATIONS:
        q += 1
    return q


def _enumerate(cells, q, starts, c_col, res, t_node, classes, levels, tol, f):
    """The enumeration rule on row-cells with ``q`` unknown contributors each: group the cells
    by their unknowns' coefficients (in the unknowns' order; ``classes`` = (each node's
    coefficient class, the classes' values): FedGCN's ``d̃^{-1/2}`` take few values), sort each
    group's ``L^q`` subset sums once, and decide the cells on which every assignment in the
    residual's tolerance cluster agrees. The sums, their clusters and the levels each cluster
    allows depend on the coefficients alone, so cells with the same coefficients share them."""
    nodes = t_node[starts[cells][:, None] + np.arange(q)]            # cells x q, ascending
    groups, group_of = _unique_ids(classes[0][nodes], len(classes[1]))
    group_coef = classes[1][groups]
    grid = vd._grid(len(levels), q)
    step = max(1, _CHUNK // len(grid))
    keys, lvls = [], []
    order = np.argsort(group_of)
    bounds = np.searchsorted(group_of[order], np.arange(0, len(groups) + step, step))
    for b in range(len(bounds) - 1):
        g0, g1 = b * step, min((b + 1) * step, len(groups))
        if g0 >= g1:
            break
        mine = order[bounds[b]:bounds[b + 1]]
        key, lvl = _decide(group_coef[g0:g1], group_of[mine] - g0, cells[mine], nodes[mine],
                           grid, c_col, res, levels, tol, f)
        keys.append(key)
        lvls.append(lvl)
    if not keys:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int8)
    return np.concatenate(keys), np.concatenate(lvls)


def _unique_ids(ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_unique_rows` of rows of ids in ``[0, k)``: as one integer per row (base ``k``)
    where that fits, which orders the rows as the lexicographic sort does."""
    q = ids.shape[1]
    if not len(ids) or float(k) ** q >= 2.0 ** 62:
        return _unique_rows(ids)
    key = ids[:, 0].astype(np.int64)
    for t in range(1, q):
        key = key * k + ids[:, t]
    order = np.argsort(key)
    new = np.ones(len(key), dtype=bool)
    new[1:] = key[order[1:]] != key[order[:-1]]
    inverse = np.empty(len(key), dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return ids[order[new]], inverse


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


def _sorted_sums(levels: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every group's ``L^q`` subset sums ``Σ_k c[g, k] · levels[a_k]``, sorted, and the
    assignments' rows in :func:`fedgl.privacy.value_decoding._grid` (the first unknown most
    significant) in that order. The first unknowns (up to :data:`_DIRECT` assignments)
    directly; then one unknown at a time: the sums so far, shifted by each level, are ``L``
    sorted runs that a stable sort merges in linear time (ties keep any order: what is read
    from the sorted sums, counts and clusters, does not depend on it)."""
    n_levels, q = len(levels), c.shape[1]
    first = q
    while first > 1 and n_levels ** first > _DIRECT:
        first -= 1
    sums = (levels[vd._grid(n_levels, first)] @ c[:, :first].T).T     # groups x L^first
    rows = np.argsort(sums, axis=1)
    sums = np.take_along_axis(sums, rows, axis=1)
    for k in range(first, q):
        ext = np.concatenate([sums + c[:, k:k + 1] * lv for lv in levels], axis=1)
        ext_rows = np.concatenate([rows * n_levels + lv for lv in range(n_levels)], axis=1)
        o = np.argsort(ext, axis=1, kind="stable")
        sums = np.take_along_axis(ext, o, axis=1)
        rows = np.take_along_axis(ext_rows, o, axis=1)
    return sums, rows


def _decide(group_coef, g, cells, nodes, grid, c_col, res, levels, tol, f):
    """Decide the cells of one chunk of groups (see :func:`_enumerate`): a cell is decided in
    the unknowns on which every assignment of its residual's cluster agrees, provided the
    window ``[v - tol, v + tol]`` lies in one cluster (the reference's rule)."""
    size, q = grid.shape
    sums, order = _sorted_sums(levels, group_coef)                    # groups x L^q
    cluster = np.concatenate([np.zeros((len(sums), 1), dtype=np.int32),
                              np.cumsum(np.diff(sums, axis=1) > tol, axis=1, dtype=np.int32)],
                             axis=1)
    # per-group searches, all at once: the groups' sorted sums laid end to end as complex
    # keys ``group + i·sum`` (NumPy orders complex numbers lexicographically), so one
    # ``searchsorted`` counts, in each cell's own group, the sums below its window (exact:
    # the same comparisons as within the group)
    n_groups = len(sums)
    base = g * size
    flat = np.empty(n_groups * size, dtype=np.complex128)
    flat.real = np.repeat(np.arange(n_groups, dtype=np.float64), size)
    flat.imag = sums.reshape(-1)
    v = res[cells]
    probe = np.empty(len(cells), dtype=np.complex128)
    probe.real = g
    probe.imag = v - tol
    k1 = np.searchsorted(flat, probe, side="left") - base
    probe.imag = v + tol
    k2 = np.searchsorted(flat, probe, side="right") - base - 1
    del flat, probe
    ok = (k1 <= k2) & (k1 < size)
    k1c, k2c = np.minimum(k1, size - 1), np.clip(k2, 0, size - 1)
    c_id = cluster[g, k1c]
    ok &= c_id == cluster[g, k2c]
    cells, g, nodes, c_id = cells[ok], g[ok], nodes[ok], c_id[ok]
    if n_groups * size <= 4 * len(cells):
        # few assignments for many cells: every cluster of every group once (the lowest and
        # highest level of each unknown over its assignments), then each cell's own
        new = np.ones((n_groups, size), dtype=bool)
        new[:, 1:] = cluster[:, 1:] != cluster[:, :-1]
        at = np.flatnonzero(new.reshape(-1))
        members = grid[order.reshape(-1)]                             # assignments x q
        lo = np.minimum.reduceat(members, at, axis=0)
        same = lo == np.maximum.reduceat(members, at, axis=0)
        which = np.concatenate([[0], np.cumsum(cluster[:, -1] + 1)[:-1]])[g] + c_id
        s, t = np.nonzero(same[which])
        return nodes[s, t] * f + c_col[cells[s]], lo[which[s], t].astype(np.int8)
    # each distinct (group, cluster) of the cells once: its first and last position in the
    # group (cluster ids ascend), and the lowest and highest level of each unknown over it
    c_key = (np.arange(n_groups, dtype=np.int64)[:, None] * size + cluster).reshape(-1)
    pair, which = np.unique(g * size + c_id, return_inverse=True)
    which = which.reshape(-1)
    p_group = pair // size
    first = np.searchsorted(c_key, pair, side="left")
    last = np.searchsorted(c_key, pair, side="right")
    span = last - first
    pos = _ranges(first, last) - np.repeat(p_group * size, span)
    members = grid[order[np.repeat(p_group, span), pos]]              # cluster rows x q
    at = np.concatenate([[0], np.cumsum(span)[:-1]])
    lo = np.minimum.reduceat(members, at, axis=0)[which] if len(cells) else members
    hi = np.maximum.reduceat(members, at, axis=0)[which] if len(cells) else members
    s, t = np.nonzero(lo == hi)
    return nodes[s, t] * f + c_col[cells[s]], lo[s, t].astype(np.int8)
