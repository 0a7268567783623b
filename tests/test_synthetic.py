"""The large-graph generator: structure, degree law, class signal, seeding and the disk cache."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedgl.data.datasets import load_dataset
from fedgl.data.synthetic import (
    ARRAYS,
    PRESETS,
    CdfIndex,
    SyntheticSpec,
    edge_homophily,
    generate,
    load_synthetic,
    load_synthetic_arrays,
    parse_synthetic,
    tail_exponent,
)
from fedgl.errors import DataError

SMALL = "synthetic:20000,100000,32,10"


@pytest.fixture(scope="module")
def small_graph(tmp_path_factory):
    return load_synthetic(SMALL, seed=0, cache_dir=tmp_path_factory.mktemp("syn"))


def test_presets_have_the_ogb_sizes():
    assert parse_synthetic("synthetic:arxiv") == PRESETS["arxiv"]
    a, p = PRESETS["arxiv"], PRESETS["products"]
    assert (a.nodes, a.edges, a.features, a.classes) == (169_343, 1_166_243, 128, 40)
    assert (p.nodes, p.edges, p.features, p.classes) == (2_449_029, 61_859_140, 100, 47)
    spec = parse_synthetic("synthetic:1000,5000,8,4")
    assert (spec.nodes, spec.edges, spec.features, spec.classes) == (1000, 5000, 8, 4)


@pytest.mark.parametrize("name", ["synthetic:huge", "synthetic:10,20", "synthetic:10,40,3,2",
                                  "synthetic:100,50,4,200"])
def test_bad_names_are_data_errors(name):
    with pytest.raises(DataError, match="synthetic"):
        parse_synthetic(name)


def test_structure_exact_edge_count_simple_symmetric(small_graph):
    g = small_graph
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (20_000, 100_000, 32, 10)
    src, dst = g.edge_index
    assert bool((src != dst).all())
    key = dst * g.num_nodes + src
    assert torch.unique(key).numel() == key.numel()  # no repeated pair
    assert bool((key[1:] > key[:-1]).all())  # sorted by (dst, src) like clean_edge_index
    rev = torch.sort(src * g.num_nodes + dst).values
    assert torch.equal(rev, key)  # every edge in both directions
    assert g.x.dtype == torch.float32
    assert set(torch.unique(g.y).tolist()) == set(range(10))
    masks = torch.stack([g.train_mask, g.val_mask, g.test_mask]).sum(0)
    assert bool((masks == 1).all())  # the split partitions the nodes
    assert abs(float(g.train_mask.float().mean()) - 0.537) < 0.01


def test_arrays_are_compact():
    arrays = generate(parse_synthetic("synthetic:3000,12000,8,5"), seed=1)
    assert arrays["indices"].dtype == np.int32 and arrays["x"].dtype == np.float32
    assert arrays["y"].dtype == np.int16 and arrays["split"].dtype == np.int8
    assert arrays["indptr"][-1] == 2 * 12_000


def test_degrees_follow_the_requested_power_law(small_graph):
    deg = small_graph.degrees().numpy()
    # Pareto propensities with γ = 2.5 give a degree tail P(k) ∝ k^{-2.5} above the Poisson bulk.
    for k_min in (20, 40):
        assert abs(tail_exponent(deg, k_min) - 2.5) < 0.25
    steeper = load_synthetic("synthetic:20000,100000,8,4", cache=False, degree_exponent=3.2)
    assert abs(tail_exponent(steeper.degrees().numpy(), 20) - 3.2) < 0.35
    assert deg.max() > 20 * deg.mean()  # hubs, unlike an ordinary SBM


def test_homophily_matches_the_block_model(small_graph):
    # expected edge homophily h + (1 - h) Σ_c ρ_c² (ρ_c: θ-mass of class c ~ its node share)
    y = small_graph.y
    rho = torch.bincount(y).double() / y.numel()
    expected = 0.7 + 0.3 * float((rho ** 2).sum())
    assert abs(edge_homophily(small_graph) - expected) < 0.02


def _normalised_adjacency(g) -> torch.Tensor:
    n = g.num_nodes
    loops = torch.arange(n)
    ei = torch.cat([g.edge_index, torch.stack([loops, loops])], 1)
    inv = (g.degrees() + 1).float().pow(-0.5)
    return torch.sparse_coo_tensor(ei, inv[ei[0]] * inv[ei[1]], (n, n),
                                   check_invariants=True).coalesce()


def _train(forward, params, g, epochs=60) -> float:
    opt = torch.optim.Adam(params, lr=0.02, weight_decay=5e-4)
    for _ in range(epochs):
        opt.zero_grad()
        F.cross_entropy(forward(True)[g.train_mask], g.y[g.train_mask]).backward()
        opt.step()
    with torch.no_grad():
        return float((forward(False).argmax(-1) == g.y)[g.test_mask].float().mean())


def test_gcn_clearly_beats_mlp(small_graph):
    """The class signal is learnable and the graph carries much of it, as on the real graphs."""
    g = small_graph
    torch.manual_seed(0)
    adj = _normalised_adjacency(g)
    ax = adj @ g.x  # the first layer's aggregation does not change during training
    w1, w2 = torch.nn.Linear(32, 32), torch.nn.Linear(32, 10)
    params = [*w1.parameters(), *w2.parameters()]

    def gcn(train):
        return adj @ w2(F.dropout(torch.relu(w1(ax)), 0.5, train))

    gcn_acc = _train(gcn, params, g)
    torch.manual_seed(0)
    m1, m2 = torch.nn.Linear(32, 32), torch.nn.Linear(32, 10)

    def mlp(train):
        return m2(F.dropout(torch.relu(m1(g.x)), 0.5, train))

    mlp_acc = _train(mlp, [*m1.parameters(), *m2.parameters()], g)
    assert mlp_acc > 0.2  # above chance (0.1): the features carry the class
    assert gcn_acc > mlp_acc + 0.2


def test_seeded_and_deterministic():
    spec = parse_synthetic("synthetic:2000,8000,4,3")
    a, b, c = generate(spec, 3), generate(spec, 3), generate(spec, 4)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["indices"], c["indices"])


def test_same_graph_as_before_the_guide_table():
    """The guide-table draws (CdfIndex) replaced binary searches without changing one array:
    this digest is the graph the binary-search generator made (so caches stay valid)."""
    a = generate(parse_synthetic("synthetic:3000,15000,4,5"), 7)
    h = hashlib.sha256()
    for k in ARRAYS:
        h.update(a[k].tobytes())
    assert h.hexdigest() == "91e334f3481ef7a596555cf36eb4f78bfa123579b73851ee7b18095c6c21f6f8"


@pytest.mark.parametrize("n", [1, 2, 7, 1000])
def test_cdf_index_is_the_binary_search(n):
    rng = np.random.default_rng(n)
    weights = (1.0 - rng.random(n)) ** -2.0           # heavy-tailed, like the propensities
    weights[rng.random(n) < 0.2] = 1e-300 if n > 2 else 1.0   # near-empty buckets too
    cum = np.cumsum(weights)
    v = np.concatenate([rng.random(5000) * cum[-1], cum[:-1], np.nextafter(cum[:-1], 0),
                        [0.0, np.nextafter(cum[-1], 0)]])
    want = np.minimum(np.searchsorted(cum, v, "right"), n - 1)
    assert np.array_equal(CdfIndex(cum).find(v), want)


def test_cache_roundtrip_and_checksum(tmp_path):
    spec = SyntheticSpec(3000, 12000, 8, 5, name="t")
    first = load_synthetic_arrays(spec, 0, cache_dir=tmp_path)
    folder = tmp_path / spec.key(0)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["seed"] == 0 and set(meta["sha256"]) == set(first)
    again = load_synthetic_arrays(spec, 0, cache_dir=tmp_path)
    assert all(np.array_equal(first[k], again[k]) for k in first)
    # a damaged cache fails its checksum and is regenerated, identically
    arr = np.load(folder / "x.npy")
    arr[0, 0] += 1
    np.save(folder / "x.npy", arr)
    with pytest.warns(UserWarning, match="checksum"):
        fixed = load_synthetic_arrays(spec, 0, cache_dir=tmp_path)
    assert np.array_equal(fixed["x"], first["x"])
    assert json.loads((folder / "meta.json").read_text())["sha256"] == meta["sha256"]
    assert spec.key(1) != spec.key(0)


def test_load_dataset_uses_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    g = load_dataset("synthetic:1500,6000,6,3", "/nonexistent-data-root", seed=2)
    assert g.num_nodes == 1500 and g.num_edges == 6000
    assert len(list((tmp_path / "fedgl" / "synthetic").iterdir())) == 1


def test_config_accepts_the_new_dataset_names_and_runs_one(tmp_path, monkeypatch):
    import fedgl
    from fedgl.config import Config
    from fedgl.errors import ConfigError

    for name in ("synthetic:arxiv", "synthetic:products", "synthetic:1000,5000,8,4",
                 "ogbn-arxiv", "ogbn-products", "ogbn-papers100M", "reddit"):
        Config.from_dict({"dataset": name})
    for bad in ("synthetic:", "synthetic:big", "synthetic:1,2,3"):
        with pytest.raises(ConfigError, match="synthetic"):
            Config.from_dict({"dataset": bad})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    result = fedgl.run(algorithm="fedgcn", dataset="synthetic:3000,15000,8,4", clients=4,
                       hops=2, rounds=3, progress=False)
    assert result.repeats[0].partition["edges"] == 15_000
