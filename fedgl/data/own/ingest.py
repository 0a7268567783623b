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
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedgl.data.own.checks import DEFAULT_FRACTIONS, SPLITS, write_own_ids
from fedgl.data.own.files import atomic_file, write_atomic
from fedgl.data.own.secret import read_secret, secret_check
from fedgl.errors import DataError

INGEST_FORMAT = "fedgl-ingest/1"
REQUEST_FORMAT = "fedgl-ids/1"
__all__ = ["DEFAULT_FRACTIONS", "SPLITS", "IngestSpec", "ingest", "ingest_vertical",
           "vertical_arrays", "write_own_ids"]


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


def ingest(spec: IngestSpec, secret_file: str | Path, out: str | Path,
           reader: str | None = None) -> Path:
    """Check and pseudonymise the organisation's tables, write ``out`` (see the module
    docstring); returns the request manifest (the file to hand over). ``reader``: ``"arrow"``
    (columnar, vectorised: the default where pyarrow is installed), ``"python"`` (the core
    install's reader, row by row); both give the same files and the same errors."""
    out = Path(out)
    if out.exists() and (out / "ingest.json").exists():
        raise DataError(f"'{out}' already holds an ingest; choose an empty --out folder")
    _check_spec(spec)
    secret = read_secret(secret_file)
    digests = _Digests([Path(spec.nodes), Path(spec.edges)])
    prepared = _module(reader).horizontal(spec, secret)
    arrays = prepared.arrays
    settings = settings_of(spec.name, spec.normalize_features)
    manifest = {
        "format": INGEST_FORMAT, "client_id": spec.client_id, "name": spec.name,
        "num_nodes": int(len(arrays["own"])), "num_features": int(arrays["x"].shape[1]),
        "num_edges": int(arrays["edges"].shape[1]), "num_remote": int(len(arrays["remote"])),
        "feature_columns": prepared.feature_names, "classes": prepared.classes,
        "secret_check": secret_check(secret), "settings": settings,
        "provenance": _provenance(spec, prepared.nodes_path, prepared.edges_path, digests),
    }
    request = _request(manifest, arrays)
    out.mkdir(parents=True, exist_ok=True)
    write_npz(out / "ingest.npz", arrays, manifest)
    write_json(out / "ingest.json", manifest)
    prepared.write_ids(out / OWN_IDS)
    req_npz = out / f"request-{spec.client_id}.npz"
    write_npz(req_npz, {"own": arrays["own"], "remote": arrays["remote"]}, request)
    write_json(out / f"request-{spec.client_id}.json", request)
    return out / f"request-{spec.client_id}.json"


def _module(reader: str | None) -> Any:
    """The reader's checks: :mod:`.vectorised` (pyarrow) or :mod:`.checks` (Python)."""
    from fedgl.data.own import checks, columnar

    if reader not in (None, "arrow", "python"):
        raise DataError(f"unknown table reader '{reader}'; use arrow or python")
    if reader == "python" or (reader is None and not columnar.available()):
        return checks
    if not columnar.available():
        raise DataError("the arrow table reader needs pyarrow: pip install 'fedgl[parquet]'")
    from fedgl.data.own import vectorised

    return vectorised


def _check_spec(spec: IngestSpec) -> None:
    if not isinstance(spec.client_id, int) or isinstance(spec.client_id, bool) or \
            spec.client_id < 0:
        raise DataError(f"--client-id must be an integer >= 0 (got {spec.client_id!r})")
    if not isinstance(spec.name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", spec.name):
        raise DataError(f"--name '{spec.name}' must be 1-64 letters, digits, '.', '_' or '-'")


def _provenance(spec: IngestSpec, nodes: Path, edges: Path,
                digests: _Digests | None = None) -> dict[str, Any]:
    from fedgl.version import __version__

    sums = digests.result() if digests is not None else [_sha256(nodes), _sha256(edges)]
    return {"kind": "own", "name": spec.name, "nodes_file": nodes.name,
            "nodes_sha256": sums[0], "edges_file": edges.name,
            "edges_sha256": sums[1], "ingested": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                time.gmtime()),
            "fedgl": __version__}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class _Digests:
    """The SHA-256 of the tables, computed on a daemon thread while they are read (hashlib
    releases the GIL on large blocks); ``result()`` waits for them."""

    def __init__(self, paths: list[Path]) -> None:
        self._sums: list[str] = []
        self._thread = threading.Thread(target=self._run, args=(paths,), daemon=True,
                                        name="fedgl-ingest-digests")
        self._thread.start()

    def _run(self, paths: list[Path]) -> None:
        try:
            self._sums = [_sha256(p) for p in paths]
        except OSError:   # the ingest itself names a missing or unreadable table
            self._sums = []

    def result(self) -> list[str]:
        self._thread.join()
        return self._sums


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
    """``arrays`` as ``path`` (written atomically through a file beside it, not in memory),
    its name and SHA-256 recorded in ``manifest``."""
    h = hashlib.sha256()
    with atomic_file(path) as f:
        np.savez(f, **arrays)
        f.seek(0)
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    manifest["npz"] = path.name
    manifest["npz_sha256"] = h.hexdigest()


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


def vertical_arrays(spec: IngestSpec, secret: bytes, reader: str | None = None
                   ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """One vertical party's checked tables (the same checks as :func:`ingest`), pseudonymised:
    ``own`` (``uint8 [n, 16]``, sorted) with ``x`` (and, at a label holder, ``y`` and the
    masks) in that order, ``ends`` (the pseudonyms of every edge endpoint, sorted) and
    ``edges`` (int64 ``[2, E]``, indices into ``ends``, each undirected edge once as (low,
    high)). An endpoint need not be the party's own node; alignment keeps the edges whose
    both endpoints are common."""
    meta, arrays, _ = _vertical(spec, secret, reader)
    return meta, arrays


def _vertical(spec: IngestSpec, secret: bytes, reader: str | None
              ) -> tuple[dict[str, Any], dict[str, np.ndarray], Any]:
    _check_spec(spec)
    digests = _Digests([Path(spec.nodes), Path(spec.edges)])
    prepared = _module(reader).vertical(spec, secret)
    arrays = prepared.arrays
    meta: dict[str, Any] = {"format": VERTICAL_FORMAT, "client_id": spec.client_id,
                            "name": spec.name, "num_nodes": int(len(arrays["own"])),
                            "num_features": int(arrays["x"].shape[1]),
                            "feature_columns": prepared.feature_names,
                            "classes": prepared.classes, "secret_check": secret_check(secret),
                            "num_edges": int(arrays["edges"].shape[1]),
                            "provenance": _provenance(spec, prepared.nodes_path,
                                                      prepared.edges_path, digests)}
    return meta, arrays, prepared.write_ids


def ingest_vertical(spec: IngestSpec, secret_file: str | Path, out: str | Path,
                    reader: str | None = None) -> Path:
    """``fedgl ingest --vertical``: the party's ``vertical.json``/``.npz`` in ``out``
    (pseudonyms only, no raw id), for alignment by PSI; its raw ids in the private
    ``ids.csv``."""
    out = Path(out)
    if out.exists() and (out / "vertical.json").exists():
        raise DataError(f"'{out}' already holds an ingest; choose an empty --out folder")
    meta, arrays, write_ids = _vertical(spec, read_secret(secret_file), reader)
    out.mkdir(parents=True, exist_ok=True)
    write_npz(out / "vertical.npz", arrays, meta)
    write_json(out / "vertical.json", meta)
    write_ids(out / OWN_IDS)
    return out / "vertical.json"
