"""What a runtime adds around the one driver of an algorithm's server (the FedAvg driver,
:mod:`fedgl.algorithms.fedavg_driver`; the mini-batch one, :mod:`fedgl.algorithms.minibatch.driver`;
GLASU's, :func:`fedgl.algorithms.glasu.runner.drive_glasu`): a local or Ray run's progress line
and the experimenter's oracle score, a deployed run's log lines and per-round Flower bytes. The
driver itself is the same on every runtime."""

from __future__ import annotations

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
