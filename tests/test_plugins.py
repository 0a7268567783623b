"""Third-party algorithms through the ``fedgl.algorithms`` entry point group.

The FedProx package of docs/extending.md is written from that page into a temporary folder,
installed there with pip (``--target``: the shared environment is not touched) and run through
the ``fedgl`` command in a subprocess whose ``PYTHONPATH`` holds it. Broken plugins are
hand-written ``.dist-info`` folders on ``sys.path``.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedgl.config import plugins as plugin_discovery
from fedgl.config import registry
from fedgl.errors import PluginError
from tests._cli_helpers import REPO, TINY, assert_user_error, cli_fixture, run_subprocess

cli = cli_fixture
DOC = REPO / "docs" / "extending.md"


def doc_files() -> dict[str, str]:
    """The files docs/extending.md gives: ``<!-- file: NAME -->`` then a fenced block."""
    text = DOC.read_text()
    found = re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)\n```", text, flags=re.S)
    return {name: body + "\n" for name, body in found}


@pytest.fixture(scope="module")
def fedprox_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs' FedProx package, pip-installed into a folder of its own."""
    files = doc_files()
    assert set(files) == {"fedgl_fedprox.py", "pyproject.toml"}, sorted(files)
    base = tmp_path_factory.mktemp("fedprox")
    pkg, site = base / "fedgl-fedprox", base / "site"
    pkg.mkdir()
    for name, body in files.items():
        (pkg / name).write_text(body)
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                           "--no-build-isolation", "--target", str(site), str(pkg)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (site / "fedgl_fedprox.py").read_text() == files["fedgl_fedprox.py"]
    return site


def with_site(site: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(REPO), str(site)])}


def history(folder: Path) -> list[dict[str, str]]:
    with open(folder / "history.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_docs_fedprox_runs_and_mu0_is_fedavg_bit_for_bit(fedprox_site, data_root, tmp_path):
    common = ["--dataset", "cora", "--data-root", data_root, "--clients", "5", "--rounds", "3",
              "--seed", "7", "--no-progress"]
    env = with_site(fedprox_site)
    runs = {}
    for name, extra in (("prox0", ["--algorithm", "fedprox", "--mu", "0"]),
                        ("fedavg", ["--algorithm", "fedgcn", "--hops", "0",
                                    "--no-batch-clients"]),
                        ("prox1", ["--algorithm", "fedprox", "--mu", "1.0"])):
        out = tmp_path / name
        res = run_subprocess("run", *common, *extra, "--out", out, env=env, timeout=300)
        assert res.code == 0, res.err
        runs[name] = out
    result = json.loads((runs["prox0"] / "result.json").read_text())
    assert result["config"]["algorithm"] == "fedprox" and result["config"]["mu"] == 0.0
    assert result["summary"]["train_bytes"]["mean"] > 0   # the models went through the ledger
    prox0, fedavg, prox1 = (history(runs[k]) for k in ("prox0", "fedavg", "prox1"))
    assert len(prox0) == 3
    # every column of every round (losses as full-precision floats, accuracies, oracle)
    assert prox0 == fedavg
    fedavg_result = json.loads((runs["fedavg"] / "result.json").read_text())
    for key in ("test_acc", "oracle_test_acc", "train_bytes"):
        assert result["summary"][key] == fedavg_result["summary"][key], key
    # the proximal term is live: same first forward pass, then other weights
    assert prox1[0]["train_loss"] != prox0[0]["train_loss"]  # the loss includes the term
    assert prox1[-1]["train_loss"] != prox0[-1]["train_loss"]


def test_plugin_is_listed_and_checked(fedprox_site):
    env = with_site(fedprox_site)
    res = run_subprocess("run", "--help", env=env)
    assert res.code == 0
    assert "fedprox (package fedgl-fedprox 0.1.0)" in res.out
    assert "--mu" not in res.out  # not imported for the general help
    res = run_subprocess("run", "--algorithm", "fedprox", "--help", env=env)
    assert res.code == 0 and "--mu MU" in res.out and "proximal term weight" in res.out
    res = run_subprocess("plugins", env=env)
    assert res.code == 0 and re.search(r"fedprox\s+ok\s+fedgl-fedprox 0\.1\.0", res.out)
    res = run_subprocess("run", "--algorithm", "fedprox", "--mu", "-1", *TINY, env=env)
    assert_user_error(res, "mu must be >= 0")


def test_plugin_in_a_sweep_and_report(fedprox_site, tmp_path):
    pytest.importorskip("matplotlib", reason="fedgl report draws with matplotlib (fedgl[plots])")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("out: {}\nbase: {{dataset: sbm, sbm_nodes: 60, sbm_features: 8, clients: 3, "
                     "rounds: 2, progress: false}}\ngrid: {{algorithm: [fedgcn, fedprox], mu: [0.0, 0.5]}}\n"
                     .format(json.dumps(str(tmp_path / "sw"))))
    env = with_site(fedprox_site)
    res = run_subprocess("sweep", sweep, env=env, timeout=300)
    assert res.code == 0, res.err
    cells = sorted((tmp_path / "sw").glob("cells/*/result.json"))
    configs = [json.loads(c.read_text())["config"] for c in cells]
    assert len(configs) == 3   # mu varies only the FedProx cells
    assert sorted(c["mu"] for c in configs if c["algorithm"] == "fedprox") == [0.0, 0.5]
    res = run_subprocess("report", tmp_path / "sw", env=env, timeout=300)
    assert res.code == 0, res.err
    assert "fedprox" in (tmp_path / "sw" / "report" / "report.md").read_text()


# ---------------------------------------------------------------------- broken plugins
GOOD_OPTIONS = '''
from dataclasses import dataclass
from fedgl.config import option

@dataclass(frozen=True)
class Opts:
    knob: float = option(1.0, "a knob")
'''


def run_help(capsys: pytest.CaptureFixture[str]) -> str:
    """``fedgl run --help`` in-process (argparse exits after printing it)."""
    from fedgl.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["run", "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


def write_plugin(site: Path, package: str, entry: str, module: str, source: str) -> None:
    info = site / f"{package.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[fedgl.algorithms]\n{entry}\n")
    (site / f"{module}.py").write_text(source)


def restore_registry(specs: dict, aliases: dict) -> None:
    """The registry as it was before a test installed plugins, discovered afresh."""
    registry._SPECS.clear()
    registry._SPECS.update(specs)
    registry._ALIASES.clear()
    registry._ALIASES.update(aliases)
    importlib.invalidate_caches()
    plugin_discovery.discover(refresh=True)


@pytest.fixture
def plugin_site(tmp_path: Path):
    """A folder on sys.path for hand-written plugins; the registry is restored afterwards."""
    site = tmp_path / "site"
    site.mkdir()
    registry.load_all()  # the built-ins register once per process: keep them in the snapshot
    specs, aliases = dict(registry._SPECS), dict(registry._ALIASES)
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    before = set(sys.modules)
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        for name in set(sys.modules) - before:
            if name.startswith("plug_"):
                del sys.modules[name]
        restore_registry(specs, aliases)


SPEC_SOURCE = GOOD_OPTIONS + '''
from fedgl.config.registry import AlgorithmSpec
SPEC = AlgorithmSpec(name="{name}", setting="horizontal", entry="fedgl.algorithms.fedgcn.runner:run_fedgcn",
                     options={options})
'''


@pytest.mark.parametrize(("source", "entry_value", "words"), [
    ("import plug_missing_dependency\n", "plug_x:SPEC", ["failed to load", "ModuleNotFoundError",
                                                         "pip uninstall fedgl-plug"]),
    ("SPEC = {'name': 'myalg'}\n", "plug_x:SPEC", ["gives a dict, not an AlgorithmSpec"]),
    (SPEC_SOURCE.format(name="other", options="Opts"), "plug_x:SPEC",
     ["gives the spec of 'other'", "name the entry point"]),
    (SPEC_SOURCE.format(name="myalg", options="Opts").replace('option(1.0, "a knob")', "1.0"),
     "plug_x:SPEC", ["option 'knob' has no help text"]),
    (SPEC_SOURCE.format(name="myalg", options="Opts").replace("knob: float", "lr: float"),
     "plug_x:SPEC", ["option 'lr' is a common config key"]),
    (SPEC_SOURCE.format(name="myalg", options="Opts").replace("knob: float", "knob: list"),
     "plug_x:SPEC", ["annotated 'list'"]),
    (SPEC_SOURCE.format(name="myalg", options="Opts").replace('setting="horizontal"',
                                                              'setting="diagonal"'),
     "plug_x:SPEC", ["ValueError", "setting must be horizontal or vertical"]),
    (SPEC_SOURCE.format(name="myalg", options="Opts").replace(
        'entry="fedgl.algorithms.fedgcn.runner:run_fedgcn"', 'entry="nowhere"'),
     "plug_x:SPEC", ["entry 'nowhere' must be 'package.module:function'"]),
], ids=["import-error", "not-a-spec", "name-mismatch", "no-help", "common-key", "bad-type",
        "bad-setting", "bad-entry"])
def test_broken_plugin_is_one_line_and_other_runs_work(plugin_site, cli, capsys, tmp_path, source,
                                                       entry_value, words):
    write_plugin(plugin_site, "fedgl-plug", f"myalg = {entry_value}", "plug_x", source)
    plugin_discovery.discover(refresh=True)
    assert "myalg" in registry.algorithm_names()   # listed from metadata, nothing imported
    assert "plug_x" not in sys.modules
    res = cli("run", "--algorithm", "myalg", *TINY, "--out", tmp_path / "never")
    line = assert_user_error(res, "plugin 'myalg'", "package fedgl-plug 1.0", *words,
                             out=tmp_path / "never")
    assert "\n" not in line
    with pytest.raises(PluginError):
        registry.get_spec("myalg")
    # the broken plugin does not get in the way of anything else
    assert "myalg (package fedgl-plug 1.0)" in run_help(capsys)
    assert cli("run", "--algorithm", "fedgcn", "--hops", "0", *TINY, "--out", tmp_path / "ok").code == 0
    res = cli("plugins")
    assert res.code == 2 and "plugin 'myalg'" in res.err and "Traceback" not in res.err


def test_plugin_named_like_a_builtin_is_refused_and_the_builtin_runs(plugin_site, cli, capsys,
                                                                     tmp_path):
    write_plugin(plugin_site, "fedgl-clash", "fedgcn = plug_clash:SPEC", "plug_clash",
                 "raise RuntimeError('must never be imported')\n")
    write_plugin(plugin_site, "fedgl-alias", "bds-gcn = plug_alias:SPEC", "plug_alias",
                 "raise RuntimeError('must never be imported')\n")   # a built-in's alias
    plugin_discovery.discover(refresh=True)
    assert registry.get_spec("fedgcn").entry.startswith("fedgl.algorithms.fedgcn")
    assert registry.get_spec("bds-gcn").name == "bns-gcn"
    assert registry.plugin_names() == []
    res = cli("run", "--algorithm", "fedgcn", "--hops", "0", *TINY, "--out", tmp_path / "ok")
    assert res.code == 0, res.err
    res = cli("plugins")
    lines = res.err.splitlines()   # one line per broken plugin, no traceback
    assert res.code == 2 and len(lines) == 2 and "Traceback" not in res.err
    assert all(line.startswith("fedgl: error: plugin '") for line in lines)
    clash = next(line for line in lines if "plugin 'fedgcn'" in line)
    for word in ("fedgl-clash", "built-in", "rename the entry point"):
        assert word in clash
    assert any("plugin 'bds-gcn'" in line and "fedgl-alias" in line for line in lines)
    assert "fedgcn from fedgl-clash (ignored" in " ".join(run_help(capsys).split())


def test_plugin_entry_point_may_name_a_function(plugin_site):
    source = SPEC_SOURCE.format(name="myalg", options="Opts") + "\ndef make():\n    return SPEC\n"
    write_plugin(plugin_site, "fedgl-fn", "myalg = plug_fn:make", "plug_fn", source)
    plugin_discovery.discover(refresh=True)
    spec = registry.get_spec("myalg")
    assert spec.name == "myalg" and spec.option_names() == ["knob"]
    from fedgl.config import Config

    assert Config.from_dict({"algorithm": "myalg", "knob": 2}).knob == 2.0


def test_no_plugins_installed(cli):
    plugin_discovery.discover(refresh=True)
    if plugin_discovery.discover():
        pytest.skip("plugins are installed in this environment")
    res = cli("plugins")
    assert res.code == 0 and "no plugin algorithms installed" in res.out


# ---------------------------------------------------------------------- the plugin, deployed
FEDPROX = {"algorithm": "fedprox", "mu": 0.5, "dataset": "cora", "clients": 3, "rounds": 2,
           "local_steps": 2, "progress": False, "oracle_eval": False}


@pytest.fixture
def fedprox_here(fedprox_site: Path, monkeypatch: pytest.MonkeyPatch):
    """The docs' FedProx package importable and discovered in this process, and on the
    ``PYTHONPATH`` of the processes it starts (a loopback federation's); the registry is
    restored afterwards."""
    registry.load_all()
    specs, aliases = dict(registry._SPECS), dict(registry._ALIASES)
    sys.path.insert(0, str(fedprox_site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), str(fedprox_site)]))
    importlib.invalidate_caches()
    plugin_discovery.discover(refresh=True)
    try:
        yield fedprox_site
    finally:
        sys.path.remove(str(fedprox_site))
        sys.modules.pop("fedgl_fedprox", None)
        restore_registry(specs, aliases)


def fedprox_shards(root: Path) -> Path:
    from tests.flower_helpers import write_deployment_files

    return write_deployment_files(root, 3, ("--algorithm", "fedprox"))


def test_docs_fedprox_deployed_driver_equals_local(fedprox_here, data_root, tmp_path):
    """The deployed server's driver over parties built from shards and keys as ``fedgl
    client`` builds them (in-process, no Flower): FedProx's own client (mu > 0, so a plain
    FedAvg client would give another history), the same run as ``--runtime local``."""
    from tests.flower_helpers import assert_same_as_local, deployed_in_process

    spec = registry.get_spec("fedprox")
    assert spec.deployment() == ("fedgl_fedprox:FedProxClient", "fedavg",
                                 "fedgl.algorithms.base:FedAvgServer")
    deployed = deployed_in_process(fedprox_shards(tmp_path), FEDPROX)
    assert_same_as_local(deployed, FEDPROX)


@pytest.mark.slow   # a loopback Flower federation takes minutes on 2 cores
def test_docs_fedprox_runs_on_a_loopback_flower_federation(fedprox_here, data_root, tmp_path):
    """docs/extending.md's FedProx, installed and changing nothing in fedgl, on Flower (one
    SuperLink, a process per client: fedgl shard, fedgl client, fedgl server) equals its local
    run: history, value bytes, wire bytes and message counts."""
    from tests.flower_helpers import PLAINTEXT, assert_same_as_local, deployed_run

    deployed = deployed_run(fedprox_shards(tmp_path), "fedprox", FEDPROX, PLAINTEXT)
    assert deployed["config"]["algorithm"] == "fedprox"
    assert_same_as_local(deployed, FEDPROX)
