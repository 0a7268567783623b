"""DP accounting: every release of the same features counts (repeats, resumes), per-release
values and the composed totals are in the result."""

from __future__ import annotations

import pytest

import fedgl
from fedgl.privacy.dp import GaussianMechanism, compose, gaussian_epsilon
from tests.helpers import interrupt_at

BASE = dict(dataset="sbm", sbm_nodes=200, clients=3, rounds=4, dp_epsilon=2.0, progress=False)


def test_gaussian_epsilon_inverts_the_calibration():
    mech = GaussianMechanism(2.0, 1e-5, 1.0)
    assert gaussian_epsilon(mech.sensitivity / mech.sigma, 1e-5) == pytest.approx(2.0, rel=1e-6)
    four = compose(mech, 4)
    assert four["epsilon"] == 8.0 and four["delta"] == pytest.approx(4e-5)
    assert 2.0 < four["gaussian_epsilon"] < 8.0  # exact composition is tighter than basic


def test_repeats_compose():
    res = fedgl.run(**BASE, repeats=3)
    totals = [r.extra["privacy"]["dp"]["accounting"]["run_total"] for r in res.repeats]
    assert [t["releases"] for t in totals] == [1, 2, 3]
    assert [t["epsilon"] for t in totals] == [2.0, 4.0, 6.0]
    assert totals[2]["delta"] == pytest.approx(3e-5)
    for rep in res.repeats:
        acc = rep.extra["privacy"]["dp"]["accounting"]
        assert acc["per_release"]["epsilon"] == 2.0
        assert set(acc["releases_per_client"].values()) == {1}


def test_a_resumed_run_counts_the_release_before_and_after(tmp_path):
    out = tmp_path / "run"

    stop = interrupt_at(2)

    with pytest.raises(KeyboardInterrupt):
        fedgl.run(**BASE, checkpoint_every=1, out=str(out), on_round=stop)
    rep = fedgl.run(resume=out, progress=False).repeats[0]
    acc = rep.extra["privacy"]["dp"]["accounting"]
    assert set(acc["releases_per_client"].values()) == {2}  # fresh noise after the resume
    assert acc["repeat_total"]["epsilon"] == 4.0 and acc["run_total"]["releases"] == 2


def test_a_restarted_client_counts_a_second_release():
    """A restarted client process (fresh object from its own data, as the Ray runtime does)
    draws fresh noise when pre-training is re-run: its release count becomes 2, the others
    resend their first release and stay at 1."""
    from fedgl.algorithms.fedgcn.client import FedGCNClient
    from fedgl.privacy.dp import account
    from tests.helpers import fedgcn_federation, random_graph, random_partition

    graph = random_graph(nodes=60, seed=5)
    part = random_partition(graph.num_nodes, 3, seed=5)
    server = fedgcn_federation(graph, part, hops=2, dp_epsilon=2.0)
    server.pretrain()
    old = server.runtime.local_client(1)
    server.runtime.replace_client(1, FedGCNClient(old.data, old.config, old.seed))  # the restart
    server.restore_client(1)
    counts = account(GaussianMechanism(2.0, 1e-5, 1.0),
                     server.privacy_stats["dp_releases"])["releases_per_client"]
    assert counts == {"0": 1, "1": 2, "2": 1}
