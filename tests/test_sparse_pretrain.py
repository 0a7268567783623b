"""FedGCN's pre-training at scale: sparse payloads, chunked sums, the ledger against the
appendix formulas on the chunked path, and identical training on real data."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from fedgl.algorithms.fedgcn import FedGCNClient, FedGCNServer
from fedgl.api import load_graph
from fedgl.config import Config
from fedgl.data.graph import GraphData
from fedgl.federation.codec import roundtrip
from fedgl.federation.messages import (
    SparseRows,
    compact_rows,
    copy_payload,
    payload_dense_nbytes,
    payload_nbytes,
    smallest_uint,
)
from tests.helpers import fedgcn_federation, random_graph, random_partition
from tests.test_communication import F32, I64, _formula_counts


def test_sparse_rows_roundtrip_and_size():
    x = torch.zeros(300, 70_000)
    x[3, 5], x[3, 69_999], x[299, 0] = 1.5, -2.0, 3.0
    msg = SparseRows.from_dense(x)
    assert msg.indices.dtype == np.uint32 and msg.indptr.dtype == np.uint8
    assert torch.equal(msg.to_dense(), x)
    # the packed wire form, built by hand: row lengths (u32: 70,000 columns), column gaps as
    # byte planes (u32), then the three values as they are (a table and codes would not be
    # smaller); one deflate stream plus four 8-byte sizes and a 1-byte flag
    lengths = np.zeros(300, "<u4")
    lengths[3], lengths[299] = 2, 1
    gaps = np.array([5, 69_999 - 5, 0], "<u4").view(np.uint8).reshape(3, 4).T.tobytes()
    body = lengths.tobytes() + gaps + np.array([1.5, -2.0, 3.0], "<f4").tobytes()
    node, packed = msg.packed()
    assert zlib.decompress(packed) == body and node["coded"] is False
    assert payload_nbytes(msg) == len(zlib.compress(body, 3)) + 4 * 8 + 1
    got, wire = roundtrip("t", {"s": msg})
    assert torch.equal(got["s"].to_dense(), x) and got["s"].indices.dtype == np.uint32
    assert payload_dense_nbytes({"s": msg, "n": 1}) == 300 * 70_000 * 4 + 8
    copied = copy_payload({"s": msg})["s"]
    copied.values[0] = 9
    assert msg.values[0] == 1.5  # no aliasing across parties
    assert smallest_uint(255) == np.uint8 and smallest_uint(256) == np.uint16
    dense = torch.randn(4, 3)
    assert compact_rows(dense) is dense  # dense stays dense when sparse is not smaller
    assert isinstance(compact_rows(x), SparseRows)


def _sparse_feature_graph(nodes=160, seed=0) -> GraphData:
    """random_graph with bag-of-words-like features: ~5 % non-zero, non-negative."""
    g = random_graph(nodes=nodes, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    x = (torch.rand(nodes, 60, generator=gen) < 0.05).float()
    return g.with_features(x)


def _pretrained(graph, part, chunk, hops=2, **cfg):
    server = fedgcn_federation(graph, part, hops=hops, **cfg)
    server.chunk_rows = chunk
    for k in server.runtime.client_ids:
        server.runtime.local_client(k).chunk_rows = chunk
    server.pretrain()
    return server


@pytest.mark.parametrize("features", ["sparse", "dense"])
@pytest.mark.parametrize("hops", [1, 2])
def test_chunked_equals_unchunked_bitwise(features, hops):
    graph = _sparse_feature_graph(seed=1) if features == "sparse" else random_graph(160, seed=1)
    part = random_partition(graph.num_nodes, 5, seed=1)
    whole = _pretrained(graph, part, chunk=10**9, hops=hops)
    for chunk in (1, 7, 64):
        chunked = _pretrained(graph, part, chunk=chunk, hops=hops)
        for k in whole.runtime.client_ids:
            a = whole.runtime.local_client(k).received_sums
            b = chunked.runtime.local_client(k).received_sums
            assert torch.equal(a, b)
        assert chunked.runtime.ledger.summary()["bytes"] == whole.runtime.ledger.summary()["bytes"]
    assert (whole.pretrain_stats["sparse_messages"] > 0) == (features == "sparse")


@pytest.mark.parametrize("hops", [1, 2])
def test_received_sums_are_the_exact_aggregates(hops):
    """Against the dense reference (the client's own index_add release, summed per row)."""
    graph = _sparse_feature_graph(seed=2)
    part = random_partition(graph.num_nodes, 4, seed=2)
    server = _pretrained(graph, part, chunk=5, hops=hops)
    ref = {}
    for k in server.runtime.client_ids:
        c = server.runtime.local_client(k)
        touched, exact, _, _ = c._release()
        for i, row in zip(touched.tolist(), exact, strict=True):
            ref[i] = ref.get(i, 0) + row
    for k in server.runtime.client_ids:
        c = server.runtime.local_client(k)
        ids = c._touched()[:c._num_requested()].tolist()
        expected = torch.stack([ref[i] for i in ids])
        assert torch.allclose(c.received_sums, expected, atol=1e-6)


@pytest.mark.parametrize("hops", [1, 2])
def test_ledger_equals_appendix_formula_on_the_chunked_path(hops):
    """Dense features: the messages stay dense and the ledger is the formula exactly. Sparse
    features: the ledger counts the smaller real bytes, and the dense-equivalent count recorded
    beside it is the formula."""
    for graph in (random_graph(nodes=200, seed=7), _sparse_feature_graph(200, seed=7)):
        part = random_partition(graph.num_nodes, 6, seed=7)
        server = _pretrained(graph, part, chunk=9, hops=hops)
        led, stats = server.runtime.ledger, server.pretrain_stats
        c_sum, nv = _formula_counts(graph, part)
        n, d, k = graph.num_nodes, graph.num_features, part.num_clients
        values = c_sum * d + (n * d if hops == 1 else nv * d)
        ids_and_counts = c_sum * I64 + k * I64
        degrees = 0 if hops == 1 else n * I64 + (nv - n) * I64
        formula = values * F32 + ids_and_counts + degrees
        dense_equivalent = stats["bytes_up_dense_equivalent"] + stats["bytes_down_dense_equivalent"]
        assert dense_equivalent == formula
        assert led.bytes("pretrain") == stats["bytes_up"] + stats["bytes_down"]
        if stats["sparse_messages"]:
            assert led.bytes("pretrain") < formula
        else:
            assert led.bytes("pretrain") == formula


def test_cora_two_hop_sparse_bytes_and_identical_training(data_root, monkeypatch):
    """Cora, 10 clients, 2-hop: under 10 MB really sent (the dense count is ~103 MB), and the
    same training as the dense unchunked exchange."""
    cfg = Config(dataset="cora", data_root=str(data_root), clients=10, hops=2, rounds=15,
                 progress=False, leakage_report=False)  # the report has its own tests
    graph = load_graph(cfg)
    from fedgl.algorithms.runner import run_federated
    from fedgl.progress import RoundProgress

    def run():
        return run_federated(graph, cfg, repeat=0, seed=0, client_cls=FedGCNClient,
                             server_cls=FedGCNServer, progress=RoundProgress(None))

    sparse = run()
    stats = sparse.extra["fedgcn_pretrain"]
    real = sparse.final["pretrain_bytes"]
    assert real == stats["bytes_up"] + stats["bytes_down"] <= 10_000_000
    assert stats["bytes_up_dense_equivalent"] + stats["bytes_down_dense_equivalent"] > 10 * real
    monkeypatch.setattr(FedGCNClient, "_sparse_path", lambda self: False)
    monkeypatch.setattr(FedGCNServer, "_chunked_path", lambda self: False)
    dense = run()
    assert dense.final["pretrain_bytes"] == (stats["bytes_up_dense_equivalent"]
                                             + stats["bytes_down_dense_equivalent"])
    assert sparse.final["test_acc"] == dense.final["test_acc"]
    for a, b in zip(sparse.history, dense.history, strict=True):
        assert a["test_acc"] == b["test_acc"]
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-5)

