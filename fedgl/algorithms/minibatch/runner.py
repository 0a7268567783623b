"""One seeded repeat of a mini-batch FedSGD algorithm (Swift-FedGNN or a baseline).

The driver partitions the graph, starts the clients on the configured runtime, lets the server
gather the structure and run ``rounds`` iterations (``rounds`` = the number of iterations T),
and records per evaluated iteration: the federated accuracies, the cumulative training bytes and
(with ``bandwidth`` set) the simulated time, so that bytes- and time-to-accuracy can be read off
the history.

Checkpoints (``--checkpoint-every``) hold the weights, the history, the ledger and the server's
state (Adam moments, counters, bytes per communicating iteration). Every random draw is derived
from (seed, iteration[, client]), so a run resumed after iteration t repeats the uninterrupted
run exactly: the structure exchange is re-run on a scratch ledger, FedGNN-PNS's client caches are
rebuilt by re-running their latest refresh, and the ledger totals continue from the checkpoint.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from fedgl.algorithms.minibatch.client import MiniBatchClient
from fedgl.algorithms.minibatch.driver import drive_minibatch
from fedgl.algorithms.minibatch.server import FedSGDServer, Schedule
from fedgl.algorithms.minibatch.settings import MiniBatchSettings
from fedgl.algorithms.watch import progress_watch
from fedgl.checkpoint import Checkpointer, RepeatProgress, check_weights
from fedgl.data.client_data import split_graph
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition
from fedgl.data.sampling import full_block
from fedgl.data.shards import ShardSpec, graph_fingerprint, make_partition, write_partition_file
from fedgl.evaluation import SPLITS
from fedgl.federation.aggregate import State
from fedgl.federation.facts import Facts, learn_facts
from fedgl.federation.ledger import Ledger
from fedgl.federation.network import NetworkModel
from fedgl.federation.runtime import LocalRuntime
from fedgl.models import build_model
from fedgl.models.blocks import aggregation_kind, block_forward
from fedgl.results import RepeatResult


def initial_weights(num_features: int, num_classes: int, s: MiniBatchSettings,
                    seed: int) -> State:
    """The seeded initial global model for the clients' feature width and class count."""
    torch.manual_seed(seed)
    model = build_model(s.model, num_features, s.hidden, num_classes, s.layers, s.dropout)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def start_server(runtime: Any, cfg: Any, seed: int, schedule: Schedule, *,
                 optimizer: str = "adam", eval_mode: str = "cross",
                 pns_fanout: int = -1) -> tuple[FedSGDServer, Facts]:
    """The mini-batch FedSGD server's set-up on any runtime (local, Ray, a Flower deployment):
    the clients' public facts through ``setup.facts`` (:func:`fedgl.federation.facts.learn_facts`),
    the seeded initial model for their widths, the graph's node count as the sum of the
    clients' (the clients partition every node), the configured network model. Closes the
    runtime if the set-up fails."""
    try:
        facts = learn_facts(runtime, "horizontal")
        s = MiniBatchSettings.from_config(cfg)
        runtime.ledger.network = NetworkModel.from_strings(getattr(cfg, "bandwidth", ""),
                                                           getattr(cfg, "latency", ""))
        server = FedSGDServer(runtime, s,
                              initial_weights(facts.num_features, facts.num_classes, s, seed),
                              schedule, seed=seed, optimizer=optimizer,
                              num_nodes=sum(facts.nodes.values()), eval_mode=eval_mode,
                              pns_fanout=pns_fanout, eval_batch=int(getattr(cfg, "eval_batch", 0)))
    except BaseException:
        runtime.close()
        raise
    return server, facts


def start_runtime(graph: GraphData, part: Partition, cfg: Any, seed: int) -> Any:
    """In-process clients (``local``) or one Ray actor per client that loads its own shard."""
    if getattr(cfg, "runtime", "local") == "ray":
        from fedgl.federation.ray_runtime import RayRuntime

        path, digest = write_partition_file(part, graph, cfg, seed)
        fingerprint = graph_fingerprint(graph)
        specs = {k: ShardSpec(cfg.to_dict(), seed, k, str(path), digest, fingerprint)
                 for k in range(part.num_clients)}
        return RayRuntime(specs, MiniBatchClient, cfg, Ledger())
    clients = {d.client_id: MiniBatchClient(d, cfg, seed) for d in split_graph(graph, part)}
    return LocalRuntime(clients, Ledger())


class OracleMiniBatch:
    """Outside the federation: the global model on the full graph, all neighbours (labelled
    ``oracle_*``; the same numbers the ``cross`` federated evaluation computes by protocol)."""

    def __init__(self, graph: GraphData, s: MiniBatchSettings) -> None:
        self.model = build_model(s.model, graph.num_features, s.hidden, graph.num_classes,
                                 s.layers, s.dropout)
        self.kind = aggregation_kind(s.model)
        self.blocks = [full_block(graph.edge_index, graph.num_nodes)] * s.layers
        self.graph = graph

    @torch.no_grad()
    def __call__(self, weights: State) -> dict[str, float]:
        self.model.load_state_dict(weights)
        self.model.eval()
        hit = block_forward(self.model, self.kind, self.graph.x, self.blocks).argmax(-1) == self.graph.y
        return {f"oracle_{s}_acc": float(hit[getattr(self.graph, f"{s}_mask")].float().mean())
                for s in SPLITS}


def run_minibatch(graph: GraphData, cfg: Any, *, repeat: int, seed: int, progress: Any,
                  schedule: Schedule, name: str, optimizer: str = "adam",
                  eval_mode: str = "cross", pns_fanout: int = -1,
                  resume_from: RepeatProgress | None = None,
                  checkpointer: Checkpointer | None = None, on_round: Any = None) -> RepeatResult:
    """Run ``cfg.rounds`` iterations of the algorithm defined by ``schedule``, from the start or
    from ``resume_from`` (see module docstring)."""
    t0 = time.perf_counter()
    s = MiniBatchSettings.from_config(cfg)
    part = make_partition(graph, cfg, seed)
    runtime = start_runtime(graph, part, cfg, seed)
    server, _ = start_server(runtime, cfg, seed, schedule, optimizer=optimizer,
                             eval_mode=eval_mode, pns_fanout=pns_fanout)
    try:
        oracle = OracleMiniBatch(graph, s) if getattr(cfg, "oracle_eval", False) else None

        watch = progress_watch(progress,
                               f"{name} repeat {repeat + 1}/{getattr(cfg, 'repeats', 1)}",
                               int(cfg.rounds), repeat=repeat, on_round=on_round, first=0,
                               oracle=oracle, runtime_events=False)
        result, events = drive_minibatch(server, cfg, repeat=repeat, seed=seed,
                                         part_stats=part.stats(graph), t0=t0, resume=resume_repeat,
                                         resume_from=resume_from, checkpointer=checkpointer,
                                         watch=watch)
        if events:
            result.extra["events"] = events
        return result
    finally:
        runtime.close()


def resume_repeat(server: FedSGDServer, state: RepeatProgress
            ) -> tuple[int, list[dict], list[int], list[dict]]:
    """Rebuild what the clients hold beyond one iteration (the structure exchange, PNS caches)
    on a scratch ledger, then restore the server's model, optimiser, counters and ledger."""
    runtime = server.runtime
    network = runtime.ledger.network
    scratch = Ledger()
    runtime.ledger = scratch
    server.setup()
    server.rebuild_clients(state.round)
    runtime.ledger = Ledger.from_state_dict(state.ledger)
    runtime.ledger.network = network  # the simulated clock continues from the checkpoint
    check_weights(state.weights, server.weights)
    server.load_state_dict(state.weights, state.server)
    events = list(state.events) + [{
        "action": "resumed", "round": state.round,
        "note": "structure exchange (and FedGNN-PNS's latest cache refresh) re-run to rebuild "
                "client state; their bytes are not added to the ledger totals",
        "rerun_bytes": scratch.bytes("pretrain") + scratch.bytes("train")}]
    return state.round, list(state.history), [int(b) for b in state.server["comm_bytes"]], events


def minibatch_extra(server: FedSGDServer, history: list[dict], comm_bytes: list[int],
                    cfg: Any) -> dict[str, Any]:
    """Communication and privacy figures of a run: bytes by message kind, bytes per
    communicating iteration, and how many sent aggregates were made of one remote node."""
    train = server.runtime.ledger.bytes("train")
    by_kind = {k: v for k, v in server.tally.items() if k != "structure"}
    by_kind["model_and_gradients"] = train - sum(by_kind.values())
    agg = dict(server.aggregates)
    agg["single_node_share"] = (agg["single_node_aggregates"] / agg["aggregates"]
                                if agg["aggregates"] else 0.0)
    return {
        "iterations": len(history),
        "communicating_iterations": len(comm_bytes),
        "bytes_per_communicating_iteration": (sum(comm_bytes) / len(comm_bytes)
                                              if comm_bytes else 0.0),
        "cross_client_bytes_per_communicating_iteration": (
            (train - by_kind["model_and_gradients"]) / len(comm_bytes) if comm_bytes else 0.0),
        "bytes_per_iteration": train / max(1, len(history)),
        "bytes_by_kind": by_kind,
        "structure_bytes": server.tally.get("structure", 0),
        "aggregates": agg,
        "runtime": getattr(cfg, "runtime", "local"),
    }


def predict_minibatch(graph: GraphData, cfg: Any, seed: int, weights: State, *,
                      schedule: Schedule, eval_mode: str = "cross", pns_fanout: int = -1
                      ) -> tuple[dict[int, tuple[torch.Tensor, torch.Tensor]], Ledger]:
    """Every client's predictions of a saved mini-batch model on all its own nodes, as the
    run's evaluation computes them: ``cross``, through the server-mediated exchange with every
    cross-client neighbour (after the structure exchange; its bytes are the ledger's);
    ``local``, each client on its own subgraph. The experimenter collects the in-process
    parties' outputs chunk by chunk; deployed, each organisation keeps its own."""
    part = make_partition(graph, cfg, seed)
    runtime = start_runtime(graph, part, cfg, seed)
    server, _ = start_server(runtime, cfg, seed, schedule, optimizer=cfg.server_optimizer,
                             eval_mode=eval_mode, pns_fanout=pns_fanout)
    try:
        clients = {k: runtime.local_client(k) for k in runtime.client_ids}
        if eval_mode == "local":
            return {k: (c.data.node_ids.clone(), c.predict(weights))
                    for k, c in clients.items()}, runtime.ledger
        server.setup()
        server.weights = {k: v.clone() for k, v in weights.items()}
        runtime.call("minibatch.load", {"weights": server.weights}, phase="eval")
        rows: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {k: [] for k in clients}

        def collect() -> None:
            for k, c in clients.items():
                if getattr(c.party, "last_output", None) is not None:
                    rows[k].append((c.party.last_ids.clone(), c.party.last_output.clone()))
                    c.party.last_output = None

        seeds = torch.cat([c.data.node_ids for _, c in sorted(clients.items())])
        server.cross_forward(seeds, int(cfg.rounds) - 1, on_chunk=collect)
        out = {}
        for k, parts in rows.items():
            ids = torch.cat([i for i, _ in parts]) if parts else torch.zeros(0, dtype=torch.long)
            lp = torch.cat([o for _, o in parts]) if parts else torch.zeros(0)
            out[k] = (ids, lp)
        return out, runtime.ledger
    finally:
        runtime.close()
