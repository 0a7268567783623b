"""Run by tests/test_ray_multinode.py as ``python -m tests.ray_cluster_audit HOST:PORT``: joins
a running Ray cluster as a separate driver (its own process, so the test process's Ray state,
token and settings play no part), runs FedGCN pre-training and two rounds over 4 client actors,
and prints one JSON line: every client's node id, the nodes' addresses, and whether each actor
process holds all of its own feature rows and none of another client's."""

from __future__ import annotations

import hashlib
import json
import sys

from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.algorithms.fedgcn.server import FedGCNServer
from fedgl.algorithms.runner import build_federation
from fedgl.config import Config
from tests.helpers import random_graph, random_partition

CLIENTS = 4


def _digests(rows) -> set[str]:
    return {hashlib.sha256(r.tobytes()).hexdigest() for r in rows.float().contiguous().numpy()}


def main(address: str) -> dict:
    import ray

    graph = random_graph(nodes=80, seed=41)
    part = random_partition(graph.num_nodes, CLIENTS, seed=41)
    cfg = Config.from_dict({"clients": CLIENTS, "progress": False, "hops": 2, "rounds": 2,
                            "runtime": "ray", "ray_address": address, "dropout": 0.0})
    server = build_federation(graph, part, cfg, 0, FedGCNClient, FedGCNServer)
    try:
        server.pretrain()
        list(server.rounds())
        placement = server.runtime.placement()
        audit = {}
        for k in range(CLIENTS):
            held = set(server.runtime.feature_row_digests(k, graph.num_features))
            audit[k] = {"own_rows_held": _digests(graph.x[part.owner == k]) <= held,
                        "other_rows_held": len(held & _digests(graph.x[part.owner != k]))}
        nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    finally:
        server.runtime.close()
    return {"placement": placement, "nodes": nodes, "audit": audit,
            "disconnected": not ray.is_initialized()}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
