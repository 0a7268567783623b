"""FedGCN's plaintext pre-training sums at scale: sparse, in row chunks, never a dense N×d.

Client side (:func:`partial_sum_rows`): with ``B_k`` the touched-rows × own-nodes incidence
of the closed neighbourhoods (``B_k[r(i), j] = 1`` for ``j ∈ V_k ∩ Ñ(i)``) and ``X̃_k`` the own
features scaled by ``d̃_j^{-1/2}`` (the scale carried by the incidence's values,
:func:`scaled_incidence`),

    S_k = B_k X̃_k,        S_k[i] = Σ_{j ∈ V_k ∩ Ñ(i)} d̃_j^{-1/2} x_j,

computed ``chunk_rows`` rows of ``B_k`` at a time (sparse × sparse when the features are
sparse, so a chunk costs its non-zeros), and sent as :class:`~fedgl.federation.messages.
SparseRows` when that is smaller than the dense rows (lossless).

The exchange itself streams these rows in blocks of global ids, which the server sums block by
block (:mod:`fedgl.algorithms.fedgcn.stream`). Every output row is computed on its own, so
chunked and unchunked results are bitwise equal. The matrices are :class:`~fedgl.data.csr.CSR`
(numpy, SciPy's order of additions: the sums SciPy gave before, bit for bit).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fedgl.data.csr import CSR, vstack
from fedgl.federation.messages import SparseRows, compact_rows

DEFAULT_CHUNK_ROWS = 1 << 16
SPARSE_FEATURES = 0.25  # feature density below which the client multiplies sparse × sparse


def _compact(mat: CSR | np.ndarray) -> Tensor | SparseRows:
    """The smaller wire form of a block of rows (sparse or dense)."""
    if isinstance(mat, np.ndarray):
        return compact_rows(torch.from_numpy(mat))
    rows, cols = mat.shape
    dense_bytes = rows * cols * mat.dtype.itemsize
    msg = SparseRows.from_csr(mat)
    return msg if msg.serialized_nbytes() < dense_bytes else torch.from_numpy(mat.toarray())


def incidence(rows_of_neighbour: Tensor, own_of_edge: Tensor, num_rows: int,
              num_own: int) -> CSR:
    """``B_k``: own node j contributes to its own row (self-loop) and, for each edge (i, j),
    to the row of neighbour i (a repeated pair stores its count; :func:`scaled_incidence`
    then replaces every stored value)."""
    r = torch.cat([torch.arange(num_own), rows_of_neighbour]).numpy()
    c = torch.cat([torch.arange(num_own), own_of_edge]).numpy()
    return CSR.from_pairs(r, c, (num_rows, num_own), np.float32)


def unscaled_features(x: Tensor) -> np.ndarray | CSR:
    """The own features as the streamed exchange multiplies them: a view of ``x`` (no copy),
    or a sparse matrix when the features are sparse. The ``d̃_j^{-1/2}`` scale then rides on the
    incidence's values (:func:`scaled_incidence`): ``s_j · x_j`` is the same float as
    ``1 · (x_j · s_j)``, so the sums are bitwise those of ``B_k X̃_k``."""
    arr = x.numpy()
    density = float(np.count_nonzero(arr)) / max(arr.size, 1)
    return SparseRows.from_dense(x).to_csr() if density < SPARSE_FEATURES else arr


def scaled_incidence(b: CSR, deg_tilde: Tensor, dtype: torch.dtype) -> CSR:
    """``B_k diag(d̃^{-1/2})``: each stored value of column j becomes ``d̃_j^{-1/2}``."""
    scale = deg_tilde.to(dtype).pow(-0.5).numpy()
    return b.with_data(scale[b.indices])


def partial_sum_rows(scaled: np.ndarray | CSR, b: CSR,
                     chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Tensor | SparseRows:
    """``B X̃`` for the rows of ``b``, ``chunk_rows`` at a time, in its smaller wire form (sparse
    × sparse when ``scaled`` is sparse, so a chunk costs its non-zeros). Every output row is
    computed on its own, so any chunking (or row subset) gives bitwise the same rows."""
    n_rows, step = b.shape[0], max(1, chunk_rows)
    if isinstance(scaled, CSR):
        parts = [b.row_slice(a, a + step) @ scaled for a in range(0, n_rows, step)]
        return _compact(vstack(parts, scaled.shape[1], scaled.dtype))
    out = np.empty((n_rows, scaled.shape[1]), dtype=scaled.dtype)
    for a in range(0, n_rows, step):
        out[a:a + step] = b.row_slice(a, a + step) @ scaled
    return _compact(out)
