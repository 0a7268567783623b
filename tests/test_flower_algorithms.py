"""The horizontal algorithms beyond FedGCN and Swift-FedGNN, deployed on Flower: FedAvg
(``fedgcn --hops 0``), FedGAT, the mini-batch baselines and FedSage+.

Fast: the deployed server's driver over the parties' own roles (built from shards and keys as
``fedgl client`` builds them, in-process: no Flower) equals ``--runtime local``; ``fedgl server``
refuses the simulation-only algorithms with one line naming why. Slow: a loopback Flower
federation (one SuperLink, a SuperNode process per client) per algorithm family equals
``--runtime local`` (history, value bytes, wire bytes, message counts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedgl.privacy.identity import write_keys
from tests.flower_helpers import (
    PLAINTEXT,
    assert_same_as_local,
    deployed_in_process,
    deployed_run,
    needs_flwr,
    write_deployment_files,
)

BASE = {"dataset": "cora", "clients": 3, "rounds": 2, "progress": False, "oracle_eval": False,
        "batch_clients": False}
FEDAVG = {**BASE, "algorithm": "fedgcn", "hops": 0, "local_steps": 2, "leakage_report": False}
FEDGAT = {**BASE, "algorithm": "fedgat", "local_steps": 2, "heads": 2, "gat_hidden": 4}
DISTGAT = {**FEDGAT, "algorithm": "distgat"}
FEDSAGE = {**BASE, "algorithm": "fedsage-plus", "local_steps": 2, "gen_epochs": 2,
           "gen_hidden": 32, "latent_dim": 16}
#: the mini-batch baselines train with their paper's recipe (METIS partition, row-normalised
#: features), so their shards are written with ``fedgl shard --algorithm X``
MINIBATCH = {"dataset": "cora", "clients": 3, "rounds": 4, "eval_every": 2, "hidden": 16,
             "batch_size": 32, "progress": False, "oracle_eval": False}
LLCG = {**MINIBATCH, "algorithm": "llcg", "correction_period": 2}
PNS = {**MINIBATCH, "algorithm": "fedgnn-pns", "pns_interval": 2, "pns_decay": 0.5,
       "pns_fanout": 3}
FEDGNN_G = {**MINIBATCH, "algorithm": "fedgnn-g"}
LOCAL_ONLY = {**MINIBATCH, "algorithm": "local-only"}


def shards_for(factory: pytest.TempPathFactory, algorithm: str | None) -> Path:
    root = factory.mktemp(f"shards-{algorithm or 'fedgcn'}")
    return write_deployment_files(root, 3, ("--algorithm", algorithm) if algorithm else ())


@pytest.fixture(scope="module")
def gcn_shards(tmp_path_factory: pytest.TempPathFactory, data_root: Path) -> Path:
    """Shards with FedGCN's recipe (also FedGAT's and FedSage+'s: Dirichlet β = 1)."""
    return shards_for(tmp_path_factory, None)


@pytest.fixture(scope="module")
def minibatch_shards(tmp_path_factory: pytest.TempPathFactory, data_root: Path) -> Path:
    return shards_for(tmp_path_factory, "llcg")


# ---------------------------------------------------------------------- the driver, in-process
@needs_flwr
@pytest.mark.parametrize("keys", [FEDAVG, FEDGAT, DISTGAT, {**FEDSAGE, "gen_epochs": 1},
                                  {**FEDSAGE, "mend": "exact"}],
                         ids=lambda k: f"{k['algorithm']}-{k.get('hops', k.get('mend', ''))}")
def test_fedavg_family_driver_equals_local(gcn_shards: Path, keys: dict) -> None:
    deployed = deployed_in_process(gcn_shards, keys)
    assert_same_as_local(deployed, keys)


@needs_flwr
@pytest.mark.parametrize("keys", [LLCG, PNS, FEDGNN_G, LOCAL_ONLY], ids=lambda k: k["algorithm"])
def test_minibatch_baseline_driver_equals_local(minibatch_shards: Path, keys: dict) -> None:
    deployed = deployed_in_process(minibatch_shards, keys)
    assert_same_as_local(deployed, keys)
    crossing = {"llcg": 2, "fedgnn-g": 4, "local-only": 0}   # rounds 4, correction period 2
    if keys["algorithm"] in crossing:
        assert deployed["repeats"][0]["extra"]["communicating_iterations"] == \
            crossing[keys["algorithm"]]


@needs_flwr
def test_fedgat_records_its_pretraining_figures(gcn_shards: Path) -> None:
    """The deployed FedGAT result carries the local driver's ``extra.fedgat``."""
    from fedgl.api import run

    deployed = deployed_in_process(gcn_shards, FEDGAT)["repeats"][0]["extra"]["fedgat"]
    local = run(**FEDGAT).repeats[0].extra["fedgat"]
    assert deployed == json.loads(json.dumps(local)) and deployed["feature_upload_values"] > 0


# ---------------------------------------------------------------------- refusals
@needs_flwr
@pytest.mark.parametrize("algorithm,why", [
    ("centralized", "one party holds the whole graph"),
    ("centralized-gat", "one party holds the whole graph"),
    ("bns-gcn", "boundary features and hidden states"),
    ("distributed-gcn", "boundary features and hidden states"),
])
def test_server_refuses_simulation_only_with_the_reason(tmp_path: Path, capsys, algorithm: str,
                                                        why: str) -> None:
    from fedgl.cli import main
    from fedgl.deployment.commands import free_port

    roster = write_keys(tmp_path / "keys", 3)
    argv = ["server", "--superlink", f"127.0.0.1:{free_port()}", "--roster", str(roster),
            "--insecure", "--clients", "3", "--algorithm", algorithm, "--out",
            str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedgl: error: "), err
    assert f"'{algorithm}' is simulation-only" in err[0] and why in err[0], err
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------- loopback federations
@needs_flwr
@pytest.mark.slow   # each loopback federation takes minutes on 2 cores
def test_loopback_fedavg_equals_local(gcn_shards: Path) -> None:
    """FedAvg (FedGCN without a pre-training exchange) over Flower."""
    deployed = deployed_run(gcn_shards, "fedavg", FEDAVG, PLAINTEXT)
    assert_same_as_local(deployed, FEDAVG)
    assert deployed["repeats"][0]["ledger"]["bytes"]["pretrain"] == {"up": 0, "down": 0}


@needs_flwr
@pytest.mark.slow
def test_loopback_fedgat_equals_local(gcn_shards: Path) -> None:
    """FedGAT's pre-training exchange (features and edges up; the rows each client's layers
    need down) and its FedAvg training over Flower."""
    deployed = deployed_run(gcn_shards, "fedgat", FEDGAT, PLAINTEXT)
    assert_same_as_local(deployed, FEDGAT)
    assert deployed["repeats"][0]["ledger"]["bytes"]["pretrain"]["up"] > 0


@needs_flwr
@pytest.mark.slow
def test_loopback_fedgnn_pns_equals_local(minibatch_shards: Path) -> None:
    """A mini-batch baseline with its own server-side state (FedGNN-PNS's cache refreshes at
    shrinking intervals) over Flower."""
    deployed = deployed_run(minibatch_shards, "pns", PNS, PLAINTEXT)
    assert_same_as_local(deployed, PNS)


@needs_flwr
@pytest.mark.slow
def test_loopback_llcg_equals_local(minibatch_shards: Path) -> None:
    """LLCG's periodic full-neighbour cross-client correction over Flower."""
    deployed = deployed_run(minibatch_shards, "llcg", LLCG, PLAINTEXT)
    assert_same_as_local(deployed, LLCG)
    assert deployed["repeats"][0]["extra"]["communicating_iterations"] == 2


@needs_flwr
@pytest.mark.slow
@pytest.mark.parametrize("mend", ["generated", "exact"])
def test_loopback_fedsage_plus_equals_local(gcn_shards: Path, mend: str) -> None:
    """FedSage+'s federated generator training (the server relays parameters, latents and
    gradients between clients), mending, then FedAvg, over Flower; with ``mend: exact`` (the
    perfect generator FedGCN's Table 2 assumes: the owners send the true neighbour rows
    through the server) no generator is trained."""
    keys = {**FEDSAGE, "mend": mend}
    deployed = deployed_run(gcn_shards, f"fedsage-{mend}", keys, PLAINTEXT)
    assert_same_as_local(deployed, keys)
