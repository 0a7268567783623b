"""Polynomial attention: FedGAT's first-layer score (Ambekar et al., eqs. 4-7).

GAT scores an edge j -> i by ``e_ij = exp(ψ(x_ij))`` with ``x_ij = b_1·h_i + b_2·h_j`` and
``b_{1,2} = Wᵀ a_{1,2}`` (eq. 4). FedGAT replaces ``f = exp∘ψ`` by its degree-p Chebyshev
approximation on an interval ``[-R, R]`` (eq. 5), rewritten as a power series
``ê(x) = Σ_n q_n x^n`` (eq. 6). The coefficients are computed once, in float64:

* ``projection`` (default): the truncated Chebyshev series, ``c_n`` by Gauss-Chebyshev quadrature
  of the projection integral (Appendix B) with many nodes;
* ``interpolation``: interpolation at the p+1 Chebyshev points;
* ``lstsq``: least squares on equispaced samples (what the authors' library did).

:class:`PolyGATConv` is PyG's ``GATConv`` (same parameters, same initialisation) with the score
replaced by ``ê``: ``α̂_ij = ê_ij / Σ_k ê_ik``. Its edge-wise forward is FedGAT's *fast* backend;
:meth:`PolyGATConv.attention_vectors` and :meth:`PolyGATConv.project` are what the *protocol*
backend needs (it aggregates raw features with the received matrices, then applies ``W``).

With ``cap=True`` the attention vectors are rescaled per head so that ``‖b_1‖ + ‖b_2‖ ≤ R``:
for features of norm ≤ 1 every ``x_ij`` then lies in the fitted interval, where the polynomial
is accurate and positive (the paper's Assumptions 2-3 made into a guarantee).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from numpy.polynomial import chebyshev as npcheb
from torch import Tensor
from torch_geometric.nn import GATConv
from torch_geometric.utils import scatter

PSI = ("leaky_relu", "smooth")
COEFFICIENT_METHODS = ("projection", "interpolation", "lstsq")
BASES = ("power", "chebyshev")
SLOPE = 0.2


def psi(x: np.ndarray, kind: str = "leaky_relu", slope: float = SLOPE) -> np.ndarray:
    """The pre-exponential activation: LeakyReLU(slope) (standard GAT, the default) or the
    smoothed ``γx + (1-γ)·¼·log(1+e^{4x})`` the authors' library used."""
    if kind == "leaky_relu":
        return np.where(x >= 0, x, slope * x)
    if kind == "smooth":
        return slope * x + (1 - slope) * 0.25 * np.logaddexp(0.0, 4 * x)
    raise ValueError(f"unknown psi {kind!r}; choose one of {', '.join(PSI)}")


def score_function(kind: str = "leaky_relu"):
    """``f(x) = exp(ψ(x))``, the exact GAT score (numpy, float64)."""
    return lambda x: np.exp(psi(np.asarray(x, dtype=np.float64), kind))


def chebyshev_coefficients(f, degree: int, radius: float, method: str = "projection",
                           nodes: int = 8192) -> np.ndarray:
    """Coefficients ``c_0..c_p`` of ``f(R t) ≈ Σ c_n T_n(t)`` on ``t ∈ [-1, 1]`` (float64)."""
    g = lambda t: f(radius * np.asarray(t, dtype=np.float64))  # noqa: E731
    if method == "projection":
        # c_n = (2/π) ∫_0^π g(cos θ) cos(nθ) dθ, c_0 halved; midpoint rule in θ = Gauss-Chebyshev.
        theta = np.pi * (np.arange(nodes) + 0.5) / nodes
        vals = g(np.cos(theta))
        n = np.arange(degree + 1)[:, None]
        c = (2.0 / nodes) * (vals[None, :] * np.cos(n * theta[None, :])).sum(1)
        c[0] /= 2
        return c
    if method == "interpolation":
        return npcheb.chebinterpolate(g, degree)
    if method == "lstsq":
        t = np.linspace(-1.0, 1.0, 500)
        return npcheb.chebfit(t, g(t), degree)
    raise ValueError(f"unknown coefficient method {method!r}; choose one of "
                     f"{', '.join(COEFFICIENT_METHODS)}")


def _horner(z: Tensor, coefficients: np.ndarray) -> Tensor:
    out = torch.full_like(z, float(coefficients[-1]))
    for q in coefficients[-2::-1]:
        out.mul_(z).add_(float(q))
    return out


class _PowerSeries(torch.autograd.Function):
    """``Σ_n q_n zⁿ`` with the analytic derivative ``Σ_n n q_n zⁿ⁻¹`` as its backward."""

    @staticmethod
    def forward(ctx, z: Tensor, power: np.ndarray) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(z)
        ctx.power = power
        return _horner(z, power)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, None]:  # type: ignore[override]
        (z,) = ctx.saved_tensors
        if len(ctx.power) < 2:
            return torch.zeros_like(z), None
        derivative = ctx.power[1:] * np.arange(1, len(ctx.power))
        return grad * _horner(z, derivative), None


@dataclass
class PolyAttention:
    """The degree-p polynomial ``ê(x) ≈ exp(ψ(x))`` on ``[-radius, radius]``.

    ``cheb[n]`` are the Chebyshev coefficients in ``t = x / radius``; ``power[n] = q_n`` are the
    power-series coefficients in ``x`` itself (eq. 6): ``ê(x) = Σ_n q_n x^n``.
    """

    degree: int = 16
    radius: float = 2.0
    psi: str = "leaky_relu"
    method: str = "projection"
    cheb: np.ndarray = field(init=False, repr=False)
    power: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.degree < 1:
            raise ValueError(f"degree must be >= 1 (got {self.degree})")
        if not self.radius > 0:
            raise ValueError(f"radius must be > 0 (got {self.radius})")
        self.cheb = chebyshev_coefficients(score_function(self.psi), self.degree, self.radius,
                                           self.method)
        q_t = npcheb.cheb2poly(self.cheb)
        self.power = q_t / self.radius ** np.arange(len(q_t))

    @property
    def value_at_zero(self) -> float:
        """``ê(0) = q_0``."""
        return float(self.power[0])

    def exact(self, x: Tensor) -> Tensor:
        """``exp(ψ(x))`` in the dtype of ``x``."""
        if self.psi == "leaky_relu":
            return torch.exp(torch.nn.functional.leaky_relu(x, SLOPE))
        return torch.exp(SLOPE * x + (1 - SLOPE) * 0.25 * torch.nn.functional.softplus(4 * x))

    def __call__(self, x: Tensor, basis: str = "power") -> Tensor:
        """``ê(x)``, evaluated in float64 (Horner in the power basis, or Clenshaw in the
        Chebyshev basis: the same polynomial) and returned in the dtype of ``x``."""
        z = x.double()
        if basis == "power":
            # one autograd node: ê by Horner forward, ê' by Horner on the derivative's
            # coefficients backward (2p small kernels, instead of a 2p-node graph)
            out = _PowerSeries.apply(z, self.power)
        elif basis == "chebyshev":
            t = z / self.radius
            b1 = torch.zeros_like(t)
            b2 = torch.zeros_like(t)
            for c in self.cheb[:0:-1]:
                b1, b2 = 2 * t * b1 - b2 + float(c), b1
            out = t * b1 - b2 + float(self.cheb[0])
        else:
            raise ValueError(f"unknown basis {basis!r}; choose one of {', '.join(BASES)}")
        return out.to(x.dtype)

    def max_error(self, samples: int = 20001) -> float:
        """``max |ê(x) - exp(ψ(x))|`` over the interval (float64 grid)."""
        x = torch.linspace(-self.radius, self.radius, samples, dtype=torch.float64)
        return float((self(x) - self.exact(x)).abs().max())

    def min_value(self, samples: int = 20001) -> float:
        x = torch.linspace(-self.radius, self.radius, samples, dtype=torch.float64)
        return float(self(x).min())


class PolyGATConv(GATConv):
    """``GATConv`` whose attention score is the polynomial ``ê`` (FedGAT's first layer).

    Same parameters as ``GATConv`` (``lin.weight`` = W of all heads, ``att_dst`` = a_1,
    ``att_src`` = a_2, ``bias``), so a state dict moves freely between the exact and the
    approximated model. Self-loops must already be in ``edge_index`` (``add_self_loops=False``).
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True,
                 *, attention: PolyAttention, basis: str = "power", cap: bool = True) -> None:
        super().__init__(in_channels, out_channels, heads=heads, concat=concat,
                         add_self_loops=False)
        self.attention = attention
        self.basis = basis
        self.cap = cap

    def _raw_attention_vectors(self) -> tuple[Tensor, Tensor]:
        h, c = self.heads, self.out_channels
        w = self.lin.weight.view(h, c, -1)
        b1 = torch.einsum("hc,hcd->hd", self.att_dst.view(h, c), w)
        b2 = torch.einsum("hc,hcd->hd", self.att_src.view(h, c), w)
        return b1, b2

    def attention_vectors(self) -> tuple[Tensor, Tensor]:
        """``(b_1, b_2)``, each ``[heads, in_channels]``: ``b = Wᵀa`` per head (eq. 4), rescaled
        per head to ``‖b_1‖ + ‖b_2‖ ≤ R`` when ``cap`` is on."""
        b1, b2 = self._raw_attention_vectors()
        if self.cap:
            norm = b1.norm(dim=1) + b2.norm(dim=1)
            scale = torch.clamp(self.attention.radius / norm.clamp_min(1e-30), max=1.0)
            b1, b2 = b1 * scale[:, None], b2 * scale[:, None]
        return b1, b2

    def project(self, agg: Tensor) -> Tensor:
        """Apply W per head to attention-weighted raw-feature sums ``agg [N, heads, d]``
        (eq. 7: W after the aggregation), then merge heads and add the bias."""
        h, c = self.heads, self.out_channels
        out = torch.einsum("nhd,hcd->nhc", agg, self.lin.weight.view(h, c, -1))
        out = out.reshape(-1, h * c) if self.concat else out.mean(dim=1)
        return out + self.bias

    def scores(self, x: Tensor, edge_index: Tensor, xw: Tensor | None = None) -> Tensor:
        """``x_ij`` for every edge (column j -> i) and head: ``[E, heads]``.

        ``b·h = a·(W h)``, so with ``xw = W x`` (``[N, heads, C]``, already needed for the
        messages) the scores cost ``O(N·heads·C)`` instead of two more ``d``-wide products."""
        src, dst = edge_index
        h, c = self.heads, self.out_channels
        if xw is None:
            xw = self.lin(x).view(-1, h, c)
        s1 = (xw * self.att_dst.view(1, h, c)).sum(-1)
        s2 = (xw * self.att_src.view(1, h, c)).sum(-1)
        if self.cap:
            b1, b2 = self._raw_attention_vectors()
            norm = b1.norm(dim=1) + b2.norm(dim=1)
            scale = torch.clamp(self.attention.radius / norm.clamp_min(1e-30), max=1.0)
            s1, s2 = s1 * scale, s2 * scale
        return s1[dst] + s2[src]

    def forward(self, x: Tensor, edge_index: Tensor, *args, **kwargs) -> Tensor:  # type: ignore[override]
        """Edge-wise polynomial attention (the *fast* backend): ``Σ_j α̂_ij W h_j + bias``."""
        h, c = self.heads, self.out_channels
        src, dst = edge_index
        xw = self.lin(x).view(-1, h, c)
        e_hat = self.attention(self.scores(x, edge_index, xw), self.basis)
        denom = scatter(e_hat, dst, dim=0, dim_size=x.size(0), reduce="sum")
        alpha = e_hat / denom[dst]
        msg = xw[src] * alpha.unsqueeze(-1)
        out = scatter(msg, dst, dim=0, dim_size=x.size(0), reduce="sum")
        out = out.reshape(-1, h * c) if self.concat else out.mean(dim=1)
        return out + self.bias

