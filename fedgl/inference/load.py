"""``fedgl.load_model(dir)``: a saved model as a ready torch module, with its card.

>>> module, card = fedgl.load_model("runs/cora/model")     # doctest: +SKIP
>>> card["algorithm"], card["sha256"][:12]                  # doctest: +SKIP
('fedgcn', '3f1c0a9b22de')

The module is built from the card (the algorithm's spec names its builder,
:attr:`fedgl.config.registry.AlgorithmSpec.model`; by default the configured GCN, GraphSAGE or
GIN of :func:`fedgl.models.build_model`) and the weights are loaded strictly, after every file's
digest was checked (:func:`fedgl.trained.read_model`). A model of several parts (GLASU's
parties, a local-only baseline's clients) loads as an ``nn.ModuleDict`` keyed by part.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from fedgl.config import Config
from fedgl.config.registry import get_spec, load_path
from fedgl.config.schema import migrate_stored
from fedgl.errors import FedglError
from fedgl.trained import ModelFileError, read_model


def card_config(card: dict[str, Any], **overrides: Any) -> Config:
    """The run's configuration from a card, with ``overrides`` (where and how to run now)."""
    stored = dict(card.get("config") or {})
    if not stored:
        raise ModelFileError("the model card holds no configuration; use the card fedgl wrote")
    if stored.get("runtime") == "flower":   # a deployed run's record: the transport it had
        stored["runtime"] = "local"
    stored.update({"out": None, "progress": False, **overrides})
    try:
        return Config.from_dict(migrate_stored(stored), source="the model card's config")
    except FedglError as exc:
        raise ModelFileError(f"the model card's configuration is not usable here: {exc}") from None


def build_module(card: dict[str, Any], part: str = "global") -> nn.Module:
    """The untrained torch module of one part of a card's model."""
    from fedgl.models import build_model

    spec = get_spec(str(card.get("algorithm")))
    arch = card.get("architecture") or {}
    if spec.model:
        return load_path(spec.model)(card, card_config(card), part)
    try:
        return build_model(str(arch["model"]), int(arch["in_channels"]), int(arch["hidden"]),
                           int(arch["out_channels"]), int(arch["layers"]), float(arch["dropout"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFileError(f"the model card's architecture is incomplete ({exc}); use the "
                             "card fedgl wrote") from None


def load_model(folder: str | Path, *, best: bool = False) -> tuple[nn.Module, dict[str, Any]]:
    """``(module, card)`` of a model folder a run wrote (``<out>/model``), in eval mode on the
    CPU. ``best``: the best-validation round's weights (see the card's ``rounds``)."""
    parts, card = read_model(folder, best=best)
    modules = {}
    for name, state in parts.items():
        module = build_module(card, name)
        try:
            module.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            first = str(exc).splitlines()[0]
            raise ModelFileError(f"'{folder}': the weights of part '{name}' do not fit the "
                                 f"architecture its card describes ({first}); use the model "
                                 "folder as fedgl wrote it") from None
        modules[name] = module.eval()
    if list(modules) == ["global"]:
        return modules["global"], card
    return nn.ModuleDict(modules).eval(), card
