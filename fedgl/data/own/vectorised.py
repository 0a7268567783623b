"""The checks of ``fedgl ingest`` over Arrow columns (:mod:`.columnar`): the same arrays, files
and one-line errors (with their line numbers) as the Python reader's (:mod:`.checks`), computed
per column instead of per row.

- Ids: an empty id is found by length; a repeated id by the pseudonyms (equal ids hash equally),
  and only then located by a dictionary encoding.
- Features: a cell that is a plain decimal (``[+-]digits[.digits][e[+-]digits]``) is converted by
  Arrow (correctly rounded, as Python's ``float``); every other cell (empty, ``inf``, ``1_000``,
  text) goes through the Python reader's own conversion, so values and errors are its.
- Labels and splits: per distinct value (few), then mapped to the rows.
- Edges: a batch of the edges table at a time (:func:`.columnar.edge_batches`): its endpoints are
  dictionary-encoded, the distinct ones looked up among the own ids (an Arrow hash join), the rest
  are the other organisations' ids, hashed once each after the last batch.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedgl.data.own import columnar
from fedgl.data.own.checks import (
    SPLITS,
    Prepared,
    check_distinct,
    drawn_split,
    is_int,
    normalized,
)
from fedgl.data.own.columnar import Columns, categories, utf8_values
from fedgl.data.own.files import atomic_file
from fedgl.data.own.secret import PSEUDONYM_BYTES, order_of, pseudonyms
from fedgl.errors import DataError

if TYPE_CHECKING:
    from fedgl.data.own.ingest import IngestSpec

#: a cell Arrow and Python's float convert alike (anything else goes through Python)
DECIMAL = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"


def horizontal(spec: IngestSpec, secret: bytes) -> Prepared:
    """One organisation's ingest (:func:`.ingest.ingest`) through the columnar reader."""
    nodes = columnar.read_columns(spec.nodes, "nodes")
    ids = _id_text(nodes, spec)
    with _Background(lambda stop: list(_batches(spec, ids, False, stop))) as edge_job:
        own_p, order = _hashed(nodes, ids, secret)
        x, feature_names = features(nodes, spec)
        x = normalized(x, spec)
        y, labelled, classes = labels(nodes, spec)
        masks = splits(nodes, spec, labelled) if spec.split_column is not None else \
            drawn_split(own_p, labelled)
        nodes_path = nodes.path
        del nodes   # the node table's text is not needed any more (10^7 rows: about 1 GB)
        x = x.astype(np.float32)[order]
        parts = edge_job.result()
    _release()
    edge_local, remote = edge_index(parts, ids, own_p, order, secret, vertical=False)
    arrays = {"own": own_p[order], "x": x, "y": y[order],
              **{f"{s}_mask": masks[s][order] for s in SPLITS},
              "remote": remote, "edges": edge_local}
    return Prepared(arrays, feature_names, classes, nodes_path, Path(spec.edges),
                    lambda path: write_ids(path, arrays["own"], ids, order))


def vertical(spec: IngestSpec, secret: bytes) -> Prepared:
    """One vertical party's ingest (:func:`.ingest.vertical_arrays`) through the columnar
    reader."""
    nodes = columnar.read_columns(spec.nodes, "nodes")
    ids = _id_text(nodes, spec)
    with _Background(lambda stop: list(_batches(spec, ids, True, stop))) as edge_job:
        own_p, order = _hashed(nodes, ids, secret)
        x, names = features(nodes, spec)
        arrays: dict[str, np.ndarray] = {"own": own_p[order], "x": x.astype(np.float32)[order]}
        del x
        classes = None
        if spec.label_column is not None:
            y, labelled, classes = labels(nodes, spec)
            masks = splits(nodes, spec, labelled) if spec.split_column is not None else \
                drawn_split(own_p, labelled)
            arrays.update(y=y[order], **{f"{k}_mask": m[order] for k, m in masks.items()})
        nodes_path = nodes.path
        del nodes
        parts = edge_job.result()
    _release()
    edges, arrays["ends"] = edge_index(parts, ids, own_p, order, secret, vertical=True)
    arrays["edges"] = edges
    return Prepared(arrays, names, classes, nodes_path, Path(spec.edges),
                    lambda path: write_ids(path, arrays["own"], ids, order))


def _release() -> None:
    """Hand the memory Arrow freed (the tables' text) back to the system before the edge
    index is built (its pool keeps freed blocks otherwise)."""
    import pyarrow as pa

    release = getattr(pa.default_memory_pool(), "release_unused", None)
    if release is not None:
        release()


class _Background:
    """``job(stop)`` on a daemon thread while the caller works on (the edges table is read and
    joined by Arrow, which releases the GIL, while Python hashes the own ids). ``result()``
    waits and re-raises the job's error; leaving the block early (the caller's own error, which
    comes first) sets ``stop`` and does not wait."""

    def __init__(self, job: Callable[[threading.Event], Any]) -> None:
        self.stop = threading.Event()
        self._out: list[Any] = []
        self._err: list[BaseException] = []

        def run() -> None:
            try:
                self._out.append(job(self.stop))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                self._err.append(exc)

        self._thread = threading.Thread(target=run, name="fedgl-ingest-edges", daemon=True)

    def __enter__(self) -> _Background:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()

    def result(self) -> Any:
        self._thread.join()
        if self._err:
            raise self._err[0]
        return self._out[0]


# -------------------------------------------------------------------------------------- ids
def _id_text(nodes: Columns, spec: IngestSpec) -> Any:
    """The ids as text; an empty id refused (the first, by line)."""
    import pyarrow.compute as pc

    ids = nodes.text(spec.id_column, "--id-column")
    empty = np.flatnonzero(pc.binary_length(ids).to_numpy(zero_copy_only=False) == 0)
    if empty.size:
        raise DataError(f"{nodes.path.name} line {int(empty[0]) + 2}: the id is empty; give "
                        "every node an id")
    return ids


def _hashed(nodes: Columns, ids: Any, secret: bytes) -> tuple[np.ndarray, np.ndarray]:
    """``(the ids' pseudonyms, their byte order)``; a repeated id refused (the first, by
    line)."""
    own_p = pseudonyms(secret, utf8_values(ids))
    order = order_of(own_p)
    try:
        check_distinct(own_p[order])
    except DataError:
        _repeated(nodes, ids)
        raise
    return own_p, order


def _repeated(nodes: Columns, ids: Any) -> None:
    """Refuse the first row whose id an earlier row has."""
    import pyarrow.compute as pc

    codes = pc.dictionary_encode(ids).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    before = np.concatenate([[-1], np.maximum.accumulate(codes)[:-1]])
    again = np.flatnonzero(codes <= before)
    if again.size:
        row = int(again[0])
        raise DataError(f"{nodes.path.name} line {row + 2}: id '{ids[row].as_py()}' appears "
                        "twice; each node once")


# --------------------------------------------------------------------------------- features
def features(nodes: Columns, spec: IngestSpec) -> tuple[np.ndarray, list[str]]:
    """``x`` (float64 ``[n, d]``, row order) and the feature columns' names."""
    skip = {spec.id_column, spec.label_column, spec.split_column}
    names = list(spec.feature_columns) if spec.feature_columns else \
        [c for c in nodes.names if c not in skip]
    if not names:
        raise DataError(f"{nodes.path.name} has no feature column (only {', '.join(nodes.names)}); "
                        "add features or name them with --feature-columns")
    clash = sorted(set(names) & skip)
    if clash:
        raise DataError(f"--feature-columns names {clash}, the id, label or split column")
    x = np.empty((len(nodes), len(names)), dtype=np.float64)
    for j, name in enumerate(names):
        x[:, j] = _numbers(nodes, nodes.raw(name, "--feature-columns"), name)
        bad = np.flatnonzero(~np.isfinite(x[:, j]))
        if bad.size:
            row = int(bad[0]) + 2
            raise DataError(f"{nodes.path.name} line {row}: feature '{name}' is "
                            f"'{nodes.cell(name, row - 2)}', not a finite number; clean or "
                            "impute it")
    return x, names


def _numbers(nodes: Columns, raw: Any, name: str) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    if (pa.types.is_integer(raw.type) or pa.types.is_floating(raw.type)) and not raw.null_count:
        return raw.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)
    if not pa.types.is_string(raw.type) or raw.null_count:
        return _python_numbers(nodes, columnar.as_text(raw, nodes.strip).to_pylist(),
                               np.arange(len(raw)), name)
    plain = pc.match_substring_regex(raw, DECIMAL)
    if pc.all(plain).as_py():
        return pc.cast(raw, pa.float64()).to_numpy(zero_copy_only=False)
    ok = plain.to_numpy(zero_copy_only=False)
    out = np.empty(len(raw), dtype=np.float64)
    out[ok] = pc.cast(raw.filter(plain), pa.float64()).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(~ok)
    other = columnar.as_text(raw.filter(pc.invert(plain)), nodes.strip).to_pylist()
    out[rows] = _python_numbers(nodes, other, rows, name)
    return out


def _python_numbers(nodes: Columns, cells: list[str], rows: np.ndarray, name: str
                    ) -> np.ndarray:
    """The Python reader's conversion of ``cells`` (at ``rows``, 0-based) and its errors."""
    try:
        if "" in cells:
            raise ValueError
        return np.asarray(cells, dtype=np.float64)
    except ValueError:
        pass
    for row, v in zip(rows.tolist(), cells, strict=True):
        if v == "":
            raise DataError(f"{nodes.path.name} line {row + 2}: feature '{name}' is missing; "
                            "impute it or leave the column out with --feature-columns")
        try:
            float(v)
        except ValueError:
            raise DataError(f"{nodes.path.name} line {row + 2}: feature '{name}' is '{v}', not "
                            "a number; encode it numerically or leave the column out with "
                            "--feature-columns") from None
    raise DataError(f"{nodes.path.name}: feature '{name}' is not numeric")


def _first(codes: np.ndarray, bad: list[int]) -> int:
    """The first row whose value (its index in the distinct values) is one of ``bad``."""
    return int(np.flatnonzero(np.isin(codes, bad))[0])


# --------------------------------------------------------------------------- labels, splits
def labels(nodes: Columns, spec: IngestSpec) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(y, labelled, classes)`` as :func:`.checks.labels`, per distinct label."""
    n = len(nodes)
    if spec.label_column is None:
        classes = list(spec.classes or [])
        if len(classes) < 2 or len(set(classes)) != len(classes):
            raise DataError("give --label-column, or --classes (the federation's, at least 2) "
                            "for an organisation without labels")
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), classes
    values, codes = categories(nodes.raw(spec.label_column, "--label-column"), nodes.strip)
    present = sorted({v for v in values if v})
    floats = [k for k, v in enumerate(values) if v and not is_int(v) and _is_float(v)]
    if floats:
        v = values[codes[_first(codes, floats)]]
        raise DataError(f"{nodes.path.name} line {_first(codes, floats) + 2}: label '{v}' is "
                        "not a class (a whole number or a name); labels name classes, not values")
    if present and any(is_int(v) for v in present) and not all(is_int(v) for v in present):
        raise DataError(f"{nodes.path.name}: labels mix numbers and names "
                        f"({present[:6]}); use one kind")
    numeric = bool(present) and all(is_int(v) for v in present)
    classes = list(spec.classes) if spec.classes else present
    if numeric:
        classes = sorted({str(int(c)) for c in classes}, key=int) if not spec.classes else \
            [str(int(c)) if is_int(c) else c for c in classes]
        values = [str(int(v)) if v else "" for v in values]
    if len(set(classes)) != len(classes):
        raise DataError(f"--classes repeats a class ({classes})")
    index = {c: i for i, c in enumerate(classes)}
    unknown = [k for k, v in enumerate(values) if v and v not in index]
    if unknown:
        row = _first(codes, unknown)
        raise DataError(f"{nodes.path.name} line {row + 2}: label '{values[codes[row]]}' is not "
                        f"one of the classes {classes}; fix the label or --classes")
    cls = np.array([index.get(v, 0) for v in values], dtype=np.int64)
    has = np.array([bool(v) for v in values], dtype=bool)
    if len(classes) < 2:
        raise DataError(f"{nodes.path.name}: {len(classes)} class(es) {classes}; node "
                        "classification needs at least 2 (list the federation's with --classes)")
    return cls[codes], has[codes], classes


def _is_float(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


def splits(nodes: Columns, spec: IngestSpec, labelled: np.ndarray) -> dict[str, np.ndarray]:
    """The split masks of a table with a split column, as :func:`.checks.splits`."""
    values, codes = categories(nodes.raw(str(spec.split_column), "--split-column"), nodes.strip)
    lower = [v.lower() for v in values]
    wrong = np.array([v != "" and v not in SPLITS for v in lower], dtype=bool)
    given = np.array([v != "" for v in lower], dtype=bool)
    bad = np.flatnonzero(wrong[codes] | (given[codes] & ~labelled))
    if bad.size:
        row = int(bad[0])
        v = values[codes[row]]
        if wrong[codes[row]]:
            raise DataError(f"{nodes.path.name} line {row + 2}: split '{v}' is not train, val, "
                            "test or empty")
        raise DataError(f"{nodes.path.name} line {row + 2}: the node is in the {v.lower()} split "
                        "but has no label; label it or leave its split empty")
    return {s: np.array([v == s for v in lower], dtype=bool)[codes] for s in SPLITS}


# ------------------------------------------------------------------------------------ edges
def edge_index(parts: list[_Batch], ids: Any, own_p: np.ndarray, order: np.ndarray,
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
class _Batch:
    """One checked batch of ``m`` edges, its ends in one array (the ``m`` sources, then the ``m``
    targets): each end's own node (its position among the ids, or -1), the ends that are not
    own nodes (positions, ascending) and their ids."""

    own: np.ndarray
    rows: np.ndarray
    texts: Any


def _batches(spec: IngestSpec, ids: Any, vertical: bool,
             stop: threading.Event | None = None) -> Iterator[_Batch]:
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
        yield _Batch(own, rows, texts)


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


# ---------------------------------------------------------------------------------- ids.csv
def write_ids(path: Path, own: np.ndarray, ids: Any, order: np.ndarray,
              rows: int = 1 << 20) -> None:
    """``ids.csv`` (``pseudonym,id`` in the ingest's order) byte for byte as
    :func:`.checks.write_own_ids` writes it (an id with a comma, quote or line break quoted as
    Python's ``csv`` does), a million rows at a time into a file beside it, then renamed."""
    import pyarrow as pa
    import pyarrow.compute as pc

    digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    with atomic_file(path) as f:
        f.write(b"pseudonym,id\n")
        for start in range(0, len(order), rows):
            part = own[start:start + rows]
            hexed = np.empty((len(part), 2 * PSEUDONYM_BYTES), dtype=np.uint8)
            hexed[:, 0::2], hexed[:, 1::2] = digits[part >> 4], digits[part & 15]
            offsets = np.arange(0, hexed.size + 1, 2 * PSEUDONYM_BYTES, dtype=np.int32)
            hex_arr = pa.Array.from_buffers(pa.string(), len(part), [
                None, pa.py_buffer(offsets), pa.py_buffer(hexed.tobytes())])
            text = ids.take(pa.array(order[start:start + rows]))
            quote = pc.match_substring_regex(text, '[,"\r\n]')
            if pc.any(quote).as_py():
                q = pc.replace_substring(text, '"', '""')
                q = pc.binary_join_element_wise('"', q, '"', "")
                text = pc.if_else(quote, q, text)
            lines = pc.binary_join_element_wise(
                pc.binary_join_element_wise(hex_arr, text, ","), "", "\n")
            data, offs = lines.buffers()[2], np.frombuffer(lines.buffers()[1], np.int32)
            f.write(memoryview(data)[offs[lines.offset]:offs[lines.offset + len(lines)]])
