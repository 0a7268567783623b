"""Swift-FedGNN through fedgl.run: the local and the Ray runtime give the same run."""

from __future__ import annotations

import pytest

import fedgl
from tests.helpers import interrupt_at

ray = pytest.importorskip("ray")

BASE = dict(algorithm="swift-fedgnn", dataset="sbm", sbm_nodes=200, clients=3, partition="metis",
            model="sage", hidden=8, batch_size=8, num_neighbors="2,3", lr=0.01, rounds=4, eval_every=2,
            period=2, cross_clients=2, dropout=0.0, progress=False, bandwidth="1Gbps")


def test_local_and_ray_runtimes_give_the_same_swift_run(local_ray):
    a = fedgl.run(**BASE).repeats[0]
    b = fedgl.run(runtime="ray", **BASE).repeats[0]
    assert a.ledger["bytes"] == b.ledger["bytes"]  # the same messages, both phases
    assert a.extra["aggregates"] == b.extra["aggregates"]
    for ra, rb in zip(a.history, b.history, strict=True):
        for key in ("train_loss", "val_acc", "test_acc", "train_bytes"):
            if key in ra:
                assert rb[key] == pytest.approx(ra[key], abs=1e-6), (ra["round"], key)
    assert b.extra["runtime"] == "ray" and b.history[-1]["sim_seconds"] > 0


@pytest.mark.slow
def test_ray_run_resumed_from_a_checkpoint_equals_the_uninterrupted_local_run(local_ray, tmp_path):
    """FedGNN-PNS on Ray, stopped after iteration 3 and resumed on fresh actors (their caches
    rebuilt by re-running the latest refresh), ends like the uninterrupted in-process run."""
    pns = dict(BASE, algorithm="fedgnn-pns", pns_interval=2, pns_decay=1.0, pns_fanout=3,
               partition="random", bandwidth="")
    for key in ("period", "cross_clients"):
        pns.pop(key)
    reference = fedgl.run(**pns).repeats[0]
    out = tmp_path / "run"

    stop = interrupt_at(3)
    with pytest.raises(KeyboardInterrupt):
        fedgl.run(runtime="ray", checkpoint_every=1, out=str(out), on_round=stop, **pns)
    # the transport is the invocation's (a checkpoint's runtime and address are never used)
    resumed = fedgl.run(resume=out, progress=False, runtime="ray").repeats[0]
    assert resumed.extra["runtime"] == "ray"
    assert resumed.ledger["bytes"] == reference.ledger["bytes"]
    for ra, rb in zip(reference.history, resumed.history, strict=True):
        for key in ("train_loss", "val_acc", "test_acc", "train_bytes"):
            if key in ra:
                assert rb[key] == pytest.approx(ra[key], abs=1e-6), (ra["round"], key)
