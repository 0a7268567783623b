"""The mini-batch FedSGD server and the schedules that distinguish Swift-FedGNN from its
baselines.

Iteration t (Swift-FedGNN's Algorithm 1): the schedule names the clients that do cross-client
training (``Step.cross``); every client receives θ_t and uploads one gradient; the server applies

    θ_{t+1} = Opt(θ_t, (1/M) Σ_m ∇F̃^m(θ_t))

with Adam (the paper's experiments) or plain SGD (its Algorithm 1). The server holds the model,
the optimiser state and the graph *structure* (ids, owners; never features or labels).

Every random draw of the server comes from a generator re-seeded per (seed, iteration, purpose)
(:meth:`FedSGDServer.rng`: the schedule's client choice, the cross-client sample, the PNS cache
sample, the evaluation sample), and every client re-seeds its own per (seed, client, iteration).
So the state after iteration t is the model, the optimiser state and counters
(:meth:`FedSGDServer.state_dict`), and a resumed run repeats an uninterrupted one exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from fedgl.algorithms.minibatch.settings import MiniBatchSettings
from fedgl.data.sampling import CSRGraph, sample_blocks
from fedgl.evaluation import pooled_accuracy
from fedgl.federation.aggregate import State
from fedgl.federation.cross_client import (
    Structure,
    build_plan,
    combine_partials,
    gather_structure,
    run_cross_client,
)
from fedgl.federation.messages import payload_nbytes
from fedgl.models.blocks import aggregation_kind


@dataclass
class Step:
    """What iteration t does: ``cross`` clients train cross-client on a sample with ``fanouts``
    (neighbours per hop, first layer first, as ``num_neighbors``);
    ``refresh_cache``: first refresh every client's cached remote layer-1 sums (FedGNN-PNS)."""

    cross: list[int] = field(default_factory=list)
    fanouts: list[int] = field(default_factory=list)
    refresh_cache: bool = False


class Schedule(Protocol):
    def step(self, t: int, num_clients: int, generator: torch.Generator) -> Step: ...


#: purposes of the server's per-iteration random streams (see :meth:`FedSGDServer.rng`)
CHOICE, CROSS, CACHE, EVAL = range(4)


@dataclass
class PeriodicSchedule:
    """Swift-FedGNN (and, with other values, FedGNN-G, local-only and LLCG): when
    ``t mod period == 0`` (from t = 0 as in Algorithm 1, or from t = period with
    ``cross_at_start=False`` as in the proof) ``cross_clients`` clients drawn uniformly without
    replacement train cross-client on a sample with ``fanouts``; every other client, and every
    client in the other iterations, trains locally."""

    period: int
    cross_clients: int
    fanouts: list[int]
    cross_at_start: bool = True

    def step(self, t: int, num_clients: int, generator: torch.Generator) -> Step:
        k = min(self.cross_clients, num_clients)
        if k <= 0 or t % self.period != 0 or (t == 0 and not self.cross_at_start):
            return Step()
        chosen = torch.randperm(num_clients, generator=generator)[:k]
        return Step(sorted(chosen.tolist()), list(self.fanouts))


@dataclass
class ShrinkingSchedule:
    """FedGNN-PNS: cached remote neighbours are re-sampled at t = 0 and then after intervals
    ``max(min_interval, round(interval · decay^j))`` (j = 0, 1, ...), so sampling grows more
    frequent; all iterations train locally on the local graph plus the cache. Stateless: the
    refresh iterations are a function of t alone (so a resumed run needs nothing saved)."""

    interval: int
    decay: float
    min_interval: int = 1

    def last_refresh(self, t: int) -> int:
        """The latest refresh iteration ≤ t."""
        at, j = 0, 0
        while True:
            nxt = at + max(self.min_interval, round(self.interval * self.decay ** j))
            if nxt > t:
                return at
            at, j = nxt, j + 1

    def step(self, t: int, num_clients: int, generator: torch.Generator) -> Step:
        return Step(refresh_cache=True) if self.last_refresh(t) == t else Step()


class FedSGDServer:
    """Drives mini-batch FedSGD iterations through a runtime (see module docstring)."""

    def __init__(self, runtime: Any, settings: MiniBatchSettings, init_weights: State,
                 schedule: Schedule, *, seed: int, optimizer: str = "adam",
                 num_nodes: int | None = None, eval_mode: str = "cross",
                 pns_fanout: int = -1, eval_batch: int = 0) -> None:
        self.runtime = runtime
        self.s = settings
        self.kind = aggregation_kind(settings.model)
        self.schedule = schedule
        self.weights = {k: v.clone() for k, v in init_weights.items()}
        self.num_nodes = num_nodes
        self.eval_mode = eval_mode
        self.pns_fanout = pns_fanout
        self.eval_batch = eval_batch
        self.seed = seed
        self.generator = torch.Generator()
        self.structure: Structure | None = None
        self._remote_csr: CSRGraph | None = None
        self._names: list[str] = []
        self._opt_params: dict[str, torch.Tensor] = {}
        self.optimizer_name = optimizer
        self.tally: dict[str, int] = {}
        self.aggregates = {"aggregates": 0, "single_node_aggregates": 0}
        self.comm_iterations = 0

    def rng(self, t: int, purpose: int) -> torch.Generator:
        """The server's generator, re-seeded for iteration ``t`` and ``purpose`` (CHOICE, CROSS,
        CACHE, EVAL): seed ``(s·104729 + 13 + t·7919·4 + purpose) mod 2⁶³``, a function of
        (seed, t, purpose) only."""
        return self.generator.manual_seed(
            (self.seed * 104_729 + 13 + (t * 4 + purpose) * 7_919) % (2**63 - 1))

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs beyond the weights: the optimiser state (by parameter
        name) and the communication counters."""
        opt = self.opt.state_dict() if self._opt_params else None
        return {"optimizer": opt, "param_names": list(self._names), "tally": dict(self.tally),
                "aggregates": dict(self.aggregates), "comm_iterations": self.comm_iterations}

    def load_state_dict(self, weights: State, state: dict[str, Any]) -> None:
        self.weights = {k: v.clone() for k, v in weights.items()}
        self._opt_params = {}
        if state.get("optimizer") is not None:
            self._optimizer(list(state["param_names"]))
            self.opt.load_state_dict(state["optimizer"])
        self.tally = dict(state["tally"])
        self.aggregates = dict(state["aggregates"])
        self.comm_iterations = int(state["comm_iterations"])

    def rebuild_clients(self, start: int) -> None:
        """Resume before iteration ``start``: re-create client state that outlives an
        iteration. Only FedGNN-PNS has any (each client's cache of remote sums): re-run the
        latest refresh with that iteration's random stream (bytes and tallies are restored
        afterwards from the checkpoint, so they are not counted twice)."""
        last = getattr(self.schedule, "last_refresh", None)
        if last is not None and start > 0:
            self._refresh_cache(last(start - 1))

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        """Gather the structure (ids only) and start the optimiser on the model parameters."""
        with self.runtime.ledger.timer("pretrain"):
            self.structure = gather_structure(self.runtime, self.num_nodes)
        self.tally["structure"] = self.runtime.ledger.bytes("pretrain")

    def _optimizer(self, names: list[str]) -> None:
        self._names = names
        self._opt_params = {n: self.weights[n].clone().requires_grad_(True) for n in names}
        params = list(self._opt_params.values())
        if self.optimizer_name == "adam":
            self.opt: torch.optim.Optimizer = torch.optim.Adam(params, lr=self.s.lr,
                                                               weight_decay=self.s.weight_decay)
        else:
            self.opt = torch.optim.SGD(params, lr=self.s.lr, weight_decay=self.s.weight_decay)

    def _apply(self, grads: list[dict[str, torch.Tensor]], num_clients: int) -> None:
        if not self._opt_params:
            self._optimizer(sorted(grads[0]))
        for n, p in self._opt_params.items():
            p.grad = torch.stack([g[n] for g in grads]).sum(0) / num_clients
        self.opt.step()
        for n, p in self._opt_params.items():
            self.weights[n] = p.detach().clone()

    # ------------------------------------------------------------------ iterations
    def iteration(self, t: int) -> dict[str, Any]:
        """One synchronous iteration; returns its metrics."""
        rt = self.runtime
        clients = rt.client_ids
        step = self.schedule.step(t, len(clients), self.rng(t, CHOICE))
        before = rt.ledger.bytes("train")
        if step.refresh_cache:
            self._refresh_cache(t)
        if not step.cross:
            res = rt.call("minibatch.step", {"weights": self.weights, "iteration": t}, phase="train")
        else:
            chosen = set(step.cross)
            begun = rt.call("minibatch.begin", {k: {"weights": self.weights, "iteration": t,
                                          "cross": k in chosen} for k in clients}, phase="train")
            self._cross(t, step, begun)
            res = rt.call("minibatch.finish", {k: {"local": k not in chosen} for k in clients}, phase="train")
        ordered = [res[k] for k in sorted(res)]
        self._apply([r["grad"] for r in ordered], len(clients))
        sent = rt.ledger.bytes("train") - before
        communicating = bool(step.cross) or step.refresh_cache
        self.comm_iterations += int(communicating)
        losses = [r["loss"] for r in ordered if r["count"]]
        return {"train_loss": sum(losses) / len(losses) if losses else float("nan"),
                "cross_clients": len(step.cross), "iteration_bytes": sent,
                "communicating": communicating}

    def _cross(self, t: int, step: Step, begun: dict[int, dict]) -> None:
        """Algorithm 2 for the chosen clients, all batches sampled together (one group each)."""
        assert self.structure is not None
        batches = [begun[k]["batch"] for k in step.cross]
        seeds = torch.cat(batches)
        groups = torch.repeat_interleave(torch.arange(len(batches)),
                                         torch.tensor([b.numel() for b in batches]))
        blocks = sample_blocks(self.structure.csr, seeds, step.fanouts, self.rng(t, CROSS),
                               groups=groups)
        plan = build_plan(blocks, self.structure.owner)
        self.aggregates["aggregates"] += plan.stats["aggregates"]
        self.aggregates["single_node_aggregates"] += plan.stats["single_node_aggregates"]
        run_cross_client(self.runtime, plan, self.kind, train=True, tally=self.tally)

    def _refresh_cache(self, t: int) -> None:
        """FedGNN-PNS: every node draws up to ``pns_fanout`` cross-client neighbours; their
        owners send (sum, count) of raw features through the server; owners cache them."""
        assert self.structure is not None
        if self._remote_csr is None:
            csr, owner = self.structure.csr, self.structure.owner
            dst = torch.repeat_interleave(torch.arange(csr.num_nodes),
                                          (csr.indptr[1:] - csr.indptr[:-1]).long())
            src = csr.indices.long()
            remote = owner[src] != owner[dst]
            self._remote_csr = CSRGraph.from_edge_index(torch.stack([src[remote], dst[remote]]),
                                                        csr.num_nodes)
        seeds = torch.arange(self._remote_csr.num_nodes)
        seeds = seeds[self.structure.owner >= 0]
        blocks = sample_blocks(self._remote_csr, seeds, [self.pns_fanout], self.rng(t, CACHE))
        plan = build_plan(blocks, self.structure.owner)
        self.aggregates["aggregates"] += plan.stats["aggregates"]
        self.aggregates["single_node_aggregates"] += plan.stats["single_node_aggregates"]
        rt = self.runtime
        partials = rt.call("crossclient.begin", {c: {"control": plan.control[c], "kind": "mean",
                                             "train": False} for c in plan.parties},
                           phase="train", clients=plan.parties)
        recv = combine_partials(plan.routes[0], partials, True)
        args = {c: {"recv": recv[c]} for c in plan.parties}
        rt.call("minibatch.pns_cache", args, phase="train", clients=plan.parties)
        nbytes = sum(payload_nbytes(a) for a in args.values())
        nbytes += sum(payload_nbytes(p) for p in partials.values())
        nbytes += sum(payload_nbytes(plan.control[c]) for c in plan.parties)
        self.tally["cache_refresh"] = self.tally.get("cache_refresh", 0) + nbytes

    def iterations(self, start: int = 0, eval_every: int = 1, total: int = 1
                   ) -> Iterator[tuple[int, State, dict]]:
        """Yield ``(t, weights, metrics)`` after every iteration ``t`` from ``start``; evaluation
        metrics on every ``eval_every``-th and the last iteration."""
        for t in range(start, total):
            with self.runtime.ledger.timer("train"):
                metrics = self.iteration(t)
            if (t + 1) % eval_every == 0 or t == total - 1:
                metrics.update(self.evaluate(t))
            yield t, self.weights, metrics

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, t: int = 0) -> dict[str, float]:
        """Accuracy of θ on every client's labelled nodes. ``cross``: full-neighbour inference
        through the same server-mediated exchange (exactly the centralised model on the global
        graph; counted in the ``eval`` phase); ``local``: each client on its own subgraph."""
        rt = self.runtime
        with rt.ledger.timer("eval"):
            if self.eval_mode == "local":
                res = rt.call("minibatch.evaluate", {"weights": self.weights}, phase="eval")
            else:
                rt.call("minibatch.load", {"weights": self.weights}, phase="eval")
                ids = rt.call("minibatch.eval_nodes", phase="eval")
                res = self.cross_forward(torch.cat([ids[k]["ids"] for k in sorted(ids)]), t)
        return pooled_accuracy(res)

    def cross_forward(self, seeds: Tensor, t: int = 0,
                      on_chunk: Callable[[], None] | None = None) -> dict[int, dict]:
        """Full-neighbour (or ``eval_num_neighbors``) inference of the loaded model at
        ``seeds`` through the server-mediated exchange, in chunks of ``eval_batch``; each
        party's counts summed over the chunks. ``on_chunk()`` after each chunk (the parties
        then hold that chunk's ``last_output``)."""
        assert self.structure is not None
        rt = self.runtime
        fan = list(self.s.eval_num_neighbors) or [-1] * self.s.layers
        res: dict[int, dict] = {}
        step = self.eval_batch or max(1, seeds.numel())
        for chunk in torch.split(seeds, step):
            blocks = sample_blocks(self.structure.csr, chunk, fan, self.rng(t, EVAL))
            plan = build_plan(blocks, self.structure.owner)
            part = run_cross_client(rt, plan, self.kind, train=False, phase="eval")
            if on_chunk is not None:
                on_chunk()
            for k, r in part.items():
                if k in res:
                    res[k] = {key: [a + b for a, b in zip(res[k][key], r[key], strict=True)]
                              for key in ("correct", "total")}
                else:
                    res[k] = r
        return res
