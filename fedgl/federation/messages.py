"""Message payloads: their size on the wire and defensive copies.

A payload is any nesting of dicts, lists and tuples whose leaves are tensors, numpy arrays,
:class:`SparseRows`, numbers, strings or None. :func:`payload_nbytes` counts the bytes of the
values a real transport must carry: ``numel * element_size`` per tensor or array, 8 bytes per int
or float, 1 per bool, UTF-8 length per string; a :class:`SparseRows` counts its CSR arrays as
sent (indices in the smallest unsigned dtype that fits) plus its two dimensions.
:func:`payload_dense_nbytes` counts every :class:`SparseRows` as the dense matrix it encodes, so
that formulas stated in dense values stay checkable. Dict keys and container structure are a
fixed schema known to both ends and are not counted.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedgl.data.csr import CSR


def smallest_uint(max_value: int) -> np.dtype:
    """The smallest unsigned integer dtype holding 0..max_value."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if max_value <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.uint64)


@dataclass
class SparseRows:
    """A matrix of ``shape`` in CSR form, as sent: ``indptr`` (rows + 1 offsets) and ``indices``
    (column of each stored value) in the smallest unsigned dtypes that fit, ``values`` in the
    matrix's dtype. Lossless: :meth:`to_dense` returns exactly the matrix it was built from."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    shape: tuple[int, int]
    _packed: tuple[dict, bytes] | None = field(default=None, init=False, repr=False,
                                               compare=False)

    @classmethod
    def from_scipy(cls, mat) -> SparseRows:
        """From a scipy CSR matrix (explicit zeros dropped, columns ascending in each row)."""
        mat = mat.tocsr()
        mat.sort_indices()  # canonical, as the receiver gets it
        return cls.from_csr(CSR(mat.indptr.astype(np.int64), mat.indices.astype(np.int64),
                                mat.data, (int(mat.shape[0]), int(mat.shape[1]))))

    @classmethod
    def from_csr(cls, mat: CSR) -> SparseRows:
        """From a :class:`~fedgl.data.csr.CSR` matrix in canonical form (columns ascending in
        each row, none repeated: what its products give), explicit zeros dropped."""
        if mat.nnz and not bool(np.all(mat.data != 0)):
            kept = mat.data != 0
            counts = np.bincount(mat.entry_rows()[kept], minlength=mat.shape[0])
            indptr = np.zeros(mat.shape[0] + 1, dtype=np.int64)
            np.cumsum(counts, out=indptr[1:])
            mat = CSR(indptr, mat.indices[kept], mat.data[kept], mat.shape)
        rows, cols = mat.shape
        return cls(mat.indptr.astype(smallest_uint(mat.nnz)),
                   mat.indices.astype(smallest_uint(max(cols - 1, 0))),
                   np.ascontiguousarray(mat.data), (int(rows), int(cols)))

    @classmethod
    def from_dense(cls, x: torch.Tensor | np.ndarray) -> SparseRows:
        """From a dense matrix (its non-zeros, row by row, columns ascending), by torch's CSR
        conversion (about twice as fast as scipy's from a dense array; the same arrays)."""
        t = x.detach().cpu() if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))
        if t.dim() != 2 or t.dtype not in (torch.float32, torch.float64):
            import scipy.sparse as sp

            return cls.from_scipy(sp.csr_matrix(t.numpy()))
        with warnings.catch_warnings():  # torch calls its CSR support "beta" on conversion
            warnings.simplefilter("ignore", UserWarning)
            csr = t.contiguous().to_sparse_csr()
        rows, cols = t.shape
        values = csr.values().numpy()
        return cls(csr.crow_indices().numpy().astype(smallest_uint(len(values))),
                   csr.col_indices().numpy().astype(smallest_uint(max(cols - 1, 0))),
                   np.ascontiguousarray(values), (int(rows), int(cols)))

    @property
    def nnz(self) -> int:
        return int(len(self.values))

    def to_scipy(self):
        import scipy.sparse as sp

        return sp.csr_matrix((self.values, self.indices.astype(np.int64),
                              self.indptr.astype(np.int64)), shape=self.shape)

    def to_csr(self) -> CSR:
        """The matrix as a checked :class:`~fedgl.data.csr.CSR` (ValueError if inconsistent)."""
        return CSR.from_arrays(self.values, self.indices, self.indptr, self.shape)

    def to_dense(self) -> torch.Tensor:
        return torch.from_numpy(self.to_csr().toarray())

    def put_rows(self, out: torch.Tensor, at: torch.Tensor) -> None:
        """``out[at] = self.to_dense().to(out.dtype)`` (``at``: distinct row positions) without
        the dense copy: the rows are zeroed, then the entries written. Each entry is written
        as ``v + 0.0``, the value SciPy's ``toarray`` sums into its zeros (so an explicit
        ``-0.0`` arrives as ``0.0`` there too); rows that repeat a column (which no decoded
        message has) go the dense way, which adds them."""
        from fedgl.federation.packed_rows import ascending_columns

        indptr = self.indptr.astype(np.int64)
        if not ascending_columns(indptr, self.indices):
            out[at] = self.to_dense().to(out.dtype)
            return
        out.index_fill_(0, at, 0)
        if self.nnz:
            rows = np.repeat(np.arange(self.shape[0]), np.diff(indptr))
            out[at[torch.from_numpy(rows)], torch.from_numpy(self.indices.astype(np.int64))] = \
                torch.from_numpy(self.values + 0.0).to(out.dtype)

    def packed(self) -> tuple[dict, bytes]:
        """The wire form (:func:`fedgl.federation.packed_rows.pack`), computed once: the
        arrays are not to be changed after a message is built from them."""
        if self._packed is None:
            from fedgl.federation.packed_rows import pack

            self._packed = pack(self.indptr, self.indices, self.values, self.shape)
        return self._packed

    def serialized_nbytes(self) -> int:
        """The packed body, its four sizes (8 bytes each) and its flag (1 byte)."""
        return len(self.packed()[1]) + 4 * 8 + 1

    def dense_nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * self.values.dtype.itemsize

    def copy(self) -> SparseRows:
        return SparseRows(self.indptr.copy(), self.indices.copy(), self.values.copy(), self.shape)


def compact_rows(x: torch.Tensor) -> torch.Tensor | SparseRows:
    """``x`` as :class:`SparseRows` when that is smaller on the wire, else ``x`` itself."""
    nnz = int(torch.count_nonzero(x))
    rows, cols = x.shape
    return SparseRows.from_dense(x) if _sparse_is_smaller(rows, cols, x.element_size(), nnz) \
        else x


def _sparse_is_smaller(rows: int, cols: int, itemsize: int, nnz: int) -> bool:
    sparse_bytes = (nnz * (itemsize + smallest_uint(max(cols - 1, 0)).itemsize)
                    + (rows + 1) * smallest_uint(nnz).itemsize + 16)
    return sparse_bytes < rows * cols * itemsize


class RowPicker:
    """``compact_rows(x[index])`` for many ``index`` of one dense 2-D ``x`` (float32/64, CPU),
    without a dense copy of the picked rows: ``x``'s non-zeros are found once (CSR), and each
    pick gathers its rows' entries. The same arrays and the same choice as ``compact_rows``;
    FedGCN's server answers every client's requested rows of a block this way."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x
        with warnings.catch_warnings():  # torch calls its CSR support "beta" on conversion
            warnings.simplefilter("ignore", UserWarning)
            csr = x.contiguous().to_sparse_csr()
        self.crow = csr.crow_indices().numpy()
        self.col = csr.col_indices().numpy()
        self.values = csr.values().numpy()

    def pick(self, index: np.ndarray) -> torch.Tensor | SparseRows:
        index = np.asarray(index, dtype=np.int64)
        starts = self.crow[index]
        lengths = self.crow[index + 1] - starts
        nnz, cols = int(lengths.sum()), int(self.x.shape[1])
        if not _sparse_is_smaller(len(index), cols, self.x.element_size(), nnz):
            return self.x[torch.from_numpy(index)]
        crow = np.zeros(len(index) + 1, dtype=np.int64)
        np.cumsum(lengths, out=crow[1:])
        at = np.repeat(starts - crow[:-1], lengths) + np.arange(nnz)
        return SparseRows(crow.astype(smallest_uint(nnz)),
                          self.col[at].astype(smallest_uint(max(cols - 1, 0))),
                          np.ascontiguousarray(self.values[at]), (len(index), cols))


def as_dense(x: torch.Tensor | SparseRows) -> torch.Tensor:
    return x.to_dense() if isinstance(x, SparseRows) else x


def payload_dense_nbytes(obj: Any) -> int:
    """Like :func:`payload_nbytes`, counting every :class:`SparseRows` as its dense matrix."""
    if isinstance(obj, SparseRows):
        return obj.dense_nbytes()
    if isinstance(obj, dict):
        return sum(payload_dense_nbytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(payload_dense_nbytes(v) for v in obj)
    return payload_nbytes(obj)


def payload_nbytes(obj: Any) -> int:
    """Bytes of the values in ``obj`` (see module docstring)."""
    if obj is None:
        return 0
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, bool):
        return 1
    if isinstance(obj, int | float | np.integer | np.floating):
        return 8
    if isinstance(obj, str):
        return len(obj.encode())
    if isinstance(obj, bytes | bytearray):
        return len(obj)
    if isinstance(obj, dict):
        return sum(payload_nbytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(payload_nbytes(v) for v in obj)
    if hasattr(obj, "serialized_nbytes"):
        return int(obj.serialized_nbytes())
    raise TypeError(f"cannot size a payload of type {type(obj).__name__}")


def copy_payload(obj: Any) -> Any:
    """A deep copy in which no tensor or array shares memory with ``obj``."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, np.ndarray | SparseRows):
        return obj.copy()
    if isinstance(obj, dict):
        return type(obj)((k, copy_payload(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return [copy_payload(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(copy_payload(v) for v in obj)
    return obj
