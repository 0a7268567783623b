"""Checkpoints: an interrupted run resumed ends exactly like an uninterrupted one."""

from __future__ import annotations

import pytest

import fedgl
from fedgl.checkpoint import CHECKPOINT_FILE
from fedgl.cli import main
from tests.helpers import interrupt_at

BASE = dict(dataset="sbm", sbm_nodes=300, clients=3, rounds=6, progress=False)


class Interrupt(Exception):
    pass


def _comparable(result):
    return [(r.seed, r.history, r.final["test_acc"], r.final["selected_test_acc"],
             r.ledger["bytes"], r.partition) for r in result.repeats]


@pytest.mark.parametrize("repeats,stop", [(1, (0, 5)), (2, (1, 3))])
def test_resume_matches_uninterrupted_run(tmp_path, repeats, stop):
    reference = fedgl.run(**BASE, repeats=repeats)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        fedgl.run(**BASE, repeats=repeats, checkpoint_every=2, out=str(out),
                  on_round=interrupt_at(stop[1], repeat=stop[0]))
    assert (out / CHECKPOINT_FILE).is_file()
    assert not (out / "result.json").exists()  # never a half-written result
    resumed = fedgl.run(resume=out, progress=False)
    assert _comparable(resumed) == _comparable(reference)
    assert (out / "result.json").is_file() and not (out / CHECKPOINT_FILE).exists()
    events = resumed.repeats[stop[0]].extra["failures"]
    assert any(e["action"] == "resumed" and e["pretrain_bytes_rerun"] > 0 for e in events)


def test_cli_resume_and_bad_resume_dir(tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        fedgl.run(**BASE, checkpoint_every=1, out=str(out), on_round=interrupt_at(3, repeat=0))
    assert main(["run", "--resume", str(out), "--no-progress"]) == 0
    assert (out / "result.json").is_file()
    capsys.readouterr()
    assert main(["run", "--resume", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no checkpoint" in err[0]
    assert main(["run", "--resume", str(out), "--rounds", "9"]) == 2


def test_checkpoint_needs_an_output_folder():
    with pytest.raises(fedgl.ConfigError, match="--out"):
        fedgl.run(**BASE, checkpoint_every=2)


@pytest.mark.parametrize("algorithm", ["fedgat", "distgat"])
def test_gat_algorithms_resume_exactly(tmp_path, algorithm):
    """FedGAT's resume re-runs the pre-training round (the clients' received rows/matrices are
    rebuilt) and continues from the checkpointed model: the same history, accuracy and bytes."""
    gat = dict(BASE, algorithm=algorithm, dropout=0.0, eval_every=2)
    reference = fedgl.run(**gat)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        fedgl.run(**gat, checkpoint_every=1, out=str(out), on_round=interrupt_at(4, repeat=0))
    resumed = fedgl.run(resume=out, progress=False)
    for a, b in zip(resumed.repeats[0].history, reference.repeats[0].history, strict=True):
        assert a.keys() == b.keys()  # oracle scores too, before and after the resume
        for key in a:
            assert a[key] == pytest.approx(b[key], abs=1e-6), (a["round"], key)
    assert _comparable(resumed)[0][2:] == _comparable(reference)[0][2:]
