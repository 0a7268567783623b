"""FedGAT server: the pre-training round (Algorithm 1, made real), then FedAvg.

Step 1 as the paper states it: every client sends its nodes' features (and the edges incident to
them, from which the server builds each Ñ_i). **The server therefore sees every raw feature**;
the paper leaves protecting them to homomorphic encryption, which it did not implement and
neither do we (docs/fedgat.md). The server does not keep them after the round.

Step 2, per client k, for every node i in its (L-1)-hop expansion (the nodes its layers need):

* ``protocol``: node i's obfuscation matrices (:mod:`.protocol`), streamed in chunks; the
  owner of i gets P_i instead of the M_1i(s) (``fedgat_send_p``); with ``vec_fedgat`` the
  Vector FedGAT matrices instead. A node whose message would exceed ``fedgat_node_mb`` is refused
  before anything is built.
* ``fast``: the raw feature rows the first layer needs (L-hop expansion) instead, and the edges
  into the remote nodes it computes layer 1 for.

Every value sent is a runtime message, sized and counted by the ledger (phase ``pretrain``).
``pretrain_stats`` records what the round cost and what the protocol would have cost, including
the paper's dense count (Appendix D).
"""

from __future__ import annotations

import secrets

import torch
from torch import Tensor

from fedgl.algorithms.base import FedAvgServer
from fedgl.algorithms.fedgat.common import cap_in_degree
from fedgl.algorithms.fedgat.protocol import (
    matrix_message,
    matrix_message_nbytes,
    matrix_parts,
    paper_scalars,
    vector_message,
    vector_message_nbytes,
)
from fedgl.errors import DataError
from fedgl.federation.messages import payload_nbytes

CHUNK_BYTES = 64 << 20


class GATFedAvgServer(FedAvgServer):
    """FedAvg server that starts from the GAT's initial weights (``gat_weights``, bound by the
    driver: the generic driver builds its initial weights from ``config.model``)."""

    def __init__(self, runtime, strategy, init_weights, config, *, gat_weights=None,
                 seed: int = 0) -> None:
        super().__init__(runtime, strategy,
                         gat_weights if gat_weights is not None else init_weights, config)
        self.seed = seed
        self.pretrain_stats: dict = {}


class FedGATServer(GATFedAvgServer):
    """FedAvg server with FedGAT's pre-training round."""

    def pretrain(self) -> None:
        with self.runtime.ledger.timer("pretrain"):
            up = self.runtime.call("fedgat.upload", None, phase="pretrain")
            self._round(up)

    # ------------------------------------------------------------------ the round
    def _round(self, up: dict) -> None:
        cfg = self.config
        clients = sorted(up)
        n = int(max(int(up[k]["ids"].max()) for k in clients if up[k]["ids"].numel())) + 1
        d = int(up[clients[0]]["x"].size(1))
        x = torch.zeros(n, d, dtype=up[clients[0]]["x"].dtype)
        owner = torch.full((n,), -1, dtype=torch.long)
        for k in clients:
            x[up[k]["ids"]] = up[k]["x"]
            owner[up[k]["ids"]] = k
        edges = cap_in_degree(torch.cat([up[k]["edge_index"] for k in clients], dim=1),
                              cfg.fedgat_max_degree, self.seed)
        src, dst = edges
        # closed neighbourhoods Ñ_i: in-neighbours (edges sorted by target), then i itself
        order = torch.argsort(dst, stable=True)
        src_sorted = src[order]
        ptr = torch.zeros(n + 1, dtype=torch.long)
        ptr[1:] = torch.cumsum(torch.bincount(dst, minlength=n), 0)
        deg = ptr[1:] - ptr[:-1] + 1

        protocol = cfg.fedgat_backend == "protocol"
        layers = cfg.layers
        need = torch.zeros(len(clients), n, dtype=torch.bool)  # layer-1 rows per client
        graph_args = {}
        for pos, k in enumerate(clients):
            hop = [self._own_mask(up[k]["ids"], n)]
            for _ in range(layers):
                nxt = hop[-1].clone()
                nxt[src[hop[-1][dst]]] = True
                hop.append(nxt)
            own = hop[0]
            need[pos] = hop[layers - 1]
            rows = hop[layers - 1] if protocol else hop[layers]
            remote = (rows & ~own).nonzero().flatten()
            into = (hop[layers - 2] if layers >= 2 else torch.zeros_like(own)) if protocol \
                else hop[layers - 1]
            sel = into[dst] & ~own[dst]
            args = {"rows": remote, "edge_index": edges[:, sel]}
            if not protocol:
                args["x"] = x[remote]
            graph_args[k] = args
        self.runtime.call("fedgat.graph", graph_args, phase="pretrain")

        if not protocol and n > 100_000:  # planning numbers only; skip the scan on big graphs
            self.pretrain_stats = {"backend": "fast", "feature_upload_values": n * d,
                                   "layer1_rows": need.sum(1).tolist()}
            return
        sizes = self._message_sizes(x, src_sorted, ptr, deg, need, owner, clients)
        self.pretrain_stats = {
            "backend": cfg.fedgat_backend, "vec_fedgat": cfg.vec_fedgat,
            "feature_upload_values": n * d,
            "layer1_rows": need.sum(1).tolist(),
            "protocol_bytes": int(sizes.sum()),
            "protocol_bytes_per_client": [int(v) for v in sizes.sum(1).tolist()],
            "paper_scalars": int(sum(paper_scalars(int(deg[i]), d) * int(c)
                                     for i, c in enumerate(need.sum(0).tolist()) if c)),
            "max_node_mb": float(sizes.max()) / 2**20 if sizes.numel() else 0.0,
            "vector_protocol_bytes": int(sum(
                vector_message_nbytes(int(deg[i]), d, x.element_size()) * int(c)
                for i, c in enumerate(need.sum(0).tolist()) if c)),
        }
        if protocol:
            self._guard(sizes, need, deg, clients)
            self._stream(x, src_sorted, ptr, need, owner, clients)

    @staticmethod
    def _own_mask(ids: Tensor, n: int) -> Tensor:
        mask = torch.zeros(n, dtype=torch.bool)
        mask[ids] = True
        return mask

    def _neighbors(self, src_sorted: Tensor, ptr: Tensor, i: int) -> Tensor:
        return torch.cat([src_sorted[ptr[i]:ptr[i + 1]], torch.tensor([i])])

    def _message_sizes(self, x, src_sorted, ptr, deg, need, owner, clients) -> Tensor:
        """Bytes of every (client, node) protocol message, without building any: [K, N]
        (zero where not needed). Supports: S2_i = features non-zero on some j ∈ Ñ_i."""
        cfg = self.config
        n, d = x.shape
        vb = x.element_size()
        nz = x.ne(0)
        nodes = need.any(0).nonzero().flatten()
        out = torch.zeros(need.shape, dtype=torch.float64)
        for i in nodes.tolist():
            nb = self._neighbors(src_sorted, ptr, i)
            g = int(deg[i])
            if cfg.vec_fedgat:
                size = vector_message_nbytes(g, d, vb)
                sizes = {True: size, False: size}
            else:
                s2 = int(nz[nb].any(0).sum())
                s1 = int(nz[i].sum())
                sizes = {o: matrix_message_nbytes(g, s2, s1, o, cfg.fedgat_send_p, vb)
                         for o in (True, False)}
            for pos in need[:, i].nonzero().flatten().tolist():
                out[pos, i] = sizes[int(owner[i]) == clients[pos]]
        return out

    def _guard(self, sizes: Tensor, need: Tensor, deg: Tensor, clients: list[int]) -> None:
        budget = self.config.fedgat_node_mb * 2**20
        if sizes.numel() and float(sizes.max()) > budget:
            pos, i = divmod(int(torch.argmax(sizes)), sizes.size(1))
            raise DataError(
                f"FedGAT protocol: node {i} (degree {int(deg[i]) - 1}) needs "
                f"{float(sizes[pos, i]) / 2**20:.0f} MB of matrices for client {clients[pos]}, "
                f"over --fedgat-node-mb {self.config.fedgat_node_mb:g}; use --fedgat-backend "
                "fast, or cap degrees with --fedgat-max-degree")

    def _stream(self, x, src_sorted, ptr, need, owner, clients) -> None:
        """Build each needed node's matrices once and send them, in chunks, to every client
        that needs them."""
        cfg = self.config
        # OS randomness, not the public run seed: anyone with the seed could otherwise rebuild
        # the bases and read every neighbour's features from the matrices
        session = secrets.randbits(63)
        buffers: dict[int, list[dict]] = {k: [] for k in clients}
        filled = dict.fromkeys(clients, 0)
        for i in need.any(0).nonzero().flatten().tolist():
            nb = self._neighbors(src_sorted, ptr, i)
            if cfg.vec_fedgat:
                common, p = vector_message(i, nb, x, session), None
            else:
                common, p = matrix_parts(i, nb, x, session)
            for pos in need[:, i].nonzero().flatten().tolist():
                k = clients[pos]
                msg = common if p is None else matrix_message(
                    common, p, x[i], int(owner[i]) == k, cfg.fedgat_send_p)
                buffers[k].append(msg)
                filled[k] += payload_nbytes(msg)
                if filled[k] >= CHUNK_BYTES:
                    self._flush(k, buffers, filled)
        for k in clients:
            if buffers[k]:
                self._flush(k, buffers, filled)

    def _flush(self, k: int, buffers: dict, filled: dict) -> None:
        self.runtime.call("fedgat.matrices", {k: {"nodes": buffers[k]}}, phase="pretrain",
                          clients=[k])
        buffers[k], filled[k] = [], 0
