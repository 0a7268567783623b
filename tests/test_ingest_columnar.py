"""The columnar reader of ``fedgl ingest`` (pyarrow) against the Python reader it replaces: the
same files byte for byte (pseudonyms, arrays, ids.csv) and the same one-line errors, with their
line numbers, on the same tiny tables (written here); the pseudonyms against HMAC itself."""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest

from fedgl.data.own import columnar
from fedgl.data.own.ingest import IngestSpec, ingest, ingest_vertical
from fedgl.data.own.secret import as_keys, make_secret, order_of, pseudonyms
from fedgl.errors import DataError

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None,
                                reason="pyarrow not installed")

NODES = ("acct,f1,f2,label,split\n"
         "a1,1.5,2,1,train\n"
         " b2 ,-0,1e3,0,val\n"                 # spaces around an id
         "\"c,3\",.5,5.,01,test\n"             # a comma in an id (quoted in ids.csv), label 01
         "d\"4,1_000, 2.25 ,,\n"               # a quote in an id; Python-only float spellings
         "é5,0.1000000000000000055511151231257827,3.4e-5,1,\n"
         "f6,123456789012345678901234567890,-7,0,train\n")
EDGES = ("source,target\n"
         "a1, b2\n"                            # spaces around an own id
         "b2,\"c,3\"\n"
         "é5,x-remote\n"
         "y-remote,a1\n"
         "a1,a1\n"                             # a self-loop, dropped
         "b2,a1\n"                             # a repeat, dropped
         "d\"4,y-remote\n"
         "f6,z-remote\n"
         "f6\u3000,\xa0x-remote\n")                # Unicode spaces, stripped as str.strip does


def _spec(root: Path, **kw: object) -> IngestSpec:
    base = {"id_column": "acct", "label_column": "label", "split_column": "split"}
    base.update(kw)
    return IngestSpec(str(root / "nodes.csv"), str(root / "edges.csv"), 0, **base)  # type: ignore[arg-type]


def _write(root: Path, nodes: str = NODES, edges: str = EDGES) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "nodes.csv").write_text(nodes, encoding="utf-8")
    (root / "edges.csv").write_text(edges, encoding="utf-8")
    if not (root / "secret").exists():
        make_secret(root / "secret")


def _files(folder: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for f in sorted(folder.iterdir()):
        if f.suffix == ".json":
            meta = json.loads(f.read_text())
            meta.get("provenance", {}).pop("ingested", None)
            out[f.name] = meta
        else:
            out[f.name] = f.read_bytes()
    return out


def _both(root: Path, spec: IngestSpec, vertical: bool = False) -> tuple[dict, dict]:
    run = ingest_vertical if vertical else ingest
    run(spec, root / "secret", root / "py", reader="python")
    run(spec, root / "secret", root / "arrow", reader="arrow")
    return _files(root / "py"), _files(root / "arrow")


@pytest.mark.parametrize("kw", [{}, {"split_column": None, "normalize_features": True,
                                     "feature_columns": ["f1", "f2"]},
                                {"classes": ["0", "1", "2"], "feature_columns": ["f2"]}])
def test_the_columnar_reader_writes_the_python_readers_files(tmp_path: Path, kw: dict) -> None:
    _write(tmp_path)
    py, arrow = _both(tmp_path, _spec(tmp_path, **kw))
    assert py == arrow
    ids = (tmp_path / "arrow" / "ids.csv").read_text(encoding="utf-8")
    assert '"c,3"' in ids and '"d""4"' in ids and " b2 " not in ids


@pytest.mark.parametrize("label", [True, False])
def test_the_columnar_reader_writes_the_python_readers_vertical_files(tmp_path: Path,
                                                                       label: bool) -> None:
    _write(tmp_path)
    spec = _spec(tmp_path) if label else \
        _spec(tmp_path, label_column=None, split_column=None, feature_columns=["f1", "f2"])
    py, arrow = _both(tmp_path, spec, vertical=True)
    assert py == arrow


def test_edges_in_many_batches_give_the_same_files(tmp_path: Path, monkeypatch) -> None:
    rng = np.random.default_rng(1)
    ids = [f"N{i}" for i in range(300)]
    nodes = "acct,f1,label\n" + "".join(f"{s},{rng.normal():.4f},{i % 3}\n"
                                         for i, s in enumerate(ids))
    edges = "source,target\n" + "".join(
        f"{ids[a]},{ids[b] if rng.random() < 0.8 else f'R{b}'}\n"
        for a, b in rng.integers(0, 300, size=(3000, 2)))
    _write(tmp_path, nodes, edges)
    monkeypatch.setattr(columnar, "EDGE_BLOCK_BYTES", 2048)
    py, arrow = _both(tmp_path, _spec(tmp_path, split_column=None))
    assert py == arrow


@pytest.mark.parametrize("numbers", [[0, 5, 10, 11], [5, 10, 123456789012, 7]])
def test_numbered_ids_are_matched_by_number_as_by_text(tmp_path: Path, numbers: list) -> None:
    """Ids of one prefix and a whole number (dense or sparse) are looked up by that number:
    a leading zero, other case, 19 digits or no digits are other organisations' ids."""
    ids = [f"ACC-{v}" for v in numbers]
    nodes = "acct,f1,label\n" + "".join(f"{s},{i},{i % 2}\n" for i, s in enumerate(ids))
    others = ["ACC-05", "acc-5", "ACC-1234567890123456789", "ACC-", "ACC--1", "ACC-5.0", "5"]
    edges = "source,target\n" + "".join(f"{ids[i % 4]},{o}\n" for i, o in enumerate(others)) + \
        f"{ids[0]},{ids[1]} \n{ids[2]},{ids[3]}\n"
    _write(tmp_path, nodes, edges)
    py, arrow = _both(tmp_path, _spec(tmp_path, split_column=None))
    assert py == arrow
    assert json.loads((tmp_path / "arrow" / "ingest.json").read_text())["num_remote"] == 7


def test_parquet_tables_give_the_same_files(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"acct": [11, 12, 13, 14], "f1": [0.1, 2.5, -3.0, 1e-7],
                             "f2": pa.array([1, 2, 3, 4], pa.int32()),
                             "label": ["x", "y", "x", ""]}), tmp_path / "nodes.parquet")
    pq.write_table(pa.table({"source": [11, 12, 13, 14], "target": [12, 99, 11, 98]}),
                   tmp_path / "edges.parquet")
    pq.write_table(pa.table({"source": ["11", "12", None], "target": ["12", "99", "13"]}),
                   tmp_path / "nulls.parquet")
    make_secret(tmp_path / "secret")
    spec = IngestSpec(str(tmp_path / "nodes.parquet"), str(tmp_path / "edges.parquet"), 0,
                      id_column="acct", label_column="label")
    py, arrow = _both(tmp_path, spec)
    assert py == arrow
    spec.edges = str(tmp_path / "nulls.parquet")
    for reader in ("arrow", "python"):
        with pytest.raises(DataError, match="nulls.parquet line 4: an endpoint is empty"):
            ingest(spec, tmp_path / "secret", tmp_path / f"n-{reader}", reader=reader)


# ------------------------------------------------------------------------------ bad tables
N = "acct,f1,label,split\na,1,x,train\nb,2,y,val\nc,3,x,\n"
E = "source,target\na,b\nb,c\nc,z9\n"
BAD = {   # case: (nodes, edges, extra spec, the words and the line named)
    "empty id": ("acct,f1,label\na,1,x\n ,2,y\n", E, {}, "nodes.csv line 3: the id is empty"),
    "duplicate id": (N + "d,4,y,\nb,5,x,\n", E, {}, "nodes.csv line 6: id 'b' appears twice"),
    "non-numeric": ("acct,f1,label\na,1,x\nb,1_0,y\nc,zero,x\n", E, {},
                    "nodes.csv line 4: feature 'f1' is 'zero', not a number"),
    "missing feature": ("acct,f1,label\na,1,x\nb,,y\nc,3,x\n", E, {},
                        "nodes.csv line 3: feature 'f1' is missing"),
    "infinite feature": ("acct,f1,label\na,1,x\nb,2,y\nc,-inf,x\n", E, {},
                         "nodes.csv line 4: feature 'f1' is '-inf', not a finite number"),
    "label a value": ("acct,f1,label\na,1,1\nb,2,0.5\nc,3,0\n", E, {},
                      "nodes.csv line 3: label '0.5' is not a class"),
    "unknown label": (N, E, {"classes": ["x", "w"]},
                      "nodes.csv line 3: label 'y' is not one of the classes"),
    "bad split": ("acct,f1,label,split\na,1,x,train\nb,2,y,Later\n", E, {},
                  "nodes.csv line 3: split 'Later' is not train, val, test or empty"),
    "split without label": ("acct,f1,label,split\na,1,x,train\nb,2,,TEST\nc,3,y,\n", E, {},
                            "nodes.csv line 3: the node is in the test split but has no label"),
    "no own endpoint": (N, "source,target\na,b\nb,c\nq,z9\n", {},
                        "edges.csv line 4: edge ('q', 'z9') has no own endpoint"),
    "empty endpoint": (N, "source,target\na,b\nb, \n", {},
                       "edges.csv line 3: an endpoint is empty"),
    "ragged nodes": ("acct,f1,label\na,1,x\nb,2\n", E, {},
                     "nodes.csv line 3: 2 cells, the header has 3"),
    "ragged edges": (N, "source,target\na,b\n\nb,c,d\n", {},
                     "edges.csv line 4: 3 cells, the header has 2"),
    "no column": (N, E, {"id_column": "key"}, "nodes.csv: no column 'key'"),
    "no target column": (N, E, {"target_column": "to"}, "edges.csv: no column 'to'"),
    "empty edges": (N, "source,target\n", {}, "is empty"),
    "mixed labels": ("acct,f1,label\na,1,1\nb,2,y\nc,3,x\n", E, {}, "labels mix numbers"),
}


def _error(root: Path, reader: str, vertical: bool, nodes: str, edges: str, kw: dict) -> str:
    _write(root, nodes, edges)
    spec = _spec(root, **({"split_column": "split"} if "split" in nodes.split("\n")[0]
                          else {"split_column": None}) | kw)
    with pytest.raises(DataError) as info:
        (ingest_vertical if vertical else ingest)(spec, root / "secret", root / f"o-{reader}",
                                                  reader=reader)
    assert not (root / f"o-{reader}").exists()
    return str(info.value)


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_row_is_the_same_one_line_error_with_its_line(tmp_path: Path, case: str) -> None:
    nodes, edges, kw, words = BAD[case]
    arrow = _error(tmp_path, "arrow", False, nodes, edges, kw)
    assert arrow == _error(tmp_path, "python", False, nodes, edges, kw)
    assert words in arrow and "\n" not in arrow


@pytest.mark.parametrize("case", ["empty endpoint", "ragged edges", "duplicate id"])
def test_a_bad_row_of_a_vertical_party_is_the_same_error(tmp_path: Path, case: str) -> None:
    nodes, edges, kw, words = BAD[case]
    arrow = _error(tmp_path, "arrow", True, nodes, edges, kw)
    assert arrow == _error(tmp_path, "python", True, nodes, edges, kw)
    assert words in arrow


def test_a_bad_row_in_a_later_batch_names_its_own_line(tmp_path: Path, monkeypatch) -> None:
    edges = "source,target\n" + "".join(f"{'abc'[i % 3]},{'abc'[(i + 1) % 3]}\n"
                                        for i in range(400)) + "q,z9\n"
    monkeypatch.setattr(columnar, "EDGE_BLOCK_BYTES", 256)
    arrow = _error(tmp_path, "arrow", False, N, edges, {})
    assert arrow == _error(tmp_path, "python", False, N, edges, {})
    assert "edges.csv line 402: edge ('q', 'z9')" in arrow


def test_a_table_that_is_not_utf8_is_refused_in_one_line(tmp_path: Path) -> None:
    _write(tmp_path)
    (tmp_path / "edges.csv").write_bytes(b"source,target\na1,b2\nb2,\xff\xfe\n")
    for reader in ("arrow", "python"):
        with pytest.raises(DataError, match="is not UTF-8 text"):
            ingest(_spec(tmp_path), tmp_path / "secret", tmp_path / reader, reader=reader)


def test_without_pyarrow_the_python_reader_ingests(tmp_path: Path, monkeypatch) -> None:
    _write(tmp_path)
    monkeypatch.setattr(columnar, "available", lambda: False)
    ingest(_spec(tmp_path), tmp_path / "secret", tmp_path / "out")
    assert (tmp_path / "out" / "ids.csv").is_file()
    with pytest.raises(DataError, match="needs pyarrow"):
        ingest(_spec(tmp_path), tmp_path / "secret", tmp_path / "out2", reader="arrow")


# ------------------------------------------------------------------------------ pseudonyms
@pytest.mark.parametrize("key_bytes", [32, 64, 65, 200])
def test_batched_pseudonyms_are_the_keyed_hmac(key_bytes: int) -> None:
    secret = os.urandom(key_bytes)
    ids = [f"ACC-{i}" for i in range(70_000)] + ["é", "", "x" * 300]
    want = np.array([list(hmac.new(secret, b"fedgl-id/1\x00" + s.encode(), hashlib.sha256)
                          .digest()[:16]) for s in ids], dtype=np.uint8)
    assert np.array_equal(pseudonyms(secret, ids), want)
    assert np.array_equal(pseudonyms(secret, (s.encode() for s in ids)), want)
    assert pseudonyms(secret, []).shape == (0, 16)


def test_the_stripped_characters_are_pythons_whitespace() -> None:
    import sys

    assert columnar.WHITESPACE == "".join(c for c in map(chr, range(sys.maxunicode + 1))
                                          if c.isspace())


def test_the_byte_order_equals_sorting_the_keys() -> None:
    p = np.random.default_rng(0).integers(0, 256, size=(5000, 16), dtype=np.uint8)
    p[7] = p[3]
    p[9, :8] = p[4, :8]
    assert np.array_equal(order_of(p), np.argsort(as_keys(p), kind="stable"))
