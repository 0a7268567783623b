"""Optional dependencies (extras) and what the CLI imports at start-up.

A missing extra is simulated in a subprocess with ``sys.modules[name] = None`` (an import of it
then fails exactly as for an absent package); the real absence was checked in a core-only
virtualenv (docs/performance.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fedgl._optional import EXTRAS, available, require
from fedgl.errors import FedglError, MissingExtraError
from tests._cli_helpers import REPO, TINY

DRIVER = r"""
import contextlib, io, json, sys
cases = json.loads(sys.argv[1])
out = []
for case in cases:
    saved = {m: sys.modules.pop(m) for m in list(sys.modules) if m.split(".")[0] == case["hide"]}
    sys.modules[case["hide"]] = None
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            if case["kind"] == "cli":
                from fedgl.cli import main
                code = main(case["args"])
            else:
                exec(case["code"])
                code = 0
    except Exception as exc:
        code = f"{type(exc).__name__}: {exc}"
    out.append({"code": code, "err": err.getvalue()})
    del sys.modules[case["hide"]]
    sys.modules.update(saved)
print(json.dumps(out))
"""


def run_hidden(cases: list[dict], cwd: Path) -> list[dict]:
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cases)], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "FEDGL_OFFLINE": "1", "PATH": "/usr/bin"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_each_missing_extra_is_one_line_naming_it(tmp_path):
    small = [*TINY, "--out", str(tmp_path / "never")]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "result.json").write_text("{}")
    cli = [("ray", ["run", "--runtime", "ray", *small]),
           ("tenseal", ["run", "--secure-sum", "he", *small]),
           ("tenseal", ["run", "--encrypt-models", "--no-oracle-eval", *small]),
           ("pymetis", ["run", "--partition", "metis", *small]),
           ("pymetis", ["partition", "--partition", "metis", "--clients", "2"]),
           ("matplotlib", ["partition", "--clients", "2", "--plot", str(tmp_path / "p.png")]),
           ("matplotlib", ["report", str(tmp_path / "run")])]
    api = [("ray", "import fedgl; fedgl.run(runtime='ray', dataset='sbm', sbm_nodes=40, "
                   "clients=2, rounds=1, progress=False)"),
           # the import sites themselves, for callers that skip the up-front check
           ("tenseal", "from fedgl.privacy.he import HEClientContext, HEParams; "
                       "HEClientContext.generate(HEParams())"),
           ("pymetis", "import numpy as np; from fedgl.data.partition import metis_partition; "
                       "metis_partition(np.array([[0, 1], [1, 0]]), 2, 2)"),
           ("ray", "from fedgl.federation.ray_runtime import start_ray; "
                   "from fedgl.config import Config; start_ray(Config.from_dict({}))"),
           ("matplotlib", "from fedgl.report import plot_label_histogram; "
                          "plot_label_histogram([[1, 2]], 'x.png')")]
    cases = ([{"hide": m, "kind": "cli", "args": a} for m, a in cli]
             + [{"hide": m, "kind": "api", "code": c} for m, c in api])
    results = run_hidden(cases, tmp_path)
    extra_of = {"ray": "ray", "tenseal": "he", "pymetis": "metis", "matplotlib": "plots"}
    for case, res in zip(cases, results, strict=True):
        install = f"pip install 'fedgl[{extra_of[case['hide']]}]'"
        if case["kind"] == "cli":
            assert res["code"] == 2, (case, res)
            lines = res["err"].splitlines()
            assert len(lines) == 1 and lines[0].startswith("fedgl: error: "), (case, res)
            assert install in lines[0] and case["hide"] in lines[0], (case, res)
        else:
            assert res["code"].startswith("MissingExtraError: "), (case, res)
            assert install in res["code"], (case, res)
    assert not (tmp_path / "never").exists()
    assert not (tmp_path / "p.png").exists() and not (tmp_path / "x.png").exists()


def test_require_and_available(tmp_path, monkeypatch):
    assert require("json", feature="reading").__name__ == "json"
    assert issubclass(MissingExtraError, FedglError)
    with pytest.raises(MissingExtraError, match=r"needs fedgl_no_such_module.*pip install "
                                                r"'fedgl\[extra9\]'"):
        require("fedgl_no_such_module.sub", feature="a feature", extra="extra9")
    # a bare folder of that name (e.g. Ray's /tmp/ray when run from /tmp) is not the package
    (tmp_path / "fedgl_fake_extra").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not available("fedgl_fake_extra")
    with pytest.raises(MissingExtraError, match="fedgl_fake_extra"):
        require("fedgl_fake_extra", feature="x")


def test_pyproject_extras_match_the_helper():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"]).lower()
    extras = project["optional-dependencies"]
    for module, extra in EXTRAS.items():
        dist = {"private_set_intersection": "openmined-psi"}.get(module, module)
        assert dist not in core, f"{dist} is in the core dependencies"
        assert any(req.lower().startswith(dist) for req in extras[extra]), (extra, extras[extra])
    # psi stays out of [all]: openmined-psi pins a protobuf older than Flower's needs
    in_all = ["ray", "he", "metis", "flower", "plots", "parquet", "speed"]
    assert extras["all"] == ["fedgl[" + ",".join(in_all) + "]"]
    assert set(EXTRAS.values()) == {*in_all, "psi"}
    assert "fedgl[all]" in extras["dev"]
    assert {"pytest", "ruff", "import-linter"} <= {r.split(">")[0].split("=")[0]
                                                   for r in extras["dev"]}


def test_core_dependencies_have_no_upper_cap():
    """`pip install fedgl` keeps the torch (and the rest) a user already has: the core caps no
    version; the one capped extra is Flower, whose internals fedgl uses."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    capped = [r for r in project["dependencies"] if "<" in r or "==" in r or "~=" in r]
    assert not capped, capped
    extras = [r for reqs in project["optional-dependencies"].values() for r in reqs
              if "<" in r or "==" in r or "~=" in r]
    assert extras == ["flwr>=1.42,<1.43"], extras


# ---------------------------------------------------------------------- start-up imports
PROBE = r"""
import json, sys
from fedgl.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = ("torch", "torch_geometric", "ray", "tenseal", "matplotlib", "pymetis", "flwr", "scipy")
print(json.dumps({"code": code, "modules": [m for m in heavy if m in sys.modules]}))
"""


def imported_by(*args: str, cwd: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "FEDGL_OFFLINE": "1", "PATH": "/usr/bin"})
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["run", "--help"],
                                  ["run", "--algorithm", "glasu", "--help"],
                                  ["run", "--clients", "0"], ["partition", "--beta", "0"],
                                  ["plugins"]])
def test_light_commands_import_no_torch(args, tmp_path):
    res = imported_by(*args, cwd=tmp_path)
    assert res["modules"] == [], res


RUN_PROBE = r"""
import json, sys
from fedgl.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": [m for m in ("torch", "torch_geometric",
                                                         "torch._dynamo") if m in sys.modules]}))
"""


def test_a_gcn_run_imports_no_pyg(tmp_path):
    """The default job (FedGCN, a GCN model) needs no PyG and no torch._dynamo: their imports
    were most of the time to the first round."""
    proc = subprocess.run([sys.executable, "-c", RUN_PROBE, "run", "--rounds", "1",
                           "--sbm-nodes", "300", "--no-progress", "--no-leakage-report",
                           "--out", str(tmp_path / "out")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "FEDGL_OFFLINE": "1", "PATH": "/usr/bin",
                               "HOME": str(tmp_path)})
    res = json.loads(proc.stdout.splitlines()[-1])
    assert res == {"code": 0, "modules": ["torch"]}, (res, proc.stderr[-2000:])
    assert (tmp_path / "out" / "result.json").is_file()


def test_datasets_lists_a_root_without_torch(tmp_path):
    """Listing a data root (Planetoid files present, an OGB folder) imports no torch at all."""
    import pickle

    raw = tmp_path / "Cora" / "raw"
    raw.mkdir(parents=True)
    for s in ("x", "tx", "allx", "y", "ty", "ally", "graph"):
        (raw / f"ind.cora.{s}").write_bytes(pickle.dumps([s]))
    (raw / "ind.cora.test.index").write_text("3\n1\n")
    (tmp_path / "ogbn_arxiv" / "raw").mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-c", PROBE, "datasets", "--data-root",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(REPO), "FEDGL_OFFLINE": "1",
                                            "PATH": "/usr/bin"})
    res = json.loads(proc.stdout.splitlines()[-1])
    assert res["code"] == 0
    assert res["modules"] == [], res   # no torch, torch_geometric, scipy or extra
    listed = {line.split()[0]: line.split(None, 1)[1] for line in proc.stdout.splitlines()[1:-2]}
    assert listed["cora"].startswith("available"), listed
    assert listed["ogbn-arxiv"].startswith("available"), listed
    assert listed["citeseer"].startswith("missing"), listed


def test_datasets_flags_a_truncated_file_without_torch(tmp_path):
    """The cheap checks of the listing still run torch-free and name the damaged file."""
    import pickle

    raw = tmp_path / "Cora" / "raw"
    raw.mkdir(parents=True)
    for s in ("x", "tx", "allx", "y", "ty", "ally", "graph"):
        (raw / f"ind.cora.{s}").write_bytes(pickle.dumps([s]))
    (raw / "ind.cora.test.index").write_text("3\n1\n")
    (raw / "ind.cora.allx").write_bytes(pickle.dumps(["allx"])[:-1])   # no end-of-pickle mark
    proc = subprocess.run([sys.executable, "-c", PROBE, "datasets", "--data-root",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(REPO), "FEDGL_OFFLINE": "1",
                                            "PATH": "/usr/bin"})
    res = json.loads(proc.stdout.splitlines()[-1])
    assert res["code"] == 0 and res["modules"] == [], res
    assert "cora" in proc.stdout and "damaged: ind.cora.allx is truncated" in proc.stdout
