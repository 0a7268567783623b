"""Reading an organisation's tables: CSV (the core install) or Parquet (``pip install
'fedgl[parquet]'``, pyarrow).

A table is a header and rows; :func:`read_table` returns its columns as lists of strings (a
missing cell is ``""``), so that the checks in :mod:`.ingest` see every value exactly as the file
holds it. A CSV file is UTF-8 (a byte-order mark is allowed), comma-separated unless its name ends
in ``.tsv``; a Parquet file's values are turned into text (a null is ``""``).
"""

from __future__ import annotations

import csv
from pathlib import Path

from fedgl._optional import require
from fedgl.errors import DataError


class Table:
    """Named columns of text cells, all of one length."""

    def __init__(self, path: Path, columns: dict[str, list[str]]) -> None:
        self.path = path
        self.columns = columns

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def column(self, name: str, flag: str) -> list[str]:
        if name not in self.columns:
            raise DataError(f"{self.path.name}: no column '{name}' (it has "
                            f"{', '.join(self.names)}); fix {flag}")
        return self.columns[name]


def read_table(path: str | Path, what: str) -> Table:
    """The table at ``path`` (``what``: "nodes" or "edges", named in errors)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"the {what} table '{path}' does not exist; give --{what} FILE")
    if path.suffix.lower() in (".parquet", ".pq"):
        table = _read_parquet(path, what)
    else:
        table = _read_csv(path, what)
    if not table.columns or len(table) == 0:
        raise DataError(f"the {what} table '{path}' is empty (no rows under its header); give "
                        f"the organisation's {what}")
    return table


def _read_csv(path: Path, what: str) -> Table:
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f, delimiter=delimiter)
            header = next(reader, None)
            if header is None:
                return Table(path, {})
            names = [h.strip() for h in header]
            if len(set(names)) != len(names) or "" in names:
                raise DataError(f"the {what} table '{path}' has an empty or repeated column "
                                f"name in its header ({', '.join(names)}); name every column once")
            cols: list[list[str]] = [[] for _ in names]
            for line, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) != len(names):
                    raise DataError(f"{path.name} line {line}: {len(row)} cells, the header has "
                                    f"{len(names)}; fix the row")
                for c, v in zip(cols, row, strict=True):
                    c.append(v.strip())
    except UnicodeDecodeError:
        raise DataError(f"the {what} table '{path}' is not UTF-8 text; save it as UTF-8 CSV "
                        "(or Parquet)") from None
    except csv.Error as exc:
        raise DataError(f"the {what} table '{path}' is not valid CSV ({exc})") from None
    return Table(path, dict(zip(names, cols, strict=True)))


def _read_parquet(path: Path, what: str) -> Table:
    require("pyarrow", feature="Parquet tables", extra="parquet")
    import pyarrow.parquet as pq

    try:
        t = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many kinds for a bad file
        raise DataError(f"the {what} table '{path}' is not a readable Parquet file "
                        f"({type(exc).__name__})") from None
    cols = {}
    for name in t.column_names:
        cols[str(name)] = ["" if v is None else str(v) for v in t.column(name).to_pylist()]
    return Table(path, cols)

