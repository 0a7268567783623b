"""``fedgl ingest``: one organisation's own tables to its ingest folder.

Inputs: a **nodes table** (an id column; feature columns, by default every column but the id,
label and split columns; an optional label column; an optional split column whose values are
``train``, ``val``, ``test`` or empty) and an **edges table** (a source id and a target id
column; one end must be an own node, the other may be another organisation's id). Ids are text,
pseudonymised with the federation secret (:mod:`.secret`) before anything is written.

Checks (each a one-line :class:`~fedgl.errors.DataError`, nothing written): an empty table,
duplicate ids, an empty id, a missing or non-numeric (or infinite) feature, a label that is not
a class (a number that is not a whole number, or not one of ``--classes``), a split value other
than train/val/test/empty, a node in a split without a label, an edge with no own endpoint, a
short or constant secret.

Labels are class names: whole numbers (sorted numerically) or names (sorted as text); the
federation's class list is ``--classes`` or, by default, the labels present. A node with an
empty label is unlabelled (in no split). Without a split column, each labelled node's split is
drawn from its pseudonym: ``u = int(p[8:16]) / 2^64``; train if ``u < 0.6``, val if
``u < 0.8``, else test (the same at every run, independent of row order).

Output folder (``--out``), every file written atomically:

- ``ingest.json`` and ``ingest.npz`` (private: they stay with the organisation): ``own``
  (``uint8 [n, 16]``, the own nodes' pseudonyms, sorted), ``x`` (float32 ``[n, d]``), ``y``
  (int64), ``train_mask``/``val_mask``/``test_mask``, ``remote`` (``uint8 [m, 16]``, the other
  organisations' endpoints, sorted), ``edges`` (int64 ``[2, E]``: each undirected edge once, in
  local indices where ``i < n`` is ``own[i]`` and ``n + j`` is ``remote[j]``).
- ``ids.csv`` (private): ``pseudonym,id``, the own nodes' raw ids beside their pseudonyms (hex),
  so that ``fedgl predict`` names each scored node by the organisation's own id.
- ``request-<k>.json`` and ``request-<k>.npz``: what the organisation hands to set-up
  (:mod:`.placement`): the pseudonyms ``own`` and ``remote`` and the public facts (feature
  width, number of classes and the SHA-256 of the class list, the secret's fingerprint, the
  settings' digest). No raw id, feature or label.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedgl.data.own.secret import PSEUDONYM_BYTES, as_keys, pseudonyms, read_secret, secret_check
from fedgl.data.own.tables import Table, read_table
from fedgl.data.shard_format import write_atomic
from fedgl.errors import DataError

INGEST_FORMAT = "fedgl-ingest/1"
REQUEST_FORMAT = "fedgl-ids/1"
SPLITS = ("train", "val", "test")
#: the split drawn from the pseudonym when the table has no split column
DEFAULT_FRACTIONS = (0.6, 0.2, 0.2)


@dataclass
class IngestSpec:
    """What ``fedgl ingest`` reads (its flags, or the YAML mapping file)."""

    nodes: str
    edges: str
    client_id: int
    id_column: str = "id"
    label_column: str | None = None
    feature_columns: list[str] | None = None
    split_column: str | None = None
    source_column: str = "source"
    target_column: str = "target"
    classes: list[str] | None = None
    name: str = "own"
    normalize_features: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def load_mapping(path: str | Path) -> dict[str, Any]:
    """A YAML mapping file: the ingest flags' names (``nodes``, ``edges``, ``id_column``, ...)
    as keys; relative table paths are relative to the file."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise DataError(f"mapping file '{path}' does not exist") from None
    except (OSError, yaml.YAMLError) as exc:
        raise DataError(f"mapping file '{path}' is not readable YAML ({type(exc).__name__})") \
            from None
    if not isinstance(data, dict):
        raise DataError(f"mapping file '{path}' is not a mapping of ingest settings")
    known = set(IngestSpec.__dataclass_fields__) - {"extra"} | {"secret", "out", "vertical"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise DataError(f"mapping file '{path}': unknown keys {unknown}; use {sorted(known)}")
    for key in ("nodes", "edges"):
        if isinstance(data.get(key), str) and not Path(data[key]).is_absolute():
            data[key] = str(path.parent / data[key])
    return data


def settings_of(name: str, normalize_features: bool) -> dict[str, Any]:
    """The settings that shaped an ingested shard (the run's config must say the same)."""
    return {"dataset": f"own:{name}", "normalize_features": bool(normalize_features)}


def ingest(spec: IngestSpec, secret_file: str | Path, out: str | Path) -> Path:
    """Check and pseudonymise the organisation's tables, write ``out`` (see the module
    docstring); returns the request manifest (the file to hand over)."""
    out = Path(out)
    if out.exists() and (out / "ingest.json").exists():
        raise DataError(f"'{out}' already holds an ingest; choose an empty --out folder")
    _check_spec(spec)
    secret = read_secret(secret_file)
    nodes = read_table(spec.nodes, "nodes")
    edges = read_table(spec.edges, "edges")
    ids = nodes.column(spec.id_column, "--id-column")
    _check_ids(nodes, ids)
    x, feature_names = _features(nodes, spec)
    if spec.normalize_features and bool((x >= 0).all()):
        s = x.sum(axis=1, keepdims=True)
        x = x / np.where(s == 0, 1, s)
    y, labelled, classes = _labels(nodes, spec)
    masks = _splits(nodes, spec, labelled)
    own_p = pseudonyms(secret, ids)
    order = np.argsort(as_keys(own_p), kind="stable")
    own_keys = as_keys(own_p)[order]
    if len(np.unique(own_keys)) != len(own_keys):
        raise DataError("two ids have the same pseudonym (a 2^-128 event); report it")
    if spec.split_column is None:
        masks = _drawn_split(own_p, labelled)
    edge_local, remote = _edges(edges, spec, ids, secret, order)
    arrays = {"own": own_p[order], "x": x[order].astype(np.float32), "y": y[order],
              **{f"{s}_mask": masks[s][order] for s in SPLITS},
              "remote": remote, "edges": edge_local}
    settings = settings_of(spec.name, spec.normalize_features)
    manifest = {
        "format": INGEST_FORMAT, "client_id": spec.client_id, "name": spec.name,
        "num_nodes": len(ids), "num_features": int(x.shape[1]), "num_edges": int(edge_local.shape[1]),
        "num_remote": int(len(remote)), "feature_columns": feature_names, "classes": classes,
        "secret_check": secret_check(secret), "settings": settings,
        "provenance": _provenance(spec, nodes, edges),
    }
    request = _request(manifest, arrays)
    out.mkdir(parents=True, exist_ok=True)
    write_npz(out / "ingest.npz", arrays, manifest)
    write_json(out / "ingest.json", manifest)
    write_own_ids(out / OWN_IDS, arrays["own"], [ids[i] for i in order])
    req_npz = out / f"request-{spec.client_id}.npz"
    write_npz(req_npz, {"own": arrays["own"], "remote": remote}, request)
    write_json(out / f"request-{spec.client_id}.json", request)
    return out / f"request-{spec.client_id}.json"


def _check_spec(spec: IngestSpec) -> None:
    if not isinstance(spec.client_id, int) or isinstance(spec.client_id, bool) or \
            spec.client_id < 0:
        raise DataError(f"--client-id must be an integer >= 0 (got {spec.client_id!r})")
    if not isinstance(spec.name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", spec.name):
        raise DataError(f"--name '{spec.name}' must be 1-64 letters, digits, '.', '_' or '-'")


def _check_ids(nodes: Table, ids: list[str]) -> None:
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


def _features(nodes: Table, spec: IngestSpec) -> tuple[np.ndarray, list[str]]:
    skip = {spec.id_column, spec.label_column, spec.split_column}
    names = list(spec.feature_columns) if spec.feature_columns else \
        [c for c in nodes.names if c not in skip]
    if not names:
        raise DataError(f"{nodes.path.name} has no feature column (only {', '.join(nodes.names)}); "
                        "add features or name them with --feature-columns")
    clash = sorted(set(names) & skip)
    if clash:
        raise DataError(f"--feature-columns names {clash}, the id, label or split column")
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


def _is_int(v: str) -> bool:
    return v.lstrip("+-").isdigit()


def _labels(nodes: Table, spec: IngestSpec) -> tuple[np.ndarray, np.ndarray, list[str]]:
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
        if v and not _is_int(v):
            try:
                float(v)
            except ValueError:
                continue
            raise DataError(f"{nodes.path.name} line {row}: label '{v}' is not a class (a "
                            "whole number or a name); labels name classes, not values")
    if present and any(_is_int(v) for v in present) and not all(_is_int(v) for v in present):
        raise DataError(f"{nodes.path.name}: labels mix numbers and names "
                        f"({present[:6]}); use one kind")
    numeric = bool(present) and all(_is_int(v) for v in present)
    classes = list(spec.classes) if spec.classes else present
    if numeric:
        classes = sorted({str(int(c)) for c in classes}, key=int) if not spec.classes else \
            [str(int(c)) if _is_int(c) else c for c in classes]
        col = [str(int(v)) if v else "" for v in col]
    if len(set(classes)) != len(classes):
        raise DataError(f"--classes repeats a class ({classes})")
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


def _splits(nodes: Table, spec: IngestSpec, labelled: np.ndarray) -> dict[str, np.ndarray]:
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


def _drawn_split(own_p: np.ndarray, labelled: np.ndarray) -> dict[str, np.ndarray]:
    u = own_p[:, 8:16].copy().view(">u8").reshape(-1).astype(np.float64) / 2.0**64
    a, b = DEFAULT_FRACTIONS[0], DEFAULT_FRACTIONS[0] + DEFAULT_FRACTIONS[1]
    return {"train": labelled & (u < a), "val": labelled & (u >= a) & (u < b),
            "test": labelled & (u >= b)}


def _edges(edges: Table, spec: IngestSpec, ids: list[str], secret: bytes, order: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
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
    r_order = np.argsort(as_keys(remote_p), kind="stable")
    r_rank = np.empty(len(r_order), dtype=np.int64)
    r_rank[r_order] = np.arange(len(r_order))
    local.update(zip(remote_list, (n + r_rank).tolist(), strict=True))
    e = np.array([[local[a] for a in src], [local[b] for b in dst]], dtype=np.int64)
    e = e[:, e[0] != e[1]]
    lo, hi = np.minimum(e[0], e[1]), np.maximum(e[0], e[1])
    total = n + len(remote_list)
    key = np.unique(lo * total + hi)
    return np.stack([key // total, key % total]), remote_p[r_order].reshape(-1, PSEUDONYM_BYTES)


def _provenance(spec: IngestSpec, nodes: Table, edges: Table) -> dict[str, Any]:
    from fedgl.version import __version__

    def digest(p: Path) -> str:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()

    return {"kind": "own", "name": spec.name, "nodes_file": nodes.path.name,
            "nodes_sha256": digest(nodes.path), "edges_file": edges.path.name,
            "edges_sha256": digest(edges.path), "ingested": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                          time.gmtime()),
            "fedgl": __version__}


def _request(manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    classes = json.dumps(manifest["classes"]).encode()
    return {"format": REQUEST_FORMAT, "client_id": manifest["client_id"],
            "name": manifest["name"], "num_nodes": manifest["num_nodes"],
            "num_remote": manifest["num_remote"], "num_features": manifest["num_features"],
            "num_classes": len(manifest["classes"]),
            "classes_sha256": hashlib.sha256(classes).hexdigest(),
            "secret_check": manifest["secret_check"],
            "settings_sha256": settings_digest(manifest["settings"])}


def settings_digest(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


#: the private file of the own nodes' raw ids (``pseudonym,id``)
OWN_IDS = "ids.csv"


def write_own_ids(path: Path, own: np.ndarray, ids: list[str]) -> None:
    """``pseudonym,id`` for every own node, in the ingest's order (written atomically)."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["pseudonym", "id"])
    writer.writerows(zip((bytes(row).hex() for row in own), ids, strict=True))
    write_atomic(path, buf.getvalue().encode())


def read_own_ids(folder: Path, own: np.ndarray) -> list[str]:
    """The organisation's own ids in its ingest's order (``own``: the pseudonyms): the raw ids
    its ingest kept privately (:data:`OWN_IDS`), else the pseudonyms in hex."""
    import csv

    hexes = [bytes(row).hex() for row in own]
    path = Path(folder) / OWN_IDS
    if not path.is_file():
        return hexes
    with path.open(newline="") as f:
        raw = {row["pseudonym"]: row["id"] for row in csv.DictReader(f)}
    return [raw.get(h, h) for h in hexes]


def write_npz(path: Path, arrays: dict[str, np.ndarray], manifest: dict[str, Any]) -> None:
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    data = buf.getvalue()
    manifest["npz"] = path.name
    manifest["npz_sha256"] = hashlib.sha256(data).hexdigest()
    write_atomic(path, data)


def write_json(path: Path, manifest: dict[str, Any]) -> None:
    write_atomic(path, (json.dumps(manifest, indent=2) + "\n").encode())


def read_npz(folder: Path, manifest_name: str, fmt: str) -> tuple[dict[str, Any],
                                                                   dict[str, np.ndarray]]:
    """A manifest and its arrays (SHA-256 checked, no pickle)."""
    import io

    path = folder / manifest_name
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"'{path}' does not exist; make it with `fedgl ingest`") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"'{path}' is unreadable ({type(exc).__name__})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        raise DataError(f"'{path}' is not a {fmt} file; make it with `fedgl ingest`")
    npz = folder / str(manifest.get("npz", ""))
    if npz.parent != folder or not npz.is_file():
        raise DataError(f"'{npz}' is missing; copy it next to '{path.name}'")
    data = npz.read_bytes()
    if hashlib.sha256(data).hexdigest() != manifest.get("npz_sha256"):
        raise DataError(f"'{npz}' does not match '{path.name}' (SHA-256); copy both again")
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return manifest, arrays



VERTICAL_FORMAT = "fedgl-vertical-ingest/1"


def vertical_arrays(spec: IngestSpec, secret: bytes) -> tuple[dict[str, Any],
                                                                dict[str, np.ndarray]]:
    """One vertical party's checked tables (the same checks as :func:`ingest`), pseudonymised:
    ``own`` (``uint8 [n, 16]``, sorted) with ``x`` (and, at a label holder, ``y`` and the
    masks) in that order, ``ends`` (the pseudonyms of every edge endpoint, sorted) and
    ``edges`` (int64 ``[2, E]``, indices into ``ends``, each undirected edge once as (low,
    high)). An endpoint need not be the party's own node; alignment keeps the edges whose
    both endpoints are common."""
    _check_spec(spec)
    nodes = read_table(spec.nodes, "nodes")
    ids = nodes.column(spec.id_column, "--id-column")
    _check_ids(nodes, ids)
    x, names = _features(nodes, spec)
    own = pseudonyms(secret, ids)
    order = np.argsort(as_keys(own), kind="stable")
    arrays: dict[str, np.ndarray] = {"own": own[order], "x": x[order].astype(np.float32)}
    meta: dict[str, Any] = {"format": VERTICAL_FORMAT, "client_id": spec.client_id,
                            "name": spec.name, "num_nodes": len(ids),
                            "num_features": int(x.shape[1]), "feature_columns": names,
                            "classes": None, "secret_check": secret_check(secret)}
    if spec.label_column is not None:
        y, labelled, classes = _labels(nodes, spec)
        masks = _splits(nodes, spec, labelled) if spec.split_column is not None else \
            _drawn_split(own, labelled)
        arrays.update(y=y[order], **{f"{k}_mask": m[order] for k, m in masks.items()})
        meta["classes"] = classes
    edges = read_table(spec.edges, "edges")
    src = edges.column(spec.source_column, "--source-column")
    dst = edges.column(spec.target_column, "--target-column")
    for row, (a, b) in enumerate(zip(src, dst, strict=True), start=2):
        if not a or not b:
            raise DataError(f"{edges.path.name} line {row}: an endpoint is empty; give both ids")
    ends = sorted(set(src) | set(dst))
    ends_p = pseudonyms(secret, ends)
    e_order = np.argsort(as_keys(ends_p), kind="stable")
    rank = np.empty(len(ends), dtype=np.int64)
    rank[e_order] = np.arange(len(ends))
    local = dict(zip(ends, rank.tolist(), strict=True))
    e = np.array([[local[a] for a in src], [local[b] for b in dst]], dtype=np.int64)
    e = e[:, e[0] != e[1]]
    total = max(len(ends), 1)
    key = np.unique(np.minimum(e[0], e[1]) * total + np.maximum(e[0], e[1]))
    arrays.update(ends=ends_p[e_order], edges=np.stack([key // total, key % total]))
    meta["num_edges"] = int(key.size)
    meta["provenance"] = _provenance(spec, nodes, edges)
    return meta, arrays


def ingest_vertical(spec: IngestSpec, secret_file: str | Path, out: str | Path) -> Path:
    """``fedgl ingest --vertical``: the party's ``vertical.json``/``.npz`` in ``out``
    (pseudonyms only, no raw id), for alignment by PSI."""
    out = Path(out)
    if out.exists() and (out / "vertical.json").exists():
        raise DataError(f"'{out}' already holds an ingest; choose an empty --out folder")
    meta, arrays = vertical_arrays(spec, read_secret(secret_file))
    out.mkdir(parents=True, exist_ok=True)
    write_npz(out / "vertical.npz", arrays, meta)
    write_json(out / "vertical.json", meta)
    raw = read_table(spec.nodes, "nodes").column(spec.id_column, "--id-column")
    keys = as_keys(pseudonyms(read_secret(secret_file), raw))
    by_key = dict(zip(keys.tolist(), raw, strict=True))
    write_own_ids(out / OWN_IDS, arrays["own"],
                  [by_key[k] for k in as_keys(arrays["own"]).tolist()])
    return out / "vertical.json"
