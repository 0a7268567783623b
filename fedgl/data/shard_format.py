"""The on-disk client shard of a deployment: one organisation's data, no pickle.

A shard is two files in one folder, named for the client:

``client-<k>.json`` (the manifest, UTF-8 JSON)::

    {"format": "fedgl-shard/1", "setting": "horizontal", "client_id": 3,
     "num_classes": 7, "num_nodes": 812, "num_features": 1433,
     "arrays": {"x": {"dtype": "float32", "shape": [812, 1433]}, ...},
     "npz": "client-3.npz", "npz_sha256": "<hex>", "source": {...}}

``client-<k>.npz`` (numpy's zip of ``.npy`` arrays, read with ``allow_pickle=False``):

- horizontal (:class:`~fedgl.data.client_data.ClientData`): ``node_ids`` (int64, the client's
  own global node ids, sorted), ``x`` (features of those nodes), ``y`` (labels),
  ``train_mask`` / ``val_mask`` / ``test_mask`` (bool), ``edge_index`` (int64 ``[2, E]``: every
  edge into an owned node, columns ``(source, destination)`` in global ids; a source the client
  does not own is a remote endpoint known by id only, never by its features) and, for own
  data, ``keys`` (uint8 ``[own + remote, 16]``: the pseudonyms of its own nodes, then of its
  remote neighbours in ascending id order; they stay when new nodes move the global ids).
- vertical (:class:`~fedgl.data.vertical.VerticalClientData`, manifest ``"setting":
  "vertical"``; GLASU): ``columns`` (int64 ``[d_m]``, the sorted global ids of the feature
  columns held), ``x`` (``[num_nodes, d_m]``: every node's values in those columns; row ``i`` is
  global node ``i``), ``edge_index`` (int64 ``[2, E_m]``: the client's own edge set over the
  shared node set, both directions of each kept undirected edge) and, only at a client holding
  labels (every client, or client 0 with ``label_holders: one``), ``y`` (int64 ``[num_nodes]``)
  and ``train_mask`` / ``val_mask`` / ``test_mask`` (bool ``[num_nodes]``): all four or none.
  ``num_features`` in the manifest is ``d_m``; ``labels`` says whether the client holds them.
  The server holds no data in the vertical setting (it learns the training node ids from a
  label holder during the run).

The manifest names every array with its dtype and shape and the npz file's SHA-256; a reader
refuses a shard whose files disagree with it. ``source`` records how the shard was made (dataset,
partition, seed): provenance only, never read back.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedgl.data.client_data import ClientData
from fedgl.data.vertical import VerticalClientData
from fedgl.errors import DataError

FORMAT = "fedgl-shard/1"
HORIZONTAL = ("node_ids", "x", "y", "train_mask", "val_mask", "test_mask", "edge_index")
#: arrays a horizontal shard may hold: ``keys`` (own data's pseudonyms of its rows)
OPTIONAL = ("keys",)
VERTICAL = ("columns", "x", "edge_index", "y", "train_mask", "val_mask", "test_mask")


def shard_paths(folder: str | Path, client_id: int) -> tuple[Path, Path]:
    """The manifest and array file of client ``client_id`` in ``folder``."""
    folder = Path(folder)
    return folder / f"client-{client_id}.json", folder / f"client-{client_id}.npz"


def ids_path(manifest: str | Path, client_id: int) -> Path:
    """The organisation's private map from its shard's node numbers to its own raw ids
    (``node,id``), beside the shard's manifest (written by ``fedgl place`` from the ingest's
    ``ids.csv``; never read by anyone but the organisation's own client)."""
    folder = Path(manifest) if Path(manifest).is_dir() else Path(manifest).parent
    return folder / f"client-{client_id}.ids.csv"


def write_ids(path: Path, nodes: list[int], ids: list[str]) -> None:
    """Write :func:`ids_path`'s file: one ``node,id`` row per own node (atomically)."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["node", "id"])
    w.writerows(zip(nodes, ids, strict=True))
    write_atomic(path, buf.getvalue().encode())


def read_ids(manifest: str | Path, client_id: int) -> dict[int, str] | None:
    """The map :func:`write_ids` wrote for ``client_id`` beside ``manifest``, or None."""
    import csv

    path = ids_path(manifest, client_id)
    if not path.is_file():
        return None
    try:
        with path.open(newline="") as f:
            return {int(row["node"]): str(row["id"]) for row in csv.DictReader(f)}
    except (KeyError, ValueError, TypeError) as exc:
        raise DataError(f"'{path}' is not a node,id file ({exc}); write it again with fedgl "
                        "place") from None


def write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_shard(shard: ClientData | VerticalClientData, folder: str | Path,
                source: dict[str, Any] | None = None) -> Path:
    """Write one client's shard (manifest and arrays) into ``folder``; returns the manifest."""
    import io

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vertical = isinstance(shard, VerticalClientData)
    names = VERTICAL if vertical else HORIZONTAL
    arrays = {n: getattr(shard, n).detach().cpu().contiguous().numpy()
              for n in (*names, *OPTIONAL) if getattr(shard, n, None) is not None}
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    data = buf.getvalue()
    manifest_path, npz_path = shard_paths(folder, shard.client_id)
    manifest = {
        "format": FORMAT, "setting": "vertical" if vertical else "horizontal",
        "client_id": int(shard.client_id), "num_classes": int(shard.num_classes),
        "num_nodes": int(shard.num_nodes), "num_features": int(shard.num_features),
        **({"labels": shard.has_labels} if vertical else {}),
        "arrays": {n: {"dtype": str(a.dtype), "shape": list(a.shape)} for n, a in arrays.items()},
        "npz": npz_path.name, "npz_sha256": hashlib.sha256(data).hexdigest(),
        "source": dict(source or {}),
    }
    write_atomic(npz_path, data)
    write_atomic(manifest_path, (json.dumps(manifest, indent=2) + "\n").encode())
    return manifest_path


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of the shard at ``path`` (its ``.json`` file), checked for form."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob("client-*.json"))
        if len(found) != 1:
            raise DataError(f"--data '{path}' is a folder with {len(found)} shard manifests; "
                            "name the client's own client-<k>.json")
        path = found[0]
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"shard manifest '{path}' does not exist; write shards with "
                        "`fedgl shard`") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"shard manifest '{path}' is unreadable ({type(exc).__name__}); write "
                        "it again with `fedgl shard`") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(f"'{path}' is not a {FORMAT} shard manifest; write it with `fedgl shard`")
    for key in ("client_id", "num_classes", "num_nodes"):
        if not isinstance(manifest.get(key), int) or isinstance(manifest.get(key), bool):
            raise DataError(f"shard manifest '{path}' lacks an integer '{key}'")
    if manifest.get("setting") not in ("horizontal", "vertical"):
        raise DataError(f"shard manifest '{path}' has no valid 'setting'")
    manifest["_path"] = str(path)
    return manifest


def read_shard(path: str | Path) -> ClientData | VerticalClientData:
    """Load the shard whose manifest is ``path`` (or the one manifest in folder ``path``)."""
    manifest = read_manifest(path)
    where = Path(manifest["_path"])
    npz_path = where.parent / str(manifest.get("npz", ""))
    if npz_path.parent != where.parent or not npz_path.is_file():
        raise DataError(f"shard arrays '{npz_path}' are missing; copy client-<k>.npz next to "
                        "its manifest")
    data = npz_path.read_bytes()
    if hashlib.sha256(data).hexdigest() != manifest.get("npz_sha256"):
        raise DataError(f"shard arrays '{npz_path}' do not match the manifest's SHA-256; copy "
                        "both files again")
    import io

    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {n: npz[n] for n in npz.files}
    except (ValueError, OSError) as exc:
        raise DataError(f"shard arrays '{npz_path}' are unreadable ({exc})") from None
    declared = manifest.get("arrays", {})
    if set(arrays) != set(declared):
        raise DataError(f"shard '{where}' arrays {sorted(arrays)} differ from the manifest's")
    for name, arr in arrays.items():
        spec = declared[name]
        if str(arr.dtype) != spec.get("dtype") or list(arr.shape) != spec.get("shape"):
            raise DataError(f"shard '{where}': array '{name}' is {arr.dtype}{list(arr.shape)}, "
                            f"the manifest says {spec.get('dtype')}{spec.get('shape')}")
    tensors = {n: torch.from_numpy(np.array(a)) for n, a in arrays.items()}
    common = {"client_id": manifest["client_id"], "num_classes": manifest["num_classes"]}
    try:
        if manifest["setting"] == "vertical":
            _check_vertical(where, manifest, tensors)
            return VerticalClientData(num_nodes=manifest["num_nodes"], **common,
                                      **{n: tensors.get(n) for n in VERTICAL})
        missing = [n for n in HORIZONTAL if n not in tensors]
        if missing:
            raise DataError(f"shard '{where}' lacks arrays {missing}")
        shard = ClientData(**common, **{n: tensors[n] for n in HORIZONTAL},
                           keys=tensors.get("keys"))
    except TypeError as exc:
        raise DataError(f"shard '{where}' does not hold a client's data ({exc})") from None
    rows = shard.num_nodes + len(shard.remote_neighbors())
    if shard.keys is not None and (shard.keys.dtype != torch.uint8
                                   or tuple(shard.keys.shape) != (rows, 16)):
        raise DataError(f"shard '{where}': array 'keys' is not one 16-byte key per own node "
                        "and remote neighbour; place the shard again with `fedgl place`")
    if shard.num_nodes != manifest["num_nodes"]:
        raise DataError(f"shard '{where}': {shard.num_nodes} nodes, the manifest says "
                        f"{manifest['num_nodes']}")
    return shard


def _check_vertical(where: Path, manifest: dict[str, Any], t: dict[str, torch.Tensor]) -> None:
    """A vertical shard's arrays must be the documented set, with consistent shapes."""
    n = manifest["num_nodes"]
    labels = ("y", "train_mask", "val_mask", "test_mask")
    unknown = sorted(set(t) - set(VERTICAL))
    missing = [a for a in ("columns", "x", "edge_index") if a not in t]
    if unknown or missing:
        raise DataError(f"shard '{where}' is not a vertical shard (arrays {sorted(t)}; it needs "
                        "columns, x, edge_index and optionally y and the masks); write it with "
                        "`fedgl shard --algorithm glasu`")
    held = [a for a in labels if a in t]
    if held and len(held) != len(labels):
        raise DataError(f"shard '{where}' holds {held} but a label holder holds y and all three "
                        "masks; write it again with `fedgl shard`")
    if bool(held) != bool(manifest.get("labels", bool(held))):
        raise DataError(f"shard '{where}': the manifest's 'labels' disagrees with its arrays")
    cols, x, edges = t["columns"], t["x"], t["edge_index"]
    problems = []
    if cols.dtype != torch.int64 or cols.dim() != 1 or (
            cols.numel() > 1 and not bool((cols[1:] > cols[:-1]).all())) or (
            cols.numel() and int(cols.min()) < 0):
        problems.append("columns must be sorted distinct int64 column ids")
    if x.dim() != 2 or list(x.shape) != [n, cols.numel()]:
        problems.append(f"x is {list(x.shape)}, not [num_nodes={n}, columns={cols.numel()}]")
    if manifest.get("num_features", cols.numel()) != cols.numel():
        problems.append(f"the manifest's num_features {manifest.get('num_features')} is not the "
                        f"{cols.numel()} columns held")
    if edges.dtype != torch.int64 or edges.dim() != 2 or edges.size(0) != 2 or (
            edges.numel() and not (0 <= int(edges.min()) and int(edges.max()) < n)):
        problems.append(f"edge_index must be int64 [2, E] with node ids below {n}")
    if held:
        if t["y"].dim() != 1 or t["y"].numel() != n or t["y"].dtype != torch.int64:
            problems.append(f"y must be int64 [{n}]")
        if any(t[m].dtype != torch.bool or list(t[m].shape) != [n] for m in labels[1:]):
            problems.append(f"the masks must be bool [{n}]")
    if problems:
        raise DataError(f"shard '{where}': {'; '.join(problems)}; write it again with "
                        "`fedgl shard`")
