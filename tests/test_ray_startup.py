"""Ray start-up: requests the cluster can never grant are refused at once, a client that dies
while starting is restarted under the failure policy, a fresh local instance is started unless
an address is given, and an unreachable address fails within a timeout. Loopback only."""

from __future__ import annotations

import socket
import time

import pytest

import fedgl
from fedgl.algorithms.fedgcn.server import FedGCNServer
from fedgl.algorithms.runner import run_federated
from fedgl.errors import FedglError, RunAborted
from fedgl.federation import ray_runtime
from fedgl.progress import round_progress

ray = pytest.importorskip("ray")

BASE = dict(dataset="sbm", sbm_nodes=300, clients=3, rounds=3, progress=False)


@pytest.mark.parametrize(("key", "value", "words"), [
    ("client_cpus", 64.0, ["--client-cpus 64", "largest has 2"]),
    ("client_gpus", 1.0, ["--client-gpus 1", "largest has 0"]),
    ("client_cpus", 1.0, ["3 clients x --client-cpus 1", "has 2"]),
])
def test_requests_the_cluster_cannot_grant_are_refused(local_ray, key, value, words):
    t0 = time.monotonic()
    with pytest.raises(FedglError) as info:
        fedgl.run(runtime="ray", **{**BASE, key: value})
    assert time.monotonic() - t0 < 60   # not a hang until a timeout
    for word in words:
        assert word in str(info.value)


def _run_with(client_cls, tmp_path, **changes):
    cfg = fedgl.Config(runtime="ray", out=str(tmp_path / "o"), **{**BASE, **changes})
    graph = fedgl.load_graph(cfg)
    with round_progress(False) as progress:
        return run_federated(graph, cfg, repeat=0, seed=cfg.seed, client_cls=client_cls,
                             server_cls=FedGCNServer, progress=progress)


@pytest.mark.slow   # Ray takes ~25 s to report an actor that died in its constructor
def test_client_dying_at_start_up_is_restarted(local_ray, tmp_path):
    from tests.ray_faulty_clients import DiesOnceAtStartClient

    rep = _run_with(DiesOnceAtStartClient, tmp_path)
    events = rep.extra["failures"]
    assert [(e["client"], e["action"], e["round"]) for e in events] == [(0, "restarted", 0)]
    reference = fedgl.run(**BASE)
    assert rep.final["test_acc"] == pytest.approx(reference.repeats[0].final["test_acc"], abs=1e-6)


@pytest.mark.slow
def test_client_that_never_starts_aborts_the_run(local_ray, tmp_path):
    from tests.ray_faulty_clients import AlwaysDiesAtStartClient

    with pytest.raises(RunAborted, match="client 1 died while starting.*1 restart"):
        _run_with(AlwaysDiesAtStartClient, tmp_path, max_client_restarts=1)


def test_fresh_local_instance_unless_an_address(monkeypatch):
    """``ray.init`` gets address='local' (never RAY_ADDRESS or a stale ray_current_cluster)."""
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    assert ray_runtime.start_ray(fedgl.Config(runtime="ray")) is True
    assert calls[0]["address"] == "local" and calls[0]["_node_ip_address"] == "127.0.0.1"


def test_unreachable_address_fails_within_the_timeout():
    with socket.socket() as s:   # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(FedglError, match="nothing listens at 127.0.0.1"):
        ray_runtime.check_reachable(f"127.0.0.1:{port}", timeout=2.0)
    assert time.monotonic() - t0 < 10


def test_authentication_failure_is_named():
    class AuthenticationError(Exception):
        pass

    text = ray_runtime._start_error("10.0.0.1:6379", AuthenticationError("Unauthenticated"))
    assert "token authentication failed" in text and "docs/cluster.md" in text


@pytest.mark.slow   # starts and stops a Ray instance (~15 s)
def test_stale_ray_address_is_not_joined(monkeypatch):
    """RAY_ADDRESS naming a dead cluster (as a stale ray_current_cluster would) is ignored
    without --ray-address: fedgl starts its own instance and shuts it down."""
    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    res = fedgl.run(runtime="ray", **BASE)
    assert res.repeats[0].extra["runtime"] == "ray"
    assert not ray.is_initialized()
