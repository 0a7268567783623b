"""`fedgl analyze-comm`: appendix F's predicted pre-training communication beside the ledger's."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fedgl.comm_analysis import (
    analyze,
    appendix_eq78,
    formula_counts,
    predicted,
    sbm_expected_sum_c,
)
from tests import _cli_helpers
from tests._cli_helpers import assert_user_error
from tests.helpers import graph_from_edges

cli_fixture = _cli_helpers.cli_fixture  # the `cli` fixture

SBM = dict(dataset="sbm", sbm_nodes=300, sbm_classes=3, sbm_alpha=0.03, sbm_features=8,
           clients=3, min_client_size=1)


def test_counts_on_a_path_by_hand():
    """0-1-2-3-4, clients {0,1,2} and {3,4}: c(Ñ) = {0},{0},{0,1},{0,1},{1} -> 7 and
    N(V_0) = {0,1,2,3}, N(V_1) = {2,3,4} -> 7 (always equal on an undirected graph)."""
    graph = graph_from_edges([(0, 1), (1, 2), (2, 3), (3, 4)], 5)
    counts = formula_counts(graph.edge_index, np.array([0, 0, 0, 1, 1]), 2)
    assert counts == {"sum_c_N": 7, "sum_N_Vk": 7, "nodes": 5, "remote_neighbours": 2}
    pred = predicted(counts, d=3, value_bytes=4, num_clients=2)
    assert pred["1-hop"]["values_down"] == 5 * 3 and pred["2-hop"]["values_down"] == 7 * 3
    assert pred["2-hop"]["bytes_down"] == 7 * 3 * 4 + 2 * 8  # + one degree per remote row


@pytest.mark.parametrize("partition", ["dirichlet", "p-split"])
def test_predicted_equals_measured_dense_bytes_on_sbm(partition):
    result = analyze(partition=partition, mcmahan_p=0.5, **SBM)
    assert result["counts"]["sum_c_N"] == result["counts"]["sum_N_Vk"]
    for row in result["methods"]:
        pred, meas = row["predicted"], row["measured"]
        assert row["dense_matches_formula"], row
        assert (meas["dense_bytes_up"], meas["dense_bytes_down"]) == (pred["bytes_up"],
                                                                      pred["bytes_down"])
        # Gaussian features: no row is sparse, so what was sent is the dense count
        assert (meas["bytes_up"], meas["bytes_down"]) == (pred["bytes_up"], pred["bytes_down"])
    by = {r["method"]: r for r in result["methods"]}
    assert by["0-hop"]["measured"]["bytes_up"] == 0
    assert by["1-hop paper-code"]["measured"] == by["2-hop"]["measured"]
    assert by["1-hop"]["measured"]["bytes_down"] < by["2-hop"]["measured"]["bytes_down"]
    sbm = result["sbm"]
    assert abs(sbm["relative_error"]) < 0.05  # one draw of a 300-node SBM
    assert ("appendix_eq78_sum_c_N" in sbm) == (partition == "p-split")


def test_sbm_expectation_matches_eq78_for_one_class_per_client():
    """p = 0, K = C, equal classes: every client holds one class, so the general expectation
    is eq. (67)/(78): N (1 + (C-1)(1 - (1-μα)^{N/C}))."""
    y = np.repeat(np.arange(4), 50)
    exp = sbm_expected_sum_c(y, y.copy(), 4, 4, alpha=0.05, mu=0.2)
    assert exp == pytest.approx(appendix_eq78(200, 4, 0.05, 0.2, 0.0), rel=1e-9)


def test_sbm_expectation_against_simulation():
    """The expectation is the mean of Σ_i |c(Ñ_i)| over independent SBM draws."""
    from fedgl.data.sbm import stochastic_block_model

    owner = np.arange(240) % 4
    draws, exps = [], []
    for seed in range(8):
        g = stochastic_block_model(nodes=240, classes=3, alpha=0.02, mu=0.3, features=2, seed=seed)
        draws.append(formula_counts(g.edge_index, owner, 4)["sum_c_N"])
        exps.append(sbm_expected_sum_c(g.y.numpy(), owner, 4, 3, 0.02, 0.3))
    assert np.mean(draws) == pytest.approx(np.mean(exps), rel=0.03)


def test_cora_sparse_bytes_below_dense(data_root):
    """Real data (binary features): the dense count matches the formula, and the sparse rows
    actually sent are fewer bytes."""
    result = analyze(dataset="cora", data_root=str(data_root), clients=5, beta=1.0)
    two = {r["method"]: r for r in result["methods"]}["2-hop"]
    assert two["dense_matches_formula"]
    assert 0 < two["measured"]["bytes_up"] < two["measured"]["dense_bytes_up"]


def test_cli_prints_and_writes_json(cli, tmp_path):
    out = tmp_path / "comm.json"
    res = cli("analyze-comm", "--sbm-nodes", "120", "--sbm-features", "4", "--clients", "3",
              "--min-client-size", "1", "--out", out)
    assert res.code == 0, res.err
    assert "1-hop paper-code" in res.out and "NO" not in res.out
    data = json.loads(out.read_text())
    assert data["graph"]["nodes"] == 120 and len(data["methods"]) == 4
    assert all(r["dense_matches_formula"] for r in data["methods"])


@pytest.mark.parametrize("args, words", [
    (["--clients", "0"], ["clients"]),
    (["--out", "x.txt"], ["--out", ".json"]),
    (["--dataset", "coraa"], ["unknown dataset", "cora"]),
    (["--sbm-nodes", "40", "--secure-sum", "mask"], ["unrecognized", "--secure-sum"]),
])
def test_bad_input_is_one_line(cli, tmp_path, args, words):
    assert_user_error(cli("analyze-comm", *args), *words)


def test_formula_counts_on_isolated_nodes():
    """Nodes without edges still count once (their own client)."""
    counts = formula_counts(torch.empty(2, 0, dtype=torch.long), np.array([0, 1, 1]), 2)
    assert counts["sum_c_N"] == counts["sum_N_Vk"] == 3
