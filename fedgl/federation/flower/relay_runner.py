"""fedgl's relay runner: answers a SuperNode's ClientApp tasks with fedgl's relay, whoever
submitted the run, from a process of its own or (:func:`answer_task`) inside the SuperNode.

``fedgl client`` answers every message inside its paced SuperNode (:mod:`.supernode`), which
calls :func:`answer_task` with Flower's Runtime API handlers in process. The runner process of
this module is the layout before, which the benchmarks still start (``FEDGL_SUPERNODE=runner``
or ``flower``): beside a SuperNode in ``--isolation process``, which keeps every message it
pulls from the SuperLink as a pending task on its Runtime API (HTTP on 127.0.0.1), it claims
each task::

    loop: AcquireTask (ClientApp tasks only) -> with the task's token: PullTaskInput (message,
          context, run, FAB) -> RelayClientApp(message, context) -> PushMessages -> PushTaskOutput

The run's FAB (the app its submitter built, code included) comes with the task and is dropped:
it is never unpacked, installed, imported or run. Whatever run a message belongs to, it is
answered by :class:`~fedgl.federation.flower.client_app.RelayClientApp`, which hands it to the
party over its Unix socket; a run that is not fedgl's reaches only the party's protocol (its
messages are refused there like any server's). Tasks of other kinds (an agent app) are never
claimed. Each task runs in this process, one at a time (the party answers one at a time too), so
no process starts per message.

The runner's only inputs are the Runtime API's address, the party's socket path and the relay's
token, read from an inherited pipe (``--token-fd``): it never gets the key's or the shard's path.
It uses Flower's Runtime API client and task functions (``flwr.supernode.runtime``), which are not
a public API: :data:`TESTED_FLWR` is the version range this was tested with, and a start-up line
says when another is installed.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import threading
import time
from typing import Any

TESTED_FLWR = (">=1.42", "<1.43")
#: seconds between the runner's checks for a pending task beside Flower's own SuperNode
POLL_INTERVAL = 0.1
#: the same beside fedgl's paced SuperNode, which wakes the runner for each message
#: (``--task-fd``): a check that finds a task the wake-up missed
WOKEN_POLL = 1.0
#: seconds a claimed task waits for the SuperNode to store its message
MESSAGE_WAIT = 30.0


def flwr_version_line() -> str | None:
    """One line when the installed flwr is outside :data:`TESTED_FLWR`, else None."""
    from importlib.metadata import version

    installed = version("flwr")
    parts = tuple(int(p) for p in installed.split(".")[:2] if p.isdigit())
    if len(parts) == 2 and (1, 42) <= parts < (1, 43):
        return None
    return (f"fedgl's relay runner was tested with flwr {','.join(TESTED_FLWR)}; flwr {installed} "
            "is installed: its task API may differ (pip install 'flwr>=1.42,<1.43')")


def _runtime_client(address: str, interceptors: list[Any]) -> Any:
    """A Runtime API client without Flower's retry policy (which, made for one process per
    task, interrupts its own process when a task's token is refused): a failed request fails
    its task only. Its ``PullMessages`` waits (up to :data:`MESSAGE_WAIT` s) for the task's
    message: the SuperNode makes a task pending a moment before it stores the message, a gap
    a process started per task never meets but a runner that claims at once can."""
    from flwr.supercore.runtime import RuntimeHttpClient

    class Client(RuntimeHttpClient):
        def PullMessages(self, request: Any) -> Any:  # noqa: N802 - Flower's method name
            deadline = time.monotonic() + MESSAGE_WAIT
            while True:
                res = super().PullMessages(request)
                if res.messages_list or time.monotonic() > deadline:
                    return res
                time.sleep(0.02)

    return Client.from_server_address(
        server_address=address, insecure=True, root_certificates=None,
        interceptors=interceptors, retry_invoker=None)


def run_task(address: str, token: str, party: str, relay_token: str | None) -> str:
    """Answer one claimed ClientApp task with fedgl's relay over the Runtime API; its line."""
    from flwr.supercore.interceptors import (
        RuntimeTokenHttpInterceptor,
        RuntimeVersionHttpInterceptor,
    )

    client = _runtime_client(address, [RuntimeVersionHttpInterceptor("flwr-clientapp"),
                                       RuntimeTokenHttpInterceptor(token)])
    try:
        return answer_task(client, party, relay_token)
    finally:
        client.close()


def answer_task(client: Any, party: str, relay_token: str | None) -> str:
    """Answer one claimed task through ``client`` (the Runtime API's methods: over HTTP, or in
    the SuperNode's own process, :mod:`.supernode`) with fedgl's relay; the exchange's line."""
    from logging import DEBUG

    from flwr.app import Message
    from flwr.app.error import Error
    from flwr.common.constant import ErrorCode, SubStatus
    from flwr.proto.runtime_pb2 import SendTaskHeartbeatRequest  # pylint: disable=E0611
    from flwr.supercore import log
    from flwr.supercore.heartbeat import HeartbeatSender
    from flwr.supernode.runtime.run_clientapp import (
        pull_task_input,
        push_message,
        push_task_output,
    )

    from fedgl.federation.flower.client_app import RelayClientApp

    def heartbeat() -> bool:   # a lost task ends with its push; the relay is not interrupted
        try:
            client.SendTaskHeartbeat(SendTaskHeartbeatRequest())
        except Exception:  # noqa: BLE001 - an HTTP error, or the task is gone
            return False
        return True

    beat = HeartbeatSender(heartbeat)
    beat.start()
    start = time.perf_counter()
    context, status, details = None, SubStatus.FAILED, "the relay failed"
    try:
        message, context, run, _fab = pull_task_input(client)   # the FAB is dropped unread
        log(DEBUG, "fedgl relay: started task of run %d", run.run_id)
        try:
            reply = RelayClientApp(party, relay_token)(message, context)
            status, details = SubStatus.COMPLETED, ""
        except Exception as exc:  # noqa: BLE001 - the server gets Flower's error reply
            details = f"fedgl's relay: {type(exc).__name__}: {exc}"
            reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=details),
                            reply_to=message)
        push_message(client, reply, context)
        return exchange_line(run.run_id, message, reply, time.perf_counter() - start, details)
    finally:
        try:
            push_task_output(client, context, status, details)
        finally:
            beat.stop()


def _body_bytes(message: Any) -> int:
    """fedgl bytes a Flower message carries (0 for an error or a bare refusal)."""
    from fedgl.federation.flower.client_app import has_body, record_body

    if message.has_error() or not has_body(message.content):
        return 0
    return len(record_body(message.content))


def exchange_line(run_id: int, message: Any, reply: Any, seconds: float,
                  details: str = "") -> str:
    """The line the runner prints for each exchange it answered: the message's Flower type,
    fedgl bytes in and out, the time from claiming the task to pushing the reply, and the
    reply's outcome (``refused: ...`` or a relay failure, in full, when it is not an answer)."""
    outcome = details
    if not outcome and not reply.has_error():
        meta = reply.content.config_records.get("fedgl-meta")
        if meta is not None and "refused" in meta:
            outcome = f"refused: {meta['refused']}"
    return (f"fedgl relay: run {run_id}: '{message.metadata.message_type}' "
            f"{_body_bytes(message):,} bytes in, {_body_bytes(reply):,} bytes out, "
            f"{seconds:.3f} s{'; ' + outcome if outcome else ''}")


def quick_object_pulls() -> None:
    """In this process, Flower's object pulls (``flwr.supercore.inflatable.inflatable_utils``)
    retry an object not yet stored after 10 ms, doubling, instead of after 1 s."""
    import functools

    from flwr.supercore.inflatable import inflatable_utils

    from fedgl.federation.flower.supernode import OBJECT_FIRST_BACKOFF

    pull = inflatable_utils.pull_objects
    if not isinstance(pull, functools.partial):
        inflatable_utils.pull_objects = functools.partial(
            pull, initial_backoff=OBJECT_FIRST_BACKOFF)


def serve(address: str, party: str, relay_token: str | None,
          stop: threading.Event | None = None, poll: float = POLL_INTERVAL,
          task_fd: int | None = None, reply_fd: int | None = None) -> None:
    """Claim and answer the SuperNode's ClientApp tasks until ``stop`` is set.

    With ``task_fd`` (the paced SuperNode writes a byte there per stored message,
    :mod:`.supernode`) the runner checks for a task when a byte comes, and every
    :data:`WOKEN_POLL` s in case one was missed, and an object of a task's message that the
    SuperNode has not stored yet is asked for again after 10 ms, doubling (Flower's task
    functions wait 1 s first); without it (beside Flower's own SuperNode) every ``poll`` s,
    with Flower's backoff. After each reply it writes a byte to ``reply_fd`` (the SuperNode's
    wait for the reply then ends at once)."""
    from logging import ERROR

    import httpx
    from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=E0611
    from flwr.supercore import log
    from flwr.supercore.constant import TaskType
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor

    from fedgl.federation.flower.supernode import drain, signal_pipe

    stop = stop or threading.Event()
    if task_fd is not None:
        quick_object_pulls()
    if task_fd is not None:
        os.set_blocking(task_fd, False)
    if reply_fd is not None:
        os.set_blocking(reply_fd, False)
    control = _runtime_client(address, [RuntimeVersionHttpInterceptor("SuperExec")])
    try:
        while not stop.is_set():
            try:
                res = control.AcquireTask(AcquireTaskRequest(
                    supported_task_types=[TaskType.CLIENT_APP]))
            except httpx.HTTPError:   # the SuperNode is starting (or stopping): try again
                stop.wait(max(poll, 0.5))
                continue
            if res.HasField("task") and res.token:
                try:
                    print(run_task(address, res.token, party, relay_token), flush=True)
                except Exception as exc:  # noqa: BLE001 - one task's failure ends no run
                    log(ERROR, "fedgl relay: task %d failed: %s: %s", res.task.task_id,
                        type(exc).__name__, exc)
                signal_pipe(reply_fd)
                continue
            if task_fd is None:
                stop.wait(poll)
            elif select.select([task_fd], [], [], WOKEN_POLL)[0] and not drain(task_fd):
                task_fd = None   # the SuperNode is gone: poll until fedgl client stops us
    finally:
        control.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fedgl.federation.flower.relay_runner",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--runtime-api", required=True, help="the SuperNode's Runtime API HOST:PORT")
    ap.add_argument("--party", required=True, help="the party's Unix socket")
    ap.add_argument("--token-fd", type=int, default=None,
                    help="an inherited pipe the relay's token is read from (then closed)")
    ap.add_argument("--task-fd", type=int, default=None,
                    help="an inherited pipe on which the SuperNode announces each stored message")
    ap.add_argument("--reply-fd", type=int, default=None,
                    help="an inherited pipe on which the runner announces each pushed reply")
    args = ap.parse_args(argv)
    token = None
    if args.token_fd is not None:
        with os.fdopen(args.token_fd, "r") as pipe:
            token = pipe.read().strip() or None
    line = flwr_version_line()
    if line:
        print(line, file=sys.stderr, flush=True)
    try:
        serve(args.runtime_api, args.party, token, task_fd=args.task_fd,
              reply_fd=args.reply_fd)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
