"""The ledger: every byte that crosses between parties, and the wall time of each phase."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

PHASES = ("pretrain", "train", "eval")
#: the set-up messages: the clients' public facts (``setup.facts``, every runtime), a
#: deployment's identity challenge and run configuration, a vertical alignment's PSI; in the
#: summary only when some were recorded
SETUP = "setup"
DIRECTIONS = ("up", "down")  # up: client -> server, down: server -> client


class Ledger:
    """Counts bytes and messages by (phase, direction, client) and seconds by phase."""

    def __init__(self) -> None:
        self._bytes: dict[tuple[str, str, int], int] = defaultdict(int)
        self._messages: dict[tuple[str, str, int], int] = defaultdict(int)
        # encoded message sizes (fedgl.federation.codec): values plus header and framing
        self._wire: dict[tuple[str, str, int], int] = defaultdict(int)
        self._seconds: dict[str, float] = defaultdict(float)
        # simulated network (fedgl.federation.network): off unless a model is attached
        self.network = None
        self._sim: dict[str, float] = defaultdict(float)
        self._in_calls: dict[str, float] = defaultdict(float)

    def record(self, phase: str, direction: str, client: int, nbytes: int,
               wire: int | None = None) -> None:
        """One message: ``nbytes`` of values (what the papers' formulas count) and ``wire``
        bytes as encoded (values, header and framing; the values when not given)."""
        if phase not in PHASES and phase != SETUP:
            raise ValueError(f"unknown phase {phase!r}")
        if direction not in DIRECTIONS:
            raise ValueError(f"unknown direction {direction!r}")
        self._bytes[(phase, direction, client)] += int(nbytes)
        self._messages[(phase, direction, client)] += 1
        self._wire[(phase, direction, client)] += int(nbytes if wire is None else wire)

    def record_call(self, phase: str, down: dict[int, int], up: dict[int, int],
                    compute: dict[int, float], wall: float) -> None:
        """One runtime call's per-client bytes and compute seconds, and its wall time; adds the
        call's simulated duration when a network model is attached."""
        self._in_calls[phase] += wall
        if self.network is not None:
            self._sim[phase] += self.network.call_seconds(down, up, compute)

    def simulated_seconds(self, phase: str) -> float:
        """Simulated time of ``phase`` so far: simulated calls plus the measured time outside
        calls (server work). NaN without a network model."""
        if self.network is None:
            return float("nan")
        return self._sim[phase] + max(0.0, self._seconds[phase] - self._in_calls[phase])

    @contextmanager
    def timer(self, phase: str) -> Iterator[None]:
        """Add the wall time of the ``with`` block to ``phase``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._seconds[phase] += time.perf_counter() - start

    def bytes(self, phase: str | None = None, direction: str | None = None,
              client: int | None = None) -> int:
        """Total bytes, optionally restricted to a phase, direction and/or client."""
        return sum(b for (p, d, c), b in self._bytes.items()
                   if (phase is None or p == phase) and (direction is None or d == direction)
                   and (client is None or c == client))

    def wire_bytes(self, phase: str | None = None, direction: str | None = None) -> int:
        """Encoded bytes (what a network carries: values plus each message's header)."""
        return sum(b for (p, d, _), b in self._wire.items()
                   if (phase is None or p == phase) and (direction is None or d == direction))

    def messages(self, phase: str | None = None, direction: str | None = None) -> int:
        return sum(m for (p, d, _), m in self._messages.items()
                   if (phase is None or p == phase) and (direction is None or d == direction))

    def seconds(self, phase: str) -> float:
        return self._seconds.get(phase, 0.0)

    def per_client(self, phase: str, direction: str) -> dict[int, int]:
        return {c: b for (p, d, c), b in sorted(self._bytes.items()) if p == phase and d == direction}

    def state_dict(self) -> dict:
        """Everything recorded so far, for checkpoints."""
        return {"bytes": [[*k, v] for k, v in self._bytes.items()],
                "messages": [[*k, v] for k, v in self._messages.items()],
                "wire": [[*k, v] for k, v in self._wire.items()],
                "seconds": dict(self._seconds), "simulated": dict(self._sim),
                "in_calls": dict(self._in_calls)}

    @classmethod
    def from_state_dict(cls, state: dict) -> Ledger:
        led = cls()
        for p, d, c, v in state["bytes"]:
            led._bytes[(p, d, int(c))] = int(v)
        for p, d, c, v in state["messages"]:
            led._messages[(p, d, int(c))] = int(v)
        for p, d, c, v in state.get("wire", []):
            led._wire[(p, d, int(c))] = int(v)
        led._seconds.update(state["seconds"])
        led._sim.update(state.get("simulated", {}))
        led._in_calls.update(state.get("in_calls", {}))
        return led

    def summary(self) -> dict:
        """JSON-ready totals: bytes[phase][direction], messages, seconds[phase], per client
        (phase ``setup`` too where set-up messages were recorded)."""
        phases = PHASES + ((SETUP,) if self.messages(SETUP) else ())
        return {
            "bytes": {p: {d: self.bytes(p, d) for d in DIRECTIONS} for p in phases},
            "messages": {p: {d: self.messages(p, d) for d in DIRECTIONS} for p in phases},
            "seconds": {p: round(self.seconds(p), 6) for p in phases},
            "bytes_per_client": {p: {d: {str(c): b for c, b in self.per_client(p, d).items()}
                                     for d in DIRECTIONS} for p in phases},
            "total_bytes": self.bytes(),
            "wire_bytes": {p: {d: self.wire_bytes(p, d) for d in DIRECTIONS} for p in phases},
            "total_wire_bytes": self.wire_bytes(),
            **({"simulated_seconds": {p: round(self.simulated_seconds(p), 6) for p in phases}}
               if self.network is not None else {}),
        }
