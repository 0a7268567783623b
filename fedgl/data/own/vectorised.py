"""The checks of ``fedgl ingest`` over Arrow columns (:mod:`.columnar`): the same arrays, files
and one-line errors (with their line numbers) as the Python reader's (:mod:`.checks`), computed
per column instead of per row.

- Ids: an empty id is found by length; a repeated id by the pseudonyms (equal ids hash equally),
  and only then located by a dictionary encoding.
- Features: a cell that is a plain decimal (``[+-]digits[.digits][e[+-]digits]``) is converted by
  Arrow (correctly rounded, as Python's ``float``); every other cell (empty, ``inf``, ``1_000``,
  text) goes through the Python reader's own conversion, so values and errors are its.
- Labels and splits: per distinct value (few), then mapped to the rows.
- Edges: :mod:`.joins`, a batch of the edges table at a time, on a thread while Python hashes
  the own ids.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedgl.data.own import columnar
from fedgl.data.own.checks import (
    SPLITS,
    Prepared,
    check_distinct,
    class_names,
    drawn_split,
    feature_names,
    is_int,
    normalized,
)
from fedgl.data.own.columnar import Columns, categories, utf8_values
from fedgl.data.own.files import atomic_file
from fedgl.data.own.joins import batches, edge_index
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
    with _Background(lambda stop: list(batches(spec, ids, False, stop))) as edge_job:
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
    with _Background(lambda stop: list(batches(spec, ids, True, stop))) as edge_job:
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
    names = feature_names(list(nodes.names), spec, nodes.path.name)
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
    classes, numeric = class_names(present, spec.classes, nodes.path.name)
    if numeric:
        values = [str(int(v)) if v else "" for v in values]
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
