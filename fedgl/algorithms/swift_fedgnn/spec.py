"""Registers Swift-FedGNN (imports no algorithm code)."""

from fedgl.algorithms.recipes import ROUNDS_HELP, SWIFT_PAPER
from fedgl.algorithms.swift_fedgnn.options import SwiftOptions
from fedgl.config.registry import AlgorithmSpec, register

#: common keys the mini-batch FedSGD algorithms ignore
MINIBATCH_UNREAD = ("local_steps", "clients_per_round", "aggregation")

register(AlgorithmSpec(
    name="swift-fedgnn", setting="horizontal",
    summary="Swift-FedGNN: mini-batch FedSGD, every I iterations K clients train with "
            "cross-client neighbours aggregated through the server",
    entry="fedgl.algorithms.swift_fedgnn.runner:run_repeat", options=SwiftOptions,
    runtimes=("local", "ray"), privacy=(), unread=MINIBATCH_UNREAD,
    aliases=("swift",), defaults=SWIFT_PAPER, key_help={"rounds": ROUNDS_HELP["fedsgd"]},
    client="fedgl.algorithms.minibatch.client:MiniBatchClient", driver="minibatch",
    server="fedgl.algorithms.swift_fedgnn.server:deployed_schedule",
    predict="fedgl.algorithms.swift_fedgnn.runner:predict_repeat"))
