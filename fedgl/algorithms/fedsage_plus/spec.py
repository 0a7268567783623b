"""Registers FedSage+ (imports no algorithm code)."""

from fedgl.algorithms.fedsage_plus.options import FedSagePlusOptions
from fedgl.algorithms.recipes import FEDGCN_PAPER, ROUNDS_HELP
from fedgl.config.registry import AlgorithmSpec, register

register(AlgorithmSpec(
    name="fedsage-plus", setting="horizontal", aliases=("fedsage+",),
    summary="FedSage+: federatedly trained neighbour generators mend local subgraphs, then FedAvg",
    entry="fedgl.algorithms.fedsage_plus.runner:run_repeat",
    predict="fedgl.algorithms.fedsage_plus.runner:predict_repeat", options=FedSagePlusOptions,
    unread=("batch_size", "num_neighbors", "clients_per_round"),
    defaults=FEDGCN_PAPER, key_help={"rounds": ROUNDS_HELP["fedavg"]},
    client="fedgl.algorithms.fedsage_plus.client:FedSagePlusClient", driver="fedavg",
    server="fedgl.algorithms.fedsage_plus.server:FedSagePlusServer"))
