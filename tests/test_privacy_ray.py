"""The secure protocols across processes (Ray actors): picklable payloads, keys that never leave
the clients, and a restarted client rejoining an encrypted run."""

from __future__ import annotations

import pytest

import fedgl

ray = pytest.importorskip("ray")

BASE = dict(dataset="sbm", sbm_nodes=300, sbm_features=16, clients=3, rounds=4, progress=False,
            oracle_eval=False, secure_sum="he", he_pack=2, encrypt_models=True,
            min_contributors=2)



def test_he_run_on_ray_matches_the_local_run_and_survives_a_restart(local_ray):
    local = fedgl.run(**BASE).repeats[0]
    remote = fedgl.run(runtime="ray", **BASE).repeats[0]
    assert remote.final["test_acc"] == pytest.approx(local.final["test_acc"], abs=0.02)
    assert remote.extra["privacy"]["protocol"]["restarts"] == 0

    def kill(repeat, t, server):
        if t == 2:
            server.runtime.kill_client(1)  # not the key holder: it gets the same key again

    again = fedgl.run(runtime="ray", on_round=kill, **BASE).repeats[0]
    assert [e["action"] for e in again.extra["failures"]] == ["restarted"]
    assert again.final["test_acc"] == pytest.approx(local.final["test_acc"], abs=0.02)
