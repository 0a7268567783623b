"""The Python API: ``run(config) -> RunResult``, plus the data helpers re-exported at top level."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedgl.config import Config
from fedgl.data.datasets import load_dataset
from fedgl.data.graph import GraphData, row_normalize
from fedgl.errors import ConfigError
from fedgl.progress import round_progress
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


def load_graph(cfg: Config) -> GraphData:
    """The dataset named by the config, with features row-normalised if asked and non-negative
    (row normalisation is meaningless for signed features such as the SBM's Gaussians)."""
    graph = load_dataset(cfg.dataset, cfg.data_root, seed=cfg.seed, nodes=cfg.sbm_nodes,
                         classes=cfg.sbm_classes, alpha=cfg.sbm_alpha, mu=cfg.sbm_mu,
                         features=cfg.sbm_features, noise=cfg.sbm_noise)
    if cfg.normalize_features and graph.num_nodes and bool((graph.x >= 0).all()):
        graph = graph.with_features(row_normalize(graph.x))
    return graph


def run(config: Config | dict[str, Any] | str | Path | None = None, *,
        graph: GraphData | None = None, **overrides: Any) -> RunResult:
    """Run ``config.repeats`` seeded repeats of ``config.algorithm`` and return the results.

    ``config`` may be a :class:`Config`, a dict of config keys, or a YAML path; keyword arguments
    override it. Pass ``graph`` to use a graph you built instead of ``config.dataset``. Nothing
    is written to disk unless ``config.out`` is set.

    >>> result = run(algorithm="fedgcn", dataset="sbm", hops=2, rounds=20, progress=False)
    >>> 0.0 <= result.mean("test_acc") <= 1.0
    True
    """
    from fedgl.algorithms import REGISTRY

    cfg = as_config(config, **overrides)
    g = graph if graph is not None else load_graph(cfg)
    if cfg.clients > g.num_nodes:
        raise ConfigError(f"clients ({cfg.clients}) exceeds the graph's {g.num_nodes} nodes; "
                          f"use at most {g.num_nodes} clients")
    repeat_fn = REGISTRY[cfg.algorithm]
    reps = []
    with round_progress(cfg.progress) as progress:
        for r in range(cfg.repeats):
            reps.append(repeat_fn(g, cfg, repeat=r, seed=cfg.seed + r, progress=progress))
    result = RunResult(cfg.to_dict(), environment(cfg.seed, cfg.device), reps)
    if cfg.out:
        result.save(cfg.out)
    return result
