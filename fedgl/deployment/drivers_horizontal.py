"""What the deployed server needs, beyond FedGCN's, to run the other horizontal algorithms.

A deployed server knows only the shards' public facts (each client's node count, the feature and
class widths); everything else comes through protocol messages. The algorithms below need
nothing more:

- **FedAvg** is ``fedgcn`` with ``hops: 0`` (no pre-training exchange); it runs deployed as
  FedGCN does.
- **FedGAT** and its baseline **DistGAT**: the FedAvg driver with the GAT's initial weights
  (from the widths and the seed) and the run's seed for the degree cap. FedGAT's pre-training
  exchange is messages only: the clients upload their nodes' features and incident edges, the
  server sends each client the rows (``fast``) or matrices (``protocol``) its layers need.
- **The mini-batch baselines** of Swift-FedGNN (FedGNN-G, local-only, LLCG, FedGNN-PNS): the
  mini-batch FedSGD server with their schedule, built from the configuration alone
  (:func:`minibatch_schedule`); the graph's node count is the sum of the shards' sizes.
- **FedSage+**: the FedAvg driver with FedSage+'s server, which relays the generators'
  parameters, latents and gradients between the clients (messages only).

The two drivers: :func:`run_fedavg` (FedGCN, FedAvg, FedGAT, DistGAT, FedSage+: pre-training
exchange, then FedAvg rounds) and :func:`run_minibatch` (Swift-FedGNN and its baselines), each
resumed and checkpointed as the local runners do (:mod:`fedgl.deployment.driving`).

The algorithms left simulation-only, and why, are :data:`fedgl.deployment.party.SIMULATION_ONLY`.
"""

from __future__ import annotations

import time
from typing import Any

from fedgl.algorithms.fedgat.common import gat_initial_weights
from fedgl.algorithms.fedgat.server import FedGATServer, GATFedAvgServer
from fedgl.algorithms.minibatch.server import Schedule
from fedgl.algorithms.minibatch.settings import MiniBatchSettings
from fedgl.algorithms.runner import (
    _resume,
    divergence,
    finish_repeat,
    initial_weights_for,
    network_columns,
    round_progress,
    wire_server,
)
from fedgl.checkpoint import RepeatProgress
from fedgl.config import Config
from fedgl.deployment.driving import (
    Continuation,
    bytes_now,
    continuation,
    log_phase,
    log_round,
    phase_seconds,
    resume_keeping_setup,
)
from fedgl.deployment.party import load_class
from fedgl.federation.aggregate import FedAvg, State


class _DeployedGAT:
    """A GAT server as the deployed FedAvg driver builds one: the driver's constructor
    signature, the GAT's initial weights (:meth:`deployed_initial_weights`) and the run's seed
    (a deployed run is one repeat, whose seed is ``config.seed``)."""

    pretrain_stats: dict

    def __init__(self, runtime: Any, strategy: FedAvg, init_weights: State,
                 config: Config) -> None:
        super().__init__(runtime, strategy, init_weights, config,  # type: ignore[call-arg]
                         seed=int(config.seed))

    @staticmethod
    def deployed_initial_weights(num_features: int, num_classes: int, cfg: Config,
                                 seed: int) -> State:
        """The GAT's seeded initial model, from the widths the clients reported."""
        return gat_initial_weights(cfg, num_features, num_classes, seed)

    def result_extra(self) -> dict[str, Any]:
        """What the local GAT driver records beside the history (FedGAT's pre-training
        figures)."""
        return {"fedgat": self.pretrain_stats} if self.pretrain_stats else {}


class DeployedFedGATServer(_DeployedGAT, FedGATServer):
    """FedGAT's server (pre-training exchange, then FedAvg) in a deployed run."""


class DeployedDistGATServer(_DeployedGAT, GATFedAvgServer):
    """DistGAT's server (FedAvg of exact GATs on the clients' own subgraphs) deployed."""


def minibatch_schedule(cfg: Config, settings: MiniBatchSettings) -> tuple[Schedule, int]:
    """The FedSGD schedule of a mini-batch algorithm (Swift-FedGNN or one of its baselines)
    and its FedGNN-PNS cache fan-out (-1: no cache), from the configuration alone."""
    if cfg.algorithm == "swift-fedgnn":
        from fedgl.algorithms.swift_fedgnn.server import swift_schedule

        return swift_schedule(cfg, settings), -1
    from fedgl.algorithms.minibatch_baselines.runner import baseline_schedule

    return baseline_schedule(cfg.algorithm, cfg, settings)


def shard_stats(facts: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The result's split statistics, from the shards' public facts."""
    return {"clients": len(facts),
            "nodes_per_client": [facts[k]["num_nodes"] for k in sorted(facts)]}


def run_fedavg(runtime: Any, cfg: Config, facts: dict[int, dict[str, Any]],
               seed: int, num_features: int, num_classes: int, t0: float, server_path: str
               ) -> Any:
    """A FedAvg-style algorithm (FedGCN, FedGAT, FedSage+): pre-training exchange, then FedAvg
    rounds, resumed and checkpointed as :func:`fedgl.algorithms.runner.run_federated` does. A
    server class may bring its model's initial weights (``deployed_initial_weights``, as the
    GAT servers above do); the default is the configured GCN/SAGE's."""
    server_cls = load_class(server_path)
    init = getattr(server_cls, "deployed_initial_weights", initial_weights_for)
    server = wire_server(runtime, server_cls, init(num_features, num_classes, cfg, seed), cfg, seed,
                         secure_mode=cfg.secure_sum, secagg_threshold=cfg.secagg_threshold,
                         secure_models=cfg.secure_models)
    cont = continuation(runtime)
    setup_seconds = time.perf_counter() - t0
    history: list[dict] = []
    events: list[dict] = []
    start = 1
    if cont.progress is None:
        server.pretrain()
        if runtime.ledger.messages("pretrain"):
            log_phase(runtime, "pretrain", "pre-training")
    else:
        start, history, events = resume_keeping_setup(runtime, _resume, server, cont.progress)
    ledger = runtime.ledger
    per_round: list[dict] = []
    seen = bytes_now(runtime)
    seen_events = 0
    for t, weights, metrics in server.rounds(start):
        row = {"round": t, **metrics, **network_columns(ledger)}
        history.append(row)
        now = bytes_now(runtime)
        per_round.append({"round": t, **{k: now[k] - seen[k] for k in now}})
        seen = now
        divergence(t, weights, row["train_loss"], cfg)
        log_round(runtime, t, int(cfg.rounds), row)
        events += [{**e, "round": t} for e in runtime.events[seen_events:]]
        seen_events = len(runtime.events)
        if cont.checkpointer is not None:
            cont.checkpointer.round_done(round_progress(server, 0, seed, t, weights, history,
                                                        events))
    seconds = phase_seconds(ledger, setup_seconds, t0)
    rep = finish_repeat(0, seed, shard_stats(facts), history, ledger.summary(), seconds)
    if hasattr(server, "result_extra"):
        rep.extra.update(server.result_extra())
    rep.extra["failures"] = events
    rep.extra.update(privacy_extra(server, cfg, cont))
    rep.extra["flower"] = {"per_round": per_round}
    return rep


def privacy_extra(server: Any, cfg: Config, cont: Continuation) -> dict[str, Any]:
    """FedGCN's ``extra.privacy`` as a local run records it; DP counts every release: those the
    server received (this attempt, and earlier ones via the checkpoint) and those the clients
    logged before sending (reported at set-up: earlier attempts' releases after the last
    checkpoint)."""
    if cfg.algorithm != "fedgcn":
        return {}
    from fedgl.privacy.dp import merge_releases
    from fedgl.privacy.leakage import privacy_settings

    stats = getattr(server, "privacy_stats", None)
    if stats is not None and cfg.dp_epsilon is not None:
        stats["dp_releases"] = merge_releases(stats.get("dp_releases", {}), cont.logged)
    out = privacy_settings(cfg, server)
    if "secagg" in out:
        out["secagg"]["identities"] = ("Ed25519 roster from the organisations' files (fedgl "
                                       "keys); each party loads its own key")
    return {"privacy": out}


def run_minibatch(runtime: Any, cfg: Config, facts: dict[int, dict[str, Any]],
                  seed: int, num_features: int, num_classes: int, t0: float) -> Any:
    """The mini-batch FedSGD server (Swift-FedGNN or a baseline: mini-batch steps,
    server-mediated cross-client steps, the algorithm's schedule)."""
    from types import SimpleNamespace

    from fedgl.algorithms.minibatch.runner import initial_weights, minibatch_extra
    from fedgl.algorithms.minibatch.server import FedSGDServer
    from fedgl.algorithms.minibatch.settings import MiniBatchSettings
    from fedgl.federation.network import NetworkModel

    s = MiniBatchSettings.from_config(cfg)
    widths = SimpleNamespace(num_features=num_features, num_classes=num_classes)
    ledger = runtime.ledger
    ledger.network = NetworkModel.from_strings(getattr(cfg, "bandwidth", ""),
                                               getattr(cfg, "latency", ""))
    # the shards partition every node, so their sizes add up to the graph's
    num_nodes = sum(int(f["num_nodes"]) for f in facts.values())
    schedule, pns_fanout = minibatch_schedule(cfg, s)
    server = FedSGDServer(runtime, s, initial_weights(widths, s, seed), schedule,
                          seed=seed, optimizer=cfg.server_optimizer, num_nodes=num_nodes,
                          eval_mode=cfg.eval_mode, pns_fanout=pns_fanout,
                          eval_batch=int(getattr(cfg, "eval_batch", 0)))
    setup_seconds = time.perf_counter() - t0
    cont = continuation(runtime)
    history: list[dict] = []
    comm_bytes: list[int] = []
    events: list[dict] = []
    start = 0
    if cont.progress is None:
        server.setup()
    else:
        from fedgl.algorithms.minibatch.runner import _resume as resume_minibatch

        start, history, comm_bytes, events = resume_keeping_setup(runtime, resume_minibatch,
                                                                   server, cont.progress)
    ledger = runtime.ledger
    seen_events = 0
    for t, weights, metrics in server.iterations(start, int(cfg.eval_every), int(cfg.rounds)):
        if metrics.pop("communicating"):
            comm_bytes.append(metrics["iteration_bytes"])
        history.append({"round": t + 1, **metrics, "train_bytes": ledger.bytes("train"),
                        **network_columns(ledger)})
        divergence(t + 1, weights, history[-1]["train_loss"], cfg)
        log_round(runtime, t + 1, int(cfg.rounds), history[-1])
        events += [{**e, "round": t + 1} for e in runtime.events[seen_events:]]
        seen_events = len(runtime.events)
        if cont.checkpointer is not None:
            cont.checkpointer.round_done(RepeatProgress(
                0, seed, t + 1, weights, history, ledger.state_dict(), events,
                server={**server.state_dict(), "comm_bytes": list(comm_bytes)}))
    seconds = phase_seconds(ledger, setup_seconds, t0)
    rep = finish_repeat(0, seed, shard_stats(facts), history, ledger.summary(), seconds)
    rep.extra.update(minibatch_extra(server, history, comm_bytes, cfg))
    rep.extra["failures"] = events
    return rep
