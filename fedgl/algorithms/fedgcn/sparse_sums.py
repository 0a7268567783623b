"""FedGCN's plaintext pre-training sums at scale: sparse, in row chunks, never a dense N×d.

Client side (:func:`client_partial_sums`): with ``B_k`` the touched-rows × own-nodes incidence
of the closed neighbourhoods (``B_k[r(i), j] = 1`` for ``j ∈ V_k ∩ Ñ(i)``) and ``X̃_k`` the own
features scaled by ``d̃_j^{-1/2}``,

    S_k = B_k X̃_k,        S_k[i] = Σ_{j ∈ V_k ∩ Ñ(i)} d̃_j^{-1/2} x_j,

computed ``chunk_rows`` rows of ``B_k`` at a time (sparse × sparse when the features are
sparse, so a chunk costs its non-zeros), and sent as :class:`~fedgl.federation.messages.
SparseRows` when that is smaller than the dense rows (lossless).

Server side (:func:`server_replies`): the union of touched rows is cut into blocks of
``chunk_rows`` global rows; for each block the clients' rows are added in client order
(``S[i] = Σ_k S_k[i]``), and the block's rows are scattered straight into the replies of the
clients that asked for them. The server holds the incoming messages, the outgoing replies and
one dense ``chunk_rows × d`` block, never the whole sum matrix. Every output row is computed by
the same additions in the same order whatever the chunk size, so chunked and unchunked results
are bitwise equal.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from fedgl.federation.messages import SparseRows, compact_rows

DEFAULT_CHUNK_ROWS = 1 << 16
SPARSE_FEATURES = 0.25  # feature density below which the client multiplies sparse × sparse


def _as_scipy(x: Tensor | SparseRows) -> sp.csr_matrix:
    return x.to_scipy() if isinstance(x, SparseRows) else sp.csr_matrix(x.numpy())


def _compact(mat: sp.csr_matrix | np.ndarray) -> Tensor | SparseRows:
    """The smaller wire form of a block of rows (sparse or dense)."""
    if isinstance(mat, np.ndarray):
        return compact_rows(torch.from_numpy(mat))
    rows, cols = mat.shape
    dense_bytes = rows * cols * mat.dtype.itemsize
    msg = SparseRows.from_scipy(mat)
    return msg if msg.serialized_nbytes() < dense_bytes else torch.from_numpy(mat.toarray())


def incidence(rows_of_neighbour: Tensor, own_of_edge: Tensor, num_rows: int,
              num_own: int) -> sp.csr_matrix:
    """``B_k``: own node j contributes to its own row (self-loop) and, for each edge (i, j),
    to the row of neighbour i."""
    r = torch.cat([torch.arange(num_own), rows_of_neighbour]).numpy()
    c = torch.cat([torch.arange(num_own), own_of_edge]).numpy()
    return sp.csr_matrix((np.ones(len(r), dtype=np.float32), (r, c)), shape=(num_rows, num_own))


def client_partial_sums(x: Tensor, deg_tilde: Tensor, b: sp.csr_matrix,
                        chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Tensor | SparseRows:
    """``S_k = B_k X̃_k`` in row chunks, in its smaller wire form (module docstring)."""
    scaled = (x * deg_tilde.to(x.dtype).pow(-0.5).unsqueeze(1)).numpy()
    n_rows = b.shape[0]
    step = max(1, chunk_rows)
    density = float(np.count_nonzero(scaled)) / max(scaled.size, 1)
    if density < SPARSE_FEATURES:
        xs = sp.csr_matrix(scaled)
        parts = [b[a:a + step] @ xs for a in range(0, n_rows, step)]
        total = sp.vstack(parts, format="csr") if parts else sp.csr_matrix((0, x.size(1)),
                                                                             dtype=scaled.dtype)
        return _compact(total.astype(scaled.dtype, copy=False))
    out = np.empty((n_rows, x.size(1)), dtype=scaled.dtype)
    for a in range(0, n_rows, step):
        out[a:a + step] = b[a:a + step] @ scaled
    return _compact(out)


def _selectors(rows_of: dict[int, np.ndarray]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per client: its message rows sorted by global row, and those global rows."""
    out = {}
    for k, r in rows_of.items():
        order = np.argsort(r, kind="stable")
        out[k] = (order, r[order])
    return out


def server_replies(sums: dict[int, Tensor | SparseRows], rows_of: dict[int, np.ndarray],
                   want: dict[int, np.ndarray], num_rows: int, num_features: int,
                   dtype: torch.dtype, chunk_rows: int = DEFAULT_CHUNK_ROWS
                   ) -> dict[int, Tensor | SparseRows]:
    """Each client's requested rows of ``S = Σ_k S_k`` (``want[k]``: global row positions in
    request order), computed block by block (module docstring)."""
    clients = sorted(sums)
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    sparse = any(isinstance(s, SparseRows) for s in sums.values())
    mats = {k: (_as_scipy(sums[k]) if isinstance(sums[k], SparseRows) else sums[k].numpy())
            for k in clients}
    src = _selectors(rows_of)
    dst = _selectors(want)
    pieces: dict[int, list] = {k: [] for k in want}
    positions: dict[int, list] = {k: [] for k in want}
    step = max(1, chunk_rows)
    for a in range(0, num_rows, step):
        b = min(num_rows, a + step)
        block = np.zeros((b - a, num_features), dtype=np_dtype)
        for k in clients:
            order, rows = src[k]
            sel = order[np.searchsorted(rows, a):np.searchsorted(rows, b)]
            if len(sel) == 0:
                continue
            part = mats[k][sel]
            block_rows = torch.from_numpy(rows_of[k][sel] - a)
            add = part.toarray() if sp.issparse(part) else part
            torch.from_numpy(block).index_add_(0, block_rows, torch.from_numpy(add))
        kept = sp.csr_matrix(block) if sparse else block
        for k in want:
            order, rows = dst[k]
            sel = order[np.searchsorted(rows, a):np.searchsorted(rows, b)]
            if len(sel):
                pieces[k].append(kept[want[k][sel] - a])
                positions[k].append(sel)
    return {k: _assemble(pieces[k], positions[k], len(want[k]), num_features, np_dtype, sparse)
            for k in want}


def _assemble(pieces: list, positions: list, n: int, d: int, dtype: np.dtype,
              sparse: bool) -> Tensor | SparseRows:
    """Rows gathered block by block, put back in request order, in the smaller wire form."""
    if not pieces:
        return torch.zeros((n, d), dtype=torch.from_numpy(np.zeros(0, dtype)).dtype)
    pos = np.concatenate(positions)
    inverse = np.empty(n, dtype=np.int64)
    inverse[pos] = np.arange(n)
    if sparse:
        return _compact(sp.vstack(pieces, format="csr")[inverse])
    return _compact(np.concatenate(pieces)[inverse])
