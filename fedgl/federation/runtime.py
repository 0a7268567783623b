"""Runtimes carry the server's messages to clients; the algorithm never sees the transport.

``runtime.call(msg_type, args, phase)`` sends message ``msg_type`` with payload ``args[k]`` to
every addressed client ``k`` and returns ``{k: reply}``. The client's
:class:`~fedgl.federation.protocol.Endpoint` accepts only the message types its role declares
(:func:`~fedgl.federation.protocol.handles`), checked against their schemas. Messages travel
server -> client ("down") and replies client -> server ("up"); both are sized (payload values
and encoded wire bytes) and recorded in the :class:`~fedgl.federation.ledger.Ledger`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

from fedgl.federation.codec import decode, encode
from fedgl.federation.ledger import Ledger
from fedgl.federation.messages import payload_nbytes
from fedgl.federation.protocol import Endpoint, handler_table, rider_payload, riders, with_riders

# broadcast methods a client class may run for all in-process clients at once (``<name>_many``);
# a client class can name its own in a ``BATCHABLE`` class attribute
BATCHABLE = ("fit", "evaluate")


class Runtime(Protocol):
    ledger: Ledger
    events: list[dict[str, Any]]

    @property
    def client_ids(self) -> list[int]: ...

    def call(self, method: str, args: Mapping[int, dict[str, Any]] | dict[str, Any] | None = None,
             *, phase: str, clients: list[int] | None = None) -> dict[int, Any]: ...

    def close(self) -> None: ...


class LocalRuntime:
    """Clients as in-process objects, each behind its protocol :class:`Endpoint`. Every message
    is encoded (:mod:`~fedgl.federation.codec`) and decoded on the other side, so no party
    aliases another's tensors and no Python object crosses; the ledger counts every message.

    ``args`` is either ``{client_id: payload}`` or one payload sent to every addressed client
    (a broadcast, counted once per recipient).
    """

    def __init__(self, clients: Mapping[int, Any], ledger: Ledger | None = None, *,
                 batch: bool = False) -> None:
        self._endpoints = {k: Endpoint(c, f"client {k}") for k, c in clients.items()}
        self.batch = batch  # broadcast fit/evaluate via the clients' ``*_many`` where offered
        self._batch_cache: dict = {}  # their block-diagonal inputs, kept between rounds
        self.ledger = ledger if ledger is not None else Ledger()
        self.events: list[dict[str, Any]] = []  # in-process clients do not fail independently
        self.on_client_restart: Any = None

    def close(self) -> None:
        """Let the in-process clients go (their data, received rows and models)."""
        self._endpoints.clear()
        self._batch_cache.clear()

    @property
    def client_ids(self) -> list[int]:
        return sorted(self._endpoints)

    def local_client(self, client_id: int) -> Any:
        """The in-process client object (for tests and debugging; the server never uses it)."""
        return self._endpoints[client_id].role

    def replace_client(self, client_id: int, client: Any) -> None:
        """Put a fresh client in ``client_id``'s place (a restarted process, for drills)."""
        self._endpoints[client_id] = Endpoint(client, f"client {client_id}")

    def refusals(self) -> list[str]:
        """Every message a client refused so far (one line each)."""
        return [line for e in self._endpoints.values() for line in e.refused]

    def call(self, method: str, args: Mapping[int, dict[str, Any]] | dict[str, Any] | None = None,
             *, phase: str, clients: list[int] | None = None) -> dict[int, Any]:
        """Send message type ``method`` with ``args`` to ``clients``; their decoded replies."""
        targets = self.client_ids if clients is None else list(clients)
        per_client = _per_client_args(args, targets)
        batched = self._call_batched(method, args, targets, per_client, phase)
        if batched is not None:
            return batched
        results: dict[int, Any] = {}
        down, up, compute = {}, {}, {}
        wall = time.perf_counter()
        shared = encode(method, args) if targets and per_client[targets[0]] is args else None
        for k in targets:
            message = shared if shared is not None else encode(method, per_client[k])
            down[k] = payload_nbytes(per_client[k])
            self.ledger.record(phase, "down", k, down[k], wire=message.nbytes)
            t0 = time.perf_counter()
            reply = self._endpoints[k].handle(message, phase)
            compute[k] = time.perf_counter() - t0
            results[k] = decode(reply)[1]
            up[k] = payload_nbytes(results[k])
            self.ledger.record(phase, "up", k, up[k], wire=reply.nbytes)
        self.ledger.record_call(phase, down, up, compute, time.perf_counter() - wall)
        return results

    def _call_batched(self, method: str, args: Any, targets: list[int],
                      per_client: dict[int, dict[str, Any]], phase: str) -> dict[int, Any] | None:
        """A broadcast ``fit``/``evaluate`` run by the client class's ``fit_many`` /
        ``evaluate_many`` (one computation for all in-process clients; the same messages are
        encoded, checked by every client's endpoint and counted). None: not applicable."""
        if not (self.batch and targets and all(per_client[k] is args for k in targets)):
            return None
        cls = type(self._endpoints[targets[0]].role)
        if any(type(self._endpoints[k].role) is not cls for k in targets):
            return None
        handler = handler_table(cls).get(method)
        if handler is None or handler.method not in getattr(cls, "BATCHABLE", BATCHABLE):
            return None
        many = getattr(cls, f"{handler.method}_many", None)
        if many is None:
            return None
        message = encode(method, args)
        payload = decode(message)[1]
        for k in targets:  # every recipient checks the message as if it had come alone
            self._endpoints[k].accept(method, payload, phase)
        group = [self._endpoints[k].role for k in targets]
        t0 = time.perf_counter()
        # the steps riding on it first, as the endpoint runs them (batched where the carried
        # type is), then the message's own step
        first = [self._run_all(cls, group, carried, payload)
                 for _, carried in riders(handler, payload)]
        own = {k: v for k, v in payload.items() if k not in handler.rides}
        outs = many(group, **own, cache=self._batch_cache)
        if outs is None:
            if not first:
                return None
            outs = [getattr(role, handler.method)(**own) for role in group]
        if first:
            outs = [with_riders(out, [f[i] for f in first]) for i, out in enumerate(outs)]
        share = (time.perf_counter() - t0) / len(targets)  # one batched computation, split evenly
        results, down, up = {}, {}, {}
        sent = payload_nbytes(args)  # the same broadcast to every client
        for k, out in zip(targets, outs, strict=True):
            reply = encode(method + ".reply", out)
            results[k] = decode(reply)[1]
            down[k], up[k] = sent, payload_nbytes(results[k])
            self.ledger.record(phase, "down", k, down[k], wire=message.nbytes)
            self.ledger.record(phase, "up", k, up[k], wire=reply.nbytes)
        self.ledger.record_call(phase, down, up, dict.fromkeys(targets, share),
                                time.perf_counter() - t0)
        return results


    def _run_all(self, cls: type, group: list[Any], msg_type: str, payload: dict) -> list[Any]:
        """Every client's step ``msg_type`` (carried by a rider of ``payload``): its batched
        ``*_many`` where offered and applicable, else each client's handler."""
        handler = handler_table(cls)[msg_type]
        sub = rider_payload(handler, payload)
        many = (getattr(cls, f"{handler.method}_many", None)
                if handler.method in getattr(cls, "BATCHABLE", BATCHABLE) else None)
        outs = None if many is None else many(group, **sub, cache=self._batch_cache)
        if outs is None:
            outs = [getattr(role, handler.method)(**sub) for role in group]
        for role in group:
            if handler.enters is not None:
                role.protocol_state = handler.enters
        return outs


def _per_client_args(args: Any, targets: list[int]) -> dict[int, dict[str, Any]]:
    if args is None:
        return {k: {} for k in targets}
    if args and all(isinstance(key, int) for key in args):
        missing = [k for k in targets if k not in args]
        if missing:
            raise KeyError(f"no arguments for clients {missing}")
        return {k: args[k] for k in targets}
    return {k: args for k in targets}
