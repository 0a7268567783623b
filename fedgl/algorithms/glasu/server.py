"""The GLASU server: no data, no parameters. It samples the batch, unions the clients' node sets
at aggregation layers, aggregates and broadcasts embeddings (and, in ``exact`` mode, sums and
returns gradients). Every exchange is a ``runtime.call`` counted by the ledger.

Messages per round with ``K`` aggregation layers and ``M`` clients (labels at every client,
``local_stale``): ``K`` sampling calls (the last one also returns the first segment's output),
``K - 1`` forward calls and one ``local_updates`` call, each one message down and one up per
client: ``4KM`` messages for ``Q`` model updates. ``exact`` adds ``K`` gradient calls per step.
Relative to ``K = L``, ``Q = 1`` that is the paper's saving factor ``QL/K`` (§3.4).

A party lost under ``on_client_failure: drop`` (a runtime that drops clients: Ray, Flower) leaves
its block empty: from the call that lost it on, the aggregate counts its ``H⁺_m`` as zero
(``mean``: the survivors' sum still divided by ``M``; ``concat``: a zero block), so the survivors'
models, sets and gradients keep the shapes and weights they were trained with and nothing is
sent to the lost party again. A run with labels at one client cannot lose that client (it draws
the batches and holds the only labels): it stops with one line; with labels everywhere the
metrics are the mean over the label holders still in the run.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from fedgl.algorithms.glasu.options import GlasuParams
from fedgl.errors import RunAborted
from fedgl.federation.runtime import Runtime


class GlasuServer:
    def __init__(self, runtime: Runtime, params: GlasuParams, seed: int) -> None:
        self.runtime = runtime
        self.p = params
        self.gen = torch.Generator().manual_seed(seed * 1_000_003 + 99)
        self.train_ids: Tensor | None = None

    # ------------------------------------------------------------------ helpers
    def aggregate(self, outs: dict[int, Tensor]) -> Tensor:
        """``Agg(H⁺_1, ..., H⁺_M)``: the mean, or the concatenation in client order (a lost
        party's ``H⁺_m`` counts as zero, see the module docstring)."""
        if not outs:
            raise RunAborted("every GLASU party has left the run; nothing to aggregate")
        if self.p.aggregate == "mean":
            return torch.stack([outs[m] for m in sorted(outs)]).sum(0) / self.p.clients
        some = next(iter(outs.values()))
        parts = []
        for m in range(self.p.clients):
            if m in outs:
                parts.append(outs[m])
            else:
                a, b = self.p.share(m)
                parts.append(some.new_zeros(some.shape[0], b - a))
        return torch.cat(parts, dim=1)

    def share(self, grad: Tensor, client: int) -> Tensor:
        """The part of ``∂L/∂H`` that flows to ``client``'s output (``∂H/∂H⁺_m``)."""
        if self.p.aggregate == "mean":
            return grad / self.p.clients
        a, b = self.p.share(client)
        return grad[:, a:b]

    def _call(self, method: str, args: dict | None, phase: str = "train",
              clients: list[int] | None = None) -> dict:
        out = self.runtime.call(method, args, phase=phase, clients=clients)
        if not self.runtime.client_ids:
            raise RunAborted(f"every GLASU party has left the run (during '{method}')")
        return out

    def _holder_call(self, method: str, args: dict | None, phase: str = "train") -> dict:
        """``method`` at the label holder that serves the whole run (client 0 with labels at
        one client; else the first label holder still in the run): its reply."""
        holder = 0 if self.p.label_holders == "one" else min(self.runtime.client_ids, default=0)
        reply = self._call(method, args, phase, [holder]) \
            if holder in self.runtime.client_ids else {}
        if holder not in reply:
            why = ("with labels at one client the run cannot go on without it (labels at every "
                   "client can lose a party)" if self.p.label_holders == "one" else
                   f"it was lost during '{method}'")
            raise RunAborted(f"GLASU's label holder (client {holder}) has left the run; {why}")
        return reply[holder]

    # ------------------------------------------------------------------ protocol
    def setup(self) -> None:
        """Labels at every client: learn the training node ids once (an index list)."""
        if self.p.label_holders == "all":
            self.train_ids = self._holder_call("glasu.training_nodes", None, "pretrain")["ids"]

    def batch(self) -> Tensor:
        """``S[L]``: drawn here (Alg. 2) or by the label holder (Alg. 5)."""
        if self.p.label_holders == "one":
            return self._holder_call("glasu.sample_batch", None)["ids"]
        ids = self.train_ids
        assert ids is not None, "setup() first"
        size = self.p.batch_size if 0 < self.p.batch_size < ids.numel() else ids.numel()
        return ids[torch.randperm(ids.numel(), generator=self.gen)[:size]]

    def train_round(self) -> dict:
        """Sampling, joint inference and ``Q`` local updates (or one exact step)."""
        shared = self.p.shared_sets
        nodes = self.batch()
        for k in range(len(shared), 0, -1):  # top-down: S[j_K] = S[L], ..., S[j_1]
            res = self._call("glasu.sample", {"nodes": nodes, "top": shared[k - 1]})
            if k > 1:
                nodes = torch.unique(torch.cat([r["nodes"] for r in res.values()]))
        outs = {m: r["h"] for m, r in res.items()}
        for k in range(2, len(shared) + 1):
            res = self._call("glasu.forward", {"h": self.aggregate(outs), "k": k})
            outs = {m: r["h"] for m, r in res.items()}
        top = self.aggregate(outs)
        if self.p.grad_mode == "exact":
            return self._exact_backward(top)
        if self.p.label_holders == "one":
            first = self._holder_call("glasu.top_gradient", {"h": top})
            args = {m: ({"h": None, "grad": None} if m == 0 else {"h": top, "grad": first["grad"]})
                    for m in self.runtime.client_ids}
            self._call("glasu.local_updates", args)
            return {"train_loss": first["loss"]}
        res = self._call("glasu.local_updates", {"h": top})
        return {"train_loss": _mean(r["loss"] for r in res.values() if r)}

    def _exact_backward(self, top: Tensor) -> dict:
        res = self._call("glasu.backward_top", {"h": top})
        loss = _mean(r["loss"] for r in res.values())
        grad = torch.stack([r["grad"] for r in res.values()]).sum(0)  # ∂(Σ_m L_m)/∂H[L]
        for k in range(len(self.p.agg), 0, -1):
            if self.p.aggregate == "mean":
                args: dict = {"grad": self.share(grad, 0), "k": k}  # the same share: a broadcast
            else:
                args = {m: {"grad": self.share(grad, m), "k": k} for m in self.runtime.client_ids}
            res = self._call("glasu.backward_segment", args)
            if k > 1:
                grad = torch.stack([r["grad"] for r in res.values()]).sum(0)
        return {"train_loss": loss}

    def evaluate(self) -> dict:
        """Full-neighbourhood joint inference; the mean over label holders of each client's own
        classifier's accuracy (notes A5), and each holder's test accuracy."""
        h = None
        for k in range(1, len(self.p.agg) + 1):
            res = self._call("glasu.eval_forward", {"h": h, "k": k}, "eval")
            h = self.aggregate({m: r["h"] for m, r in res.items()})
        scores = {m: r for m, r in self._call("glasu.eval_scores", {"h": h}, "eval").items() if r}
        if not scores:
            raise RunAborted("no GLASU label holder is left in the run to evaluate")
        out = {key: _mean(s[key] for s in scores.values()) for key in next(iter(scores.values()))}
        out["client_test_acc"] = {str(m): s["test_acc"] for m, s in scores.items()}
        return out

    def rounds(self, total: int, eval_every: int = 1, start: int = 1
               ) -> Iterator[tuple[int, dict]]:
        ledger = self.runtime.ledger
        for t in range(start, total + 1):
            with ledger.timer("train"):
                metrics = self.train_round()
            if t % max(1, eval_every) == 0 or t == total:
                with ledger.timer("eval"):
                    metrics.update(self.evaluate())
            yield t, metrics


def _mean(values) -> float:  # noqa: ANN001 - any iterable of numbers
    vals = [float(v) for v in values]
    return sum(vals) / len(vals) if vals else float("nan")
