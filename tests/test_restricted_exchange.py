"""Scoring after new nodes arrive exchanges only the rows that changed (FedGCN).

Three organisations hold Cora's nodes; 1 % of them (no training nodes) arrive the next day with
their edges. The federation trains on today's tables with a state folder, where every client
keeps its exchange; ``fedgl predict`` over tomorrow's ingest folders then exchanges only the rows
whose sums changed. Its scores equal those of a whole exchange over tomorrow's data (the same
model, no kept exchange), in plaintext and under the masked secure sum, for fewer bytes; and a
server that departs from the protocol is refused.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import fedgl
from fedgl.algorithms.fedgcn.update import KEPT_FILE, KeptExchange, row_fingerprints
from fedgl.federation.protocol import ProtocolViolation
from fedgl.privacy.secagg import AttackDetected
from tests._cli_helpers import cli_fixture  # noqa: F401 - the `cli` fixture
from tests.test_new_nodes import ORGS, _ingest, _write_tables

TRAIN = {"algorithm": "fedgcn", "hops": 2, "rounds": 3, "local_steps": 1, "lr": 0.5,
         "progress": False, "leakage_report": False}


def _setup(cli, root: Path, data_root) -> tuple[list[Path], list[Path], np.ndarray]:
    graph = fedgl.load_graph(fedgl.as_config(dataset="cora", data_root=str(data_root)))
    rng = np.random.default_rng(1)
    owner = rng.integers(0, len(ORGS), size=graph.num_nodes)
    held = rng.choice(np.flatnonzero(~graph.train_mask.numpy()), size=graph.num_nodes // 100,
                      replace=False)
    keep = np.ones(graph.num_nodes, dtype=bool)
    keep[held] = False
    assert cli("secret", "--out", root / "secret").code == 0
    _write_tables(root / "today", graph, owner, keep)
    before = _ingest(cli, root / "today", root / "secret", "ingest")
    _write_tables(root / "tomorrow", graph, owner, np.ones(graph.num_nodes, dtype=bool))
    after = _ingest(cli, root / "tomorrow", root / "secret", "ingest")
    return before, after, held


def _probs(pred) -> dict[str, dict[str, torch.Tensor]]:
    return {o.name: dict(zip(o.ids, o.probs, strict=True)) for o in pred.organisations}


def _same_scores(a, b) -> None:
    pa, pb = _probs(a), _probs(b)
    assert pa.keys() == pb.keys()
    for name in pa:
        assert pa[name].keys() == pb[name].keys()
        got = torch.stack([pa[name][i] for i in sorted(pa[name])])
        want = torch.stack([pb[name][i] for i in sorted(pb[name])])
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("secure_sum", ["none", "mask", pytest.param("robust", marks=pytest.mark.slow),
                                        pytest.param("he", marks=pytest.mark.slow)])
def test_scoring_new_nodes_exchanges_only_what_changed(data_root, tmp_path, cli, secure_sum):
    before, after, held = _setup(cli, tmp_path, data_root)
    state = tmp_path / "state"
    fedgl.run_shards(before, **TRAIN, secure_sum=secure_sum, state_dir=str(state),
                     out=str(tmp_path / "run"))
    model = tmp_path / "run" / "model"
    assert all((state / f"client-{k}" / KEPT_FILE).is_file() for k in range(len(ORGS)))
    spare = tmp_path / "state-copy"
    shutil.copytree(state, spare)

    restricted = fedgl.predict(model, shards=after)             # the run's state folder
    whole = fedgl.predict(model, shards=after, state_dir=tmp_path / "nothing-kept")
    _same_scores(restricted, whole)
    new = {str(i) for i in held}
    scored = set().union(*(set(o.ids) for o in restricted.organisations))
    assert new <= scored
    up_r, up_w = (p.exchange["bytes"]["pretrain"]["up"] for p in (restricted, whole))
    down_r, down_w = (p.exchange["bytes"]["pretrain"]["down"] for p in (restricted, whole))
    print(f"{secure_sum}: restricted exchange {up_r} B up / {down_r} B down, whole "
          f"{up_w} / {down_w}")
    assert down_r < down_w and up_r < up_w

    # the exchange kept now is tomorrow's: the same data again exchanges no feature rows
    again = fedgl.predict(model, shards=after)
    _same_scores(again, whole)
    assert again.exchange["bytes"]["pretrain"]["down"] < down_r

    # the kept files are the clients' own, one per client, under their own folder
    kept = KeptExchange.load(spare / "client-0")
    assert kept is not None and len(kept.touched) == len(kept.contributions)


def test_row_fingerprints_tell_rows_apart():
    rows = torch.tensor([[0.0, 1.0, 2.0], [0.0, 1.0, 2.0], [0.0, 1.0, 2.5], [0.0, 0.0, 0.0]])
    f = row_fingerprints(rows)
    assert f.shape == (4, 16)
    assert (f[0] == f[1]).all() and not (f[0] == f[2]).all() and not (f[0] == f[3]).all()
    wide = torch.zeros((2, 70_000), dtype=torch.float64)
    wide[1, 69_999] = 1.0
    g = row_fingerprints(wide)
    assert not (g[0] == g[1]).all()


def _client(data_root, tmp_path):
    """A 2-hop FedGCN client of Cora with a kept exchange in its own state folder."""
    from fedgl.algorithms.fedgcn.client import FedGCNClient
    from fedgl.data.client_data import split_graph
    from fedgl.data.shards import make_partition

    cfg = fedgl.as_config(dataset="cora", data_root=str(data_root), algorithm="fedgcn", hops=2,
                          clients=3, secure_sum="none", state_dir=str(tmp_path / "state"))
    graph = fedgl.load_graph(cfg)
    data = split_graph(graph, make_partition(graph, cfg, 0))[0]
    client = FedGCNClient(data, cfg, 0)
    n = len(client._full_touched())
    client.receive_sums(torch.ones((n, graph.num_features)), torch.ones(n - data.num_nodes,
                                                                         dtype=torch.long))
    return FedGCNClient(data, cfg, 0)


def test_a_server_that_departs_from_the_restricted_exchange_is_refused(data_root, tmp_path):
    client = _client(data_root, tmp_path)
    rows = client._full_touched()[:3]
    with pytest.raises(ProtocolViolation, match="changed_rows first"):
        client.restrict_rows(rows)           # restricting without asking what changed
    answer = client.changed_rows("x")
    assert int(answer["full"]) == 0 and len(answer["changed"]) == 0   # the same data
    with pytest.raises(ProtocolViolation, match="sorted"):
        client.restrict_rows(rows.flip(0))
    # a row it changed left out: its kept sums would go stale
    client.data.x[0] += 1.0
    answer = client.changed_rows("x")
    changed = torch.sort(answer["changed"]).values
    assert len(changed) > 0
    with pytest.raises(AttackDetected, match="left rows"):
        client.restrict_rows(changed[1:])
    client.restrict_rows(changed)             # all of them: accepted
    # the restricted release covers exactly those rows, own rows first
    touched, _, released, _ = client._release()
    assert torch.equal(torch.sort(touched).values, torch.sort(changed).values)
    assert released.size(0) == len(changed)
    with pytest.raises(ProtocolViolation, match="not streamed"):
        client.announce_rows()


def test_exchanges_kept_at_different_times_are_not_merged(data_root, tmp_path):
    """One client's kept exchange is older than the others' (a restored backup): the server
    runs the whole exchange rather than merge sums of two exchanges."""
    from fedgl.algorithms.fedgcn.client import FedGCNClient
    from fedgl.algorithms.fedgcn.server import FedGCNServer
    from fedgl.algorithms.runner import build_federation
    from fedgl.data.shards import make_partition

    cfg = fedgl.as_config(dataset="cora", data_root=str(data_root), algorithm="fedgcn", hops=2,
                          clients=3, secure_sum="none", progress=False,
                          state_dir=str(tmp_path / "state"))
    graph = fedgl.load_graph(cfg)

    def federation():
        return build_federation(graph, make_partition(graph, cfg, 0), cfg, 0, FedGCNClient,
                                FedGCNServer)

    first = federation()
    first.pretrain()                       # the training run's whole exchange, kept
    first.runtime.close()
    backup = (tmp_path / "state" / "client-1" / KEPT_FILE).read_bytes()
    second = federation()
    second.pretrain_update()               # nothing changed: restricted, ids move on
    assert second.update_stats == {"restricted": True, "changed_rows": 0}
    second.runtime.close()
    (tmp_path / "state" / "client-1" / KEPT_FILE).write_bytes(backup)   # restored: older
    third = federation()
    third.pretrain_update()
    assert third.update_stats["restricted"] is False
    third.runtime.close()


def test_no_kept_exchange_or_other_settings_ask_for_the_whole_exchange(data_root, tmp_path):
    client = _client(data_root, tmp_path)
    (tmp_path / "state" / "client-0" / KEPT_FILE).write_bytes(b"not an npz")
    assert int(client.changed_rows("x")["full"]) == 1
    fresh = _client(data_root, tmp_path / "other")
    fresh.config = fresh.config.replace(min_partial_nodes=2)
    assert int(fresh.changed_rows("x")["full"]) == 1
