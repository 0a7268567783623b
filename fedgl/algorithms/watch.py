"""What a runtime adds around the one driver of an algorithm's server (the FedAvg driver,
:mod:`fedgl.algorithms.fedavg_driver`; the mini-batch one, :mod:`fedgl.algorithms.minibatch.driver`;
GLASU's, :func:`fedgl.algorithms.glasu.runner.drive_glasu`): a local or Ray run's progress line
and the experimenter's oracle score, a deployed run's log lines and per-round Flower bytes. The
driver itself is the same on every runtime."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedgl.federation.aggregate import State


@dataclass
class Watch:
    """The runtime's part around the driver (every hook may be left out).

    ``started(start)``: before the first round ``start``; ``pretrained()``: after a fresh
    pre-training exchange; ``round_done(t, row)``: after round ``t``'s row; ``on_round(t,
    server)``: after its checkpoint. ``oracle(weights)``: the experimenter's columns for an
    evaluated round (timed as phase ``oracle``). ``startup_round``: the round that failure
    events before the first round are filed under (None: the first round's)."""

    started: Callable[[int], None] | None = None
    pretrained: Callable[[], None] | None = None
    round_done: Callable[[int, dict], None] | None = None
    on_round: Callable[[int, Any], None] | None = None
    oracle: Callable[[State], dict] | None = None
    startup_round: int | None = 0
    #: file the runtime's failure events in the history's events (the mini-batch driver's
    #: local runs keep only the resumes there)
    runtime_events: bool = True


def progress_info(row: dict) -> str:
    """A round's progress-line text: its training loss and, when evaluated, test accuracy."""
    parts = [f"loss {row['train_loss']:.3f}"] if not math.isnan(row["train_loss"]) else []
    if "test_acc" in row:
        parts.append(f"test {row['test_acc']:.3f}")
    return " ".join(parts)


def progress_watch(progress: Any, label: str, rounds: int, *, repeat: int,
                   on_round: Callable[[int, int, Any], None] | None = None, first: int = 1,
                   **hooks: Any) -> Watch:
    """A local or Ray run's :class:`Watch`: the progress line ``label`` over ``rounds`` (a
    resumed run starts it at its first round; ``first``: the number of the driver's first
    round), one step per finished round, and the caller's ``on_round(repeat, t, server)``;
    ``hooks``: the Watch's other fields (``oracle``, ``runtime_events``)."""

    def started(start: int) -> None:
        progress.start(label, rounds)
        for _ in range(start - first):
            progress.advance()

    return Watch(started=started,
                 round_done=lambda t, row: progress.advance(progress_info(row)),
                 on_round=None if on_round is None else
                 lambda t, srv: on_round(repeat, t, srv), **hooks)
