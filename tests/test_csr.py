"""fedgl.data.csr adds in SciPy's order: every product, sum and dense form equals SciPy's bit
for bit, on values chosen to make the order of additions show (wide magnitudes, cancellations,
-0.0, repeated columns, empty rows); bad arrays are refused as SciPy's full check refuses them."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from fedgl.data.csr import CSR, vstack


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _ours(m: sp.csr_matrix) -> CSR:
    return CSR.from_arrays(m.data, m.indices, m.indptr, m.shape)


def _adversarial(rng: np.random.Generator, rows: int, cols: int, density: float,
                 dtype: type) -> sp.csr_matrix:
    m = sp.random(rows, cols, density=density, format="csr", dtype=dtype,
                  random_state=int(rng.integers(1 << 30)))
    scale = 10.0 ** rng.integers(-6, 7, m.nnz)   # sums whose order shows in the last bits
    m.data = (rng.standard_normal(m.nnz) * scale).astype(dtype)
    if m.nnz:
        m.data[rng.random(m.nnz) < 0.05] = -0.0
    return m


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_equal_scipy_bit_for_bit(dtype):
    rng = np.random.default_rng(0)
    for _ in range(25):
        n, k, d = (int(v) for v in rng.integers(1, 120, 3))
        a = _adversarial(rng, n, k, float(rng.uniform(0.005, 0.3)), dtype)
        b = _adversarial(rng, k, d, float(rng.uniform(0.01, 0.6)), dtype)
        ref = (a @ b).tocsr()
        ref.eliminate_zeros()
        ref.sort_indices()
        got = _ours(a) @ _ours(b)
        assert np.array_equal(got.indptr, ref.indptr)
        assert np.array_equal(got.indices, ref.indices)
        assert got.data.dtype == ref.data.dtype and np.array_equal(_bits(got.data),
                                                                    _bits(ref.data))
        dense = b.toarray()
        ref_dense = a @ dense
        got_dense = _ours(a) @ dense
        assert got_dense.dtype == ref_dense.dtype
        assert np.array_equal(_bits(got_dense), _bits(ref_dense))


def test_toarray_adds_repeated_columns_in_stored_order_as_scipy():
    rng = np.random.default_rng(1)
    for _ in range(20):
        n, m = (int(v) for v in rng.integers(1, 40, 2))
        nnz = int(rng.integers(0, 3 * n))
        lengths = rng.multinomial(nnz, np.ones(n) / n)
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        indices = rng.integers(0, m, nnz)                   # unsorted, repeats
        data = (rng.standard_normal(nnz) * 10.0 ** rng.integers(-6, 7, nnz)).astype(np.float32)
        data[rng.random(nnz) < 0.1] = -0.0
        ref = sp.csr_matrix((data, indices, indptr), shape=(n, m)).toarray()
        got = CSR.from_arrays(data, indices, indptr, (n, m)).toarray()
        assert np.array_equal(_bits(got), _bits(ref))


def test_a_stored_negative_zero_becomes_zero_as_in_scipy():
    m = CSR.from_arrays(np.array([-0.0, 2.0], np.float32), np.array([0, 1]), np.array([0, 2]),
                        (1, 2))
    out = m.toarray()
    assert np.array_equal(_bits(out), _bits(sp.csr_matrix((m.data, m.indices, m.indptr),
                                                          shape=(1, 2)).toarray()))
    assert not np.signbit(out[0, 0])


def test_rows_pairs_and_stacking_equal_scipy():
    rng = np.random.default_rng(2)
    a = _adversarial(rng, 50, 30, 0.2, np.float32)
    ours = _ours(a)
    order = rng.permutation(50)[:20]
    for got, ref in ((ours.take_rows(order), a[order]), (ours.row_slice(5, 17), a[5:17]),
                     (ours.row_slice(40, 99), a[40:99]), (ours.row_slice(7, 7), a[7:7])):
        assert got.shape == ref.shape and np.array_equal(got.toarray(), ref.toarray())
    parts = [ours.row_slice(0, 10), ours.row_slice(10, 10), ours.row_slice(10, 50)]
    assert np.array_equal(vstack(parts, 30, np.float32).toarray(), a.toarray())
    assert vstack([], 30, np.float32).shape == (0, 30)
    r, c = rng.integers(0, 9, 40), rng.integers(0, 7, 40)     # with repeated pairs
    ref = sp.csr_matrix((np.ones(40, np.float32), (r, c)), shape=(9, 7))
    got = CSR.from_pairs(r, c, (9, 7))
    assert np.array_equal(got.indptr, ref.indptr) and np.array_equal(got.indices, ref.indices)
    assert np.array_equal(got.data, ref.data) and got.data.dtype == np.float32


@pytest.mark.parametrize("data, indices, indptr, shape, says", [
    ([1.0], [3], [0, 1], (1, 3), "column index exceeds"),
    ([1.0], [-1], [0, 1], (1, 3), ">= 0"),
    ([1.0, 2.0], [0, 1], [0, 2, 1], (2, 3), "non-decreasing"),
    ([1.0], [0], [1, 1], (1, 3), "start with 0"),
    ([1.0], [0], [0, 2], (1, 3), "less than the size"),
    ([1.0], [0, 1], [0, 1], (1, 3), "same size"),
    ([1.0], [0], [0, 1, 1], (1, 3), "index pointer size"),
    ([1.0], [0.5], [0, 1], (1, 3), "integers"),
])
def test_inconsistent_arrays_are_refused_with_one_line(data, indices, indptr, shape, says):
    with pytest.raises(ValueError, match=says) as info:
        CSR.from_arrays(np.array(data), np.array(indices), np.array(indptr), shape)
    assert "\n" not in str(info.value)


def test_entries_past_the_last_offset_are_dropped_as_scipy_prunes():
    got = CSR.from_arrays(np.array([1.0, 2.0, 3.0]), np.array([0, 1, 2]), np.array([0, 2]),
                          (1, 3))
    assert got.nnz == 2 and np.array_equal(got.toarray(), [[1.0, 2.0, 0.0]])


def test_a_planetoid_fedgcn_run_loads_no_scipy(data_root, tmp_path):
    """The Cora FedGCN run reads its pickles and computes its pre-training sums with CSR (its
    leakage report, in its own worker, may load SciPy): 0.13 s of imports saved."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys\n"
            "from fedgl.cli import main\n"
            "code = main(sys.argv[1:])\n"
            "print('loaded:', sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))\n"
            "sys.exit(code)\n")
    env = {**os.environ, "FEDGL_DATA": str(data_root), "FEDGL_LEAKAGE_CACHE": str(tmp_path / "c"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", code, "run", "--algorithm", "fedgcn", "--hops",
                           "2", "--dataset", "cora", "--clients", "3", "--rounds", "2",
                           "--no-progress", "--out", str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "loaded: []" in done.stdout, done.stdout[-2000:]


def test_large_products_go_to_scipy_with_the_same_floats(monkeypatch):
    """Above SCIPY_WORK multiply-adds (SCIPY_PAIRS pairs) the products (the arrangement) run in
    SciPy: the same floats, pattern and dtype as the numpy kernels below the bound."""
    import fedgl.data.csr as csr

    rng = np.random.default_rng(3)
    a = _adversarial(rng, 60, 40, 0.2, np.float32)
    b = _adversarial(rng, 40, 30, 0.3, np.float32)
    dense = b.toarray()
    r, c = rng.integers(0, 9, 50), rng.integers(0, 7, 50)
    small = (_ours(a) @ _ours(b), _ours(a) @ dense, CSR.from_pairs(r, c, (9, 7)))
    monkeypatch.setattr(csr, "SCIPY_WORK", 0)
    monkeypatch.setattr(csr, "SCIPY_PAIRS", 0)
    large = (_ours(a) @ _ours(b), _ours(a) @ dense, CSR.from_pairs(r, c, (9, 7)))
    for s, g in ((small[0], large[0]), (small[2], large[2])):
        assert np.array_equal(s.indptr, g.indptr) and np.array_equal(s.indices, g.indices)
        assert s.data.dtype == g.data.dtype and np.array_equal(_bits(s.data), _bits(g.data))
    assert small[1].dtype == large[1].dtype
    assert np.array_equal(_bits(small[1]), _bits(large[1]))
