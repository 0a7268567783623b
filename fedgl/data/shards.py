"""Partition files and shard loading, so that a client can load its own data where it runs.

The driver writes the partition (one owner id per node) once to a cached, checksummed file. A
client process (e.g. a Ray actor on another machine) loads the dataset from *its* data root,
checks that it is the same graph (a fingerprint of labels and edges), reads the partition file
(or, when that file is not on its machine, recomputes the deterministic partition) and verifies
the checksum, then keeps only its own :class:`ClientData`.
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


def graph_fingerprint(graph: GraphData) -> str:
    h = hashlib.sha256()
    h.update(f"{graph.num_nodes}:{graph.num_features}:{graph.num_classes}".encode())
    h.update(graph.y.numpy().tobytes())
    h.update(graph.edge_index.numpy().tobytes())
    return h.hexdigest()


def owner_sha256(owner: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(owner, dtype=np.int64).tobytes()).hexdigest()


def make_partition(graph: GraphData, cfg: Config, seed: int) -> Partition:
    return partition(graph, cfg.clients, method=cfg.partition, beta=cfg.beta, seed=seed,
                     min_size=cfg.min_client_size)


def write_partition_file(part: Partition, graph: GraphData, cfg: Config, seed: int,
                         cache_dir: Path | None = None) -> tuple[Path, str]:
    """Cache ``part.owner`` as ``.npy`` (written atomically); return the path and checksum."""
    digest = owner_sha256(part.owner)
    key = hashlib.sha256(f"{graph_fingerprint(graph)}:{cfg.partition}:{cfg.beta}:{cfg.clients}:"
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


def load_shard(spec: ShardSpec) -> ClientData:
    """Load the dataset locally, verify graph and partition, and keep only this client's data."""
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
