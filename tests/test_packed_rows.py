"""The packed wire form of sparse rows: exact round trips (bits, dtypes, canonical order) and a
hostile body refused in one line, never inflated beyond its declared size."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import scipy.sparse as sp

from fedgl.federation.codec import WireError, decode, encode, roundtrip
from fedgl.federation.messages import SparseRows, payload_nbytes


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("levels", [3, 10**9])  # few distinct values (coded) or many (as is)
def test_roundtrip_is_exact(dtype, levels):
    rng = np.random.default_rng(levels)
    dense = np.zeros((400, 300), dtype)
    mask = rng.random(dense.shape) < 0.05
    dense[mask] = rng.integers(1, levels + 1, mask.sum()) / 7.0
    dense[0, 1] = np.float32("nan") if dtype is np.float32 else np.nan
    mat = sp.csr_matrix(dense)
    perm = rng.permutation(mat.indptr[1])  # row 0 stored out of column order
    mat.indices[:len(perm)], mat.data[:len(perm)] = mat.indices[perm], mat.data[perm]
    msg = SparseRows(mat.indptr.astype(np.uint16), mat.indices.astype(np.uint16),
                     mat.data.copy(), mat.shape)
    before = msg.values.copy()
    got, _ = roundtrip("t", {"s": msg})
    ref = SparseRows.from_scipy(sp.csr_matrix(dense))  # canonical: ascending columns
    g = got["s"]
    for a, b in zip((g.indptr, g.indices, g.values), (ref.indptr, ref.indices, ref.values),
                    strict=True):
        assert a.dtype == b.dtype and np.array_equal(_bits(a), _bits(b))
    assert np.array_equal(_bits(msg.values), _bits(before))  # the sender's arrays untouched
    assert msg.packed()[0]["coded"] is (levels == 3)
    assert payload_nbytes(msg) < ref.indptr.nbytes + ref.indices.nbytes + ref.values.nbytes


def test_empty_and_all_zero_rows():
    for shape in [(0, 5), (4, 0), (6, 9)]:
        msg = SparseRows.from_scipy(sp.csr_matrix(shape, dtype=np.float32))
        got, _ = roundtrip("t", {"s": msg})
        assert got["s"].shape == shape and got["s"].nnz == 0


@pytest.mark.parametrize("change", [
    {"nnz": 49}, {"nnz": 51}, {"shape": [50, 10]}, {"shape": [50]}, {"table": 7},
    {"coded": "yes"}, {"nnz": -1}, {"table": 1 << 60}])
def test_inconsistent_node_is_one_line(change):
    import json

    msg = SparseRows.from_scipy(sp.csr_matrix(np.eye(50, dtype=np.float32)))
    enc = encode("t", {"s": msg})
    head = json.loads(enc.header)
    head["payload"]["$D"][0][1].update(change)
    enc.header = json.dumps(head).encode()
    with pytest.raises(WireError, match="packed sparse rows|sparse rows|malformed"):
        decode(enc)


def test_bomb_is_not_inflated_beyond_declared_size():
    import json

    msg = SparseRows.from_scipy(sp.csr_matrix(np.eye(50, dtype=np.float32)))
    enc = encode("t", {"s": msg})
    bomb = zlib.compress(b"\0" * (200 << 20), 9)  # 200 MB of zeros in ~200 KB
    enc.buffers[0] = memoryview(bomb)
    with pytest.raises(WireError, match="do not match their declared sizes"):
        decode(enc)
    enc.buffers[0] = memoryview(b"not deflate")
    with pytest.raises(WireError, match="not a valid deflate stream"):
        decode(enc)
    head = json.loads(enc.header)
    assert head["payload"]["$D"][0][1]["nnz"] == 50


def test_repeated_or_out_of_range_columns_refused():
    import json

    dense = np.zeros((3, 4), np.float32)
    dense[0, 0], dense[1, 1], dense[2, 2] = 1.0, 2.0, 3.0  # distinct: sent as they are
    msg = SparseRows.from_scipy(sp.csr_matrix(dense))
    # a row holding column 2 twice: lengths [2, 0, 1], gaps [2, 0] then [1]
    body = (np.array([2, 0, 1], np.uint8).tobytes() + np.array([2, 0, 1], np.uint8).tobytes()
            + np.array([1.0, 1.0, 1.0], "<f4").tobytes())
    enc = encode("t", {"s": msg})
    enc.buffers[0] = memoryview(zlib.compress(body))
    with pytest.raises(WireError, match="repeat a column"):
        decode(enc)
    body = (np.array([2, 0, 1], np.uint8).tobytes() + np.array([2, 2, 1], np.uint8).tobytes()
            + np.array([1.0, 1.0, 1.0], "<f4").tobytes())  # row 0: columns 2 and 4 of 4
    enc.buffers[0] = memoryview(zlib.compress(body))
    with pytest.raises(WireError, match="index out of bounds"):
        decode(enc)
    assert json.loads(enc.header)["payload"]["$D"][0][1]["coded"] is False
