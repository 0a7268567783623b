"""The checks of ``fedgl ingest`` over the Python reader's tables (:mod:`.tables`): the
reference behaviour, used where pyarrow is missing (the core install) or asked for
(``reader="python"``). :mod:`.vectorised` does the same over Arrow columns, giving the same
arrays and the same one-line errors (line ``k`` is the ``k - 1``-th row under the header).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedgl.data.own.files import write_atomic
from fedgl.data.own.secret import PSEUDONYM_BYTES, order_of, pseudonyms
from fedgl.data.own.tables import Table, read_table
from fedgl.errors import DataError

if TYPE_CHECKING:
    from fedgl.data.own.ingest import IngestSpec

SPLITS = ("train", "val", "test")
#: the split drawn from the pseudonym when the table has no split column
DEFAULT_FRACTIONS = (0.6, 0.2, 0.2)


@dataclass
class Prepared:
    """One organisation's checked, pseudonymised tables: ``arrays`` in the pseudonyms' order
    (``own``, ``x`` float32, at a label holder ``y`` and the masks; ``remote`` or ``ends``;
    ``edges``), the facts the manifest names, and how to write the private ``ids.csv``."""

    arrays: dict[str, np.ndarray]
    feature_names: list[str]
    classes: list[str] | None
    nodes_path: Path
    edges_path: Path
    write_ids: Callable[[Path], None]


def horizontal(spec: IngestSpec, secret: bytes) -> Prepared:
    """The Python reader's ingest of one organisation (see :func:`.ingest.ingest`)."""
    nodes = read_table(spec.nodes, "nodes")
    edges = read_table(spec.edges, "edges")
    ids = nodes.column(spec.id_column, "--id-column")
    check_ids(nodes, ids)
    x, feature_names = features(nodes, spec)
    x = normalized(x, spec)
    y, labelled, classes = labels(nodes, spec)
    masks = splits(nodes, spec, labelled)
    own_p = pseudonyms(secret, ids)
    order = order_of(own_p)
    check_distinct(own_p[order])
    if spec.split_column is None:
        masks = drawn_split(own_p, labelled)
    edge_local, remote = horizontal_edges(edges, spec, ids, secret, order)
    arrays = {"own": own_p[order], "x": x[order].astype(np.float32), "y": y[order],
              **{f"{s}_mask": masks[s][order] for s in SPLITS},
              "remote": remote, "edges": edge_local}
    return Prepared(arrays, feature_names, classes, nodes.path, edges.path,
                    lambda path: write_own_ids(path, arrays["own"], [ids[i] for i in order]))


def vertical(spec: IngestSpec, secret: bytes) -> Prepared:
    """The Python reader's vertical ingest of one party (see :func:`.ingest.vertical_arrays`)."""
    nodes = read_table(spec.nodes, "nodes")
    ids = nodes.column(spec.id_column, "--id-column")
    check_ids(nodes, ids)
    x, names = features(nodes, spec)
    own = pseudonyms(secret, ids)
    order = order_of(own)
    arrays: dict[str, np.ndarray] = {"own": own[order], "x": x[order].astype(np.float32)}
    classes = None
    if spec.label_column is not None:
        y, labelled, classes = labels(nodes, spec)
        masks = splits(nodes, spec, labelled) if spec.split_column is not None else \
            drawn_split(own, labelled)
        arrays.update(y=y[order], **{f"{k}_mask": m[order] for k, m in masks.items()})
    edges = read_table(spec.edges, "edges")
    src = edges.column(spec.source_column, "--source-column")
    dst = edges.column(spec.target_column, "--target-column")
    arrays["ends"], arrays["edges"] = vertical_edges(edges, src, dst, secret)
    return Prepared(arrays, names, classes, nodes.path, edges.path,
                    lambda path: write_own_ids(path, arrays["own"], [ids[i] for i in order]))


def normalized(x: np.ndarray, spec: IngestSpec) -> np.ndarray:
    """``--normalize-features``: each row divided by its sum where every feature is >= 0."""
    if spec.normalize_features and bool((x >= 0).all()):
        s = x.sum(axis=1, keepdims=True)
        x = x / np.where(s == 0, 1, s)
    return x


def check_distinct(sorted_own: np.ndarray) -> None:
    """Refuse two ids with one pseudonym (``sorted_own``: the pseudonyms in byte order)."""
    if len(sorted_own) > 1 and bool((sorted_own[1:] == sorted_own[:-1]).all(axis=1).any()):
        raise DataError("two ids have the same pseudonym (a 2^-128 event); report it")


def drawn_split(own_p: np.ndarray, labelled: np.ndarray) -> dict[str, np.ndarray]:
    """The split of each labelled node drawn from its pseudonym (60/20/20)."""
    u = own_p[:, 8:16].copy().view(">u8").reshape(-1).astype(np.float64) / 2.0**64
    a, b = DEFAULT_FRACTIONS[0], DEFAULT_FRACTIONS[0] + DEFAULT_FRACTIONS[1]
    return {"train": labelled & (u < a), "val": labelled & (u >= a) & (u < b),
            "test": labelled & (u >= b)}


def write_own_ids(path: Path, own: np.ndarray, ids: list[str]) -> None:
    """``pseudonym,id`` for every own node, in the ingest's order (written atomically)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["pseudonym", "id"])
    writer.writerows(zip((bytes(row).hex() for row in own), ids, strict=True))
    write_atomic(path, buf.getvalue().encode())


def check_ids(nodes: Table, ids: list[str]) -> None:
    """Refuse an empty or repeated id (the first, by line)."""
    for row, s in enumerate(ids, start=2):
        if not s:
            raise DataError(f"{nodes.path.name} line {row}: the id is empty; give every node an id")
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        for row, s in enumerate(ids, start=2):
            if s in seen:
                raise DataError(f"{nodes.path.name} line {row}: id '{s}' appears twice; each "
                                "node once")
            seen.add(s)


def features(nodes: Table, spec: IngestSpec) -> tuple[np.ndarray, list[str]]:
    """``x`` (float64 ``[n, d]``, row order) and the feature columns' names; a missing,
    non-numeric or infinite feature refused (the first, by column then line)."""
    names = feature_names(list(nodes.names), spec, nodes.path.name)
    x = np.empty((len(nodes), len(names)), dtype=np.float64)
    for j, name in enumerate(names):
        col = nodes.column(name, "--feature-columns")
        try:
            x[:, j] = np.asarray(col, dtype=np.float64) if "" not in col else _bad(col, name, nodes)
        except ValueError:
            _bad(col, name, nodes)
        if not np.isfinite(x[:, j]).all():
            row = int(np.flatnonzero(~np.isfinite(x[:, j]))[0]) + 2
            raise DataError(f"{nodes.path.name} line {row}: feature '{name}' is "
                            f"'{col[row - 2]}', not a finite number; clean or impute it")
    return x, names


def _bad(col: list[str], name: str, nodes: Table) -> np.ndarray:
    """Raise the error of a feature column that is not all numbers."""
    for row, v in enumerate(col, start=2):
        if v == "":
            raise DataError(f"{nodes.path.name} line {row}: feature '{name}' is missing; impute "
                            "it or leave the column out with --feature-columns")
        try:
            float(v)
        except ValueError:
            raise DataError(f"{nodes.path.name} line {row}: feature '{name}' is '{v}', not a "
                            "number; encode it numerically or leave the column out with "
                            "--feature-columns") from None
    raise DataError(f"{nodes.path.name}: feature '{name}' is not numeric")


def is_int(v: str) -> bool:
    """Whether a label is a whole number (a class number)."""
    return v.lstrip("+-").isdigit()


def labels(nodes: Table, spec: IngestSpec) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(y, labelled, classes)``: each node's class index, whether it has a label, and the
    federation's class list (``--classes``, else the labels present, numbers numerically)."""
    n = len(nodes)
    if spec.label_column is None:   # an organisation without labels: the federation's classes
        classes = list(spec.classes or [])
        if len(classes) < 2 or len(set(classes)) != len(classes):
            raise DataError("give --label-column, or --classes (the federation's, at least 2) "
                            "for an organisation without labels")
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), classes
    col = nodes.column(spec.label_column, "--label-column")
    present = sorted({v for v in col if v})
    for row, v in enumerate(col, start=2):
        if v and not is_int(v):
            try:
                float(v)
            except ValueError:
                continue
            raise DataError(f"{nodes.path.name} line {row}: label '{v}' is not a class (a "
                            "whole number or a name); labels name classes, not values")
    classes, numeric = class_names(present, spec.classes, nodes.path.name)
    if numeric:
        col = [str(int(v)) if v else "" for v in col]
    index = {c: i for i, c in enumerate(classes)}
    y = np.zeros(n, dtype=np.int64)
    labelled = np.zeros(n, dtype=bool)
    for i, v in enumerate(col):
        if not v:
            continue
        if v not in index:
            raise DataError(f"{nodes.path.name} line {i + 2}: label '{v}' is not one of the "
                            f"classes {classes}; fix the label or --classes")
        y[i], labelled[i] = index[v], True
    if len(classes) < 2:
        raise DataError(f"{nodes.path.name}: {len(classes)} class(es) {classes}; node "
                        "classification needs at least 2 (list the federation's with --classes)")
    return y, labelled, classes


def splits(nodes: Table, spec: IngestSpec, labelled: np.ndarray) -> dict[str, np.ndarray]:
    """The train/val/test masks of the split column (all empty without one)."""
    n = len(nodes)
    masks = {s: np.zeros(n, dtype=bool) for s in SPLITS}
    if spec.split_column is None:
        return masks
    col = nodes.column(spec.split_column, "--split-column")
    for i, v in enumerate(col):
        v = v.lower()
        if v == "":
            continue
        if v not in masks:
            raise DataError(f"{nodes.path.name} line {i + 2}: split '{col[i]}' is not train, val, "
                            "test or empty")
        if not labelled[i]:
            raise DataError(f"{nodes.path.name} line {i + 2}: the node is in the {v} split but "
                            "has no label; label it or leave its split empty")
        masks[v][i] = True
    return masks


def horizontal_edges(edges: Table, spec: IngestSpec, ids: list[str], secret: bytes,
                     order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(edges [2, E] in local indices, each undirected edge once as (low, high), sorted;
    remote pseudonyms sorted)``; self-loops and repeats dropped."""
    src = edges.column(spec.source_column, "--source-column")
    dst = edges.column(spec.target_column, "--target-column")
    n = len(ids)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    local: dict[str, int] = dict(zip(ids, rank.tolist(), strict=True))
    remote_ids: set[str] = set()
    for row, (a, b) in enumerate(zip(src, dst, strict=True), start=2):
        if not a or not b:
            raise DataError(f"{edges.path.name} line {row}: an endpoint is empty; give both ids")
        a_own, b_own = a in local, b in local
        if not a_own:
            if not b_own:
                raise DataError(f"{edges.path.name} line {row}: edge ('{a}', '{b}') has no own "
                                "endpoint; an organisation lists only edges of its own nodes")
            remote_ids.add(a)
        elif not b_own:
            remote_ids.add(b)
    remote_list = sorted(remote_ids)
    remote_p = pseudonyms(secret, remote_list)
    r_order = order_of(remote_p)
    r_rank = np.empty(len(r_order), dtype=np.int64)
    r_rank[r_order] = np.arange(len(r_order))
    local.update(zip(remote_list, (n + r_rank).tolist(), strict=True))
    e = np.array([[local[a] for a in src], [local[b] for b in dst]], dtype=np.int64)
    e = e[:, e[0] != e[1]]
    lo, hi = np.minimum(e[0], e[1]), np.maximum(e[0], e[1])
    total = n + len(remote_list)
    key = np.unique(lo * total + hi)
    return np.stack([key // total, key % total]), remote_p[r_order].reshape(-1, PSEUDONYM_BYTES)


def vertical_edges(edges: Table, src: list[str], dst: list[str], secret: bytes
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(ends, edges)`` of a vertical party: the pseudonyms of every endpoint, sorted, and
    each undirected edge once as (low, high) indices into them."""
    for row, (a, b) in enumerate(zip(src, dst, strict=True), start=2):
        if not a or not b:
            raise DataError(f"{edges.path.name} line {row}: an endpoint is empty; give both ids")
    ends = sorted(set(src) | set(dst))
    ends_p = pseudonyms(secret, ends)
    e_order = order_of(ends_p)
    rank = np.empty(len(ends), dtype=np.int64)
    rank[e_order] = np.arange(len(ends))
    local = dict(zip(ends, rank.tolist(), strict=True))
    e = np.array([[local[a] for a in src], [local[b] for b in dst]], dtype=np.int64)
    e = e[:, e[0] != e[1]]
    total = max(len(ends), 1)
    key = np.unique(np.minimum(e[0], e[1]) * total + np.maximum(e[0], e[1]))
    return ends_p[e_order].reshape(-1, PSEUDONYM_BYTES), np.stack([key // total, key % total])


def class_names(present: list[str], given: Any, where: str) -> tuple[list[str], bool]:
    """The class list from the labels ``present`` (sorted, non-empty ones) or ``--classes``
    (``given``), and whether the labels are numbers (then the classes are their whole-number
    spellings, in numeric order unless given); mixed or repeated classes are one line."""
    if present and any(is_int(v) for v in present) and not all(is_int(v) for v in present):
        raise DataError(f"{where}: labels mix numbers and names ({present[:6]}); use one kind")
    numeric = bool(present) and all(is_int(v) for v in present)
    classes = list(given) if given else present
    if numeric:
        classes = sorted({str(int(c)) for c in classes}, key=int) if not given else \
            [str(int(c)) if is_int(c) else c for c in classes]
    if len(set(classes)) != len(classes):
        raise DataError(f"--classes repeats a class ({classes})")
    return classes, numeric


def feature_names(columns: list[str], spec: IngestSpec, where: str) -> list[str]:
    """The feature columns: ``--feature-columns``, else every column but the id, label and
    split; none, or one of those three named, is one line."""
    skip = {spec.id_column, spec.label_column, spec.split_column}
    names = list(spec.feature_columns) if spec.feature_columns else \
        [c for c in columns if c not in skip]
    if not names:
        raise DataError(f"{where} has no feature column (only {', '.join(columns)}); add "
                        "features or name them with --feature-columns")
    clash = sorted(set(names) & skip)
    if clash:
        raise DataError(f"--feature-columns names {clash}, the id, label or split column")
    return names
