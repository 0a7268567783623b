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
from fedgl.sweep import cell_name, expand, load_sweep, parse_only, sweep

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
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_only("algorithm")


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
    algo = next(v["algorithm"] for v in json.loads((out / "cells.json").read_text()).values()
                if rows[0]["folder"].endswith(cell_name(v)))
    other = "bns-gcn" if algo == "fedgcn" else "fedgcn"
    sweep(spec, out=out, only=parse_only(f"algorithm={other}"))  # a part without the victim
    assert calls == [] and not victim.is_file()
    sweep(spec, out=out, only=parse_only(f"algorithm={other}|{algo},seed=0|1.0"))
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
    # the accuracy-vs-clients figure plots these numbers: one line per hops, a point per K
    series = json.loads((dest / "figures.json").read_text())["accuracy_vs_clients"]
    (lines,) = series.values()  # one split
    assert sorted(lines) == ["FedGCN 0-hop", "FedGCN 2-hop"]
    for label, pts in lines.items():
        hops = int(label.split()[1][0])
        for k, mean, std, n in pts:
            accs = [r["final"]["test_acc"] for name, v in cells.items()
                    if v["hops"] == hops and v["clients"] == k
                    for r in json.loads((out / "cells" / name / "result.json")
                                        .read_text())["repeats"]]
            assert (mean, std, n) == pytest.approx(
                (statistics.fmean(accs), statistics.pstdev(accs), len(accs)))
        assert [p[0] for p in pts] == [2, 3]
    for png in ("accuracy_vs_rounds.png", "accuracy_vs_bytes.png", "accuracy_vs_clients.png",
                "labels_per_client_sbm_dirichlet_beta1_2clients.png"):
        assert (dest / png).stat().st_size > 5_000


def test_rounds_to_target_vs_iid_control_equal_the_result_files(tmp_path):
    out = tmp_path / "sw"
    spec = {"base": {**SPEC["base"], "rounds": 4, "partition": "p-split", "sbm_classes": 3},
            "grid": {"mcmahan_p": [0.0, 1.0], "hops": [0, 2], "seed": [0, 1]}}
    sweep(spec, out=out)
    cells = json.loads((out / "cells.json").read_text())
    results = {n: json.loads((out / "cells" / n / "result.json").read_text()) for n in cells}
    best: dict[tuple, float] = {}
    for name, v in cells.items():
        key = (v["hops"], v["mcmahan_p"])
        best[key] = max([best.get(key, 0.0), *(h["test_acc"] for r in results[name]["repeats"]
                                                for h in r["history"])])
    target = max(best.values())  # reached by the best setting only (asserted below)
    dest = write_report(out, target=target)
    fig = json.loads((dest / "figures.json").read_text())["rounds_vs_control"]
    assert fig["control"] == "mcmahan_p" and sorted(fig["rounds"]) == ["FedGCN 0-hop",
                                                                       "FedGCN 2-hop"]
    reached_any = reached_none = 0
    for label, pts in fig["rounds"].items():
        hops = int(label.split()[1][0])
        comm = fig["pretrain_mb"][label]
        assert [p[0] for p in pts] == [p[0] for p in comm] == [0.0, 1.0]
        for (x, mean, std, reached, n), (_, mb, _) in zip(pts, comm, strict=True):
            reps = [r for name, v in cells.items() if v["hops"] == hops and v["mcmahan_p"] == x
                    for r in results[name]["repeats"]]
            first = [min((h["round"] for h in r["history"] if h["test_acc"] >= target),
                         default=None) for r in reps]
            hit = [f for f in first if f is not None]
            assert (reached, n) == (len(hit), len(reps)) == (len(hit), 2)
            if hit:
                reached_any += 1
                assert (mean, std) == pytest.approx((statistics.fmean(hit),
                                                     statistics.pstdev(hit)))
            else:
                reached_none += 1
            assert mb == pytest.approx(statistics.fmean(r["final"]["pretrain_bytes"] / 1e6
                                                        for r in reps))
            assert (mb == 0) == (hops == 0)
    assert reached_any and reached_none
    assert f"rounds to test acc ≥ {target:g}" in (dest / "report.md").read_text()
    assert (dest / "rounds_vs_control.png").stat().st_size > 5_000


def test_cli_sweep_and_report_of_a_single_run(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({**SPEC, "grid": {"algorithm": ["distributed-gcn"]},
                                 "out": str(tmp_path / "o")}))
    assert main(["sweep", str(f)]) == 0
    assert load_sweep(f)["grid"] == {"algorithm": ["distributed-gcn"]}
    cell = next((tmp_path / "o" / "cells").iterdir())
    assert main(["report", str(cell)]) == 0
    assert "distributed-gcn" in (cell / "report" / "report.md").read_text()
    # several folders in one report: the sweep and the same cell again pool into one setting
    assert main(["report", str(tmp_path / "o"), str(cell)]) == 2  # needs --out
    assert main(["report", str(tmp_path / "o"), str(cell), "--out", str(tmp_path / "both")]) == 0
    (group,) = json.loads((tmp_path / "both" / "report.json").read_text())
    acc = json.loads((cell / "result.json").read_text())["repeats"][0]["final"]["test_acc"]
    assert group["repeats"] == 2 and group["metrics"]["test_acc"]["values"] == [acc, acc]
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid: [1, 2]\n")
    assert main(["sweep", str(bad)]) == 2
    assert "grid" in capsys.readouterr().err
