"""CSR matrices in numpy, adding in SciPy's order so that every sum is the same float.

A FedGCN run multiplies sparse matrices (its pre-training sums) and reads CSR matrices (the
Planetoid feature files); nothing else in it needs SciPy, whose sparse module alone took 0.13 to
0.15 s to import on the 2-core development machine (its array-API layer loads
``numpy.f2py``): a sixteenth of the default Cora run (docs/performance.md). :class:`CSR`
holds the three arrays and does those few operations in vectorised numpy, with SciPy's order of
additions, so results, and the wire's bytes, are the same bit for bit (tests compare every
operation with SciPy on adversarial values):

- ``A @ X`` with a dense ``X``: ``y_i = (((0 + a_{i,1} x_{j_1}) + a_{i,2} x_{j_2}) + …)``
  over row i's entries in stored order (SciPy's ``csr_matvecs``);
- ``A @ B`` with a CSR ``B``: ``c_{ik} = ((0 + a_{i,j_1} b_{j_1 k}) + …)`` over row i's
  entries of ``A`` in stored order, exact zeros dropped, columns ascending (SciPy's
  ``csr_matmat``, then ``sort_indices``);
- :meth:`CSR.toarray`: entries added in stored order into zeros (``csr_todense``).

Products run in the operands' common dtype, as SciPy's do. Large ones (at least
:data:`SCIPY_WORK` multiply-adds, or :data:`SCIPY_PAIRS` pairs to arrange) go to SciPy's own
kernels, 5 to 10 times faster there (a products-sized chunk: 0.1 against 0.55 s) and the same
floats: a run that large pays SciPy's import many times over, and a small one never loads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: products of at least this many multiply-adds run in SciPy (Cora's exchange: well under it)
SCIPY_WORK = 1 << 22
#: matrices of at least this many (row, column) pairs are arranged by SciPy
SCIPY_PAIRS = 1 << 20


@dataclass
class CSR:
    """A ``shape`` matrix: row i's columns are ``indices[indptr[i]:indptr[i + 1]]`` and its
    values ``data[...]`` (int64 offsets and columns)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]

    @classmethod
    def from_arrays(cls, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
                    shape: tuple[int, int]) -> CSR:
        """Checked as SciPy's ``check_format(full_check=True)`` checks (ValueError, one line),
        entries past ``indptr[-1]`` dropped as its ``prune`` drops them."""
        rows, cols = (int(s) for s in shape)
        data, indices, indptr = (np.asarray(a) for a in (data, indices, indptr))
        if data.ndim != 1 or indices.ndim != 1 or indptr.ndim != 1:
            raise ValueError("data, indices and indptr must be 1-D")
        if data.dtype.kind not in "biuf":
            raise ValueError(f"data of dtype {data.dtype} is not numeric")
        if indices.dtype.kind not in "iu" or indptr.dtype.kind not in "iu":
            raise ValueError("indices and indptr must be integers")
        if len(indptr) != rows + 1:
            raise ValueError(f"index pointer size {len(indptr)} should be {rows + 1}")
        if len(indices) != len(data):
            raise ValueError("indices and data should have the same size")
        ip = indptr.astype(np.int64)
        if ip[0] != 0:
            raise ValueError("index pointer should start with 0")
        if ip[-1] > len(indices):
            raise ValueError("last value of index pointer should be less than the size of "
                             "index and data arrays")
        if np.any(np.diff(ip) < 0):
            raise ValueError("index pointer values must form a non-decreasing sequence")
        end = int(ip[-1])
        ix = indices[:end].astype(np.int64)
        if end and (int(ix.min()) < 0 or int(ix.max()) >= cols):
            raise ValueError("column index exceeds matrix dimensions" if ix.max() >= cols
                             else "column index values must be >= 0")
        return cls(ip, ix, data[:end].copy(), (rows, cols))

    @classmethod
    def from_pairs(cls, rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int],
                   dtype: np.dtype | type = np.float32) -> CSR:
        """The matrix with one stored value per distinct (row, column) pair: how often the
        pair occurs (SciPy's sum of ones over duplicates), columns ascending."""
        n_rows, n_cols = (int(s) for s in shape)
        if len(rows) >= SCIPY_PAIRS:
            import scipy.sparse as sp

            m = sp.csr_matrix((np.ones(len(rows), dtype=dtype), (rows, cols)),
                              shape=(n_rows, n_cols))   # duplicates summed, columns sorted
            return cls(m.indptr.astype(np.int64), m.indices.astype(np.int64), m.data,
                       (n_rows, n_cols))
        keys = rows.astype(np.int64) * n_cols + cols.astype(np.int64)
        keys, counts = np.unique(keys, return_counts=True)
        indptr = np.zeros(n_rows + 1, dtype=np.int64)
        np.cumsum(np.bincount(keys // max(n_cols, 1), minlength=n_rows), out=indptr[1:])
        return cls(indptr, keys % max(n_cols, 1), counts.astype(dtype), (n_rows, n_cols))

    @classmethod
    def empty(cls, shape: tuple[int, int], dtype: np.dtype | type) -> CSR:
        return cls(np.zeros(int(shape[0]) + 1, dtype=np.int64), np.zeros(0, dtype=np.int64),
                   np.zeros(0, dtype=dtype), (int(shape[0]), int(shape[1])))

    @property
    def nnz(self) -> int:
        return int(len(self.data))

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    def entry_rows(self) -> np.ndarray:
        """The row of every stored entry."""
        return np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(self.indptr))

    def with_data(self, data: np.ndarray) -> CSR:
        """The same pattern with other values (one per stored entry)."""
        return CSR(self.indptr, self.indices, data, self.shape)

    def astype(self, dtype: np.dtype | type) -> CSR:
        return self if self.data.dtype == dtype else self.with_data(self.data.astype(dtype))

    def row_slice(self, start: int, stop: int) -> CSR:
        """Rows ``start:stop`` (clipped to the matrix, as slicing is)."""
        start, stop, _ = slice(start, stop).indices(self.shape[0])
        stop = max(start, stop)
        a, b = int(self.indptr[start]), int(self.indptr[stop])
        return CSR(self.indptr[start:stop + 1] - a, self.indices[a:b], self.data[a:b],
                   (stop - start, self.shape[1]))

    def take_rows(self, order: np.ndarray) -> CSR:
        """Rows ``order`` (any row ids, in that order), each row's entries as stored."""
        order = np.asarray(order, dtype=np.int64)
        lengths = np.diff(self.indptr)[order]
        indptr = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        pos = _ranges(self.indptr[:-1][order], lengths)
        return CSR(indptr, self.indices[pos], self.data[pos], (len(order), self.shape[1]))

    def toarray(self) -> np.ndarray:
        """The dense matrix: each row's entries added in stored order into zeros (a repeated
        column adds up; a stored ``-0.0`` gives ``0.0``, as ``0.0 + -0.0`` does)."""
        out = np.zeros(self.shape, dtype=self.data.dtype)
        if self.nnz:
            flat = self.entry_rows() * self.shape[1] + self.indices
            if bool(np.all(flat[1:] > flat[:-1])) or len(np.unique(flat)) == len(flat):
                out.reshape(-1)[flat] = self.data + self.data.dtype.type(0)
            else:
                np.add.at(out.reshape(-1), flat, self.data)
        return out

    def __matmul__(self, other: np.ndarray | CSR) -> np.ndarray | CSR:
        if isinstance(other, CSR):
            if self.shape[1] != other.shape[0]:
                raise ValueError(f"dimension mismatch: {self.shape} @ {other.shape}")
            lengths = np.diff(other.indptr)[self.indices]   # b's row j for every entry a_ij
            if int(lengths.sum()) >= SCIPY_WORK:
                product = (self.to_scipy() @ other.to_scipy()).tocsr()
                product.sort_indices()   # (csr_matmat stores no exact zero)
                return CSR(product.indptr.astype(np.int64), product.indices.astype(np.int64),
                           product.data, product.shape)
            return _times_sparse(self, other, lengths)
        x = np.asarray(other)
        if x.ndim == 2 and x.shape[0] == self.shape[1] and self.nnz * x.shape[1] >= SCIPY_WORK:
            return np.asarray(self.to_scipy() @ x)
        return _times_dense(self, x)

    def to_scipy(self) -> Any:
        """The same matrix as a SciPy ``csr_matrix`` (its arrays shared)."""
        import scipy.sparse as sp

        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)


def vstack(parts: Sequence[CSR], width: int, dtype: np.dtype | type) -> CSR:
    """The rows of ``parts`` one after the other (an empty ``0 × width`` matrix for none)."""
    if not parts:
        return CSR.empty((0, width), dtype)
    offsets = np.cumsum([0] + [p.nnz for p in parts[:-1]])
    indptr = np.concatenate([np.zeros(1, np.int64)]
                            + [p.indptr[1:] + off for p, off in zip(parts, offsets, strict=True)])
    return CSR(indptr, np.concatenate([p.indices for p in parts]),
               np.concatenate([p.data for p in parts]).astype(dtype, copy=False),
               (sum(p.shape[0] for p in parts), width))


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])``, vectorised."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    return np.arange(total, dtype=np.int64) + np.repeat(starts - (ends - lengths), lengths)


def _times_dense(a: CSR, x: np.ndarray) -> np.ndarray:
    """``a @ x``, SciPy's order: the k-th entries of all rows are added in one vectorised pass,
    for k = 1, 2, … (as many passes as the longest row has entries; the work is ``nnz × d``)."""
    if x.ndim != 2 or x.shape[0] != a.shape[1]:
        raise ValueError(f"dimension mismatch: {a.shape} @ {x.shape}")
    dtype = np.result_type(a.data.dtype, x.dtype)
    y = np.zeros((a.shape[0], x.shape[1]), dtype=dtype)
    lengths = np.diff(a.indptr)
    if not a.nnz:
        return y
    by_length = np.argsort(-lengths, kind="stable")   # rows with more entries first
    sorted_lengths = lengths[by_length]
    starts = a.indptr[:-1]
    data = a.data.astype(dtype, copy=False)
    for k in range(int(sorted_lengths[0])):
        rows = by_length[:int(np.count_nonzero(sorted_lengths > k))]
        entry = starts[rows] + k
        y[rows] += data[entry, None] * x[a.indices[entry]].astype(dtype, copy=False)
    return y


def _times_sparse(a: CSR, b: CSR, lengths: np.ndarray) -> CSR:
    """``a @ b`` in canonical form (columns ascending, no exact zeros; ``lengths``: the
    entries of b's row j for every entry a_ij): every product ``a_ij b_jk`` in ``a``'s stored
    order, added into its (i, k) by ``np.add.at`` (which adds in array order), so each sum is
    SciPy's."""
    dtype = np.result_type(a.data.dtype, b.data.dtype)
    n_rows, n_cols = a.shape[0], b.shape[1]
    pos = _ranges(b.indptr[:-1][a.indices], lengths)
    rows = np.repeat(a.entry_rows(), lengths)
    products = (np.repeat(a.data.astype(dtype, copy=False), lengths)
                * b.data[pos].astype(dtype, copy=False))
    keys, where = np.unique(rows * n_cols + b.indices[pos], return_inverse=True)
    sums = np.zeros(len(keys), dtype=dtype)
    np.add.at(sums, where, products)
    kept = sums != 0
    keys, sums = keys[kept], sums[kept]
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    if n_cols:
        np.cumsum(np.bincount(keys // n_cols, minlength=n_rows), out=indptr[1:])
    return CSR(indptr, keys % max(n_cols, 1), sums, (n_rows, n_cols))
