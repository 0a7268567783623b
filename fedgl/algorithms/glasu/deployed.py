"""GLASU (the vertical setting) deployed on Flower: its shards, its party and its server driver.

- **Shards** (:func:`write_vertical_shards`, GLASU's ``AlgorithmSpec.shards``, behind
  ``fedgl shard --algorithm glasu``): the
  split a local GLASU run makes for the same seed and keys (``feature_split``, ``edge_share``,
  ``label_holders``; :func:`fedgl.data.vertical.vertical_split`), one ``fedgl-shard/1`` file pair
  per client holding only what that client owns: its feature columns of every node, its own edge
  set and, at a label holder, the labels and split masks.
- **Party** (:func:`glasu_client`, GLASU's ``AlgorithmSpec.client``): the organisation's
  :class:`GlasuClient`, built from its own vertical shard and the run's configuration, refusing
  a shard that does not fit the run (horizontal, or labels where the run puts none).
- **Server** (:func:`run_vertical`, GLASU's ``AlgorithmSpec.driver``): GLASU's server over
  :class:`~fedgl.federation.flower.runtime.FlowerRuntime`, exactly as the local runner drives it
  (set-up exchange, then ``rounds`` rounds of sampling, joint inference and local updates with
  evaluation every ``eval_every``), writing the same history and ledger. The GLASU server holds
  no data: it reads no file, and learns the training node ids from a label holder in the run.
  With ``checkpoint_every`` each party saves its own model in its own ``--state-dir`` and the
  server's checkpoint keeps only the digests (a resumed run continues exactly); under
  ``on_client_failure: drop`` a lost party's block is zero from then on
  (:mod:`fedgl.algorithms.glasu.server`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedgl.config import Config
from fedgl.errors import ConfigError

if TYPE_CHECKING:
    from fedgl.algorithms.glasu.client import GlasuClient
    from fedgl.data.graph import GraphData
    from fedgl.federation.flower.runtime import FlowerRuntime
    from fedgl.results import RepeatResult


def _options(cfg: Config) -> Any:
    from fedgl.algorithms.glasu.options import GlasuOptions

    return cfg.options if cfg.options is not None else GlasuOptions()


def write_vertical_shards(graph: GraphData, cfg: Config, out: Path) -> list[Path]:
    """One vertical shard per client of ``cfg`` (GLASU) in ``out`` and ``federation.json``
    (the split's public facts); the manifests' paths."""
    import json

    from fedgl.algorithms.glasu.runner import vertical_settings
    from fedgl.data.provenance import settings_sha256, shard_settings
    from fedgl.data.shard_format import write_shard
    from fedgl.data.vertical import vertical_split

    options = _options(cfg)
    options.validate(cfg)
    split = vertical_settings(cfg)
    parts = vertical_split(graph, int(cfg.clients), labels=options.label_holders,
                           seed=int(cfg.seed), **split)
    source = {"dataset": cfg.dataset, "algorithm": cfg.algorithm, "clients": int(cfg.clients),
              **split, "label_holders": options.label_holders, "seed": int(cfg.seed)}
    settings = shard_settings(cfg, "vertical")
    paths = [write_shard(d, out, {**source, "settings": settings,
                                  "settings_sha256": settings_sha256(settings)}) for d in parts]
    (out / "federation.json").write_text(json.dumps(
        {**source, "setting": "vertical", "num_nodes": graph.num_nodes,
         "num_features": graph.num_features, "num_classes": graph.num_classes,
         "columns_per_client": [int(d.columns.numel()) for d in parts],
         "edges_per_client": [d.num_edges for d in parts],
         "label_holders_ids": [d.client_id for d in parts if d.has_labels]}, indent=2) + "\n")
    return paths


def glasu_client(shard: Any, cfg: Config, seed: int) -> GlasuClient:
    """The party's GLASU client, from its own shard and the run's configuration."""
    from fedgl.algorithms.glasu.client import GlasuClient
    from fedgl.algorithms.glasu.runner import STATE_FOLDER, glasu_params
    from fedgl.data.vertical import VerticalClientData

    k = int(shard.client_id)
    if not isinstance(shard, VerticalClientData):
        raise ConfigError(f"client {k}'s shard is horizontal but {cfg.algorithm} is vertical; "
                          "write vertical shards with `fedgl shard --algorithm glasu`")
    params = glasu_params(cfg, _options(cfg), shard.num_classes)
    if not 0 <= k < params.clients:
        raise ConfigError(f"client {k} is outside the run's {params.clients} clients")
    holds = params.label_holders == "all" or k == 0
    if shard.has_labels != holds:
        raise ConfigError(f"client {k}'s shard {'holds' if shard.has_labels else 'lacks'} labels "
                          f"but the run's label_holders is '{params.label_holders}'; write the "
                          "shards with the run's --label-holders")
    # a run that can be resumed: the party keeps its model's checkpoints in its own records
    # (``fedgl client --state-dir``, set by the party as ``out``), never at the server
    keeps = cfg.out is not None and bool(cfg.checkpoint_every)
    state_dir = Path(cfg.out) / STATE_FOLDER / f"client-{k}" if keeps else None
    return GlasuClient(shard, params, seed, state_dir=state_dir)


def start_vertical_server(runtime: Any, cfg: Config, seed: int) -> tuple[Any, Any]:
    """GLASU's server over a deployment's runtime, set up as a local run sets it up
    (:func:`fedgl.algorithms.glasu.runner.start_server`, the run's options): the server and the
    parties' facts. Training (:func:`run_vertical`) and scoring with the parts the parties
    kept (``fedgl server --predict``) both start here."""
    from fedgl.algorithms.glasu.runner import glasu_params, start_server

    return start_server(runtime, cfg, seed,
                        lambda num_classes: glasu_params(cfg, _options(cfg), num_classes))


def run_vertical(runtime: FlowerRuntime, cfg: Config, seed: int, t0: float) -> RepeatResult:
    """One deployed GLASU repeat (see the module docstring), set up as a local run sets it up
    (:func:`fedgl.algorithms.glasu.runner.start_server`)."""
    from fedgl.algorithms.continuation import (
        continuation,
        flower_rounds,
        resume_keeping_setup,
    )
    from fedgl.algorithms.glasu.runner import drive_glasu, json_params
    from fedgl.algorithms.glasu.runner import resume_repeat as resume_glasu
    from fedgl.algorithms.runner import finish_repeat

    server, facts = start_vertical_server(runtime, cfg, seed)
    params = server.p
    setup_seconds = time.perf_counter() - t0
    cont = continuation(runtime)
    watch, per_round = flower_rounds(runtime, int(cfg.rounds))
    history, events = drive_glasu(
        server, cfg, repeat=0, seed=seed,
        resume=lambda srv, progress: resume_keeping_setup(runtime, resume_glasu, srv, progress),
        resume_from=cont.progress, checkpointer=cont.checkpointer,
        watch=watch,
        aside=lambda step: _aside(runtime, step))
    ledger = runtime.ledger
    seconds = {"setup": setup_seconds, "pretrain": ledger.seconds("pretrain"),
               "train": ledger.seconds("train"), "eval": ledger.seconds("eval"),
               "total": time.perf_counter() - t0}
    stats = {"setting": "vertical", "clients": len(facts.nodes), "num_nodes": facts.num_nodes,
             "columns": [facts.features[k] for k in sorted(facts.features)]}
    rep = finish_repeat(0, seed, stats, history, ledger.summary(), seconds)
    rep.extra.update({"setting": "vertical", "mode": "glasu", "params": json_params(params),
                      "runtime": "flower", "communication": "counted by the ledger",
                      "failures": events})
    rep.extra["flower"] = {"per_round": per_round}
    return rep


def _aside(runtime: FlowerRuntime, step: Callable[[], Any]) -> Any:
    """Run ``step`` (checkpoint messages: ``glasu.save_state``/``load_state``, kept out of the
    ledger as a local run keeps them) and file what Flower carried for it under the phase
    ``checkpoint`` of ``extra.flower.bytes``, apart from the training traffic."""
    before = {p: dict(v) for p, v in runtime.flower_bytes.items()}
    try:
        return step()
    finally:
        for phase, dirs in list(runtime.flower_bytes.items()):
            for d in ("up", "down"):
                moved = dirs[d] - before.get(phase, {}).get(d, 0)
                if moved and phase not in ("setup", "checkpoint"):
                    dirs[d] -= moved
                    runtime.flower_bytes["checkpoint"][d] += moved
