"""RayRuntime: same results as LocalRuntime, client failures handled by policy, loopback only."""

from __future__ import annotations

import pytest

import fedgl
from fedgl.errors import RunAborted

ray = pytest.importorskip("ray")

BASE = dict(dataset="sbm", sbm_nodes=300, clients=3, rounds=5, progress=False)



@pytest.fixture(scope="module")
def reference():
    return fedgl.run(**BASE)


def _kill_at(round_: int, client: int):
    def hook(repeat, t, server):
        if t == round_:
            server.runtime.kill_client(client)
    return hook


def test_ray_binds_to_loopback(local_ray):
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}


def test_same_seed_same_result_in_both_runtimes(local_ray, reference):
    res = fedgl.run(runtime="ray", **BASE)
    a, b = reference.repeats[0], res.repeats[0]
    assert a.partition == b.partition
    assert a.ledger["bytes"] == b.ledger["bytes"]  # identical pre-training and training messages
    # the Ray server learned the widths as the local one did: one 'setup.facts' per client
    assert a.ledger["messages"]["setup"] == b.ledger["messages"]["setup"] == {"up": 3, "down": 3}
    for ra, rb in zip(a.history, b.history, strict=True):
        for key, value in ra.items():
            assert rb[key] == pytest.approx(value, abs=1e-6)
    assert b.extra["runtime"] == "ray" and len(b.extra["placement"]) == 3
    # each client process reports its own peak memory (it has imported torch and loaded a shard)
    peaks = b.extra["client_peak_rss_mb"]
    assert sorted(peaks) == sorted(b.extra["placement"])
    assert all(100.0 < mb < b.peak_rss_mb * 4 for mb in peaks.values()), peaks


def test_killed_client_is_restarted_and_the_run_completes(local_ray, reference):
    res = fedgl.run(runtime="ray", on_round=_kill_at(2, 1), **BASE)
    rep = res.repeats[0]
    events = rep.extra["failures"]
    # the hook of round 2 runs once round 2's row is recorded: after round 3's fit, which
    # carried round 2's evaluation; so the kill meets round 4's fit
    assert [(e["client"], e["action"], e["round"]) for e in events] == [(1, "restarted", 4)]
    # the restarted client reloads its shard, re-runs pre-training, and redoes round 4 (and the
    # evaluation it carries) with the same seeds: the result is the uninterrupted one
    assert rep.final["test_acc"] == pytest.approx(reference.repeats[0].final["test_acc"], abs=1e-6)
    assert rep.ledger["bytes"]["pretrain"]["up"] == 2 * reference.repeats[0].ledger["bytes"][
        "pretrain"]["up"]


def test_drop_policy_continues_with_survivors(local_ray):
    res = fedgl.run(runtime="ray", on_client_failure="drop", on_round=_kill_at(2, 0), **BASE)
    rep = res.repeats[0]
    assert len(rep.history) == 5
    assert [(e["client"], e["action"]) for e in rep.extra["failures"]] == [(0, "dropped")]
    assert set(rep.extra["placement"]) == {"1", "2"}


def test_abort_policy_stops_the_run(local_ray, tmp_path):
    with pytest.raises(RunAborted, match="client 2"):
        fedgl.run(runtime="ray", on_client_failure="abort", on_round=_kill_at(1, 2),
                  out=str(tmp_path / "out"), **BASE)
    assert not (tmp_path / "out" / "result.json").exists()
