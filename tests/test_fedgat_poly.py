"""FedGAT's polynomial attention: coefficients, the approximation error in p, the exact-GAT
reference, and the algebra the protocol relies on (notes/fedgat.md §2.2-2.4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch_geometric.nn import GATConv

from fedgl.algorithms.fedgat.protocol import obfuscation_basis
from fedgl.models.gat import GAT, add_self_loops
from fedgl.models.poly_attention import PolyAttention, PolyGATConv
from tests.helpers import random_graph

# max |ê - exp(LeakyReLU_0.2)| on [-2, 2] (notes §3.3 table: 9.8e-2, 5.5e-2, 3.0e-2)
NOTES_ERRORS = {4: 9.8e-2, 8: 5.5e-2, 16: 3.0e-2}


@pytest.mark.parametrize("p", [4, 8, 16])
def test_score_error_matches_the_notes_table(p):
    err = PolyAttention(p, 2.0).max_error()
    assert err == pytest.approx(NOTES_ERRORS[p], rel=0.05)


def test_power_series_and_chebyshev_forms_are_the_same_polynomial():
    poly = PolyAttention(16, 2.0)
    x = torch.linspace(-2, 2, 401, dtype=torch.float64)
    assert torch.allclose(poly(x, "power"), poly(x, "chebyshev"), atol=1e-12)
    # q_n are the power coefficients of Σ c_n T_n(x / R)
    ref = np.polynomial.chebyshev.chebval(x.numpy() / 2.0, poly.cheb)
    assert np.allclose(np.polynomial.polynomial.polyval(x.numpy(), poly.power), ref, atol=1e-12)
    assert poly.value_at_zero == pytest.approx(float(ref[200]), abs=1e-12)


def test_power_series_gradient_is_the_polynomials_derivative():
    """The power basis has a hand-written backward (Horner on n·q_n): check it against finite
    differences and against autograd through the Chebyshev (Clenshaw) form."""
    poly = PolyAttention(16, 2.0)
    x = torch.linspace(-2, 2, 57, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda z: poly(z, "power"), (x,))
    (g_power,) = torch.autograd.grad(poly(x, "power").sum(), x)
    (g_cheb,) = torch.autograd.grad(poly(x, "chebyshev").sum(), x)
    assert torch.allclose(g_power, g_cheb, atol=1e-10)


def test_coefficient_methods_agree_and_are_positive_on_the_interval():
    errs = {m: PolyAttention(16, 2.0, method=m).max_error()
            for m in ("projection", "interpolation", "lstsq")}
    assert all(e < 4e-2 for e in errs.values()), errs
    for p in (4, 8, 16):
        assert PolyAttention(p, 2.0).min_value() > 0.5  # exp(ψ(-2)) = e^-0.4 ≈ 0.67


def test_smooth_psi_is_much_easier_to_approximate():
    assert PolyAttention(16, 2.0, psi="smooth").max_error() < 1e-4


def _conv_pair(p, in_dim=6, heads=3, out=4, seed=0):
    torch.manual_seed(seed)
    exact = GATConv(in_dim, out, heads=heads, add_self_loops=False).double()
    torch.manual_seed(seed)
    poly = PolyGATConv(in_dim, out, heads, attention=PolyAttention(p, 2.0), cap=False).double()
    assert all(torch.equal(a, b) for a, b in zip(exact.state_dict().values(),
                                                 poly.state_dict().values(), strict=True))
    return exact, poly


def _graph64(seed=0):
    g = random_graph(nodes=80, seed=seed)
    x = g.x.double()
    x = x / x.norm(dim=1, keepdim=True)
    return x, add_self_loops(g.edge_index, g.num_nodes)


def _attention_error(p):
    """Max |α̂ - α| and max layer-output difference vs exact GAT, with |x_ij| kept in [-2, 2]."""
    x, ei = _graph64()
    exact, poly = _conv_pair(p, in_dim=x.size(1))
    with torch.no_grad():
        b1, b2 = poly.attention_vectors()
        scale = 1.8 / float((b1.norm(dim=1) + b2.norm(dim=1)).max())
        for conv in (exact, poly):
            conv.att_src.mul_(scale)
            conv.att_dst.mul_(scale)
        out_exact, (_, alpha) = exact(x, ei, return_attention_weights=True)
        xs = poly.scores(x, ei)
        assert float(xs.abs().max()) <= 2.0
        e_hat = poly.attention(xs)
        den = torch.zeros(x.size(0), e_hat.size(1), dtype=x.dtype).index_add_(0, ei[1], e_hat)
        alpha_hat = e_hat / den[ei[1]]
        return float((alpha_hat - alpha).abs().max()), float((poly(x, ei) - out_exact).abs().max())


def test_approximated_layer_approaches_exact_gat_as_p_grows(capsys):
    errors = {p: _attention_error(p) for p in (4, 8, 16)}
    with capsys.disabled():
        print("\nFedGAT layer vs exact GAT (max |Δα|, max |Δout|):",
              {p: (f"{a:.2e}", f"{o:.2e}") for p, (a, o) in errors.items()})
    att = [errors[p][0] for p in (4, 8, 16)]
    out = [errors[p][1] for p in (4, 8, 16)]
    assert att[0] > att[1] > att[2] and out[0] > out[1] > out[2]
    assert att[2] < 1e-2 and out[2] < 1e-2


def test_cap_keeps_scores_in_the_interval():
    x, ei = _graph64(2)
    _, poly = _conv_pair(16, in_dim=x.size(1))
    poly.cap = True
    with torch.no_grad():
        poly.att_src.mul_(50)
        poly.att_dst.mul_(50)
        assert float(poly.scores(x, ei).abs().max()) <= 2.0 + 1e-12


def test_gat_model_with_exact_first_layer_is_pyg_gat():
    x, ei = _graph64(3)
    torch.manual_seed(0)
    model = GAT(x.size(1), 4, 3, layers=2, heads=2).double().eval()
    h = torch.nn.functional.elu(model.convs[0](x, ei))
    ref = torch.log_softmax(model.convs[1](h, ei), -1)
    assert torch.allclose(model(x, ei), ref)
    assert not model.convs[1].concat and model.convs[0].concat


# --------------------------------------------------------------------- protocol algebra
def test_obfuscation_matrices_are_idempotent_and_annihilate_each_other():
    deg = 5
    u1, v, w = obfuscation_basis(deg, torch.Generator().manual_seed(0), torch.float64)
    us = [0.5 * torch.outer(v[:, j], w[:, j]) for j in range(deg)]
    for j in range(deg):
        assert torch.allclose(us[j] @ us[j], us[j], atol=1e-12)
        for k in range(deg):
            if k != j:
                assert torch.allclose(us[j] @ us[k], torch.zeros(2 * deg, 2 * deg, dtype=torch.float64),
                                          atol=1e-12)
    k1 = math.sqrt(2) * u1.sum(1)
    for j in range(deg):
        assert float(k1 @ us[j] @ k1) == pytest.approx(1.0, abs=1e-12)


def test_n_zero_term_needs_the_projector_not_the_identity():
    """Notes §5.4: with D^0 = I the n = 0 terms come out doubled."""
    deg, d = 4, 3
    gen = torch.Generator().manual_seed(1)
    u1, v, w = obfuscation_basis(deg, gen, torch.float64)
    h = torch.randn(deg, d, generator=gen, dtype=torch.float64)
    p = 0.5 * v @ w.t()
    k1, k2 = math.sqrt(2) * u1.sum(1), math.sqrt(2) * u1 @ h
    assert torch.allclose(k1 @ p @ k2, h.sum(0))
    assert torch.allclose(k1 @ k2, 2 * h.sum(0))
    assert float(k1 @ p @ k1) == pytest.approx(deg)
    assert float(k1 @ k1) == pytest.approx(2 * deg)
