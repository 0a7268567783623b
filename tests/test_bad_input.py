"""Every user error: exit code 2, one ``fedgl: error: ...`` line naming the problem, no traceback,
and nothing written to --out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests import _cli_helpers
from tests._cli_helpers import TINY, assert_user_error, run_subprocess

cli_fixture = _cli_helpers.cli_fixture  # the `cli` fixture
offline_fixture = _cli_helpers.offline_fixture  # the `offline` fixture

PLANETOID_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "out"


def _run(cli, out: Path, *args: str | Path):
    """``fedgl run TINY ARGS --out OUT`` (ARGS come after TINY, so they win)."""
    return cli("run", *TINY, *args, "--out", out)


# ---------------------------------------------------------------------- flag values
BAD_VALUES = [
    (["--dataset", "coraa"], ["unknown dataset", "cora"]),
    (["--algorithm", "fedavg"], ["unknown algorithm", "fedavg"]),
    (["--clients", "0"], ["clients", ">= 1"]),
    (["--beta", "0"], ["beta", "> 0"]),
    (["--beta", "-1"], ["beta", "> 0"]),
    (["--beta", "nan"], ["beta", "finite"]),
    (["--hops", "-1"], ["hops"]),
    (["--hops", "3"], ["hops", "0, 1 or 2"]),
    (["--hops", "2", "--layers", "1"], ["hops", "layers"]),
    (["--rounds", "-1"], ["rounds", ">= 0"]),
    (["--lr", "0"], ["lr", "> 0"]),
    (["--lr", "-0.1"], ["lr", "> 0"]),
    (["--lr", "inf"], ["lr", "finite"]),
    (["--dropout", "1.5"], ["dropout", "[0, 1)"]),
    (["--device", "tpu"], ["device"]),
    (["--model", "sage"], ["sage", "hops"]),
    (["--dataset", "npz:"], ["npz:", "path"]),
]


@pytest.mark.parametrize(("args", "keywords"),
                         [pytest.param(a, k, id=" ".join(a)) for a, k in BAD_VALUES])
def test_bad_flag_value(cli, out, args, keywords):
    assert_user_error(_run(cli, out, *args), *keywords, out=out)


@pytest.mark.parametrize(("args", "keywords"), [
    (["--rounds", "abc"], ["--rounds", "invalid int", "abc"]),
    (["--beta", "high"], ["--beta", "invalid float"]),
    (["--bogus"], ["unrecognized arguments", "--bogus"]),
])
def test_bad_flag_syntax(cli, out, args, keywords):
    assert_user_error(_run(cli, out, *args), *keywords, out=out)


def test_unknown_subcommand(cli):
    assert_user_error(cli("train"), "invalid choice", "train")


# ---------------------------------------------------------------------- graph too small to split
def test_more_clients_than_nodes(cli, out):
    res = _run(cli, out, "--sbm-nodes", "30", "--clients", "50")
    assert_user_error(res, "clients (50)", "30 nodes", out=out)


def test_unsplittable_graph_empty_client(cli, out):
    # 10 clients x default min_client_size 10 > 60 nodes: some client would be (nearly) empty.
    res = _run(cli, out, "--sbm-nodes", "60", "--clients", "10", "--min-client-size", "10")
    assert_user_error(res, "10 clients", "60 nodes", "min-client-size", out=out)


def test_split_redraws_exhausted(cli, out):
    # Feasible in size, but β=0.001 piles whole classes on single clients: no draw satisfies it.
    res = _run(cli, out, "--sbm-nodes", "100", "--sbm-classes", "2", "--clients", "10",
               "--beta", "0.001")
    assert_user_error(res, "could not split", "--beta", out=out)


# ---------------------------------------------------------------------- data files
def test_missing_planetoid_files_offline(cli, out, tmp_path, offline):
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _run(cli, out, "--dataset", "cora", "--data-root", empty)
    assert_user_error(res, "ind.cora", "not found", "offline", out=out)


def test_corrupt_planetoid_files(cli, out, tmp_path, offline):
    raw = tmp_path / "data" / "Cora" / "raw"
    raw.mkdir(parents=True)
    for suffix in PLANETOID_SUFFIXES:
        (raw / f"ind.cora.{suffix}").write_bytes(b"this is not a pickle \x00\x01\x02")
    res = _run(cli, out, "--dataset", "cora", "--data-root", tmp_path / "data")
    assert_user_error(res, "Cora", "could not be read", out=out)


def test_npz_not_found(cli, out, tmp_path, offline):
    res = _run(cli, out, "--dataset", f"npz:{tmp_path / 'nope.npz'}")
    assert_user_error(res, "nope.npz", "not found", out=out)


def test_corrupt_npz(cli, out, tmp_path):
    bad = tmp_path / "garbage.npz"
    bad.write_bytes(b"definitely not a zip archive" * 10)
    res = _run(cli, out, "--dataset", f"npz:{bad}")
    assert_user_error(res, "garbage.npz", "corrupt", out=out)


def _csr_parts(n: int = 2) -> dict[str, np.ndarray]:
    """A 2-node graph with one undirected edge, in gnn-benchmark CSR parts."""
    return {"adj_data": np.ones(2), "adj_indices": np.array([1, 0]),
            "adj_indptr": np.array([0, 1, 2]), "adj_shape": np.array([n, n])}


def test_npz_missing_labels(cli, out, tmp_path):
    path = tmp_path / "nolabels.npz"
    np.savez(path, **_csr_parts())
    assert_user_error(_run(cli, out, "--dataset", f"npz:{path}"), "lacks labels", out=out)


@pytest.mark.parametrize(("labels", "keywords"), [
    (np.array([-1, 0]), ["non-negative integer label"]),
    (np.array([0.5, 1.5]), ["non-negative integer label"]),
    (np.array([0, 1, 1]), ["inconsistent shapes"]),
], ids=["negative", "float", "wrong-length"])
def test_npz_bad_labels(cli, out, tmp_path, labels, keywords):
    path = tmp_path / "g.npz"
    np.savez(path, labels=labels, **_csr_parts())
    assert_user_error(_run(cli, out, "--dataset", f"npz:{path}"), *keywords, out=out)


def test_npz_index_out_of_range(cli, out, tmp_path):
    path = tmp_path / "badidx.npz"
    parts = _csr_parts()
    parts["adj_indices"] = np.array([5, 0])
    np.savez(path, labels=np.array([0, 1]), **parts)
    assert_user_error(_run(cli, out, "--dataset", f"npz:{path}"), "badidx.npz", "corrupt",
                      out=out)


def test_npz_empty_graph(cli, out, tmp_path):
    path = tmp_path / "empty.npz"
    np.savez(path, adj_data=np.ones(0), adj_indices=np.zeros(0, int), adj_indptr=np.array([0]),
             adj_shape=np.array([0, 0]), labels=np.zeros(0, int))
    assert_user_error(_run(cli, out, "--dataset", f"npz:{path}"), "empty graph", out=out)


# ---------------------------------------------------------------------- YAML config files
@pytest.mark.parametrize(("text", "keywords"), [
    ("rounds: [1, 2\nhops: 1\n", ["not valid YAML", "line"]),
    ("- rounds\n- 2\n", ["mapping", "list"]),
    ("round: 2\n", ["unknown key 'round'", "did you mean 'rounds'"]),
    ("hops: two\n", ["hops", "int"]),
    ("clients: null\n", ["clients", "null"]),
], ids=["malformed", "list", "unknown-key", "wrong-type", "null"])
def test_bad_yaml(cli, out, tmp_path, text, keywords):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(text)
    res = cli("run", cfg, "--rounds", "1", "--no-progress", "--out", out)
    assert_user_error(res, *keywords, out=out)


def test_yaml_not_utf8(cli, out, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_bytes(b"\xff\xfe\x00\x81 binary")
    assert_user_error(cli("run", cfg, *TINY, "--out", out), "cfg.yaml", "could not be read",
                      out=out)


def test_config_file_not_found(cli, out, tmp_path):
    res = cli("run", tmp_path / "missing.yaml", *TINY, "--out", out)
    assert_user_error(res, "missing.yaml", "not found", out=out)


# ---------------------------------------------------------------------- output paths
def test_out_is_existing_file(cli, tmp_path):
    target = tmp_path / "result.txt"
    target.write_text("keep me")
    res = cli("run", *TINY, "--out", target)
    assert_user_error(res, "--out", "not a folder")
    assert target.read_text() == "keep me"


def test_out_under_a_file(cli, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    assert_user_error(cli("run", *TINY, "--out", blocker / "sub"), "--out", "is a file")
    assert blocker.read_text() == "x"


def test_partition_plot_bad_extension(cli, tmp_path):
    plot = tmp_path / "out.txt"
    res = cli("partition", "--dataset", "sbm", "--sbm-nodes", "40", "--clients", "2",
              "--plot", plot)
    assert_user_error(res, "--plot", ".png")
    assert not plot.exists()


def test_partition_plot_under_a_file(cli, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    res = cli("partition", "--sbm-nodes", "40", "--clients", "2", "--plot", blocker / "p.png")
    assert_user_error(res, "--plot", "blocker", "not a folder")


def test_partition_bad_clients(cli):
    assert_user_error(cli("partition", "--clients", "0"), "clients", ">= 1")


# ---------------------------------------------------------------------- real processes
def test_subprocess_bad_beta(tmp_path):
    out = tmp_path / "out"
    res = run_subprocess("run", *TINY, "--beta", "-2", "--out", out)
    assert_user_error(res, "beta", "> 0", out=out)


def test_subprocess_missing_data(tmp_path):
    out = tmp_path / "out"
    res = run_subprocess("run", *TINY, "--dataset", "cora", "--data-root", tmp_path,
                         "--out", out, env={"FEDGL_DATA": ""})
    assert_user_error(res, "ind.cora", "not found", out=out)
