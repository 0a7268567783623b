"""The FedSage+ server: relays NeighGen parameters, latents and gradients between clients during
generator training (phase ``pretrain``), then runs FedAvg on the classifier.

Per generator step (every message counted): each client i uploads ``θ_fGen_i`` and its batch's
noisy latents; the server sends every client j the (θ, z) of the others assigned to it (all
others, or ``cross_clients`` drawn at random per step); j uploads one gradient per generator; the
server sends client i the gradients computed for it. After ``gen_epochs`` epochs, ``mend``.

``mend exact`` (FedGCN Table 2's perfect generator): one ``exact_share`` call collects every
client's wanted cross-client neighbour ids and its boundary nodes' features, and one
``exact_mend`` call hands each client the features it asked for.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import torch

from fedgl import progress
from fedgl.algorithms.base import FedAvgServer
from fedgl.algorithms.fedsage_plus.options import options_of


class FedSagePlusServer(FedAvgServer):
    """FedAvg server whose pre-training round is FedSage+'s federated NeighGen training."""

    def pretrain(self) -> None:
        opts, rt = options_of(self.config), self.runtime
        self.generator_log: list[dict] = []
        if opts.mend == "exact":
            with rt.ledger.timer("pretrain"):
                self.exact_mend()
            return
        with rt.ledger.timer("pretrain"):
            setup = rt.call("fedsage.gen_setup", phase="pretrain")
            batches = max(r["batches"] for r in setup.values())
            rng = np.random.default_rng(self.config.seed + 17)
            for epoch, batch in progress.track(itertools.product(range(opts.gen_epochs), range(
                    batches)), "FedSage+ generator training", opts.gen_epochs * batches):
                self.generator_step(epoch, batch, rng)
            mended = rt.call("fedsage.mend", phase="pretrain")
        self.generated = {k: v["generated"] for k, v in mended.items()}

    def exact_mend(self) -> None:
        """Relay the true features of every wanted cross-client neighbour from its owner."""
        rt = self.runtime
        shared = rt.call("fedsage.exact_share", phase="pretrain")
        ids = torch.cat([shared[k]["ids"] for k in rt.client_ids])
        x = torch.cat([shared[k]["x"] for k in rt.client_ids])
        order = torch.argsort(ids)
        ids, x = ids[order], x[order]
        asked = {}
        for k in rt.client_ids:
            want = shared[k]["want"]
            pos = torch.searchsorted(ids, want).clamp(max=max(ids.numel() - 1, 0))
            found = pos[ids[pos] == want] if ids.numel() else pos[:0]
            asked[k] = {"ids": ids[found], "x": x[found]}
        mended = rt.call("fedsage.exact_mend", asked, phase="pretrain")
        self.generated = {k: v["generated"] for k, v in mended.items()}

    def generator_step(self, epoch: int, batch: int, rng: np.random.Generator) -> None:
        """One federated NeighGen step: share, cross-client scoring, local step (three calls)."""
        opts, rt = options_of(self.config), self.runtime
        ids = rt.client_ids
        t0 = time.perf_counter()
        shared = rt.call("fedsage.gen_share", {"epoch": epoch, "batch": batch}, phase="pretrain")
        scorers = {i: self._scorers(i, ids, opts.cross_clients, rng) for i in ids}
        asked = {j: {"others": {i: shared[i] for i in ids if j in scorers[i]}} for j in ids}
        cross = rt.call("fedsage.gen_cross", asked, phase="pretrain")
        steps = rt.call("fedsage.gen_step", {i: {"grads": [cross[j]["grads"][i] for j in scorers[i]]}
                                     for i in ids}, phase="pretrain")
        self.generator_log.append({
            "epoch": epoch, "batch": batch,
            "loss": float(np.mean([steps[i]["loss"] for i in ids])),
            "cross_loss": float(np.mean([v for j in ids for v in cross[j]["loss"].values()]
                                        or [0])),
            "seconds": time.perf_counter() - t0})

    @staticmethod
    def _scorers(i: int, ids: list[int], k: int, rng: np.random.Generator) -> list[int]:
        others = [j for j in ids if j != i]
        if k == 0 or k >= len(others):
            return others
        return sorted(rng.choice(others, size=k, replace=False).tolist())
