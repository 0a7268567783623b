"""Large synthetic graphs: a degree-corrected stochastic block model with power-law degrees.

``synthetic:arxiv`` and ``synthetic:products`` have the sizes of ogbn-arxiv (169,343 nodes,
1,166,243 edges, 128 features, 40 classes) and ogbn-products (2,449,029 nodes, 61,859,140 edges,
100 features, 47 classes); ``synthetic:N,E,d,C`` any size. What is mimicked and what is not:
``docs/scale.md``.

The model, with N nodes, E undirected edges, C classes and d features:

- class ``y_i ~ π`` with ``π_c ∝ (c+1)^{-s}`` (skewed class sizes, ``s = class_skew``);
- degree propensity ``θ_i ~ Pareto(γ - 1)`` on ``[1, ∞)`` (density ∝ θ^{-γ}), capped so that no
  expected degree exceeds ``max_degree``; node i's expected degree is ``2E θ_i / Σθ``;
- every edge draws an endpoint i with probability ``θ_i / Σθ`` and, with probability h (the
  ``homophily``), the other endpoint j from i's class with probability ``θ_j / Σ_{y_k = y_i} θ_k``,
  else j from all nodes with probability ``θ_j / Σθ``. This is a DC-SBM whose block matrix is
  ``h·diag + (1-h)·global``; the expected edge homophily is ``h + (1-h) Σ_c ρ_c²`` with
  ``ρ_c`` the θ-mass of class c. Self-loops and repeated pairs are dropped and the deficit is
  drawn again until exactly E distinct pairs exist;
- features ``x_i = μ_{y_i} + ε_i`` with ``μ_c ~ N(0, (σ_s² / 2d) I)`` and ``ε_i ~ N(0, I)``,
  so two class means are ``σ_s`` noise units apart on average (``signal``): weak per node, but a
  GCN that averages a homophilous neighbourhood sees it much more clearly than an MLP.

Edges are generated in chunks (``chunk`` pairs at a time) and stored as CSR with int32 column
indices when N fits; features are float32 and generated in row chunks. The generated arrays are
cached as ``.npy`` files under ``<cache>/synthetic/<name>/`` with a SHA-256 per file in
``meta.json``; a second load verifies the checksums and reads the files (seconds). A cache that
fails its checksum is regenerated.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from fedgl import progress
from fedgl.data.cache import cache_root, cached_arrays
from fedgl.data.graph import GraphData, csr_edge_index, symmetric_csr
from fedgl.errors import DataError

FORMAT_VERSION = 1
ARRAYS = ("indptr", "indices", "x", "y", "split")


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of the generator (see the module docstring for the model)."""

    nodes: int
    edges: int  # undirected, distinct, no self-loops
    features: int
    classes: int
    homophily: float = 0.7
    degree_exponent: float = 2.5  # γ: P(θ) ∝ θ^{-γ}
    class_skew: float = 0.5
    signal: float = 1.5  # mean distance between two class means, in noise standard deviations
    max_degree: int = 0  # cap on expected degrees; 0: min(N - 1, 1000 × mean degree)
    split: tuple[float, float, float] = (0.537, 0.176, 0.287)  # train / val / test fractions
    name: str = "synthetic"

    def validate(self) -> None:
        n, e = self.nodes, self.edges
        if n < 2 or e < 1 or self.features < 1 or self.classes < 2:
            raise DataError(f"synthetic graph needs N >= 2, E >= 1, d >= 1, C >= 2 (got N={n}, "
                            f"E={e}, d={self.features}, C={self.classes}); e.g. "
                            "synthetic:20000,100000,32,10")
        if self.classes > n:
            raise DataError(f"synthetic graph: C={self.classes} classes exceed N={n} nodes; use "
                            "fewer classes")
        if e > 0.25 * n * (n - 1) / 2:
            raise DataError(f"synthetic graph: E={e} edges is too dense for N={n} nodes (at most "
                            f"a quarter of all pairs, {int(0.25 * n * (n - 1) / 2)}); lower E")
        if not 0 <= self.homophily <= 1 or self.degree_exponent <= 2:
            raise DataError("synthetic graph: homophily must be in [0, 1] and the degree exponent "
                            f"> 2 (got {self.homophily}, {self.degree_exponent})")
        if abs(sum(self.split) - 1) > 1e-6 or min(self.split) < 0:
            raise DataError(f"synthetic graph: split fractions must be >= 0 and sum to 1 "
                            f"(got {self.split})")

    def key(self, seed: int) -> str:
        """Folder name of the cache: every parameter that changes the graph, and the seed."""
        blob = json.dumps({**asdict(self), "seed": seed, "v": FORMAT_VERSION}, sort_keys=True)
        digest = hashlib.sha256(blob.encode()).hexdigest()[:12]
        return f"{self.name}-{self.nodes}n-{self.edges}e-seed{seed}-{digest}"


PRESETS = {
    # ogbn-arxiv: citation graph, edge homophily ~0.65, time-based split 54/18/28 %.
    "arxiv": SyntheticSpec(169_343, 1_166_243, 128, 40, homophily=0.63,
                           name="synthetic-arxiv"),
    # ogbn-products: co-purchase graph, edge homophily ~0.81, sales-rank split 8/1.6/90 %.
    "products": SyntheticSpec(2_449_029, 61_859_140, 100, 47, homophily=0.79,
                              split=(0.08, 0.016, 0.904), name="synthetic-products"),
}


def parse_synthetic(name: str) -> SyntheticSpec:
    """``synthetic:arxiv``, ``synthetic:products`` or ``synthetic:N,E,d,C`` -> its spec."""
    arg = name.split(":", 1)[1].strip().lower() if ":" in name else ""
    if arg in PRESETS:
        spec = PRESETS[arg]
    else:
        parts = [p.strip() for p in arg.split(",")]
        try:
            n, e, d, c = (int(float(p)) for p in parts)
        except ValueError:
            raise DataError(f"unknown synthetic dataset '{name}'; use synthetic:arxiv, "
                            "synthetic:products or synthetic:N,E,d,C (four integers, e.g. "
                            "synthetic:20000,100000,32,10)") from None
        spec = SyntheticSpec(n, e, d, c, name=f"synthetic-{n}-{e}-{d}-{c}")
    spec.validate()
    return spec


# ---------------------------------------------------------------------- generation
def _labels(spec: SyntheticSpec, rng: np.random.Generator) -> np.ndarray:
    p = (np.arange(1, spec.classes + 1, dtype=np.float64)) ** -spec.class_skew
    y = rng.choice(spec.classes, size=spec.nodes, p=p / p.sum())
    y[rng.choice(spec.nodes, size=spec.classes, replace=False)] = np.arange(spec.classes)
    return y.astype(np.int16 if spec.classes < 2**15 else np.int32)


def _propensities(spec: SyntheticSpec, rng: np.random.Generator) -> np.ndarray:
    """θ ~ Pareto with density ∝ θ^{-γ} on [1, ∞), capped at the expected-degree bound."""
    theta = (1.0 - rng.random(spec.nodes)) ** (-1.0 / (spec.degree_exponent - 1.0))
    mean_deg = 2.0 * spec.edges / spec.nodes
    cap_deg = spec.max_degree or min(spec.nodes - 1, int(1000 * mean_deg))
    for _ in range(3):  # the cap changes Σθ a little; two passes settle it
        theta = np.minimum(theta, cap_deg * theta.sum() / (2.0 * spec.edges))
    return theta


class CdfIndex:
    """``min(searchsorted(cum, v, "right"), len(cum) - 1)`` for many ``v`` at once, the same
    indices, by a guide table (Chen & Asau's cutpoint method): ``guide[j]`` is the first index
    whose cumulative weight exceeds ``j · width`` for ``2·len(cum)`` equal buckets of the total,
    so a draw starts at most about two nodes' weights before its answer and steps forward.
    A binary search over millions of cumulative weights costs ~21 scattered reads per draw;
    this costs a few (the generator's edge draws were half of its time)."""

    def __init__(self, cum: np.ndarray) -> None:
        self.cum = cum
        self.last = len(cum) - 1
        buckets = 2 * len(cum)
        self.width = float(cum[-1]) / buckets
        starts = np.arange(buckets, dtype=np.float64) * self.width
        dtype = np.int32 if len(cum) < 2**31 else np.int64
        self.guide = np.searchsorted(cum, starts, "right").astype(dtype)  # sorted: one pass

    def find(self, v: np.ndarray) -> np.ndarray:
        """The indices of ``v`` (float64, in ``[0, cum[-1])``), as the binary search gives."""
        # one bucket back: (j - 1)·width < v whatever the rounding, so guide[j - 1] <= answer
        j = (v / self.width).astype(np.int64)
        j -= 1
        np.clip(j, 0, len(self.guide) - 1, out=j)
        idx = self.guide[j].astype(np.int64)
        del j
        np.minimum(idx, self.last, out=idx)
        pending = np.flatnonzero(self.cum[idx] <= v)
        while pending.size:
            at = idx[pending]
            at += 1
            idx[pending] = at
            more = at < self.last
            more &= self.cum[np.minimum(at, self.last)] <= v[pending]
            pending = pending[more]
        return idx


class _EdgeSampler:
    """Draws endpoint pairs of the DC-SBM (module docstring) in vectorised chunks."""

    def __init__(self, y: np.ndarray, theta: np.ndarray, homophily: float) -> None:
        self.y, self.h = y, homophily
        self.cum = np.cumsum(theta)
        self.order = np.argsort(y, kind="stable")
        self.cum_by_class = np.cumsum(theta[self.order])
        bounds = np.searchsorted(y[self.order], np.arange(int(y.max()) + 2))
        self.lo = np.where(bounds[:-1] > 0, self.cum_by_class[np.maximum(bounds[:-1] - 1, 0)], 0.0)
        self.hi = self.cum_by_class[np.maximum(bounds[1:] - 1, 0)]
        self.nodes = CdfIndex(self.cum)
        self.by_class = CdfIndex(self.cum_by_class)

    def draw(self, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        src = self.nodes.find(rng.random(m) * self.cum[-1])
        dst = self.nodes.find(rng.random(m) * self.cum[-1])
        within = np.flatnonzero(rng.random(m) < self.h)
        c = self.y[src[within]]
        u = self.lo[c] + rng.random(len(within)) * (self.hi[c] - self.lo[c])
        dst[within] = self.order[self.by_class.find(u)]
        return src, dst


def sorted_unique(a: np.ndarray, kind: str | None = None) -> np.ndarray:
    """``np.unique(a)`` by an in-place sort and a neighbour comparison (numpy's own unique is
    many times slower on large int64 arrays here). ``kind="stable"`` (timsort) for an array
    made of sorted runs: it merges them, several times faster than quicksort there."""
    a.sort(kind=kind)
    if len(a) < 2:
        return a
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def _edge_keys(spec: SyntheticSpec, y: np.ndarray, theta: np.ndarray, rng: np.random.Generator,
               chunk: int) -> np.ndarray:
    """Exactly E distinct undirected pairs as sorted keys ``min·N + max`` (int64)."""
    sampler = _EdgeSampler(y, theta, spec.homophily)
    n = spec.nodes
    keys = np.empty(0, dtype=np.int64)
    for _ in range(200):
        deficit = spec.edges - len(keys)
        if deficit <= 0:
            break
        want = int(deficit * 1.1) + 16
        parts = [keys]
        for start in progress.track(range(0, want, chunk), "synthetic graph: edges"):
            src, dst = sampler.draw(min(chunk, want - start), rng)
            lo, hi = np.minimum(src, dst), np.maximum(src, dst)
            ok = lo != hi
            parts.append(sorted_unique(lo[ok].astype(np.int64) * n + hi[ok]))
        keys = sorted_unique(np.concatenate(parts), kind="stable")  # sorted runs: merged
        del parts
    else:
        raise DataError(f"synthetic graph: could not draw {spec.edges} distinct edges among "
                        f"{n} nodes; lower E or raise --homophily's spread")
    extra = len(keys) - spec.edges
    if extra > 0:  # drop a uniformly random surplus, keeping the keys sorted
        keep = np.ones(len(keys), dtype=bool)
        keep[rng.choice(len(keys), size=extra, replace=False)] = False
        keys = keys[keep]
    return keys


def _features(spec: SyntheticSpec, y: np.ndarray, rng: np.random.Generator,
              chunk: int) -> np.ndarray:
    d = spec.features
    means = rng.normal(0.0, spec.signal / np.sqrt(2.0 * d), size=(spec.classes, d)).astype(np.float32)
    x = np.empty((spec.nodes, d), dtype=np.float32)
    rows = max(1, chunk // d)
    for start in progress.track(range(0, spec.nodes, rows), "synthetic graph: features"):
        stop = min(spec.nodes, start + rows)
        x[start:stop] = rng.standard_normal((stop - start, d), dtype=np.float32)
        x[start:stop] += means[y[start:stop]]
    return x


def _split(spec: SyntheticSpec, rng: np.random.Generator) -> np.ndarray:
    """0 = train, 1 = validation, 2 = test, by a seeded random permutation."""
    n = spec.nodes
    perm = rng.permutation(n)
    n_train = int(round(spec.split[0] * n))
    n_val = int(round(spec.split[1] * n))
    split = np.full(n, 2, dtype=np.int8)
    split[perm[:n_train]] = 0
    split[perm[n_train:n_train + n_val]] = 1
    return split


def generate(spec: SyntheticSpec, seed: int = 0, *, chunk: int = 1 << 22) -> dict[str, np.ndarray]:
    """The graph's arrays: ``indptr`` (int64), ``indices`` (int32 when N < 2³¹), ``x`` (float32),
    ``y`` (int16), ``split`` (int8: 0 train, 1 val, 2 test). Seeded and deterministic."""
    spec.validate()
    rng = np.random.default_rng([seed, 0x5CA1E])
    y = _labels(spec, rng)
    theta = _propensities(spec, rng)
    keys = _edge_keys(spec, y, theta, rng, chunk)
    del theta
    indptr, indices = symmetric_csr(keys, spec.nodes)
    del keys
    return {"indptr": indptr, "indices": indices, "x": _features(spec, y, rng, chunk), "y": y,
            "split": _split(spec, rng)}


# ---------------------------------------------------------------------- cache
def load_synthetic_arrays(spec: SyntheticSpec, seed: int = 0, *,
                          cache_dir: str | Path | None = None, cache: bool = True
                          ) -> dict[str, np.ndarray]:
    """The arrays of ``spec`` at ``seed``: read from the cache, or generated (and cached)."""
    folder = cache_root(cache_dir, "synthetic") / spec.key(seed)
    meta = {"spec": asdict(spec), "seed": seed, "version": FORMAT_VERSION,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return cached_arrays(folder, ARRAYS, lambda: generate(spec, seed), meta, cache)


def to_graph_data(arrays: dict[str, np.ndarray], spec: SyntheticSpec) -> GraphData:
    """A :class:`GraphData` of the generated arrays."""
    split = torch.from_numpy(arrays["split"].astype(np.int64))
    return GraphData(name=spec.name, x=torch.from_numpy(np.ascontiguousarray(arrays["x"])),
                     y=torch.from_numpy(arrays["y"].astype(np.int64)),
                     edge_index=csr_edge_index(arrays["indptr"], arrays["indices"]),
                     train_mask=split == 0, val_mask=split == 1, test_mask=split == 2,
                     num_classes=spec.classes)


def load_synthetic(name: str, seed: int = 0, *, cache_dir: str | Path | None = None,
                   cache: bool = True, **overrides) -> GraphData:
    """``synthetic:arxiv|products|N,E,d,C`` as a :class:`GraphData` (cached; see module doc).
    ``overrides`` replace spec fields (e.g. ``homophily=0.8``)."""
    spec = parse_synthetic(name)
    if overrides:
        spec = replace(spec, **overrides)
        spec.validate()
    return to_graph_data(load_synthetic_arrays(spec, seed, cache_dir=cache_dir, cache=cache), spec)


def tail_exponent(degrees: np.ndarray, k_min: int) -> float:
    """Maximum-likelihood (discrete-corrected Hill) estimate of γ in ``P(k) ∝ k^{-γ}`` from the
    degrees ≥ ``k_min``: ``γ̂ = 1 + n / Σ ln(k_i / (k_min - 1/2))``."""
    tail = degrees[degrees >= k_min].astype(np.float64)
    if len(tail) == 0:
        raise ValueError(f"no degree reaches k_min={k_min}")
    return 1.0 + len(tail) / float(np.log(tail / (k_min - 0.5)).sum())


def edge_homophily(graph: GraphData) -> float:
    """Share of edges whose endpoints have the same label."""
    src, dst = graph.edge_index
    return float((graph.y[src] == graph.y[dst]).float().mean()) if src.numel() else float("nan")
