"""Smaller CLI points: the line a resumed run prints, simulated seconds in the summary, a
did-you-mean for a wrongly cased algorithm, a folder given to ``partition --plot``, and a
partition key the chosen partition does not read."""

from __future__ import annotations

import pytest

import fedgl
from fedgl.checkpoint import load_checkpoint
from tests._cli_helpers import TINY, assert_user_error, cli_fixture  # noqa: F401 - `cli`
from tests.helpers import interrupt_at


def test_resume_says_which_round_it_continues_from(cli, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        fedgl.run(dataset="sbm", sbm_nodes=200, clients=3, rounds=6, progress=False,
                  checkpoint_every=2, out=str(out), on_round=interrupt_at(3, repeat=0))
    saved = load_checkpoint(out).progress
    assert saved is not None and saved.round == 2   # the last checkpointed round
    res = cli("run", "--resume", out, "--no-progress")
    assert res.code == 0, res.err
    assert ("fedgl: resuming at round 2 of repeat 1/1: continuing with round 3"
            in res.out.splitlines())


def test_summary_shows_simulated_seconds_under_bandwidth(cli, tmp_path):
    res = cli("run", *TINY, "--bandwidth", "10Mbps", "--out", tmp_path / "a")
    assert res.code == 0, res.err
    sim = fedgl.RunResult.load(tmp_path / "a").repeats[0].ledger["simulated_seconds"]
    for phase, label in (("pretrain", "pre-training"), ("train", "training")):
        row = next(line for line in res.out.splitlines() if f"simulated time: {label} " in line)
        assert f"{sim[phase]:.2f} s" in row
    res = cli("run", *TINY, "--out", tmp_path / "b")
    assert res.code == 0 and "simulated time" not in res.out


@pytest.mark.parametrize("name", ["FedGAT", "fedgatt", "FEDGAT"])
def test_wrong_case_or_typo_of_an_algorithm_gets_did_you_mean(cli, tmp_path, name):
    res = cli("run", *TINY, "--algorithm", name, "--out", tmp_path / "o")
    assert_user_error(res, f"unknown algorithm '{name}'", "did you mean 'fedgat'",
                      out=tmp_path / "o")


@pytest.mark.parametrize("plot", ["figs/", "figs/labels.png/", "existing"])
def test_partition_plot_given_a_folder_is_an_error(cli, tmp_path, monkeypatch, plot):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "existing").mkdir()
    res = cli("partition", "--sbm-nodes", "60", "--clients", "2", "--plot", plot)
    assert_user_error(res, "is a folder path", "give a file name")
    assert not (tmp_path / "figs").exists()
    assert list((tmp_path / "existing").iterdir()) == []


@pytest.mark.parametrize("flags,key", [
    (["--partition", "metis", "--beta", "0.5"], "beta applies to the dirichlet partition"),
    (["--partition", "iid", "--mcmahan-p", "0.2"], "mcmahan_p applies to the p-split"),
    (["--partition", "dirichlet", "--metis-max-degree", "3"], "metis_max_degree applies"),
])
def test_a_key_the_partition_does_not_read_is_refused(cli, tmp_path, flags, key):
    res = cli("run", *TINY, *flags, "--out", tmp_path / "o")
    assert_user_error(res, key, "drop --", out=tmp_path / "o")
    res = cli("partition", "--sbm-nodes", "60", "--clients", "2", *flags)
    assert_user_error(res, key)
