"""Tiny tables of three organisations (banks) for the own-data tests: accounts with string ids,
four features, a fraud label and a split; transfers within and across banks, a cross-bank
transfer listed by both banks. Also the same graph built whole from the raw tables."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import torch

from fedgl.data.graph import GraphData, clean_edge_index

BANKS = ("north", "south", "east")


def write_banks(root: Path, nodes_per_bank: int = 18, seed: int = 0,
                parquet: bool = False) -> dict:
    """``root/<bank>/nodes.csv`` and ``edges.csv`` (or .parquet); returns the raw truth:
    ``{"ids": [...], "bank": [...], "x", "label", "split", "edges": [(a, b), ...]}``."""
    rng = np.random.default_rng(seed)
    ids, bank, x, label, split = [], [], [], [], []
    for b, name in enumerate(BANKS):
        for i in range(nodes_per_bank):
            ids.append(f"{name.upper()}-{rng.integers(10**6, 10**7)}-{i}")
            bank.append(b)
            label.append("fraud" if rng.random() < 0.35 else "ok")
            x.append(np.round(rng.normal(size=4) + (1.5 if label[-1] == "fraud" else 0), 3))
            split.append(("train", "train", "val", "test", "test")[i % 5])
    n = len(ids)
    edges = set()
    while len(edges) < 3 * n:
        a, c = rng.integers(0, n, size=2)
        same = bank[a] == bank[c]
        if a != c and (same or rng.random() < 0.3):
            edges.add((int(min(a, c)), int(max(a, c))))
    edges = sorted(edges)
    for b, name in enumerate(BANKS):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        rows = [[ids[i], *map(str, x[i]), label[i], split[i]] for i in range(n) if bank[i] == b]
        header = ["account", "f1", "f2", "f3", "f4", "is_fraud", "split"]
        mine = [(ids[a], ids[c]) for a, c in edges if bank[a] == b or bank[c] == b]
        if parquet:
            import pyarrow as pa
            import pyarrow.parquet as pq

            cols = list(zip(*rows, strict=True))
            pq.write_table(pa.table({h: [float(v) if h.startswith("f") else v for v in c]
                                     for h, c in zip(header, cols, strict=True)}),
                           folder / "nodes.parquet")
            pq.write_table(pa.table({"source": [a for a, _ in mine],
                                     "target": [c for _, c in mine]}), folder / "edges.parquet")
        else:
            _csv(folder / "nodes.csv", header, rows)
            _csv(folder / "edges.csv", ["source", "target"], [list(e) for e in mine])
    return {"ids": ids, "bank": bank, "x": np.array(x), "label": label, "split": split,
            "edges": [(ids[a], ids[c]) for a, c in edges]}


def _csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def ingest_banks(root: Path, secret: Path, parquet: bool = False) -> list[Path]:
    """``fedgl ingest`` each bank into ``root/<bank>/ingest``; the folders."""
    from fedgl.cli import main

    ext = "parquet" if parquet else "csv"
    out = []
    for k, name in enumerate(BANKS):
        folder = root / name
        assert main(["ingest", "--nodes", str(folder / f"nodes.{ext}"), "--edges",
                     str(folder / f"edges.{ext}"), "--client-id", str(k), "--id-column",
                     "account", "--label-column", "is_fraud", "--split-column", "split",
                     "--classes", "fraud", "ok", "--name", "banks", "--secret", str(secret),
                     "--out", str(folder / "ingest")]) == 0
        out.append(folder / "ingest")
    return out


def whole_graph(truth: dict, secret: bytes) -> tuple[GraphData, np.ndarray]:
    """The same graph loaded whole from the raw tables, nodes numbered in pseudonym order (the
    order set-up gives them), with the banks as the partition."""
    from fedgl.data.own.secret import as_keys, pseudonyms

    keys = as_keys(pseudonyms(secret, truth["ids"]))
    order = np.argsort(keys)
    pos = np.empty(len(order), dtype=np.int64)
    pos[order] = np.arange(len(order))
    index = {s: int(pos[i]) for i, s in enumerate(truth["ids"])}
    n = len(order)
    x = torch.zeros(n, 4, dtype=torch.float32)
    x[pos] = torch.tensor(truth["x"], dtype=torch.float32)
    y = torch.zeros(n, dtype=torch.int64)
    y[pos] = torch.tensor([0 if v == "fraud" else 1 for v in truth["label"]])
    masks = {}
    for s in ("train", "val", "test"):
        m = torch.zeros(n, dtype=torch.bool)
        m[pos] = torch.tensor([v == s for v in truth["split"]])
        masks[s] = m
    e = torch.tensor([[index[a] for a, _ in truth["edges"]], [index[b] for _, b in truth["edges"]]])
    owner = np.empty(n, dtype=np.int64)
    owner[pos] = truth["bank"]
    return GraphData("whole", x, y, clean_edge_index(e, n), masks["train"], masks["val"],
                     masks["test"], 2), owner


def place_shards(root: Path, dirs: list[Path]) -> None:
    """Every bank's ``fedgl index``/``place`` into ``root/shards``, and the three keys."""
    from fedgl.cli import main
    from fedgl.privacy.identity import write_keys

    assert main(["index", *map(str, dirs), "--out", str(root / "setup")]) == 0
    for k, d in enumerate(dirs):
        assert main(["place", "--ingest", str(d), "--positions",
                     str(root / "setup" / f"positions-{k}.json"), "--out",
                     str(root / "shards")]) == 0
    write_keys(root / "keys", 3)
