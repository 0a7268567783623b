"""``benchmarks/bench_gpu.py`` still works: its small CPU version runs every case and prints one
JSON object whose numbers are real (no GPU needed, no download, no wall-time assertions)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_gpu.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_gpu", module)   # dataclasses look their module up
    spec.loader.exec_module(sys.modules["bench_gpu"])
    module = sys.modules["bench_gpu"]
    return module


def test_small_cpu_version_prints_real_numbers(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))  # never the user's
    bench = _bench()
    assert bench.main(["--small", "--budget", "600", "--workdir", str(tmp_path / "w")]) == 0
    captured = capsys.readouterr()
    assert "running the small CPU version" in captured.err
    out = json.loads(captured.out)
    assert out["mode"] == "cpu-small" and out["device_name"] and out["targets"] == {}
    assert out["total_wall_seconds"] > 0 and len(out["load_average_before"]) == 3
    names = [c.name for c in bench.small_cases()]
    assert [r["name"] for r in out["runs"]] == names
    assert set(names) >= {"cora", "arxiv", "arxiv_centralized", "cross_device", "products"}
    for row in out["runs"]:
        assert row["exit_code"] == 0, row
        assert row["device"] == "cpu" and not row["timed_out"]
        assert row["wall_seconds"] > 0 and row["peak_host_rss_mb"] > 50
        assert row["command"].startswith("fedgl ")
        if "--out" not in row["command"]:   # the start alone: load and partition
            continue
        assert 0.0 <= row["test_acc"] <= 1.0 and not math.isnan(row["test_acc"])
        assert row["rounds"] >= 1 and row["seconds"]["total"] > 0
        assert row["driver_peak_rss_mb"] > 50
        assert row["gpu_peak_allocated_mb"] is None      # a CPU run records no GPU memory
    by = {r["name"]: r for r in out["runs"]}
    assert by["arxiv"]["pretrain_bytes"] > 0 and by["products"]["pretrain_bytes"] > 0
    assert by["cross_device"]["train_bytes"] > 0
    assert (tmp_path / "w" / "cache" / "fedgl" / "synthetic").is_dir()   # the bench's own cache


def test_targets_read_the_gpu_rows():
    bench = _bench()
    rows = [
        {"name": "cora", "device": "cpu", "exit_code": 0, "wall_seconds": 6.0},
        {"name": "cora", "device": "cuda", "exit_code": 0, "wall_seconds": 4.0},
        {"name": "arxiv", "device": "cuda", "exit_code": 0, "wall_seconds": 25.0,
         "test_acc": 0.55},
        {"name": "products", "device": "cuda", "exit_code": 1, "wall_seconds": 9.0},
    ]
    got = bench.targets(rows)
    assert got["cora_gpu_no_slower_than_cpu_and_at_most_5s"] is True
    assert got["arxiv_at_most_30s_and_acc_at_least_0.60"] is False
    assert got["products_at_most_300s_within_16GB"] is None      # failed: not measured
    assert got["cross_device_at_most_60s"] is None


@pytest.mark.parametrize("small", [True, False])
def test_every_case_names_a_device_and_a_command(small):
    bench = _bench()
    cases = bench.small_cases() if small else bench.full_cases(5)
    for case in cases:
        assert case.devices and set(case.devices) <= {"cpu", "cuda"}
        assert case.command in ("run", "partition") and case.timeout > 0
    if not small:   # CPU and GPU side by side for Cora and the arxiv size
        devices: dict[str, set[str]] = {}
        for c in cases:
            devices.setdefault(c.name, set()).update(c.devices)
        assert devices["cora"] == devices["arxiv"] == {"cpu", "cuda"}


def test_the_gpu_runs_are_valid_command_lines():
    """The full-size runs (only run on a GPU machine) parse as `fedgl` command lines."""
    from fedgl.cli import build_parser

    for case in _bench().full_cases(3):
        args = [case.command, *case.args]
        algorithm = case.args[case.args.index("--algorithm") + 1] \
            if "--algorithm" in case.args else None
        if case.command == "run":
            args += ["--device", "cuda", "--no-progress"]
        build_parser(algorithm).parse_args(args)
