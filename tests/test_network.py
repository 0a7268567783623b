"""The simulated network: units, the per-call model, and its place in every run's history."""

from __future__ import annotations

import pytest

from fedgl.errors import ConfigError
from fedgl.federation.ledger import Ledger
from fedgl.federation.network import NetworkModel, parse_bandwidth, parse_latency
from fedgl.federation.protocol import Arr, handles
from fedgl.federation.runtime import LocalRuntime


def test_units_and_bad_input():
    assert parse_bandwidth("1Gbps") == 1e9 and parse_bandwidth("100 Mbps") == 1e8
    assert parse_latency("5ms") == pytest.approx(0.005) and parse_latency("") == 0.0
    assert NetworkModel.from_strings("") is None
    with pytest.raises(ConfigError, match="bandwidth"):
        parse_bandwidth("fast")
    with pytest.raises(ConfigError, match="latency"):
        parse_latency("5 parsecs")


def test_call_time_is_the_slowest_client_round_trip():
    net = NetworkModel(8e6, 0.01)  # 1 MB/s per link, 10 ms one way
    # client 0: 1 MB down, 0.5 s compute, 0.25 MB up; client 1: nothing but 2 s compute
    t = net.call_seconds({0: 1_000_000, 1: 0}, {0: 250_000, 1: 0}, {0: 0.5, 1: 2.0})
    assert t == pytest.approx(max(0.01 + 1.0 + 0.5 + 0.01 + 0.25, 0.01 + 2.0 + 0.01))
    assert net.call_seconds({}, {}, {}) == 0.0


class _Echo:
    @handles("test.work", schema={"payload": Arr(("float32",))})
    def work(self, payload):
        return {"back": payload[:10]}


def test_runtime_calls_feed_the_simulated_clock():
    import torch

    led = Ledger()
    led.network = NetworkModel(1e6, 0.0)  # 1 Mbit/s
    rt = LocalRuntime({0: _Echo(), 1: _Echo()}, led)
    with led.timer("train"):
        rt.call("test.work", {"payload": torch.zeros(25_000)}, phase="train")  # 100 kB down each
    sim = led.simulated_seconds("train")
    # 100 kB = 0.8 s down + 40 B up; compute and server time are small but counted
    assert 0.8 < sim < 0.8 + led.seconds("train") + 1e-3
    assert led.summary()["simulated_seconds"]["train"] == pytest.approx(sim, abs=1e-6)
    assert Ledger().simulated_seconds("train") != Ledger().simulated_seconds("train")  # NaN off


def test_every_algorithm_history_gets_simulated_time():
    import fedgl

    res = fedgl.run(dataset="sbm", sbm_nodes=200, clients=3, rounds=3, progress=False,
                    bandwidth="100Mbps", latency="5ms")
    rows = res.repeats[0].history
    assert all(r["sim_seconds"] > 0 for r in rows)
    assert rows[-1]["sim_seconds"] > rows[0]["sim_seconds"]
    # at least two 5 ms one-way latencies per call (one fit call per round, plus evaluation)
    assert rows[-1]["sim_seconds"] >= 3 * 2 * 0.005
    assert res.repeats[0].final["sim_seconds"] == rows[-1]["sim_seconds"]
    assert "sim_seconds" in res.summary
