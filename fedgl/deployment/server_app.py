"""The deployment's server: a Flower ServerApp running fedgl's server side of an algorithm.

``fedgl server`` (or ``flwr run`` with the app ``fedgl server`` writes) starts it on the
SuperLink with a *job file* (run config key ``fedgl-job``): the fedgl configuration, the roster
path, the results folder. The ServerApp then

1. waits until a SuperNode per roster client has joined;
2. sends every node a fresh challenge (``query.fedgl_hello``); a node is mapped to the client id
   whose roster key signed (challenge, node id, run id, roster digest). A node that proves no
   roster identity, or claims an id another node proved, is refused and gets no message;
3. sends every client the run's configuration (``query.fedgl_setup``); each party checks it
   against its own safety settings and builds its role from its own shard;
4. runs the algorithm's server unchanged over :class:`~fedgl.federation.flower.runtime.FlowerRuntime`
   and writes ``result.json`` and ``history.csv`` as a local run does (the ledger's bytes, and
   what Flower carried beside them, in ``extra.flower``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from fedgl.algorithms.runner import (
    divergence,
    finish_repeat,
    initial_weights_for,
    network_columns,
    wire_server,
)
from fedgl.config import Config
from fedgl.deployment.party import deployable, hello_message, load_class, read_roster
from fedgl.errors import ConfigError, RunAborted
from fedgl.federation.flower.client_app import HELLO, SETUP, body_record
from fedgl.federation.flower.runtime import FlowerRuntime, refusal
from fedgl.output import OutputFolder
from fedgl.privacy.identity import Roster
from fedgl.results import RunResult, environment

JOB_KEY = "fedgl-job"


def wait_for_nodes(grid: Grid, wanted: int, timeout: float) -> list[int]:
    """The connected SuperNodes once at least ``wanted`` have joined (ConfigError on timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        ids = sorted(int(n) for n in grid.get_node_ids())
        if len(ids) >= wanted:
            return ids
        if time.monotonic() > deadline:
            raise ConfigError(f"only {len(ids)} of {wanted} SuperNodes joined within "
                              f"{timeout:g} s; start every client with `fedgl client`")
        time.sleep(0.5)


def handshake(grid: Grid, roster: Roster, node_ids: list[int], timeout: float
              ) -> tuple[dict[int, int], dict[int, dict[str, Any]], list[str]]:
    """Map Flower nodes to roster client ids by signed challenges: ``({client: node},
    {client: its public shard facts}, [one line per refused node])``."""
    run_id = int(grid.run.run_id)
    challenges = {n: os.urandom(32) for n in node_ids}
    messages = [Message(RecordDict({"fedgl-meta": ConfigRecord({"challenge": challenges[n].hex()})}),
                        dst_node_id=n, message_type=f"query.{HELLO}") for n in node_ids]
    nodes: dict[int, int] = {}
    facts: dict[int, dict[str, Any]] = {}
    refused: list[str] = []
    for reply in grid.send_and_receive(messages, timeout=timeout):
        n = int(reply.metadata.src_node_id)
        why = refusal(reply, -1)
        if why is not None or n not in challenges:
            refused.append(f"node {n}: {why or 'unexpected reply'}")
            continue
        meta = dict(reply.content.config_records["fedgl-meta"])
        try:
            k = int(meta["client_id"])
            signature = bytes.fromhex(str(meta["signature"]))
        except (KeyError, ValueError, TypeError):
            refused.append(f"node {n}: malformed hello")
            continue
        if not roster.verify(k, hello_message(challenges[n], n, run_id, roster), signature):
            refused.append(f"node {n}: cannot prove client {k}'s roster key (refused)")
            continue
        if k in nodes:
            refused.append(f"node {n}: client {k} is already node {nodes[k]} (refused)")
            continue
        nodes[k] = n
        facts[k] = {f: meta.get(f) for f in ("setting", "num_nodes", "num_features", "num_classes")}
    return nodes, facts, refused


def setup_clients(grid: Grid, nodes: dict[int, int], cfg: Config, seed: int,
                  timeout: float) -> None:
    """Send every client the run's configuration; any refusal stops the run (one line)."""
    body = json.dumps({"config": cfg.to_dict(), "seed": seed}).encode()
    messages = [Message(RecordDict({"fedgl": body_record(body)}), dst_node_id=n,
                        message_type=f"query.{SETUP}") for n in nodes.values()]
    got = {int(r.metadata.src_node_id): r for r in grid.send_and_receive(messages, timeout=timeout)}
    for k, n in sorted(nodes.items()):
        if n not in got:
            raise RunAborted(f"client {k} did not answer the run set-up within {timeout:g} s")
        why = refusal(got[n], k)
        if why is not None:
            raise RunAborted(f"client {k} refused the run: {why}")


def run_deployed(runtime: FlowerRuntime, cfg: Config, facts: dict[int, dict[str, Any]],
                 seed: int, extra: dict[str, Any]) -> RunResult:
    """One repeat of ``cfg.algorithm``'s server over the deployed clients."""
    t0 = time.perf_counter()
    if deployable(cfg.algorithm)[1] == "vertical":  # GLASU: clients hold column blocks
        from fedgl.deployment.drivers_vertical import run_vertical

        return run_vertical(runtime, cfg, facts, seed, extra, t0)
    widths = {(f["num_features"], f["num_classes"]) for f in facts.values()}
    if len(widths) != 1:
        raise ConfigError(f"the clients' shards disagree on (features, classes): {sorted(widths)}; "
                          "write every shard from one dataset with `fedgl shard`")
    (num_features, num_classes), = widths
    driver = deployable(cfg.algorithm)[1]
    if driver == "minibatch":
        rep = _run_minibatch(runtime, cfg, facts, seed, num_features, num_classes, t0)
    else:
        rep = _run_fedavg(runtime, cfg, facts, seed, num_features, num_classes, t0, driver)
    rep.extra["runtime"] = "flower"
    rep.extra["failures"] = list(runtime.events)
    rep.extra["flower"] = {**extra, "bytes": {p: dict(v) for p, v in runtime.flower_bytes.items()},
                           "calls": runtime.calls, **rep.extra.get("flower", {})}
    recorded = cfg.to_dict()
    recorded["runtime"] = "flower"
    return RunResult(recorded, environment(seed, cfg.device), [rep])


def _stats(facts: dict[int, dict[str, Any]]) -> dict[str, Any]:
    return {"clients": len(facts),
            "nodes_per_client": [facts[k]["num_nodes"] for k in sorted(facts)]}


def _run_minibatch(runtime: FlowerRuntime, cfg: Config, facts: dict[int, dict[str, Any]],
                   seed: int, num_features: int, num_classes: int, t0: float) -> Any:
    """The mini-batch FedSGD server (Swift-FedGNN or a baseline: mini-batch steps,
    server-mediated cross-client steps, the algorithm's schedule)."""
    from types import SimpleNamespace

    from fedgl.algorithms.minibatch.runner import initial_weights, minibatch_extra
    from fedgl.algorithms.minibatch.server import FedSGDServer
    from fedgl.algorithms.minibatch.settings import MiniBatchSettings
    from fedgl.deployment.drivers_horizontal import minibatch_schedule
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
    server.setup()
    history: list[dict] = []
    comm_bytes: list[int] = []
    for t, weights, metrics in server.iterations(0, int(cfg.eval_every), int(cfg.rounds)):
        if metrics.pop("communicating"):
            comm_bytes.append(metrics["iteration_bytes"])
        history.append({"round": t + 1, **metrics, "train_bytes": ledger.bytes("train"),
                        **network_columns(ledger)})
        divergence(t + 1, weights, history[-1]["train_loss"], cfg)
    seconds = {"setup": setup_seconds, "pretrain": ledger.seconds("pretrain"),
               "train": ledger.seconds("train"), "eval": ledger.seconds("eval"), "oracle": 0.0,
               "total": time.perf_counter() - t0}
    rep = finish_repeat(0, seed, _stats(facts), history, ledger.summary(), seconds)
    rep.extra.update(minibatch_extra(server, history, comm_bytes, cfg))
    return rep


def _run_fedavg(runtime: FlowerRuntime, cfg: Config, facts: dict[int, dict[str, Any]],
                seed: int, num_features: int, num_classes: int, t0: float, server_path: str
                ) -> Any:
    """A FedAvg-style algorithm (FedGCN, FedGAT, FedSage+): pre-training exchange, then FedAvg
    rounds. A server class may bring its model's initial weights (``deployed_initial_weights``,
    :mod:`fedgl.deployment.drivers_horizontal`); the default is the configured GCN/SAGE's."""
    server_cls = load_class(server_path)
    init = getattr(server_cls, "deployed_initial_weights", initial_weights_for)
    server = wire_server(runtime, server_cls, init(num_features, num_classes, cfg, seed), cfg, seed,
                         secure_mode=cfg.secure_sum, secagg_threshold=cfg.secagg_threshold,
                         secure_models=cfg.secure_models)
    ledger = runtime.ledger
    setup_seconds = time.perf_counter() - t0
    server.pretrain()
    history: list[dict] = []
    per_round: list[dict] = []
    seen = _bytes_now(runtime)
    for t, weights, metrics in server.rounds(1):
        row = {"round": t, **metrics, **network_columns(ledger)}
        history.append(row)
        now = _bytes_now(runtime)
        per_round.append({"round": t, **{k: now[k] - seen[k] for k in now}})
        seen = now
        divergence(t, weights, row["train_loss"], cfg)
    seconds = {"setup": setup_seconds, "pretrain": ledger.seconds("pretrain"),
               "train": ledger.seconds("train"), "eval": ledger.seconds("eval"), "oracle": 0.0,
               "total": time.perf_counter() - t0}
    rep = finish_repeat(0, seed, _stats(facts), history, ledger.summary(), seconds)
    if hasattr(server, "result_extra"):
        rep.extra.update(server.result_extra())
    rep.extra["flower"] = {"per_round": per_round}
    return rep


def _bytes_now(runtime: FlowerRuntime) -> dict[str, int]:
    """Cumulative training-phase bytes: the ledger's fedgl wire bytes and Flower's."""
    ledger = runtime.ledger
    fl = runtime.flower_bytes
    return {"ledger_wire_bytes": sum(ledger.wire_bytes(p) for p in ("train", "eval")),
            "ledger_value_bytes": ledger.bytes("train") + ledger.bytes("eval"),
            "flower_bytes": sum(fl[p]["up"] + fl[p]["down"] for p in ("train", "eval"))}


def serve(grid: Grid, job: dict[str, Any]) -> RunResult:
    """The whole server side of one deployed run (see the module docstring)."""
    cfg = Config.from_dict(job["config"])
    if cfg.repeats != 1:
        raise ConfigError("a deployed run is one repeat (each seed is a different partition, "
                          "so different shards); set repeats: 1")
    roster = read_roster(job["roster"])
    if cfg.clients != len(roster.ids):
        raise ConfigError(f"the config has {cfg.clients} clients, the roster {len(roster.ids)}")
    timeout = float(job.get("timeout", 600))
    folder = OutputFolder(job["out"], overwrite=bool(job.get("overwrite"))).open()
    try:
        node_ids = wait_for_nodes(grid, len(roster.ids), float(job.get("join_timeout", 300)))
        nodes, facts, refused = handshake(grid, roster, node_ids, timeout)
        missing = sorted(set(roster.ids) - set(nodes))
        if missing:
            raise RunAborted(f"roster clients {missing} did not prove their identity "
                             f"({'; '.join(refused) or 'no reply'})")
        setup_clients(grid, nodes, cfg, cfg.seed, timeout)
        runtime = FlowerRuntime(grid, nodes, timeout=timeout,
                                on_client_failure="drop" if cfg.on_client_failure == "drop"
                                else "abort")
        result = run_deployed(runtime, cfg, facts, cfg.seed,
                              {"nodes": {str(k): n for k, n in nodes.items()},
                               "refused_nodes": refused})
        folder.commit(result.save)
        return result
    finally:
        folder.close()


#: the component named in the deployment app's ``[tool.flwr.app.components] serverapp``
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    path = context.run_config.get(JOB_KEY)
    if not isinstance(path, str) or not Path(path).is_file():
        raise ConfigError(f"run config '{JOB_KEY}' names no job file; start the run with "
                          "`fedgl server`")
    job = json.loads(Path(path).read_text())
    status = Path(job["status"]) if job.get("status") else None
    try:
        serve(grid, job)
    except Exception as exc:  # noqa: BLE001 - the job's status file gets the one line
        if status is not None:
            status.write_text(json.dumps({"ok": False, "error": f"{exc}",
                                          "kind": type(exc).__name__}) + "\n")
        raise
    if status is not None:
        status.write_text(json.dumps({"ok": True}) + "\n")
