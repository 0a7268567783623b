"""fedgl report: a run that sent no bytes is not put at 10^0 on the log axis, a one-client run
gets no label plot, and label plots are named after the split they show."""

from __future__ import annotations

from pathlib import Path

import pytest

import fedgl.report as report
from fedgl.api import run

TINY = {"dataset": "sbm", "sbm_nodes": 120, "sbm_features": 8, "rounds": 2, "clients": 3,
        "min_client_size": 1, "oracle_eval": False, "progress": False}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    run({**TINY, "algorithm": "centralized", "out": str(root / "central")})
    run({**TINY, "algorithm": "fedgcn", "hops": 1, "out": str(root / "fed")})
    return root


def test_zero_byte_run_is_a_labelled_line_not_a_point_at_one(two_runs, tmp_path, monkeypatch):
    figures = {}
    real = report._save

    def keep(fig, path, dpi=100):
        ax = fig.axes[0]
        figures[Path(path).name] = {
            "points": [tuple(line.get_xdata()) for line in ax.lines if line.get_marker() == "o"],
            "hlines": [line.get_label() for line in ax.lines if line.get_linestyle() == "--"],
            "legend": [t.get_text() for t in ax.get_legend().get_texts()],
            "xscale": ax.get_xscale()}
        return real(fig, path, dpi)

    monkeypatch.setattr(report, "_save", keep)
    report.write_report([two_runs / "central", two_runs / "fed"], tmp_path / "rep")
    fig = figures["accuracy_vs_bytes.png"]
    assert fig["xscale"] == "log"
    assert len(fig["points"]) == 1 and all(x > 1 for pt in fig["points"] for x in pt)
    assert len(fig["hlines"]) == 1 and "0 bytes" in fig["hlines"][0]
    assert any("centralized" in t and "not on the log axis" in t for t in fig["legend"])


def test_label_plots_skip_one_client_and_say_what_they_show(two_runs, tmp_path):
    dest = report.write_report([two_runs / "central", two_runs / "fed"], tmp_path / "rep")
    labels = sorted(p.name for p in dest.glob("labels*"))
    assert labels == ["labels_per_client_sbm_dirichlet_beta1_3clients.png"]
    assert f"]({labels[0]})" in (dest / "report.md").read_text()


def test_only_centralised_runs_make_no_bytes_plot(two_runs, tmp_path):
    dest = report.write_report(two_runs / "central", tmp_path / "rep")
    assert not (dest / "accuracy_vs_bytes.png").exists()
    assert not list(dest.glob("labels*"))


def test_label_plot_names_are_unique():
    taken: set[str] = set()
    cfg = {"dataset": "cora", "partition": "p-split", "mcmahan_p": 0.5, "clients": 10}
    assert report.label_plot_name(cfg, taken) == "labels_per_client_cora_p-split_p0.5_10clients.png"
    assert report.label_plot_name(cfg, taken) == "labels_per_client_cora_p-split_p0.5_10clients_2.png"
