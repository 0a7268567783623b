"""fedgl sweep (grid, resume, CSV) and fedgl report (tables equal the result files; plots)."""

from __future__ import annotations

import csv
import json
import statistics

import pytest
import yaml

from fedgl.cli import main
from fedgl.errors import ConfigError
from fedgl.report import repeat_metrics, write_report
from fedgl.results import RunResult
from fedgl.sweep import expand, load_sweep, sweep

SPEC = {"base": {"dataset": "sbm", "sbm_nodes": 200, "sbm_alpha": 0.05, "rounds": 3,
                 "clients": 3, "min_client_size": 1, "oracle_eval": False},
        "grid": {"algorithm": ["fedgcn", "bns-gcn"], "hops": [0, 2], "seed": [0, 1]}}


def test_grid_applies_an_algorithms_own_keys_only_to_its_cells():
    cells = expand(SPEC)
    # fedgcn: 2 hops x 2 seeds; bns-gcn ignores hops: 2 seeds
    assert len(cells) == 6
    assert all("hops" not in c.config for c in cells if c.config["algorithm"] == "bns-gcn")
    with pytest.raises(ConfigError, match="unknown"):
        expand({"grid": {"roundz": [1]}})


def test_sweep_resumes_without_rerunning_finished_cells(tmp_path, monkeypatch):
    import fedgl.sweep as sw

    out = tmp_path / "sw"
    spec = {**SPEC, "grid": {**SPEC["grid"], "seed": [0]}}
    first = sweep(spec, out=out)
    rows = list(csv.DictReader((first / "sweep.csv").open()))
    assert len(rows) == 3 and {r["status"] for r in rows} == {"done"}
    for r in rows:
        res = RunResult.load(out / r["folder"])
        assert float(r["test_acc_mean"]) == pytest.approx(res.mean("test_acc"))
    # a second invocation runs nothing; removing one result re-runs exactly that cell
    calls: list[str] = []
    real = sw.run_cell
    monkeypatch.setattr(sw, "run_cell", lambda cfg, folder: calls.append(folder) or real(cfg, folder))
    sweep(spec, out=out)
    assert calls == []
    victim = out / rows[0]["folder"] / "result.json"
    victim.unlink()
    sweep(spec, out=out)
    assert calls == [str(out / rows[0]["folder"])] and victim.is_file()


def test_report_numbers_equal_the_result_files(tmp_path):
    out = tmp_path / "sw"
    spec = {**SPEC, "grid": {"algorithm": ["fedgcn"], "hops": [0, 2], "clients": [2, 3],
                             "seed": [0, 1]}}
    spec["base"] = {**SPEC["base"], "rounds": 2}
    sweep(spec, out=out)
    dest = write_report(out)
    groups = json.loads((dest / "report.json").read_text())
    md = (dest / "report.md").read_text()
    cells = json.loads((out / "cells.json").read_text())
    assert len(groups) == 4  # (hops, clients); seeds pooled
    for g in groups:
        mine = [n for n, v in cells.items()
                if {k: v[k] for k in v if k != "seed"} == g["values"]]
        results = [json.loads((out / "cells" / n / "result.json").read_text()) for n in mine]
        accs = [r["final"]["test_acc"] for res in results for r in res["repeats"]]
        assert g["metrics"]["test_acc"]["values"] == accs
        assert g["metrics"]["test_acc"]["mean"] == pytest.approx(statistics.fmean(accs))
        assert f"{statistics.fmean(accs):.4f} ± {statistics.pstdev(accs):.4f}" in md
        conv = [repeat_metrics(r)["bytes_to_convergence"] for res in results
                for r in res["repeats"]]
        assert g["metrics"]["bytes_to_convergence"]["values"] == conv
    for png in ("accuracy_vs_rounds.png", "accuracy_vs_bytes.png", "accuracy_vs_clients.png",
                "labels_0.png"):
        assert (dest / png).stat().st_size > 5_000


def test_cli_sweep_and_report_of_a_single_run(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({**SPEC, "grid": {"algorithm": ["distributed-gcn"]},
                                 "out": str(tmp_path / "o")}))
    assert main(["sweep", str(f)]) == 0
    assert load_sweep(f)["grid"] == {"algorithm": ["distributed-gcn"]}
    cell = next((tmp_path / "o" / "cells").iterdir())
    assert main(["report", str(cell)]) == 0
    assert "distributed-gcn" in (cell / "report" / "report.md").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid: [1, 2]\n")
    assert main(["sweep", str(bad)]) == 2
    assert "grid" in capsys.readouterr().err
