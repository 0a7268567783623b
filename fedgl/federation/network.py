"""A simulated network: the ledger's per-message bytes turned into communication time.

Model (documented in docs/swift-fedgnn.md, "Simulated network"): every client has its own link to
the server with bandwidth ``B`` (bits/s) and one-way latency ``λ``; links run in parallel and the
server's side is not a bottleneck. One ``runtime.call`` is a synchronous round trip, so it takes

    T_call = max_k ( λ + 8·down_k / B  +  compute_k  +  λ + 8·up_k / B )

over the addressed clients k, where ``down_k``/``up_k`` are the bytes of the messages to and from
k and ``compute_k`` the measured seconds of k's method. Calls are sequential, and the server's own
work between calls (sampling, aggregation, optimiser) is added at its measured wall time, so a
phase's simulated time is ``Σ T_call + (phase wall time - wall time spent inside calls)``. A
call that addresses no client costs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from fedgl.errors import ConfigError

_BW_UNITS = {"bps": 1.0, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "tbps": 1e12}
_LAT_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}


def parse_bandwidth(text: str) -> float:
    """``"1Gbps"`` -> 1e9 bits per second (bps, Kbps, Mbps, Gbps, Tbps; case-insensitive)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-zA-Z]+)\s*", str(text))
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _BW_UNITS or float(m.group(1)) <= 0:
        raise ConfigError(f"bandwidth {text!r} is not understood; write e.g. --bandwidth 1Gbps "
                          "(units bps, Kbps, Mbps, Gbps)")
    return float(m.group(1)) * _BW_UNITS[unit]


def parse_latency(text: str) -> float:
    """``"5ms"`` -> 0.005 seconds (s, ms, us); ``""`` -> 0."""
    if str(text).strip() == "":
        return 0.0
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(s|ms|us|µs)\s*", str(text))
    if not m:
        raise ConfigError(f"latency {text!r} is not understood; write e.g. --latency 5ms "
                          "(units s, ms, us)")
    return float(m.group(1)) * _LAT_UNITS[m.group(2)]


@dataclass(frozen=True)
class NetworkModel:
    """Per-client links of ``bandwidth`` bits/s and ``latency`` seconds one way."""

    bandwidth: float
    latency: float = 0.0

    @classmethod
    def from_strings(cls, bandwidth: str, latency: str = "") -> NetworkModel | None:
        """None when ``bandwidth`` is empty (no simulation)."""
        if not str(bandwidth or "").strip():
            return None
        return cls(parse_bandwidth(bandwidth), parse_latency(latency))

    def transfer_seconds(self, nbytes: int) -> float:
        return self.latency + 8.0 * nbytes / self.bandwidth

    def call_seconds(self, down: Mapping[int, int], up: Mapping[int, int],
                     compute: Mapping[int, float]) -> float:
        """Simulated duration of one synchronous call (see module docstring)."""
        clients = set(down) | set(up) | set(compute)
        return max((self.transfer_seconds(down.get(k, 0)) + compute.get(k, 0.0)
                    + self.transfer_seconds(up.get(k, 0)) for k in clients), default=0.0)
