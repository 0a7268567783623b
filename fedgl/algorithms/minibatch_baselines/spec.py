"""Registers Swift-FedGNN's baselines (imports no algorithm code)."""

from fedgl.algorithms.minibatch_baselines.options import (
    FedGNNGOptions,
    LLCGOptions,
    LocalOnlyOptions,
    PNSOptions,
)
from fedgl.algorithms.recipes import ROUNDS_HELP, SWIFT_PAPER
from fedgl.config.registry import AlgorithmSpec, register

_UNREAD = ("local_steps", "clients_per_round", "aggregation")
_RUNNER = "fedgl.algorithms.minibatch_baselines.runner"

for name, fn, options, summary in (
    ("fedgnn-g", "run_fedgnn_g", FedGNNGOptions,
     "FedGNN-G: cross-client mini-batch training on every client, every iteration"),
    ("local-only", "run_local_only", LocalOnlyOptions,
     "local-only mini-batch FedSGD (Swift-FedGNN's 'FedSage' row, K = 0)"),
    ("llcg", "run_llcg", LLCGOptions,
     "LLCG: local mini-batch iterations with a periodic full-neighbour cross-client correction"),
    ("fedgnn-pns", "run_pns", PNSOptions,
     "FedGNN-PNS: cached cross-client neighbours re-sampled at shrinking intervals"),
):
    register(AlgorithmSpec(name=name, setting="horizontal", summary=summary,
                           entry=f"{_RUNNER}:{fn}", options=options, runtimes=("local", "ray"),
                           privacy=(), unread=_UNREAD, defaults=SWIFT_PAPER,
                           key_help={"rounds": ROUNDS_HELP["fedsgd"]},
                           client="fedgl.algorithms.minibatch.client:MiniBatchClient",
                           driver="minibatch", server=f"{_RUNNER}:deployed_schedule",
                           predict=f"{_RUNNER}:predict_baseline"))
