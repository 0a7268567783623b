"""``fedgl predict``: scores for each organisation's own nodes from a saved model.

The model folder's card names the algorithm and the run's configuration. The federation is set
up again as the run set it up (the same partition of a built-in data set, or the organisations'
own ingest folders) and the algorithm's predictor
(:attr:`fedgl.config.registry.AlgorithmSpec.predict`) runs what its evaluation ran: FedGCN's
pre-training exchange under the run's privacy settings, then every client's forward pass on its
own nodes. So the saved model's predictions are the run's own evaluation: the test accuracy
counted from the files equals ``result.json``'s.

Each organisation gets one CSV, ``<name>.csv``, a row per own node:
``id,prediction,p_<class 1>,...,p_<class C>`` — ``id`` is the organisation's own id (a built-in
data set's node index), ``prediction`` the class name, then one probability column per class.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fedgl.config.registry import get_spec, load_path
from fedgl.data.own.ingest import read_own_ids
from fedgl.errors import ConfigError
from fedgl.inference.load import card_config
from fedgl.trained import read_model


@dataclass
class OrganisationScores:
    """One organisation's predictions: its name (the file's), its own nodes' ids, their class
    probabilities ``[n, C]`` and the graph positions of those nodes (for the experimenter's
    checks; never written)."""

    name: str
    ids: list[str]
    probs: Tensor
    positions: Tensor

    def predicted(self) -> Tensor:
        return self.probs.argmax(dim=1)

    def csv_text(self, classes: list[str]) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["id", "prediction", *[f"p_{c}" for c in classes]])
        labels = self.predicted().tolist()
        for node, label, row in zip(self.ids, labels, self.probs.tolist(), strict=True):
            w.writerow([node, classes[label], *[_fmt(p) for p in row]])
        return buf.getvalue()


@dataclass
class Prediction:
    """What ``fedgl predict`` computed: the card, every organisation's scores, and the bytes
    the set-up exchange sent (the ledger's summary)."""

    card: dict[str, Any]
    organisations: list[OrganisationScores]
    exchange: dict[str, Any]

    def write(self, out: str | Path) -> list[Path]:
        """One ``<name>.csv`` per organisation in ``out`` (each written whole or not at all)."""
        from fedgl.trained import _atomic_write

        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for org in self.organisations:
            path = folder / f"{org.name}.csv"
            _atomic_write(path, org.csv_text(self.card["classes"]).encode())
            paths.append(path)
        return paths


def _fmt(p: float) -> str:
    return f"{p:.9g}" if math.isfinite(p) else "nan"


def predict(model: str | Path, *, dataset: str | None = None, shards: list[str | Path] | None
            = None, data_root: str | None = None, best: bool = False,
            state_dir: str | Path | None = None) -> Prediction:
    """Score every organisation's own nodes with the model in ``model`` (a ``<out>/model``
    folder). The data: the run's own built-in data set (its name from the card, or ``dataset``,
    which must name the same one) with the run's partition, or the organisations' ingest folders
    ``shards`` for a model trained on own data. ``best``: the best-validation round's weights.
    ``state_dir``: the simulated clients' state folder (default: the run's); where the clients
    kept their last exchange there, FedGCN exchanges only the rows that changed
    (:mod:`fedgl.algorithms.fedgcn.update`)."""
    parts, card = read_model(model, best=best)
    spec = get_spec(str(card.get("algorithm")))
    if not spec.predict:
        raise ConfigError(f"algorithm '{spec.name}' does not score nodes after training yet; "
                          "load the weights with fedgl.load_model and run the model yourself")
    seed = int((card.get("repeat") or {}).get("seed", 0))
    overrides: dict[str, Any] = {"runtime": "local", "oracle_eval": False}
    if data_root is not None:
        overrides["data_root"] = data_root
    if state_dir is not None:
        overrides["state_dir"] = str(state_dir)
    cfg = card_config(card, **overrides)
    if shards and all((Path(f) / "vertical.json").is_file() for f in shards):
        graph, names, raw_ids, own_classes = _vertical_graph(shards, cfg)
    elif shards:
        graph, names, raw_ids, own_classes = _own_graph(shards, cfg)
    else:
        if dataset is not None and dataset != cfg.dataset:
            raise ConfigError(f"the model was trained on '{cfg.dataset}', not '{dataset}'; pass "
                              f"--dataset {cfg.dataset} (or leave it out)")
        if str(cfg.dataset).startswith("own:"):
            raise ConfigError("the model was trained on the organisations' own data; pass their "
                              "ingest folders with --shards")
        from fedgl.data.datasets import load_graph

        graph, names, raw_ids, own_classes = load_graph(cfg), None, None, None
    if graph.num_features != card["architecture"]["in_channels"]:
        raise ConfigError(f"the data has {graph.num_features} features per node, the model "
                          f"takes {card['architecture']['in_channels']}; give the data it was "
                          "trained on")
    scores, ledger = load_path(spec.predict)(graph, cfg, seed, parts)
    orgs = []
    for k in sorted(scores):
        node_ids, log_probs = scores[k]
        name = names[k] if names else f"client-{k}"
        ids = ([raw_ids[int(i)] for i in node_ids] if raw_ids is not None
               else [str(int(i)) for i in node_ids])
        orgs.append(OrganisationScores(name, ids, torch.exp(log_probs.float()), node_ids))
    if own_classes and len(own_classes) == len(card.get("classes") or []):
        # the organisations' names (a deployed run's card numbers them)
        card = {**card, "classes": [str(c) for c in own_classes]}
    return Prediction(card, orgs, ledger.summary())


def _own_graph(shards: list[str | Path], cfg: Any
               ) -> tuple[Any, list[str], list[str], list[str] | None]:
    """The organisations' graph of a local trial over their ingest folders (the set-up of
    ``fedgl run --shards``), their names (the folders'), every node's own id, from each
    organisation's private ingest, and their class names."""
    from fedgl.data.own.placement import (
        POSITIONS_FORMAT,
        assign_positions,
        owned_graph,
        place,
        read_ingest,
        read_request,
    )

    if not str(cfg.dataset).startswith("own:"):
        raise ConfigError(f"the model was trained on '{cfg.dataset}', not on own data; leave "
                          "--shards out")
    folders = [Path(f) for f in shards]
    ingests = [read_ingest(f) for f in folders]
    positions, facts = assign_positions([read_request(f) for f in folders])
    if f"own:{facts['name']}" != cfg.dataset:
        raise ConfigError(f"the ingest folders hold 'own:{facts['name']}', the model was "
                          f"trained on '{cfg.dataset}'; give the folders it was trained on")
    placed = []
    names: dict[int, str] = {}
    raw = [""] * int(facts["num_nodes"])
    for folder, name, ingest in zip(folders, _names(folders), ingests, strict=True):
        k = int(ingest[0]["client_id"])
        pos = positions[k]
        meta = {"format": POSITIONS_FORMAT, "client_id": k, **facts}
        placed.append(place(ingest, (meta, pos)))
        names[k] = name
        for p, node in zip(pos["own"].tolist(), read_own_ids(folder, ingest[1]["own"]),
                           strict=True):
            raw[int(p)] = node
    placed.sort(key=lambda t: t[0].client_id)
    graph = owned_graph([d for d, _ in placed], [s for _, s in placed], facts["name"])
    return graph, [names[k] for k in sorted(names)], raw, ingests[0][0].get("classes")


def _vertical_graph(shards: list[str | Path], cfg: Any
                    ) -> tuple[Any, list[str], list[str], list[str] | None]:
    """The vertical parties' aligned graph over their ``fedgl ingest --vertical`` folders (the
    PSI run here, as ``fedgl run --shards`` runs it), their names, every common entity's own
    id and the class names (from a label holder's private ingest)."""
    from fedgl.data.own.ingest import VERTICAL_FORMAT, read_npz
    from fedgl.privacy.vertical_align import align_in_process, aligned_graph

    folders = [Path(f) for f in shards]
    parties = [read_npz(f, "vertical.json", VERTICAL_FORMAT) for f in folders]
    names_of = {int(m["client_id"]): n for (m, _), n in zip(parties, _names(folders),
                                                            strict=True)}
    name = parties[0][0]["name"]
    if f"own:{name}" != cfg.dataset:
        raise ConfigError(f"the ingest folders hold 'own:{name}', the model was trained on "
                          f"'{cfg.dataset}'; give the folders it was trained on")
    common: dict[int, Any] = {}
    aligned, _ = align_in_process(parties, common)
    graph = aligned_graph(aligned, name, {"dataset": f"own:{name}"})
    holder = min(int(m["client_id"]) for m, _ in parties if m["classes"] is not None)
    by_id = {int(m["client_id"]): (f, a) for (m, a), f in zip(parties, folders, strict=True)}
    folder, arrays = by_id[holder]
    ids = read_own_ids(folder, arrays["own"])
    raw = [ids[int(i)] for i in common[holder]]
    classes = next(m["classes"] for m, _ in parties if int(m["client_id"]) == holder)
    return graph, [names_of[k] for k in sorted(names_of)], raw, classes


def _names(folders: list[Path]) -> list[str]:
    """Each organisation's file name: its ingest folder's name, with the folder above where
    two are alike (``north/ingest`` -> ``north-ingest``), else ``client-<k>``."""
    full = [f.resolve() for f in folders]
    for names in ([f.name for f in full], [f"{f.parent.name}-{f.name}" for f in full]):
        if len(set(names)) == len(names):
            return names
    return [f"client-{k}" for k in range(len(folders))]
