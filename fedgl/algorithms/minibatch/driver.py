"""The one driver of a mini-batch FedSGD server (Swift-FedGNN and its baselines) on every
runtime (local, Ray, Flower).

Given a :class:`~fedgl.algorithms.minibatch.server.FedSGDServer` wired to its clients, it runs
the structure exchange (``server.setup()``) or the runtime's resume of a checkpointed iteration,
then ``rounds`` iterations (:meth:`FedSGDServer.iterations`): per iteration a history row (the
evaluated metrics, the cumulative training bytes, with a simulated network its seconds), the
bytes of each communicating iteration, a non-finite model or loss
(:func:`~fedgl.algorithms.runner.divergence`: an error, or with ``allow_divergence`` the last
row, recorded and never checkpointed), a checkpoint (weights, history, ledger, events and the
server's state) when one is due; then the repeat's result and the mini-batch figures
(:func:`~fedgl.algorithms.minibatch.runner.minibatch_extra`).

What differs between runtimes is the caller's :class:`~fedgl.algorithms.watch.Watch`
(a local run's progress and oracle score; a deployed run's log lines) and where it files the
returned events.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fedgl.algorithms.minibatch.server import FedSGDServer
from fedgl.algorithms.watch import Watch
from fedgl.checkpoint import Checkpointer, RepeatProgress
from fedgl.results import RepeatResult
from fedgl.trained import ModelTracker


def drive_minibatch(server: FedSGDServer, cfg: Any, *, repeat: int, seed: int,
                    part_stats: dict, t0: float,
                    resume: Callable[[Any, RepeatProgress], tuple[int, list, list, list]],
                    resume_from: RepeatProgress | None = None,
                    checkpointer: Checkpointer | None = None, watch: Watch | None = None
                    ) -> tuple[RepeatResult, list[dict]]:
    """One repeat of ``server`` (see the module docstring): its result (with ``diverged``
    where training diverged) and its events (resumes; failures where ``watch.runtime_events``)."""
    from fedgl.algorithms.minibatch.runner import minibatch_extra
    from fedgl.algorithms.runner import divergence, finish_repeat, network_columns

    watch = watch or Watch()
    runtime = server.runtime
    setup_seconds = time.perf_counter() - t0
    history: list[dict] = []
    comm_bytes: list[int] = []
    events: list[dict] = []
    start = 0
    if resume_from is None:
        server.setup()
        if watch.pretrained is not None:
            watch.pretrained()
    else:
        start, history, comm_bytes, events = resume(server, resume_from)
    if watch.started is not None:
        watch.started(start)
    oracle_seconds = 0.0
    ledger = runtime.ledger
    diverged: dict | None = None
    seen_events = 0
    tracker = ModelTracker()
    if watch.runtime_events and watch.startup_round is not None:
        events += [{**e, "round": watch.startup_round} for e in runtime.events]
        seen_events = len(runtime.events)
    for t, weights, metrics in server.iterations(start, int(cfg.eval_every), int(cfg.rounds)):
        if metrics.pop("communicating"):
            comm_bytes.append(metrics["iteration_bytes"])
        row = {"round": t + 1, **metrics, "train_bytes": ledger.bytes("train"),
               **network_columns(ledger)}
        if watch.oracle is not None and "test_acc" in metrics:
            o0 = time.perf_counter()
            row.update(watch.oracle(weights))
            oracle_seconds += time.perf_counter() - o0
        history.append(row)
        tracker.observe(t + 1, weights, row)
        diverged = divergence(t + 1, weights, row["train_loss"], cfg)
        if watch.runtime_events:
            events += [{**e, "round": t + 1} for e in runtime.events[seen_events:]]
            seen_events = len(runtime.events)
        if watch.round_done is not None:
            watch.round_done(t + 1, row)
        if diverged is not None:  # recorded with --allow-divergence; never checkpointed
            break
        if checkpointer is not None:
            checkpointer.round_done(RepeatProgress(
                repeat, seed, t + 1, weights, history, ledger.state_dict(), events,
                server={**server.state_dict(), "comm_bytes": list(comm_bytes)}))
        if watch.on_round is not None:
            watch.on_round(t + 1, server)
    seconds = {"setup": setup_seconds, "pretrain": ledger.seconds("pretrain"),
               "train": ledger.seconds("train"), "eval": ledger.seconds("eval"),
               "oracle": oracle_seconds, "total": time.perf_counter() - t0}
    result = finish_repeat(repeat, seed, part_stats, history, ledger.summary(), seconds)
    result.model = tracker.record()
    result.extra.update(minibatch_extra(server, history, comm_bytes, cfg))
    if diverged is not None:
        result.extra["diverged"] = diverged
        result.final["diverged_round"] = diverged["round"]
    return result, events
