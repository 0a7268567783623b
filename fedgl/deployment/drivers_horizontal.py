"""The deployed server drivers of the horizontal setting that an algorithm's spec names by kind
(``AlgorithmSpec.driver``); which algorithm runs, and with which server, the spec says.

A deployed server learns what it needs of the clients as a local run's server does: through
``setup.facts`` (:func:`fedgl.federation.facts.learn_facts`, each client's node count, the
feature and class widths), in the same server-side set-up function.

- ``"fedavg"`` (:func:`run_fedavg`): the spec's server class (``AlgorithmSpec.server``) set up
  by :func:`fedgl.algorithms.runner.start_server` (its ``initial_weights`` for the reported
  widths, or the configured GCN/SAGE's), then :func:`~fedgl.algorithms.fedavg_driver.drive_fedavg`.
- ``"minibatch"`` (:func:`run_minibatch`): the mini-batch FedSGD server set up by
  :func:`fedgl.algorithms.minibatch.runner.start_server` with the schedule the spec's server
  function builds from the configuration alone (``(cfg, settings) -> (Schedule, PNS fan-out)``),
  then :func:`~fedgl.algorithms.minibatch.driver.drive_minibatch`.

Each is resumed and checkpointed as the local runners do (:mod:`fedgl.algorithms.continuation`).
A spec may name its own driver instead (``"module:function"``; GLASU's is
:func:`fedgl.algorithms.glasu.deployed.run_vertical`), and says why it stays simulation-only
(``AlgorithmSpec.simulation_only``).
"""

from __future__ import annotations

from typing import Any

from fedgl.algorithms.continuation import (
    Continuation,
    continuation,
    flower_rounds,
    log_phase,
    log_round,
    resume_keeping_setup,
)
from fedgl.algorithms.fedavg_driver import drive_fedavg
from fedgl.algorithms.runner import resume_repeat, start_server
from fedgl.algorithms.watch import Watch
from fedgl.config import Config
from fedgl.config.registry import load_path


def run_fedavg(runtime: Any, cfg: Config, seed: int, t0: float, server_path: str) -> Any:
    """A FedAvg-style algorithm (the spec's server class ``server_path``): the set-up of
    :func:`~fedgl.algorithms.runner.start_server`, the pre-training exchange, then FedAvg
    rounds, resumed and checkpointed as :func:`fedgl.algorithms.runner.run_federated` does."""
    server, facts = start_server(runtime, load_path(server_path), cfg, seed,
                                 secure_mode=cfg.secure_sum,
                                 secagg_threshold=cfg.secagg_threshold,
                                 secure_models=cfg.secure_models)
    cont = continuation(runtime)
    watch, per_round = flower_rounds(runtime, int(cfg.rounds), server)

    def pretrained() -> None:
        if runtime.ledger.messages("pretrain"):
            log_phase(runtime, "pretrain", "pre-training")

    watch.pretrained = pretrained
    rep = drive_fedavg(server, cfg, repeat=0, seed=seed, part_stats=facts.stats(), t0=t0,
                       resume=lambda srv, progress: resume_keeping_setup(runtime, resume_repeat, srv,
                                                                         progress),
                       resume_from=cont.progress, checkpointer=cont.checkpointer, watch=watch)
    rep.extra.update(privacy_extra(server, cfg, cont))
    rep.extra["flower"] = {"per_round": per_round}
    if cfg.encrypt_models:   # the clients decrypt it at the hand-over; the server never can
        runtime.encrypted_model = getattr(server, "weights", None)
    return rep


def privacy_extra(server: Any, cfg: Config, cont: Continuation) -> dict[str, Any]:
    """``extra.privacy`` of an algorithm with privacy features, as a local run records it; DP
    counts every release: those the server received (this attempt, and earlier ones via the
    checkpoint) and those the clients logged before sending (reported at set-up: earlier
    attempts' releases after the last checkpoint)."""
    if not cfg.spec.privacy:
        return {}
    from fedgl.privacy.dp import merge_releases
    from fedgl.privacy.leakage import privacy_settings

    stats = getattr(server, "privacy_stats", None)
    if stats is not None and cfg.dp_epsilon is not None:
        stats["dp_releases"] = merge_releases(stats.get("dp_releases", {}), cont.logged)
    out = privacy_settings(cfg, server)
    if "secagg" in out:
        out["secagg"]["identities"] = ("Ed25519 roster from the organisations' files (fedgl "
                                       "keys); each party loads its own key")
    return {"privacy": out}


def run_minibatch(runtime: Any, cfg: Config, seed: int, t0: float, schedule_path: str) -> Any:
    """The mini-batch FedSGD server (mini-batch steps, server-mediated cross-client steps, the
    schedule that the spec's function ``schedule_path`` builds), set up as a local run sets it
    up (:func:`fedgl.algorithms.minibatch.runner.start_server`)."""
    from fedgl.algorithms.minibatch.driver import drive_minibatch
    from fedgl.algorithms.minibatch.runner import resume_repeat as resume_minibatch
    from fedgl.algorithms.minibatch.runner import start_server as start_fedsgd
    from fedgl.algorithms.minibatch.settings import MiniBatchSettings

    schedule, pns_fanout = load_path(schedule_path)(cfg, MiniBatchSettings.from_config(cfg))
    server, facts = start_fedsgd(runtime, cfg, seed, schedule, optimizer=cfg.server_optimizer,
                                 eval_mode=cfg.eval_mode, pns_fanout=pns_fanout)
    cont = continuation(runtime)
    watch = Watch(round_done=lambda t, row: log_round(runtime, t, int(cfg.rounds), row),
                  startup_round=None)
    rep, events = drive_minibatch(
        server, cfg, repeat=0, seed=seed, part_stats=facts.stats(), t0=t0,
        resume=lambda srv, progress: resume_keeping_setup(runtime, resume_minibatch, srv,
                                                          progress),
        resume_from=cont.progress, checkpointer=cont.checkpointer, watch=watch)
    rep.extra["failures"] = events
    return rep


#: the drivers an ``AlgorithmSpec.driver`` names by kind (see the module docstring)
GENERIC = {"fedavg": run_fedavg, "minibatch": run_minibatch}
