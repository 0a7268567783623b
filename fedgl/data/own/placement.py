"""Set-up of the organisations' own data: integer positions from pseudonyms, then the shards.

1. **Positions** (:func:`assign_positions`, ``fedgl index``; whoever runs the set-up, e.g. the
   server, which then sees pseudonyms only): from every organisation's request
   (``request-<k>.json/.npz`` from ``fedgl ingest``) it checks, before any value crosses, that
   the organisations agree (one secret by its fingerprint, one feature width, one class list by
   its digest, one data set name and settings, client ids ``0..K-1``, no id owned twice), then
   numbers the ``N`` owned pseudonyms of all organisations in byte order: position
   ``rank(p)``. Each organisation gets ``positions-<k>.npz``: its own nodes' positions and its
   remote endpoints' (``-1`` where no organisation owns that id: such an edge is dropped).
2. **Placement** (:func:`place`, ``fedgl place``; at each organisation): its ingest and its
   positions make its :class:`~fedgl.data.client_data.ClientData` (own nodes sorted by
   position; ``edge_index`` every listed edge into an own node, ``(source, destination)`` sorted
   by destination then source, as :func:`~fedgl.data.client_data.split_graph` lists them), which
   ``fedgl place`` writes as a ``fedgl-shard/1`` shard carrying its settings and provenance.

An edge between two organisations counts at each organisation that lists it (a transfer between
two banks is in both banks' books); the whole graph (:func:`assemble`) is then their union.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedgl.data.client_data import ClientData
from fedgl.data.graph import GraphData
from fedgl.data.own.ingest import INGEST_FORMAT, REQUEST_FORMAT, read_npz, write_json, write_npz
from fedgl.data.own.secret import as_keys
from fedgl.data.provenance import own_settings, settings_sha256
from fedgl.errors import DataError

POSITIONS_FORMAT = "fedgl-positions/1"
Request = tuple[dict[str, Any], dict[str, np.ndarray]]


def read_request(path: str | Path) -> Request:
    """An organisation's request (its ``request-<k>.json``, or the ingest folder holding it)."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob("request-*.json"))
        if len(found) != 1:
            raise DataError(f"'{path}' holds {len(found)} request-<k>.json files; name one")
        path = found[0]
    return read_npz(path.parent, path.name, REQUEST_FORMAT)


def assign_positions(requests: list[Request]) -> tuple[dict[int, dict[str, np.ndarray]],
                                                       dict[str, Any]]:
    """``({client: {"own": positions, "remote": positions}}, the federation's public facts)``
    (see the module docstring); every disagreement is one :class:`DataError`."""
    if not requests:
        raise DataError("no organisation's request given")
    metas = [m for m, _ in requests]
    ids = sorted(int(m["client_id"]) for m in metas)
    if ids != list(range(len(metas))):
        raise DataError(f"the requests' client ids are {ids}; give each organisation one of "
                        f"0..{len(metas) - 1} (fedgl ingest --client-id)")
    for key, what, fix in (
            ("secret_check", "federation secrets", "ingest again with the one shared secret"),
            ("num_features", "feature widths", "give every organisation the same feature "
                                               "columns"),
            ("classes_sha256", "class lists", "give every organisation the same --classes"),
            ("settings_sha256", "data set names or feature normalisation",
             "ingest with the same --name and --normalize-features")):
        values = {int(m["client_id"]): m.get(key) for m in metas}
        if len(set(values.values())) != 1:
            shown = values if key in ("num_features",) else \
                {k: str(v)[:8] for k, v in values.items()}
            raise DataError(f"the organisations' {what} differ ({shown}); {fix}")
    by_client = {int(m["client_id"]): a for m, a in requests}
    keys = [as_keys(by_client[k]["own"]) for k in range(len(metas))]
    owner = np.concatenate([np.full(len(k), c, dtype=np.int64) for c, k in enumerate(keys)])
    allkeys = np.concatenate(keys)
    order = np.argsort(allkeys, kind="stable")
    ranked = allkeys[order]
    same = np.flatnonzero(ranked[1:] == ranked[:-1])
    if len(same):
        a, b = sorted({int(owner[order[same[0]]]), int(owner[order[same[0] + 1]])})
        raise DataError(f"{len(same)} ids are owned by more than one organisation (e.g. by "
                        f"clients {a} and {b}); each entity belongs to one organisation")
    out: dict[int, dict[str, np.ndarray]] = {}
    for c in range(len(metas)):
        own = np.searchsorted(ranked, keys[c])
        remote_keys = as_keys(by_client[c]["remote"])
        at = np.searchsorted(ranked, remote_keys).clip(max=max(len(ranked) - 1, 0))
        known = ranked[at] == remote_keys if len(ranked) else np.zeros(len(remote_keys), bool)
        out[c] = {"own": own.astype(np.int64), "remote": np.where(known, at, -1).astype(np.int64)}
    m0 = metas[0]
    facts = {"clients": len(metas), "num_nodes": int(len(ranked)),
             "nodes_per_client": [int(len(k)) for k in keys], "name": m0["name"],
             "num_features": m0["num_features"], "num_classes": m0["num_classes"],
             "secret_check": m0["secret_check"], "settings_sha256": m0["settings_sha256"],
             "unmatched_remote": {str(c): int((out[c]["remote"] < 0).sum()) for c in out}}
    return out, facts


def write_positions(folder: str | Path, positions: dict[int, dict[str, np.ndarray]],
                    facts: dict[str, Any]) -> list[Path]:
    """``positions-<k>.json/.npz`` per organisation and ``federation.json`` in ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for c, arrays in positions.items():
        manifest = {"format": POSITIONS_FORMAT, "client_id": c, **facts}
        write_npz(folder / f"positions-{c}.npz", arrays, manifest)
        write_json(folder / f"positions-{c}.json", manifest)
        paths.append(folder / f"positions-{c}.json")
    write_json(folder / "federation.json", dict(facts))
    return paths


def read_ingest(folder: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    folder = Path(folder)
    if not (folder / "ingest.json").is_file():
        raise DataError(f"'{folder}' holds no ingest.json; give a `fedgl ingest --out` folder")
    return read_npz(folder, "ingest.json", INGEST_FORMAT)


def read_positions(path: str | Path) -> Request:
    path = Path(path)
    return read_npz(path.parent, path.name, POSITIONS_FORMAT)


def place(ingested: tuple[dict[str, Any], dict[str, np.ndarray]],
          positions: Request) -> tuple[ClientData, dict[str, Any]]:
    """The organisation's :class:`ClientData` and its shard ``source`` (settings, provenance)."""
    meta, a = ingested
    pmeta, pos = positions
    k = int(meta["client_id"])
    if int(pmeta["client_id"]) != k or pmeta.get("secret_check") != meta["secret_check"]:
        raise DataError(f"positions-{pmeta['client_id']} are not for this ingest (client {k}, "
                        "its secret); use the file set-up made for it")
    n, m = len(a["own"]), len(a["remote"])
    own, remote = pos["own"], pos["remote"]
    if own.shape != (n,) or remote.shape != (m,):
        raise DataError(f"positions-{k} are for another ingest of client {k} ({own.shape[0]} own "
                        f"and {remote.shape[0]} remote ids, the ingest has {n} and {m})")
    total = int(pmeta["num_nodes"])
    glob = np.concatenate([own, remote])
    u, v = glob[a["edges"][0]], glob[a["edges"][1]]
    keep = (u >= 0) & (v >= 0)
    u_own = a["edges"][0] < n
    v_own = a["edges"][1] < n
    # an undirected edge (u, v) lists (v -> u) if u is own and (u -> v) if v is own
    src = np.concatenate([v[keep & u_own], u[keep & v_own]])
    dst = np.concatenate([u[keep & u_own], v[keep & v_own]])
    key = np.unique(dst * total + src)
    perm = np.argsort(own, kind="stable")
    data = ClientData(
        client_id=k, node_ids=torch.from_numpy(own[perm].copy()),
        x=torch.from_numpy(a["x"][perm].copy()), y=torch.from_numpy(a["y"][perm].copy()),
        train_mask=torch.from_numpy(a["train_mask"][perm].copy()),
        val_mask=torch.from_numpy(a["val_mask"][perm].copy()),
        test_mask=torch.from_numpy(a["test_mask"][perm].copy()),
        edge_index=torch.from_numpy(np.stack([key % total, key // total]).astype(np.int64)),
        num_classes=len(meta["classes"]))
    data.keys = _row_keys(data, a["own"][perm], remote, a["remote"])
    settings = own_settings(meta["name"], int(pmeta["clients"]),
                            bool(meta["settings"]["normalize_features"]))
    source = {"dataset": f"own:{meta['name']}", "partition": "own",
              "clients": int(pmeta["clients"]),
              "normalize_features": settings["normalize_features"],
              "settings": settings, "settings_sha256": settings_sha256(settings),
              "provenance": meta["provenance"], "classes": meta["classes"],
              "feature_columns": meta["feature_columns"],
              "dropped_edges": int((~keep).sum())}
    return data, source


def _row_keys(data: ClientData, own_keys: np.ndarray, remote: np.ndarray,
              remote_keys: np.ndarray) -> torch.Tensor:
    """The shard's stable row keys (:attr:`ClientData.keys`): its own nodes' pseudonyms, then
    its remote neighbours' (ascending global ids), which new nodes elsewhere do not change."""
    matched = remote >= 0
    at, keys = remote[matched], np.asarray(remote_keys, dtype=np.uint8).reshape(-1, 16)[matched]
    order = np.argsort(at, kind="stable")
    wanted = data.remote_neighbors().numpy()
    rows = order[np.searchsorted(at[order], wanted)] if len(wanted) else order[:0]
    stacked = np.concatenate([np.asarray(own_keys, dtype=np.uint8).reshape(-1, 16), keys[rows]])
    return torch.from_numpy(np.ascontiguousarray(stacked))


def setup_in_process(folders: list[str | Path]) -> tuple[list[ClientData], list[dict[str, Any]],
                                                         dict[str, Any]]:
    """Every step of set-up at once over the organisations' ingest folders (``fedgl run
    --shards``: a trial on one machine): their shards in client order, sources and facts."""
    ingests = [read_ingest(f) for f in folders]
    requests = [read_request(Path(f)) for f in folders]
    positions, facts = assign_positions(requests)
    placed = sorted((place(i, ({"format": POSITIONS_FORMAT, "client_id": int(i[0]["client_id"]),
                                **facts}, positions[int(i[0]["client_id"])]))
                     for i in ingests), key=lambda t: t[0].client_id)
    return [d for d, _ in placed], [s for _, s in placed], facts


def assemble(shards: list[ClientData], name: str) -> tuple[GraphData, np.ndarray]:
    """The whole graph the shards make (positions ``0..N-1``) and its owner array: the
    experimenter's view of a local trial, never a party's."""
    n = sum(d.num_nodes for d in shards)
    d0 = shards[0]
    x = torch.empty((n, d0.num_features), dtype=d0.x.dtype)
    y = torch.empty(n, dtype=torch.int64)
    masks = {s: torch.zeros(n, dtype=torch.bool) for s in ("train", "val", "test")}
    owner = np.empty(n, dtype=np.int64)
    for d in shards:
        ids = d.node_ids
        x[ids], y[ids], owner[ids.numpy()] = d.x, d.y, d.client_id
        for s in masks:
            masks[s][ids] = getattr(d, f"{s}_mask")
    ei = torch.cat([d.edge_index for d in shards], dim=1)
    key = torch.unique(ei[1] * n + ei[0])
    edge_index = torch.stack([key % n, key // n])
    graph = GraphData(f"own:{name}", x, y, edge_index, masks["train"], masks["val"],
                      masks["test"], d0.num_classes)
    return graph, owner


def owned_graph(shards: list[ClientData], sources: list[dict[str, Any]],
                name: str) -> OwnedGraph:
    """:func:`assemble`'s graph carrying its owners and the shards' provenance."""
    g, owner = assemble(shards, name)
    provenance = {"dataset": g.name, "partition": "the organisations' own",
                  "shards": [{"client_id": d.client_id, "num_nodes": d.num_nodes,
                              **{k: s[k] for k in ("settings_sha256", "provenance",
                                                   "dropped_edges") if k in s}}
                             for d, s in zip(shards, sources, strict=True)]}
    keys = None
    if all(d.keys is not None for d in shards):
        keys = torch.zeros((g.num_nodes, 16), dtype=torch.uint8)
        for d in shards:
            keys[d.node_ids] = d.keys[:d.num_nodes]
    return OwnedGraph(g.name, g.x, g.y, g.edge_index, g.train_mask, g.val_mask, g.test_mask,
                      g.num_classes, owner=owner, provenance=provenance,
                      class_names=list(sources[0].get("classes") or []) or None,
                      node_keys=keys)


@dataclass(eq=False)
class OwnedGraph(GraphData):
    """The assembled graph of a local trial with its owners (``owner[i]``: the organisation of
    node ``i``, the partition every run over it keeps) and the shards' provenance."""

    owner: np.ndarray | None = None
    provenance: dict[str, Any] | None = None
    #: the federation's class names (every organisation's ingest agreed on them)
    class_names: list[str] | None = None
    #: every node's pseudonym (``uint8 [N, 16]``), which its clients keep as their row keys
    #: (:attr:`~fedgl.data.client_data.ClientData.keys`)
    node_keys: torch.Tensor | None = None
