"""The Python API: ``run(config) -> RunResult``, plus the data helpers re-exported at top level."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from fedgl._optional import check_config
from fedgl.checkpoint import Checkpointer, load_checkpoint, resume_config, set_rng_state
from fedgl.config import Config
from fedgl.config.schema import migrate_stored
from fedgl.data.datasets import load_graph
from fedgl.data.graph import GraphData
from fedgl.data.validate import validate_graph
from fedgl.errors import ConfigError
from fedgl.inference.card import graph_facts, write_run_model
from fedgl.output import OutputFolder
from fedgl.progress import RoundProgress, round_progress
from fedgl.resources import check_memory, check_resources, release_freed_memory
from fedgl.results import RunResult, environment


def as_config(config: Config | dict[str, Any] | str | Path | None = None, **overrides: Any
              ) -> Config:
    """A validated :class:`Config` from a Config, a dict, a YAML path, or keyword arguments."""
    if config is None:
        return Config.from_dict(overrides)
    if isinstance(config, Config):
        return config.replace(**overrides) if overrides else _validated(config)
    if isinstance(config, dict):
        return Config.from_dict({**config, **overrides})
    if isinstance(config, str | Path):
        return Config.from_yaml(config, overrides)
    raise ConfigError(f"config must be a Config, dict or YAML path, not {type(config).__name__}")


def _validated(cfg: Config) -> Config:
    cfg.validate()
    return cfg


def run(config: Config | dict[str, Any] | str | Path | None = None, *,
        graph: GraphData | None = None, resume: str | Path | None = None,
        on_round: Callable[[int, int, Any], None] | None = None, overwrite: bool = False,
        **overrides: Any) -> RunResult:
    """Run ``config.repeats`` seeded repeats of ``config.algorithm`` and return the results.

    ``config`` may be a :class:`Config`, a dict of config keys, or a YAML path; keyword arguments
    override it. Pass ``graph`` to use a graph you built instead of ``config.dataset`` (it is
    validated like a loaded one). Nothing is written to disk unless ``config.out`` is set; then
    the folder is checked and locked before any work and the results appear in it complete or
    not at all (an existing results folder is replaced only with ``overwrite=True``).
    ``resume`` continues the run whose ``--out`` folder holds a checkpoint: the checkpoint's
    config decides the result (a ``config`` or keyword that would change it is refused, naming
    the keys), the invocation decides where it runs (``runtime``, ``ray_address``,
    ``data_root``, ... come from ``config``/keywords or the defaults, never from the
    checkpoint). ``on_round(repeat, round, server)`` is called after every federated round, once
    its row is recorded (a FedAvg-style round whose evaluation rides on the next round's fit:
    after that exchange).
    Every error caused by the input is a :class:`FedglError`.

    >>> result = run(algorithm="fedgcn", dataset="sbm", hops=2, rounds=20, progress=False)
    >>> 0.0 <= result.mean("test_acc") <= 1.0
    True
    """
    if graph is not None and not isinstance(graph, GraphData):
        raise ConfigError(f"graph must be a fedgl.GraphData (got {type(graph).__name__}); pass "
                          "dataset='cora' for a named dataset, or fedgl.from_pyg(data)")
    given: dict[str, Any] = {}
    if resume is not None:
        # the invocation's keys: its transport/addresses/paths are used, the rest is checked
        # against the checkpoint's config (fedgl.checkpoint.resume_config)
        given = as_config(config, **overrides).to_dict() if config is not None else overrides
        folder: OutputFolder | None = OutputFolder(resume, resume=True, flag="--resume")
        cfg = None
    else:
        cfg = as_config(config, **overrides)
        if cfg.checkpoint_every and not cfg.out:
            raise ConfigError("checkpoint_every needs an output folder; set --out DIR")
        check_config(cfg)  # a missing extra fails here, before any work
        check_resources(cfg, generates_graph=graph is None)
        folder = OutputFolder(cfg.out, overwrite=overwrite) if cfg.out else None
    if folder is not None:
        folder.open()
    try:
        ckpt = None
        if resume is not None:
            ckpt = load_checkpoint(resume)
            cfg = Config.from_dict(resume_config(migrate_stored(ckpt.config), given,
                                                 Path(resume)))
            check_resources(cfg)
            set_rng_state(ckpt.rng)
        assert cfg is not None
        if folder is not None and cfg.checkpoint_every:
            folder.prepare_checkpoints()
        result = _run_repeats(cfg, graph, ckpt, on_round)
        if folder is not None:
            folder.commit(lambda staging: save_with_model(result, staging))
        return result
    finally:
        if folder is not None:
            folder.close()


def _run_repeats(cfg: Config, graph: GraphData | None, ckpt: Any,
                 on_round: Callable[[int, int, Any], None] | None) -> RunResult:
    if cfg.runtime == "ray" and cfg.ray_address:   # a wrong cluster fails before the data loads
        from fedgl.federation.ray_runtime import precheck_address

        precheck_address(cfg)
    # the reporter is open from the start: loading (synthetic generation) and partitioning
    # (METIS) report progress too
    with round_progress(cfg.progress) as progress:
        return _run_repeats_in(cfg, graph, ckpt, on_round, progress)


def _run_repeats_in(cfg: Config, graph: GraphData | None, ckpt: Any,
                    on_round: Callable[[int, int, Any], None] | None,
                    progress: RoundProgress) -> RunResult:
    if graph is not None:
        validate_graph(graph, "graph")
        g = graph
    else:
        g = load_graph(cfg)
    if cfg.clients > g.num_nodes:
        raise ConfigError(f"clients ({cfg.clients}) exceeds the graph's {g.num_nodes} nodes; "
                          f"use at most {g.num_nodes} clients")
    check_memory(cfg, g)
    repeat_fn = cfg.spec.load_entry()
    done = ckpt.completed_repeats() if ckpt else []
    checkpointer = (Checkpointer(cfg.out, cfg.to_dict(), cfg.checkpoint_every, done)
                    if cfg.checkpoint_every and cfg.out else None)
    reps = list(done)
    threads_before = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    threads_used = torch.get_num_threads()
    with _restore_threads(threads_before):
        for r in range(len(done), cfg.repeats):
            partial = ckpt.progress if ckpt and ckpt.progress and ckpt.progress.repeat == r else None
            kwargs: dict[str, Any] = {"resume_from": partial, "checkpointer": checkpointer,
                                      "on_round": on_round}
            rep = repeat_fn(g, cfg, repeat=r, seed=cfg.seed + r, progress=progress, **kwargs)
            reps.append(rep)
            if checkpointer is not None:
                checkpointer.repeat_done(rep)
            release_freed_memory()
    if cfg.dp_epsilon is not None:  # every repeat re-releases the same features: ε composes
        from fedgl.privacy.dp import account_run

        account_run(reps)
    env = environment(cfg.seed, cfg.device)
    env["torch_threads"] = threads_used
    env["graph"] = graph_facts(g)
    recorded = cfg.to_dict()
    if graph is not None:   # the config's dataset was not what ran
        recorded["dataset"] = g.name or "custom"
        if getattr(g, "provenance", None):   # the shards' own record of what they hold
            env["data"] = g.provenance
    return RunResult(recorded, env, reps)


def save_with_model(result: RunResult, out: str | Path) -> Path:
    """Write ``result.json``, ``history.csv`` and the model folder ``model/``
    (:func:`fedgl.inference.card.write_run_model`) into ``out``."""
    path = result.save(out)
    write_run_model(result, out)
    return path


@contextmanager
def _restore_threads(n: int) -> Iterator[None]:
    try:
        yield
    finally:
        torch.set_num_threads(n)


def run_shards(folders: list[str | Path], config: Config | dict[str, Any] | str | Path | None
               = None, *, overwrite: bool = False, **overrides: Any) -> RunResult:
    """A local trial over the organisations' ``fedgl ingest`` folders, as they are: set-up runs
    in this process (:func:`fedgl.data.own.placement.setup_in_process`: positions from the
    pseudonyms, then each organisation's shard) and ``config``'s algorithm runs over those
    shards with their own partition, as a deployment of the same shards would.

    The data set (``own:NAME``), the number of clients and ``normalize_features`` come from the
    shards; a config that sets them otherwise is refused, naming the keys. ``result.json``
    records the shards' provenance under ``environment.data``. Vertical parties (GLASU) give
    their ``fedgl ingest --vertical`` folders (aligned by PSI in this process) or the shards
    ``fedgl psi place`` wrote (a folder of them, or their manifests), run as they are."""
    from fedgl.data.own.placement import owned_graph, setup_in_process
    from fedgl.data.provenance import mismatch, refuse_own_keys

    if not folders:
        raise ConfigError("--shards needs the organisations' ingest folders")
    given = as_config(config, **overrides)
    refuse_own_keys(given)
    if all((Path(f) / "vertical.json").is_file() for f in folders):
        return _run_vertical_shards(list(folders), given, overwrite)
    from fedgl.privacy.psi_files import placed_manifests

    placed = placed_manifests(list(folders))
    if placed:
        _refuse_placed_horizontal(placed)
        return _run_vertical_shards(placed, given, overwrite, placed=True)
    shards, sources, facts = setup_in_process(list(folders))
    if given.spec.setting != "horizontal":
        raise ConfigError(f"--shards runs horizontal algorithms; '{given.algorithm}' is "
                          f"{given.spec.setting}")
    chosen = given.to_dict()
    forced = {"dataset": sources[0]["dataset"], "clients": facts["clients"],
              "normalize_features": sources[0]["normalize_features"]}
    explicit = given.replace(**{k: (chosen[k] if k in given.given_keys else v)
                                for k, v in forced.items()})
    problem = mismatch(sources[0], explicit)
    if problem is not None:
        raise ConfigError(problem)
    graph = owned_graph(shards, sources, facts["name"])
    return run(given.replace(**forced), graph=graph, overwrite=overwrite)


def _refuse_placed_horizontal(manifests: list[Path]) -> None:
    """Refuse, in one line, shards that are not vertical (``fedgl place`` or ``fedgl shard``
    output): ``--shards`` takes ingest folders, or the vertical shards ``fedgl psi place``
    wrote."""
    from fedgl.data.shard_format import read_manifest

    for m in manifests:
        manifest = read_manifest(m)
        if manifest.get("setting") != "vertical":
            raise ConfigError(
                f"'{m}' is a horizontal shard (made by `fedgl place` or `fedgl shard`); give "
                "--shards the organisations' `fedgl ingest` folders (the trial places them "
                "itself), or deploy the placed shards with `fedgl client --data`")


def _run_vertical_shards(folders: list[str | Path], given: Config, overwrite: bool,
                         placed: bool = False) -> RunResult:
    """:func:`run_shards` over vertical ingests (``fedgl ingest --vertical``): the parties align
    their common entities by PSI in this process, then GLASU runs over the aligned parts; or
    over the vertical shards ``fedgl psi place`` wrote (``placed``), as they are."""
    from fedgl.privacy.vertical_align import aligned_graph

    if given.algorithm != "glasu":
        raise ConfigError(f"vertical ingests run with --algorithm glasu (got '{given.algorithm}')")
    if placed:
        from fedgl.privacy.psi_files import read_placed

        shards, agreed = read_placed([Path(f) for f in folders])
        name, label_holders = agreed["name"], agreed["label_holders"]
        classes = agreed.get("classes")
        provenance: dict[str, Any] = {
            "dataset": f"own:{name}", "partition": "vertical, aligned by PSI (fedgl psi)",
            "common_sha256": agreed["common_sha256"], "shards": agreed["provenance"]}
    else:
        shards, name, label_holders, provenance = _aligned_in_process(folders)
        classes = provenance.pop("classes", None)
    forced = {"dataset": f"own:{name}", "clients": len(shards), "label_holders": label_holders}
    chosen = given.to_dict()
    differ = [f"{k} {chosen[k]!r} (shards: {v!r})" for k, v in forced.items()
              if k in given.given_keys and k in chosen and chosen[k] != v]
    if differ:
        raise ConfigError(f"the run's settings differ from the shards': {', '.join(differ)}; "
                          "run with the shards' settings")
    graph = aligned_graph(shards, name, provenance)
    graph.class_names = classes
    return run(given.replace(**forced), graph=graph, overwrite=overwrite)


def _aligned_in_process(folders: list[str | Path]) -> tuple[list[Any], str, str, dict[str, Any]]:
    """The vertical ingests aligned by PSI in this process: the parts, the data set's name, the
    label holders (``one``/``all``) and the provenance a result records."""
    from fedgl.data.own.ingest import VERTICAL_FORMAT, read_npz
    from fedgl.privacy.vertical_align import align_in_process

    parties = [read_npz(Path(f), "vertical.json", VERTICAL_FORMAT) for f in folders]
    names = {m["name"] for m, _ in parties}
    if len(names) != 1:
        raise ConfigError(f"the vertical ingests name different data sets {sorted(names)}; "
                          "ingest with one --name")
    shards, figures = align_in_process(parties)
    holders = figures["label_holders"]
    label_holders = "all" if holders == list(range(len(shards))) else "one" \
        if holders == [0] else None
    if label_holders is None:
        raise ConfigError(f"parties {holders} hold labels; GLASU needs them at client 0 only or "
                          "at every party")
    name = names.pop()
    provenance = {"dataset": f"own:{name}", "partition": "vertical, aligned by PSI",
                  "classes": next(m["classes"] for m, _ in parties if m["classes"] is not None),
                  "psi": figures, "shards": [{"client_id": int(m["client_id"]),
                                              "provenance": m["provenance"]}
                                             for m, _ in parties]}
    return shards, name, label_holders, provenance
