"""Drives one repeat of an algorithm: set-up, pre-training, rounds, oracle scoring, result.

The driver is the experimenter, not a party: it partitions the graph, hands each client its
:class:`ClientData`, starts the server, and (outside the federation) scores each round's global
model on the full graph for the labelled oracle metric. The server itself knows no more of the
graph than a deployed one: its set-up (:func:`start_server`, the same function on Flower) learns
the clients' widths through ``setup.facts`` (:mod:`fedgl.federation.facts`).
"""

from __future__ import annotations

import copy
import math
import resource
import time
from collections.abc import Callable

import torch

from fedgl.algorithms.base import FedAvgServer, GNNClient
from fedgl.algorithms.fedavg_driver import drive_fedavg
from fedgl.algorithms.watch import progress_watch
from fedgl.checkpoint import Checkpointer, RepeatProgress, check_weights
from fedgl.config import Config
from fedgl.data.client_data import split_graph
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition
from fedgl.data.shards import ShardSpec, make_partition, write_client_shards
from fedgl.errors import ConfigError, DivergenceError
from fedgl.evaluation import OracleEvaluator
from fedgl.federation.aggregate import FedAvg, State
from fedgl.federation.client_sampling import ClientSampler
from fedgl.federation.facts import Facts, learn_facts
from fedgl.federation.ledger import Ledger
from fedgl.federation.network import NetworkModel
from fedgl.federation.runtime import LocalRuntime, Runtime
from fedgl.models import build_model
from fedgl.privacy.leakage import privacy_extra
from fedgl.privacy.leakage_job import start_leakage_report
from fedgl.progress import RoundProgress
from fedgl.results import RepeatResult


def initial_weights(graph: GraphData, cfg: Config, seed: int) -> dict[str, torch.Tensor]:
    return initial_weights_for(graph.num_features, graph.num_classes, cfg, seed)


def initial_weights_for(num_features: int, num_classes: int, cfg: Config,
                        seed: int) -> dict[str, torch.Tensor]:
    """The seeded initial global model for the given input and output widths (a deployed
    server knows only these, from the clients)."""
    torch.manual_seed(seed)
    model = build_model(cfg.model, num_features, cfg.hidden, num_classes, cfg.layers, cfg.dropout)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def build_federation(graph: GraphData, part: Partition, cfg: Config, seed: int,
                     client_cls: type[GNNClient], server_cls: type[FedAvgServer], *,
                     secure_mode: str | None = None, secagg_threshold: int | None = None,
                     secure_models: bool | None = None) -> FedAvgServer:
    """Start the clients on the configured runtime and return the server wired to them
    (``server.runtime.ledger`` counts everything from here on).

    ``local``: the driver hands every in-process client its :class:`ClientData`. ``ray``: the
    driver writes one shard file per client and every actor loads only its own (digest-checked).

    With a secure sum or encrypted models, the driver, as the experimenter, also makes the
    roster and hands every client its identity key (:mod:`fedgl.privacy.identity`); the server
    never sees a private identity key. ``secure_models``: FedAvg models travel only inside secure
    sums (mask or robust). The keyword arguments override the configuration's privacy keys.
    """
    mode = secure_mode or cfg.secure_sum
    if secagg_threshold is None:
        secagg_threshold = getattr(cfg, "secagg_threshold", 0)
    if secure_models is None:
        secure_models = getattr(cfg, "secure_models", False)
    identities = None
    if mode != "none" or cfg.encrypt_models:
        from fedgl.privacy.identity import make_roster

        roster, idents = make_roster(range(part.num_clients))
        client_mode = mode if mode in ("mask", "robust") else "auth"
        identities = {k: (idents[k], roster, client_mode, secagg_threshold, secure_models)
                      for k in idents}
    if cfg.runtime == "ray":
        from fedgl.federation.ray_runtime import RayRuntime

        # each actor gets only its own shard file (and its digest), never the whole graph
        shards = write_client_shards(graph, part, cfg, seed)
        specs = {k: ShardSpec(cfg.to_dict(), seed, k, "", "", "",
                              identity=_provision(identities, k), shard_path=shards[k][0],
                              shard_sha256=shards[k][1])
                 for k in range(part.num_clients)}
        runtime: Runtime = RayRuntime(specs, client_cls, cfg, Ledger())
    else:
        # every party its own copy of the configuration: no object shared between parties
        clients = {d.client_id: client_cls(d, copy.deepcopy(cfg), seed)
                   for d in split_graph(graph, part)}
        if identities is not None:
            for k, client in clients.items():
                client.install_identity(*identities[k])
        runtime = LocalRuntime(clients, Ledger(), batch=cfg.batch_clients)
    return start_server(runtime, server_cls, cfg, seed, secure_mode=mode,
                        secagg_threshold=secagg_threshold, secure_models=secure_models)[0]


#: a server class's initial model for the clients' widths: ``(num_features, num_classes, cfg,
#: seed) -> state dict`` (a class attribute ``initial_weights`` of that signature, else the
#: configured GCN/SAGE's, :func:`initial_weights_for`)
InitialWeights = Callable[[int, int, Config, int], dict[str, torch.Tensor]]


def start_server(runtime: Runtime, server_cls: type[FedAvgServer], cfg: Config, seed: int, *,
                 secure_mode: str, secagg_threshold: int, secure_models: bool
                 ) -> tuple[FedAvgServer, Facts]:
    """The server-side set-up of a FedAvg-style algorithm on any runtime (local, Ray, a Flower
    deployment): the clients' public facts through ``setup.facts``
    (:func:`fedgl.federation.facts.learn_facts`: one feature width and class count, or the run
    stops in one line), the seeded initial model for those widths (``server_cls.initial_weights``
    where the class brings its own model), and the server wired to the runtime
    (:func:`wire_server`). Closes the runtime if the set-up fails."""
    try:
        facts = learn_facts(runtime, "horizontal")
    except BaseException:
        runtime.close()
        raise
    init: InitialWeights = getattr(server_cls, "initial_weights", initial_weights_for)
    server = wire_server(runtime, server_cls,
                         init(facts.num_features, facts.num_classes, cfg, seed), cfg, seed,
                         secure_mode=secure_mode, secagg_threshold=secagg_threshold,
                         secure_models=secure_models)
    return server, facts


def wire_server(runtime: Runtime, server_cls: type[FedAvgServer], init: dict[str, torch.Tensor],
                cfg: Config, seed: int, *, secure_mode: str, secagg_threshold: int,
                secure_models: bool) -> FedAvgServer:
    """The server of ``server_cls`` over a started ``runtime`` (any transport: local, Ray, a
    Flower deployment), with the configured client sampling, secure-sum mode and network
    model. Closes the runtime if the server cannot be built."""
    mode = secure_mode
    try:
        server = server_cls(runtime, FedAvg(cfg.aggregation), init, copy.deepcopy(cfg))
    except BaseException:
        runtime.close()
        raise
    runtime.on_client_restart = server.restore_client
    per_round = int(getattr(cfg, "clients_per_round", 0))
    if per_round:
        server.client_sampler = ClientSampler(per_round, seed)
    if hasattr(server, "secure_mode"):
        from fedgl.privacy.secagg_server import SecureSumServer

        server.secure_mode = mode
        server.secagg = SecureSumServer(mode if mode in ("mask", "robust") else "mask",
                                        secagg_threshold)
    if secure_models:
        from fedgl.privacy.secagg_server import SecureSumServer
        from fedgl.privacy.secure_models import SecureFedAvg

        if mode not in ("mask", "robust"):
            raise ConfigError("secure model averaging needs the mask or robust secure sum")
        server.strategy = SecureFedAvg(cfg.aggregation, runtime,
                                       SecureSumServer(mode, secagg_threshold), server.weights)
    runtime.ledger.network = NetworkModel.from_strings(getattr(cfg, "bandwidth", ""),
                                                       getattr(cfg, "latency", ""))
    return server


def _provision(identities: dict | None, k: int) -> dict | None:
    """Client k's identity key (private), the roster, mode and threshold as plain data."""
    if identities is None:
        return None
    ident, roster, mode, threshold, models = identities[k]
    return {"key": ident.private_bytes(), "roster": roster.to_dict(), "mode": mode,
            "threshold": threshold, "secure_models": models}


RoundCallback = Callable[[int, int, FedAvgServer], None]


def run_federated(graph: GraphData, cfg: Config, *, repeat: int, seed: int,
                  client_cls: type[GNNClient], server_cls: type[FedAvgServer],
                  progress: RoundProgress, resume_from: RepeatProgress | None = None,
                  checkpointer: Checkpointer | None = None,
                  on_round: RoundCallback | None = None,
                  oracle: Callable[[State], dict] | None = None) -> RepeatResult:
    """One seeded run of a FedAvg-style algorithm, optionally resumed from a checkpoint.

    ``oracle`` scores the global model on the full graph at evaluated rounds when
    ``cfg.oracle_eval`` is on (default: the GCN/SAGE :class:`OracleEvaluator`)."""
    t0 = time.perf_counter()
    part = make_partition(graph, cfg, seed)
    server = build_federation(graph, part, cfg, seed, client_cls, server_cls)
    runtime = server.runtime
    report = None
    try:
        report = start_leakage_report(graph, part, cfg)   # beside training: needs no model
        if not cfg.oracle_eval:
            oracle = None
        elif oracle is None:
            oracle = OracleEvaluator(graph, cfg)

        watch = progress_watch(progress, f"{cfg.algorithm} repeat {repeat + 1}/{cfg.repeats}",
                               cfg.rounds, repeat=repeat, on_round=on_round, oracle=oracle)
        result = drive_fedavg(server, cfg, repeat=repeat, seed=seed,
                              part_stats=part.stats(graph), t0=t0, resume=resume_repeat,
                              resume_from=resume_from, checkpointer=checkpointer, watch=watch)
        if hasattr(runtime, "placement"):
            result.extra["placement"] = {str(k): v for k, v in runtime.placement().items()}
        if hasattr(runtime, "peak_rss_mb"):
            result.extra["client_peak_rss_mb"] = {str(k): v
                                                   for k, v in runtime.peak_rss_mb().items()}
        if cfg.dp_epsilon is not None:
            _count_logged_releases(server, cfg, seed)
        privacy = privacy_extra(graph, part, cfg, server, leakage=False)
        runtime.close()
        server = None
        result.extra.update(privacy)
        if report is not None:     # the experimenter's analysis over the whole graph
            result.extra["leakage"] = report.result()
        return result
    finally:
        runtime.close()
        if report is not None:
            report.close()


def network_columns(ledger: Ledger) -> dict[str, float]:
    """History columns for time- and bytes-to-accuracy when a simulated network is on
    (``bandwidth``): cumulative training bytes and simulated training seconds (none otherwise,
    so that runs without a network keep their recorded histories)."""
    if ledger.network is None:
        return {}
    return {"train_bytes": ledger.bytes("train"), "sim_seconds": ledger.simulated_seconds("train")}


def divergence(t: int, weights: object, loss: object, cfg: Config) -> dict | None:
    """None while training is finite. A non-finite model weight or an infinite loss (a NaN loss
    with finite weights only means no client trained) raises :class:`DivergenceError`, or with
    ``cfg.allow_divergence`` returns what to record: ``{"round", "what"}``."""
    what = []
    if isinstance(loss, float) and math.isinf(loss):
        what.append(f"training loss {loss}")
    if isinstance(weights, dict):
        bad = [k for k, v in weights.items() if isinstance(v, torch.Tensor)
               and v.is_floating_point() and not bool(torch.isfinite(v).all())]
        if bad:
            what.append(f"model weights ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''})")
    if not what:
        return None
    record = {"round": t, "what": " and ".join(what)}
    if not getattr(cfg, "allow_divergence", False):
        raise DivergenceError(
            f"training diverged at round {t}: non-finite {record['what']}; lower --lr (now "
            f"{cfg.lr:g}) or check the inputs and noise settings, or pass --allow-divergence to "
            "record it in the result (a checkpoint written before this round still resumes)")
    return record


def round_progress(server: FedAvgServer, repeat: int, seed: int, round_: int, weights: dict,
                   history: list[dict], events: list[dict], *, ledger: Ledger | None = None,
                   rides: bool = False) -> RepeatProgress:
    """A FedAvg-style server's checkpoint after ``round_``: the model, history, ledger (``ledger``:
    as of the end of the round, default the runtime's), events, DP releases so far, and the
    clients it refused (``on_client_failure: drop``), so that a resumed run leaves them out as
    the uninterrupted one does. ``rides``: the round's evaluation rode on the next round's fit,
    which a resume sends with that request again."""
    releases = getattr(server, "privacy_stats", {}).get("dp_releases", {})
    refused = getattr(server, "refused", {})
    state = {"refused": {str(k): str(v) for k, v in refused.items()},
             "refusal_log": list(getattr(server, "refusal_log", []))} if refused else {}
    if rides:
        state["evaluation_rides"] = True
    return RepeatProgress(repeat, seed, round_, weights, history,
                          (ledger or server.runtime.ledger).state_dict(), events,
                          {k: list(v) for k, v in releases.items()}, server=state)


def resume_repeat(server: FedAvgServer, state: RepeatProgress) -> tuple[int, list[dict], list[dict]]:
    """Rebuild client state (pre-training re-run without the clients refused before the
    checkpoint, on a scratch ledger so the restored totals equal an uninterrupted run's) and
    restore the server's model, history and ledger."""
    runtime = server.runtime
    refused = (state.server or {}).get("refused", {})
    if refused:
        server.refused = {int(k): str(v) for k, v in refused.items()}
        server.refusal_log = [str(x) for x in state.server.get("refusal_log", [])]
    network = runtime.ledger.network
    scratch = Ledger()
    runtime.ledger = scratch
    server.pretrain()  # DP: every client releases again (fresh noise); the count keeps both
    stats = getattr(server, "privacy_stats", None)
    if stats is not None and state.dp_releases:
        from fedgl.privacy.dp import merge_releases

        stats["dp_releases"] = merge_releases(state.dp_releases, stats.get("dp_releases", {}))
    runtime.ledger = Ledger.from_state_dict(state.ledger)
    runtime.ledger.network = network  # the simulated clock continues from the checkpoint
    server.resume_ride = bool((state.server or {}).get("evaluation_rides", False))
    check_weights(state.weights, server.weights)
    server.weights = {k: v.clone() for k, v in state.weights.items()}
    events = list(state.events) + [{
        "action": "resumed", "round": state.round,
        "note": "pre-training exchange re-run to rebuild client state; its bytes are not "
                "added to the ledger totals",
        "pretrain_bytes_rerun": scratch.bytes("pretrain")}]
    return state.round + 1, list(state.history), events


def _count_logged_releases(server: FedAvgServer, cfg: Config, seed: int) -> None:
    """DP accounting over every release of this repeat: what the server received (this attempt
    and, via the checkpoint, earlier ones) united with what the clients logged before sending
    (:func:`fedgl.privacy.dp.record_release`), which also holds releases of attempts that
    crashed before their next checkpoint."""
    from fedgl.privacy.dp import logged_releases, merge_releases

    stats = getattr(server, "privacy_stats", None)
    if stats is None:
        return
    stats["dp_releases"] = merge_releases(stats.get("dp_releases", {}),
                                          logged_releases(cfg.out, seed))


def finish_repeat(repeat: int, seed: int, part_stats: dict, history: list[dict],
                  ledger: dict, seconds: dict) -> RepeatResult:
    """Final metrics from a history: last evaluated round and the best-validation round."""
    evaluated = [h for h in history if "test_acc" in h]
    last = evaluated[-1] if evaluated else {}
    best = max(evaluated, key=lambda h: (_num(h.get("val_acc")), -h["round"]), default={})
    final = {
        "rounds": len(history),
        "train_loss": history[-1]["train_loss"] if history else float("nan"),
        "test_acc": last.get("test_acc", float("nan")),
        "val_acc": last.get("val_acc", float("nan")),
        "selected_round": best.get("round"),
        "selected_test_acc": best.get("test_acc", float("nan")),
        "oracle_test_acc": last.get("oracle_test_acc", float("nan")),
        "oracle_selected_test_acc": best.get("oracle_test_acc", float("nan")),
        "pretrain_bytes": ledger["bytes"]["pretrain"]["up"] + ledger["bytes"]["pretrain"]["down"],
        "train_bytes": ledger["bytes"]["train"]["up"] + ledger["bytes"]["train"]["down"],
        "pretrain_seconds": seconds.get("pretrain", 0.0),
        "train_seconds": seconds.get("train", 0.0),
    }
    if history and "sim_seconds" in history[-1]:
        final["sim_seconds"] = history[-1]["sim_seconds"]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    return RepeatResult(repeat=repeat, seed=seed, partition=part_stats, history=history,
                        final=final, ledger=ledger, seconds=seconds, peak_rss_mb=peak)


def _num(v: object) -> float:
    return float(v) if isinstance(v, int | float) and not math.isnan(v) else -1.0



#: a prediction: per client, its own nodes' global ids and their log-probabilities (eval mode)
Scores = dict[int, tuple[torch.Tensor, torch.Tensor]]


def predict_federated(graph: GraphData, cfg: Config, seed: int, weights: State,
                      client_cls: type[GNNClient], server_cls: type[FedAvgServer],
                      score: Callable[[FedAvgServer, State], None] | None = None
                      ) -> tuple[Scores, Ledger]:
    """Every client's predictions of ``weights`` on its own nodes, as the run's evaluation
    scores them: the federation is set up again in this process (the same partition and
    clients), the pre-training exchange runs as in training (the same privacy; its bytes are
    the returned ledger's), then each client predicts locally
    (:meth:`~fedgl.algorithms.base.GNNClient.predict`). The experimenter reads the in-process
    clients' predictions; deployed, each organisation computes its own and nothing is sent.
    ``score(server, weights)``: an algorithm whose evaluation is itself an exchange runs it
    instead, after which every client holds ``last_log_probs``."""
    part = make_partition(graph, cfg, seed)
    server = build_federation(graph, part, cfg, seed, client_cls, server_cls)
    runtime = server.runtime
    try:
        server.pretrain_update()
        if score is not None:
            score(server, weights)
        out: Scores = {}
        for k in runtime.client_ids:
            client = runtime.local_client(k)
            log_probs = (client.last_log_probs if score is not None
                         else client.predict(weights))
            out[k] = (client.data.node_ids.clone(), log_probs.detach().cpu())
        return out, runtime.ledger
    finally:
        runtime.close()


def predict_single_party(graph: GraphData, party: GNNClient, weights: State
                         ) -> tuple[Scores, Ledger]:
    """The one party of a centralised baseline (its local subgraph is the whole graph) scores
    every node; nothing is exchanged."""
    return {0: (party.data.node_ids.clone(), party.predict(weights).detach().cpu())}, Ledger()
