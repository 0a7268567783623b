"""A two-node Ray cluster on one machine (127.0.0.1): clients spread across nodes complete a
FedGCN run joined through ``ray_address``."""

from __future__ import annotations

import pytest

import fedgl

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")


@pytest.fixture(scope="module")
def two_nodes():
    if ray.is_initialized():
        ray.shutdown()
    cluster = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False})
    cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_fedgcn_on_two_node_cluster(two_nodes):
    res = fedgl.run(runtime="ray", ray_address=two_nodes.address, dataset="sbm", sbm_nodes=300,
                    clients=4, rounds=3, progress=False)
    rep = res.repeats[0]
    assert len(rep.history) == 3 and 0.0 <= rep.final["test_acc"] <= 1.0
    nodes = set(rep.extra["placement"].values())
    assert len(nodes) == 2, f"clients were not spread over both nodes: {rep.extra['placement']}"
    assert not ray.is_initialized()  # fedgl disconnected the driver it connected
    ray.init(address=two_nodes.address)
    alive = [n for n in ray.nodes() if n["Alive"]]
    assert len(alive) == 2 and {n["NodeManagerAddress"] for n in alive} == {"127.0.0.1"}
