"""Smoke tests of the ``fedgl`` command: run, partition, datasets."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from fedgl.results import HISTORY_COLUMNS
from tests import _cli_helpers
from tests._cli_helpers import shared_data_root

cli_fixture = _cli_helpers.cli_fixture  # the `cli` fixture

SMALL_SBM = ["--sbm-nodes", "200", "--sbm-features", "16", "--sbm-alpha", "0.1", "--clients", "4",
             "--no-progress"]


def _read_results(out: Path) -> tuple[dict, list[dict[str, str]], list[str]]:
    result = json.loads((out / "result.json").read_text())
    with (out / "history.csv").open(newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        header = list(reader.fieldnames or [])
    return result, rows, header


def _assert_ok(res) -> None:
    assert res.code == 0, f"exit code {res.code}, stderr: {res.err!r}"
    assert "Traceback" not in res.err


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"real data not found: {path} (set FEDGL_DATA to the shared data folder)")
    return path


def test_run_default_sbm(cli, tmp_path):
    out = tmp_path / "run"
    # the leakage report (tens of seconds at this size) has its own tests; a CLI run
    # with it (small graph) is test_no_warnings.py::test_cli_run_stderr_has_no_warning
    res = cli("run", "--rounds", "5", "--no-progress", "--no-leakage-report", "--out", out)
    _assert_ok(res)
    result, rows, header = _read_results(out)
    assert set(result) >= {"config", "environment", "summary", "repeats"}
    assert result["config"]["dataset"] == "sbm" and result["config"]["sbm_nodes"] == 2708
    assert header == list(HISTORY_COLUMNS)
    assert len(rows) == 5
    assert [int(r["round"]) for r in rows] == [1, 2, 3, 4, 5]
    assert 0.0 <= result["summary"]["test_acc"]["mean"] <= 1.0
    assert "results written to" in res.out


def test_run_cora_two_hop(cli, tmp_path):
    root = shared_data_root()
    _require(root / "Cora" / "raw")
    out = tmp_path / "cora"
    res = cli("run", "--dataset", "cora", "--data-root", root, "--hops", "2", "--rounds", "3",
              "--clients", "5", "--no-progress", "--no-leakage-report", "--out", out)
    _assert_ok(res)
    result, rows, _ = _read_results(out)
    assert result["config"]["dataset"] == "cora" and result["config"]["hops"] == 2
    assert len(rows) == 3
    partition = result["repeats"][0]["partition"]
    assert sum(partition["nodes"]) == 2708 and len(partition["nodes"]) == 5
    assert 0.0 <= result["summary"]["test_acc"]["mean"] <= 1.0


def test_yaml_config_with_flag_override(cli, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("rounds: 2\nhops: 1\nsbm_nodes: 200\nclients: 4\nprogress: false\n")
    out = tmp_path / "yaml"
    res = cli("run", cfg, "--rounds", "3", "--sbm-features", "16", "--out", out)
    _assert_ok(res)
    result, rows, _ = _read_results(out)
    assert result["config"]["rounds"] == 3  # the flag wins over the file
    assert result["config"]["hops"] == 1  # the file wins over the default
    assert result["config"]["sbm_nodes"] == 200
    assert len(rows) == 3


def test_partition_plot_png(cli, tmp_path):
    plot = tmp_path / "p.png"
    res = cli("partition", "--dataset", "sbm", "--clients", "4", "--plot", plot)
    _assert_ok(res)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "cross-client edges" in res.out


def test_partition_real_npz(cli):
    """The shared gnn-benchmark file (``adj_matrix.*`` key layout) loads and splits."""
    npz = _require(shared_data_root() / "npz" / "cora_ml.npz")
    res = cli("partition", "--dataset", f"npz:{npz}", "--clients", "3")
    _assert_ok(res)
    assert "2995 nodes" in res.out


def test_datasets_lists_everything(cli, tmp_path):
    res = cli("datasets", "--data-root", tmp_path)
    _assert_ok(res)
    for name in ("cora", "citeseer", "pubmed", "sbm", "npz:"):
        assert name in res.out
    cora_line = next(line for line in res.out.splitlines() if line.strip().startswith("cora"))
    assert "missing" in cora_line


def test_datasets_sees_shared_data(cli):
    root = _require(shared_data_root() / "Cora" / "raw").parents[1]
    res = cli("datasets", "--data-root", root)
    _assert_ok(res)
    cora_line = next(line for line in res.out.splitlines() if line.strip().startswith("cora"))
    assert "available" in cora_line


def test_run_centralized(cli, tmp_path):
    out = tmp_path / "central"
    res = cli("run", "--algorithm", "centralized", "--rounds", "2", *SMALL_SBM, "--out", out)
    _assert_ok(res)
    result, rows, _ = _read_results(out)
    assert result["config"]["algorithm"] == "centralized"
    assert len(rows) == 2
    assert 0.0 <= result["summary"]["test_acc"]["mean"] <= 1.0


def test_run_repeats(cli, tmp_path):
    out = tmp_path / "repeats"
    res = cli("run", "--repeats", "2", "--rounds", "2", *SMALL_SBM, "--out", out)
    _assert_ok(res)
    result, rows, _ = _read_results(out)
    assert [(r["repeat"], r["seed"]) for r in result["repeats"]] == [(0, 0), (1, 1)]
    acc = result["summary"]["test_acc"]
    assert len(acc["values"]) == 2 and acc["std"] >= 0.0
    assert [(r["repeat"], r["seed"]) for r in rows] == [("0", "0"), ("0", "0"), ("1", "1"),
                                                        ("1", "1")]


def test_partition_p_split_reads_mcmahan_p(cli):
    """``fedgl partition`` honours --mcmahan-p (p = 1 is i.i.d.: every client sees every class)."""
    common = ("partition", "--dataset", "sbm", "--sbm-nodes", "300", "--clients", "3",
              "--partition", "p-split")
    iid = cli(*common, "--mcmahan-p", "1")
    _assert_ok(iid)
    assert "p-split p=1," in iid.out
    skewed = cli(*common, "--mcmahan-p", "0")
    _assert_ok(skewed)
    assert "p-split p=0," in skewed.out
    assert iid.out.split("cross-client")[0] != skewed.out.split("cross-client")[0]
