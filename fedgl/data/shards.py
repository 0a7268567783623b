"""Shard files, so that a client process loads only its own data where it runs.

The driver (the data owner's side; the experimenter in simulation) writes one file per client
holding only that client's :class:`ClientData` (tensors and plain data) and hands each client
the path and the file's SHA-256. A client process (e.g. a Ray actor) reads its file, checks the
digest, and loads it with ``torch.load(weights_only=True)``: it never reads the global dataset
or the partition (docs/cluster.md says what lives where).

Older specs without a shard file fall back to the earlier recipe: load the dataset, check its
fingerprint, read or recompute the checksummed partition, keep the client's part.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedgl.config import Config
from fedgl.data.client_data import ClientData, client_shard
from fedgl.data.datasets import default_cache_dir, load_graph
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition, partition
from fedgl.data.vertical import VerticalClientData
from fedgl.errors import DataError


@dataclass(frozen=True)
class ShardSpec:
    """Everything a client process needs to load its shard: no graph data, only a recipe."""

    config: dict
    seed: int
    client_id: int
    partition_path: str
    partition_sha256: str
    graph_fingerprint: str
    identity: dict | None = None  # the client's identity key and the roster (secure modes)
    shard_path: str = ""  # this client's shard file (written by the driver)
    shard_sha256: str = ""
    # protocol parameters for client classes built by ``from_shard`` (instead of the config)
    client_params: dict | None = None


def graph_fingerprint(graph: GraphData) -> str:
    h = hashlib.sha256()
    h.update(f"{graph.num_nodes}:{graph.num_features}:{graph.num_classes}".encode())
    h.update(graph.y.numpy().tobytes())
    h.update(graph.edge_index.numpy().tobytes())
    return h.hexdigest()


def owner_sha256(owner: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(owner, dtype=np.int64).tobytes()).hexdigest()


def make_partition(graph: GraphData, cfg: Config, seed: int) -> Partition:
    """``cfg``'s partition of ``graph``; a graph that carries its owners (the organisations' own
    data, :class:`~fedgl.data.own.placement.OwnedGraph`) keeps them."""
    given = getattr(graph, "owner", None)
    if given is not None:
        clients = int(given.max()) + 1 if len(given) else 0
        if cfg.clients != clients:
            raise DataError(f"the shards are {clients} organisations' but the config has "
                            f"{cfg.clients} clients; set --clients {clients}")
        return Partition(np.asarray(given, dtype=np.int64), clients)
    extra = {"p": cfg.mcmahan_p} if cfg.partition == "p-split" else {}
    if cfg.partition in ("metis", "metis-train"):
        extra["metis_max_degree"] = cfg.metis_max_degree
    return partition(graph, cfg.clients, method=cfg.partition, beta=cfg.beta, seed=seed,
                     min_size=cfg.min_client_size, **extra)


def write_partition_file(part: Partition, graph: GraphData, cfg: Config, seed: int,
                         cache_dir: Path | None = None) -> tuple[Path, str]:
    """Cache ``part.owner`` as ``.npy`` (written atomically); return the path and checksum."""
    digest = owner_sha256(part.owner)
    p = f":{cfg.mcmahan_p}" if cfg.partition == "p-split" else ""
    if cfg.partition in ("metis", "metis-train") and cfg.metis_max_degree:
        p = f":k{cfg.metis_max_degree}"
    key = hashlib.sha256(f"{graph_fingerprint(graph)}:{cfg.partition}:{cfg.beta}{p}:{cfg.clients}:"
                         f"{cfg.min_client_size}:{seed}".encode()).hexdigest()[:24]
    folder = (cache_dir or default_cache_dir()) / "partitions"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{key}.npy"
    if not (path.is_file() and _file_sha256(path) == digest):
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".npy.tmp")
        with os.fdopen(fd, "wb") as f:
            np.save(f, part.owner.astype(np.int64))
        os.replace(tmp, path)
    return path, digest


def _file_sha256(path: Path) -> str | None:
    try:
        return owner_sha256(np.load(path, allow_pickle=False))
    except (OSError, ValueError):
        return None


def write_client_shards(graph: GraphData, part: Partition, cfg: Config, seed: int,
                        cache_dir: Path | None = None) -> dict[int, tuple[str, str]]:
    """One file per client with only its :class:`ClientData`; returns {k: (path, sha256)}."""
    from fedgl.data.client_data import split_graph

    key = hashlib.sha256(f"{graph_fingerprint(graph)}:{owner_sha256(part.owner)}:{seed}"
                         .encode()).hexdigest()[:24]
    folder = (cache_dir or default_cache_dir()) / "shards" / key
    folder.mkdir(parents=True, exist_ok=True)
    return write_shard_files(split_graph(graph, part), folder)


def write_shard_files(shards: list[ClientData] | list[VerticalClientData],
                      folder: Path) -> dict[int, tuple[str, str]]:
    """Write each shard's fields to ``folder/client-<id>.pt`` (atomically, unchanged files kept);
    a vertical shard is tagged so the client rebuilds the right class."""
    import dataclasses
    import io

    import torch

    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for d in shards:
        buf = io.BytesIO()
        fields = {f.name: getattr(d, f.name) for f in dataclasses.fields(d)}
        if isinstance(d, VerticalClientData):
            fields["setting"] = "vertical"
        torch.save(fields, buf)
        data = buf.getvalue()
        digest = hashlib.sha256(data).hexdigest()
        path = folder / f"client-{d.client_id}.pt"
        if not (path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == digest):
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".pt.tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        out[d.client_id] = (str(path), digest)
    return out


def _load_own_shard(spec: ShardSpec) -> ClientData | VerticalClientData:
    import io

    import torch

    path = Path(spec.shard_path)
    if not path.is_file():
        raise DataError(f"client {spec.client_id}: its shard file '{path}' is not on this node; "
                        "copy it there or use a shared folder (docs/cluster.md)")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != spec.shard_sha256:
        raise DataError(f"client {spec.client_id}: shard file '{path}' does not match its digest; "
                        "delete it and rerun")
    try:
        raw = torch.load(io.BytesIO(data), weights_only=True)
        shard = (VerticalClientData(**raw) if raw.pop("setting", None) == "vertical"
                 else ClientData(**raw))
    except Exception:  # noqa: BLE001 - digest matched but content is not a shard
        raise DataError(f"client {spec.client_id}: '{path}' is not a client shard; delete it and "
                        "rerun") from None
    if shard.client_id != spec.client_id:
        raise DataError(f"client {spec.client_id}: '{path}' holds client {shard.client_id}'s "
                        "shard; rerun")
    return shard


def load_shard(spec: ShardSpec) -> ClientData | VerticalClientData:
    """This client's data: its own shard file when the spec names one (nothing else is read),
    else the dataset recipe (load locally, verify graph and partition, keep this client's)."""
    if spec.shard_path:
        return _load_own_shard(spec)
    cfg = Config.from_dict(spec.config)
    graph = load_graph(cfg)
    if graph_fingerprint(graph) != spec.graph_fingerprint:
        raise DataError(f"client {spec.client_id}: the dataset '{cfg.dataset}' on this machine "
                        "differs from the driver's; give every node the same data files")
    path = Path(spec.partition_path)
    owner = np.load(path, allow_pickle=False) if path.is_file() else None
    if owner is None or owner_sha256(owner) != spec.partition_sha256:
        owner = make_partition(graph, cfg, spec.seed).owner  # deterministic recomputation
    if owner_sha256(owner) != spec.partition_sha256:
        raise DataError(f"client {spec.client_id}: partition checksum mismatch; delete "
                        f"'{path}' and rerun")
    return client_shard(graph, Partition(owner, cfg.clients), spec.client_id)

