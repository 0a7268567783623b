"""Each party holds its own copy of the configuration in the local runtime: a client writing
into its config cannot reach the server or another client (nothing but counted messages
crosses parties)."""

from __future__ import annotations

import pytest

from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.algorithms.fedgcn.server import FedGCNServer
from fedgl.algorithms.runner import build_federation
from fedgl.config import Config
from tests.helpers import random_graph, random_partition


def test_a_client_writing_into_its_config_cannot_reach_the_server():
    graph = random_graph(nodes=60, seed=4)
    part = random_partition(graph.num_nodes, 3, seed=4)
    cfg = Config.from_dict({"clients": 3, "progress": False, "hops": 1, "rounds": 2})
    server = build_federation(graph, part, cfg, 0, FedGCNClient, FedGCNServer)
    clients = [server.runtime.local_client(k) for k in server.runtime.client_ids]
    configs = [server.config, cfg, *[c.config for c in clients]]
    assert len({id(c) for c in configs}) == len(configs)  # no shared object
    with pytest.raises(AttributeError, match="immutable"):
        clients[0].config.rounds = 99
    # a client that forces writes into its (frozen) sections still only changes its own copy
    object.__setattr__(clients[0].config.optim, "rounds", 99)
    object.__setattr__(clients[0].config.privacy, "he_key_holder", 2)
    assert clients[0].config.rounds == 99
    before = server.runtime.ledger.bytes()
    assert server.config.rounds == 2 and cfg.rounds == 2
    assert server.config.he_key_holder == 0 and clients[1].config.rounds == 2
    assert server.runtime.ledger.bytes() == before
    server.pretrain()
    assert len(list(server.rounds())) == 2  # the server runs its own configuration
