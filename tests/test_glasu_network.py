"""GLASU's results get the simulated network's columns like every other algorithm's."""

from __future__ import annotations

import fedgl


def test_glasu_history_records_bytes_and_simulated_time(data_root):
    base = dict(algorithm="glasu", dataset="cora", data_root=str(data_root), clients=3,
                rounds=3, progress=False, oracle_eval=False)
    slow = fedgl.run(bandwidth="1Mbps", **base).repeats[0]
    last = slow.history[-1]
    assert last["train_bytes"] == slow.final["train_bytes"] > 0
    # every call lasts at least its largest client's transfer, which is at least the call's
    # bytes shared evenly over the 3 links: a lower bound that compute time only raises
    assert last["sim_seconds"] >= 8 * last["train_bytes"] / (3 * 1e6)
    plain = fedgl.run(**base).repeats[0]
    assert "sim_seconds" not in plain.history[-1]
    assert [h["train_loss"] for h in plain.history] == [h["train_loss"] for h in slow.history]
