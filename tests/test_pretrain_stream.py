"""FedGCN's streamed pre-training exchange: any block size gives the same sums and the appendix
formula's dense-equivalent bytes; no message and no server block exceeds one block of ids; a
restarted or dropped client restarts the stream; a reply that does not match the request is
refused."""

from __future__ import annotations

import pytest
import torch

from fedgl.algorithms.fedgcn import FedGCNClient
from fedgl.errors import RunAborted
from fedgl.federation.messages import SparseRows
from fedgl.federation.runtime import LocalRuntime
from tests.helpers import fedgcn_federation, random_graph, random_partition
from tests.test_communication import F32, I64, _formula_counts
from tests.test_sparse_pretrain import _sparse_feature_graph


def _streamed(graph, part, block, hops=2, runtime_cls=None, **cfg):
    server = fedgcn_federation(graph, part, hops=hops, pretrain_block_rows=block, **cfg)
    if runtime_cls is not None:
        server.runtime = runtime_cls({k: server.runtime.local_client(k)
                                      for k in server.runtime.client_ids}, server)
    server.pretrain()
    return server


def _sums(server):
    return {k: (server.runtime.local_client(k).received_sums,
                server.runtime.local_client(k).remote_deg_tilde)
            for k in server.runtime.client_ids}


class _Recorder(LocalRuntime):
    """Records every pre-training message's row count."""

    def __init__(self, clients, server):
        super().__init__(clients)
        self.rows: list[tuple[str, int]] = []

    def call(self, method, args=None, *, phase, clients=None):
        out = super().call(method, args, phase=phase, clients=clients)
        if method == "fedgcn.block_sums":
            self.rows += [(method, int(r["sums"].shape[0])) for r in out.values()]
        if method == "fedgcn.receive_block":
            self.rows += [(method, int(a["sums"].shape[0])) for a in args.values()]
        return out


@pytest.mark.parametrize("features", ["sparse", "dense"])
@pytest.mark.parametrize("hops,variant", [(1, "eq33"), (1, "paper-code"), (2, "eq33")])
def test_any_block_size_gives_the_same_sums_and_the_formula(features, hops, variant):
    graph = _sparse_feature_graph(200, seed=3) if features == "sparse" else random_graph(200, 3)
    part = random_partition(graph.num_nodes, 5, seed=3)
    whole = _streamed(graph, part, block=10**9, hops=hops, one_hop_variant=variant)
    assert whole.pretrain_stats["blocks"] == 1
    c_sum, nv = _formula_counts(graph, part)
    n, d, k = graph.num_nodes, graph.num_features, part.num_clients
    rows_back = n if (hops == 1 and variant == "eq33") else nv
    formula = ((c_sum * d + rows_back * d) * F32 + c_sum * I64 + k * I64
               + (0 if rows_back == n else n * I64 + (nv - n) * I64))
    for block in (1, 13, 64, 199):
        server = _streamed(graph, part, block=block, hops=hops, one_hop_variant=variant)
        stats = server.pretrain_stats
        assert stats["blocks"] == -(-n // block)
        for key, (sums, deg) in _sums(whole).items():
            got_sums, got_deg = _sums(server)[key]
            assert torch.equal(sums, got_sums)
            assert (deg is None and got_deg is None) or torch.equal(deg, got_deg)
        assert stats["bytes_up_dense_equivalent"] + stats["bytes_down_dense_equivalent"] == formula
        assert server.runtime.ledger.bytes("pretrain") == stats["bytes_up"] + stats["bytes_down"]
        if features == "dense":  # dense rows carry no per-block framing
            assert server.runtime.ledger.bytes("pretrain") == formula


def test_no_message_holds_more_than_one_block():
    graph = random_graph(240, seed=4)
    part = random_partition(graph.num_nodes, 4, seed=4)
    server = _streamed(graph, part, block=16, runtime_cls=_Recorder)
    rows = server.runtime.rows
    assert server.pretrain_stats["blocks"] == 15
    assert len(rows) == 2 * 15 * 4 and max(r for _, r in rows) <= 16
    assert sum(r for m, r in rows if m == "fedgcn.block_sums") > 16 * 4  # the exchange is not trivial


class _RestartOnce(LocalRuntime):
    """Client 1 is replaced by a fresh process (no stream state) before the third upload."""

    def __init__(self, clients, server):
        super().__init__(clients)
        self.server, self.uploads, self.restarted = server, 0, False

    def call(self, method, args=None, *, phase, clients=None):
        if method == "fedgcn.block_sums":
            self.uploads += 1
            if self.uploads == 3 and not self.restarted:
                self.restarted = True
                old = self.local_client(1)
                self.replace_client(1, FedGCNClient(old.data, old.config, seed=0))
                self.server.restore_client(1)
        return super().call(method, args, phase=phase, clients=clients)


def test_a_restarted_client_restarts_the_stream_with_the_same_result():
    graph = random_graph(160, seed=5)
    part = random_partition(graph.num_nodes, 4, seed=5)
    reference = _streamed(graph, part, block=20)
    restarted = _streamed(graph, part, block=20, runtime_cls=_RestartOnce)
    assert restarted.runtime.restarted
    for k, (sums, deg) in _sums(reference).items():
        got_sums, got_deg = _sums(restarted)[k]
        assert torch.equal(sums, got_sums) and torch.equal(deg, got_deg)
    # the interrupted attempt's messages are counted too
    assert restarted.runtime.ledger.bytes("pretrain") > reference.runtime.ledger.bytes("pretrain")


def test_client_refuses_a_block_reply_that_does_not_match_its_request():
    graph = random_graph(80, seed=6)
    part = random_partition(graph.num_nodes, 3, seed=6)
    server = fedgcn_federation(graph, part, hops=2, pretrain_block_rows=1000)
    client = server.runtime.local_client(0)
    assert client.block_sums() == {"stale": True}  # no stream announced: a fresh process
    assert client.receive_block(torch.zeros(1, graph.num_features)) == {"stale": True}
    client.announce_rows()
    client.block_sums()
    wanted = client._num_requested()
    with pytest.raises(RunAborted, match="does not match the request") as err:
        client.receive_block(torch.zeros(wanted + 1, graph.num_features),
                             degrees=torch.ones(wanted, dtype=torch.long))
    assert "\n" not in str(err.value)
    assert client.received_sums is None  # nothing half-received


def test_sparse_features_stream_sparse_messages():
    graph = _sparse_feature_graph(200, seed=7)
    part = random_partition(graph.num_nodes, 4, seed=7)
    server = _streamed(graph, part, block=50, runtime_cls=_Recorder)
    assert server.pretrain_stats["sparse_messages"] > 0
    assert isinstance(server.runtime.local_client(0).received_sums, torch.Tensor)
    assert not isinstance(server.runtime.local_client(0).received_sums, SparseRows)


def test_a_client_dropped_mid_stream_restarts_it_without_that_client():
    """Dropped at its first block upload, after announcing its rows (already planned into the
    sums):
    the stream restarts with the survivors, who receive the sums of a federation without it."""
    from tests.test_privacy_mask import _DropOnce

    graph = random_graph(100, seed=8)
    part = random_partition(graph.num_nodes, 4, seed=8)

    def dropped(method, block):
        server = fedgcn_federation(graph, part, hops=2, pretrain_block_rows=block)
        server.runtime = _DropOnce({k: server.runtime.local_client(k) for k in range(4)},
                                   victim=2, method=method)
        server.pretrain()
        return server

    at_announce = dropped("fedgcn.announce_rows", 10**9)
    mid_stream = dropped("fedgcn.block_sums", 30)
    assert mid_stream.runtime.client_ids == [0, 1, 3]
    for k in (0, 1, 3):
        assert torch.equal(_sums(at_announce)[k][0], _sums(mid_stream)[k][0])


def test_a_finished_stream_keeps_nothing_row_sized():
    """Once every requested row has arrived the client's stream keeps no ids, rows or
    incidence (on a products-sized graph the 20 clients' id arrays alone were 0.4 GB); a
    server that keeps calling still gets an empty upload, and a reply with rows is refused."""
    graph = random_graph(nodes=120, seed=2)
    part = random_partition(graph.num_nodes, 3, seed=2)
    server = _streamed(graph, part, block=16)
    d = graph.num_features
    for k in server.runtime.client_ids:
        client = server.runtime.local_client(k)
        stream = client._stream
        assert stream.done and stream.source is None and stream.features is None
        assert [len(a) for a in (stream.sorted_ids, stream.want_ids, stream.want_pos)] == [0] * 3
        assert stream.incoming.numel() == 0 and stream.remote_degrees.numel() == 0
        assert client.received_sums.size(0) > client.data.num_nodes
        assert tuple(client.block_sums()["sums"].shape) == (0, d)
        assert client.receive_block(torch.zeros((0, d))) == {}
        with pytest.raises(RunAborted, match="does not match the request"):
            client.receive_block(torch.zeros((1, d)))


def test_the_incidence_is_cut_by_block_and_each_piece_freed_once_uploaded():
    """A client cuts its incidence into one piece per block at the announcement and drops each
    piece with its upload; the sums are bitwise those of one block (every row on its own)."""
    graph = random_graph(nodes=120, seed=5)
    part = random_partition(graph.num_nodes, 3, seed=5)
    whole = _sums(_streamed(graph, part, block=10_000))
    server = fedgcn_federation(graph, part, hops=2, pretrain_block_rows=16)
    client = server.runtime.local_client(0)
    client.announce_rows()
    stream = client._stream
    assert stream.source is None and len(stream.pieces) == 120 // 16 + 2  # 8 blocks + empty
    assert sum(p.shape[0] for p in stream.pieces.values()) == len(stream.sorted_ids)
    client.block_sums()
    assert 0 not in stream.pieces and 1 in stream.pieces
    server.pretrain()  # a fresh stream for every client, run to the end
    for k, (sums, degrees) in _sums(server).items():
        assert torch.equal(sums, whole[k][0]) and torch.equal(degrees, whole[k][1])


def test_the_touched_row_bound_is_counted_once():
    """The protocol checks every message against the client's shape bounds; the number of
    touched rows (own nodes + remote neighbours) is counted once, not per message."""
    graph = random_graph(nodes=120, seed=6)
    part = random_partition(graph.num_nodes, 3, seed=6)
    server = fedgcn_federation(graph, part, hops=2)
    client = server.runtime.local_client(0)
    calls = []
    remote = client.data.remote_neighbors
    client.data.remote_neighbors = lambda: calls.append(1) or remote()
    server.pretrain()
    fit = {"weights": server.weights, "local_steps": 1}
    server.runtime.call("fedavg.fit", {**fit, "round": 1}, phase="train")
    after_first_round = len(calls)
    for t in range(2, 7):  # five more fits and five evaluations: no recount
        server.runtime.call("fedavg.fit", {**fit, "round": t}, phase="train")
        server.runtime.call("fedavg.evaluate", {"weights": server.weights}, phase="eval")
    assert len(calls) == after_first_round
    touched = client.data.num_nodes + len(remote())
    assert client.protocol_limits()["touched"] == touched > client.data.num_nodes
    assert client.protocol_limits()["plan_rows"] == touched
