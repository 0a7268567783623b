"""FedGAT's pre-training matrices (Algorithm 1) and the client-side first layer built on them.

Server side (:func:`matrix_message`, Matrix FedGAT, paper §4 / Algorithm 1). For node i with
closed neighbourhood Ñ_i (self-loop included, deg = |Ñ_i|, m = 2·deg): a Haar-random orthogonal
m×m basis split into u_{1j}, u_{2j} (j ∈ Ñ_i), a random r (log-uniform in [1/4, 4]) and

    U_j = ½ (u_1j u_1jᵀ + u_2j u_2jᵀ + r u_1j u_2jᵀ + (1/r) u_2j u_1jᵀ) = ½ v_j w_jᵀ,
    v_j = u_1j + u_2j / r,  w_j = u_1j + r u_2j            (eq. 9; rank-1 oblique projectors)
    M_1i(s) = h_i(s) P_i,  P_i = Σ_j U_j,   M_2i(s) = Σ_j h_j(s) U_j          (eq. 13)
    K_1i = √2 Σ_j u_1j,   K_2i = √2 Σ_j u_1j h_jᵀ                               (eq. 11)

Wire format (docs/decisions.md, FedGAT): a slice M(s) that is identically zero (feature s is zero
on every node involved) is not sent; the others travel with their feature index s. So a node's
message is ``M2 [S, m, m]`` with ``idx2 [S]`` (S = features non-zero on some neighbour), ``K2
[m, S]`` (its columns on the same S), ``K1 [m]``, and either ``P [m, m]`` (to the client that owns
i and knows h_i: M_1i(s) = h_i(s) P_i, same information, d times fewer values) or ``M1 [S1, m, m]``
with ``idx1`` (S1 = support of h_i: to clients that do not own i, and to all with
``fedgat_send_p: false``).

Client side (:class:`MatrixStore`). With b_1, b_2 from the current parameters (eq. 14)
``D_i = Σ_s b_1(s) M_1i(s) + b_2(s) M_2i(s) = Σ_j x_ij U_j``, and because the U_j are idempotent
and annihilate each other ``D_i^n = Σ_j x_ij^n U_j`` (n ≥ 1), so (eq. 12)
``K_1iᵀ D_i^n K_2i = Σ_j x_ij^n h_jᵀ = E_i^(n)ᵀ`` and ``K_1iᵀ D_i^n K_1i = F_i^(n)``. The client
runs the row-vector recurrence ``t_0 = K_1iᵀ``, ``t_{n+1} = t_n D_i`` (power basis, Σ q_n t_n) or
the Chebyshev recurrence on D_i / R, and corrects the n = 0 term: K_1iᵀ = K_1iᵀP_i + K_1iᵀ(I−P_i),
and D_i kills (I−P_i), so the second part only picks up ê(0); subtracting
``ê(0)·½K_1iᵀK_2i`` and ``ê(0)·½K_1iᵀK_1i`` (K_1iᵀ(I−P_i)K_2i = Σ_j h_jᵀ = ½K_1iᵀK_2i) leaves
exactly ``Σ_j ê(x_ij) h_j`` and ``Σ_j ê(x_ij)`` (notes §5.4: D^0 must be P_i, not I).

Vector FedGAT (Appendix F, :func:`vector_message` / :class:`VectorStore`) is the cheaper variant
the paper warns may leak: binary u_j with disjoint one-entry supports and masks; see docs/fedgat.md
for why it discloses every neighbour's features to the receiving client.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fedgl.models.poly_attention import PolyAttention, PolyGATConv

SQRT2 = math.sqrt(2.0)
INDEX_BYTES = 8


def node_generator(seed: int, node: int) -> torch.Generator:
    """The per-node randomness of the obfuscation (basis and r): seeded from the session seed and
    the node id, so that every client needing node i gets the same matrices."""
    ss = np.random.SeedSequence([seed & (2**63 - 1), int(node), 0x6A7])
    return torch.Generator().manual_seed(int(ss.generate_state(1, dtype=np.uint64)[0] >> 1))


def obfuscation_basis(deg: int, gen: torch.Generator, dtype: torch.dtype
                      ) -> tuple[Tensor, Tensor, Tensor]:
    """``(u1, v, w)`` with columns per neighbour: u1 [m, deg], v = u1 + u2/r, w = u1 + r·u2."""
    m = 2 * deg
    q, rr = torch.linalg.qr(torch.randn(m, m, generator=gen, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(rr)).unsqueeze(0)  # Haar-distributed orthogonal matrix
    r = math.exp((torch.rand(1, generator=gen, dtype=torch.float64).item() * 2 - 1) * math.log(4))
    u1, u2 = q[:, :deg], q[:, deg:]
    return u1.to(dtype), (u1 + u2 / r).to(dtype), (u1 + r * u2).to(dtype)


def support(rows: Tensor) -> Tensor:
    """Sorted feature indices that are non-zero in some row."""
    return torch.nonzero(rows.ne(0).any(dim=0)).flatten()


def matrix_parts(node: int, neighbors: Tensor, x: Tensor, seed: int) -> tuple[dict, Tensor]:
    """Node ``node``'s matrices shared by every recipient (K1, K2 and the M2 slices with their
    feature indices) and its projector P. ``neighbors``: Ñ_i (global ids, self included);
    ``x``: the server's feature table (rows by global id)."""
    deg = int(neighbors.numel())
    u1, v, w = obfuscation_basis(deg, node_generator(seed, node), x.dtype)
    h_nbr = x[neighbors]                                    # [deg, d]
    idx2 = support(h_nbr)
    hs = h_nbr[:, idx2]                                     # [deg, S]
    # M2(s) = ½ V diag(h(s)) Wᵀ for every s in idx2
    m2 = 0.5 * torch.matmul(v.unsqueeze(0) * hs.t().unsqueeze(1), w.t())
    common = {"id": int(node), "K1": SQRT2 * u1.sum(1), "K2": SQRT2 * (u1 @ hs), "idx2": idx2,
              "M2": m2}
    return common, 0.5 * v @ w.t()


def matrix_message(common: dict, p: Tensor, h_node: Tensor, owned: bool, send_p: bool) -> dict:
    """The message for one recipient: P (its own node, ``send_p``) or the slices
    M_1i(s) = h_i(s) P_i on the support of h_i."""
    if owned and send_p:
        return {**common, "P": p}
    idx1 = torch.nonzero(h_node).flatten()
    return {**common, "idx1": idx1, "M1": h_node[idx1].view(-1, 1, 1) * p.unsqueeze(0)}


def matrix_message_nbytes(deg: int, s2: int, s1: int, owned: bool, send_p: bool,
                          value_bytes: int) -> int:
    """Bytes of :func:`matrix_message` without building it (memory guard, planning)."""
    m = 2 * deg
    values = m + m * s2 + s2 * m * m
    ids = 1 + s2
    if owned and send_p:
        values += m * m
    else:
        values += s1 * m * m
        ids += s1
    return values * value_bytes + ids * INDEX_BYTES


def paper_scalars(deg: int, d: int) -> int:
    """Scalars per node in the paper's dense accounting (Appendix D): M_1(s), M_2(s) for all
    s = 1..d, K_1 and K_2."""
    m = 2 * deg
    return 2 * d * m * m + m + m * d


def vector_message(node: int, neighbors: Tensor, x: Tensor, seed: int) -> dict:
    """Vector FedGAT (Appendix F, typos fixed as in notes §2.11): g = 2·deg, u_j = e_{π(j)}.

    Masks: with S = π(Ñ_i) and its complement C, ``mask4`` has rows e_k on S and rows [A, 0]
    on C; ``mask1 = [−Y1 A | Y1]``, ``mask2 = [−Y2 A | Y2]`` (columns S | C) so that
    mask_{1,2}·mask4 = 0; ``mask3`` and ``mask5`` vanish on S."""
    deg = int(neighbors.numel())
    g = 2 * deg
    d = x.size(1)
    gen = node_generator(seed, node)
    dt = x.dtype
    perm = torch.randperm(g, generator=gen)
    s_pos, c_pos = perm[:deg], perm[deg:]
    rnd = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64).to(dt)  # noqa: E731
    a = rnd(deg, deg)
    h_nbr = x[neighbors]
    mask4 = torch.zeros(g, g, dtype=dt)
    mask4[s_pos, s_pos] = 1
    mask4[c_pos.unsqueeze(1), s_pos.unsqueeze(0)] = a
    msgs = {}
    for key, own_part in (("M1", x[node].unsqueeze(0).expand(deg, d)), ("M2", h_nbr)):
        y = rnd(d, deg)
        mat = torch.zeros(d, g, dtype=dt)
        mat[:, c_pos] = y
        mat[:, s_pos] = -y @ a + own_part.t()
        msgs[key] = mat
    k1 = torch.zeros(g, d, dtype=dt)
    k1[c_pos] = rnd(deg, d)
    k1[s_pos] = h_nbr
    k3 = torch.zeros(g, dtype=dt)
    k3[c_pos] = rnd(deg)
    k3[s_pos] = 1
    return {"id": int(node), "M1": msgs["M1"], "M2": msgs["M2"], "K1": k1, "K2": mask4, "K3": k3}


def vector_message_nbytes(deg: int, d: int, value_bytes: int) -> int:
    g = 2 * deg
    return (3 * d * g + g * g + g) * value_bytes + INDEX_BYTES


# ---------------------------------------------------------------------------- client side
def _pad_stack(tensors: list[Tensor], length: int, dim: int = 0) -> Tensor:
    """Stack tensors after zero-padding dimension ``dim`` to ``length``."""
    out = []
    for t in tensors:
        pad = length - t.size(dim)
        if pad:
            shape = list(t.shape)
            shape[dim] = pad
            t = torch.cat([t, t.new_zeros(shape)], dim=dim)
        out.append(t)
    return torch.stack(out)


@dataclass
class _MatrixBucket:
    """Nodes with the same m, their slices zero-padded to a common count."""

    rows: Tensor        # [B] client rows
    slices: Tensor      # [B, S, m, m]: M1 slices then M2 slices (zero padding)
    coef_idx: Tensor    # [B, S] index into cat(b1, b2) (d + s for M2 slices)
    p: Tensor           # [B, m, m] P for own nodes sent P (else zeros)
    h_own: Tensor       # [B, d] features of own nodes sent P (else zeros)
    k1: Tensor          # [B, m]
    k2: Tensor          # [B, m, S2]
    idx2: Tensor        # [B, S2]

    def select(self, pos: Tensor) -> _MatrixBucket:
        return _MatrixBucket(*(getattr(self, f)[pos] for f in self.__dataclass_fields__))


def _group_by_size(sizes: list[int], slack: float = 1.25) -> list[list[int]]:
    """Split positions (sorted by size) into groups whose padded size is ≤ slack × actual."""
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    groups: list[list[int]] = []
    total = 0
    for i in order:
        if groups and sizes[i] * (len(groups[-1]) + 1) <= slack * (total + sizes[i]):
            groups[-1].append(i)
            total += sizes[i]
        else:
            groups.append([i])
            total = sizes[i]
    return groups


class MatrixStore:
    """What a Matrix FedGAT client keeps after pre-training: the received matrices, bucketed by
    m = 2·deg and padded, indexed by the client's row of each node."""

    def __init__(self, messages: list[dict], row_of: dict[int, int], own_x: dict[int, Tensor],
                 num_features: int, num_rows: int) -> None:
        self.num_features = num_features
        self.rows = num_rows
        by_m: dict[int, list[dict]] = {}
        for msg in messages:
            by_m.setdefault(int(msg["K1"].numel()), []).append(msg)
        self.buckets: list[_MatrixBucket] = []
        for m, group in sorted(by_m.items()):
            sizes = [_slice_count(g) * m * m for g in group]
            for part in _group_by_size(sizes):
                self.buckets.append(self._pack([group[i] for i in part], m, row_of, own_x))
        self._cache: dict[str, list[_MatrixBucket]] = {}

    def _pack(self, msgs: list[dict], m: int, row_of: dict[int, int],
              own_x: dict[int, Tensor]) -> _MatrixBucket:
        d = self.num_features
        dt = msgs[0]["K1"].dtype
        s_max = max(_slice_count(g) for g in msgs)
        s2_max = max(int(g["idx2"].numel()) for g in msgs)
        slices, coef, ps, hs, k2, idx2 = [], [], [], [], [], []
        for g in msgs:
            parts = [g["M1"], g["M2"]] if "M1" in g else [g["M2"]]
            idx = [g["idx1"], g["idx2"] + d] if "M1" in g else [g["idx2"] + d]
            slices.append(torch.cat(parts))
            coef.append(torch.cat(idx))
            if "P" in g:
                ps.append(g["P"])
                hs.append(own_x[g["id"]].to(dt))
            else:
                ps.append(torch.zeros(m, m, dtype=dt))
                hs.append(torch.zeros(d, dtype=dt))
            k2.append(g["K2"])
            idx2.append(g["idx2"])
        return _MatrixBucket(
            rows=torch.tensor([row_of[g["id"]] for g in msgs]),
            slices=_pad_stack(slices, s_max), coef_idx=_pad_stack(coef, s_max),
            p=torch.stack(ps), h_own=torch.stack(hs), k1=torch.stack([g["K1"] for g in msgs]),
            k2=_pad_stack(k2, s2_max, dim=1), idx2=_pad_stack(idx2, s2_max))

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for b in self.buckets
                   for t in (b.slices, b.p, b.k1, b.k2))

    def _subset(self, rows: Tensor | None) -> tuple[str, list[_MatrixBucket]]:
        if rows is None:
            return "all", self.buckets
        key = f"{rows.numel()}:{hash(tuple(rows.tolist()))}"
        if key not in self._cache:
            keep = torch.zeros(self.rows, dtype=torch.bool)
            keep[rows] = True
            out = []
            for b in self.buckets:
                pos = keep[b.rows].nonzero().flatten()
                if pos.numel():
                    out.append(b.select(pos))
            self._cache = {key: out}  # one subset (the training view) at a time
        return key, self._cache[key]

    def first_layer(self, conv: PolyGATConv, rows: Tensor | None = None) -> Tensor:
        """Layer-1 output (pre-activation) for ``rows`` (all rows if None), shape
        ``[rows, heads·C]`` (or ``[rows, C]`` for an averaging output layer), in row order of
        the store: the result is scattered into a full ``[self.rows, ·]`` tensor."""
        b1, b2 = conv.attention_vectors()
        dt = self.buckets[0].k1.dtype if self.buckets else b1.dtype
        b_cat = torch.cat([b1, b2], dim=1).to(dt)          # [H, 2d]
        poly: PolyAttention = conv.attention
        heads, d = b1.size(0), self.num_features
        _, buckets = self._subset(rows)
        out_rows, aggs = [], []
        for b in buckets:
            n, s = b.coef_idx.shape
            m = b.k1.size(1)
            coef = b_cat[:, b.coef_idx].permute(1, 0, 2)   # [B, H, S]
            dmat = torch.bmm(coef, b.slices.reshape(n, s, m * m))
            dmat = dmat + (b.h_own @ b1.to(dt).t()).unsqueeze(-1) * b.p.reshape(n, 1, m * m)
            dmat = dmat.reshape(n * heads, m, m)
            t = b.k1.unsqueeze(1).expand(n, heads, m).reshape(n * heads, 1, m)
            acc = _poly_rows(t, dmat, poly, conv.basis).reshape(n, heads, m)
            p0 = poly.value_at_zero
            num = torch.bmm(acc, b.k2) - p0 * 0.5 * torch.bmm(b.k1.unsqueeze(1), b.k2)
            den = (acc * b.k1.unsqueeze(1)).sum(-1) - p0 * 0.5 * (b.k1 * b.k1).sum(-1,
                                                                                keepdim=True)
            dense = num.new_zeros(n, heads, d)
            dense.scatter_add_(2, b.idx2.unsqueeze(1).expand(n, heads, -1), num)
            aggs.append(dense / den.unsqueeze(-1))
            out_rows.append(b.rows)
        return _assemble(conv, out_rows, aggs, self.rows, b1)


def _slice_count(msg: dict) -> int:
    return int(msg["M2"].size(0)) + (int(msg["M1"].size(0)) if "M1" in msg else 0)


def _poly_rows(t0: Tensor, dmat: Tensor, poly: PolyAttention, basis: str) -> Tensor:
    """``Σ_n q_n t0 D^n`` (power) or ``Σ_n c_n t0 T_n(D/R)`` (Chebyshev) for row vectors t0."""
    if basis == "power":
        coeffs = poly.power
        acc = float(coeffs[0]) * t0
        t = t0
        for q in coeffs[1:]:
            t = torch.bmm(t, dmat)
            acc = acc + float(q) * t
        return acc
    scaled = dmat / poly.radius
    coeffs = poly.cheb
    prev, cur = t0, torch.bmm(t0, scaled)
    acc = float(coeffs[0]) * prev + float(coeffs[1]) * cur
    for c in coeffs[2:]:
        prev, cur = cur, 2 * torch.bmm(cur, scaled) - prev
        acc = acc + float(c) * cur
    return acc


def _assemble(conv: PolyGATConv, out_rows: list[Tensor], aggs: list[Tensor], total: int,
              like: Tensor) -> Tensor:
    if not aggs:
        width = conv.heads * conv.out_channels if conv.concat else conv.out_channels
        return like.new_zeros(total, width)
    rows = torch.cat(out_rows)
    agg = torch.cat(aggs).to(like.dtype)
    out = conv.project(agg)
    full = out.new_zeros(total, out.size(1))
    return full.index_copy(0, rows, out)


@dataclass
class _VectorBucket:
    rows: Tensor   # [B]
    m1: Tensor     # [B, d, g]
    m2: Tensor     # [B, d, g]
    k1: Tensor     # [B, g, d]
    mask4: Tensor  # [B, g, g]
    k3: Tensor     # [B, g]

    def select(self, pos: Tensor) -> _VectorBucket:
        return _VectorBucket(*(getattr(self, f)[pos] for f in self.__dataclass_fields__))


class VectorStore:
    """A Vector FedGAT client's received matrices, bucketed by g = 2·deg."""

    def __init__(self, messages: list[dict], row_of: dict[int, int], num_features: int,
                 num_rows: int) -> None:
        self.num_features = num_features
        self.rows = num_rows
        by_g: dict[int, list[dict]] = {}
        for msg in messages:
            by_g.setdefault(int(msg["K3"].numel()), []).append(msg)
        self.buckets = [
            _VectorBucket(torch.tensor([row_of[g["id"]] for g in grp]),
                          *(torch.stack([g[k] for g in grp]) for k in ("M1", "M2", "K1", "K2",
                                                                        "K3")))
            for _, grp in sorted(by_g.items())]
        self._cache: dict[str, list[_VectorBucket]] = {}

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for b in self.buckets
                   for t in (b.m1, b.m2, b.k1, b.mask4, b.k3))

    def first_layer(self, conv: PolyGATConv, rows: Tensor | None = None) -> Tensor:
        b1, b2 = conv.attention_vectors()
        buckets = self.buckets
        if rows is not None:
            key = f"{rows.numel()}:{hash(tuple(rows.tolist()))}"
            if key not in self._cache:
                keep = torch.zeros(self.rows, dtype=torch.bool)
                keep[rows] = True
                self._cache = {key: [b.select(p) for b in self.buckets
                                     if (p := keep[b.rows].nonzero().flatten()).numel()]}
            buckets = self._cache[key]
        out_rows, aggs = [], []
        for b in buckets:
            dt = b.k1.dtype
            # D_i = b1ᵀ M1 + b2ᵀ M2 (row vector per head), R_i = D_i mask4 = Σ_j x_ij u_jᵀ
            dvec = (torch.einsum("hd,bdg->bhg", b1.to(dt), b.m1)
                    + torch.einsum("hd,bdg->bhg", b2.to(dt), b.m2))
            rvec = torch.bmm(dvec, b.mask4)
            # support of the u_j = the non-zero columns of mask4 (n = 0 needs it, see docs)
            supp = b.mask4.ne(0).any(dim=1).unsqueeze(1).to(dt)
            e_hat = conv.attention(rvec, conv.basis) * supp
            num = torch.bmm(e_hat, b.k1)
            den = torch.bmm(e_hat, b.k3.unsqueeze(-1))
            aggs.append(num / den)
            out_rows.append(b.rows)
        return _assemble(conv, out_rows, aggs, self.rows, b1)
