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

from collections.abc import Mapping
from dataclasses import dataclass

from fedgl.config import parse_bandwidth, parse_latency

__all__ = ["NetworkModel", "parse_bandwidth", "parse_latency"]

@dataclass(frozen=True)
class NetworkModel:
    """Per-client links of ``bandwidth`` bits/s and ``latency`` seconds one way."""

    bandwidth: float
    latency: float = 0.0

    @classmethod
    def from_strings(cls, bandwidth: str, latency: str = "") -> NetworkModel | None:
        """None when ``bandwidth`` is empty (no simulation)."""
        bw = parse_bandwidth(bandwidth or "")
        return None if bw is None else cls(bw, parse_latency(latency or ""))

    def transfer_seconds(self, nbytes: int) -> float:
        return self.latency + 8.0 * nbytes / self.bandwidth

    def call_seconds(self, down: Mapping[int, int], up: Mapping[int, int],
                     compute: Mapping[int, float]) -> float:
        """Simulated duration of one synchronous call (see module docstring)."""
        clients = set(down) | set(up) | set(compute)
        return max((self.transfer_seconds(down.get(k, 0)) + compute.get(k, 0.0)
                    + self.transfer_seconds(up.get(k, 0)) for k in clients), default=0.0)
