"""Many value-decoding systems decoded as one: the block-diagonal stack of their rows and nodes.

Systems ``s = 1..S``, each ``(indptr, members, coef, values, alphabet, seed, seed_levels)`` as
:func:`fedgl.privacy.value_decoding.decode` takes it, over the same feature columns and the
same alphabet, stack into one system: node ``j`` of system ``s`` becomes ``o_s + j`` with
``o_s = Σ_{t<s} n_t`` (its nodes), row ``i`` becomes ``p_s + i`` with ``p_s = Σ_{t<s} m_t``
(its rows), so the released rows are ``[values_1; …; values_S]``, the coefficients
``[coef_1, …, coef_S]``, and no row holds two systems' nodes.

Why the stack decodes each system exactly as alone: every rule of the decoder reads one
row-cell (a row, a column) and the cells of that row's contributors, which all belong to the
row's system; so a rule fires on the stack exactly where it fires on that system in the same
state, and the cells the rules determine form, system by system, the same least fixed point
(:mod:`fedgl.privacy.sparse_decoding` shows the order of application does not matter). The
tolerance depends on the alphabet only, the same for every system. What changes is the cost:
each pass of :func:`fedgl.privacy.sparse_decoding.decode_sparse` applies the rules to every
system's open cells with the same handful of array operations, so the passes number the
slowest system's, not their sum. The result is cut back at the offsets (views of the stacked
arrays, no copy). The saving is small on Cora and CiteSeer (the passes' array operations cost
what the cells they touch cost, stacked or not), so the stacks are kept small, for memory.

Systems are stacked in order while their cells ``Σ n_s · f`` stay within
:data:`MAX_STACK_CELLS` (the decoder holds two bytes per cell); a larger system is decoded
alone. Where the sparse decoder does not apply to a stack (an alphabet whose lowest level is
not 0, a node in no row, ...: it returns None) each of its systems goes to
:func:`fedgl.privacy.value_decoding.decode` alone, which applies the same test to it and runs
the reference where it fails.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from fedgl.privacy import value_decoding as vd
from fedgl.privacy.sparse_decoding import decode_sparse

#: cells (nodes x feature columns, summed over the systems) of one stack: the decoder holds a
#: known flag and a level index (a byte each) per cell
MAX_STACK_CELLS = 4_000_000


def decode_stacked(systems: Sequence[tuple[Any, ...]]) -> Iterator[vd.Decoded]:
    """:func:`fedgl.privacy.value_decoding.decode` of each system, computed on stacks of
    systems (module docstring), yielded in the systems' order, one stack at a time: a stack's
    arrays are freed once the caller has dropped its systems' results."""
    for group in _groups(systems):
        decoded = _decode_group([systems[s] for s in group]) if len(group) > 1 else None
        if decoded is None:
            decoded = [vd.decode(*systems[s]) for s in group]
        while decoded:
            yield decoded.pop(0)


def _cells(system: tuple[Any, ...]) -> int:
    return len(system[2]) * system[3].shape[1]


def _groups(systems: Sequence[tuple[Any, ...]], budget: int | None = None) -> list[list[int]]:
    """Consecutive runs of stackable systems (sparse values, the same alphabet and columns)
    of at most ``budget`` cells (:data:`MAX_STACK_CELLS`); any other system alone."""
    budget = MAX_STACK_CELLS if budget is None else budget
    groups: list[list[int]] = []
    cells, key = 0, None
    for s, system in enumerate(systems):
        _, _, _, values, alphabet, _, _ = _full(system)
        size = _cells(system)
        this = (values.shape[1], tuple(np.asarray(alphabet, dtype=np.float64).tolist())) \
            if sp.issparse(values) else None
        if this is None or this != key or cells + size > budget or not groups:
            groups.append([s])
            cells, key = size, this
        else:
            groups[-1].append(s)
            cells += size
    return groups


def _full(system: tuple[Any, ...]) -> tuple[Any, ...]:
    """The system with its optional seed arguments (None where absent)."""
    return tuple(system) + (None,) * (7 - len(system))


def _decode_group(group: list[tuple[Any, ...]]) -> list[vd.Decoded] | None:
    """Decode the stack of ``group`` (all with sparse values, one alphabet, one column count)
    and cut the result per system; None where the sparse decoder does not apply to it."""
    systems = [_full(s) for s in group]
    n = np.array([len(s[2]) for s in systems], dtype=np.int64)
    node_off = np.concatenate([[0], np.cumsum(n)])
    entry_off = np.concatenate([[0], np.cumsum([int(np.asarray(s[0])[-1]) for s in systems])])
    f = systems[0][3].shape[1]
    indptr = np.concatenate([[0]] + [np.asarray(s[0], dtype=np.int64)[1:] + entry_off[k]
                                     for k, s in enumerate(systems)])
    members = np.concatenate([np.asarray(s[1], dtype=np.int64)[:np.asarray(s[0])[-1]]
                              + node_off[k] for k, s in enumerate(systems)])
    coef = np.concatenate([np.asarray(s[2], dtype=np.float64) for s in systems])
    values = sp.vstack([s[3] for s in systems], format="csr")
    seed = np.zeros(int(node_off[-1]), dtype=bool)
    seed_levels = []
    for k, s in enumerate(systems):
        if s[5] is not None and np.asarray(s[5]).any():
            seed[node_off[k]:node_off[k + 1]] = s[5]
            seed_levels.append(np.asarray(s[6]).reshape(-1, f))
    lv = np.concatenate(seed_levels) if seed_levels else np.zeros((0, f), dtype=np.int8)
    got = decode_sparse(indptr, members, coef, values, systems[0][4], seed, lv)
    if got is None:
        return None
    out = []
    for k in range(len(systems)):
        a, b = node_off[k], node_off[k + 1]
        out.append(vd.Decoded(got.known[a:b], got.levels[a:b], got.nodes[a:b],
                              got.unresolved[a:b]))
    return out
