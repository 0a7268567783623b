"""What a driver's server shares when it runs over a transport whose parties outlive it (a
Flower deployment): the run's continuation (checkpointer, progress to resume from, the DP
releases the clients logged), the resume that keeps this attempt's set-up messages, the phase
times and the cumulative bytes per round (fedgl's ledger beside the transport's), and the run's
log lines.

The drivers are the algorithms' own (:mod:`fedgl.algorithms.fedavg_driver`,
:mod:`fedgl.algorithms.minibatch.driver`, GLASU's :func:`~fedgl.algorithms.glasu.runner.drive_glasu`);
the deployment's ServerApp (``fedgl.deployment.server_app``) sets the continuation up on its
runtime and runs the driver the algorithm's spec names. Nothing here imports the deployment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fedgl.checkpoint import Checkpointer, RepeatProgress
from fedgl.federation.ledger import SETUP as SETUP_PHASE
from fedgl.federation.ledger import Ledger


@dataclass
class Continuation:
    """A deployed run's checkpointing: the checkpointer (``checkpoint_every``), the progress to
    resume from, and the DP releases the clients logged for the run before this attempt."""

    checkpointer: Checkpointer | None = None
    progress: RepeatProgress | None = None
    logged: dict[str, list[str]] = field(default_factory=dict)


def continuation(runtime: Any) -> Continuation:
    """The runtime's continuation (none set: a run that neither checkpoints nor resumes)."""
    return getattr(runtime, "continuation", None) or Continuation()


def resume_keeping_setup(runtime: Any, resume: Any, server: Any,
                         progress: RepeatProgress) -> Any:
    """``resume(server, progress)`` (the local runner's resume, which restores the checkpoint's
    ledger), then this attempt's set-up messages added back to it."""
    before = runtime.ledger.state_dict()
    out = resume(server, progress)
    keep_setup(runtime, before)
    return out


def keep_setup(runtime: Any, before: dict[str, Any]) -> None:
    """After a resume restored the checkpoint's ledger: add this attempt's set-up messages
    (recorded in ``before``) to the set-up phase it holds."""
    restored = runtime.ledger
    state = restored.state_dict()
    for key in ("bytes", "messages", "wire"):
        acc = {(p, d, int(c)): int(v) for p, d, c, v in state[key]}
        for p, d, c, v in before[key]:
            if p == SETUP_PHASE:
                acc[(p, d, int(c))] = acc.get((p, d, int(c)), 0) + int(v)
        state[key] = [[*k, v] for k, v in acc.items()]
    runtime.ledger = Ledger.from_state_dict(state)
    runtime.ledger.network = restored.network


def bytes_now(runtime: Any, server: Any = None) -> dict[str, int]:
    """Cumulative training-phase bytes: the ledger's fedgl wire bytes and Flower's. With
    ``server`` whose round's row waits for scores riding on the next fit (``row_mark``): as of
    the end of that round (before the call that carried them)."""
    ledger = runtime.ledger
    fl = runtime.flower_bytes
    mark = getattr(server, "row_mark", None)
    if mark is not None:
        ledger = mark[1]   # Flower's bytes as of the same moment (secure evaluation sums of
        # the scores that rode on the fit come after it, in several calls)
        fl = getattr(server, "row_flower", None) or getattr(runtime, "flower_bytes_before_call",
                                                            fl)
    return {"ledger_wire_bytes": sum(ledger.wire_bytes(p) for p in ("train", "eval")),
            "ledger_value_bytes": ledger.bytes("train") + ledger.bytes("eval"),
            "flower_bytes": sum(fl[p]["up"] + fl[p]["down"] for p in ("train", "eval"))}


def log_round(runtime: Any, t: int, total: int, row: dict[str, Any]) -> None:
    """The round's line in the run's log (the runtime's ``server_log``, if it has one)."""
    log = getattr(runtime, "server_log", None)
    if log is not None:
        log.round_line(t, total, row, runtime.ledger.wire_bytes())


def log_phase(runtime: Any, phase: str, name: str) -> None:
    """A finished phase's line: its exchanges, bytes and time so far."""
    log = getattr(runtime, "server_log", None)
    if log is not None:
        log.phase_line(name, runtime.ledger.messages(phase, "down"),
                       runtime.ledger.wire_bytes(phase))


def flower_rounds(runtime: Any, total: int, server: Any = None) -> tuple[Any, list[dict]]:
    """The deployed run's :class:`~fedgl.algorithms.watch.Watch` (each round's log line and
    what Flower and the ledger carried in it) and the list of those per-round bytes it fills
    (``extra.flower.per_round``); ``server``: see :func:`bytes_now`."""
    from fedgl.algorithms.watch import Watch

    per_round: list[dict] = []
    seen: dict[str, int] = {}

    def started(start: int) -> None:   # after the pre-training exchange or the resume
        seen.update(bytes_now(runtime, server))

    def round_done(t: int, row: dict) -> None:
        now = bytes_now(runtime, server)
        per_round.append({"round": t, **{k: now[k] - seen[k] for k in now}})
        seen.update(now)
        log_round(runtime, t, total, row)

    return Watch(started=started, round_done=round_done, startup_round=None), per_round
