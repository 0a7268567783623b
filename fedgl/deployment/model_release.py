"""The end of a deployed run: every organisation that took part receives the trained model.

The coordinator writes ``<out>/model/`` as a local run does (:func:`fedgl.api.save_with_model`),
then sends each party one declared message, ``party.model`` (phase ``setup``), carrying the
global weights and the card. The party's own settings decide whether it takes it
(``fedgl client --no-model`` refuses); a party that takes it checks the weights against the
card's SHA-256 and its role's model, writes ``model/`` (the card, the weights) under its own
output folder, scores its own nodes with its role (``scores.csv``: no prediction leaves the
organisation) and its own metrics (``metrics.json``), and answers only the digest it computed,
which the coordinator compares with its own. A party accepts one model per run.

Where the coordinator never saw the model in the clear (``--encrypt-models``), it writes no
weights and sends each party the last round's encrypted model (the clients' signed CKKS
updates) with a card that names no digest (:func:`release_encrypted`): each party checks the
updates and decrypts them itself, as in every round, keeps its copy and answers the digest of
what it decrypted; the coordinator compares the answers (every copy the same). Where the model
is split among the parties (GLASU), each keeps its own part (:func:`keep_parts`).

:func:`accept_model` is the party's side (called by :meth:`fedgl.deployment.party.Party.model`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fedgl.errors import ConfigError, FedglError, RunAborted
from fedgl.federation.flower.local_link import SETUP_PHASE
from fedgl.federation.protocol import ProtocolViolation
from fedgl.trained import CARD_FILE, MAX_CARD_BYTES, encode_part, read_card, write_model

MODEL = "party.model"   # fedgl.deployment.party.MODEL
OWN_PART = "party.own_part"   # fedgl.deployment.party.OWN_PART
LOAD_PART = "party.load_part"   # fedgl.deployment.party.LOAD_PART


def release_model(runtime: Any, folder: str | Path, log: Callable[[str], None]
                  ) -> dict[int, str]:
    """Send the model in ``folder`` (a run's ``<out>/model``) to every party of ``runtime``, one
    by one (a party that refuses is named in the log, the others still get theirs); the digest
    each party answered. Nothing is sent where the folder holds no single global model."""
    folder = Path(folder)
    if not (folder / CARD_FILE).is_file():
        log("no model to hand over: the coordinator never saw it in the clear")
        return {}
    card = read_card(folder)
    if sorted(card["files"]) != ["global"]:
        log("the model is split among the parties: each keeps its own part")
        return {}
    from fedgl.trained import read_model

    parts, card = read_model(folder)
    text = (folder / CARD_FILE).read_text()
    digests = _hand_over(runtime, MODEL, {"weights": parts["global"], "card": text}, log,
                         "take the model")
    for k, got in digests.items():
        if got != card["sha256"]:
            log(f"client {k}'s copy has SHA-256 {got}, not the model's {card['sha256']}")
    if digests:
        same = all(d == card["sha256"] for d in digests.values())
        log(f"model handed over to {len(digests)} of {len(runtime.client_ids)} organisations"
            + (f"; every copy's SHA-256 is {card['sha256'][:16]}..." if same else ""))
    return digests


def _final_card(result: Any, note: str, parts: list[str]) -> dict[str, Any]:
    """The card of a model the coordinator never holds (its weights are the parties'): the
    run's card of its final round, with ``note`` saying who holds what, and ``parts``."""
    from fedgl.inference.card import model_card

    rep = result.repeats[0]
    graph = result.environment.get("graph") or {}
    card = model_card(result, rep, num_features=int(graph.get("num_features", 0)),
                      num_classes=int(graph.get("num_classes", 0)))
    final = rep.history[-1]["round"] if rep.history else None
    card["rounds"] = {"final": final, "best_validation": None, "note": note}
    card["parts"] = parts
    return card


def _hand_over(runtime: Any, msg_type: str, payload: dict[str, Any],
               log: Callable[[str], None], what: str) -> dict[int, str]:
    """``msg_type`` to every party, one by one (a party that refuses is named in the log, the
    others still get theirs); the digest each answered."""
    digests: dict[int, str] = {}
    for k in runtime.client_ids:
        try:
            reply = runtime.call(msg_type, payload, phase=SETUP_PHASE, clients=[k])
        except (ProtocolViolation, RunAborted, FedglError) as exc:
            log(f"client {k} did not {what}: {exc}")
            continue
        got = reply.get(k, {}).get("sha256")
        if got is None:
            log(f"client {k} did not answer the hand-over ({what})")
            continue
        digests[k] = str(got)
    return digests


def release_encrypted(runtime: Any, result: Any, log: Callable[[str], None]) -> dict[int, str]:
    """The end of a run with ``--encrypt-models``: the coordinator never saw the model in the
    clear and keeps no copy; each party receives the last round's encrypted model
    (``runtime.encrypted_model``, the clients' signed updates) with a card that names no digest,
    decrypts it itself and answers the digest of its copy. The digests each answered; the log
    says whether every copy is the same."""
    card = _final_card(result, "the final round's model, decrypted by each organisation; the "
                               "coordinator never saw it in the clear and keeps no copy",
                       ["global"])
    card["encrypted_hand_over"] = True
    digests = _hand_over(runtime, MODEL, {"weights": runtime.encrypted_model,
                                          "card": json.dumps(card)}, log, "take the model")
    if digests:
        same = len(set(digests.values())) == 1
        log(f"encrypted model handed over to {len(digests)} of {len(runtime.client_ids)} "
            "organisations, each decrypting its own copy; "
            + (f"every copy's SHA-256 is {next(iter(digests.values()))[:16]}..." if same else
               "their copies differ: " + ", ".join(f"client {k} {d[:12]}"
                                                   for k, d in sorted(digests.items()))))
    return digests


def keep_parts(runtime: Any, result: Any, log: Callable[[str], None]) -> dict[int, str]:
    """The end of a deployed vertical run: the model is split among the parties, so the
    coordinator sends each only the card (``party.own_part``) and each writes its own part
    (``party-<m>.safetensors``) under its own folder; the digest each answered."""
    card = _final_card(result, "each party keeps its own part of the final round's model",
                       [f"party-{k}" for k in runtime.client_ids])
    digests = _hand_over(runtime, OWN_PART, {"card": json.dumps(card)}, log, "keep its part")
    if digests:
        log(f"{len(digests)} of {len(runtime.client_ids)} parties keep their own part of the "
            "model: " + ", ".join(f"party-{k} {d[:12]}" for k, d in sorted(digests.items())))
    return digests


def keep_own_part(role: Any, card_text: str, out: Path, classes: list[str] | None = None,
                  own_ids: dict[int, str] | None = None) -> dict[str, Any]:
    """A vertical party's side of ``party.own_part``: its own sub-layers (and classifier) as
    ``party-<m>.safetensors`` with the card, under ``out/model``; the reply is the digest. A
    label holder also writes the scores of its common entities (``out/scores.csv``, by its
    own raw ids where ``fedgl psi place`` kept them) and its metrics, from the run's last joint
    inference (the final round's evaluation): no prediction leaves it."""
    if len(card_text) > MAX_CARD_BYTES:
        raise ValueError("the card is larger than a model card can be")
    try:
        card = json.loads(card_text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the card is not JSON ({exc})") from None
    model, m = getattr(role, "model", None), getattr(role, "m", None)
    if not isinstance(card, dict) or not isinstance(model, torch.nn.Module) or m is None:
        raise ValueError("this client's role keeps no part of a split model")
    part = f"party-{int(m)}"
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    own = {k: v for k, v in card.items() if k not in ("files", "sha256")}
    own["received"] = {"by": part, "note": "this party's own part; the others keep theirs"}
    try:
        written = write_model(Path(out) / "model", {"parts": {part: state}, "best_parts": None},
                              own)
    except OSError as exc:
        raise ConfigError(f"the model could not be written to '{out}' ({exc.strerror}); "
                          "start fedgl client with a writable --out") from None
    reply: dict[str, Any] = {"part": part, "sha256": written["sha256"]}
    trace = getattr(role, "trace", None)
    if getattr(model, "classifier", None) is not None and trace:
        with torch.no_grad():
            log_probs = torch.log_softmax(model.classifier(trace[-1]), -1).detach().cpu()
        rows = list(range(log_probs.size(0)))
        names = [str(c) for c in (classes if classes and len(classes) == log_probs.size(1)
                                  else range(log_probs.size(1)))]
        _write_scores(Path(out) / "scores.csv",
                      [own_ids.get(r, str(r)) for r in rows] if own_ids else rows,
                      log_probs, names)
        pred, data = log_probs.argmax(1), role.data
        metrics: dict[str, Any] = {}
        for split in ("train", "val", "test"):
            mask = getattr(data, f"{split}_mask")
            total = int(mask.sum())
            metrics[f"{split}_acc"] = (float((pred[mask] == data.y[mask]).float().mean())
                                       if total else None)
            metrics[f"{split}_nodes"] = total
        (Path(out) / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        reply["scored"] = len(rows)
    return reply


def load_own_part(role: Any, out: Path) -> dict[str, Any]:
    """A vertical party's side of ``party.load_part``: its own part of the split model, as
    :func:`keep_own_part` kept it under ``out/model`` (every file checked against its card),
    loaded into its role; the reply is the part's name and digest."""
    from fedgl.trained import read_model

    model, m = getattr(role, "model", None), getattr(role, "m", None)
    if not isinstance(model, torch.nn.Module) or m is None:
        raise ValueError("this client's role keeps no part of a split model")
    part = f"party-{int(m)}"
    folder = Path(out) / "model"
    if not (folder / CARD_FILE).is_file():
        raise ValueError(f"no part of a model is kept in '{folder}'; start fedgl client with "
                         "the --out folder of the training run")
    try:
        parts, card = read_model(folder)
    except FedglError as exc:
        raise ValueError(str(exc)) from None
    if sorted(parts) != [part]:
        raise ValueError(f"'{folder}' keeps {sorted(parts)}, not this party's {part}")
    try:
        model.load_state_dict(parts[part])
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0]
        raise ValueError(f"the part kept in '{folder}' does not fit this run ({first})") from None
    return {"part": part, "sha256": str(card["sha256"])}


def predict_config(model: str | Path, overrides: dict[str, Any]) -> Any:
    """The configuration of ``fedgl server --predict MODEL_DIR``: the model card's (the run it
    was trained in), with where and how this run goes from the invocation (``out``, progress,
    the failure policy); a flag that would change what is computed is refused."""
    from fedgl.inference.load import card_config

    card = read_card(model)
    placement = {"out", "progress", "on_client_failure", "device", "threads"}
    changed = sorted(k for k, v in overrides.items() if k not in placement and v is not None
                     and k != "algorithm")
    if changed:
        raise ConfigError(f"--predict scores with the model's own settings; drop "
                          f"{', '.join('--' + k.replace('_', '-') for k in changed)}")
    cfg = card_config(card, **{k: v for k, v in overrides.items()
                               if k in placement and v is not None})
    return cfg.replace(rounds=max(1, int(cfg.rounds)))


def score_deployed(runtime: Any, cfg: Any, seed: int, model: Path,
                   log: Callable[[str], None]) -> dict[str, Any]:
    """``fedgl server --predict``: the algorithm's server set up as for training (the clients'
    facts, the same privacy), its set-up exchange (FedGCN's pre-training sums) over the
    organisations' current shards, then the model to every party, which scores its own nodes
    in its own folder. The summary (``prediction.json``): the model's digest, each party's
    answer, and the exchange's bytes."""
    from fedgl.algorithms.runner import start_server
    from fedgl.config.registry import load_path
    from fedgl.trained import read_model

    if cfg.spec.setting == "vertical":
        return _score_vertical(runtime, cfg, seed, model, log)
    parts, card = read_model(model)
    _, driver, server_path = cfg.spec.deployment()
    if driver != "fedavg" or sorted(parts) != ["global"]:
        raise ConfigError(f"a deployed '{cfg.algorithm}' model is not scored by the "
                          "organisations on their own (its inference is another exchange); "
                          "score it with `fedgl predict` over the shards")
    server, facts = start_server(runtime, load_path(server_path), cfg, seed,
                                 secure_mode=cfg.secure_sum,
                                 secagg_threshold=cfg.secagg_threshold,
                                 secure_models=cfg.secure_models)
    if facts.num_features != int(card["architecture"]["in_channels"]):
        raise ConfigError(f"the organisations' shards have {facts.num_features} features, the "
                          f"model takes {card['architecture']['in_channels']}; give the shards "
                          "of the data it was trained on")
    server.pretrain_update()
    log("set-up exchange done; handing the model over for scoring")
    digests = release_model(runtime, model, log)
    return {"model_sha256": card["sha256"], "algorithm": card.get("algorithm"),
            "organisations": {str(k): {"sha256": d} for k, d in digests.items()},
            "exchange": runtime.ledger.summary(),
            # whether only the rows that changed were exchanged, and how many (FedGCN)
            "restricted_exchange": getattr(server, "update_stats", None)}


def _score_vertical(runtime: Any, cfg: Any, seed: int, model: Path,
                    log: Callable[[str], None]) -> dict[str, Any]:
    """``fedgl server --predict`` for a model split among the parties (GLASU): ``model`` is a
    folder holding the run's card (any party's ``model/``: the coordinator holds no part). The
    server is set up over the parties' current shards (the common entities of their latest PSI
    run), each party loads the part it kept (``party.load_part``), the paper's joint inference
    runs as the run's evaluation did, and each party keeps its part again with the card, the
    label holder its scores and metrics (``party.own_part``): no prediction leaves it."""
    from fedgl.algorithms.glasu.deployed import start_vertical_server

    card = read_card(model)
    server, _ = start_vertical_server(runtime, cfg, seed)
    loaded = _hand_over(runtime, LOAD_PART, {}, log, "load its kept part")
    missing = sorted(set(runtime.client_ids) - set(loaded))
    if missing:
        raise RunAborted(f"parties {missing} could not load their part of the model (their log "
                         "says why); start each fedgl client with its training --out")
    log("every party loaded its own part; the joint inference runs")
    scores = server.evaluate()
    kept = _hand_over(runtime, OWN_PART, {"card": json.dumps(card)}, log, "keep its part")
    return {"model_sha256": None, "algorithm": card.get("algorithm"),
            "organisations": {str(k): {"part": f"party-{k}", "sha256": d}
                              for k, d in sorted(kept.items())},
            "loaded": {str(k): d for k, d in sorted(loaded.items())},
            "metrics": {k: v for k, v in scores.items() if k != "client_test_acc"},
            "exchange": runtime.ledger.summary()}


def accept_model(role: Any, weights: dict[str, Tensor], card_text: str, out: Path,
                 name: str, classes: list[str] | None = None,
                 own_ids: dict[int, str] | None = None) -> dict[str, Any]:
    """The party's side of ``party.model``: check, write ``out/model/``, score the own nodes
    (``out/scores.csv``) and write ``out/metrics.json``; the reply (the weights' digest).
    ``classes``: the organisations' own class names (its shard's), which its copy's card and
    scores use (the coordinator's card numbers them); ``own_ids``: its own raw ids of the
    shard's nodes (the scores name them), else the shard's node numbers."""
    if len(card_text) > MAX_CARD_BYTES:
        raise ValueError("the card is larger than a model card can be")
    try:
        card = json.loads(card_text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the card is not JSON ({exc})") from None
    if not isinstance(card, dict):
        raise ValueError("the card is not a fedgl model card")
    encrypted = bool(getattr(getattr(role, "config", None), "encrypt_models", False))
    if encrypted:
        # the run's models are encrypted: only the round's signed encrypted updates are the
        # run's model; the role checks them and decrypts, as in every round (a lone encrypted
        # model, or one outside the key session, is refused there: no decryption oracle)
        if isinstance(weights, dict):
            raise ValueError("this run's models are encrypted, so the coordinator never saw the "
                             "model in the clear: a model in clear is not the run's")
        weights = role.decode_weights(weights)
        if "sha256" in card or "files" in card:
            raise ValueError("the card of an encrypted model names no digest (the coordinator "
                             "never saw the weights)")
        digest = hashlib.sha256(encode_part(weights, "global")).hexdigest()
    else:
        if not isinstance(weights, dict):
            raise ValueError("this run's models are not encrypted; an encrypted model is not "
                             "its model")
        if not isinstance(card.get("files"), dict):
            raise ValueError("the card is not a fedgl model card")
        digest = hashlib.sha256(encode_part(weights, "global")).hexdigest()
        if digest != card.get("sha256") or \
                digest != (card["files"].get("global") or {}).get("sha256"):
            raise ValueError(f"the weights' SHA-256 {digest[:16]}... is not the card's")
    model = getattr(role, "model", None)
    if not isinstance(model, torch.nn.Module):
        raise ValueError("this client's role has no model to take weights")
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if {k: tuple(v.shape) for k, v in weights.items()} != shapes:
        raise ValueError("the weights do not fit this run's model")
    own = {k: v for k, v in card.items() if k not in ("best_files", "best_sha256",
                                                       "encrypted_hand_over")}
    if classes and len(classes) == len(own.get("classes") or []):
        own["classes"] = [str(c) for c in classes]
    own["received"] = {"by": name, "note": (
        "the final round's encrypted model, decrypted by this organisation at the end of the "
        "run (the coordinator never saw it in the clear)" if encrypted else
        "the final round's weights, handed over by the coordinator at the end of the run")}
    folder = Path(out)
    try:
        written = write_model(folder / "model", {"parts": {"global": weights},
                                                 "round": card.get("rounds", {}).get("final"),
                                                 "best_parts": None}, own)
    except OSError as exc:
        raise ConfigError(f"the model could not be written to '{folder}' ({exc.strerror}); "
                          "start fedgl client with a writable --out") from None
    reply: dict[str, Any] = {"sha256": written["sha256"]}
    log_probs = _own_scores(role, weights)
    if log_probs is not None:
        names = [str(c) for c in own.get("classes") or range(log_probs.size(1))]
        nodes = role.data.node_ids.tolist()
        ids = [own_ids.get(int(v), str(v)) for v in nodes] if own_ids else nodes
        _write_scores(folder / "scores.csv", ids, log_probs, names)
        counts = role._counts(log_probs.to(role._y.device))
        metrics = {f"{s}_acc": (c / t if t else None) for s, c, t in
                   zip(("train", "val", "test"), counts["correct"], counts["total"], strict=True)}
        metrics.update({f"{s}_nodes": t for s, t in
                        zip(("train", "val", "test"), counts["total"], strict=True)})
        (folder / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        reply["scored"] = int(log_probs.size(0))
    return reply


def _own_scores(role: Any, weights: dict[str, Tensor]) -> Tensor | None:
    """Log-probabilities of the own nodes where the role scores them by itself as the run's
    evaluation did (FedGCN's clients hold their pre-training aggregates; FedGAT's its matrices);
    None where inference needs another exchange (mini-batch cross-client, boundary exchanges)."""
    from fedgl.algorithms.base import GNNClient

    if not isinstance(role, GNNClient):
        return None
    try:
        return role.predict(weights).detach().cpu()
    except NotImplementedError:
        return None


def _write_scores(path: Path, ids: list[Any], log_probs: Tensor, classes: list[str]) -> None:
    import csv
    import io

    probs = torch.exp(log_probs.float())
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "prediction", *[f"p_{c}" for c in classes]])
    for node, label, row in zip(ids, probs.argmax(1).tolist(), probs.tolist(), strict=True):
        w.writerow([node, classes[label], *[f"{p:.9g}" for p in row]])
    from fedgl.trained import _atomic_write

    _atomic_write(path, buf.getvalue().encode())
