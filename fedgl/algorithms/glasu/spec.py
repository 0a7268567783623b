"""Registers GLASU (vertical) and the baselines of its paper: simulated centralised, centralised
and standalone (imports no algorithm code)."""

from fedgl.algorithms.glasu.options import GlasuModelOptions, GlasuOptions
from fedgl.algorithms.recipes import GLASU_BASELINES, GLASU_PAPER, ROUNDS_HELP
from fedgl.config.registry import AlgorithmSpec, register

# GLASU trains mini-batches with its own local-update count (stale_steps), sizes layers by
# hidden, and picks its backbone with --backbone
_UNREAD = ("model", "local_steps", "clients_per_round")
_RUNNER = "fedgl.algorithms.glasu.runner"
_BASE_HELP = {"rounds": ROUNDS_HELP["glasu_baseline"]}
_DEPLOYED = "fedgl.algorithms.glasu.deployed"
_MODEL = f"{_RUNNER}:glasu_from_card"
#: why GLASU's baselines stay simulation-only
_REFERENCE = ("a GLASU reference: it gives one party every edge or every feature column, or "
              "trains the parties apart")

register(AlgorithmSpec(
    name="glasu", setting="vertical",
    summary="GLASU: vertical split GNN with lazy aggregation at K of L layers and Q stale updates",
    entry=f"{_RUNNER}:run_repeat", options=GlasuOptions, unread=_UNREAD,
    defaults=GLASU_PAPER, key_help={"rounds": ROUNDS_HELP["glasu"]},
    client=f"{_DEPLOYED}:glasu_client", driver=f"{_DEPLOYED}:run_vertical",
    shards=f"{_DEPLOYED}:write_vertical_shards",
    model=_MODEL, predict=f"{_RUNNER}:predict_repeat"))

register(AlgorithmSpec(
    name="glasu-simulated", setting="vertical",
    summary="GLASU's simulated centralised baseline: every client has every edge, aggregation "
            "at every layer, exact gradients",
    entry=f"{_RUNNER}:run_simulated", options=GlasuModelOptions, unread=_UNREAD,
    model=_MODEL, predict=f"{_RUNNER}:predict_simulated",
    defaults=GLASU_BASELINES, key_help=_BASE_HELP,
    simulation_only=_REFERENCE))

register(AlgorithmSpec(
    name="glasu-centralized", setting="vertical",
    summary="GLASU's centralised baseline: one party with every feature column and edge",
    entry=f"{_RUNNER}:run_centralized", options=GlasuModelOptions, runtimes=("local",),
    model=_MODEL, predict=f"{_RUNNER}:predict_centralized",
    unread=_UNREAD, defaults=GLASU_BASELINES, key_help=_BASE_HELP,
    simulation_only=_REFERENCE))

register(AlgorithmSpec(
    name="glasu-standalone", setting="vertical",
    summary="GLASU's standalone baseline: each client trains alone on its columns and edges",
    entry=f"{_RUNNER}:run_standalone", options=GlasuModelOptions, checkpoints=False,
    runtimes=("local",), unread=_UNREAD, defaults=GLASU_BASELINES, key_help=_BASE_HELP,
    simulation_only=_REFERENCE))
