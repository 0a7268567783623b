"""The leakage report: what FedGCN's received sums disclose to clients.

This is an **analysis** computed by the experimenter from the full graph and the partition,
outside the federation (no party computes or receives it). For every client it counts, among the
rows it receives in the pre-training round, how many are made of exactly one remote node's
features: such a row minus the client's own part is ``d̃_j^{-1/2} x_j`` for a single remote node
j, i.e. node j's features up to a positive scale (exactly, for binary features, and exactly in
2-hop when j is the row's node, whose degree the client receives). HE and masking do not change
this (they hide values from the server, not from the receiving client); ``--min-contributors k``
removes rows with 1..k-1 remote nodes; DP noise blurs every row.

Beyond single rows, a client can solve the linear system of everything it received.
Subtracting its own part, received row i gives ``r_i = Σ_{j ∈ Ñ(i), j remote} z_j`` with
``z_j = d̃_j^{-1/2} x_j``: a 0/1 matrix A (rows × remote nodes) applied to the unknown z, the same
for every feature column. ``z_j`` is determined exactly iff the unit vector ``e_j`` lies in the
row space of A, i.e. iff coordinate j vanishes on the null space of A. :func:`recoverable_nodes`
counts these nodes (per connected block of A, by SVD); with the node's degree (2-hop clients
receive the degrees of their neighbours) that is ``x_j`` itself, otherwise ``x_j`` up to a
positive scale. ``--min-contributors k`` only withholds rows with 1..k-1 remote nodes: it stops
the one-row disclosure, not differencing, which this count shows.
"""

from __future__ import annotations

from typing import Any

import torch

from fedgl.config import Config
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition

ANALYSIS_LABEL = ("analysis outside the federation (full graph + partition); "
                  "not a protocol message")
#: a connected block of the received-rows system is solved densely only up to this many entries
#: (rows x remote nodes) and this many on its smaller side; a larger block's nodes are counted
#: as ``remote_nodes_unresolved`` (``remote_nodes_recoverable`` is then a lower bound). An
#: arxiv-sized graph has blocks of ~10^5 x 10^5 (99 GiB dense).
MAX_BLOCK_ENTRIES = 4_000_000
#: a client whose received-rows system has more non-zeros than this (remote entries of its
#: rows) is not solved at all: its remote nodes are all ``remote_nodes_unresolved``. A 2-hop
#: client of the products-sized graph has ~10^8 (the solver's sparse copies alone: ~5 GB).
MAX_SYSTEM_ENTRIES = 20_000_000
MAX_BLOCK_SIDE = 2_000


class _ClosedNeighbourhoods:
    """The pairs (i, j ∈ Ñ(i)) of the whole graph, shared by both counts: ``rows`` and ``cols``
    (int32 where they fit) and the owner of each ``j`` in the smallest integer type, so the
    per-client passes below cost a boolean mask each, not a sort (products-sized graph: 126M
    pairs)."""

    def __init__(self, graph: GraphData, part: Partition) -> None:
        import numpy as np

        n = graph.num_nodes
        index = np.int32 if n < 2**31 else np.int64
        src, dst = graph.edge_index.numpy()
        self.n = n
        self.rows = np.concatenate([np.arange(n, dtype=index), dst.astype(index)])
        self.cols = np.concatenate([np.arange(n, dtype=index), src.astype(index)])
        self.owner = np.asarray(part.owner)
        small = np.int16 if part.num_clients < 2**15 else np.int32
        self.col_owner = self.owner.astype(small)[self.cols]
        self.closed = np.bincount(dst, minlength=n) + 1  # |Ñ(i)| = degree + self-loop

    def own_counts(self, k: int):
        """(mask of pairs whose j client k owns, per row i the number of such j)."""
        import numpy as np

        mine = self.col_owner == k
        return mine, np.bincount(self.rows[mine], minlength=self.n)


def remote_counts(graph: GraphData, part: Partition, hops: int,
                  pairs: _ClosedNeighbourhoods | None = None) -> list[torch.Tensor]:
    """Per client: for each row it receives, the number of remote nodes in the row's sum.

    Row i's sum runs over the closed neighbourhood Ñ(i); client k receives rows V_k (1-hop) or
    V_k ∪ N(V_k) (2-hop), in ascending order of i; a node is remote to k if another client owns
    it."""
    if hops == 0:
        return [torch.zeros(0, dtype=torch.long) for _ in range(part.num_clients)]
    pairs = pairs or _ClosedNeighbourhoods(graph, part)
    out = []
    for k in range(part.num_clients):
        _, counts = pairs.own_counts(k)
        received = pairs.owner == k if hops == 1 else counts > 0
        out.append(torch.from_numpy(pairs.closed[received] - counts[received]).long())
    return out


def recoverable_nodes(graph: GraphData, part: Partition, hops: int,
                      min_contributors: int = 1,
                      pairs: _ClosedNeighbourhoods | None = None) -> list[dict[str, int]]:
    """Per client: remote nodes whose scaled features ``z_j`` are determined exactly by the
    rows it receives (see the module docstring), and how many of those it also knows the
    degree of (so ``x_j`` itself)."""
    import numpy as np
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    n, k_total = graph.num_nodes, part.num_clients
    if hops == 0:
        return [{"remote_nodes_recoverable": 0, "recoverable_with_known_degree": 0,
                 "remote_nodes_unresolved": 0} for _ in range(k_total)]
    pairs = pairs or _ClosedNeighbourhoods(graph, part)
    out = []
    for k in range(k_total):
        own = pairs.owner == k
        mine, counts = pairs.own_counts(k)
        received = own if hops == 1 else counts > 0
        keep = received[pairs.rows] & ~mine
        del mine
        if int(keep.sum()) > MAX_SYSTEM_ENTRIES:  # too large to decide: counted, not guessed
            seen = np.zeros(n, dtype=bool)
            seen[pairs.cols[keep]] = True
            out.append({"remote_nodes_recoverable": 0, "recoverable_with_known_degree": 0,
                        "remote_nodes_unresolved": int(seen.sum())})
            continue
        r, c = pairs.rows[keep].astype(np.int64), pairs.cols[keep].astype(np.int64)
        del keep
        counts = np.bincount(r, minlength=n)
        if min_contributors > 1:
            ok = ~((counts >= 1) & (counts < min_contributors))
            r, c = r[ok[r]], c[ok[r]]
        known_degree = np.zeros(n, dtype=bool)
        if hops >= 2:
            known_degree[received] = True
        out.append(_solve_count(r, c, n, known_degree, sp, connected_components, np))
    return out


def _solve_count(r, c, n, known_degree, sp, connected_components, np) -> dict[str, int]:
    """Nodes j with ``e_j`` in the row space of A: exactly the columns of leverage 1, i.e.
    ``P_jj = 1`` for the projection ``P = A^+ A`` onto the row space. Per connected block,
    from the eigenvectors of the smaller Gram matrix: ``P_jj = Σ_{λ>0} V_jl²`` (``A^T A = VΛV^T``)
    or ``Σ_{λ>0} (A^T u_l)_j² / λ_l`` (``A A^T = UΛU^T``)."""
    if not r.size:
        return {"remote_nodes_recoverable": 0, "recoverable_with_known_degree": 0,
                "remote_nodes_unresolved": 0}
    row_ids, r_idx = np.unique(r, return_inverse=True)
    col_ids, c_idx = np.unique(c, return_inverse=True)
    nr, nc = len(row_ids), len(col_ids)
    a = sp.coo_matrix((np.ones(r.size), (r_idx, c_idx)), shape=(nr, nc)).tocsr()
    a.data[:] = 1.0  # a node appears once per row
    # Peeling: a row with one unknown node left reveals it; known nodes are subtracted out
    # (they do not change which other nodes are determined, as their e_j are in the row space).
    known = np.zeros(nc, dtype=bool)
    while True:
        left = a @ (~known).astype(np.float64)
        single = np.flatnonzero(left == 1)
        if not single.size:
            break
        sub = a[single].multiply((~known).astype(np.float64)).tocoo()
        known[sub.col[sub.data > 0]] = True
    rest = np.flatnonzero(~known)
    a = a[:, rest]
    a = a[np.flatnonzero(np.asarray(a.sum(axis=1)).ravel() > 0)]
    nr, nc_rest = a.shape
    bip = sp.bmat([[None, a], [a.T, None]]).tocsr() if nr else sp.csr_matrix((nc_rest, nc_rest))
    _, label = connected_components(bip, directed=False)
    row_label, col_label = label[:nr], label[nr:]
    leverage = np.zeros(nc_rest)
    unresolved = 0
    for comp in np.unique(col_label):
        cs = np.flatnonzero(col_label == comp)
        rs = np.flatnonzero(row_label == comp)
        if len(rs) * len(cs) > MAX_BLOCK_ENTRIES or min(len(rs), len(cs)) > MAX_BLOCK_SIDE:
            unresolved += len(cs)  # too large to decide densely; counted, not guessed
            continue
        block = torch.from_numpy(a[rs][:, cs].toarray())  # torch: honours the run's threads
        if len(cs) <= len(rs):
            lam, vec = torch.linalg.eigh(block.T @ block)
            keep = lam > 1e-9 * max(float(lam.max()), 1.0)
            leverage[cs] = (vec[:, keep] ** 2).sum(dim=1).numpy()
        else:
            lam, vec = torch.linalg.eigh(block @ block.T)
            keep = lam > 1e-9 * max(float(lam.max()), 1.0)
            leverage[cs] = ((block.T @ vec[:, keep]) ** 2 / lam[keep]).sum(dim=1).numpy()
    found = known.copy()
    found[rest] = leverage > 1.0 - 1e-6
    return {"remote_nodes_recoverable": int(found.sum()),
            "recoverable_with_known_degree": int((found & known_degree[col_ids]).sum()),
            "remote_nodes_unresolved": unresolved}


def leakage_report(graph: GraphData, part: Partition, cfg: Config) -> dict[str, Any]:
    """Per-client counts of received rows by how many remote nodes they aggregate, and of the
    remote nodes whose features the client can reconstruct exactly by linear algebra."""
    m = cfg.min_contributors
    per_client = []
    pairs = _ClosedNeighbourhoods(graph, part) if cfg.hops > 0 else None
    solved = recoverable_nodes(graph, part, cfg.hops, m, pairs)
    for k, remote in enumerate(remote_counts(graph, part, cfg.hops, pairs)):
        single = int((remote == 1).sum())
        suppressed = int(((remote >= 1) & (remote < m)).sum()) if m > 1 else 0
        per_client.append({
            "client": k,
            "received_rows": int(remote.numel()),
            "rows_without_remote_nodes": int((remote == 0).sum()),
            "rows_single_remote_node": single,
            "rows_suppressed_by_min_contributors": suppressed,
            "exact_disclosure_rows": 0 if m > 1 else single,
            **solved[k],
        })
    total = {key: sum(c[key] for c in per_client) for key in per_client[0] if key != "client"} \
        if per_client else {}
    return {"label": ANALYSIS_LABEL, "hops": cfg.hops, "min_contributors": m,
            "note": "exact_disclosure_rows counts delivered rows made of one remote node; "
                    "remote_nodes_recoverable counts remote nodes whose (degree-scaled) features "
                    "the client solves for exactly from all its rows (without DP noise); "
                    "remote_nodes_unresolved counts nodes in blocks too large to decide, for "
                    "which remote_nodes_recoverable is a lower bound",
            "dp_noised": cfg.dp_epsilon is not None,
            "per_client": per_client, "total": total}


def privacy_settings(cfg: Config, server: Any = None) -> dict[str, Any]:
    """The privacy options in force, derived parameters (DP σ, CKKS packing geometry) and what
    the server recorded about the protocol (blocks, ciphertexts, restarts)."""
    out: dict[str, Any] = {"secure_sum": cfg.secure_sum, "encrypt_models": cfg.encrypt_models,
                           "min_contributors": cfg.min_contributors, "dp": None, "he": None}
    if cfg.dp_epsilon is not None:
        from fedgl.privacy.dp import GaussianMechanism, account

        mech = GaussianMechanism(cfg.dp_epsilon, cfg.dp_delta, cfg.dp_clip)
        out["dp"] = mech.describe()
        releases = (getattr(server, "privacy_stats", None) or {}).get("dp_releases", {})
        out["dp"]["accounting"] = account(mech, releases)
    if cfg.secure_sum in ("mask", "robust") or getattr(cfg, "secure_models", False):
        out["secagg"] = {"mode": cfg.secure_sum, "threshold": getattr(cfg, "secagg_threshold", 0)
                         or cfg.clients // 2 + 1 if cfg.secure_sum == "robust" else None,
                         "secure_models": getattr(cfg, "secure_models", False),
                         "identities": "Ed25519 roster made by the driver (experimenter), "
                                       "outside the server"}
    if cfg.secure_sum == "he" or cfg.encrypt_models:
        from fedgl.privacy.he import HEParams

        p = HEParams.from_config(cfg)
        out["he"] = {"scheme": "CKKS (TenSEAL), symmetric encryption with a client-held key",
                     "security": "128-bit classical (HE standard bound on the modulus)",
                     "poly_degree": p.poly_degree, "coeff_bits": list(p.coeff_bits),
                     "scale_bits": p.scale_bits, "pack": p.pack, "slots": p.slots,
                     "pack_scale_bits": p.pack_scale_bits if p.pack > 1 else None,
                     "field_bits": p.field_bits if p.pack > 1 else None,
                     "key_holder": cfg.he_key_holder}
    stats = getattr(server, "privacy_stats", None)
    if stats:
        out["protocol"] = {k: v for k, v in stats.items() if k != "dp_releases"}
    return out


def privacy_extra(graph: GraphData, part: Partition, cfg: Config,
                  server: Any = None, *, leakage: bool = True) -> dict[str, Any]:
    """What a FedGCN repeat records in ``RepeatResult.extra``: ``leakage`` (unless
    ``leakage=False``: the caller runs :func:`leakage_report` itself) and ``privacy``."""
    if cfg.algorithm != "fedgcn":
        return {}
    out = {"privacy": privacy_settings(cfg, server)}
    if leakage:
        out["leakage"] = leakage_report(graph, part, cfg)
    return out
