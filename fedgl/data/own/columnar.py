"""Reading an organisation's tables as Arrow columns (pyarrow, ``pip install
'fedgl[parquet]'``): the fast reader of ``fedgl ingest``.

Every cell means what the Python reader (:mod:`.tables`) makes of it: CSV is parsed by
pyarrow's multi-threaded reader with every column as text, a CSV cell is stripped of Python's
whitespace (``str.strip``), a Parquet value is its Python ``str`` (a null is ``""``; integers
and text are converted by Arrow, which gives the same digits). A CSV table the fast reader cannot
parse (a row with the wrong number of cells, a quote left open) is scanned again by Python's
``csv`` module, without keeping its cells, so that the error is the Python reader's one line with
its line number. The edges table is read in batches (:func:`edge_batches`), so that its text never
sits in memory whole.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fedgl._optional import require
from fedgl.errors import DataError

#: the characters ``str.strip()`` removes (those whose ``str.isspace()`` is true), for Arrow's
#: ``utf8_trim``
WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004"
              "\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
#: bytes of CSV text per edge batch (about 6 million edges of two 11-character ids), and the
#: most a batch grows to for many own ids (:func:`edge_batches`)
EDGE_BLOCK_BYTES = 1 << 27
EDGE_BLOCK_MAX = 1 << 28
#: rows per edge batch of a Parquet table
EDGE_BATCH_ROWS = 1 << 22


def available() -> bool:
    """Whether pyarrow can be imported (the fast reader's requirement)."""
    try:
        import pyarrow.csv  # noqa: F401
    except ImportError:
        return False
    return True


class Columns:
    """A table's columns as Arrow arrays, with the Python reader's meaning of a cell."""

    def __init__(self, path: Path, table: Any, strip: bool) -> None:
        self.path = path
        self.table = table
        self.strip = strip

    @property
    def names(self) -> list[str]:
        return [str(n) for n in self.table.column_names]

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def raw(self, name: str, flag: str) -> Any:
        """The column as read (one Arrow array), or the Python reader's missing-column error."""
        if name not in self.names:
            raise DataError(f"{self.path.name}: no column '{name}' (it has "
                            f"{', '.join(self.names)}); fix {flag}")
        return self.table.column(name).combine_chunks()

    def text(self, name: str, flag: str) -> Any:
        """The column as the Python reader's cells (a string array without nulls)."""
        return as_text(self.raw(name, flag), self.strip)

    def cell(self, name: str, row: int) -> str:
        """The Python reader's cell at ``row`` (0-based under the header)."""
        return as_text(self.table.column(name).slice(row, 1).combine_chunks(), self.strip)[0] \
            .as_py()


def as_text(arr: Any, strip: bool) -> Any:
    """``arr`` as the Python reader's cells: strings, a null as ``""``, CSV text stripped."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pa.types.is_large_string(arr.type) or pa.types.is_integer(arr.type):
        arr = arr.cast(pa.string())
    if not pa.types.is_string(arr.type):   # floats, booleans, dates: Python's own spelling
        return pa.array(["" if v is None else str(v) for v in arr.to_pylist()], pa.string())
    if arr.null_count:
        arr = pc.fill_null(arr, "")
    return pc.utf8_trim(arr, characters=WHITESPACE) if strip else arr


def categories(arr: Any, strip: bool) -> tuple[list[str], np.ndarray]:
    """``(distinct cells, the index of each row's cell)``: a column of few distinct values
    (labels, splits) handled per value, with the Python reader's text of each."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(arr)
    values = as_text(enc.dictionary, strip).to_pylist()
    codes = enc.indices.to_numpy(zero_copy_only=False)
    if enc.null_count:   # a Parquet null: the empty cell
        codes = np.where(enc.is_null().to_numpy(zero_copy_only=False), len(values), codes)
        values.append("")
    return values, codes.astype(np.int64, copy=False)


def utf8_values(arr: Any, batch: int = 1 << 16) -> Iterator[bytes]:
    """The UTF-8 bytes of every string of ``arr``, a batch at a time."""
    import pyarrow as pa

    for start in range(0, len(arr), batch):
        yield from arr.slice(start, batch).cast(pa.binary()).to_pylist()


# ---------------------------------------------------------------------------------- reading
def read_columns(path: str | Path, what: str) -> Columns:
    """The table at ``path`` (``what``: "nodes" or "edges", named in errors), whole."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"the {what} table '{path}' does not exist; give --{what} FILE")
    if _is_parquet(path):
        table = _parquet(path, what).read()
        cols = Columns(path, table, strip=False)
    else:
        names, delimiter = csv_header(path, what)
        cols = Columns(path, _read_csv(path, what, names, delimiter), strip=True) if names \
            else None
    if cols is None or not cols.names or len(cols) == 0:
        raise DataError(f"the {what} table '{path}' is empty (no rows under its header); give "
                        f"the organisation's {what}")
    return cols


def edge_batches(path: str | Path, columns: tuple[tuple[str, str], tuple[str, str]],
                 what: str = "edges", scale: int = 0) -> Iterator[tuple[int, Any, Any, bool]]:
    """The edges table's two columns (``((name, flag), (name, flag))``) a batch at a time:
    ``(first row, source, target, strip)``, rows counted from 0 under the header. A batch is
    :data:`EDGE_BLOCK_BYTES` of CSV (:data:`EDGE_BATCH_ROWS` Parquet rows), or 64 bytes
    (2 rows) per ``scale`` where more, up to :data:`EDGE_BLOCK_MAX`. Errors as
    :func:`read_columns` (an empty table; a missing column, before any batch)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    path = Path(path)
    if not path.is_file():
        raise DataError(f"the {what} table '{path}' does not exist; give --{what} FILE")
    empty = DataError(f"the {what} table '{path}' is empty (no rows under its header); give "
                      f"the organisation's {what}")
    if _is_parquet(path):
        pf = _parquet(path, what)
        names = [str(n) for n in pf.schema_arrow.names]
        _has(path, names, columns)
        if pf.metadata.num_rows == 0:
            raise empty
        batches: Iterator[Any] = pf.iter_batches(
            batch_size=max(EDGE_BATCH_ROWS, min(2 * scale, EDGE_BLOCK_MAX // 32)),
            columns=list(dict.fromkeys(c for c, _ in columns)))
        strip = False
    else:
        names, delimiter = csv_header(path, what)
        if not names or not _has_rows(path):
            raise empty
        _has(path, names, columns)
        types = {n: pa.string() for n in names}
        block = max(EDGE_BLOCK_BYTES, min(64 * scale, EDGE_BLOCK_MAX))
        reader = _csv_call(path, what, names, delimiter, lambda opts: pcsv.open_csv(
            path, read_options=pcsv.ReadOptions(column_names=names, skip_rows=1,
                                                block_size=block),
            parse_options=opts, convert_options=pcsv.ConvertOptions(
                column_types=types, include_columns=list(dict.fromkeys(c for c, _ in columns)),
                strings_can_be_null=False, quoted_strings_can_be_null=False)))
        batches = _guarded(reader, path, what, names, delimiter)
        strip = True
    start = 0
    for b in batches:
        if b.num_rows:
            yield start, b.column(columns[0][0]), b.column(columns[1][0]), strip
            start += b.num_rows


def _is_parquet(path: Path) -> bool:
    return path.suffix.lower() in (".parquet", ".pq")


def _has(path: Path, names: list[str], columns: tuple[tuple[str, str], ...]) -> None:
    for name, flag in columns:
        if name not in names:
            raise DataError(f"{path.name}: no column '{name}' (it has {', '.join(names)}); "
                            f"fix {flag}")


def _parquet(path: Path, what: str) -> Any:
    require("pyarrow", feature="Parquet tables", extra="parquet")
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many kinds for a bad file
        raise DataError(f"the {what} table '{path}' is not a readable Parquet file "
                        f"({type(exc).__name__})") from None


def csv_header(path: Path, what: str) -> tuple[list[str], str]:
    """The CSV header's stripped names (``[]`` for an empty file) and the delimiter; the
    Python reader's errors for a header that is not UTF-8 or names a column twice."""
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            header = next(csv.reader(f, delimiter=delimiter), None)
    except UnicodeDecodeError:
        raise _not_utf8(path, what) from None
    except csv.Error as exc:
        raise DataError(f"the {what} table '{path}' is not valid CSV ({exc})") from None
    if header is None:
        return [], delimiter
    names = [h.strip() for h in header]
    if len(set(names)) != len(names) or "" in names:
        raise DataError(f"the {what} table '{path}' has an empty or repeated column "
                        f"name in its header ({', '.join(names)}); name every column once")
    return names, delimiter


def _has_rows(path: Path) -> bool:
    """Whether the CSV file has a non-blank line under its header."""
    with open(path, "rb") as f:
        f.readline()
        return any(line.strip(b"\r\n") for line in f)


def _read_csv(path: Path, what: str, names: list[str], delimiter: str) -> Any:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    types = {n: pa.string() for n in names}
    return _csv_call(path, what, names, delimiter, lambda opts: pcsv.read_csv(
        path, read_options=pcsv.ReadOptions(column_names=names, skip_rows=1),
        parse_options=opts, convert_options=pcsv.ConvertOptions(
            column_types=types, strings_can_be_null=False, quoted_strings_can_be_null=False)))


def _csv_call(path: Path, what: str, names: list[str], delimiter: str, call: Any) -> Any:
    """``call(parse options)``, a bad table turned into the Python reader's error."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    try:
        return call(pcsv.ParseOptions(delimiter=delimiter, newlines_in_values=True))
    except pa.ArrowInvalid as exc:
        raise _csv_error(path, what, names, delimiter, exc) from None


def _guarded(reader: Any, path: Path, what: str, names: list[str], delimiter: str
             ) -> Iterator[Any]:
    import pyarrow as pa

    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except pa.ArrowInvalid as exc:
            raise _csv_error(path, what, names, delimiter, exc) from None
        yield batch


def _not_utf8(path: Path, what: str) -> DataError:
    return DataError(f"the {what} table '{path}' is not UTF-8 text; save it as UTF-8 CSV "
                     "(or Parquet)")


def _csv_error(path: Path, what: str, names: list[str], delimiter: str,
               exc: Exception) -> DataError:
    """The Python reader's error for a CSV file Arrow refused: its rows scanned again (cells not
    kept) for the first with the wrong number of cells; else what Arrow said."""
    if "UTF8" in str(exc) or "UTF-8" in str(exc):
        return _not_utf8(path, what)
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f, delimiter=delimiter)
            next(reader, None)
            for line, row in enumerate(reader, start=2):
                if row and len(row) != len(names):
                    return DataError(f"{path.name} line {line}: {len(row)} cells, the header "
                                     f"has {len(names)}; fix the row")
    except UnicodeDecodeError:
        return _not_utf8(path, what)
    except csv.Error as err:
        return DataError(f"the {what} table '{path}' is not valid CSV ({err})")
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return DataError(f"the {what} table '{path}' is not valid CSV ({reason})")
