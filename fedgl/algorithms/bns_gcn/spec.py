"""Registers BNS-GCN (alias bds-gcn) (imports no algorithm code)."""

from fedgl.algorithms.bns_gcn.options import BNSGCNOptions
from fedgl.algorithms.recipes import CLUSTER_ONLY, FEDGCN_PAPER, ROUNDS_HELP
from fedgl.config.registry import AlgorithmSpec, register

register(AlgorithmSpec(
    name="bns-gcn", setting="horizontal", aliases=("bds-gcn",),
    summary="BNS-GCN: per round, a random share ρ of boundary nodes' features and hidden "
            "states exchanged through the server at every step",
    entry="fedgl.algorithms.bns_gcn.runner:run_repeat",
    predict="fedgl.algorithms.bns_gcn.runner:predict_repeat", options=BNSGCNOptions,
    unread=("batch_size", "num_neighbors", "clients_per_round"),
    defaults=FEDGCN_PAPER, key_help={"rounds": ROUNDS_HELP["fedavg"]},
    simulation_only=CLUSTER_ONLY))
