"""Runs one seeded repeat of GLASU or one of its baselines (registered as ``glasu``,
``glasu-simulated``, ``glasu-centralized``, ``glasu-standalone``).

- ``glasu``: ``M`` vertical clients (own columns, own ``edge_share`` of the edges), the
  configured ``K``, ``Q``, gradient mode and label holders.
- ``simulated`` (simulated centralised, Ni et al.): ``M`` clients with their own columns but the
  full edge set each, aggregation at every layer, exact gradients, ``Q = 1``.
- ``centralized``: one party with every column and edge (``M = 1``), the same model and loop.
- ``standalone``: each client alone on its own columns and edges (``M`` separate one-party runs);
  the reported accuracy is the mean over clients, each client's is in ``extra``.

A single party has no one to talk to: its notional aggregation (the identity for ``M = 1``) runs
in-process through :class:`SelfRuntime`, which counts nothing. Checkpoints (``--checkpoint-every``,
all modes but standalone) keep each party's state at that party: every client saves its weights,
optimiser state and random stream in its own state folder (``<out>/glasu-state/client-<m>``
here) and returns a digest; the server's checkpoint holds only its own batch stream and those
digests, and on resume each client restores its own file once the digest matches, so a resumed
run continues exactly as the uninterrupted one. Round ``t`` of every mode is one
sampling + joint inference + ``Q`` local updates; benchmarks equalise model updates by giving
``Q = 1`` modes ``Q`` times the rounds.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedgl.algorithms.glasu.client import GlasuClient
from fedgl.algorithms.glasu.options import (
    MODES,
    GlasuModelOptions,
    GlasuOptions,
    GlasuParams,
    agg_layer_set,
)
from fedgl.algorithms.glasu.server import GlasuServer
from fedgl.algorithms.runner import finish_repeat, network_columns
from fedgl.algorithms.watch import Watch, progress_watch
from fedgl.checkpoint import Checkpointer, RepeatProgress
from fedgl.config import parse_num_neighbors
from fedgl.data.graph import GraphData
from fedgl.data.vertical import VerticalClientData, split_stats, vertical_shard, vertical_split
from fedgl.errors import ConfigError, DataError
from fedgl.federation.codec import decode, encode
from fedgl.federation.facts import Facts, learn_facts
from fedgl.federation.ledger import Ledger
from fedgl.federation.network import NetworkModel
from fedgl.federation.protocol import Endpoint
from fedgl.federation.runtime import LocalRuntime, _per_client_args
from fedgl.progress import RoundProgress
from fedgl.results import RepeatResult
from fedgl.trained import ModelTracker


def parse_fanout(text: Any, layers: int) -> int:
    """GLASU's one fanout for every layer ("" or -1: all neighbours)."""
    values = parse_num_neighbors(str(text), layers)
    if len(set(values)) != 1:
        raise ConfigError(f"GLASU samples the same number of neighbours at every layer; give one "
                          f"number, e.g. --num-neighbors 3 (got {text!r})")
    return int(values[0])


def vertical_settings(cfg: Any) -> dict:
    return {"feature_split": getattr(cfg, "feature_split", "random"),
            "edge_share": float(getattr(cfg, "edge_share", 0.8))}


def glasu_params(cfg: Any, options: GlasuModelOptions, num_classes: int,
                 mode: str = "glasu") -> GlasuParams:
    """The protocol parameters of ``mode`` (GLASU or a baseline; baselines read only the model
    options and fix the protocol ones)."""
    if mode not in MODES:
        raise ConfigError(f"unknown GLASU mode {mode!r}; one of {', '.join(MODES)}")
    options.validate(cfg)
    if not isinstance(options, GlasuOptions):
        options = GlasuOptions(**{f.name: getattr(options, f.name)
                                  for f in dataclasses.fields(GlasuModelOptions)})
    layers = int(cfg.layers)
    base = dict(clients=int(cfg.clients), layers=layers, hidden=int(cfg.hidden),
                num_classes=num_classes, agg=agg_layer_set(options.agg_layers, layers),
                stale_steps=options.stale_steps, aggregate=options.aggregate,
                grad_mode=options.grad_mode, backbone=options.backbone,
                dropout=float(cfg.dropout), lr=float(cfg.lr),
                weight_decay=float(cfg.weight_decay), optimizer=options.glasu_optimizer,
                momentum=options.glasu_momentum, batch_size=int(getattr(cfg, "batch_size", 16)),
                fanout=parse_fanout(getattr(cfg, "num_neighbors", "3"), layers),
                label_holders=options.label_holders, gcnii_alpha=options.gcnii_alpha,
                gcnii_lambda=options.gcnii_lambda)
    if mode != "glasu":  # every layer aggregates, exact gradients, one step a round
        base.update(agg=tuple(range(layers)), grad_mode="exact", stale_steps=1,
                    label_holders="all")
    if mode in ("centralized", "standalone"):
        base.update(clients=1)
    return GlasuParams(**base)


class SelfRuntime:
    """A single party's in-process messages to its notional aggregator: nothing crosses a
    boundary, so nothing is counted (messages are still encoded and checked)."""

    def __init__(self, client: GlasuClient) -> None:
        self._client = client
        self._endpoint = Endpoint(client, "client 0")
        self.ledger = Ledger()
        self.events: list[dict] = []

    @property
    def client_ids(self) -> list[int]:
        return [0]

    def local_client(self, client_id: int) -> GlasuClient:
        return self._client

    def call(self, method: str, args: Any = None, *, phase: str, clients: Any = None) -> dict:
        kwargs = _per_client_args(args, [0])[0]
        return {0: decode(self._endpoint.handle(encode(method, kwargs), phase))[1]}

    def close(self) -> None:
        """Nothing to release."""


#: the clients' own checkpoint folders inside ``out`` (one trusted operator: local and Ray)
STATE_FOLDER = "glasu-state"


def _state_dir(root: Path | None, client: int) -> Path | None:
    return None if root is None else root / f"client-{client}"


def _federation(parts: list[VerticalClientData], params: GlasuParams, cfg: Any,
                seed: int, state_root: Path | None = None) -> GlasuServer:
    if params.clients == 1 and len(parts) == 1:
        runtime: Any = SelfRuntime(GlasuClient(parts[0], params, seed,
                                               state_dir=_state_dir(state_root, 0)))
    elif getattr(cfg, "runtime", "local") == "ray":
        runtime = _ray_runtime(parts, params, cfg, seed, state_root)
    else:
        runtime = LocalRuntime({d.client_id: GlasuClient(d, params, seed,
                                                         state_dir=_state_dir(state_root,
                                                                              d.client_id))
                                for d in parts},
                               batch=bool(getattr(cfg, "batch_clients", True)))
    return start_server(runtime, cfg, seed, lambda num_classes: dataclasses.replace(
        params, num_classes=num_classes))[0]


def start_server(runtime: Any, cfg: Any, seed: int, params_for: Callable[[int], GlasuParams]
                 ) -> tuple[GlasuServer, Facts]:
    """GLASU's server-side set-up on any runtime (local, Ray, a Flower deployment): the
    parties' public facts through ``setup.facts`` (:func:`fedgl.federation.facts.learn_facts`:
    vertical shards of one node set and one class count, or the run stops in one line), the
    protocol parameters for that class count (``params_for``), the server's own set-up
    exchange (:meth:`GlasuServer.setup`) and the configured network model. Closes the runtime
    if the set-up fails."""
    try:
        facts = learn_facts(runtime, "vertical")
        server = GlasuServer(runtime, params_for(facts.num_classes), seed)
        server.setup()
    except BaseException:
        runtime.close()
        raise
    runtime.ledger.network = NetworkModel.from_strings(getattr(cfg, "bandwidth", ""),
                                                       getattr(cfg, "latency", ""))
    return server, facts


def _ray_runtime(parts: list[VerticalClientData], params: GlasuParams, cfg: Any,
                 seed: int, state_root: Path | None = None) -> Any:
    """One actor per vertical client; each reads only its own shard file (its columns, edges
    and labels), written here by the driver (the data owners' side)."""
    import hashlib

    from fedgl.data.datasets import default_cache_dir
    from fedgl.data.shards import ShardSpec, write_shard_files
    from fedgl.federation.ray_runtime import RayRuntime

    key = hashlib.sha256(":".join(d.digest() for d in parts).encode()).hexdigest()[:24]
    files = write_shard_files(parts, default_cache_dir() / "shards" / f"vertical-{key}")
    specs = {d.client_id: ShardSpec(cfg.to_dict(), seed, d.client_id, "", "", "",
                                    shard_path=files[d.client_id][0],
                                    shard_sha256=files[d.client_id][1],
                                    client_params={**dataclasses.asdict(params),
                                                   "state_dir": None if state_root is None else
                                                   str(_state_dir(state_root, d.client_id))})
             for d in parts}
    return RayRuntime(specs, GlasuClient, cfg, Ledger())


def party_state(server: GlasuServer, round_: int) -> dict:
    """The server's checkpoint of round ``round_``: its own batch stream, and per client only the
    digest of the state that client saved in its own folder (``glasu.save_state``; exchanged
    outside the counted training traffic, as an uninterrupted run has no such messages)."""
    runtime = server.runtime
    counted, runtime.ledger = runtime.ledger, Ledger()
    try:
        saved = runtime.call("glasu.save_state", {"round": round_}, phase="train")
    finally:
        runtime.ledger = counted
    return {"server_generator": server.gen.get_state(),
            "clients": {str(m): {"round": round_, "digest": str(s["digest"])}
                        for m, s in saved.items()}}


def resume_repeat(server: GlasuServer, state: RepeatProgress) -> tuple[int, list[dict], list[dict]]:
    """Have every client restore its own saved state (checked against the digest the server
    kept), restore the server's stream, the history and the ledger (the set-up exchange already
    re-ran on building the federation; the restored ledger counts it once, as uninterrupted)."""
    runtime = server.runtime
    saved = state.weights
    clients = saved.get("clients", {}) if isinstance(saved, dict) else {}
    if sorted(clients) != sorted(str(m) for m in runtime.client_ids) or not all(
            isinstance(c, dict) and "digest" in c for c in clients.values()):
        raise DataError(f"checkpoint holds GLASU clients {sorted(clients)}, the config builds "
                        f"{runtime.client_ids}; start the run again")
    network, counted = runtime.ledger.network, runtime.ledger
    runtime.ledger = Ledger()
    try:
        runtime.call("glasu.load_state",
                     {m: {"round": int(clients[str(m)]["round"]),
                          "digest": str(clients[str(m)]["digest"])} for m in runtime.client_ids},
                     phase="train")
    finally:
        runtime.ledger = counted
    server.gen.set_state(saved["server_generator"])
    runtime.ledger = Ledger.from_state_dict(state.ledger)
    runtime.ledger.network = network  # the simulated clock continues from the checkpoint
    events = [*state.events, {"action": "resumed", "round": state.round}]
    return state.round + 1, list(state.history), events


def drive_glasu(server: GlasuServer, cfg: Any, *, repeat: int, seed: int,
                resume: Callable[[GlasuServer, RepeatProgress], tuple[int, list, list]],
                resume_from: RepeatProgress | None = None,
                checkpointer: Checkpointer | None = None, watch: Watch | None = None,
                aside: Callable[[Callable[[], Any]], Any] | None = None,
                tracker: ModelTracker | None = None,
                model_parts: Callable[[], dict[str, dict]] | None = None
                ) -> tuple[list[dict], list[dict]]:
    """The one driver of GLASU's server (set up already), on every runtime: the resume of a
    checkpointed round, then ``rounds`` rounds, one history row each (with a simulated network
    its bytes and seconds), the round's failure events (where ``watch.runtime_events``), each
    party's own checkpoint every ``checkpointer.every`` rounds; the history and the events.
    ``aside(step)`` runs the checkpoint messages (a deployed run files their Flower bytes apart
    from the training traffic). What differs between runtimes is the ``watch``. With
    ``tracker`` and ``model_parts`` (the parties' models, where the driver's caller can read
    them: an in-process run), the tracker follows the split model round by round."""
    watch = watch or Watch()
    aside = aside or (lambda step: step())
    history: list[dict] = []
    events: list[dict] = []
    start = 1
    if resume_from is not None:   # every party restores the state it saved itself
        start, history, events = aside(lambda: resume(server, resume_from))
    if watch.started is not None:
        watch.started(start)
    runtime = server.runtime
    seen_events = 0
    if watch.runtime_events and watch.startup_round is not None:
        events += [{**e, "round": watch.startup_round} for e in runtime.events]
        seen_events = len(runtime.events)
    for t, metrics in server.rounds(int(cfg.rounds), int(cfg.eval_every), start):
        row = {"round": t, **metrics, **network_columns(runtime.ledger)}
        history.append(row)
        if tracker is not None and model_parts is not None:
            tracker.observe(t, model_parts, row)
        if watch.runtime_events:
            events += [{**e, "round": t} for e in runtime.events[seen_events:]]
            seen_events = len(runtime.events)
        if watch.round_done is not None:
            watch.round_done(t, row)
        if checkpointer is not None and checkpointer.every and t % checkpointer.every == 0:
            state = aside(lambda t=t: party_state(server, t))
            checkpointer.round_done(RepeatProgress(repeat, seed, t, state, history,
                                                   runtime.ledger.state_dict(), events))
        if watch.on_round is not None:
            watch.on_round(t, server)
    return history, events


def _train(server: GlasuServer, cfg: Any, name: str, repeat: int, seed: int,
           progress: RoundProgress, on_round: Callable | None,
           resume_from: RepeatProgress | None = None,
           checkpointer: Checkpointer | None = None, tracker: ModelTracker | None = None
           ) -> tuple[list[dict], list[dict]]:
    """A local or Ray run of :func:`drive_glasu`, with its progress line; ``tracker`` follows
    the in-process parties' models (:func:`party_models`)."""
    repeats = int(getattr(cfg, "repeats", 1))

    watch = progress_watch(progress, f"{name} repeat {repeat + 1}/{repeats}", int(cfg.rounds),
                           repeat=repeat, on_round=on_round, runtime_events=False)
    parts = None
    if tracker is not None and hasattr(server.runtime, "local_client"):
        def parts() -> dict[str, dict]:
            return party_models(server.runtime)
    return drive_glasu(server, cfg, repeat=repeat, seed=seed, resume=resume_repeat,
                       resume_from=resume_from, checkpointer=checkpointer, watch=watch,
                       tracker=tracker, model_parts=parts)


def party_models(runtime: Any) -> dict[str, dict]:
    """Every in-process party's part of the split model, ``party-<m>`` (the server has no
    parameters): what a run saves, one file per part."""
    return {f"party-{m}": runtime.local_client(m).parameters_dict() for m in runtime.client_ids}


def run_glasu(graph: GraphData, cfg: Any, options: GlasuModelOptions, *, repeat: int, seed: int,
              progress: RoundProgress, mode: str = "glasu", on_round: Callable | None = None,
              resume_from: RepeatProgress | None = None,
              checkpointer: Checkpointer | None = None) -> RepeatResult:
    """One repeat of ``mode`` (see module docstring), optionally checkpointed every
    ``checkpointer.every`` rounds or resumed from ``resume_from`` (not ``standalone``: its M
    separate runs would need M checkpoints)."""
    if mode == "standalone" and (resume_from is not None or checkpointer is not None):
        raise ConfigError("glasu-standalone trains its clients one after another and does not "
                          "checkpoint; drop --checkpoint-every")
    t0 = time.perf_counter()
    split = vertical_settings(cfg)
    M = int(cfg.clients)
    params = glasu_params(cfg, options, graph.num_classes, mode)
    labels = params.label_holders
    if mode == "standalone":
        feds = []
        for m in range(M):
            d = vertical_shard(graph, M, m, labels="all", seed=seed, **split)
            feds.append(_federation([dataclasses.replace(d, client_id=0)], params, cfg, seed))
        parts = [vertical_shard(graph, M, m, seed=seed, **split) for m in range(M)]
    else:
        clients = 1 if mode == "centralized" else M
        full = mode in ("centralized", "simulated")
        given = getattr(graph, "vertical_parts", None)   # parties aligned from their own data
        parts = list(given) if given is not None and mode == "glasu" else \
            vertical_split(graph, clients, labels=labels, seed=seed, full_edges=full, **split)
        keeps = (checkpointer is not None or resume_from is not None) and getattr(cfg, "out", "")
        feds = [_federation(parts, params, cfg, seed,
                            Path(cfg.out).absolute() / STATE_FOLDER if keeps else None)]
    setup_seconds = time.perf_counter() - t0
    name = "glasu" if mode == "glasu" else f"glasu-{mode}"
    try:
        tracker = ModelTracker(parts=True) if mode != "standalone" else None
        runs = [_train(s, cfg, name, repeat, seed, progress, on_round, resume_from, checkpointer,
                       tracker) for s in feds]
        histories = [h for h, _ in runs]
        ledger = feds[0].runtime.ledger
        history = histories[0] if len(histories) == 1 else _mean_history(histories)
        seconds = {"setup": setup_seconds, "pretrain": ledger.seconds("pretrain"),
                   "train": sum(s.runtime.ledger.seconds("train") for s in feds),
                   "eval": sum(s.runtime.ledger.seconds("eval") for s in feds),
                   "total": time.perf_counter() - t0}
        result = finish_repeat(repeat, seed, split_stats(parts, graph), history,
                               ledger.summary(), seconds)
        result.model = tracker.record() if tracker is not None else None
        result.extra.update({"setting": "vertical", "mode": name,
                             "params": json_params(params),
                             "runtime": getattr(cfg, "runtime", "local"),
                             "communication": "none (one party)" if params.clients == 1 else
                             "counted by the ledger", "failures": runs[0][1]})
        if mode == "standalone":
            result.extra["standalone_test_acc"] = [h[-1].get("test_acc") for h in histories]
        if hasattr(feds[0].runtime, "peak_rss_mb"):
            result.extra["client_peak_rss_mb"] = {
                str(k): v for k, v in feds[0].runtime.peak_rss_mb().items()}
        return result
    finally:
        for s in feds:
            s.runtime.close()


def predict_glasu(graph: GraphData, cfg: Any, seed: int, model: dict[str, dict], *,
                  mode: str = "glasu") -> tuple[dict[int, tuple[Any, Any]], Ledger]:
    """The label holders' predictions of a saved split model by the paper's joint inference
    (full neighbourhoods, every party's sub-layers, the server's aggregation; the run's
    evaluation exchange): every party loads its own part, then each label holder applies its
    classifier to ``H[L]``. Only label holders receive predictions."""
    import torch

    options = cfg.options if cfg.options is not None else GlasuModelOptions()
    split = vertical_settings(cfg)
    clients = 1 if mode == "centralized" else int(cfg.clients)
    params = glasu_params(cfg, options, graph.num_classes, mode)
    given = getattr(graph, "vertical_parts", None)
    parts = list(given) if given is not None and mode == "glasu" else \
        vertical_split(graph, clients, labels=params.label_holders, seed=seed,
                       full_edges=mode in ("centralized", "simulated"), **split)
    server = _federation(parts, params, cfg, seed)
    runtime = server.runtime
    try:
        for m in runtime.client_ids:
            runtime.local_client(m).model.load_state_dict(model[f"party-{m}"])
        server.evaluate()
        out = {}
        for m in runtime.client_ids:
            client = runtime.local_client(m)
            if client.model.classifier is None:
                continue
            with torch.no_grad():
                log_probs = torch.log_softmax(client.model.classifier(client.trace[-1]), -1)
            out[m] = (torch.arange(client.data.num_nodes), log_probs)
        return out, runtime.ledger
    finally:
        runtime.close()


#: a GLASU algorithm's mode (its registry name without the prefix)
MODE_OF = {"glasu": "glasu", "glasu-simulated": "simulated", "glasu-centralized": "centralized"}


def _predictor(mode: str) -> Callable[..., tuple]:
    def predict_repeat(graph: GraphData, cfg: Any, seed: int, parts: dict) -> tuple:
        return predict_glasu(graph, cfg, seed, parts, mode=mode)

    predict_repeat.__doc__ = f"The registry's predictor of mode {mode!r} (:func:`predict_glasu`)."
    return predict_repeat


predict_repeat = _predictor("glasu")
predict_simulated = _predictor("simulated")
predict_centralized = _predictor("centralized")


def glasu_from_card(card: dict, cfg: Any, part: str) -> Any:
    """Party ``part``'s sub-layers (and classifier, where it holds labels) as a model card
    describes them (``fedgl.load_model``): its input width and classifier read from the part's
    tensor list."""
    from fedgl.algorithms.glasu.model import ClientStack

    tensors = card["files"][part]["tensors"]
    options = cfg.options if cfg.options is not None else GlasuModelOptions()
    params = glasu_params(cfg, options, int(card["architecture"]["out_channels"]),
                          MODE_OF[str(card["algorithm"])])
    first = next(k for k in ("input.weight", "convs.0.weight", "convs.0.lin.weight")
                 if k in tensors)
    return ClientStack(params, int(part.removeprefix("party-")), int(tensors[first][1]),
                       "classifier.weight" in tensors)


def json_params(params: GlasuParams) -> dict:
    out = dataclasses.asdict(params)
    out["agg_layers_1based"] = [i + 1 for i in params.agg]
    out.pop("agg")
    return out


def _mean_history(histories: list[list[dict]]) -> list[dict]:
    """Round-by-round mean of the standalone clients' numeric metrics."""
    rows = []
    for per_round in zip(*histories, strict=True):
        row: dict = {"round": per_round[0]["round"]}
        for key, value in per_round[0].items():
            if key != "round" and isinstance(value, int | float):
                row[key] = sum(r[key] for r in per_round) / len(per_round)
        rows.append(row)
    return rows


def _entry(mode: str) -> Callable[..., RepeatResult]:
    def run_repeat(graph: GraphData, cfg: Any, *, repeat: int, seed: int,
                   progress: RoundProgress, resume_from: Any = None, checkpointer: Any = None,
                   on_round: Callable | None = None) -> RepeatResult:
        options = cfg.options if cfg.options is not None else GlasuModelOptions()
        return run_glasu(graph, cfg, options, repeat=repeat, seed=seed, progress=progress,
                         mode=mode, on_round=on_round, resume_from=resume_from,
                         checkpointer=checkpointer)

    run_repeat.__doc__ = f"The registry's entry point of mode {mode!r} (options: ``cfg.options``)."
    return run_repeat


run_repeat = _entry("glasu")
run_simulated = _entry("simulated")
run_centralized = _entry("centralized")
run_standalone = _entry("standalone")
