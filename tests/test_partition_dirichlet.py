"""The vectorised Dirichlet split: the same partitions as the original per-client loop, bit for
bit, and infeasible requests refused at once or after a few draws."""

from __future__ import annotations

import numpy as np
import pytest

from fedgl.data import partition as partition_module
from fedgl.data.partition import dirichlet_partition
from fedgl.data.sbm import stochastic_block_model
from fedgl.errors import DataError


def reference_dirichlet(y: np.ndarray, num_clients: int, beta: float, seed: int,
                        min_size: int, max_redraws: int = 1000) -> np.ndarray | None:
    """The original implementation (a Python loop over classes and clients per draw), kept
    here verbatim as the reference; None where it gave up."""
    n = len(y)
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    cap = n / num_clients
    for _ in range(max_redraws):
        owner = np.empty(n, dtype=np.int64)
        counts = np.zeros(num_clients, dtype=np.int64)
        for c in classes:
            idx = rng.permutation(np.flatnonzero(y == c))
            p = rng.dirichlet(np.full(num_clients, beta))
            p = p * (counts < cap)
            total = p.sum()
            p = p / total if total > 0 else np.full(num_clients, 1.0 / num_clients)
            cuts = (np.cumsum(p) * len(idx)).astype(np.int64)[:-1]
            for client, part in enumerate(np.split(idx, cuts)):
                owner[part] = client
                counts[client] += len(part)
        if counts.min() >= min_size:
            return owner
    return None


def _skewed_labels(n: int, classes: int, seed: int) -> np.ndarray:
    p = np.arange(1, classes + 1, dtype=float) ** -1.0
    return np.random.default_rng(seed).choice(classes, size=n, p=p / p.sum())


CASES = [
    # (labels, clients, beta, seed, min_size)
    ("uniform-7", 3000, 7, 10, 1.0, 0, 10),
    ("uniform-7", 3000, 7, 10, 0.1, 3, 40),
    ("skewed-40", 5000, 40, 50, 1.0, 1, 10),
    ("skewed-40", 5000, 40, 200, 100.0, 2, 5),
    ("skewed-40", 5000, 40, 3, 10000.0, 4, 10),
    ("skewed-3", 400, 3, 7, 0.5, 5, 10),
]


@pytest.mark.parametrize("name,n,classes,clients,beta,seed,min_size", CASES)
def test_same_partition_as_the_reference_loop(name, n, classes, clients, beta, seed, min_size):
    y = (np.random.default_rng(seed).integers(0, classes, size=n) if name.startswith("uniform")
         else _skewed_labels(n, classes, seed))
    expected = reference_dirichlet(y, clients, beta, seed, min_size)
    assert expected is not None
    got = dirichlet_partition(y, clients, beta, seed=seed, min_size=min_size)
    np.testing.assert_array_equal(got.owner, expected)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_same_partition_on_an_sbm_graph_with_redraws(seed):
    """Many clients for the nodes, so the old code redrew several times: every draw must
    consume the generator exactly as before."""
    graph = stochastic_block_model(nodes=600, classes=5, seed=seed)
    y = graph.y.numpy()
    expected = reference_dirichlet(y, 30, 1.0, seed, 10)
    assert expected is not None
    got = dirichlet_partition(graph.y, 30, 1.0, seed=seed, min_size=10)
    np.testing.assert_array_equal(got.owner, expected)


def test_redraws_are_exercised():
    """The SBM cases above need more than two draws (else it would not test the
    generator's state across draws)."""
    draws = []
    for s in range(3):
        y = stochastic_block_model(nodes=600, classes=5, seed=s).y.numpy()
        draws.append(reference_dirichlet(y, 30, 1.0, s, 10, max_redraws=2) is None)
    assert all(draws)


def test_too_few_nodes_is_refused_before_any_draw():
    with pytest.raises(DataError, match="exceeds the graph's 99 nodes"):
        dirichlet_partition(np.zeros(99, dtype=np.int64), 10, 1.0, min_size=10)


def test_a_hopeless_request_fails_after_a_few_draws(monkeypatch):
    """10,000 clients of at least 10 nodes from 169,343 nodes and 40 classes at β = 1: feasible
    by count, but every draw leaves many clients short; it must stop long before 1,000 draws."""
    seen: list[int] = []
    rule = partition_module._hopeless

    def counting(short_total: int, draws: int) -> bool:
        seen.append(draws)
        return rule(short_total, draws)

    monkeypatch.setattr(partition_module, "_hopeless", counting)
    y = _skewed_labels(169_343, 40, 0)
    with pytest.raises(DataError, match="could not split.*each draw left .* clients short.*fewer --clients"):
        dirichlet_partition(y, 10_000, 1.0, seed=0, min_size=10)
    assert seen and max(seen) == 10


def test_hopeless_rule():
    # 12 short clients per draw: 990 * e^-12 = 0.006 < 1 %
    assert partition_module._hopeless(120, 10)
    # 10 per draw: 990 * e^-10 = 0.045, worth going on
    assert not partition_module._hopeless(100, 10)
    # one short client per draw: a later draw may well succeed
    assert not partition_module._hopeless(10, 10)
    # never before ten draws
    assert not partition_module._hopeless(10_000, 9)
