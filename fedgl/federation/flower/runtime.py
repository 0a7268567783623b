"""FlowerRuntime: the server side of the deployment, over a Flower ``Grid``.

The same interface as :class:`~fedgl.federation.runtime.LocalRuntime`:
``call(msg_type, args, phase=, clients=)`` encodes each client's fedgl message
(:mod:`~fedgl.federation.codec`), sends it inside a Flower ``Message`` to the SuperNode of that
client (one Flower message type per fedgl type, see :mod:`.client_app`), waits for every reply
and decodes it. The ledger counts payload values and fedgl wire bytes exactly as the local
runtime does; :attr:`FlowerRuntime.flower_bytes` adds what Flower itself carried (the serialised
Flower objects of every message, i.e. fedgl's bytes plus Flower's framing), by phase and
direction, so the two can be compared.

Every exchange goes through :func:`exchange`: Flower's ``Grid.push_messages`` and
``Grid.pull_messages`` (its public API), checking for replies every :data:`PULL_INTERVAL`
seconds at most, where ``Grid.send_and_receive`` waits 3 s between checks.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from flwr.app import Message

from fedgl.errors import RunAborted
from fedgl.federation.codec import Encoded, WireError, decode, encode
from fedgl.federation.flower.client_app import META, fedgl_content, flower_type, record_body
from fedgl.federation.flower.pacing import Anticipation, pause
from fedgl.federation.ledger import Ledger
from fedgl.federation.messages import payload_nbytes
from fedgl.federation.protocol import ProtocolViolation
from fedgl.federation.runtime import _per_client_args


def flower_nbytes(message: Message) -> int | None:
    """Bytes of the serialised Flower objects that carry ``message`` (message, records,
    arrays); None where this Flower version does not expose them."""
    try:
        from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

        return sum(len(obj.deflate()) for obj in get_all_nested_objects(message).values())
    except Exception:  # noqa: BLE001 - a measurement only; never fails a run
        return None


#: the longest wait, in seconds, between two checks for replies; the first checks come sooner
#: (a quarter of the time waited so far, at least :data:`FIRST_PULL_INTERVAL`:
#: :func:`~fedgl.federation.flower.pacing.pause`), so that a reply is seen at most a quarter of
#: the exchange's time late
PULL_INTERVAL = 0.2
FIRST_PULL_INTERVAL = 0.01


#: the first wait, in seconds, before the grid asks again for an object of a reply that is still
#: being uploaded (Flower's grid waits 1 s, then 2 s, ... 10 s)
OBJECT_FIRST_BACKOFF = 0.01


@contextmanager
def quick_object_pulls(max_time: float | None = None) -> Iterator[None]:
    """While inside, Flower's ServerApp grid (``flwr.superlink.grid.http_grid``, a private
    module of the pinned flwr) retries an object not yet uploaded after
    :data:`OBJECT_FIRST_BACKOFF` s, doubling, instead of after 1 s: a check for replies can come
    while the SuperNode is still uploading a reply it has announced. With ``max_time``, the
    objects of the replies pulled must all have come within that many seconds, or the reply
    is Flower's "objects unavailable" error: a SuperNode killed after announcing its reply
    would otherwise hold the check until the SuperLink gives the upload up (minutes), past the
    exchange's own timeout, and the other replies with it."""
    try:
        from flwr.superlink.grid import http_grid
    except ImportError:   # another Flower layout: its own backoff stays
        yield
        return
    original = http_grid.pull_objects
    limits: dict[str, float] = {"initial_backoff": OBJECT_FIRST_BACKOFF}
    if max_time is not None:
        limits["max_time"] = max_time
    http_grid.pull_objects = functools.partial(original, **limits)
    try:
        yield
    finally:
        http_grid.pull_objects = original


#: the seconds a last check for replies, at the exchange's timeout, may take to pull the
#: objects of replies already announced
LAST_CHECK_TIME = 2.0


def exchange(grid: Any, messages: list[Message], timeout: float | None) -> list[Message]:
    """Push ``messages`` and pull their replies until every reply has come or ``timeout``
    seconds have passed (None: no limit): ``grid.send_and_receive``'s contract, with checks
    for replies every :data:`PULL_INTERVAL` s at most instead of every 3 s. A message Flower
    could not push gets no reply (its client is reported silent)."""
    return list(exchange_keyed(grid, messages, timeout).replies.values())


@dataclass
class Exchanged:
    """What one :func:`exchange_keyed` saw: the id Flower gave each pushed message (``""``
    where it could not push it), the replies by the id of the message they answer, and when
    each came (seconds after the push)."""

    ids: list[str]
    replies: dict[str, Message] = field(default_factory=dict)
    after: dict[str, float] = field(default_factory=dict)
    elapsed: float = 0.0


def exchange_keyed(grid: Any, messages: list[Message], timeout: float | None,
                   on_wait: Callable[[list[int], float], None] | None = None,
                   wait_every: float = 10.0,
                   anticipation: Anticipation | None = None) -> Exchanged:
    """:func:`exchange`, keeping which message each reply answers. A reply is matched by its
    ``reply_to_message_id``, not by its sender: the SuperLink itself answers for a SuperNode
    that stopped reporting (Flower's "node unavailable" error reply comes from the SuperLink's
    node id, not the client's). ``on_wait(positions, seconds)`` is called every ``wait_every``
    seconds while replies are missing, with the positions in ``messages`` of those unanswered.
    With ``anticipation`` (the recent exchanges of this message type), the first check waits
    until about when the first reply came in those, and the paced checks start from there."""
    start = time.monotonic()
    next_wait = start + wait_every
    ids = [str(i) if i else "" for i in grid.push_messages(messages)]
    seen = Exchanged(ids)
    waiting = {i for i in ids if i}
    end = None if timeout is None else start + timeout
    first = anticipation.first_wait() if anticipation is not None and waiting else 0.0
    if first > 0:   # the bounds are measured from before the push: so is the first wait
        until = start + first if end is None else min(start + first, end)
        time.sleep(max(0.0, until - time.monotonic()))
    paced_from = time.monotonic()
    last_empty: float | None = None
    last_check = False
    while waiting:
        checked = time.monotonic()
        limit = None if end is None else max(end - checked, LAST_CHECK_TIME)
        with quick_object_pulls(limit):
            replies = list(grid.pull_messages(waiting))
        had = len(seen.replies)
        for reply in replies:
            answered = str(reply.metadata.reply_to_message_id)
            if answered in waiting:
                waiting.discard(answered)
                seen.replies[answered] = reply
                seen.after[answered] = time.monotonic() - start
        if not seen.replies:
            last_empty = checked - start
        elif not had and anticipation is not None:   # this exchange's first replies
            anticipation.found(last_empty, first)
        if not waiting:
            break
        now = time.monotonic()
        if on_wait is not None and now >= next_wait:
            on_wait(sorted(ids.index(i) for i in waiting), now - start)
            next_wait = now + wait_every
        left = None if end is None else end - now
        if left is not None and left <= 0:
            if last_check:
                break
            last_check = True   # once more at once: replies that came while a check waited
            continue
        wait = pause(now - paced_from, PULL_INTERVAL, floor=FIRST_PULL_INTERVAL)
        time.sleep(wait if left is None else min(wait, left))
    seen.elapsed = time.monotonic() - start
    return seen


def refusal(reply: Message, client: int) -> str | None:
    """The one-line reason a reply is not a fedgl answer (a Flower error or a refusal)."""
    if reply.has_error():
        return f"client {client}: Flower error {reply.error.code}: {reply.error.reason[:300]}"
    meta = reply.content.config_records.get(META)
    if meta is not None and "refused" in meta:
        return str(meta["refused"])
    return None


class FlowerRuntime:
    """fedgl clients behind Flower SuperNodes: ``nodes`` maps client id -> Flower node id (the
    mapping the clients proved with their roster keys, :mod:`fedgl.deployment.server_app`)."""

    def __init__(self, grid: Any, nodes: Mapping[int, int], ledger: Ledger | None = None, *,
                 timeout: float = 600.0, on_client_failure: str = "abort") -> None:
        self.grid = grid
        self.nodes = dict(nodes)
        self.ledger = ledger if ledger is not None else Ledger()
        self.events: list[dict[str, Any]] = []
        #: what the clients' shards say they hold (the result's ``environment.data``)
        self.data: dict[str, Any] | None = None
        self.on_client_restart: Any = None
        self.timeout = timeout
        self.on_client_failure = on_client_failure
        self._dropped: set[int] = set()
        #: Flower-serialised bytes by phase and direction (fedgl bytes + Flower's framing)
        self.flower_bytes: dict[str, dict[str, int]] = defaultdict(lambda: {"up": 0, "down": 0})
        self.calls = 0
        #: :attr:`flower_bytes` as they were when the latest call began
        self.flower_bytes_before_call: dict[str, dict[str, int]] = {}
        #: the deployment's checkpointing of this run (``fedgl.deployment.server_app``)
        self.continuation: Any = None
        #: where the run's progress lines go (``fedgl.deployment.server_log``): a callable
        self.log: Callable[[str], None] = lambda _line: None
        #: seconds between two "waiting for clients ..." lines of one exchange
        self.wait_every = 10.0
        #: when the first replies came in the recent exchanges, by message type
        self.anticipations: dict[str, Anticipation] = defaultdict(Anticipation)

    @property
    def client_ids(self) -> list[int]:
        return sorted(k for k in self.nodes if k not in self._dropped)

    def close(self) -> None:
        """The SuperNodes and parties belong to the organisations: nothing to stop here."""

    def call(self, method: str, args: Mapping[int, dict[str, Any]] | dict[str, Any] | None = None,
             *, phase: str, clients: list[int] | None = None) -> dict[int, Any]:
        """Send fedgl message ``method`` to ``clients`` through Flower; their decoded replies."""
        self.flower_bytes_before_call = defaultdict(
            lambda: {"up": 0, "down": 0}, {p: dict(v) for p, v in self.flower_bytes.items()})
        targets = [k for k in (self.client_ids if clients is None else clients)
                   if k not in self._dropped]
        per_client = _per_client_args(args, targets)
        shared = encode(method, args) if targets and per_client[targets[0]] is args else None
        down: dict[int, int] = {}
        up: dict[int, int] = {}
        wall = time.perf_counter()
        messages = []
        for k in targets:
            enc = shared if shared is not None else encode(method, per_client[k])
            down[k] = payload_nbytes(per_client[k])
            self.ledger.record(phase, "down", k, down[k], wire=enc.nbytes)
            content = fedgl_content({"phase": phase}, enc.to_bytes())
            msg = Message(content, dst_node_id=self.nodes[k], message_type=flower_type(method, phase))
            self.flower_bytes[phase]["down"] += flower_nbytes(msg) or 0
            messages.append(msg)
        def waiting(missing: list[int], seconds: float) -> None:
            names = ", ".join(str(targets[i]) for i in missing)
            self.log(f"waiting for clients {names} ('{method}', {seconds:.0f} s)")

        seen = exchange_keyed(self.grid, messages, self.timeout, on_wait=waiting,
                              wait_every=self.wait_every,
                              anticipation=self.anticipations[method])
        self.calls += 1
        results: dict[int, Any] = {}
        for k, message_id in zip(targets, seen.ids, strict=True):
            reply = seen.replies.get(message_id) if message_id else None
            if reply is None:
                self._failed(k, method, phase, _silence(message_id, seen.elapsed, self.timeout))
                continue
            why = refusal(reply, k)
            if why is not None:
                if reply.has_error():
                    self._failed(k, method, phase, _flower_failure(
                        reply, why, seen.after[message_id], self.on_client_failure == "drop"))
                    continue
                raise ProtocolViolation(why)
            self.flower_bytes[phase]["up"] += flower_nbytes(reply) or 0
            raw = record_body(reply.content)
            try:
                results[k] = decode(Encoded.from_bytes(raw))[1]
            except WireError as exc:
                raise ProtocolViolation(f"client {k} sent an unreadable reply ({exc})") from None
            up[k] = payload_nbytes(results[k])
            self.ledger.record(phase, "up", k, up[k], wire=len(raw))
        # the clients computed in their own processes: per-client compute time is not seen here
        self.ledger.record_call(phase, down, up, dict.fromkeys(results, 0.0),
                                time.perf_counter() - wall)
        return results

    def _failed(self, k: int, method: str, phase: str, why: str) -> None:
        event = {"client": k, "method": method, "phase": phase, "time": time.time(),
                 "error": why[:300]}
        if self.on_client_failure == "drop":
            self._dropped.add(k)
            self.events.append({**event, "action": "dropped"})
            self.log(f"client {k} dropped during '{method}': {why}")
            return
        self.events.append({**event, "action": "aborted"})
        self.log(f"client {k} failed during '{method}': {why}; the run stops")
        raise RunAborted(f"client {k} failed during '{method}' ({why}); policy "
                         f"{self.on_client_failure}")


def _silence(message_id: str, elapsed: float, timeout: float) -> str:
    """Why a client has no reply, with the time it really took."""
    if not message_id:
        return ("Flower could not deliver the message (is its SuperNode connected to the "
                "SuperLink?)")
    return (f"no reply after {elapsed:.0f} s (--message-timeout {timeout:g} s); if the client "
            "is slow rather than gone, raise --message-timeout")


#: Flower's error code for a reply the SuperLink writes itself when the destination SuperNode
#: stopped sending heartbeats (``flwr.common.constant.ErrorCode.NODE_UNAVAILABLE``)
NODE_UNAVAILABLE = 5


def _flower_failure(reply: Message, why: str, after: float, dropping: bool = False) -> str:
    """A Flower error reply, said plainly, with when it came; the advice fits the run's
    ``--on-client-failure`` (``dropping``: the run already goes on without the client)."""
    if int(reply.error.code) == NODE_UNAVAILABLE:
        fix = ("the run goes on without it" if dropping else
               "restart it, or run with --on-client-failure drop to go on without it")
        return (f"its SuperNode stopped reporting to the SuperLink after {after:.0f} s (Flower: "
                "node unavailable): the organisation's `fedgl client` stopped or lost its "
                f"connection; {fix}")
    return f"{why} (after {after:.0f} s)"
