"""The leakage report: what FedGCN's pre-training sums disclose to clients and the server.

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

Linear algebra over the reals ignores what the values are. With features from a small
alphabet (Cora's and CiteSeer's are 0/1) one row of a few contributors with generic scales is
already enough: :mod:`fedgl.privacy.value_decoding` decodes the released rows value by value
(subset sums over the levels), seeded with what linear algebra found, and
``exact_remote_nodes`` counts the (client, remote node) pairs whose exact features the client
obtains either way. That attack assumes the attacker knows each row's contributors and their
degrees (announced degrees, or a public structure): the experimenter's worst case, so that the
report never counts fewer disclosures than this attack finds.

:func:`server_view` applies the same analyses to what the server reads: every client's partial
sums in plaintext (a row of one contributing node is that node's scaled features), the full
sums of the rows two or more clients touch under ``mask`` and ``robust``, nothing under HE.
Counts are for noiseless sums; with DP (``dp_noised``) the values carry noise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedgl.config import Config
from fedgl.privacy import row_space
from fedgl.privacy.leakage_batches import Batches, available_workers
from fedgl.privacy.value_decoding import MAX_COMBINATIONS, TOLERANCE

if TYPE_CHECKING:   # the report itself needs no torch: its worker process never loads it
    import numpy as np

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
#: the value-level attack decodes a system of at most this many cells (rows or nodes, whichever
#: is more, x features: it holds a few dense arrays of that size); a larger one leaves its
#: nodes ``exact_unresolved``.
MAX_DECODE_CELLS = 8_000_000
#: features of at most this many entries are kept once as a sparse copy for the value-level
#: attack (Cora 3.9M, CiteSeer 12.3M); larger ones are converted system by system
MAX_SPARSE_COPY = 20_000_000


class _ClosedNeighbourhoods:
    """The pairs (i, j ∈ Ñ(i)) of the whole graph, shared by both counts: ``rows`` and ``cols``
    (int32 where they fit) and the owner of each ``j`` in the smallest integer type, so the
    per-client passes below cost a boolean mask each, not a sort (products-sized graph: 126M
    pairs)."""

    def __init__(self, graph: GraphData, part: Partition, least: int = 1) -> None:
        import numpy as np

        n = graph.num_nodes
        index = np.int32 if n < 2**31 else np.int64
        src, dst = _array(graph.edge_index)
        self.n = n
        self.rows = np.concatenate([np.arange(n, dtype=index), dst.astype(index)])
        self.cols = np.concatenate([np.arange(n, dtype=index), src.astype(index)])
        self.owner = np.asarray(part.owner)
        small = np.int16 if part.num_clients < 2**15 else np.int32
        self.col_owner = self.owner.astype(small)[self.cols]
        self.closed = np.bincount(dst, minlength=n) + 1  # |Ñ(i)| = degree + self-loop
        #: which pairs reach the sums (None: all). With ``min_partial_nodes`` = ``least`` > 1 a
        #: client sends its partial sum for another client's node i only where it aggregates at
        #: least ``least`` of its own nodes: the pairs of a partial sum it withholds are not sent.
        self.sent = None
        if least > 1:
            k_total = part.num_clients
            key = self.rows.astype(np.int64) * k_total + self.col_owner.astype(np.int64)
            _, inverse, count = np.unique(key, return_inverse=True, return_counts=True)
            foreign = self.col_owner != self.owner.astype(self.col_owner.dtype)[self.rows]
            self.sent = ~(foreign & (count[inverse.reshape(-1)] < least))

    def own_counts(self, k: int):
        """(mask of pairs whose j client k owns, per row i the number of such j)."""
        import numpy as np

        mine = self.col_owner == k
        return mine, np.bincount(self.rows[mine], minlength=self.n)


def neighbour_rows(cfg: Config) -> bool:
    """True when clients receive the rows of ``V_k ∪ N(V_k)`` (2-hop, and 1-hop in the released
    code's variant), not only their own."""
    return cfg.hops >= 2 or (cfg.hops == 1 and
                             getattr(cfg, "one_hop_variant", "eq33") == "paper-code")


def _array(t: Any) -> np.ndarray:
    """A tensor's values as a NumPy array (no copy on the CPU); an array as it is."""
    import numpy as np

    return t if isinstance(t, np.ndarray) else t.detach().cpu().numpy()


def remote_counts(graph: GraphData, part: Partition, hops: int,
                  pairs: _ClosedNeighbourhoods | None = None, *,
                  neighbour_rows: bool | None = None) -> list[np.ndarray]:
    """Per client: for each row it receives, the number of remote nodes in the row's sum
    (int64).

    Row i's sum runs over the closed neighbourhood Ñ(i); client k receives rows V_k (1-hop) or
    V_k ∪ N(V_k) (2-hop, or ``neighbour_rows``), in ascending order of i; a node is remote to k
    if another client owns it."""
    import numpy as np

    if hops == 0:
        return [np.zeros(0, dtype=np.int64) for _ in range(part.num_clients)]
    neighbour_rows = hops >= 2 if neighbour_rows is None else neighbour_rows
    pairs = pairs or _ClosedNeighbourhoods(graph, part)
    out = []
    for k in range(part.num_clients):
        mine, counts = pairs.own_counts(k)
        received = counts > 0 if neighbour_rows else pairs.owner == k
        if pairs.sent is None:
            remote = pairs.closed - counts
        else:   # the remote pairs that reach the sums (withheld partial sums left out)
            remote = np.bincount(pairs.rows[pairs.sent & ~mine], minlength=pairs.n)
        out.append(remote[received].astype(np.int64))
    return out


def recoverable_nodes(graph: GraphData, part: Partition, hops: int,
                      min_contributors: int = 1,
                      pairs: _ClosedNeighbourhoods | None = None, *,
                      neighbour_rows: bool | None = None,
                      features: _Features | None = None) -> list[dict[str, int]]:
    """Per client: remote nodes whose scaled features ``z_j`` are determined exactly by the
    rows it receives (see the module docstring), and how many of those it also knows the
    degree of (so ``x_j`` itself). With ``features``, also the value-level attack
    (:mod:`fedgl.privacy.value_decoding`) on the same rows: ``exact_remote_nodes`` and
    ``exact_unresolved``."""
    pairs = pairs or (_ClosedNeighbourhoods(graph, part) if hops > 0 else None)
    analysis = _analysis(features, pairs.closed if pairs is not None else None)
    out = _client_rows(graph, part, hops, min_contributors, pairs, neighbour_rows, analysis)
    analysis.run()
    return out


def _client_rows(graph, part, hops, min_contributors, pairs, neighbour_rows, analysis):
    """:func:`recoverable_nodes`' rows, each filled in when ``analysis`` has solved its
    client's system (at the latest by ``analysis.run()``)."""
    import numpy as np

    n, k_total = graph.num_nodes, part.num_clients
    empty = {"remote_nodes_recoverable": 0, "recoverable_with_known_degree": 0,
             "remote_nodes_unresolved": 0}
    if analysis.attack is not None:
        empty.update(exact_remote_nodes=0, exact_unresolved=0, remote_values=0, known_values=0,
                     known_values_share=0.0)
    width = int(graph.x.shape[1]) if len(graph.x.shape) > 1 else 1
    if hops == 0:
        return [dict(empty) for _ in range(k_total)]
    neighbour_rows = hops >= 2 if neighbour_rows is None else neighbour_rows
    out = []
    for k in range(k_total):
        own = pairs.owner == k
        mine, counts = pairs.own_counts(k)
        received = counts > 0 if neighbour_rows else own
        keep = received[pairs.rows] & ~mine
        if pairs.sent is not None:
            keep &= pairs.sent
        del mine
        row = dict(empty)
        out.append(row)
        if int(keep.sum()) > MAX_SYSTEM_ENTRIES:  # too large to decide: counted, not guessed
            seen = np.zeros(n, dtype=bool)
            seen[pairs.cols[keep]] = True
            row["remote_nodes_unresolved"] = int(seen.sum())
            if analysis.attack is not None:
                row["exact_unresolved"] = int(seen.sum())
                row["remote_values"] = int(seen.sum()) * width
            continue
        r, c = pairs.rows[keep].astype(np.int64), pairs.cols[keep].astype(np.int64)
        del keep
        counts = np.bincount(r, minlength=n)
        if min_contributors > 1:
            ok = ~((counts >= 1) & (counts < min_contributors))
            r, c = r[ok[r]], c[ok[r]]
        known_degree = received if neighbour_rows else np.zeros(n, dtype=bool)

        def fill(col_ids, found, undecided, attacked, row=row, known_degree=known_degree):
            row.update(remote_nodes_recoverable=int(found.sum()),
                       recoverable_with_known_degree=int((found & known_degree[col_ids]).sum()),
                       remote_nodes_unresolved=int(undecided.sum()))
            if attacked is not None:
                remote = len(col_ids) * width
                row.update(exact_remote_nodes=attacked[0], exact_unresolved=attacked[1],
                           remote_values=remote, known_values=attacked[2],
                           known_values_share=attacked[2] / remote if remote else 0.0)
        analysis.add(r, c, fill)
    return out


def _analysis(features: _Features | None, closed, workers: int = 1) -> Batches:
    """The systems' analyses in batches (:class:`fedgl.privacy.leakage_batches.Batches`):
    :func:`_solve_all`, then ``features``' value-level attack (none without features)."""
    attack = None if features is None else (lambda systems: features.attack_all(systems,
                                                                                 closed))
    return Batches(_solve_all, attack, workers)


class _Features:
    """The experimenter's copy of the features, for the value-level attack on released rows
    (:mod:`fedgl.privacy.value_decoding`): their alphabet, or None when they are continuous."""

    def __init__(self, graph: GraphData) -> None:
        import numpy as np

        from fedgl.privacy.value_decoding import feature_alphabet

        x = _array(graph.x)
        x = x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)
        self.alphabet = feature_alphabet(x)
        self.x = x  # no copy: each system converts only its own nodes' rows
        self._sparse = None

    def _rows(self, nodes):
        """The features of ``nodes`` as float64: a CSR matrix where the lowest level is 0
        (sparse bag-of-words features: the released rows are then sparse too), else dense.
        A small graph's features are converted once; a larger one's per system (its rows)."""
        import numpy as np
        import scipy.sparse as sp

        if self.alphabet[0] != 0:
            return self.x[nodes].astype(np.float64)
        if self.x.size > MAX_SPARSE_COPY:
            return sp.csr_matrix(self.x[nodes], dtype=np.float64)
        if self._sparse is None:
            self._sparse = sp.csr_matrix(self.x)
        return self._sparse[nodes].astype(np.float64)

    def _truth(self, nodes):
        """Level indices of these nodes' features (each value is one of the alphabet's, so
        the index is the number of levels below it)."""
        import numpy as np

        x = self.x[nodes]
        out = np.zeros(x.shape, dtype=np.int8)
        for level in self.alphabet[1:]:
            out += x >= level
        return out

    def attack_all(self, systems, closed) -> list[tuple[int, int, int]]:
        """Per system ``(r, c, col_ids, found, undecided)``: (exact nodes, unresolved nodes,
        known values) among the columns of the system of released rows ``Σ_{(i, j)} d̃_j^{-1/2} x_j`` over
        the pairs (r, c). The nodes ``found`` by linear algebra count as exact (their
        coefficients are known); unresolved are the nodes not exact that a bound left open
        (``undecided`` by linear algebra, or in a row the decoder did not enumerate); known
        values are the feature values (cells) determined correctly: every cell of an exact
        node, and the cells the decoder decided of the others (a row of two equal-scale
        contributors summing to 0 or to twice the top level gives both their values there,
        though neither node is exact). The systems are decoded together by
        :func:`fedgl.privacy.value_decoding.decode_all`, a stack's worth at a time
        (:data:`fedgl.privacy.stacked_decoding.MAX_STACK_CELLS`), so that only those systems'
        released rows are held at once."""
        import numpy as np
        import scipy.sparse as sp

        from fedgl.privacy import stacked_decoding

        out: list = []
        pending: list = []
        cells = 0
        for r, c, col_ids, found, undecided in systems:
            width = self.x.shape[1]
            if self.alphabet is None or not r.size:
                out.append((int(found.sum()), int(undecided.sum()), int(found.sum()) * width))
                continue
            row_ids, r_idx = np.unique(r, return_inverse=True)
            c_idx = np.searchsorted(col_ids, c)
            if max(len(row_ids), len(col_ids)) * self.x.shape[1] > MAX_DECODE_CELLS:
                out.append((int(found.sum()), int((~found).sum()), int(found.sum()) * width))
                continue
            coef = closed[col_ids].astype(np.float64) ** -0.5
            a = sp.csr_matrix((coef[c_idx], (r_idx, c_idx)),
                              shape=(len(row_ids), len(col_ids)))
            values = a @ self._rows(col_ids)  # the released rows (noiseless)
            if sp.issparse(values):
                values = values.tocsr()
            a.sort_indices()
            pending.append(((a.indptr, a.indices, coef, values, self.alphabet, found,
                             self._truth(col_ids[found])), (len(out), col_ids, found, undecided)))
            out.append(None)
            cells += len(col_ids) * self.x.shape[1]
            if cells >= stacked_decoding.MAX_STACK_CELLS:
                self._score(pending, out)
                pending, cells = [], 0
        self._score(pending, out)
        return out

    def _score(self, pending, out) -> None:
        """Decode the ``pending`` systems in one call and write each one's (exact,
        unresolved, known values) at its place in ``out``."""
        import numpy as np

        from fedgl.privacy import value_decoding as vd

        if not pending:
            return
        decoded_all = vd.decode_all([system for system, _ in pending])
        for got, (_, (at, col_ids, found, undecided)) in zip(decoded_all, pending, strict=True):
            decoded = np.flatnonzero(got.nodes & ~found)
            exact = found.copy()
            step = max(1, (1 << 20) // max(1, self.x.shape[1]))   # a few MB at a time
            for k in range(0, len(decoded), step):
                part = decoded[k:k + step]
                exact[part] = (got.levels[part] == self._truth(col_ids[part])).all(axis=1)
            # known values: every cell of an exact node, and the decided cells of the others
            known = int(exact.sum()) * self.x.shape[1]
            partial = np.flatnonzero(~exact & got.known.any(axis=1))
            for k in range(0, len(partial), step):
                part = partial[k:k + step]
                right = got.levels[part] == self._truth(col_ids[part])
                known += int((got.known[part] & right).sum())
            out[at] = (int(exact.sum()), int((~exact & (undecided | got.unresolved)).sum()),
                       known)
            del got, decoded, exact    # the decoder frees a stack once its results are gone
        pending.clear()


def _solve(r, c):
    """(col_ids, found, undecided): the distinct nodes of the pairs, those with ``e_j`` in
    the row space of A (exactly the columns of leverage 1, i.e. ``P_jj = 1`` for the projection
    ``P = A^+ A`` onto the row space), and those in blocks too large to decide. Rows with one
    unknown node are peeled first; then per connected block
    :func:`fedgl.privacy.row_space.found_in_row_space` (a pivoted Cholesky factorisation of
    the Gram matrix, the eigenvectors' answer)."""
    import numpy as np
    import scipy.sparse as sp

    if not r.size:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), np.zeros(0, dtype=bool)
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
    found_rest = np.zeros(nc_rest, dtype=bool)
    undecided = np.zeros(nc, dtype=bool)
    rows_in, cols_in = np.ones(nr, dtype=bool), np.ones(nc_rest, dtype=bool)
    for rs, cs in row_space.blocks(a):   # each connected block: its rows and columns
        if len(rs) * len(cs) > MAX_BLOCK_ENTRIES or min(len(rs), len(cs)) > MAX_BLOCK_SIDE:
            undecided[rest[cs]] = True  # too large to decide densely; counted, not guessed
            rows_in[rs] = False
            cols_in[cs] = False
    # the blocks within the bounds: free columns stripped, then each block of what is left
    rk, ck = row_space.strip_free_columns(a, rows_in, cols_in)
    a = a[rk][:, ck]
    for rs, cs in row_space.blocks(a):
        found_rest[ck[cs]] = row_space.found_in_row_space(a[rs][:, cs])   # sparse 0/1
    found = known.copy()
    found[rest] = found_rest
    return col_ids, found, undecided


def _solve_all(systems):
    """:func:`_solve` of each system ``(r, c)``, computed on their block-diagonal union: the
    rows and nodes of system ``s`` offset by ``s·N`` (``N`` above every index), so that no row
    or block mixes two systems. Exact: the peeling decides rows one at a time, the stripping
    rows and columns one at a time, and the row-space test runs per connected block, each
    block one system's with its rows and columns in the same order as alone (the offsets
    keep it); only the number of sparse passes and calls shrinks."""
    import numpy as np

    if len(systems) == 1:
        return [_solve(*systems[0])]
    big = 1 + max((int(max(r.max(), c.max())) for r, c in systems if r.size), default=0)
    r = np.concatenate([r + s * big for s, (r, _) in enumerate(systems)])
    c = np.concatenate([c + s * big for s, (_, c) in enumerate(systems)])
    col_ids, found, undecided = _solve(r, c)
    cut = np.searchsorted(col_ids, np.arange(len(systems) + 1, dtype=np.int64) * big)
    return [(col_ids[cut[s]:cut[s + 1]] - s * big, found[cut[s]:cut[s + 1]],
             undecided[cut[s]:cut[s + 1]]) for s in range(len(systems))]


def leakage_report(graph: GraphData, part: Partition, cfg: Config,
                   workers: int | None = None) -> dict[str, Any]:
    """Per-client counts of received rows by how many remote nodes they aggregate, of the
    remote nodes whose features the client can reconstruct exactly (linear algebra, and the
    value-level attack), and what the server reads (:func:`server_view`). SciPy's BLAS runs
    on one thread meanwhile (:func:`fedgl.privacy.row_space.single_threaded_blas`), and the
    systems are analysed on up to ``workers`` threads (None: one, and one per idle CPU,
    :func:`fedgl.privacy.leakage_batches.available_workers`). The report does not depend on
    ``workers``."""
    with row_space.single_threaded_blas():
        return _leakage_report(graph, part, cfg,
                               available_workers() if workers is None else workers)


def _leakage_report(graph: GraphData, part: Partition, cfg: Config,
                    workers: int) -> dict[str, Any]:
    m = cfg.min_contributors
    least = int(getattr(cfg, "min_partial_nodes", 1))
    per_client = []
    wide = neighbour_rows(cfg)
    pairs = _ClosedNeighbourhoods(graph, part, least) if cfg.hops > 0 else None
    features = _Features(graph) if cfg.hops > 0 else None
    # the clients' systems and the server's analysed together, in batches (_analysis)
    analysis = _analysis(features, pairs.closed if pairs is not None else None, workers)
    solved = _client_rows(graph, part, cfg.hops, m, pairs, wide, analysis)
    server = _server_rows(graph, part, cfg, pairs, analysis)
    analysis.run()
    for k, remote in enumerate(remote_counts(graph, part, cfg.hops, pairs,
                                             neighbour_rows=wide)):
        single = int((remote == 1).sum())
        suppressed = int(((remote >= 1) & (remote < m)).sum()) if m > 1 else 0
        row = {
            "client": k,
            "received_rows": int(remote.size),
            "rows_without_remote_nodes": int((remote == 0).sum()),
            "rows_single_remote_node": single,
            "rows_suppressed_by_min_contributors": suppressed,
            "exact_disclosure_rows": 0 if m > 1 else single,
            **solved[k],
        }
        row.setdefault("exact_remote_nodes", 0)
        row.setdefault("exact_unresolved", 0)
        per_client.append(row)
    total = {key: sum(c[key] for c in per_client) for key in per_client[0] if key != "client"} \
        if per_client else {}
    if total.get("remote_values"):   # a share of the sums, not a sum of shares
        total["known_values_share"] = total["known_values"] / total["remote_values"]
    alphabet = None if features is None or features.alphabet is None \
        else [float(v) for v in features.alphabet]
    return {"label": ANALYSIS_LABEL, "hops": cfg.hops, "min_contributors": m,
            "min_partial_nodes": least,
            "note": "exact_disclosure_rows counts delivered rows made of one remote node; "
                    "remote_nodes_recoverable counts remote nodes whose (degree-scaled) features "
                    "the client solves for exactly from all its rows (without DP noise); "
                    "remote_nodes_unresolved counts nodes in blocks too large to decide, for "
                    "which remote_nodes_recoverable is a lower bound; exact_remote_nodes counts "
                    "(client, remote node) pairs whose exact features the client obtains by "
                    "linear algebra or by decoding the rows' values over the feature alphabet, "
                    "knowing each row's contributors and their degrees; exact_unresolved "
                    "counts the nodes not found exact where a bound of the analysis was hit, "
                    "for which exact_remote_nodes is a lower bound; known_values counts the "
                    "remote feature values (cells) the client determines, those of exact nodes "
                    "and the decided values of nodes not exact, out of remote_values (its "
                    "rows' remote nodes times the feature width); the server view's "
                    "values_known counts the same out of every node's values",
            "value_decoding": {
                "alphabet": alphabet, "applicable": alphabet is not None,
                "assumes": "each row's contributors and their degrees are known (announced "
                           "degrees, or the structure); the sums are noiseless",
                "tolerance": TOLERANCE, "max_combinations": MAX_COMBINATIONS},
            "dp_noised": cfg.dp_epsilon is not None,
            "per_client": per_client, "total": total,
            "server_view": server}


_SERVER_READS = {
    "none": "every client's partial sums S_k[i] in clear",
    "mask": "the full sums S[i] of every row two or more clients touch (after unmasking)",
    "robust": "the full sums S[i] over the surviving clients of every row two or more clients "
              "touch (after unmasking)",
    "he": "ciphertexts only: no feature value",
}


def server_view(graph: GraphData, part: Partition, cfg: Config,
                pairs: _ClosedNeighbourhoods | None = None,
                features: _Features | None = None) -> dict[str, Any]:
    """What the server reads in the pre-training round, and whose exact features that gives it.

    Plaintext: client k's partial sums ``S_k[i]`` over its own nodes in ``Ñ(i)``, for every row
    it touches; a row with one contributing node is that node's scaled features. ``mask`` and
    ``robust`` (no dropout): the full sums ``S[i]`` of the rows the plan sends (two or more
    contributing clients, at least one receiver). HE: nothing. The same analyses as for the
    clients run on these systems: linear algebra and the value-level attack."""
    needed = cfg.hops > 0 and cfg.secure_sum != "he"
    pairs = pairs or (_ClosedNeighbourhoods(graph, part, int(getattr(cfg, "min_partial_nodes", 1)))
                      if needed else None)
    analysis = _analysis((features or _Features(graph)) if needed else None,
                         pairs.closed if pairs is not None else None)
    out = _server_rows(graph, part, cfg, pairs, analysis)
    analysis.run()
    return out


def _server_rows(graph, part, cfg, pairs, analysis) -> dict[str, Any]:
    """:func:`server_view`'s figures, complete once ``analysis`` has run the systems added."""
    import numpy as np

    mode = cfg.secure_sum
    width = int(graph.x.shape[1]) if len(graph.x.shape) > 1 else 1
    out: dict[str, Any] = {"secure_sum": mode, "reads": _SERVER_READS[mode],
                           "nodes": graph.num_nodes, "nodes_in_single_contributor_rows": 0,
                           "nodes_recoverable": 0, "nodes_exact": 0, "nodes_unresolved": 0,
                           "values": graph.num_nodes * width, "values_known": 0,
                           "values_known_share": 0.0}
    if cfg.hops == 0 or mode == "he":
        if cfg.hops == 0:
            out["reads"] = "nothing: 0-hop has no pre-training exchange"
        return out
    if mode == "none":
        systems = []
        single = np.zeros(graph.num_nodes, dtype=bool)
        for k in range(part.num_clients):
            mine, counts = pairs.own_counts(k)
            if pairs.sent is not None:   # what client k sends: its withheld sums left out
                mine &= pairs.sent
                counts = np.bincount(pairs.rows[mine], minlength=pairs.n)
            r, c = pairs.rows[mine].astype(np.int64), pairs.cols[mine].astype(np.int64)
            single[c[counts[r] == 1]] = True
            systems.append((r, c))
        out["nodes_in_single_contributor_rows"] = int(single.sum())
    else:
        systems = [_masked_rows(pairs, part, cfg)]

    def fill(col_ids, found, undecided, attacked):
        out["nodes_recoverable"] += int(found.sum())
        out["nodes_exact"] += attacked[0]
        out["nodes_unresolved"] += attacked[1]
        out["values_known"] += attacked[2]
        out["values_known_share"] = out["values_known"] / out["values"] if out["values"] else 0.0
    for r, c in systems:
        if r.size > MAX_SYSTEM_ENTRIES:
            out["nodes_unresolved"] += int(np.unique(c).size)
            continue
        analysis.add(r, c, fill)
    return out


def _masked_rows(pairs: _ClosedNeighbourhoods, part: Partition, cfg: Config):
    """The pairs (i, j ∈ Ñ(i)) of the rows a masked sum unmasks for the server: rows touched by
    two or more clients, with a receiver left after ``min_contributors``."""
    import numpy as np

    k_total = part.num_clients
    key = pairs.rows.astype(np.int64) * k_total + pairs.col_owner.astype(np.int64)
    uniq, count = np.unique(key, return_counts=True)
    row, client = uniq // k_total, uniq % k_total
    members = np.bincount(row, minlength=pairs.n)
    requested = np.ones(len(uniq), dtype=bool) if neighbour_rows(cfg) \
        else pairs.owner[row] == client
    remote = pairs.closed[row] - count
    m = cfg.min_contributors
    receiver = requested & ~((remote >= 1) & (remote < m)) if m > 1 else requested
    has_receiver = np.bincount(row[receiver], minlength=pairs.n) > 0
    sent = (members >= 2) & has_receiver
    keep = sent[pairs.rows]
    if pairs.sent is not None:   # a withheld partial sum goes as zeros: its pairs are not in it
        keep &= pairs.sent
    return pairs.rows[keep].astype(np.int64), pairs.cols[keep].astype(np.int64)


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
