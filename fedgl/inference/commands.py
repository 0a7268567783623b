"""``fedgl predict``: the command around :func:`fedgl.inference.predict.predict`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fedgl.inference.predict import Prediction, predict
from fedgl.output import OutputFolder


def cmd_predict(args: argparse.Namespace) -> int:
    """Score, then write every CSV and ``prediction.json`` into ``--out`` at once (the folder is
    checked and locked before any work; nothing is half-written)."""
    folder = OutputFolder(args.out, overwrite=args.overwrite)
    folder.open()
    try:
        result = predict(args.model, dataset=args.dataset, shards=args.shards,
                         data_root=args.data_root, best=args.best,
                         state_dir=args.state_dir)
        folder.commit(lambda staging: write_prediction(result, staging))
    finally:
        folder.close()
    for org in result.organisations:
        print(f"{org.name}: {len(org.ids)} nodes scored -> {Path(args.out) / (org.name + '.csv')}")
    return 0


def write_prediction(result: Prediction, out: Path) -> None:
    """The CSVs and ``prediction.json``: the model's digest and rounds, each file's rows, and
    the bytes the set-up exchange sent."""
    paths = result.write(out)
    card = result.card
    summary = {"model_sha256": card.get("sha256"), "algorithm": card.get("algorithm"),
               "rounds": card.get("rounds"), "classes": card.get("classes"),
               "organisations": [{"name": o.name, "file": p.name, "nodes": len(o.ids)}
                                 for o, p in zip(result.organisations, paths, strict=True)],
               "exchange": result.exchange}
    (out / "prediction.json").write_text(json.dumps(summary, indent=2) + "\n")
