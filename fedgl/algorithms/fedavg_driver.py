"""The one driver of a FedAvg-style algorithm's server, on every runtime (local, Ray, Flower).

Given a server wired to its clients (:func:`fedgl.algorithms.runner.wire_server`), it runs

1. the pre-training exchange (``server.pretrain()``), or, resuming, the runtime's resume of the
   checkpointed round (client state rebuilt, the server's model, history, ledger and events
   restored);
2. ``server.rounds(start)``: one history row per round (metrics, and with a simulated network
   the cumulative training bytes and seconds), the round's failure events, a non-finite model or
   loss (:func:`~fedgl.algorithms.runner.divergence`: an error, or with ``allow_divergence`` the
   last row, recorded and never checkpointed), a checkpoint when one is due.
   A round's evaluation may ride on the next round's fit
   (:meth:`~fedgl.algorithms.base.FedAvgServer.rounds`): its row, its ``round_done`` and
   ``on_round`` hooks then come after that exchange, while its network columns, failure
   events and checkpoint are as of the end of its round (``server.row_mark``; the checkpoint
   notes that the next fit carries the evaluation, which a resume sends again).
3. the repeat's result (:func:`~fedgl.algorithms.runner.finish_repeat`): final metrics, ledger,
   phase times, failures and what the server records beside the history (``result_extra``).

What differs between runtimes stays outside, in a :class:`~fedgl.algorithms.watch.Watch`: a local or Ray run's
progress bar and the experimenter's oracle score on the whole graph (the runner,
:func:`fedgl.algorithms.runner.run_federated`); a deployed run's log lines and per-round Flower
bytes (:func:`fedgl.deployment.drivers_horizontal.run_fedavg`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fedgl.algorithms.watch import Watch
from fedgl.checkpoint import Checkpointer, RepeatProgress
from fedgl.config import Config
from fedgl.results import RepeatResult
from fedgl.trained import ModelTracker

__all__ = ["Watch", "drive_fedavg"]


def drive_fedavg(server: Any, cfg: Config, *, repeat: int, seed: int, part_stats: dict,
                 t0: float, resume: Callable[[Any, RepeatProgress], tuple[int, list, list]],
                 resume_from: RepeatProgress | None = None,
                 checkpointer: Checkpointer | None = None, watch: Watch | None = None
                 ) -> RepeatResult:
    """One repeat of ``server`` (see the module docstring); ``t0`` is when its set-up began."""
    from fedgl.algorithms.runner import divergence, finish_repeat, network_columns, round_progress

    watch = watch or Watch()
    runtime = server.runtime
    setup_seconds = time.perf_counter() - t0
    history: list[dict] = []
    events: list[dict] = []
    start = 1
    if resume_from is None:
        server.pretrain()
        if watch.pretrained is not None:
            watch.pretrained()
    else:
        start, history, events = resume(server, resume_from)
    if watch.started is not None:
        watch.started(start)
    oracle_seconds = 0.0
    diverged: dict | None = None
    seen_events = 0
    tracker = ModelTracker()
    if watch.startup_round is not None:   # clients restarted or dropped before the first round
        events += [{**e, "round": watch.startup_round} for e in runtime.events]
        seen_events = len(runtime.events)
    for t, weights, metrics in server.rounds(start):
        # a row whose scores rode on the next round's fit: as of the end of its round
        mark = getattr(server, "row_mark", None)
        ledger_then = runtime.ledger if mark is None else mark[1]
        row = {"round": t, **metrics, **network_columns(ledger_then)}
        if watch.oracle is not None and "test_acc" in metrics:
            o0 = time.perf_counter()
            row.update(watch.oracle(weights))
            oracle_seconds += time.perf_counter() - o0
        history.append(row)
        tracker.observe(t, weights, row)
        diverged = divergence(t, weights, row["train_loss"], cfg)
        end = len(runtime.events) if mark is None else mark[0]
        events += [{**e, "round": t} for e in runtime.events[seen_events:end]]
        seen_events = end
        if watch.round_done is not None:
            watch.round_done(t, row)
        if diverged is not None:   # recorded (--allow-divergence); never checkpointed
            break
        if checkpointer is not None:
            checkpointer.round_done(round_progress(server, repeat, seed, t, weights, history,
                                                   events, ledger=ledger_then,
                                                   rides=mark is not None))
        if watch.on_round is not None:
            watch.on_round(t, server)
    ledger = runtime.ledger
    seconds = {"setup": setup_seconds, "pretrain": ledger.seconds("pretrain"),
               "train": ledger.seconds("train"), "eval": ledger.seconds("eval"),
               "oracle": oracle_seconds, "total": time.perf_counter() - t0}
    result = finish_repeat(repeat, seed, part_stats, history, ledger.summary(), seconds)
    result.model = tracker.record()
    if diverged is not None:
        result.extra["diverged"] = diverged
        result.final["diverged_round"] = diverged["round"]
    result.extra["runtime"] = cfg.runtime
    result.extra["failures"] = events
    if hasattr(server, "result_extra"):
        result.extra.update(server.result_extra())
    return result
