"""Ray clients load only their own shard file (digest-checked) and never hold a row of another
client's features: walked inside each actor after a run."""

from __future__ import annotations

import hashlib

import pytest

from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.algorithms.fedgcn.server import FedGCNServer
from fedgl.algorithms.runner import build_federation
from fedgl.config import Config
from fedgl.data.shards import ShardSpec, load_shard, write_client_shards
from fedgl.errors import DataError
from tests.helpers import random_graph, random_partition

pytest.importorskip("ray")


def _digests(rows) -> set[str]:
    return {hashlib.sha256(r.tobytes()).hexdigest() for r in rows.float().contiguous().numpy()}


def test_ray_client_process_holds_no_other_clients_feature_row(local_ray):
    graph = random_graph(nodes=90, seed=31)
    part = random_partition(graph.num_nodes, 3, seed=31)
    cfg = Config.from_dict({"clients": 3, "progress": False, "hops": 1, "rounds": 2,
                            "runtime": "ray", "dropout": 0.0})
    server = build_federation(graph, part, cfg, 0, FedGCNClient, FedGCNServer)
    try:
        server.pretrain()
        list(server.rounds())
        for k in range(3):
            held = set(server.runtime.feature_row_digests(k, graph.num_features))
            own = _digests(graph.x[part.owner == k])
            others = _digests(graph.x[part.owner != k])
            assert own <= held  # the walk does see the client's own rows
            assert not held & others
    finally:
        server.runtime.close()


def test_shard_file_is_checked_by_its_digest(tmp_path):
    graph = random_graph(nodes=40, seed=32)
    part = random_partition(graph.num_nodes, 2, seed=32)
    cfg = Config.from_dict({"clients": 2})
    shards = write_client_shards(graph, part, cfg, 0, cache_dir=tmp_path)
    path, digest = shards[1]
    spec = ShardSpec(cfg.to_dict(), 0, 1, "", "", "", shard_path=path, shard_sha256=digest)
    mine = load_shard(spec)
    assert mine.client_id == 1 and set(mine.node_ids.tolist()) == set(
        (part.owner == 1).nonzero()[0].tolist())
    with pytest.raises(DataError, match="digest"):
        load_shard(ShardSpec(cfg.to_dict(), 0, 1, "", "", "", shard_path=shards[0][0],
                             shard_sha256=digest))
    with pytest.raises(DataError, match="not on this node"):
        load_shard(ShardSpec(cfg.to_dict(), 0, 1, "", "", "", shard_path=str(tmp_path / "x.pt"),
                             shard_sha256=digest))


@pytest.mark.slow
def test_robust_secure_models_on_ray_survive_a_dropped_client(local_ray):
    """Ray, robust secure sum for pre-training and models, client 0 killed after round 2 under
    the drop policy: the remaining rounds' secure sums complete without it."""
    import fedgl

    def kill(repeat, t, server):
        if t == 2:
            server.runtime.kill_client(0)

    res = fedgl.run(dataset="sbm", sbm_nodes=300, clients=4, rounds=4, progress=False,
                    runtime="ray", on_client_failure="drop", on_round=kill,
                    secure_sum="robust", secure_models=True)
    rep = res.repeats[0]
    assert len(rep.history) == 4
    assert [(e["client"], e["action"]) for e in rep.extra["failures"]] == [(0, "dropped")]
