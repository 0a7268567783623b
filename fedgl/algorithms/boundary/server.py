"""The server of the per-round boundary exchange: routes requests, features and hidden states
between clients (it holds no graph data, only a directory of which client owns which node id,
built from the clients' own messages) and averages the models (FedAvg).

One training round t, for every client k (all messages counted by the ledger, phase ``train``):

1. ``sample``: server → k: the round and a full flag (8 + 1 bytes); k → server: the ids of
   ``B_k`` (8 bytes each).
2. ``serve``: server → owner o: ``S_o = ∪_k B_k ∩ V_o`` (8 bytes each); o → server:
   ``x_j`` (4d bytes) and ``d̃_j`` (8 bytes) for j ∈ S_o.
3. ``begin``: server → k: the global model, ``x_j`` and ``d̃_j`` for j ∈ B_k, the round and the
   train flag (8 + 1 bytes).
4. For each of the E local steps and each layer l = 1..L: ``layer``: server → k: ``h_j^{(l-1)}``
   for j ∈ B_k (4h bytes each; nothing for l = 1); k → server: ``h_i^{(l)}`` for i ∈ S_k
   (4h bytes each; nothing after the last layer).
5. ``finish``: k → server: the local model, its number of training nodes and mean loss.

So the per-round bytes are ``Σ_k [8|B_k| + 8|S_k| + (4d + 8)(|S_k| + |B_k|)
+ 4h·E·(L-1)(|S_k| + |B_k|)] + 2K·|model| + K(9 + 9 + 16)`` (4-byte floats, 8-byte ids,
degrees and numbers, 1-byte flags). Evaluation runs the same exchange
with every boundary node (phase ``eval``), one forward pass, and returns counts.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from fedgl.algorithms.base import FedAvgServer
from fedgl.evaluation import pooled_accuracy
from fedgl.federation.aggregate import State


class BoundaryServer(FedAvgServer):
    """FedAvg rounds in which clients exchange boundary features and hidden states every step."""

    _owner_ids: Tensor | None = None
    _owner_of: Tensor | None = None

    def pretrain(self) -> None:
        """Set-up: each client registers the ids of the nodes it owns (the routing directory)."""
        with self.runtime.ledger.timer("pretrain"):
            res = self.runtime.call("boundary.directory", phase="pretrain")
        ids = torch.cat([res[k]["ids"] for k in sorted(res)])
        owners = torch.cat([torch.full((len(res[k]["ids"]),), k, dtype=torch.long)
                            for k in sorted(res)])
        order = torch.argsort(ids)
        self._owner_ids, self._owner_of = ids[order], owners[order]

    def _route(self, requests: dict[int, Tensor]) -> dict[int, Tensor]:
        """For every owner, the sorted union of the ids requested from it."""
        assert self._owner_ids is not None and self._owner_of is not None
        wanted = torch.unique(torch.cat(list(requests.values())))
        owner = self._owner_of[torch.searchsorted(self._owner_ids, wanted)]
        return {o: wanted[owner == o] for o in self.runtime.client_ids}

    def exchange(self, weights: State, round: int, *, train: bool, phase: str) -> dict[int, dict]:
        """One exchange: sample, serve, begin, then ``local_steps`` (training) or one (evaluation)
        passes of layer calls. Returns the clients' last-layer results."""
        rt, steps = self.runtime, (self.config.local_steps if train else 1)
        req = rt.call("boundary.sample", {"round": round, "full": not train}, phase=phase)
        requests = {k: req[k]["ids"] for k in sorted(req)}
        served = self._route(requests)
        feats = rt.call("boundary.serve", {o: {"ids": ids} for o, ids in served.items()}, phase=phase)
        table_ids = torch.cat([served[o] for o in sorted(served)])
        order = torch.argsort(table_ids)
        table_ids = table_ids[order]

        def rows(name: str, outs: dict[int, dict]) -> dict[int, Tensor]:
            table = torch.cat([outs[o][name] for o in sorted(served)])[order]
            return {k: table[torch.searchsorted(table_ids, ids)] for k, ids in requests.items()}

        x, deg = rows("x", feats), rows("deg", feats)
        rt.call("boundary.begin", {k: {"weights": weights, "x": x[k], "deg": deg[k], "round": round,
                              "train": train} for k in requests}, phase=phase)
        layers = self.config.layers
        last: dict[int, dict] = {}
        for _ in range(steps):
            remote: dict[int, Tensor | None] = {k: None for k in requests}
            for layer in range(1, layers + 1):
                out = rt.call("boundary.layer", {k: {"remote": remote[k]} for k in requests}, phase=phase)
                if layer < layers:
                    remote = dict(rows("h", out))
                else:
                    last = out
        return last

    def rounds(self, start: int = 1) -> Iterator[tuple[int, State, dict]]:
        cfg, ledger = self.config, self.runtime.ledger
        for t in range(start, cfg.rounds + 1):
            with ledger.timer("train"):
                self.exchange(self.weights, t, train=True, phase="train")
                results = self.runtime.call("boundary.finish", phase="train")
                metrics = self.aggregate_fits(results)
            if t % cfg.eval_every == 0 or t == cfg.rounds:
                metrics.update(self.evaluate(t))
            yield t, self.weights, metrics

    @staticmethod
    def score(server: BoundaryServer, weights: State) -> None:
        """Evaluate ``weights`` by the full exchange (after which every client holds its
        ``last_log_probs``): how a saved model scores nodes (``fedgl predict``)."""
        server.weights = {k: v.clone() for k, v in weights.items()}
        server.evaluate(server.config.rounds)

    def evaluate(self, round: int = 0) -> dict:
        """Federated accuracy of the global model: a full exchange (every boundary node), one
        forward pass, pooled counts (phase ``eval``)."""
        with self.runtime.ledger.timer("eval"):
            res = self.exchange(self.weights, round, train=False, phase="eval")
        return pooled_accuracy(res)
