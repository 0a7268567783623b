"""Differential privacy: calibration, clipping, the noise actually added, ε → ∞, and the
parameters recorded in the result."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fedgl
from fedgl.privacy.dp import (
    GaussianMechanism,
    _delta_of_sigma,
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    clip_rows,
)
from tests.helpers import fedgcn_federation, random_graph, random_partition


@pytest.mark.parametrize(("eps", "delta"), [(0.1, 1e-5), (0.5, 1e-6), (1.0, 1e-5), (4.0, 1e-3)])
def test_analytic_sigma_is_tight_and_beats_the_classic_bound(eps, delta):
    sigma = analytic_gaussian_sigma(eps, delta, 2.0)
    assert _delta_of_sigma(sigma, eps, 2.0) <= delta * (1 + 1e-9)
    assert _delta_of_sigma(sigma * 0.99, eps, 2.0) > delta  # (nearly) the smallest such σ
    if eps < 1:
        assert sigma < classic_gaussian_sigma(eps, delta, 2.0)
    # σ scales linearly with the sensitivity.
    assert math.isclose(analytic_gaussian_sigma(eps, delta, 4.0), 2 * sigma, rel_tol=1e-6)


def test_noise_has_the_calibrated_scale():
    mech = GaussianMechanism(epsilon=1.0, delta=1e-5, clip=0.5)
    noisy = mech.add_noise(torch.zeros(400, 500, dtype=torch.float64),
                           np.random.default_rng(0))
    # 200k draws: the sample std is within 1% of σ (its own std is σ/sqrt(2n) ≈ 0.16%).
    assert abs(float(noisy.std()) / mech.sigma - 1) < 0.01
    assert abs(float(noisy.mean())) < 5 * mech.sigma / math.sqrt(noisy.numel())


def test_clipping_bounds_every_node_norm():
    x = torch.randn(50, 7) * torch.linspace(0.01, 10, 50).unsqueeze(1)
    clipped = clip_rows(x, 1.5)
    assert float(clipped.norm(dim=1).max()) <= 1.5 + 1e-6
    small = x.norm(dim=1) <= 1.5
    assert torch.equal(clipped[small], x[small])


def _released_minus_clipped(server, clip):
    client = server.runtime.local_client(0)
    touched, _, released, _ = client._release()
    return released - client._sums_of(clip_rows(client.data.x, clip), touched)


def test_client_release_carries_the_noise_and_repeats_it():
    graph = random_graph(nodes=150, seed=12)
    part = random_partition(graph.num_nodes, 3, seed=12)
    server = fedgcn_federation(graph, part, hops=2, dp_epsilon=0.8, dp_delta=1e-5, dp_clip=2.0)
    noise = _released_minus_clipped(server, 2.0)
    sigma = GaussianMechanism(0.8, 1e-5, 2.0).sigma
    # The noise comes from OS randomness, so the bound is statistical: the sample std of n
    # Gaussian draws has relative standard error 1/sqrt(2n); six of them fail with p ~ 1e-9,
    # while a σ off by 20% (or a missing √2) fails for the thousand-odd draws here (bound 0.13).
    n = noise.numel()
    assert n > 1000
    assert abs(float(noise.std()) / sigma - 1) < 6 / (2 * n) ** 0.5
    # The noise is drawn once: a restarted protocol resends the same release.
    assert torch.equal(noise, _released_minus_clipped(server, 2.0))


def test_huge_epsilon_recovers_the_exact_sums():
    graph = random_graph(nodes=90, seed=13)
    part = random_partition(graph.num_nodes, 3, seed=13)
    exact = fedgcn_federation(graph, part, hops=2)
    exact.pretrain()
    big = float(graph.x.norm(dim=1).max()) + 1  # clipping inactive
    dp = fedgcn_federation(graph, part, hops=2, dp_epsilon=1e12, dp_clip=big)  # σ ≈ Δ/√(2ε)
    dp.pretrain()
    for k in exact.runtime.client_ids:
        a = exact.runtime.local_client(k).received_sums
        b = dp.runtime.local_client(k).received_sums
        assert torch.allclose(a, b, atol=1e-4, rtol=0)


def test_dp_parameters_are_recorded_in_the_result():
    graph = random_graph(nodes=90, seed=14)
    res = fedgl.run(graph=graph, clients=3, rounds=2, progress=False, min_client_size=5,
                    dp_epsilon=1.0, dp_delta=1e-5, dp_clip=1.0)
    dp = res.repeats[0].extra["privacy"]["dp"]
    assert dp["epsilon"] == 1.0 and dp["delta"] == 1e-5 and dp["clip"] == 1.0
    assert dp["sensitivity"] == 2.0
    assert math.isclose(dp["sigma"], analytic_gaussian_sigma(1.0, 1e-5, 2.0))
    assert "analytic" in dp["mechanism"]
    assert res.config["dp_epsilon"] == 1.0
