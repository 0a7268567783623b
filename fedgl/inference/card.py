"""The card of a trained model (``<out>/model/model.json``) and the writer of a run's model folder.

The card says what the weights are and where they come from, so that an organisation can use
them without the run's result folder: the algorithm and architecture (model, widths, layers,
hops), the classes (the organisations' own names where they gave them), the rounds the weights
come from (final, and the best-validation round's where different, saying which is which) with
their metrics, what the model was trained on (the data set, or the shards' provenance and
digests), the configuration, the privacy it was trained under (secure-sum mode, secure or
encrypted models, DP settings and the ε spent), the fedgl and torch versions, and the weights'
SHA-256 (:func:`fedgl.trained.weights_digest`) every organisation can compare.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedgl.results import RepeatResult, RunResult
from fedgl.trained import write_model

MODEL_FOLDER = "model"

#: configuration keys a card lists under ``architecture`` (the rest stay under ``config``)
ARCHITECTURE_KEYS = ("model", "hidden", "layers", "dropout", "hops", "normalize_features")


def model_card(result: RunResult, rep: RepeatResult, *, num_features: int, num_classes: int,
               class_names: list[str] | None = None) -> dict[str, Any]:
    """The card of ``rep``'s model (see the module docstring); :func:`fedgl.trained.write_model`
    adds the files and digests."""
    cfg = result.config
    model = rep.model or {}
    final, best = model.get("round"), model.get("best_round")
    arch = {k: cfg[k] for k in ARCHITECTURE_KEYS if k in cfg}
    arch.update({"in_channels": int(num_features), "out_channels": int(num_classes)})
    names = list(class_names) if class_names else [str(c) for c in range(num_classes)]
    metrics = {k: rep.final.get(k) for k in ("test_acc", "val_acc", "oracle_test_acc")}
    best_metrics = next(({k: h.get(k) for k in ("test_acc", "val_acc", "oracle_test_acc")
                          if k in h} for h in rep.history if h.get("round") == best), {})
    env = result.environment
    return {
        "algorithm": cfg.get("algorithm"),
        "setting": _setting(cfg.get("algorithm")),
        "architecture": arch,
        "classes": names,
        "parts": sorted(model.get("parts", {})),
        "repeat": {"index": rep.repeat, "seed": rep.seed, "of": len(result.repeats)},
        "rounds": {"final": final, "best_validation": best,
                   "note": "the weights are the final round's; best/ holds the best-validation "
                           "round's" if model.get("best_parts") else
                           "the final round is the best-validation round"},
        "metrics": {"final": metrics, "best_validation": best_metrics},
        "trained_on": env.get("data") or {"dataset": cfg.get("dataset"),
                                          "partition": cfg.get("partition"),
                                          "clients": cfg.get("clients")},
        "privacy": privacy_summary(cfg, rep),
        "config": cfg,
        "versions": {k: env.get(k) for k in ("fedgl", "torch", "torch_geometric", "python")},
    }


def privacy_summary(cfg: dict[str, Any], rep: RepeatResult) -> dict[str, Any]:
    """What protected the run: the secure-sum mode, secure or encrypted models, DP settings and
    the ε the released features spent (where DP was on)."""
    out: dict[str, Any] = {k: cfg.get(k) for k in ("secure_sum", "secure_models",
                                                   "encrypt_models", "min_contributors")
                           if k in cfg}
    if cfg.get("dp_epsilon") is not None:
        dp = dict(((rep.extra.get("privacy") or {}).get("dp")) or {})
        out["dp"] = {"epsilon": cfg.get("dp_epsilon"), "delta": cfg.get("dp_delta"),
                     "clip": cfg.get("dp_clip"),
                     "spent": (dp.get("accounting") or {}).get("run_total")
                     or (dp.get("accounting") or {}).get("total")}
    else:
        out["dp"] = None
    return out


def _setting(algorithm: Any) -> str | None:
    from fedgl.config.registry import get_spec

    try:
        return get_spec(str(algorithm)).setting
    except Exception:   # a plugin no longer installed: the card still says what it can
        return None


def write_run_model(result: RunResult, out: str | Path) -> dict[str, Any] | None:
    """Write ``<out>/model/`` for the first repeat that left a model; return its card (None
    where no repeat did, e.g. a model that was never in the clear here). The widths and class
    names come from ``result.environment["graph"]``."""
    rep = next((r for r in result.repeats if r.model is not None), None)
    graph = result.environment.get("graph") or {}
    if rep is None or "num_features" not in graph:
        return None
    card = model_card(result, rep, num_features=graph["num_features"],
                      num_classes=graph["num_classes"], class_names=graph.get("class_names"))
    return write_model(Path(out) / MODEL_FOLDER, rep.model, card)


def graph_facts(graph: Any) -> dict[str, Any]:
    """What a result records of the graph a model was trained on: its size, feature width and
    classes, with the organisations' own class names where the data carries them."""
    out: dict[str, Any] = {"num_nodes": int(graph.num_nodes),
                           "num_features": int(graph.num_features),
                           "num_classes": int(graph.num_classes)}
    names = getattr(graph, "class_names", None)
    if names:
        out["class_names"] = [str(c) for c in names]
    return out


__all__ = ["MODEL_FOLDER", "graph_facts", "model_card", "write_run_model"]
