"""Registers FedSage+ (imports no algorithm code)."""

from fedgl.algorithms.fedsage_plus.options import FedSagePlusOptions
from fedgl.config.registry import AlgorithmSpec, register

register(AlgorithmSpec(
    name="fedsage-plus", setting="horizontal", aliases=("fedsage+",),
    summary="FedSage+: federatedly trained neighbour generators mend local subgraphs, then FedAvg",
    entry="fedgl.algorithms.fedsage_plus.runner:run_repeat", options=FedSagePlusOptions,
    unread=("batch_size", "fanouts", "clients_per_round")))
