"""The vertical setting: feature and edge splits are disjoint/cover/seeded, bad input is refused."""

from __future__ import annotations

import pytest
import torch

from fedgl.data.vertical import split_features, split_stats, undirected_edges, vertical_split
from fedgl.errors import ConfigError
from tests.helpers import random_graph


@pytest.mark.parametrize("method", ["random", "contiguous"])
def test_feature_blocks_are_disjoint_cover_everything_and_are_seeded(method):
    blocks = split_features(1433, 3, method, seed=5)
    allcols = torch.cat([torch.from_numpy(b) for b in blocks])
    assert sorted(allcols.tolist()) == list(range(1433))  # disjoint and covering
    assert [len(b) for b in blocks] == [478, 478, 477]
    again = split_features(1433, 3, method, seed=5)
    assert all((a == b).all() for a, b in zip(blocks, again, strict=True))
    other = split_features(1433, 3, method, seed=6)
    same = all((a == b).all() for a, b in zip(blocks, other, strict=True))
    assert same == (method == "contiguous")  # only the random split depends on the seed
    if method == "contiguous":
        assert blocks[0].tolist() == list(range(478))


def test_edge_shares_are_seeded_symmetric_subsets_of_the_graph():
    graph = random_graph(nodes=200, seed=1)
    n = graph.num_nodes
    full = set((graph.edge_index[1] * n + graph.edge_index[0]).tolist())
    parts = vertical_split(graph, 3, edge_share=0.8, seed=3)
    und = undirected_edges(graph.edge_index).size(1)
    for p in parts:
        keys = set((p.edge_index[1] * n + p.edge_index[0]).tolist())
        rev = set((p.edge_index[0] * n + p.edge_index[1]).tolist())
        assert keys <= full and keys == rev  # a subset, both directions
        assert p.num_edges == round(0.8 * und)
        assert p.edge_index.size(1) == len(keys)  # no duplicates
    # independent per client, identical for the same seed, different for another
    assert not torch.equal(parts[0].edge_index, parts[1].edge_index)
    again = vertical_split(graph, 3, edge_share=0.8, seed=3)
    assert all(torch.equal(a.edge_index, b.edge_index) for a, b in zip(parts, again, strict=True))
    assert not torch.equal(vertical_split(graph, 3, seed=4)[0].edge_index, parts[0].edge_index)
    stats = split_stats(parts, graph)
    assert 0.95 < stats["union_edge_coverage"] < 1.0  # 1 - 0.2^3 expected
    full_parts = vertical_split(graph, 3, edge_share=1.0, seed=3)
    assert all(torch.equal(p.edge_index, graph.edge_index) for p in full_parts)


def test_each_client_holds_exactly_its_columns_and_labels_as_configured():
    graph = random_graph(nodes=60, seed=2)
    parts = vertical_split(graph, 3, feature_split="random", seed=1, labels="one")
    for p in parts:
        assert torch.equal(p.x, graph.x[:, p.columns])
        assert p.num_nodes == graph.num_nodes
    assert parts[0].has_labels and torch.equal(parts[0].y, graph.y)
    assert all(p.y is None and p.train_mask is None for p in parts[1:])
    assert all(p.has_labels for p in vertical_split(graph, 3, seed=1))


@pytest.mark.parametrize("kwargs, words", [
    (dict(clients=9), "9 clients but only 8 feature columns"),
    (dict(clients=0), "at least 1"),
    (dict(clients=2, edge_share=0.0), "edge_share"),
    (dict(clients=2, feature_split="columns"), "feature_split"),
    (dict(clients=2, labels="two"), "labels"),
])
def test_bad_vertical_settings_get_one_line_errors(kwargs, words):
    graph = random_graph(nodes=40, seed=0)  # 8 feature columns
    clients = kwargs.pop("clients")
    with pytest.raises(ConfigError, match=words) as info:
        vertical_split(graph, clients, **kwargs)
    assert "\n" not in str(info.value)


def test_vertical_shard_files_round_trip_to_the_clients_own_data(tmp_path):
    from fedgl.config import Config
    from fedgl.data.shards import ShardSpec, load_shard, write_shard_files

    graph = random_graph(nodes=50, seed=7)
    parts = vertical_split(graph, 3, seed=2, labels="one")
    files = write_shard_files(parts, tmp_path)
    cfg = Config.from_dict({"algorithm": "glasu", "dataset": "sbm"})
    for p in parts:
        path, digest = files[p.client_id]
        got = load_shard(ShardSpec(cfg.to_dict(), 0, p.client_id, "", "", "", shard_path=path,
                                   shard_sha256=digest))
        assert type(got) is type(p) and got.digest() == p.digest()
        assert torch.equal(got.x, p.x) and (got.y is None) == (p.y is None)
