"""Node partitioners: which client owns which node.

:func:`dirichlet_partition` follows the FedGCN code's rule (DESIGN.md): for every class draw client
shares ``p ~ Dir(β·1_K)``, zero the share of clients that already hold at least N/K nodes,
renormalise, and split the class's shuffled nodes by ``p``; redraw everything until every client
holds at least ``min_size`` nodes. Small β gives label-skewed (non-i.i.d.) clients; β → ∞ gives
near-uniform label shares.

:func:`metis_partition` cuts the graph into ``K`` parts of balanced node count with few
cross-client edges (Karypis & Kumar 1998, through pymetis; seeded).
:func:`random_partition` assigns every node to a client uniformly at random and independently
(the random partition of Swift-FedGNN's appendix); :func:`iid_partition` is its equal-size form.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
import torch

from fedgl import progress
from fedgl._optional import require
from fedgl.data.graph import GraphData
from fedgl.errors import DataError

MAX_REDRAWS = 1000


@dataclass
class Partition:
    """``owner[i]`` is the client that owns node ``i``; ``num_clients`` clients in all."""

    owner: np.ndarray
    num_clients: int

    def nodes_of(self, client: int) -> np.ndarray:
        return np.flatnonzero(self.owner == client)

    def sizes(self) -> list[int]:
        return np.bincount(self.owner, minlength=self.num_clients).tolist()

    def label_counts(self, y: torch.Tensor | np.ndarray, num_classes: int) -> list[list[int]]:
        """Per client, the number of owned nodes of each class."""
        yn = np.asarray(y)
        table = np.zeros((self.num_clients, num_classes), dtype=np.int64)
        np.add.at(table, (self.owner, yn), 1)
        return table.tolist()

    def cross_client_edges(self, edge_index: torch.Tensor) -> int:
        """Number of undirected edges whose endpoints belong to different clients."""
        ei = np.asarray(edge_index)
        owner = self.owner.astype(np.int16 if self.num_clients < 2**15 else np.int32)
        step, cut = 1 << 23, 0   # in chunks: no edge-sized temporaries
        for a in range(0, ei.shape[1], step):
            cut += int(np.count_nonzero(owner[ei[0, a:a + step]] != owner[ei[1, a:a + step]]))
        return cut // 2

    def stats(self, graph: GraphData) -> dict:
        """Summary recorded in every result: sizes, label histograms, split counts, cut edges."""
        owner = torch.from_numpy(self.owner)
        return {
            "num_clients": self.num_clients,
            "nodes": self.sizes(),
            "labels": self.label_counts(graph.y, graph.num_classes),
            "train_nodes": torch.bincount(owner[graph.train_mask],
                                          minlength=self.num_clients).tolist(),
            "test_nodes": torch.bincount(owner[graph.test_mask],
                                         minlength=self.num_clients).tolist(),
            "cross_client_edges": self.cross_client_edges(graph.edge_index),
            "edges": graph.num_edges,
        }


def dirichlet_partition(labels: torch.Tensor | np.ndarray, num_clients: int, beta: float, *,
                        seed: int = 0, min_size: int = 10) -> Partition:
    """Label-skewed split with FedGCN's balancing and minimum-size rule (see module docstring).

    One draw is vectorised over clients (the classes stay sequential: the cap depends on what the
    earlier classes gave). A request that cannot succeed ends in a :class:`DataError` at once
    (fewer nodes than ``num_clients * min_size``) or after a few draws: when the draws so far
    leave on average ``λ`` clients short of ``min_size``, the chance that one draw leaves none
    short is about ``exp(-λ)`` (the number of short clients per draw is close to Poisson:
    measured on the arxiv-sized labels with 10,000 clients, mean 11.1, variance 10.5), and the
    redrawing stops once all remaining draws together would succeed with an estimated chance
    below 1 % (see :func:`_hopeless`)."""
    y = np.asarray(labels)
    n = len(y)
    _check_feasible(n, num_clients, min_size)
    if beta <= 0:
        raise DataError(f"beta must be > 0 (got {beta})")
    rng = np.random.default_rng(seed)
    # the nodes of each class in increasing id order (what np.flatnonzero(y == c) gives), once
    order = np.argsort(y, kind="stable")
    classes, starts = np.unique(y[order], return_index=True)
    members = np.split(order, starts[1:])
    cap = n / num_clients
    alpha = np.full(num_clients, beta)
    clients = np.arange(num_clients)
    short_total = 0
    for draw in range(1, MAX_REDRAWS + 1):
        owner = np.empty(n, dtype=np.int64)
        counts = np.zeros(num_clients, dtype=np.int64)
        for nodes in members:
            idx = rng.permutation(nodes)
            p = rng.dirichlet(alpha)
            p = p * (counts < cap)
            total = p.sum()
            p = p / total if total > 0 else np.full(num_clients, 1.0 / num_clients)
            cuts = (np.cumsum(p) * len(idx)).astype(np.int64)[:-1]
            # np.split(idx, cuts) clamps every cut into [previous cut, len(idx)]
            bounds = np.minimum(np.maximum.accumulate(np.concatenate(([0], cuts))), len(idx))
            sizes = np.diff(np.concatenate((bounds, [len(idx)])))
            owner[idx] = np.repeat(clients, sizes)
            counts += sizes
        if counts.min() >= min_size:
            return Partition(owner, num_clients)
        short_total += int((counts < min_size).sum())
        if _hopeless(short_total, draw):
            raise DataError(
                f"could not split {n} nodes into {num_clients} clients with at least "
                f"{min_size} nodes each (Dirichlet, β={beta:g}): each draw left "
                f"{short_total / draw:.1f} clients short on average ({draw} draws), so the "
                f"remaining draws would succeed with a chance under 1%; use fewer --clients, a "
                "larger --beta, a smaller --min-client-size, or --partition iid")
    raise DataError(f"could not split {n} nodes into {num_clients} clients with at least "
                    f"{min_size} nodes each after {MAX_REDRAWS} draws; use fewer --clients, a "
                    "larger --beta, or a smaller --min-client-size")


def _hopeless(short_total: int, draws: int, *, min_draws: int = 10,
              chance: float = 1e-2) -> bool:
    """Whether to stop redrawing: after ``min_draws`` failed draws that left ``short_total``
    clients short in all, the mean ``λ`` estimates the expected number of short clients per
    draw; the remaining draws succeed with a chance of about ``(MAX_REDRAWS - draws) *
    exp(-λ)``. Stop when that falls below ``chance``."""
    if draws < min_draws:
        return False
    lam = short_total / draws
    return (MAX_REDRAWS - draws) * math.exp(-lam) < chance


def iid_partition(num_nodes: int, num_clients: int, *, seed: int = 0,
                  min_size: int = 1) -> Partition:
    """Uniformly random split into near-equal parts."""
    _check_feasible(num_nodes, num_clients, min_size)
    rng = np.random.default_rng(seed)
    owner = np.empty(num_nodes, dtype=np.int64)
    owner[rng.permutation(num_nodes)] = np.arange(num_nodes) % num_clients
    return Partition(owner, num_clients)


def powerlaw_partition(num_nodes: int, num_clients: int, *, exponent: float = 2.0, seed: int = 0,
                       min_size: int = 1) -> Partition:
    """Client sizes with a power-law tail (cross-device federations: few large parties, many
    small ones): every client gets ``min_size`` nodes, the rest is split multinomially with
    weights ``w_k ~ Pareto`` (density ∝ w^{-exponent} on [1, ∞)); nodes are assigned uniformly
    at random (no label skew)."""
    _check_feasible(num_nodes, num_clients, min_size)
    if exponent <= 1:
        raise DataError(f"power-law exponent must be > 1 (got {exponent})")
    rng = np.random.default_rng(seed)
    w = (1.0 - rng.random(num_clients)) ** (-1.0 / (exponent - 1.0))
    sizes = min_size + rng.multinomial(num_nodes - num_clients * min_size, w / w.sum())
    owner = np.empty(num_nodes, dtype=np.int64)
    owner[rng.permutation(num_nodes)] = np.repeat(np.arange(num_clients), sizes)
    return Partition(owner, num_clients)


def random_partition(num_nodes: int, num_clients: int, *, seed: int = 0,
                     min_size: int = 1) -> Partition:
    """Every node to a uniformly random client, independently; redrawn until every client holds
    at least ``min_size`` nodes."""
    _check_feasible(num_nodes, num_clients, min_size)
    # salted: an unsalted default_rng(seed).integers(0, K, n) is exactly the class draw of the
    # SBM generator with the same seed and K classes, which made owner == label
    rng = np.random.default_rng([seed, 0x7A4D0])
    for _ in range(MAX_REDRAWS):
        owner = rng.integers(0, num_clients, size=num_nodes, dtype=np.int64)
        if np.bincount(owner, minlength=num_clients).min() >= min_size:
            return Partition(owner, num_clients)
    raise DataError(f"random partition: some client got fewer than {min_size} nodes in "
                    f"{MAX_REDRAWS} draws; use fewer --clients or a smaller --min-client-size")


def metis_partition(edge_index: torch.Tensor | np.ndarray, num_nodes: int, num_clients: int, *,
                    seed: int = 0, imbalance: float = 0.03, min_size: int = 1,
                    train_mask: torch.Tensor | np.ndarray | None = None,
                    max_degree: int = 0) -> Partition:
    """METIS k-way partition of the undirected graph ``edge_index`` (both directions listed).

    Balanced node counts (each part at most ``(1 + imbalance)`` times the mean, METIS's
    ``ufactor``). Deterministic for a given ``seed``.

    ``max_degree`` = k > 0 partitions a sparsified graph instead (:func:`sparsify_degree`),
    for graphs whose METIS run does not fit in memory: METIS with pymetis's 64-bit indices
    needs about 100 bytes per directed edge (measured on the arxiv-sized graph), 12 GB for the
    products-sized one.

    With ``train_mask`` the training nodes are balanced as well, by
    :func:`balance_marked_nodes` after METIS (pymetis 2025.2's multi-constraint input does not
    balance a second constraint: measured, see docs/decisions.md)."""
    pymetis = require("pymetis", feature="--partition metis")

    _check_feasible(num_nodes, num_clients, min_size)
    if num_clients == 1:
        return Partition(np.zeros(num_nodes, dtype=np.int64), 1)
    ei = np.asarray(edge_index, dtype=np.int64)  # a view of an int64 tensor, not a copy
    xadj = np.zeros(num_nodes + 1, dtype=np.int64)
    if _sorted_by_destination(ei):
        # fedgl's graphs list edges sorted by (destination, source) and symmetric, so the rows
        # by destination are METIS's adjacency lists as they are: no sort, no copy (products:
        # this saves about 3 GB of the 124M-entry edge list)
        row, adjacent = ei[1], ei[0]
    else:
        order = np.lexsort((ei[1], ei[0]))
        row, adjacent = ei[0][order], ei[1][order]
        del order
    if max_degree > 0:
        keep = sparsify_degree(adjacent, row, num_nodes, max_degree, seed)
        adjacent, row = adjacent[keep], row[keep]
        del keep
    np.cumsum(np.bincount(row, minlength=num_nodes), out=xadj[1:])
    del row
    opts = pymetis.Options(seed=int(seed) % (2**31 - 1), ufactor=max(1, round(imbalance * 1000)))
    with progress.phase(f"METIS partition into {num_clients} parts"):
        result = pymetis.part_graph(num_clients, pymetis.CSRAdjacency(xadj, adjacent),
                                    options=opts, recursive=False)
    owner = np.asarray(result.vertex_part, dtype=np.int64)
    if train_mask is not None:
        owner = balance_marked_nodes(owner, ei, np.asarray(train_mask, dtype=bool), num_clients)
    sizes = np.bincount(owner, minlength=num_clients)
    if sizes.min() < min_size:
        raise DataError(f"METIS left a client with {int(sizes.min())} nodes (< {min_size}); use "
                        "fewer --clients or a smaller --min-client-size")
    return Partition(owner, num_clients)


def sparsify_degree(src: np.ndarray, dst: np.ndarray, num_nodes: int, k: int, seed: int = 0,
                    chunk: int = 1 << 24) -> np.ndarray:
    """Which edges of a symmetric edge list to keep so that every node keeps about ``k`` of its
    edges (at least ``min(k, degree)`` in expectation, at most about ``2k``), symmetrically.

    Every undirected edge {u, v} gets one uniform number ``r`` from a seeded hash of (min, max),
    so both directions share it, and is kept when ``r < max(k / deg(u), k / deg(v))``: node u
    keeps each of its edges with probability at least ``k / deg(u)``. The rule is a function of
    the edge, so the kept set stays symmetric, and it runs in fixed-size chunks (no sort)."""
    deg = np.bincount(dst, minlength=num_nodes).astype(np.float64)
    rate = np.minimum(1.0, k / np.maximum(deg, 1.0))
    keep = np.empty(len(src), dtype=bool)
    mult, salt = np.uint64(0x9E3779B97F4A7C15), np.uint64((seed * 0x2545F491 + 0x632BE5AB) % 2**63)
    for a in range(0, len(src), chunk):
        s, d = src[a:a + chunk], dst[a:a + chunk]
        lo, hi = np.minimum(s, d).astype(np.uint64), np.maximum(s, d).astype(np.uint64)
        h = (lo * np.uint64(num_nodes) + hi) * mult + salt
        h ^= h >> np.uint64(31)
        h *= mult
        h ^= h >> np.uint64(29)
        r = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        keep[a:a + chunk] = r < np.maximum(rate[s], rate[d])
    return keep


def _sorted_by_destination(ei: np.ndarray) -> bool:
    """Whether the columns of ``ei`` are ordered by (destination, source), strictly (no
    duplicate edges), checked in chunks so that no edge-sized temporary is made."""
    n = ei.shape[1]
    step = 1 << 24
    for a in range(0, max(n - 1, 0), step):
        b = min(n, a + step + 1)
        d, s = ei[1, a:b], ei[0, a:b]
        if not bool(np.all((d[1:] > d[:-1]) | ((d[1:] == d[:-1]) & (s[1:] > s[:-1])))):
            return False
    return True


def balance_marked_nodes(owner: np.ndarray, edge_index: np.ndarray, marked: np.ndarray,
                         num_clients: int, max_passes: int = 10_000) -> np.ndarray:
    """Even out the marked (e.g. training) nodes across parts without changing part sizes.

    While the fullest part p holds at least two marked nodes more than the emptiest part q, move
    ``m = ⌊(c_p - c_q) / 2⌋`` marked nodes p -> q and ``m`` unmarked nodes q -> p, each chosen by
    edge-cut gain (neighbours in the destination minus neighbours at home). Afterwards every part
    holds ``⌊T/K⌋`` or ``⌈T/K⌉`` marked nodes when enough unmarked nodes exist to swap."""
    owner = owner.copy()
    src, dst = edge_index[0], edge_index[1]

    def pick(cands: np.ndarray, home: int, dest: int, m: int) -> np.ndarray:
        toward = np.bincount(src[owner[dst] == dest], minlength=len(owner))[cands]
        away = np.bincount(src[owner[dst] == home], minlength=len(owner))[cands]
        return cands[np.argsort(-(toward - away), kind="stable")[:m]]

    for _ in range(max_passes):
        counts = np.bincount(owner[marked], minlength=num_clients)
        p, q = int(np.argmax(counts)), int(np.argmin(counts))
        m = (int(counts[p]) - int(counts[q])) // 2
        unmarked_q = np.flatnonzero((owner == q) & ~marked)
        m = min(m, len(unmarked_q))
        if m <= 0:
            break
        go = pick(np.flatnonzero((owner == p) & marked), p, q, m)
        back = pick(unmarked_q, q, p, m)
        owner[go], owner[back] = q, p
    return owner


PARTITION_METHODS = ("dirichlet", "iid", "metis", "metis-train", "random", "powerlaw", "louvain",
                     "p-split")


def partition(graph: GraphData, num_clients: int, *, method: str = "dirichlet",
              beta: float = 1.0, seed: int = 0, min_size: int = 10, p: float = 0.5,
              metis_max_degree: int = 0) -> Partition:
    """Split ``graph``'s nodes across ``num_clients`` clients: ``dirichlet``, ``iid``,
    ``random``, ``metis`` (balanced node counts, few cut edges), ``metis-train`` (METIS, then
    the training nodes evened out across clients), ``powerlaw`` (power-law client sizes),
    ``louvain`` or ``p-split`` (McMahan's ``p``). ``metis_max_degree`` > 0: METIS runs on a
    degree-capped sparsification (:func:`metis_partition`'s ``max_degree``)."""
    _check_arguments(graph, num_clients, min_size)
    if method == "louvain":
        return louvain_partition(graph.edge_index, graph.num_nodes, num_clients, seed=seed,
                                 min_size=min_size)
    if method == "p-split":
        return p_split_partition(graph.y, num_clients, p, seed=seed, min_size=min_size)
    if method == "dirichlet":
        return dirichlet_partition(graph.y, num_clients, beta, seed=seed, min_size=min_size)
    if method == "iid":
        return iid_partition(graph.num_nodes, num_clients, seed=seed, min_size=min_size)
    if method == "powerlaw":
        return powerlaw_partition(graph.num_nodes, num_clients, seed=seed, min_size=min_size)
    if method == "random":
        return random_partition(graph.num_nodes, num_clients, seed=seed, min_size=min_size)
    if method in ("metis", "metis-train"):
        train = graph.train_mask if method == "metis-train" else None
        return metis_partition(graph.edge_index, graph.num_nodes, num_clients, seed=seed,
                               min_size=min_size, train_mask=train,
                               max_degree=metis_max_degree)
    raise DataError(f"unknown partition method '{method}'; use one of "
                    f"{', '.join(PARTITION_METHODS)}")


def _check_arguments(graph: object, num_clients: object, min_size: object) -> None:
    """Wrong argument types are user errors with one line, not a TypeError deep inside."""
    if not isinstance(graph, GraphData):
        raise DataError(f"partition needs a fedgl.GraphData (got {type(graph).__name__}); load "
                        "one with fedgl.load_dataset or fedgl.from_pyg")
    for name, value in (("num_clients", num_clients), ("min_size", min_size)):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise DataError(f"{name} must be an int (got {value!r}); pass e.g. {name}=3")


def _check_feasible(n: int, num_clients: int, min_size: int) -> None:
    if num_clients < 1:
        raise DataError(f"clients must be >= 1 (got {num_clients})")
    if num_clients > n:
        raise DataError(f"clients ({num_clients}) exceeds the graph's {n} nodes; use at most "
                        f"{n} clients")
    if num_clients * min_size > n:
        fix = (f"use at most {n // min_size} clients or a smaller --min-client-size"
               if n // min_size >= 1 else f"use --min-client-size {n // num_clients} or less")
        raise DataError(f"{num_clients} clients x min_client_size {min_size} exceeds the graph's "
                        f"{n} nodes, so some client would be (nearly) empty; {fix}")


def louvain_partition(edge_index: torch.Tensor | np.ndarray, num_nodes: int, num_clients: int,
                      *, seed: int = 0, min_size: int = 1) -> Partition:
    """Louvain communities (networkx's ``louvain_communities``, seeded), packed onto clients.

    Communities are assigned largest first to the client that holds the fewest nodes so far (the
    OpenFGL rule), so a client is a union of whole communities. Communities never straddle
    clients, so the cut is the Louvain cut; if there are fewer communities than clients, the
    largest is halved (by node id order within it) until there are enough."""
    import networkx as nx

    _check_feasible(num_nodes, num_clients, min_size)
    ei = np.asarray(edge_index)
    g = nx.Graph()
    g.add_nodes_from(range(num_nodes))
    g.add_edges_from(zip(ei[0].tolist(), ei[1].tolist(), strict=True))
    with progress.phase("Louvain communities"):
        comms = [sorted(c) for c in nx.community.louvain_communities(g, seed=seed)]
    while len(comms) < num_clients:
        comms.sort(key=len, reverse=True)
        big = comms.pop(0)
        comms += [big[: len(big) // 2], big[len(big) // 2:]]
    comms.sort(key=lambda c: (-len(c), c[0]))
    owner = np.empty(num_nodes, dtype=np.int64)
    load = np.zeros(num_clients, dtype=np.int64)
    for c in comms:
        k = int(np.argmin(load))
        owner[c] = k
        load[k] += len(c)
    if load.min() < min_size:
        raise DataError(f"Louvain packing left a client with {load.min()} nodes (< "
                        f"min_client_size {min_size}); use fewer --clients or a smaller "
                        "--min-client-size")
    return Partition(owner, num_clients)


def p_split_partition(labels: torch.Tensor | np.ndarray, num_clients: int, p: float, *,
                      seed: int = 0, min_size: int = 1) -> Partition:
    """McMahan et al.'s label skew as the FedGCN paper states it (§5): client k has one dominant
    class ``c_k = k mod C`` and class shares ``p_k(c) = 1 - p + p/C`` for ``c = c_k``, ``p/C``
    otherwise (p = 1: i.i.d.; p = 0: one class per client).

    Each class's shuffled nodes are split across clients in proportion to ``p_k(c)``; a class
    that no client weights (p = 0 with fewer clients than classes) is split evenly."""
    y = np.asarray(labels)
    n = len(y)
    _check_feasible(n, num_clients, min_size)
    if not 0.0 <= p <= 1.0:
        raise DataError(f"p must be in [0, 1] (got {p}); 1 is i.i.d., 0 one class per client")
    classes = np.unique(y)
    num_classes = len(classes)
    rng = np.random.default_rng(seed)
    dominant = np.arange(num_clients) % num_classes
    owner = np.empty(n, dtype=np.int64)
    for ci, c in enumerate(classes):
        idx = rng.permutation(np.flatnonzero(y == c))
        share = np.where(dominant == ci, 1.0 - p + p / num_classes, p / num_classes)
        share = share / share.sum() if share.sum() > 0 else np.full(num_clients, 1 / num_clients)
        cuts = np.round(np.cumsum(share) * len(idx)).astype(np.int64)[:-1]
        for client, part in enumerate(np.split(idx, cuts)):
            owner[part] = client
    sizes = np.bincount(owner, minlength=num_clients)
    if sizes.min() < min_size:
        raise DataError(f"p-split left a client with {sizes.min()} nodes (< min_client_size "
                        f"{min_size}); use fewer --clients, a larger --mcmahan-p or a smaller "
                        "--min-client-size")
    return Partition(owner, num_clients)
