"""Checkpoint and resume of the mini-batch FedSGD algorithms (Swift-FedGNN and its baselines):
a run stopped after iteration t and resumed equals the uninterrupted run bit for bit — history,
final weights, ledger bytes and the communication tallies. Dropout is on, so the clients'
per-iteration random streams are exercised; Adam's moments must be restored; FedGNN-PNS's
client caches must be rebuilt (its last refresh before the stop is after iteration 0)."""

from __future__ import annotations

import pytest
import torch

import fedgl
from fedgl.checkpoint import CHECKPOINT_FILE, load_checkpoint

BASE = dict(dataset="sbm", sbm_nodes=240, sbm_alpha=0.1, sbm_features=16, clients=3,
            partition="random", model="sage", hidden=8,
            dropout=0.3, batch_size=12, num_neighbors="3,4", rounds=7, eval_every=2, lr=0.02,
            progress=False)
CASES = {
    "swift-fedgnn": dict(period=2, cross_clients=2),
    "fedgnn-pns": dict(pns_interval=3, pns_decay=1.0, pns_fanout=3),
    "llcg": dict(correction_period=3),
}


def _run(algorithm: str, **kw):
    weights: dict = {}

    def hook(r, t, server):
        weights[t] = {k: v.clone() for k, v in server.weights.items()}
        if kw.get("stop") == t:
            raise KeyboardInterrupt
    cfg = {k: v for k, v in kw.items() if k != "stop"}
    return fedgl.run(algorithm=algorithm, **BASE, **CASES[algorithm], on_round=hook,
                     **cfg), weights


def _same(a, b):
    ra, rb = a.repeats[0], b.repeats[0]
    assert ra.history == rb.history
    assert ra.ledger["bytes"] == rb.ledger["bytes"]
    for key in ("bytes_by_kind", "aggregates", "communicating_iterations",
                "bytes_per_communicating_iteration", "structure_bytes"):
        assert ra.extra[key] == rb.extra[key], key


@pytest.mark.parametrize("algorithm", sorted(CASES))
def test_minibatch_resume_equals_uninterrupted_run(tmp_path, algorithm):
    reference, ref_w = _run(algorithm)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _run(algorithm, checkpoint_every=2, out=str(out), stop=5)
    ckpt = load_checkpoint(out)
    assert ckpt.progress is not None and ckpt.progress.round == 4
    assert ckpt.progress.server["optimizer"]["state"]  # Adam moments are saved
    resumed_w: dict = {}
    resumed = fedgl.run(resume=out, progress=False,
                        on_round=lambda r, t, s: resumed_w.update({t: dict(s.weights)}))
    assert sorted(resumed_w) == [5, 6, 7]
    _same(resumed, reference)
    for name, w in ref_w[7].items():
        assert torch.equal(resumed_w[7][name], w), name
    assert (out / "result.json").is_file() and not (out / CHECKPOINT_FILE).exists()
    assert resumed.repeats[0].extra["events"][-1]["action"] == "resumed"


@pytest.mark.parametrize("algorithm,drop", [("swift-fedgnn", "optimizer"),
                                             ("fedgnn-pns", "cache")])
def test_resume_without_saved_or_rebuilt_state_differs(tmp_path, algorithm, drop):
    """The checks above can fail: dropping Adam's saved moments, or not rebuilding PNS's client
    caches, changes the resumed run."""
    from fedgl.algorithms.minibatch import server as server_mod

    reference, _ = _run(algorithm)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _run(algorithm, checkpoint_every=2, out=str(out), stop=5)
    real = server_mod.FedSGDServer.load_state_dict

    def forget(self, weights, state):
        real(self, weights, {**state, "optimizer": None})
    mp = pytest.MonkeyPatch()
    if drop == "optimizer":
        mp.setattr(server_mod.FedSGDServer, "load_state_dict", forget)
    else:
        mp.setattr(server_mod.FedSGDServer, "rebuild_clients", lambda self, start: None)
    try:
        resumed = fedgl.run(resume=out, progress=False)
    finally:
        mp.undo()
    assert resumed.repeats[0].history[:4] == reference.repeats[0].history[:4]
    assert resumed.repeats[0].history[4:] != reference.repeats[0].history[4:]
