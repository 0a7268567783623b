"""Registers FedGAT and the baselines of its paper, DistGAT and centralised GAT (imports no
algorithm code)."""

from fedgl.algorithms.fedgat.options import FedGATOptions, GATOptions
from fedgl.algorithms.recipes import FEDGAT_PAPER, ONE_PARTY, ROUNDS_HELP
from fedgl.config.registry import AlgorithmSpec, register

# the GAT algorithms size their layers by heads x gat_hidden and train full-batch
_GAT_UNREAD = ("model", "hidden", "batch_size", "num_neighbors", "clients_per_round")
_HELP = {"rounds": ROUNDS_HELP["fedavg"]}
_DEPLOYED = "fedgl.algorithms.fedgat.deployed"
_GAT_MODEL = "fedgl.algorithms.fedgat.common:gat_from_card"

register(AlgorithmSpec(
    name="fedgat", setting="horizontal",
    summary="FedGAT: first-layer attention by a Chebyshev polynomial from matrices sent once",
    entry="fedgl.algorithms.fedgat.runner:run_fedgat", options=FedGATOptions,
    unread=_GAT_UNREAD, defaults=FEDGAT_PAPER, key_help=_HELP,
    client="fedgl.algorithms.fedgat.client:FedGATClient", driver="fedavg",
    server=f"{_DEPLOYED}:DeployedFedGATServer",
    model=_GAT_MODEL, predict="fedgl.algorithms.fedgat.runner:predict_fedgat"))

register(AlgorithmSpec(
    name="distgat", setting="horizontal",
    summary="DistGAT: federated GAT with every cross-client edge dropped (FedGAT's baseline)",
    entry="fedgl.algorithms.fedgat.dist_gat:run_distgat", options=GATOptions,
    unread=_GAT_UNREAD, defaults=FEDGAT_PAPER, key_help=_HELP,
    client="fedgl.algorithms.fedgat.dist_gat:DistGATClient", driver="fedavg",
    server=f"{_DEPLOYED}:DeployedDistGATServer",
    model=_GAT_MODEL, predict="fedgl.algorithms.fedgat.dist_gat:predict_distgat"))

register(AlgorithmSpec(
    name="centralized-gat", setting="horizontal",
    summary="centralised GAT: one party holds the whole graph",
    entry="fedgl.algorithms.fedgat.centralized_gat:run_centralized_gat", options=GATOptions,
    runtimes=("local",), checkpoints=False, simulation_only=ONE_PARTY,
    # federation keys are accepted (and ignored) so that one set of keys runs a comparison
    unread=_GAT_UNREAD, defaults=FEDGAT_PAPER, key_help=_HELP, model=_GAT_MODEL,
    predict="fedgl.algorithms.fedgat.centralized_gat:predict_centralized_gat"))
