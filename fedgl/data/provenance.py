"""Which settings made a shard, so a run under other settings is refused.

A shard's manifest (``source``) carries ``settings``: the configuration keys that shaped its data
(:func:`shard_settings`), and their digest ``settings_sha256`` (SHA-256 of their sorted JSON). A
party compares them with the run's configuration at set-up (:func:`mismatch`) and refuses a run
made under other settings in one line, naming the keys that differ; a run's results then record
the data that really ran.

- a catalog data set (``fedgl shard``): ``dataset``, ``clients``, ``seed``,
  ``normalize_features``, the partition and the keys it reads (``partition``, ``beta``,
  ``mcmahan_p``, ``metis_max_degree``, ``min_client_size``), the SBM's keys for ``sbm``, and in
  the vertical setting ``feature_split``, ``edge_share`` and ``label_holders``;
- the organisations' own data (``fedgl ingest``, dataset ``own:NAME``): ``dataset``,
  ``clients``, ``normalize_features`` (the partition is the organisations' own).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

_PARTITION_KEYS = {"dirichlet": ("beta",), "p-split": ("mcmahan_p",),
                   "metis": ("metis_max_degree",), "metis-train": ("metis_max_degree",)}
_SBM = ("sbm_nodes", "sbm_classes", "sbm_alpha", "sbm_mu", "sbm_features", "sbm_noise")


def own_settings(name: str, clients: int, normalize_features: bool) -> dict[str, Any]:
    """The settings of the organisations' own data set ``own:NAME`` over ``clients``."""
    return {"dataset": f"own:{name}", "clients": int(clients),
            "normalize_features": bool(normalize_features)}


def shard_settings(cfg: Any, setting: str = "horizontal") -> dict[str, Any]:
    """The data-shaping settings of a configuration (see the module docstring)."""
    if str(cfg.dataset).lower().startswith("own:"):
        return own_settings(str(cfg.dataset)[4:], cfg.clients, cfg.normalize_features)
    out: dict[str, Any] = {"dataset": cfg.dataset, "clients": int(cfg.clients),
                           "seed": int(cfg.seed),
                           "normalize_features": bool(cfg.normalize_features)}
    if str(cfg.dataset).lower() == "sbm":
        out.update({k: getattr(cfg, k) for k in _SBM})
    if setting == "vertical":
        out.update({k: getattr(cfg, k) for k in ("feature_split", "edge_share")
                    if hasattr(cfg, k)})
        return out
    out["partition"] = cfg.partition
    out["min_client_size"] = int(cfg.min_client_size)
    out.update({k: getattr(cfg, k) for k in _PARTITION_KEYS.get(cfg.partition, ())})
    return out


def settings_sha256(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def mismatch(source: dict[str, Any], cfg: Any, setting: str = "horizontal") -> str | None:
    """None when the run's configuration has the settings the shard was made with (or the
    shard predates settings digests), else one line naming what differs."""
    made = source.get("settings")
    if not isinstance(made, dict) or source.get("settings_sha256") != settings_sha256(made):
        return None if "settings_sha256" not in source else \
            "its manifest's settings do not match their digest; write the shard again"
    run = shard_settings(cfg, setting)
    if settings_sha256(run) == source["settings_sha256"]:
        return None
    diff = [f"{k} {run.get(k)!r} (shard: {made[k]!r})" for k in sorted(made)
            if run.get(k) != made[k]]
    diff = diff or [f"{k} {run[k]!r} (the shard has none)" for k in sorted(set(run) - set(made))]
    return (f"the run's settings differ from those its shard was made with: {', '.join(diff)}; "
            "run with the shard's settings or make shards for the run's")


#: the keys of a shard's ``source`` a result records of it (``environment.data``)
RECORDED = ("settings_sha256", "provenance", "dropped_edges", "common_sha256")


def shard_record(source: dict[str, Any], client_id: int, num_nodes: int) -> dict[str, Any]:
    """What a result records of one shard (empty when its manifest carries no settings): the
    digest of its settings, the organisation's own provenance (table names and digests),
    the edges dropped at placement. The local trial over the same shards records the same."""
    if not isinstance(source.get("settings_sha256"), str):
        return {}
    return {"client_id": int(client_id), "num_nodes": int(num_nodes),
            **{k: source[k] for k in RECORDED if k in source}}


def own_keys_given(cfg: Any) -> list[str]:
    """The data-shaping keys a run over the organisations' own shards sets although the shards
    decide them (the partition and the keys it reads; the vertical split): a run records what
    ran, so these are refused rather than written into the result. ``partition: own`` (what
    such a run records, e.g. in a stored config run again) names them and is no such key."""
    from fedgl.config.registry import HORIZONTAL_KEYS, VERTICAL_KEYS
    from fedgl.config.sections import OWN_PARTITION

    return [k for k in (*HORIZONTAL_KEYS, *VERTICAL_KEYS) if k in cfg.given_keys
            and not (k == "partition" and cfg.partition == OWN_PARTITION)]


def refuse_own_keys(cfg: Any) -> None:
    """Raise one line naming the keys :func:`own_keys_given` finds."""
    from fedgl.config.sections import own_keys_line
    from fedgl.errors import ConfigError

    given = own_keys_given(cfg)
    if given:
        raise ConfigError(own_keys_line(given))
