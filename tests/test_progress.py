"""Progress on stderr: periodic one-line progress when stderr is not a terminal (rounds and the
long phases: FedSage+ generator training, FedGCN's pre-training blocks, HE encryption, METIS,
synthetic generation, evaluation of many clients), a bar with ETA in a terminal, nothing with
--no-progress."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from fedgl import progress
from fedgl.api import run
from fedgl.data.partition import metis_partition
from fedgl.data.sbm import stochastic_block_model
from fedgl.data.synthetic import generate, parse_synthetic
from tests._cli_helpers import TINY, cli_fixture  # noqa: F401 - the `cli` fixture
from tests.helpers import fedgcn_federation, random_graph, random_partition

LINE = re.compile(r"^fedgl: (?P<what>.+?): (?P<done>\d+)/(?P<total>\d+) \((?P<pct>\d+)%\), "
                  r"\d+:\d\d:\d\d elapsed(, ETA \d+:\d\d:\d\d)?( \(.*\))?$")


def lines_of(text: str, what: str) -> list[re.Match]:
    return [m for m in map(LINE.match, text.splitlines()) if m and what in m["what"]]


def counts(found: list[re.Match]) -> list[tuple[int, int]]:
    """(done, total) of the lines in order, repeats dropped (with a 0 s interval the periodic
    printer may repeat a state, or show 0 done before the first step); the count never goes
    back."""
    seen = [(int(m["done"]), int(m["total"])) for m in found]
    assert seen == sorted(seen)
    return [s for s in dict.fromkeys(seen) if s[0] > 0]


@pytest.fixture
def every_step(monkeypatch):
    """Print a line at every step (the default is one line every 10 s)."""
    monkeypatch.setenv("FEDGL_PROGRESS_EVERY", "0")


def test_cli_run_prints_round_lines_with_eta_when_stderr_is_not_a_terminal(cli, tmp_path,
                                                                          every_step):
    args = [a for a in TINY if a != "--no-progress"]
    res = cli("run", *args, "--rounds", "3", "--out", tmp_path / "o")
    assert res.code == 0
    rounds = lines_of(res.err, "fedgcn repeat 1/1")
    assert counts(rounds) == [(1, 3), (2, 3), (3, 3)]
    first = next(m for m in rounds if m["done"] == "1")
    assert "ETA" in first.group(0) and "ETA" not in rounds[-1].group(0)


def test_no_progress_hides_everything(cli, tmp_path, every_step):
    res = cli("run", *TINY, "--rounds", "3", "--out", tmp_path / "o")
    assert res.code == 0
    assert "fedgl:" not in res.err


def test_default_interval_prints_nothing_for_a_short_phase():
    buf = io.StringIO()
    with progress.reporting(True, stream=buf, every=10.0):
        for _ in progress.track(range(5), "quick"):
            pass
    assert buf.getvalue() == ""


def test_a_blocking_step_still_reports_while_it_runs():
    import time

    buf = io.StringIO()
    with progress.reporting(True, stream=buf, every=0.05), progress.phase("METIS partition"):
        time.sleep(0.4)
    assert re.search(r"^fedgl: METIS partition: running, 0:00:00 elapsed$", buf.getvalue(), re.M)
    assert buf.getvalue().splitlines()[-1] == "fedgl: METIS partition: finished in 0:00:00"


def test_terminal_shows_a_bar_with_eta():
    buf = io.StringIO()
    with progress.reporting(True, stream=buf, terminal=True) as rep:
        assert rep is not None and rep.rich is not None
        with progress.phase("FedSage+ generator training", 4) as task:
            task.advance()
            rep.rich.refresh()
    assert "FedSage+ generator training" in buf.getvalue() and "ETA" in buf.getvalue()


def test_nothing_without_a_reporter_or_when_disabled(capsys):
    with progress.phase("x", 3) as task:
        task.advance()
    with progress.reporting(False), progress.phase("x", 3) as task:
        task.advance()
    assert capsys.readouterr().err == ""


def _phase_lines(fn, what):
    buf = io.StringIO()
    with progress.reporting(True, stream=buf, every=0.0):
        fn()
    return lines_of(buf.getvalue(), what), buf.getvalue()


def test_fedsage_generator_training_reports_each_step(monkeypatch, capsys):
    cfg = {"algorithm": "fedsage-plus", "dataset": "sbm", "sbm_nodes": 120, "sbm_features": 8,
           "clients": 3, "min_client_size": 1, "rounds": 1, "gen_epochs": 3, "gen_hidden": 8,
           "latent_dim": 8, "gen_encoder_hidden": 8, "num_pred": 2, "oracle_eval": False}
    monkeypatch.setenv("FEDGL_PROGRESS_EVERY", "0")
    run({**cfg, "progress": True})   # the run's own reporter on stderr, as the CLI shows it
    steps = lines_of(capsys.readouterr().err, "FedSage+ generator training")
    assert counts(steps) == [(1, 3), (2, 3), (3, 3)]
    run({**cfg, "progress": False})
    assert capsys.readouterr().err == ""


def test_fedgcn_pretraining_blocks_report():
    graph = random_graph(nodes=90, seed=1)
    part = random_partition(graph.num_nodes, 3, seed=1)
    server = fedgcn_federation(graph, part, hops=2, pretrain_block_rows=20)
    found, _ = _phase_lines(server.pretrain, "FedGCN pre-training blocks")
    total = int(found[0]["total"])
    assert total > 1 and counts(found) == [(k, total) for k in range(1, total + 1)]


def test_he_encryption_reports():
    from fedgl.privacy.he import HEClientContext, HEParams

    ctx = HEClientContext.generate(HEParams(clients=2))
    values = np.zeros(3 * ctx.params.slots, dtype=np.float64)
    found, _ = _phase_lines(lambda: ctx.encrypt_real(values), "HE encryption")
    assert counts(found) == [(1, 3), (2, 3), (3, 3)]


def test_metis_and_synthetic_generation_report():
    g = stochastic_block_model(nodes=200, classes=3, alpha=0.1, seed=0)
    _, text = _phase_lines(lambda: metis_partition(g.edge_index, g.num_nodes, 4), "METIS")
    assert "fedgl: METIS partition into 4 parts: running" in text
    spec = parse_synthetic("synthetic:3000,9000,8,4")
    found, _ = _phase_lines(lambda: generate(spec, chunk=1000), "synthetic graph: edges")
    assert found and int(found[-1]["done"]) == int(found[-1]["total"])


def test_evaluating_many_clients_reports(monkeypatch):
    import fedgl.algorithms.base as base

    monkeypatch.setattr(base, "MANY_CLIENTS", 3)
    graph = random_graph(nodes=90, seed=2)
    server = fedgcn_federation(graph, random_partition(graph.num_nodes, 3, seed=2), hops=0)
    _, text = _phase_lines(server.evaluate, "evaluating")
    assert "fedgl: evaluating 3 clients: running" in text
    monkeypatch.setattr(base, "MANY_CLIENTS", 4)
    _, text = _phase_lines(server.evaluate, "evaluating")
    assert text == ""
