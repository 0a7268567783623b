"""The configuration as sections plus per-algorithm options: old keys keep working and give the
same runs, nested and flat forms agree, an unread key names its reader, algorithms load lazily,
and the layer contract holds (and catches a violation)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import fedgl
from fedgl.cli import main
from fedgl.config import COMMON_KEYS, SECTIONS, Config
from fedgl.config.registry import BUILTIN, get_spec, load_all
from fedgl.errors import ConfigError
from tests.conftest import REPO

GOLDEN = json.loads((Path(__file__).parent / "data" / "config_golden.json").read_text())


def _nested(flat: dict) -> dict:
    """The nested YAML form of flat keys: common keys under their section, options under the
    algorithm's name."""
    algorithm = flat.get("algorithm", "fedgcn")
    out: dict = {"algorithm": algorithm}
    for key, value in flat.items():
        if key == "algorithm":
            continue
        section = COMMON_KEYS.get(key, algorithm)
        out.setdefault(section, {})[key] = value
    return out


def _close(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-6 * max(1.0, abs(a))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.mark.parametrize("case", sorted(GOLDEN["cases"]))
def test_old_keys_give_the_runs_recorded_before_the_sections(case, data_root, monkeypatch):
    """Recorded with the flat Config before this structure: same keys, same histories, same
    bytes (every algorithm, a privacy mode and the FedGAT protocol). Recorded before a
    FedAvg-style round's evaluation rode on the next fit: every evaluation travels on its own
    here, as then (tests/test_evaluation_rides.py relates the two exactly)."""
    from fedgl.algorithms.base import FedAvgServer

    monkeypatch.setattr(FedAvgServer, "_may_ride", lambda self, t, metrics: False)
    recorded = GOLDEN["cases"][case]
    # FedGCN's leakage report (after the rounds; no effect on history or bytes, tens of
    # seconds on a Cora-sized graph) has its own tests
    skip = ({"leakage_report": False}
            if recorded["config"].get("algorithm", "fedgcn") == "fedgcn" else {})
    run = fedgl.run(progress=False, data_root=str(data_root), **recorded["config"], **skip)
    rep = run.repeats[0]
    history = json.loads(json.dumps(rep.history, default=str))
    assert _close(history, recorded["history"])
    got = dict(rep.ledger["bytes"])
    # recorded before every server learnt its clients' widths through 'setup.facts': the set-up
    # phase is new (replies only: the request carries no values), the other phases unchanged
    setup = got.pop("setup", None)   # a centralised run has no server to tell
    assert setup is None or (setup["down"] == 0 and setup["up"] > 0)
    sparse = rep.extra.get("fedgcn_pretrain")
    if sparse:  # FedGCN's plaintext sums now travel sparse where smaller; compare dense counts
        assert got["pretrain"] == {"up": sparse["bytes_up"], "down": sparse["bytes_down"]}
        got = {**got, "pretrain": {"up": sparse["bytes_up_dense_equivalent"],
                                   "down": sparse["bytes_down_dense_equivalent"]}}
    want = dict(recorded["bytes"])
    if recorded["config"].get("secure_sum", "none") != "none":
        # recorded when a secure-sum run's evaluation counts still travelled in clear: they go
        # through the secure sum now (keys, masked counts, the sum back), so that phase grew
        got_eval, was = got.pop("eval"), want.pop("eval")
        assert got_eval["up"] > was["up"] and got_eval["down"] > was["down"]
    assert got == want


@pytest.mark.parametrize("case", sorted(GOLDEN["cases"]))
def test_nested_and_flat_forms_build_the_same_config(case, tmp_path):
    flat = dict(GOLDEN["cases"][case]["config"])
    nested = _nested(flat)
    assert Config.from_dict(flat) == Config.from_dict(nested)
    path = tmp_path / "nested.yaml"
    path.write_text(yaml.safe_dump(nested))
    assert Config.from_yaml(path) == Config.from_dict(flat)
    assert Config.from_dict(Config.from_dict(flat).to_nested()) == Config.from_dict(flat)


def test_nested_yaml_and_flat_flags_write_the_same_results(tmp_path, data_root):
    flat = {"algorithm": "fedgcn", "dataset": "cora", "hops": 1, "clients": 3, "rounds": 2,
            "local_steps": 2}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({**_nested(flat)}))
    common = ["--data-root", str(data_root), "--no-progress"]
    assert main(["run", str(tmp_path / "run.yaml"), *common, "--out", str(tmp_path / "a")]) == 0
    flags = [x for k, v in flat.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    assert main(["run", *flags, *common, "--out", str(tmp_path / "b")]) == 0
    a = json.loads((tmp_path / "a" / "result.json").read_text())
    b = json.loads((tmp_path / "b" / "result.json").read_text())
    assert a["config"] == {**b["config"], "out": a["config"]["out"]}
    assert a["summary"]["test_acc"] == b["summary"]["test_acc"]
    assert a["repeats"][0]["ledger"]["bytes"] == b["repeats"][0]["ledger"]["bytes"]


@pytest.mark.parametrize("values, reader", [
    ({"algorithm": "fedgcn", "degree": 4}, "fedgat"),
    ({"algorithm": "fedgcn", "fedgat_backend": "protocol"}, "fedgat"),
    ({"algorithm": "fedgcn", "heads": 2}, "centralized-gat, distgat, fedgat"),
    ({"algorithm": "fedgat", "hops": 1}, "fedgcn"),
    ({"algorithm": "centralized", "hops": 1}, "fedgcn"),
    ({"algorithm": "distgat", "vec_fedgat": True}, "fedgat"),
])
def test_a_key_the_algorithm_does_not_read_names_its_reader(values, reader):
    with pytest.raises(ConfigError, match=f"read by {reader}, not by {values['algorithm']}"):
        Config.from_dict(values)


def test_other_algorithms_keys_at_their_defaults_are_accepted():
    """An old result.json holds every key of every algorithm at its default: it still loads."""
    cfg = Config.from_dict({"algorithm": "fedgcn", "degree": 16, "heads": 8, "hops": 1})
    assert cfg.hops == 1 and not hasattr(cfg, "degree")


@pytest.mark.parametrize("values, words", [
    ({"algorithm": "fedgat", "hidden": 32}, "hidden is not read by fedgat"),
    ({"algorithm": "fedgat", "model": "sage"}, "drop --model"),
    ({"algorithm": "distgat", "dp_epsilon": 1.0}, "dp_epsilon is not supported by distgat"),
    ({"algorithm": "fedgcn", "edge_share": 0.5}, "edge_share is not read by fedgcn"),
    ({"algorithm": "fedgcn", "setting": "vertical"}, "runs in the horizontal setting"),
    ({"algorithm": "centralized", "checkpoint_every": 2}, "checkpoints are for federated"),
    ({"algorithm": "fedgat", "rounds": 3, "optim": {"rounds": 4}}, "given twice"),
    ({"optim": {"hidden": 3}}, "belongs to section 'model'"),
    ({"algorithm": "fedgcn", "fedgat": {"degree": 3}}, "section 'fedgat' holds options"),
    ({"num_neighbors": "15,x"}, "num_neighbors must be comma-separated"),
    ({"bandwidth": "fast"}, "bandwidth must look like"),
    ({"algorithm": "fedgta"}, "did you mean 'fedgat'"),
])
def test_bad_combinations_are_one_line_errors(values, words):
    with pytest.raises(ConfigError, match=words) as info:
        Config.from_dict(values)
    assert "\n" not in str(info.value)


def test_config_is_immutable_and_validates_at_construction():
    cfg = Config(algorithm="fedgat", degree=8)
    with pytest.raises(AttributeError, match="immutable"):
        cfg.rounds = 3  # type: ignore[misc]
    with pytest.raises(ConfigError, match="rounds must be of type int"):
        Config(rounds="x")
    assert Config(rounds=__import__("numpy").int64(3)).rounds == 3
    assert cfg.options.degree == 8 and cfg.section("model").layers == cfg.layers == 2
    assert cfg.replace(degree=4).degree == 4 and cfg.degree == 8


def test_every_algorithm_registers_and_no_option_shadows_a_common_key():
    specs = load_all()
    assert {s.name for s in specs} >= set(BUILTIN)
    for spec in specs:
        assert not set(spec.option_names()) & set(COMMON_KEYS), spec.name
        assert not set(spec.option_names()) & set(SECTIONS), spec.name
        assert set(spec.unread) <= set(COMMON_KEYS), spec.name
        assert callable(spec.load_entry())
    assert get_spec("fedgat").setting == "horizontal"


def test_importing_fedgl_loads_no_algorithm_package():
    code = ("import sys, fedgl; fedgl.Config(algorithm='fedgat');"
            "print(sorted(m for m in sys.modules if m.startswith('fedgl.algorithms')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout.strip()
    loaded = eval(out)  # noqa: S307 - our own subprocess's printed list
    # choosing FedGAT imports its spec and options (and the recipes, plain data) only; no
    # client, server or other algorithm
    assert set(loaded) == {"fedgl.algorithms", "fedgl.algorithms.fedgat",
                           "fedgl.algorithms.fedgat.options", "fedgl.algorithms.fedgat.spec",
                           "fedgl.algorithms.recipes"}
    plain = subprocess.run([sys.executable, "-c", code.replace(
        "fedgl.Config(algorithm='fedgat');", "")], capture_output=True, text=True, check=True,
        cwd=REPO).stdout.strip()
    assert eval(plain) == []  # noqa: S307


def test_help_groups_flags_by_section_and_shows_one_algorithms_options(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--algorithm", "fedgat", "--help"])
    text = capsys.readouterr().out
    for title in ("data (data)", "federation (federation)", "optimisation (optim)",
                  "fedgat options", "--degree", "--heads", "--rounds"):
        assert title in text
    assert "--hops" not in text and "fedgcn options" not in text
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    every = capsys.readouterr().out
    assert "fedgcn options" in every and "--hops" in every and "--degree" in every


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    return subprocess.run([exe, "--config", str(root / "pyproject.toml")], cwd=root,
                          capture_output=True, text=True, env={"PYTHONPATH": str(root),
                                                               "PATH": "/usr/bin:/bin"})


def test_layer_contract_holds_and_catches_a_violation(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(REPO / "fedgl", tree / "fedgl",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tree / "pyproject.toml")
    ok = _lint_imports(tree)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (tree / "fedgl" / "data" / "scratch_violation.py").write_text(
        "from fedgl.api import run  # a lower layer importing a higher one\n")
    bad = _lint_imports(tree)
    assert bad.returncode != 0 and "fedgl.data is not allowed to import fedgl.api" in bad.stdout
    (tree / "fedgl" / "data" / "scratch_violation.py").unlink()
    (tree / "fedgl" / "algorithms" / "fedgcn" / "scratch.py").write_text(
        "from fedgl.algorithms.fedgat import client  # one algorithm into another\n")
    assert _lint_imports(tree).returncode != 0


def test_replace_keeps_what_was_given() -> None:
    """A changed copy knows which keys the user gave (theirs and the changed ones): `fedgl run
    --shards` refuses a given ``--clients 10`` that differs from the shards, default or not."""
    cfg = Config(algorithm="fedgcn", rounds=5)
    assert "rounds" in cfg.given_keys and "clients" not in cfg.given_keys
    out = cfg.replace(out="runs/x")
    assert out.given_keys == cfg.given_keys | {"out"} and "clients" not in out.given_keys
    assert "clients" in Config(clients=10).replace(out="y").given_keys
