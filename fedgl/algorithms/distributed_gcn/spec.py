"""Registers Distributed GCN (imports no algorithm code)."""

from fedgl.algorithms.distributed_gcn.options import DistributedGCNOptions
from fedgl.algorithms.recipes import CLUSTER_ONLY, FEDGCN_PAPER, ROUNDS_HELP
from fedgl.config.registry import AlgorithmSpec, register

register(AlgorithmSpec(
    name="distributed-gcn", setting="horizontal",
    summary="Distributed GCN: every boundary node's features and hidden states exchanged "
            "through the server at every step",
    entry="fedgl.algorithms.distributed_gcn.runner:run_repeat",
    predict="fedgl.algorithms.distributed_gcn.runner:predict_repeat", options=DistributedGCNOptions,
    unread=("batch_size", "num_neighbors", "clients_per_round"),
    defaults=FEDGCN_PAPER, key_help={"rounds": ROUNDS_HELP["fedavg"]},
    simulation_only=CLUSTER_ONLY))
