"""Runtimes carry the server's calls to clients; the algorithm never sees the transport.

``runtime.call(method, args, phase)`` invokes ``client.method(**args[k])`` on every addressed
client ``k`` and returns ``{k: result}``. Arguments travel server -> client ("down") and results
client -> server ("up"); both are sized and recorded in the :class:`~fedgl.federation.ledger.Ledger`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

from fedgl.federation.ledger import Ledger
from fedgl.federation.messages import copy_payload, payload_nbytes

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
    """Clients as in-process objects. Every payload is copied, so no party aliases another's
    tensors, and every payload is counted by the ledger.

    ``args`` is either ``{client_id: kwargs}`` or one ``kwargs`` dict sent to every addressed
    client (a broadcast, counted once per recipient).
    """

    def __init__(self, clients: Mapping[int, Any], ledger: Ledger | None = None, *,
                 batch: bool = False) -> None:
        self._clients = dict(clients)
        self.batch = batch  # broadcast fit/evaluate via the clients' ``*_many`` where offered
        self._batch_cache: dict = {}  # their block-diagonal inputs, kept between rounds
        self.ledger = ledger if ledger is not None else Ledger()
        self.events: list[dict[str, Any]] = []  # in-process clients do not fail independently
        self.on_client_restart: Any = None

    def close(self) -> None:
        """Let the in-process clients go (their data, received rows and models)."""
        self._clients.clear()
        self._batch_cache.clear()

    @property
    def client_ids(self) -> list[int]:
        return sorted(self._clients)

    def local_client(self, client_id: int) -> Any:
        """The in-process client object (for tests and debugging; the server never uses it)."""
        return self._clients[client_id]

    def call(self, method: str, args: Mapping[int, dict[str, Any]] | dict[str, Any] | None = None,
             *, phase: str, clients: list[int] | None = None) -> dict[int, Any]:
        targets = self.client_ids if clients is None else list(clients)
        per_client = _per_client_args(args, targets)
        batched = self._call_batched(method, args, targets, per_client, phase)
        if batched is not None:
            return batched
        results: dict[int, Any] = {}
        down, up, compute = {}, {}, {}
        wall = time.perf_counter()
        for k in targets:
            kwargs = per_client[k]
            down[k] = payload_nbytes(kwargs)
            self.ledger.record(phase, "down", k, down[k])
            payload = copy_payload(kwargs)
            t0 = time.perf_counter()
            out = getattr(self._clients[k], method)(**payload)
            compute[k] = time.perf_counter() - t0
            up[k] = payload_nbytes(out)
            self.ledger.record(phase, "up", k, up[k])
            results[k] = copy_payload(out)
        self.ledger.record_call(phase, down, up, compute, time.perf_counter() - wall)
        return results

    def _call_batched(self, method: str, args: Any, targets: list[int],
                      per_client: dict[int, dict[str, Any]], phase: str) -> dict[int, Any] | None:
        """A broadcast ``fit``/``evaluate`` run by the client class's ``fit_many`` /
        ``evaluate_many`` (one computation for all in-process clients; the same messages are
        counted). None: not applicable."""
        if not (self.batch and targets and all(per_client[k] is args for k in targets)):
            return None
        group = [self._clients[k] for k in targets]
        if method not in getattr(type(group[0]), "BATCHABLE", BATCHABLE):
            return None
        many = getattr(type(group[0]), f"{method}_many", None)
        t0 = time.perf_counter()
        outs = (many(group, **copy_payload(args), cache=self._batch_cache)
                if many is not None else None)
        if outs is None:
            return None
        share = (time.perf_counter() - t0) / len(targets)  # one batched computation, split evenly
        results, down, up = {}, {}, {}
        sent = payload_nbytes(args)  # the same broadcast to every client
        for k, out in zip(targets, outs, strict=True):
            down[k], up[k] = sent, payload_nbytes(out)
            self.ledger.record(phase, "down", k, down[k])
            self.ledger.record(phase, "up", k, up[k])
            results[k] = copy_payload(out)
        self.ledger.record_call(phase, down, up, dict.fromkeys(targets, share),
                                time.perf_counter() - t0)
        return results


def _per_client_args(args: Any, targets: list[int]) -> dict[int, dict[str, Any]]:
    if args is None:
        return {k: {} for k in targets}
    if args and all(isinstance(key, int) for key in args):
        missing = [k for k in targets if k not in args]
        if missing:
            raise KeyError(f"no arguments for clients {missing}")
        return {k: args[k] for k in targets}
    return {k: args for k in targets}
