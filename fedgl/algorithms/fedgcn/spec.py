"""Registers FedGCN and its centralised reference (imports no algorithm code)."""

from fedgl.algorithms.fedgcn.options import FedGCNOptions
from fedgl.algorithms.recipes import FEDGCN_PAPER, ONE_PARTY, ROUNDS_HELP
from fedgl.config.registry import AlgorithmSpec, register

register(AlgorithmSpec(
    name="fedgcn", setting="horizontal",
    summary="FedGCN: one pre-training exchange of 0/1/2-hop neighbour sums, then FedAvg",
    entry="fedgl.algorithms.fedgcn.runner:run_fedgcn", options=FedGCNOptions,
    privacy=("secure_sum", "he", "encrypt_models", "dp", "min_contributors",
             "release_budget"),
    defaults=FEDGCN_PAPER, key_help={"rounds": ROUNDS_HELP["fedavg"]},
    # deployed: FedAvg is fedgcn with hops 0 (no pre-training exchange)
    client="fedgl.algorithms.fedgcn.client:FedGCNClient", driver="fedavg",
    server="fedgl.algorithms.fedgcn.server:FedGCNServer",
    predict="fedgl.algorithms.fedgcn.runner:predict_fedgcn"))

register(AlgorithmSpec(
    name="centralized", setting="horizontal",
    summary="centralised GCN/SAGE: one party holds the whole graph (the upper reference)",
    entry="fedgl.algorithms.fedgcn.centralized:run_centralized", runtimes=("local",),
    checkpoints=False,
    # federation keys are accepted (and ignored) so that one set of keys runs a comparison;
    # batch_size and num_neighbors are read (mini-batch centralised GCN/SAGE)
    unread=("clients_per_round",), simulation_only=ONE_PARTY,
    defaults=FEDGCN_PAPER, key_help={"rounds": ROUNDS_HELP["fedavg"]},
    predict="fedgl.algorithms.fedgcn.centralized:predict_centralized"))
