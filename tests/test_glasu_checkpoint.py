"""GLASU checkpoints: a run stopped and resumed ends bit for bit like the uninterrupted run
(every client's weights, Adam moments and random stream, and the server's batch stream)."""

from __future__ import annotations

import pytest

import fedgl
from fedgl.checkpoint import CHECKPOINT_FILE
from tests.helpers import interrupt_at

BASE = dict(dataset="sbm", sbm_nodes=200, clients=3, layers=2, hidden=8, rounds=6, eval_every=2,
            dropout=0.5, glasu_optimizer="adam", lr=0.01, batch_size=16, progress=False)


def _scores(final: dict) -> dict:
    """The final metrics without wall-clock times (and without NaN, unequal to itself)."""
    return {k: v for k, v in final.items() if "seconds" not in k and v == v}


@pytest.mark.parametrize("algorithm,extra", [("glasu", {"agg_layers": "2", "stale_steps": 2}),
                                             ("glasu-simulated", {})])
def test_glasu_resume_equals_the_uninterrupted_run(tmp_path, algorithm, extra):
    cfg = dict(BASE, algorithm=algorithm, **extra)
    reference = fedgl.run(**cfg).repeats[0]
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        fedgl.run(**cfg, checkpoint_every=2, out=str(out), on_round=interrupt_at(3))
    assert (out / CHECKPOINT_FILE).is_file()
    resumed = fedgl.run(resume=out, progress=False).repeats[0]
    assert resumed.history == reference.history  # losses and accuracies, every round
    assert _scores(resumed.final) == _scores(reference.final)
    assert resumed.ledger["bytes"] == reference.ledger["bytes"]
    assert resumed.ledger["messages"] == reference.ledger["messages"]
    assert any(e["action"] == "resumed" and e["round"] == 2 for e in resumed.extra["failures"])


def test_standalone_does_not_checkpoint(tmp_path):
    with pytest.raises(fedgl.ConfigError, match="checkpoint"):
        fedgl.run(**dict(BASE, algorithm="glasu-standalone"), checkpoint_every=2,
                  out=str(tmp_path / "run"))


def test_each_client_keeps_its_own_state(tmp_path):
    """The server's checkpoint holds its batch stream and one digest per client, no client
    weights; each client's state lies in its own folder, and a client whose file is not the one
    the server recorded refuses to resume (one line)."""
    import torch

    from fedgl.checkpoint import load_checkpoint

    cfg = dict(BASE, algorithm="glasu", agg_layers="2", stale_steps=2)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        fedgl.run(**cfg, checkpoint_every=2, out=str(out), on_round=interrupt_at(3))
    saved = load_checkpoint(out).progress.weights
    assert set(saved) == {"server_generator", "clients"}
    assert set(saved["clients"]) == {"0", "1", "2"}
    for m, entry in saved["clients"].items():
        assert set(entry) == {"round", "digest"} and entry["round"] == 2
        own = out / "glasu-state" / f"client-{m}" / f"glasu-client-{m}-round-2.pt"
        state = torch.load(own, weights_only=True)
        assert set(state) == {"model", "optimizer", "generator", "round"}
        assert sorted(p.name for p in own.parent.iterdir()) == [own.name]   # its file only
    victim = out / "glasu-state" / "client-1" / "glasu-client-1-round-2.pt"
    good = victim.read_bytes()
    state = torch.load(victim, weights_only=True)
    state["model"] = {k: v + 1 for k, v in state["model"].items()}
    torch.save(state, victim)
    with pytest.raises(fedgl.DataError, match="client 1's saved state for round 2 is not the one"):
        fedgl.run(resume=out, progress=False)
    victim.unlink()
    with pytest.raises(fedgl.DataError, match="client 1 has no saved state for round 2"):
        fedgl.run(resume=out, progress=False)
    victim.write_bytes(good)
    resumed = fedgl.run(resume=out, progress=False).repeats[0]
    assert resumed.final["rounds"] == BASE["rounds"]
    assert not (out / "glasu-state").exists()   # the finished run's folder holds results only
