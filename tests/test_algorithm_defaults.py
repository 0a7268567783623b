"""Per-algorithm defaults (each algorithm's paper recipe, declared in its spec), the values a
user gives winning over them, ``fedgl run --algorithm X --help`` showing X's defaults and only
the keys X reads, and fan-outs in PyG's order (``num_neighbors``, first layer first) with the
old ``fanouts`` keys refused with the fix. The Cora runs with every algorithm's defaults are in
tests/test_defaults_cora.py."""

from __future__ import annotations

import json

import pytest
import torch

import fedgl
from fedgl.algorithms.minibatch.settings import MiniBatchSettings
from fedgl.api import as_config
from fedgl.config import Config, get_spec
from fedgl.config.registry import load_all
from fedgl.config.schema import COMMON_KEYS
from fedgl.data.sampling import CSRGraph, sample_blocks, sample_neighbors
from fedgl.errors import ConfigError
from tests._cli_helpers import cli_fixture  # noqa: F401 - the `cli` fixture
from tests.helpers import random_graph

TINY = dict(dataset="sbm", sbm_nodes=60, sbm_features=8, progress=False, oracle_eval=False)


# ------------------------------------------------------------------ the recipes
@pytest.mark.parametrize("spec", load_all(), ids=lambda s: s.name)
def test_every_algorithm_starts_from_its_own_defaults(spec):
    cfg = Config(algorithm=spec.name)
    for key, value in spec.defaults.items():
        assert key in COMMON_KEYS and key not in spec.unread_keys()
        assert getattr(cfg, key) == value, key
    assert spec.defaults, f"{spec.name} declares no recipe"


def test_the_recipes_are_the_papers():
    swift = Config(algorithm="swift-fedgnn")
    assert (swift.model, swift.hidden, swift.batch_size, swift.lr, swift.partition,
            swift.rounds, swift.dropout, swift.server_optimizer) == (
        "sage", 256, 256, 1e-3, "metis", 200, 0.0, "adam")
    # the paper's fan-outs [15, 10] are DGL's order: 10 one-hop, 15 two-hop neighbours
    assert swift.num_neighbors == "10,15"
    for baseline in ("fedgnn-g", "local-only", "llcg", "fedgnn-pns"):
        assert Config(algorithm=baseline).to_dict().items() >= {
            k: swift.to_dict()[k] for k in ("model", "hidden", "lr", "num_neighbors",
                                            "partition", "rounds")}.items(), baseline
    glasu = Config(algorithm="glasu")
    assert (glasu.clients, glasu.layers, glasu.hidden, glasu.lr, glasu.glasu_optimizer,
            glasu.backbone, glasu.batch_size, glasu.num_neighbors, glasu.rounds,
            glasu.stale_steps) == (3, 4, 64, 0.01, "adam", "gcnii", 16, "3", 200, 4)
    # the baselines take one exact update a round: the same 800 updates
    assert Config(algorithm="glasu-standalone").rounds == 800
    fedgcn = Config(algorithm="fedgcn")
    assert (fedgcn.hidden, fedgcn.lr, fedgcn.rounds, fedgcn.local_steps, fedgcn.dropout) == (
        16, 0.5, 300, 3, 0.5)
    fedgat = Config(algorithm="fedgat")
    assert (fedgat.rounds, fedgat.dropout, fedgat.lr) == (150, 0.0, 0.5)


def test_given_values_win_over_the_algorithms_defaults(tmp_path):
    cfg = Config(algorithm="swift-fedgnn", lr=0.01, hidden=32)
    assert (cfg.lr, cfg.hidden, cfg.model) == (0.01, 32, "sage")
    path = tmp_path / "glasu.yaml"
    path.write_text("algorithm: glasu\nhidden: 32\noptim: {lr: 0.05}\n")
    cfg = Config.from_yaml(path, {"rounds": 7})
    assert (cfg.hidden, cfg.lr, cfg.rounds, cfg.layers) == (32, 0.05, 7, 4)
    # a value equal to the section default is still a given value
    assert Config(algorithm="swift-fedgnn", hidden=16).hidden == 16
    assert as_config(algorithm="glasu", glasu_optimizer="sgd").glasu_optimizer == "sgd"


def test_cli_flags_win_and_the_result_records_the_values_used(cli, tmp_path):
    pytest.importorskip("pymetis", reason="local-only's recipe partitions with METIS")
    out = tmp_path / "run"
    res = cli("run", "--algorithm", "local-only", "--dataset", "sbm", "--sbm-nodes", "80",
              "--sbm-features", "8", "--clients", "3", "--rounds", "2", "--hidden", "8",
              "--no-progress", "--out", out)
    assert res.code == 0, res.err
    config = json.loads((out / "result.json").read_text())["config"]
    assert config["hidden"] == 8 and config["rounds"] == 2            # given
    assert config["model"] == "sage" and config["lr"] == 1e-3          # the algorithm's recipe
    assert config["partition"] == "metis" and config["num_neighbors"] == "10,15"


def test_switching_algorithm_takes_the_new_algorithms_defaults():
    cfg = Config(algorithm="fedgcn", dataset="cora", hidden=32)
    swift = cfg.replace(algorithm="swift-fedgnn")
    assert (swift.dataset, swift.hidden, swift.lr, swift.model) == ("cora", 32, 1e-3, "sage")
    assert cfg.replace(rounds=5).lr == 0.5


def test_an_unread_key_is_judged_against_the_algorithms_default():
    Config(algorithm="swift-fedgnn", local_steps=3)        # the untouched default: accepted
    with pytest.raises(ConfigError, match="local_steps is not read by swift-fedgnn"):
        Config(algorithm="swift-fedgnn", local_steps=5)


# ------------------------------------------------------------------ --help
@pytest.fixture
def help_text(capsys):
    from fedgl.cli import main

    def _run(algorithm: str) -> str:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            main(["run", "--algorithm", algorithm, "--help"])
        assert exit_.value.code == 0
        return " ".join(capsys.readouterr().out.split())

    return _run


def test_help_shows_the_algorithms_defaults_and_only_its_keys(help_text):
    swift = help_text("swift-fedgnn")
    assert "--local-steps" not in swift and "--hops" not in swift and "--secure-sum" not in swift
    assert "--hidden HIDDEN hidden units (default: 256)" in swift
    assert "--num-neighbors NUM_NEIGHBORS" in swift and "(default: 10,15)" in swift
    assert "iterations T" in swift and "(default: 200)" in swift
    fedgcn = help_text("fedgcn")
    assert "--local-steps" in fedgcn and "--hops" in fedgcn and "--secure-sum" in fedgcn
    assert "hidden units (default: 16)" in fedgcn and "communication rounds T" in fedgcn
    glasu = help_text("glasu")
    assert "--model " not in glasu and "--local-steps" not in glasu and "--beta" not in glasu
    assert "--stale-steps" in glasu and "Q = --stale-steps local model updates" in glasu
    assert "--glasu-optimizer GLASU_OPTIMIZER" in glasu and "(default: adam)" in glasu
    central = help_text("centralized")
    assert "--ray-address" not in central and "--checkpoint-every" not in central


# ------------------------------------------------------------------ fan-out order
@pytest.mark.parametrize("old, value, fix", [
    ("fanouts", "15,10", "--num-neighbors 10,15"),
    ("fanout", "3", "--num-neighbors 3 means the same"),
    ("eval_fanouts", "4,2", "--eval-num-neighbors 2,4"),
])
def test_old_fanout_keys_are_refused_with_the_fix(old, value, fix, cli, tmp_path):
    with pytest.raises(ConfigError, match="is now") as err:
        Config.from_dict({"algorithm": "swift-fedgnn", old: value})
    assert fix in str(err.value) and "first layer first" in str(err.value)
    path = tmp_path / "old.yaml"
    path.write_text(f"algorithm: swift-fedgnn\n{old}: '{value}'\n")
    res = cli("run", path, "--out", tmp_path / "never")
    assert res.code == 2 and res.err.count("\n") == 1 and fix in res.err
    assert not (tmp_path / "never").exists()
    res = cli("run", "--algorithm", "swift-fedgnn", f"--{old.replace('_', '-')}", value)
    assert res.code == 2 and res.err.startswith("fedgl: error: ") and fix in res.err


def test_old_key_inside_a_section_is_refused_too(tmp_path):
    path = tmp_path / "nested.yaml"
    path.write_text("optim: {fanouts: '15,10', batch_size: 64}\n")
    with pytest.raises(ConfigError, match="fanouts is now num_neighbors"):
        Config.from_yaml(path)


def test_a_stored_config_with_the_old_key_is_translated():
    """A checkpoint or result written before stored fan-outs input layer first under the old
    key: reading it back (``fedgl run --resume``) gives the same neighbourhoods."""
    cfg = Config.from_stored({"algorithm": "local-only", "fanouts": "15, 10",
                              "eval_fanouts": "3,2"})
    assert (cfg.num_neighbors, cfg.eval_num_neighbors) == ("10,15", "2,3")


def test_num_neighbors_is_first_layer_first_and_draws_as_the_old_reversed_list():
    """``[a, b]``: the seeds draw a one-hop neighbours, then each of those draws b; the draws
    are the hop-by-hop draws of one generator, which is what the old order's list ``[b, a]``
    (input layer first, read reversed) drew: the same sampled neighbourhoods, bit for bit."""
    g = random_graph(200, seed=3)
    csr = CSRGraph.from_edge_index(g.edge_index, g.num_nodes)
    seeds = torch.tensor([1, 7, 30, 99, 150])
    a, b = 2, 5
    blocks = sample_blocks(csr, seeds, [a, b], torch.Generator().manual_seed(11))
    gen = torch.Generator().manual_seed(11)
    pos1, nbr1 = sample_neighbors(csr, seeds, a, gen)
    hop1 = blocks[1]
    assert torch.equal(hop1.dst_ids, seeds)
    assert torch.equal(hop1.src_ids[hop1.edge_index[0]], nbr1)
    assert torch.equal(hop1.edge_index[1], pos1)
    pos2, nbr2 = sample_neighbors(csr, hop1.src_ids, b, gen)
    hop2 = blocks[0]
    assert torch.equal(hop2.src_ids[hop2.edge_index[0]], nbr2)
    assert torch.equal(hop2.edge_index[1], pos2)
    deg = g.degrees()
    assert torch.equal(torch.bincount(pos1, minlength=5), deg[seeds].clamp(max=a))
    assert torch.equal(torch.bincount(pos2, minlength=hop1.num_src),
                       deg[hop1.src_ids].clamp(max=b))
    cfg = Config(algorithm="swift-fedgnn", num_neighbors=f"{a},{b}")
    assert MiniBatchSettings.from_config(cfg).num_neighbors == (a, b)


def test_a_run_records_num_neighbors_as_given():
    res = fedgl.run(algorithm="local-only", clients=3, rounds=2, hidden=8, num_neighbors="4,2",
                    **TINY)
    assert res.config["num_neighbors"] == "4,2" and "fanouts" not in res.config


def test_spec_defaults_must_be_keys_the_algorithm_reads():
    from fedgl.config.registry import AlgorithmSpec

    with pytest.raises(ValueError, match="does not read"):
        AlgorithmSpec(name="x", setting="vertical", entry="m:f", defaults={"beta": 2.0})
    assert get_spec("glasu").defaults["hidden"] == 64
