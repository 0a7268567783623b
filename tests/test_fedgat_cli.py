"""The GAT algorithms from the command line and the API: tiny runs, and one-line errors with
exit code 2 for bad FedGAT options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedgl.api import run
from fedgl.cli import main

TINY = ["run", "--dataset", "sbm", "--sbm-nodes", "300", "--sbm-classes", "3", "--sbm-features", "8",
        "--clients", "3",
        "--rounds", "2", "--local-steps", "1", "--lr", "0.1", "--no-progress"]

BAD = [
    (["--algorithm", "fedgat", "--degree", "0"], "degree must be >= 1"),
    (["--algorithm", "fedgat", "--heads", "0"], "heads must be >= 1"),
    (["--algorithm", "fedgat", "--gat-hidden", "0"], "gat_hidden must be >= 1"),
    (["--algorithm", "fedgat", "--output-heads", "0"], "output_heads must be >= 1"),
    (["--algorithm", "fedgat", "--fedgat-backend", "exact"], "unknown fedgat_backend 'exact'"),
    (["--algorithm", "fedgat", "--fedgat-range", "0"], "fedgat_range must be > 0"),
    (["--algorithm", "fedgat", "--fedgat-node-mb", "-1"], "fedgat_node_mb must be > 0"),
    (["--algorithm", "fedgat", "--fedgat-max-degree", "-2"], "fedgat_max_degree must be >= 0"),
    (["--algorithm", "fedgat", "--fedgat-basis", "legendre"], "unknown fedgat_basis"),
    (["--algorithm", "fedgat", "--gat-optimizer", "rmsprop"], "unknown gat_optimizer"),
    (["--algorithm", "fedgat", "--vec-fedgat"], "vec_fedgat is a variant of the FedGAT protocol"),
    (["--algorithm", "distgat", "--vec-fedgat", "--fedgat-backend", "protocol"],
     "--algorithm fedgat"),
    (["--algorithm", "fedgat", "--degree", "two"], "invalid int value"),
    (["--algorithm", "fedgat", "--fedgat-backend", "protocol", "--fedgat-node-mb", "0.00001"],
     "use --fedgat-backend fast"),
    (["--algorithm", "fedgat", "--model", "sage"], "drop --model"),
    (["--algorithm", "distgat", "--hops", "1"], "hops is read by fedgcn"),
    (["--algorithm", "fedgat", "--secure-sum", "mask"], "use --algorithm fedgcn"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a[2:]) for a, _ in BAD])
def test_bad_fedgat_options_exit_2_with_one_line(args, message, tmp_path, capsys):
    code = main([*TINY, *args, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("fedgl: error:")
    assert message in err


@pytest.mark.parametrize("algorithm", ["fedgat", "distgat", "centralized-gat"])
def test_gat_algorithms_run_from_the_cli(algorithm, tmp_path):
    out = tmp_path / algorithm
    assert main([*TINY, "--algorithm", algorithm, "--out", str(out)]) == 0
    result = json.loads((Path(out) / "result.json").read_text())
    rep = result["repeats"][0]
    assert len(rep["history"]) == 2
    assert 0.0 <= rep["final"]["test_acc"] <= 1.0
    assert 0.0 <= rep["final"]["oracle_test_acc"] <= 1.0
    if algorithm == "fedgat":
        assert rep["final"]["pretrain_bytes"] > 0
        assert rep["extra"]["fedgat"]["backend"] == "fast"


def test_protocol_and_vector_runs_through_the_api():
    common = dict(dataset="sbm", sbm_nodes=150, sbm_classes=3, sbm_features=6, clients=2, rounds=2,
                  local_steps=1, lr=0.1, progress=False, algorithm="fedgat",
                  fedgat_backend="protocol")
    matrix = run(**common)
    vector = run(**common, vec_fedgat=True)
    m, v = matrix.repeats[0], vector.repeats[0]
    assert m.extra["fedgat"]["protocol_bytes"] + 0 < m.final["pretrain_bytes"]
    assert v.extra["fedgat"]["vec_fedgat"]
    # same model, same data: the two protocols train the same polynomial GAT
    assert abs(m.final["train_loss"] - v.final["train_loss"]) < 1e-4
    assert m.final["oracle_test_acc"] == v.final["oracle_test_acc"]
