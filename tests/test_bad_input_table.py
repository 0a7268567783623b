"""A table of bad inputs across every class (output folders, divergence, data, extreme values,
Ray start-up, config consistency, the Python API): each ends in exit code 2 with one
``fedgl: error:`` line and no traceback (CLI), or a :class:`FedglError` with a one-line message
(API), and leaves the filesystem exactly as it was (compared file by file, modes included).

Checkpoints (corrupt or mismatched ``checkpoint.pt``) are covered where the checkpoint format is
defined, not here.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

import fedgl
from fedgl.cli import main
from fedgl.errors import ConfigError, DataError, FedglError, OutputError
from tests._cli_helpers import TINY, shared_data_root

DATA = shared_data_root()
needs_cora = pytest.mark.skipif(not (DATA / "Cora" / "raw").is_dir(), reason="no Cora files")
PLANETOID_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


# ---------------------------------------------------------------------- filesystem snapshot
def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its kind, mode, size and content (small files)."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        body = p.read_bytes() if p.is_file() and st.st_size < 1 << 20 else None
        out[str(p.relative_to(root))] = (p.is_dir(), st.st_mode, st.st_size, body)
    return out


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder (the cwd, so a default ``runs/`` would show) with prepared inputs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FEDGL_OFFLINE", "1")
    (tmp_path / "a_file").write_text("not a folder\n")
    done = tmp_path / "done"
    done.mkdir()
    (done / "result.json").write_text("{}\n")
    (done / "history.csv").write_text("repeat\n")
    half = tmp_path / "half"
    half.mkdir()
    (half / "checkpoint.pt").write_bytes(b"x")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine\n")
    _write_npz_cases(tmp_path)
    _write_yaml_cases(tmp_path)
    if (DATA / "Cora" / "raw").is_dir():
        _write_planetoid_cases(tmp_path)
    return tmp_path


def _csr(n: int = 30, seed: int = 0) -> dict[str, np.ndarray]:
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    a = sp.random(n, n, density=0.2, random_state=1, format="csr")
    a = ((a + a.T) > 0).astype(np.float32).tocsr()
    x = rng.random((n, 4)).astype(np.float32)
    y = np.arange(n) % 3
    return {"adj_data": a.data, "adj_indices": a.indices, "adj_indptr": a.indptr,
            "adj_shape": np.array(a.shape), "attr_matrix": x, "labels": y}


def _write_npz_cases(root: Path) -> None:
    d = root / "npz"
    d.mkdir()
    good = _csr()
    np.savez(d / "good.npz", **good)
    x = good["attr_matrix"].copy()
    x[3, 1] = np.nan
    np.savez(d / "nan.npz", **{**good, "attr_matrix": x})
    x = good["attr_matrix"].copy()
    x[5, 0] = np.inf
    np.savez(d / "inf.npz", **{**good, "attr_matrix": x})
    idx = good["adj_indices"].copy()
    idx[0] = 30
    np.savez(d / "badid.npz", **{**good, "adj_indices": idx})
    np.savez(d / "strdata.npz", **{**good, "adj_data": np.array(["a"] * len(good["adj_data"]))})
    labels = good["labels"].copy()
    labels[0] = 10**9
    np.savez(d / "hugelabel.npz", **{**good, "labels": labels})
    np.savez(d / "neglabel.npz", **{**good, "labels": good["labels"] - 1})
    np.savez(d / "floatlabel.npz", **{**good, "labels": good["labels"] + 0.5})
    np.savez(d / "onelabel.npz", **{**good, "labels": np.zeros(30, dtype=np.int64)})
    np.savez(d / "shortlabels.npz", **{**good, "labels": good["labels"][:20]})
    np.savez(d / "nolabels.npz", **{k: v for k, v in good.items() if k != "labels"})
    (d / "random.npz").write_bytes(os.urandom(512))


def _write_yaml_cases(root: Path) -> None:
    (root / "dup.yaml").write_text("rounds: 1\nrounds: 2\n")
    (root / "bighidden.yaml").write_text("hidden: 100000000000000000000\n")
    (root / "deep.yaml").write_text("a: " + "{b: " * 10000 + "1" + "}" * 10000 + "\n")
    (root / "unknown.yaml").write_text("roundz: 3\n")
    (root / "nanlr.yaml").write_text("lr: .nan\n")


def _write_planetoid_cases(root: Path) -> None:
    def copy(name: str) -> Path:
        raw = root / name / "Cora" / "raw"
        raw.mkdir(parents=True)
        for s in PLANETOID_SUFFIXES:
            shutil.copy(DATA / "Cora" / "raw" / f"ind.cora.{s}", raw)
        return raw

    mixed = copy("mixed")   # CiteSeer's training labels over Cora's
    shutil.copy(DATA / "CiteSeer" / "raw" / "ind.citeseer.y", mixed / "ind.cora.y")
    empty = copy("notest")
    (empty / "ind.cora.test.index").write_text("")
    trunc = copy("trunc")
    data = (trunc / "ind.cora.allx").read_bytes()
    (trunc / "ind.cora.allx").write_bytes(data[: len(data) // 3])


# ---------------------------------------------------------------------- CLI cases
RUN = ["run", *TINY]
NPZ = "npz:npz/{}.npz"

CLI_CASES: list[tuple[str, list[str], list[str]]] = [
    # 1. output folders
    ("out-is-file", [*RUN, "--out", "a_file"], ["a_file", "not a folder"]),
    ("out-under-file", [*RUN, "--out", "a_file/sub"], ["a_file", "file"]),
    ("out-has-results", [*RUN, "--out", "done"], ["done", "--overwrite"]),
    ("out-has-checkpoint", [*RUN, "--out", "half"], ["checkpoint", "--resume"]),
    ("out-has-other-files", [*RUN, "--out", "other"], ["other", "other files"]),
    ("out-name-300-chars", [*RUN, "--out", "x" * 300], ["at most 200"]),
    ("out-in-proc", [*RUN, "--out", "/proc/fedgl-x"], ["/proc/fedgl-x"]),
    ("out-empty", [*RUN, "--out", ""], ["--out", "empty"]),
    ("resume-missing", ["run", "--resume", "nowhere"], ["no checkpoint"]),
    ("resume-with-flags", ["run", "--resume", "half", "--rounds", "3"], ["checkpoint"]),
    ("resume-finished", ["run", "--resume", "done"], ["checkpoint"]),
    ("overwrite-with-resume", ["run", "--resume", "half", "--overwrite"], ["--resume"]),
    # 2. divergence and non-finite inputs
    ("npz-nan-features", [*RUN, "--dataset", NPZ.format("nan")], ["nan", "features"]),
    ("npz-inf-features", [*RUN, "--dataset", NPZ.format("inf")], ["infinite"]),
    ("lr-diverges", [*RUN, "--sbm-nodes", "200", "--lr", "1e4", "--sbm-noise", "1e6"],
     ["diverged", "round 1", "--lr"]),
    ("lr-diverges-central", ["run", "--algorithm", "centralized", "--sbm-nodes", "200",
                             "--rounds", "2", "--no-progress", "--lr", "1e4", "--sbm-noise", "1e6"],
     ["diverged"]),
    ("dp-noise-diverges", [*RUN, "--sbm-nodes", "200", "--rounds", "3", "--dp-epsilon", "1e-300"],
     ["diverged", "noise"]),
    ("lr-above-bound", [*RUN, "--lr", "1e38"], ["lr", "<= 10000"]),
    ("huge-dp-clip", [*RUN, "--dp-epsilon", "1", "--dp-clip", "1e300"], ["dp_clip"]),
    ("huge-sbm-noise", [*RUN, "--sbm-noise", "1e300"], ["sbm_noise"]),
    ("yaml-nan-lr", ["run", "nanlr.yaml", *TINY], ["lr", "finite"]),
    # 3. corrupt or inconsistent data
    ("npz-neighbour-out-of-range", [*RUN, "--dataset", NPZ.format("badid")], ["badid.npz"]),
    ("npz-string-adjacency", [*RUN, "--dataset", NPZ.format("strdata")], ["strdata.npz"]),
    ("npz-label-1e9", [*RUN, "--dataset", NPZ.format("hugelabel")], ["1000000000", "classes"]),
    ("npz-negative-label", [*RUN, "--dataset", NPZ.format("neglabel")], ["label"]),
    ("npz-float-labels", [*RUN, "--dataset", NPZ.format("floatlabel")], ["integer"]),
    ("npz-one-class", [*RUN, "--dataset", NPZ.format("onelabel")], ["2 classes"]),
    ("npz-short-labels", [*RUN, "--dataset", NPZ.format("shortlabels")], ["shapes"]),
    ("npz-no-labels", [*RUN, "--dataset", NPZ.format("nolabels")], ["labels"]),
    ("npz-random-bytes", [*RUN, "--dataset", NPZ.format("random")], ["corrupt"]),
    ("npz-missing", [*RUN, "--dataset", NPZ.format("absent")], ["not found"]),
    ("partition-bad-npz", ["partition", "--dataset", NPZ.format("hugelabel"), "--clients", "2"],
     ["classes"]),
    # 4. extreme values
    ("seed-2-64", [*RUN, "--seed", str(2**64)], ["seed", "2**63"]),
    ("seed-negative", [*RUN, "--seed", "-1"], ["seed", ">= 0"]),
    ("threads-4096", [*RUN, "--threads", "4096"], ["threads", "256"]),
    ("hidden-1e12-float", [*RUN, "--hidden", "1e12"], ["--hidden", "invalid int"]),
    ("hidden-10-12", [*RUN, "--hidden", str(10**12)], ["hidden", "65536"]),
    ("yaml-hidden-1e20", ["run", "bighidden.yaml", *TINY], ["hidden"]),
    ("sbm-nodes-2e9", [*RUN, "--sbm-nodes", "2000000000"], ["sbm_nodes"]),
    ("sbm-too-big-for-memory", [*RUN, "--sbm-nodes", "300000000", "--sbm-alpha", "0.5"],
     ["memory", "--sbm-nodes"]),
    ("device-cuda-abc", [*RUN, "--device", "cuda:abc"], ["device", "cuda:N"]),
    ("device-tpu", [*RUN, "--device", "tpu"], ["device"]),
    ("yaml-nested-10000", ["run", "deep.yaml"], ["nested too deeply"]),
    ("fedgat-degree-1e5", [*RUN, "--algorithm", "fedgat", "--degree", "100000"], ["degree", "64"]),
    ("lr-1e300", [*RUN, "--lr", "1e300"], ["lr"]),
    ("layers-1000", [*RUN, "--layers", "1000"], ["layers"]),
    ("rounds-1e9", [*RUN, "--rounds", str(10**9)], ["rounds"]),
    ("repeats-1e6", [*RUN, "--repeats", str(10**6)], ["repeats"]),
    ("clients-1e6", [*RUN, "--clients", str(10**6)], ["clients"]),
    ("client-cpus-5000", [*RUN, "--runtime", "ray", "--client-cpus", "5000"], ["client_cpus"]),
    # 5. Ray start-up (no Ray instance is started by these)
    ("ray-unreachable", [*RUN, "--runtime", "ray", "--ray-address", "127.0.0.1:1"],
     ["nothing listens at 127.0.0.1:1", "ray start --head"]),
    ("ray-bad-address", [*RUN, "--runtime", "ray", "--ray-address", "nonsense"], ["HOST:PORT"]),
    ("ray-address-without-ray", [*RUN, "--ray-address", "127.0.0.1:6379"], ["--runtime ray"]),
    # 7. config consistency
    ("fedgat-flag-on-fedgcn", [*RUN, "--degree", "8"], ["degree", "fedgat"]),
    ("fedgcn-flag-on-fedgat", [*RUN, "--algorithm", "fedgat", "--hops", "1"], ["hops"]),
    ("yaml-duplicate-key", ["run", "dup.yaml", *TINY], ["rounds", "twice"]),
    ("yaml-unknown-key", ["run", "unknown.yaml", *TINY], ["roundz"]),
    ("oracle-eval-false", ["run", "--oracle-eval", "false", *TINY], ["--no-oracle-eval"]),
    ("unknown-run-flag", [*RUN, "--bogus"], ["--bogus", "fedgl run --help"]),
    ("min-client-size-huge", [*RUN, "--min-client-size", "100000"],
     ["min-client-size", "or less"]),
    ("partition-plot-proc", ["partition", *TINY[:4], "--clients", "2", "--plot", "/proc/x.png"],
     ["--plot"]),
    ("config-not-found", ["run", "nope.yaml"], ["not found"]),
    ("datasets-check-unknown-flag", ["datasets", "--chek"], ["--chek"]),
]
if torch.cuda.is_available():  # pragma: no cover - CPU machines
    CLI_CASES.append(("device-cuda-99", [*RUN, "--device", "cuda:99"], ["cuda:99"]))
else:
    CLI_CASES.append(("device-cuda-on-cpu-torch", [*RUN, "--device", "cuda"], ["cuda", "cpu"]))

PLANETOID_CASES = [
    ("cora-with-citeseer-labels", "mixed", ["label columns", "different datasets"]),
    ("cora-empty-test-index", "notest", ["Cora"]),
    ("cora-truncated-allx", "trunc", ["Cora"]),
]


def assert_one_line_error(code: int, out: str, err: str, keywords: list[str]) -> None:
    assert code == 2, f"exit {code}; stderr {err!r}"
    assert "Traceback" not in err + out
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedgl: error: "), err
    for word in keywords:
        assert word.lower() in lines[0].lower(), f"{word!r} not in {lines[0]!r}"


def _cli(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(("args", "keywords"), [pytest.param(a, k, id=n) for n, a, k in CLI_CASES])
def test_cli_bad_input(sandbox, capsys, args, keywords):
    before = snapshot(sandbox)
    code, out, err = _cli(capsys, args)
    assert_one_line_error(code, out, err, keywords)
    assert snapshot(sandbox) == before


@needs_cora
@pytest.mark.parametrize(("root", "keywords"), [pytest.param(r, k, id=n)
                                                 for n, r, k in PLANETOID_CASES])
def test_cli_corrupt_planetoid(sandbox, capsys, root, keywords):
    before = snapshot(sandbox)
    code, out, err = _cli(capsys, [*RUN, "--dataset", "cora", "--data-root", root, "--out", "o"])
    assert_one_line_error(code, out, err, keywords)
    assert snapshot(sandbox) == before


@needs_cora
def test_datasets_check_names_the_corrupt_files(sandbox, capsys):
    code, out, err = _cli(capsys, ["datasets", "--check", "--data-root", "mixed"])
    assert_one_line_error(code, out, err, ["cora"])
    assert "different datasets" in out
    code, out, _ = _cli(capsys, ["datasets", "--check", "--data-root", str(DATA)])
    assert code == 0 and "cora      ok" in out
    assert "synthetic:products generated on first use (no files to check)" in out


def test_cli_out_locked_by_another_run(sandbox, capsys):
    """A second run on a folder another run holds is refused at once."""
    lock = sandbox / ".busy.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    os.write(fd, b"pid 12345\n")
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        before = snapshot(sandbox)
        code, out, err = _cli(capsys, [*RUN, "--out", "busy"])
        assert_one_line_error(code, out, err, ["in use", "pid 12345"])
        assert snapshot(sandbox) == before
    finally:
        os.close(fd)


def test_cli_unwritable_out_detected_before_training(sandbox, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    ro = sandbox / "ro"
    ro.mkdir(mode=0o555)
    code, out, err = _cli(capsys, [*RUN, "--out", "ro/x"])
    assert_one_line_error(code, out, err, ["permission"])


# ---------------------------------------------------------------------- API cases
def _graph() -> fedgl.GraphData:
    return fedgl.load_dataset("sbm", nodes=60, features=4, classes=3)


def _nan_graph() -> fedgl.GraphData:
    g = _graph()
    x = g.x.clone()
    x[0, 0] = float("nan")
    return g.with_features(x)


def _bad_edge_graph() -> fedgl.GraphData:
    g = _graph()
    ei = g.edge_index.clone()
    ei[0, 0] = 60
    return fedgl.GraphData(g.name, g.x, g.y, ei, g.train_mask, g.val_mask, g.test_mask,
                           g.num_classes)


class _NoLabels:
    x = torch.zeros(3, 2)
    edge_index = torch.zeros(2, 0, dtype=torch.long)
    y = None


API_SMALL = dict(sbm_nodes=60, sbm_features=4, clients=2, rounds=1, progress=False)

API_CASES: list[tuple[str, Callable[[Path], object], type[FedglError], list[str]]] = [
    ("run-graph-str", lambda p: fedgl.run(graph="cora", **API_SMALL), ConfigError, ["GraphData"]),
    ("partition-clients-str", lambda p: fedgl.partition(_graph(), "3"), DataError,
     ["num_clients", "int"]),
    ("partition-not-a-graph", lambda p: fedgl.partition("cora", 3), DataError, ["GraphData"]),
    ("config-rounds-str", lambda p: fedgl.Config(rounds="x"), ConfigError, ["rounds", "int"]),
    ("config-numpy-bad", lambda p: fedgl.Config(rounds=np.int64(-3)), ConfigError, ["rounds"]),
    ("config-not-mapping", lambda p: fedgl.run(42), ConfigError, ["config"]),
    ("run-out-is-file", lambda p: fedgl.run(out=str(p / "a_file"), **API_SMALL), OutputError,
     ["not a folder"]),
    ("run-out-has-results", lambda p: fedgl.run(out=str(p / "done"), **API_SMALL), OutputError,
     ["overwrite"]),
    ("run-nan-graph", lambda p: fedgl.run(graph=_nan_graph(), out=str(p / "o"), **API_SMALL),
     DataError, ["NaN"]),
    ("run-bad-edge-graph", lambda p: fedgl.run(graph=_bad_edge_graph(), **API_SMALL), DataError,
     ["outside"]),
    ("from-pyg-no-labels", lambda p: fedgl.from_pyg(_NoLabels()), DataError, ["y"]),
    ("load-missing-npz", lambda p: fedgl.load_dataset("npz:/nonexistent/x.npz"), DataError,
     ["not found"]),
    ("run-lr-diverges", lambda p: fedgl.run(lr=1e4, sbm_noise=1e6,
                                            **{**API_SMALL, "sbm_nodes": 200}),
     fedgl.DivergenceError, ["diverged"]),
    ("run-seed-huge", lambda p: fedgl.run(seed=2**63, **API_SMALL), ConfigError, ["seed"]),
]


@pytest.mark.parametrize(("call", "error", "keywords"),
                         [pytest.param(c, e, k, id=n) for n, c, e, k in API_CASES])
def test_api_bad_input(sandbox, call, error, keywords):
    before = snapshot(sandbox)
    with pytest.raises(error) as info:
        call(sandbox)
    message = str(info.value)
    assert "\n" not in message and message
    for word in keywords:
        assert word.lower() in message.lower(), f"{word!r} not in {message!r}"
    assert snapshot(sandbox) == before


def test_api_out_file_fails_before_any_round(sandbox):
    rounds: list[int] = []
    with pytest.raises(OutputError):
        fedgl.run(out=str(sandbox / "a_file"), on_round=lambda r, t, s: rounds.append(t),
                  **API_SMALL)
    assert rounds == []


def test_api_numpy_scalars_accepted():
    cfg = fedgl.Config(rounds=np.int64(3), lr=np.float32(0.25), oracle_eval=np.bool_(False))
    assert (cfg.rounds, cfg.lr, cfg.oracle_eval) == (3, 0.25, False)
    assert type(cfg.rounds) is int


def test_table_is_large_enough():
    assert len(CLI_CASES) + len(PLANETOID_CASES) + len(API_CASES) >= 60
