"""Flower's SuperNode as ``fedgl client`` starts it: Flower's own ``flower-supernode``, paced.

``python -m fedgl.federation.flower.supernode [--party SOCKET --token-fd N] [--task-fd N
--reply-fd M] FLOWER-ARGS`` runs Flower's ``flower-supernode`` command with ``FLOWER-ARGS``
unchanged (its Fleet API connection to the SuperLink, TLS, SuperNode authentication, its Runtime
API on 127.0.0.1, ``--isolation process``).

With ``--party`` (how ``fedgl client`` starts it), each message the SuperNode has stored is
answered at once in this process: it claims the message's ClientApp task and runs
:func:`~fedgl.federation.flower.relay_runner.answer_task` (fedgl's relay, the party at
``SOCKET``, the relay's token read from the pipe ``--token-fd``) with :class:`InProcessRuntime`,
Flower's own Runtime API handlers called directly: the exchange costs no HTTP round trip on the
organisation's machine and no task runner process. Whatever run a message belongs to, only the
relay answers it; the run's FAB is never unpacked or run; tasks of other kinds are never
claimed. Three of Flower's fixed waits are paced (:mod:`.pacing`):

- after a pull from the SuperLink that found no message, Flower sleeps 3 s;
- while its task runner computes a reply, it checks for the reply every 0.5 s;
- an object of a message not yet uploaded is asked for again after 1 s, then 2 s, ... 10 s.

Its heartbeat to the SuperLink is Flower's shortest, :data:`NODE_HEARTBEAT` (10 s, not 30 s): a
SuperNode that stops (its ``fedgl client`` killed, its machine gone) is taken for gone by the
SuperLink two intervals after its last heartbeat, about 20 s (not 60 s), and the server's
waiting exchange then gets Flower's "node unavailable" reply for it.

The first two wait :func:`~fedgl.federation.flower.pacing.pause` of the time since the node last
received a message or pushed a reply (at most Flower's own wait); the third backs off from
10 ms. With ``--reply-fd``, a byte on that pipe (fedgl's relay runner writes one after each
reply it pushes) ends the current wait at once; with ``--task-fd``, the SuperNode writes a byte
there after it stored each message, so that the runner claims the task without polling for it.

This replaces attributes of Flower's SuperNode main loop module
(``flwr.supernode.start_client_internal``: ``time``, ``pull_objects``,
``_pull_and_store_message``, ``_push_messages``), a private API: it is tested with the flwr
versions of :data:`~fedgl.federation.flower.relay_runner.TESTED_FLWR`, and a start-up line says
when another is installed. Nothing else of Flower's changes: the messages, their bytes, who may
connect and which tasks run are Flower's and fedgl's relay's as before.
"""

from __future__ import annotations

import functools
import importlib
import os
import select
import sys
import time
from typing import Any

from fedgl.federation.flower.pacing import Anticipation, PacedClock, pause

#: the first wait, in seconds, before an object not yet uploaded is asked for again
OBJECT_FIRST_BACKOFF = 0.01


class _WakeableClock(PacedClock):
    """A :class:`PacedClock` whose waits also end when a byte arrives on ``wake`` (drained)."""

    def __init__(self, wake: int | None) -> None:
        super().__init__()
        self.wake = wake

    def sleep(self, seconds: float) -> None:
        wait = pause(time.monotonic() - self.since, cap=seconds)
        self.sleeps += 1
        if self.wake is None:
            time.sleep(wait)
            return
        ready, _, _ = select.select([self.wake], [], [], wait)
        if ready and not drain(self.wake):
            self.wake = None


def drain(fd: int) -> bool:
    """Read whatever is waiting on the non-blocking pipe ``fd``; False once its writer has
    closed it (the caller then stops waiting on it: an ended pipe is always readable)."""
    try:
        while True:
            if not os.read(fd, 4096):
                return False
    except (BlockingIOError, InterruptedError):
        return True


class _Waiting:
    """The SuperNode's wait for its next message since it pushed a reply, for its
    :class:`~fedgl.federation.flower.pacing.Anticipation` (``anticipation``)."""

    def __init__(self) -> None:
        self.anticipation = Anticipation()
        self.began: float | None = None
        self.first = 0.0
        self.last_empty: float | None = None

    def begin(self, now: float) -> float:
        """A reply was pushed at ``now``: the wait before the first poll for the next message."""
        self.began, self.first, self.last_empty = now, self.anticipation.first_wait(), None
        return self.first

    def empty(self, polled_at: float) -> None:
        if self.began is not None:
            self.last_empty = polled_at - self.began

    def found(self) -> None:
        if self.began is not None:
            self.anticipation.found(self.last_empty, self.first)
            self.began = None


def signal_pipe(fd: int | None) -> None:
    """Write one byte to the non-blocking pipe ``fd``; a full or closed pipe is no error (the
    reader polls as well)."""
    if fd is None:
        return
    try:
        os.write(fd, b".")
    except (BlockingIOError, BrokenPipeError, OSError):
        pass


class InProcessRuntime:
    """The Runtime API's task methods, called in the SuperNode's own process: Flower's handlers
    (``flwr.supernode.servicer.runtime.runtime_handlers``, what its HTTP routes call) on the
    node's state, for one claimed task. Flower's task functions (``pull_task_input``,
    ``push_message``, ``push_task_output``) take it in place of their HTTP client."""

    METHODS = {"PullTaskInput": "pull_task_input", "PullMessages": "pull_messages",
               "PullObject": "pull_object", "ConfirmMessageReceived": "confirm_message_received",
               "PushMessages": "push_messages", "PushObject": "push_object",
               "PushTaskOutput": "push_task_output"}

    def __init__(self, state: Any, task: Any) -> None:
        self.state = state
        self.task = task

    def __getattr__(self, name: str) -> Any:
        from flwr.supercore.servicer.runtime import runtime_handlers as core
        from flwr.supernode.servicer.runtime import runtime_handlers as node

        if name == "SendTaskHeartbeat":
            handler = core.send_task_heartbeat
        elif name in self.METHODS:
            handler = getattr(node, self.METHODS[name])
        else:
            raise AttributeError(name)
        return lambda request: handler(request, self.state, self.task)


def drop_stale_tasks(state: Any, store: Any, keep_run: int | None) -> int:
    """Finish, as failed, every pending task of a run other than ``keep_run`` (None: every
    pending task) and delete that run's stored messages and their objects; how many tasks.

    Flower 1.42's SuperNode, receiving a message whose run stops meanwhile (its "not in
    `RUNNING` status. Ignoring message" path), returns with the message stored, its task
    pending and its objects never pulled: a later claim can take that task and wait for its
    objects for good (a ServerApp killed mid-run, then a resumed run's first message, never
    answered). Where the relay answers in this process every stored message is answered at
    once, so any other pending task is such a leftover."""
    from logging import WARNING

    from flwr.common.constant import Status, SubStatus
    from flwr.supercore import log

    stale = [t for t in state.get_tasks(statuses=[Status.PENDING]) if t.run_id != keep_run]
    for task in stale:
        state.finish_task(task.task_id, SubStatus.FAILED,
                          "fedgl relay: the message's run stopped before it was received")
        for message in state.get_messages_legacy(run_ids=[task.run_id], is_reply=False):
            state.delete_messages(message_ids=[message.metadata.message_id])
            store.delete(message.metadata.message_id)
        log(WARNING, "fedgl relay: dropped a message of run %d, which stopped before the "
            "message was received", task.run_id)
    return len(stale)


def relay_in_process(party: str, token: str | None) -> Any:
    """``relay(state)``: claim the pending ClientApp task of the message just stored and answer
    it with fedgl's relay in this process; print the exchange's line. True when a reply was
    pushed; False when there was no task to claim (a message of a run that has ended) or the
    task failed before its reply."""

    def relay(state: Any) -> bool:
        from logging import ERROR

        from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=E0611
        from flwr.supercore import log
        from flwr.supercore.constant import TaskType
        from flwr.supernode.servicer.runtime.runtime_handlers import acquire_task

        from fedgl.federation.flower.relay_runner import answer_task

        res = acquire_task(AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP]),
                           state)
        if not (res.HasField("task") and res.token):
            return False
        try:
            print(answer_task(InProcessRuntime(state, res.task), party, token), flush=True)
        except Exception as exc:  # noqa: BLE001 - one task's failure ends no run
            log(ERROR, "fedgl relay: task %d failed: %s: %s", res.task.task_id,
                type(exc).__name__, exc)
            return False
        return True

    return relay


#: the SuperNode's heartbeat interval in seconds (Flower's default is 30, its least 10)
NODE_HEARTBEAT = 10.0


def shorten_heartbeat(interval: float = NODE_HEARTBEAT) -> None:
    """The SuperNode's heartbeat interval (its activation tells the SuperLink, which takes the
    node for gone after two intervals without one; the sender waits about 0.8 × (interval -
    5 s) between heartbeats)."""
    from flwr.supercore import heartbeat
    from flwr.supernode import fleet_http_connection

    fleet_http_connection.HEARTBEAT_DEFAULT_INTERVAL = interval
    heartbeat.HEARTBEAT_DEFAULT_INTERVAL = interval


def install(task_fd: int | None = None, reply_fd: int | None = None,
            relay: Any = None) -> PacedClock:
    """Pace Flower's SuperNode loop in this process; the clock it now uses. With ``relay``
    (:func:`relay_in_process`), each stored message is answered at once in this process."""
    from flwr.supercore.inflatable.inflatable_utils import pull_objects

    loop: Any = importlib.import_module("flwr.supernode.start_client_internal")
    shorten_heartbeat()
    for fd in (task_fd, reply_fd):
        if fd is not None:
            os.set_blocking(fd, False)
    clock = _WakeableClock(reply_fd)
    pull_and_store, push = loop._pull_and_store_message, loop._push_messages
    waiting = _Waiting()

    def pull_and_store_message(*args: Any, **kwargs: Any) -> Any:
        began = time.monotonic()
        run_id = pull_and_store(*args, **kwargs)
        if relay is not None:
            drop_stale_tasks(kwargs["state"], kwargs["object_store"], run_id)
        if run_id is None:
            waiting.empty(began)
        else:
            waiting.found()
            clock.mark()
            if relay is not None and not relay(kwargs["state"]):
                # no reply will come: Flower's loop would wait for one forever (its push step
                # waits until a reply is stored), and the node would answer nothing again
                return None
            signal_pipe(task_fd)
        return run_id

    def push_messages(*args: Any, **kwargs: Any) -> None:
        try:
            push(*args, **kwargs)
        finally:
            clock.mark()
        # Flower's loop polls again at once; the next message of a run comes about as long
        # after each reply as it did after the last ones (the server first collects every
        # reply): the first poll waits for that, the paced polls follow from there
        first = waiting.begin(time.monotonic())
        if first > 0:
            time.sleep(first)
            clock.mark()

    loop.time = clock
    loop.pull_objects = functools.partial(pull_objects, initial_backoff=OBJECT_FIRST_BACKOFF)
    loop._pull_and_store_message = pull_and_store_message
    loop._push_messages = push_messages
    return clock


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    ours: dict[str, str | None] = {"--task-fd": None, "--reply-fd": None, "--party": None,
                                   "--token-fd": None}
    for flag in ours:
        if flag in args:
            i = args.index(flag)
            ours[flag] = args[i + 1]
            del args[i:i + 2]
    fds = {k: int(v) if v is not None and k.endswith("-fd") else None for k, v in ours.items()}
    relay = None
    if ours["--party"]:
        token = None
        if fds["--token-fd"] is not None:
            with os.fdopen(fds["--token-fd"], "r") as pipe:
                token = pipe.read().strip() or None
        relay = relay_in_process(ours["--party"], token)
    from fedgl.federation.flower.relay_runner import flwr_version_line

    line = flwr_version_line()
    if line:
        print(line.replace("relay runner", "paced SuperNode"), file=sys.stderr, flush=True)
    install(fds["--task-fd"], fds["--reply-fd"], relay)
    from flwr.supernode.cli.flower_supernode import flower_supernode

    sys.argv = ["flower-supernode", *args]
    flower_supernode()
    return 0


if __name__ == "__main__":
    sys.exit(main())
