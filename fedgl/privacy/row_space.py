"""Which unit vectors lie in the row space of a 0/1 block: the leakage report's dense test.

For a block ``A`` (rows x nodes) of the received-rows system, node ``j``'s scaled features are
determined exactly iff ``e_j ∈ rowspace(A)``, i.e. iff the projection ``P = A^+ A`` onto the row
space has ``P_jj = 1``, i.e. iff row ``j`` of an orthonormal basis of the null space of ``A`` is
zero. :func:`found_by_eigh` is the reference: the eigenvectors of the Gram matrix
``G = A^T A = VΛV^T`` (or of ``A A^T``), ``P_jj = Σ_{λ_l > τ} V_jl²`` with
``τ = 1e-9 · max(λ_max, 1)``, found where ``P_jj > 1 - 1e-6``.

:func:`found_in_row_space` gives the same answer from a pivoted Cholesky factorisation
``Π^T G Π = R^T R + S`` (LAPACK ``pstrf``, ``R = [R11 R12]`` of rank r), about a tenth of the
eigensolver's work. In the pivoted order the null space of ``R`` is spanned by the columns of
``N = [-R11^{-1} R12; I]``, and ``1 - P_jj = n_j^T (N^T N)^{-1} n_j`` (row ``j`` of ``N``, from
a QR of ``N``). When the null space is the larger side, ``P_jj = r_j^T (R R^T)^{-1} r_j`` is
read from the rows instead (a QR of ``R^T``).

Why it is the reference's answer, not an approximation of it: the Schur complement ``S`` left
by the factorisation is checked to be below the reference's threshold (``tr S ≤ τ``, with the
largest diagonal of ``G`` standing in for ``λ_max ≥ max G_jj``), so by Weyl's inequality the
reference drops at least the last ``n - r`` eigenvalues; and the reference keeps the first r
because they are at least ``λ_min(R11^T R11) - tr S ≥ 1/‖R11^{-1}‖_F² - tr S`` (for an exact
rank-r Gram matrix, its non-zero eigenvalues are those of ``G11 + G11^{-1/2} G12 G21
G11^{-1/2} ⪰ G11``), checked against ``τ`` with ``tr G ≥ λ_max`` in it. Both subspaces then
agree up to ``tr S / gap``, and every ``1 - P_jj`` must be clearly on one side of ``1e-6`` (not
in ``[1e-9, 1e-4]``). When any check fails the block goes to :func:`found_by_eigh`, so the answer
is the reference's in every case. ``tests/test_leakage_fast.py`` compares whole reports.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:   # SciPy loads when a report is computed, not with every run
    import scipy.sparse as sp

#: the reference's eigenvalue threshold, relative to ``max(λ_max, 1)``
EIG_THRESHOLD = 1e-9
#: the reference's test on the projection's diagonal: found where ``P_jj > 1 - FOUND_GAP``
FOUND_GAP = 1e-6
#: ``1 - P_jj`` in this range is too close to call against the reference: solve by eigh
_AMBIGUOUS = (1e-9, 1e-4)


def found_by_eigh(block: sp.csr_matrix) -> np.ndarray:
    """The reference: ``P_jj > 1 - 1e-6`` from the eigenvectors of the smaller Gram matrix
    (``P_jj = Σ_{λ>τ} V_jl²`` for ``A^T A``, ``Σ_{λ>τ} (A^T u_l)_j² / λ_l`` for ``A A^T``)."""
    import torch

    rows, cols = block.shape
    if cols <= rows:
        gram = torch.from_numpy((block.T @ block).toarray())
        lam, vec = torch.linalg.eigh(gram)
        keep = lam > EIG_THRESHOLD * max(float(lam.max()), 1.0)
        leverage = (vec[:, keep] ** 2).sum(dim=1).numpy()
    else:
        lam, vec = torch.linalg.eigh(torch.from_numpy((block @ block.T).toarray()))
        keep = lam > EIG_THRESHOLD * max(float(lam.max()), 1.0)
        proj = block.T @ vec[:, keep].numpy()
        leverage = (proj ** 2 / lam[keep].numpy()).sum(axis=1)
    return leverage > 1.0 - FOUND_GAP


def found_in_row_space(block: sp.csr_matrix) -> np.ndarray:
    """:func:`found_by_eigh`'s answer by a pivoted Cholesky factorisation (module docstring),
    falling back to the eigensolver where a check does not hold."""
    found = _found_by_pivoted_cholesky(block)
    return found_by_eigh(block) if found is None else found


def _found_by_pivoted_cholesky(block: sp.csr_matrix) -> np.ndarray | None:
    from scipy.linalg import lapack, qr

    rows, cols = block.shape
    tall = cols <= rows
    gram = (block.T @ block if tall else block @ block.T).toarray()
    n = gram.shape[0]
    diag = gram.diagonal().copy()
    low = EIG_THRESHOLD * max(float(diag.max()), 1.0)     # ≤ the reference's threshold τ
    high = EIG_THRESHOLD * max(float(diag.sum()), 1.0)    # ≥ τ
    factor, piv, rank, info = lapack.dpstrf(gram, tol=low / n, lower=0, overwrite_a=1)
    if info < 0 or rank == 0:
        return None
    piv = piv - 1
    r12 = factor[:rank, rank:]
    schur = float(np.abs(diag[piv[rank:]] - (r12 ** 2).sum(axis=0)).sum()) if rank < n else 0.0
    if schur > low:
        return None
    inv, info = lapack.dtrtri(np.triu(factor[:rank, :rank]), lower=0)
    if info != 0 or 1.0 / float((inv ** 2).sum()) - schur <= high:
        return None
    if not tall:     # rows S = piv[:r] span the row space: P_jj = ‖(A_S^T R11^{-1})_j‖²
        gap = 1.0 - np.asarray((block[piv[:rank]].T @ inv) ** 2).sum(axis=1)
    elif rank == n:
        gap = np.zeros(n)
    else:
        gap = np.empty(n)
        if n - rank <= rank:       # null space: N = [-R11^{-1} R12; I]
            null = np.vstack([-(inv @ r12), np.eye(n - rank)])
            gap[piv] = (qr(null, mode="economic", check_finite=False)[0] ** 2).sum(axis=1)
        else:                      # row space: P_jj = r_j^T (R R^T)^{-1} r_j
            q = qr(np.hstack([np.triu(factor[:rank, :rank]), r12]).T, mode="economic",
                   check_finite=False)[0]
            gap[piv] = 1.0 - (q ** 2).sum(axis=1)
    if ((gap > _AMBIGUOUS[0]) & (gap < _AMBIGUOUS[1])).any():
        return None
    return gap < FOUND_GAP


def blocks(a: sp.csr_matrix) -> list[tuple[np.ndarray, np.ndarray]]:
    """The connected blocks of ``a`` (rows and columns linked by a non-zero): per block its
    row and column indices, ascending. Rows without a non-zero are in no block."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    nr, nc = a.shape
    if not nr or not nc:
        return []
    bip = sp.bmat([[None, a], [a.T, None]]).tocsr()
    _, label = connected_components(bip, directed=False)
    row_label, col_label = label[:nr], label[nr:]
    col_order = np.argsort(col_label, kind="stable")
    row_order = np.argsort(row_label, kind="stable")
    comps, col_start = np.unique(col_label[col_order], return_index=True)
    col_end = np.append(col_start[1:], nc)
    row_start = np.searchsorted(row_label[row_order], comps, side="left")
    row_end = np.searchsorted(row_label[row_order], comps, side="right")
    return [(row_order[row_start[b]:row_end[b]], col_order[col_start[b]:col_end[b]])
            for b in range(len(comps))]


def strip_free_columns(a: sp.csr_matrix, rows: np.ndarray,
                       cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows and columns (indices, within the masks ``rows``, ``cols``, whose blocks they
    close) left after stripping every row that holds two or more *free* columns (columns in no
    other row), repeatedly; the columns dropped are not in the row space.

    Exact: if row i holds free columns j and j', any ``y^T A`` has coordinates
    ``j = j' = y_i``. So ``e_j`` needs ``y_i = 1`` and then has a 1 at ``j'``: neither is found;
    and ``e_k`` for any other k needs ``y_i = 0``: row i does not change whether it is found.
    A column left in no row has coordinate 0 in every combination of the rest: not found."""
    a = a.tocsr()
    at = a.T.tocsr()
    rows, cols = rows.copy(), cols.copy()
    while True:
        free = cols & (at @ rows.astype(np.float64) == 1)
        strip = rows & (a @ free.astype(np.float64) >= 2)
        if not strip.any():
            break
        rows &= ~strip
        cols &= at @ rows.astype(np.float64) > 0
    return np.flatnonzero(rows), np.flatnonzero(cols)


def single_threaded_blas() -> AbstractContextManager:
    """A context in which SciPy's BLAS runs on one thread (``threadpoolctl``, when installed):
    the report's factorisations are small, and a threaded BLAS that waits for busy cores (or
    for the training that runs beside it) is many times slower than one thread."""
    import scipy.linalg  # noqa: F401  (loads SciPy's BLAS, so that the limit reaches it)

    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return nullcontext()
    return threadpool_limits(limits=1, user_api="blas")
