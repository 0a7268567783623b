"""The edges table of ``fedgl ingest`` against the own ids, over Arrow columns (the columnar
reader's part of :mod:`.vectorised`): a batch of the table at a time (:func:`.columnar.edge_batches`),
each end looked up among the own ids (an Arrow hash join, or a lookup by number where every id
is one prefix and a whole number), checked (an empty endpoint; horizontally, an edge with no own
endpoint), and, after the last batch, the other organisations' ids hashed once each and the edges
turned into sorted distinct pairs of local indices (:func:`edge_index`). The same arrays and
errors as :func:`.checks.horizontal_edges` and :func:`.checks.vertical_edges`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedgl.data.own import columnar
from fedgl.data.own.columnar import utf8_values
from fedgl.data.own.secret import PSEUDONYM_BYTES, order_of, pseudonyms
from fedgl.errors import DataError

if TYPE_CHECKING:
    from fedgl.data.own.ingest import IngestSpec


def edge_index(parts: list[Batch], ids: Any, own_p: np.ndarray, order: np.ndarray,
               secret: bytes, vertical: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(edges, others)``. Horizontal: ``edges`` (int64 ``[2, E]``) in local indices (an own
    node's rank, or ``n +`` the rank of another organisation's id among ``others``, their
    pseudonyms sorted). Vertical: ``others`` is every endpoint's pseudonym, sorted, and
    ``edges`` index it. Each undirected edge once as (low, high), sorted; self-loops dropped."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(ids)
    others = pc.unique(pa.chunked_array([p.texts for p in parts], type=pa.string()))
    others = others.combine_chunks() if isinstance(others, pa.ChunkedArray) else others
    other_p = pseudonyms(secret, utf8_values(others))
    if vertical:   # the ends: the own ids that are endpoints, then the others
        used = np.zeros(n, dtype=bool)
        for p in parts:
            used[p.own[p.own >= 0]] = True
        own_ends = np.flatnonzero(used)
        ends_p = np.concatenate([own_p[own_ends], other_p])
        e_order = order_of(ends_p)
        e_rank = np.empty(len(e_order), dtype=np.int64)
        e_rank[e_order] = np.arange(len(e_order))
        own_local = np.full(n, -1, dtype=np.int64)
        own_local[own_ends] = e_rank[:len(own_ends)]
        other_local = e_rank[len(own_ends):]
        total, result = max(len(ends_p), 1), ends_p[e_order]
    else:
        own_local = np.empty(n, dtype=np.int64)
        own_local[order] = np.arange(n)
        o_order = order_of(other_p)
        other_local = np.empty(len(o_order), dtype=np.int64)
        other_local[o_order] = n + np.arange(len(o_order))
        total, result = n + len(others), other_p[o_order]
    keys = []
    while parts:
        part = parts.pop(0)
        local = own_local[np.maximum(part.own, 0)]
        local[part.rows] = other_local[_lookup(part.texts, others)]
        m = len(local) // 2
        a, b = local[:m], local[m:]
        keep = a != b
        a, b = a[keep], b[keep]
        keys.append(_distinct(np.minimum(a, b) * total + np.maximum(a, b)))
        del part, local, a, b, keep
    return _pairs(keys, total), result.reshape(-1, PSEUDONYM_BYTES)


def _pairs(keys: list[np.ndarray], total: int) -> np.ndarray:
    """The distinct keys ``low * total + high`` of sorted runs as int64 ``[2, E]`` (sorted),
    in one buffer of twice the keys: the runs are merged in its upper half, the distinct keys
    moved to its start, then split in place into the two rows (no third copy at 10^8 edges)."""
    size = sum(len(k) for k in keys)
    if size == 0:
        return np.zeros((2, 0), dtype=np.int64)
    buf = np.empty(2 * size, dtype=np.int64)
    upper, at = buf[size:], 0
    while keys:
        k = keys.pop(0)
        upper[at:at + len(k)] = k
        at += len(k)
        del k
    upper.sort(kind="stable")   # merges the sorted runs
    keep = np.empty(size, dtype=bool)
    keep[0] = True
    np.not_equal(upper[1:], upper[:-1], out=keep[1:])
    m = int(np.count_nonzero(keep))
    np.compress(keep, upper, out=buf[:m])
    del keep, upper
    np.remainder(buf[:m], total, out=buf[m:2 * m])
    np.floor_divide(buf[:m], total, out=buf[:m])
    return buf[:2 * m].reshape(2, m)


def _distinct(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` of int64 keys, sorted in place (NumPy's own unique hashes first, many
    times slower on 10^7 keys)."""
    a.sort()
    if a.size < 2:
        return a
    keep = np.empty(a.size, dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


@dataclass
class Batch:
    """One checked batch of ``m`` edges, its ends in one array (the ``m`` sources, then the ``m``
    targets): each end's own node (its position among the ids, or -1), the ends that are not
    own nodes (positions, ascending) and their ids."""

    own: np.ndarray
    rows: np.ndarray
    texts: Any


def batches(spec: IngestSpec, ids: Any, vertical: bool,
             stop: threading.Event | None = None) -> Iterator[Batch]:
    """The edges table a batch at a time, each end looked up among the own ids (one Arrow hash
    join per batch on the cells as read; a cell that misses is stripped and looked up again), an
    empty endpoint (and, horizontally, an edge with no own endpoint) refused by line. A batch
    holds at least 64 bytes of CSV per own id, so that the hash table of the ids is built for
    many lookups."""
    import pyarrow as pa
    import pyarrow.compute as pc

    name = Path(spec.edges).name
    cols = ((spec.source_column, "--source-column"), (spec.target_column, "--target-column"))
    index = _IdIndex(ids)
    for start, src, dst, strip in columnar.edge_batches(spec.edges, cols, scale=len(ids)):
        if stop is not None and stop.is_set():
            return
        m = len(src)
        ends = pa.chunked_array([c if pa.types.is_string(c.type) and not c.null_count
                                 else columnar.as_text(c, False)
                                 for c in (_plain(src), _plain(dst))], type=pa.string())
        own = index.lookup(ends)
        rows = np.flatnonzero(own < 0)
        cells = ends.take(pa.array(rows)).combine_chunks()
        texts = columnar.as_text(cells, strip)
        del ends
        spaced = np.flatnonzero(pc.not_equal(pc.binary_length(texts), pc.binary_length(cells))
                                .to_numpy(zero_copy_only=False)) if strip else []
        if len(spaced):   # a cell with spaces around an own id
            again = np.full(len(rows), -1, dtype=np.int32)
            again[spaced] = index.lookup(texts.take(pa.array(spaced)))
            found = again >= 0
            own[rows[found]] = again[found]
            rows, texts = rows[~found], texts.filter(pa.array(~found))
        blank = np.zeros(2 * m, dtype=bool)
        blank[rows] = pc.binary_length(texts).to_numpy(zero_copy_only=False) == 0
        bad = blank[:m] | blank[m:]
        if not vertical:
            bad |= (own[:m] < 0) & (own[m:] < 0)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            a, b = (_cell(own, rows, texts, ids, row + k * m) for k in (0, 1))
            if not a or not b:
                raise DataError(f"{name} line {start + row + 2}: an endpoint is empty; give both "
                                "ids")
            raise DataError(f"{name} line {start + row + 2}: edge ('{a}', '{b}') has no own "
                            "endpoint; an organisation lists only edges of its own nodes")
        yield Batch(own, rows, texts)


class _IdIndex:
    """Each cell's position among the own ids, or -1: an Arrow hash join, or, where every id is
    one text prefix and a whole number in canonical form (``ACC-0``, ``ACC-1234``; no leading
    zero, at most 18 digits), a lookup by that number (a table where the numbers are dense, a
    binary search where not): a cell that is not of that form is no own id, one that is names
    exactly one number, so both give the same positions."""

    _DIGITS = r"^(0|[1-9][0-9]{0,17})$"

    def __init__(self, ids: Any) -> None:
        import pyarrow.compute as pc

        self.ids = ids
        self.prefix: str | None = None
        head = re.fullmatch(r"(.*?)(0|[1-9][0-9]{0,17})", str(ids[0].as_py())) if len(ids) \
            else None
        if head is None:
            return
        prefix = head.group(1)
        ok, values = self._numbers(ids, prefix)
        if not bool(pc.all(ok).as_py()):
            return
        self.prefix = prefix
        n, top = len(values), int(values.max())
        if top < 8 * n + 1024:   # dense: one table entry per number up to the largest
            self.table = np.full(top + 1, -1, dtype=np.int32)
            self.table[values[::-1]] = np.arange(n - 1, -1, -1, dtype=np.int32)   # first wins
            self.sorted = None
        else:
            self.perm = np.argsort(values, kind="stable").astype(np.int32)
            self.sorted = values[self.perm]

    def _numbers(self, col: Any, prefix: str) -> tuple[Any, np.ndarray]:
        """``(whether each cell is prefix + canonical number, the number or 0)``."""
        import pyarrow as pa
        import pyarrow.compute as pc

        rest = pc.utf8_slice_codeunits(col, len(prefix)) if prefix else col
        ok = pc.and_(pc.starts_with(col, prefix), pc.match_substring_regex(rest, self._DIGITS)) \
            if prefix else pc.match_substring_regex(rest, self._DIGITS)
        values = pc.cast(pc.if_else(ok, rest, "0"), pa.int64())
        return ok, _numpy(values).astype(np.int64, copy=False)

    def lookup(self, col: Any) -> np.ndarray:
        if self.prefix is None:
            return _lookup(col, self.ids)
        ok, values = self._numbers(col, self.prefix)
        ok = _numpy(ok).astype(bool, copy=False)
        out = np.full(len(values), -1, dtype=np.int32)
        if self.sorted is None:
            inside = ok & (values < len(self.table))
            out[inside] = self.table[values[inside]]
        else:
            at = np.minimum(np.searchsorted(self.sorted, values), len(self.sorted) - 1)
            hit = ok & (self.sorted[at] == values)
            out[hit] = self.perm[at[hit]]
        return out


def _numpy(arr: Any) -> np.ndarray:
    """An Arrow (chunked) array without nulls as a NumPy array."""
    if hasattr(arr, "combine_chunks"):
        arr = arr.combine_chunks()
    return arr.to_numpy(zero_copy_only=False)


def _lookup(col: Any, ids: Any) -> np.ndarray:
    """Each cell's position among ``ids``, or -1 (int32)."""
    import pyarrow.compute as pc

    found = pc.fill_null(pc.index_in(col, value_set=ids), -1)
    if hasattr(found, "combine_chunks"):
        found = found.combine_chunks()
    return found.to_numpy(zero_copy_only=False).astype(np.int32)


def _cell(own: np.ndarray, rows: np.ndarray, texts: Any, ids: Any, end: int) -> str:
    """The (stripped) id at one end of a batch."""
    if own[end] >= 0:
        return str(ids[int(own[end])].as_py())
    return str(texts[int(np.searchsorted(rows, end))].as_py())


def _plain(arr: Any) -> Any:
    """A chunk as a plain (not dictionary, not large) array that Arrow can concatenate."""
    import pyarrow as pa

    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.string())
    return arr
