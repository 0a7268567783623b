"""A modified client against the server's checks: values beyond a public feature bound (every
pre-training mode), model updates beyond a norm bound, requests for nodes it has no edge to
(per-edge adjacency), and messages out of order. Each attack is refused with one line and
leaves the honest clients' received sums untouched; an attack within the bound goes unnoticed
(a bound limits how far a client can move a sum, not whether it does)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedgl.algorithms.fedgcn.checks import ClientMisbehaved
from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.algorithms.fedgcn.server import FedGCNServer
from fedgl.algorithms.runner import build_federation
from fedgl.config import Config
from fedgl.data.partition import Partition
from fedgl.errors import ConfigError
from fedgl.federation.messages import as_dense
from fedgl.federation.protocol import ProtocolViolation
from tests.helpers import graph_from_edges, random_graph, random_partition

LIAR = 0


@pytest.fixture(scope="module")
def small():
    graph = random_graph(nodes=90, seed=5)
    return graph, random_partition(graph.num_nodes, 4, seed=5)


def _bound(graph) -> float:
    return float(graph.x.abs().max())


def _federation(small, client_cls=FedGCNClient, **cfg):
    graph, part = small
    config = Config.from_dict({"clients": part.num_clients, "progress": False,
                               "feature_bound": _bound(graph), **cfg})
    return build_federation(graph, part, config, 0, client_cls, FedGCNServer)


def _received(server) -> dict[int, torch.Tensor | None]:
    rt = server.runtime
    return {k: rt.local_client(k).received_sums for k in rt.client_ids}


def _shifting(shift: float) -> type[FedGCNClient]:
    """Client 0 adds ``shift`` to every partial sum it uploads, in every pre-training path."""

    class Shifter(FedGCNClient):
        def block_sums(self):  # streamed plaintext
            out = super().block_sums()
            if self.data.client_id == LIAR and "sums" in out:
                out["sums"] = as_dense(out["sums"]) + shift
            return out

        def _release(self):  # plaintext with counts, masked and HE uploads
            touched, exact, released, counts = super()._release()
            if self.data.client_id == LIAR:
                released = released + shift
            return touched, exact, released, counts

    return Shifter


RayShifter = _shifting(1e3)  # importable by path: Ray actors load the class by name
RayShifter.__qualname__ = "RayShifter"

PLAIN = [pytest.param({"hops": 2}, id="2hop-streamed"), pytest.param({"hops": 1}, id="1hop"),
         pytest.param({"hops": 2, "min_contributors": 2}, id="2hop-counts")]


@pytest.mark.parametrize("cfg", PLAIN)
def test_an_upload_beyond_the_bound_stops_the_run_before_any_sum_is_delivered(small, cfg):
    server = _federation(small, _shifting(3 * _bound(small[0]) * small[0].num_nodes), **cfg)
    with pytest.raises(ClientMisbehaved, match="client 0 sent a partial sum beyond the public "
                                               "feature bound") as err:
        server.pretrain()
    assert "\n" not in str(err.value) and server.refusal_log == [str(err.value).removesuffix(
        "; the run stops")]
    assert all(v is None for v in _received(server).values())  # nothing delivered


@pytest.mark.parametrize("cfg", PLAIN)
def test_with_drop_the_liar_is_left_out_and_honest_sums_are_exact(small, cfg):
    """The honest clients receive bit for bit what they receive when client 0 is left out
    from the start; client 0 takes no part in training."""
    server = _federation(small, _shifting(1e6), on_client_failure="drop", **cfg)
    server.pretrain()
    assert list(server.refused) == [LIAR] and len(server.refusal_log) == 1
    reference = _federation(small, on_client_failure="drop", **cfg)
    reference.refused = {LIAR: "left out"}
    reference.pretrain()
    got, want = _received(server), _received(reference)
    assert got[LIAR] is None
    for k in (1, 2, 3):
        assert torch.equal(got[k], want[k])
    _, _, metrics = next(server.rounds())
    assert np.isfinite(metrics["train_loss"])
    assert server.runtime.ledger.per_client("train", "up").get(LIAR, 0) == 0


def test_a_resumed_run_still_leaves_the_refused_client_out(small, tmp_path):
    """The checkpoint keeps the clients the server refused: resuming from it re-runs the
    pre-training without the liar (it is never asked again) and continues exactly as the
    uninterrupted run, whose later rounds also go without it."""
    from fedgl.algorithms.runner import resume_repeat, round_progress
    from fedgl.checkpoint import Checkpointer, load_checkpoint

    cfg = {"hops": 2, "on_client_failure": "drop", "batch_clients": False}

    class liar(_shifting(1e6)):   # counts its uploads of partial sums
        uploads = 0

        def block_sums(self):
            self.uploads += 1
            return super().block_sums()

    server = _federation(small, liar, **cfg)
    server.pretrain()
    rounds = server.rounds()
    _, weights, _ = next(rounds)
    config = Config.from_dict({"clients": 4, "progress": False, "feature_bound": 1.0, **cfg})
    Checkpointer(tmp_path, config.to_dict(), 1).round_done(
        round_progress(server, 0, 0, 1, weights, [], []))
    progress = load_checkpoint(tmp_path).progress
    assert progress.server["refused"].keys() == {str(LIAR)}
    _, want, _ = next(rounds)   # the uninterrupted run's round 2

    resumed = _federation(small, liar, **cfg)
    start, _, _ = resume_repeat(resumed, progress)
    assert start == 2 and list(resumed.refused) == [LIAR]
    assert resumed.refusal_log == server.refusal_log
    assert server.runtime.local_client(LIAR).uploads == 1
    assert resumed.runtime.local_client(LIAR).uploads == 0   # never asked again
    assert resumed.runtime.local_client(LIAR).received_sums is None
    for k in (1, 2, 3):
        assert torch.equal(resumed.runtime.local_client(k).received_sums,
                           server.runtime.local_client(k).received_sums)
    _, got, _ = next(resumed.rounds(start))
    for name, value in want.items():
        assert torch.equal(got[name], value)


@pytest.mark.parametrize("cfg", PLAIN[:2])
def test_a_shift_within_the_bound_goes_unnoticed(small, cfg):
    """What a bound cannot stop: a small constant passes every check and moves the sums."""
    shift = 1e-3 * _bound(small[0])
    server = _federation(small, _shifting(shift), **cfg)
    server.pretrain()
    honest = _federation(small, **cfg)
    honest.pretrain()
    assert not server.refusal_log
    moved = [k for k in (1, 2, 3)
             if not torch.allclose(_received(server)[k], _received(honest)[k])]
    assert moved  # corrupted, undetected


def test_honest_runs_pass_every_bound_and_are_unchanged(small):
    """With the bound on, an honest run refuses nothing and receives the same sums as without
    it (the bound only adds checks and, for 1-hop, the degree announcement)."""
    for hops in (1, 2):
        on, off = _federation(small, hops=hops), _federation(small, hops=hops,
                                                             feature_bound=None)
        on.pretrain()
        off.pretrain()
        for k, v in _received(off).items():
            assert torch.equal(_received(on)[k], v)


@pytest.mark.parametrize("mode", ["mask", "robust"])
def test_masked_sums_beyond_the_bound_stop_the_run(small, mode):
    """The server sees only full sums: it checks them and stops (the masks hide who)."""
    server = _federation(small, _shifting(1e3), hops=2, secure_sum=mode)
    with pytest.raises(ClientMisbehaved, match="the masks hide which"):
        server.pretrain()
    assert all(v is None for v in _received(server).values())


def test_he_receivers_check_the_sums_they_decrypt(small):
    """Under HE the server sees nothing: the receiving clients check the decrypted sums."""
    pytest.importorskip("tenseal")
    server = _federation(small, _shifting(1e3), hops=1, secure_sum="he")
    with pytest.raises(ClientMisbehaved, match="received a pre-training sum beyond the public"):
        server.pretrain()
    honest = _federation(small, hops=1, secure_sum="he")
    honest.pretrain()  # the honest HE run passes the same check


def test_dp_noise_is_allowed_for_but_a_shift_is_not(small):
    honest = _federation(small, hops=2, dp_epsilon=1.0)
    honest.pretrain()
    assert not honest.refusal_log
    liar = _federation(small, _shifting(1e4), hops=2, dp_epsilon=1.0)
    with pytest.raises(ClientMisbehaved, match="beyond the public feature bound"):
        liar.pretrain()


# ---------------------------------------------------------------------- model updates
def _update_liar(change) -> type[FedGCNClient]:
    class UpdateLiar(FedGCNClient):
        def fit(self, weights, local_steps, round=1):
            out = super().fit(weights, local_steps, round)
            return change(out) if self.data.client_id == LIAR else out

    return UpdateLiar


def test_a_model_update_beyond_the_norm_bound_is_refused(small):
    shifted = _update_liar(lambda out: {**out, "weights": {n: w + 100.0 for n, w in
                                                            out["weights"].items()}})
    server = _federation(small, shifted, hops=1, update_bound=50.0, batch_clients=False)
    server.pretrain()
    with pytest.raises(ClientMisbehaved, match="model update of L2 norm .* beyond "
                                               "--update-bound 50"):
        next(server.rounds())
    # drop: the round averages the honest updates only, exactly
    server = _federation(small, shifted, hops=1, update_bound=50.0, batch_clients=False,
                         on_client_failure="drop")
    reference = _federation(small, hops=1, batch_clients=False)
    for s in (server, reference):
        s.pretrain()
    reference.refused = {LIAR: "left out"}
    got, want = next(server.rounds())[1], next(reference.rounds())[1]
    assert list(server.refused) == [LIAR]
    for name, value in want.items():
        assert torch.equal(got[name], value)


def test_a_non_finite_update_is_refused_with_a_norm_bound(small):
    poisoned = _update_liar(lambda out: {**out, "weights": {n: torch.full_like(w, float("nan"))
                                                            for n, w in out["weights"].items()}})
    server = _federation(small, poisoned, hops=1, update_bound=1e6, batch_clients=False)
    server.pretrain()
    with pytest.raises(ClientMisbehaved, match="model update of L2 norm nan"):
        next(server.rounds())


def test_a_training_node_count_beyond_the_announced_nodes_is_refused(small):
    inflated = _update_liar(lambda out: {**out, "num_train": 10**6})
    server = _federation(small, inflated, hops=1, aggregation="weighted", batch_clients=False)
    server.pretrain()
    with pytest.raises(ClientMisbehaved, match="training-node count of 1000000"):
        next(server.rounds())


# ---------------------------------------------------------------------- per-edge adjacency
def _chain():
    """3 clients: nodes 0-3 at client 0, 4-7 at client 1, 8-11 at client 2; client 0 has edges
    to nodes 4 and 5 of client 1, none to node 6."""
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8), (8, 9), (9, 10),
             (10, 11), (0, 5), (6, 11)]
    graph = graph_from_edges(edges + [(b, a) for a, b in edges], 12)
    return graph, Partition(np.repeat(np.arange(3), 4), 3)


class _AsksForSix(FedGCNClient):
    """Client 0 also asks about node 6 of client 1, which is not its neighbour."""

    def _touched(self):
        mine = super()._touched()
        return torch.cat([mine, torch.tensor([6])]) if self.data.client_id == 0 else mine

    def protocol_limits(self):  # its own message limits allow the extra row
        return {k: v + 1 for k, v in super().protocol_limits().items()}


class _ForgesConfirmation(_AsksForSix):
    """... and announces the edge (6, 3) as if it owned node 6, to confirm itself."""

    def _announcement(self, touched, num_requested):
        msg = super()._announcement(touched, num_requested)
        if self.data.client_id == 0:
            msg["cross_edges"] = torch.cat([msg["cross_edges"], torch.tensor([[6], [3]])], 1)
        return msg


def _chain_federation(client_cls, **cfg):
    graph, part = _chain()
    config = Config.from_dict({"clients": 3, "progress": False, **cfg})
    return build_federation(graph, part, config, 0, client_cls, FedGCNServer)


def test_the_node_check_lets_a_neighbouring_client_ask_for_any_node():
    """The gap the per-edge check closes: with the per-client check, client 0 receives the
    exact full sum of node 6 (client 1's node, not its neighbour)."""
    server = _chain_federation(_AsksForSix, hops=2)
    server.pretrain()
    honest = _chain_federation(FedGCNClient, hops=2)
    honest.pretrain()
    row_six = _received(server)[0][-1]
    ones = honest.runtime.local_client(1)
    assert torch.equal(row_six, _received(honest)[1][int((ones.data.node_ids == 6).nonzero())])


@pytest.mark.parametrize("hops", [1, 2])
@pytest.mark.parametrize("liar,match", [
    (_AsksForSix, "asked about node 6, but its owner \\(client 1\\) announced no edge"),
    (_ForgesConfirmation, "cross-client edge from node 6, which it does not own"),
])
def test_the_edge_check_refuses_a_node_its_owner_did_not_confirm(hops, liar, match):
    server = _chain_federation(liar, hops=hops, adjacency_check="edge")
    with pytest.raises(ClientMisbehaved, match=match) as err:
        server.pretrain()
    assert "\n" not in str(err.value)
    assert all(v is None for v in _received(server).values())


@pytest.mark.parametrize("cfg", [{"hops": 2}, {"hops": 1}, {"hops": 2, "secure_sum": "mask"}])
def test_the_edge_check_costs_the_cross_edges_and_changes_no_sum(small, cfg):
    node = _federation(small, feature_bound=None, **cfg)
    edge = _federation(small, feature_bound=None, adjacency_check="edge", **cfg)
    for s in (node, edge):
        s.pretrain()
    for k, v in _received(node).items():
        assert torch.equal(_received(edge)[k], v)
    graph, part = small
    owner = torch.from_numpy(part.owner)
    src, dst = graph.edge_index
    cross = int((owner[src] != owner[dst]).sum())  # each cross edge announced by both ends
    extra = edge.runtime.ledger.bytes("pretrain", "up") - node.runtime.ledger.bytes("pretrain",
                                                                                    "up")
    assert extra == cross * 2 * 8


# ---------------------------------------------------------------------- order
def test_training_before_the_pre_training_sums_is_refused(small):
    """``fedavg.fit``/``fedavg.evaluate`` are accepted only once the sums arrived (state
    ``ready``); refused earlier, they change nothing."""
    server = _federation(small, hops=2, feature_bound=None)
    client = server.runtime.local_client(1)
    for msg, payload in (("fedavg.fit", {"weights": server.weights, "local_steps": 1,
                                          "round": 1}),
                         ("fedavg.evaluate", {"weights": server.weights})):
        with pytest.raises(ProtocolViolation, match="out of order \\(state pretraining\\)"):
            server.runtime.call(msg, payload, phase="train")
    assert client._model is None and client.received_sums is None
    server.pretrain()
    assert client.protocol_state == "ready"
    next(server.rounds())  # in order: accepted
    zero = _federation(small, hops=0, feature_bound=None)
    next(zero.rounds())  # 0-hop has no pre-training to wait for


@pytest.mark.parametrize("values,match", [
    ({"feature_bound": -1.0}, "feature_bound must be a positive number"),
    ({"feature_bound": 1.0, "hops": 0}, "which 0-hop does not run"),
    ({"adjacency_check": "edge", "hops": 0}, "which 0-hop does not run"),
    ({"adjacency_check": "pairs"}, "adjacency_check"),
    ({"update_bound": 1.0, "secure_sum": "mask", "secure_models": True}, "update_bound needs"),
])
def test_bad_bound_settings_are_refused(values, match):
    with pytest.raises(ConfigError, match=match):
        Config.from_dict({"algorithm": "fedgcn", **values})


# ---------------------------------------------------------------------- the Ray runtime
needs_ray = pytest.mark.skipif(__import__("importlib").util.find_spec("ray") is None,
                               reason="ray is not installed")


@needs_ray
@pytest.mark.slow  # a Ray instance for one test: tens of seconds on 2 shared cores
def test_on_ray_out_of_order_training_and_out_of_bound_sums_are_refused(small, local_ray):
    """The same refusals with every client in its own actor: ``fedavg.fit`` before the sums
    (the client refuses), then masked sums beyond the bound (the server refuses)."""
    server = _federation(small, RayShifter, hops=2, secure_sum="mask", runtime="ray")
    try:
        with pytest.raises(ProtocolViolation, match="out of order"):
            server.runtime.call("fedavg.fit", {"weights": server.weights, "local_steps": 1,
                                               "round": 1}, phase="train", clients=[1])
        with pytest.raises(ClientMisbehaved, match="the masks hide which"):
            server.pretrain()
    finally:
        server.runtime.close()


class _PushesRowFive(FedGCNClient):
    """Client 0 adds B to the largest value of its upload for node 5 (client 1's node, one of
    whose neighbours, node 0, is client 0's): within node 5's degree bound, beyond one edge's."""

    def block_sums(self):
        out = super().block_sums()
        if self.data.client_id == 0 and "sums" in out and out["sums"].shape[0]:
            dense = as_dense(out["sums"]).clone()
            row = int(np.searchsorted(np.sort(self._touched().numpy()), 5))
            f = int(dense[row].abs().argmax())
            dense[row, f] += float(torch.sign(dense[row, f])) * _chain()[0].x.abs().max()
            out["sums"] = dense
        return out


def test_with_the_edge_check_a_remote_row_is_bounded_by_its_confirmed_edges():
    """Node 5 has degree 3 (+1); client 0 holds one of its neighbours. The per-degree limit
    (3/√2 B) lets client 0 push the row by B; counting the one confirmed edge (1/√2 B) does not."""
    bound = float(_chain()[0].x.abs().max())
    loose = _chain_federation(_PushesRowFive, hops=2, feature_bound=bound)
    loose.pretrain()  # undetected
    assert not loose.refusal_log
    tight = _chain_federation(_PushesRowFive, hops=2, feature_bound=bound,
                              adjacency_check="edge")
    with pytest.raises(ClientMisbehaved, match="row of node 5"):
        tight.pretrain()
