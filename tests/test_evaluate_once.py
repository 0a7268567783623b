"""A client evaluates a given global model once: a malicious server that asks again for the
same weights (on its own, riding on a fit, under another round label, batched or not) gets the
same counts back from the client's record, and nothing is scored a second time."""

from __future__ import annotations

import pytest
import torch

from fedgl.algorithms.base import GNNClient, take_scores
from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.algorithms.fedgcn.server import FedGCNServer
from fedgl.algorithms.runner import build_federation
from fedgl.config import Config
from tests.helpers import random_graph, random_partition

MODES = {
    "plaintext": {},
    "mask": {"secure_sum": "mask", "secure_models": True},
}


def _server(mode: dict, batch: bool) -> FedGCNServer:
    graph = random_graph(nodes=60, seed=5)
    part = random_partition(graph.num_nodes, 3, seed=5)
    cfg = Config.from_dict({"clients": 3, "hops": 2, "rounds": 1, "progress": False,
                            "dropout": 0.0, "leakage_report": False,
                            "batch_clients": batch, **mode})
    server = build_federation(graph, part, cfg, 0, FedGCNClient, FedGCNServer)
    server.pretrain()
    return server


def _crafted(server: FedGCNServer, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=g).to(v.dtype) for k, v in server.weights.items()}


@pytest.mark.parametrize("batch", [False, True], ids=["one-by-one", "batched"])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_model_is_scored_once_whatever_the_server_asks(mode, batch, monkeypatch):
    scored: list[str] = []
    predict, many = GNNClient.predict, GNNClient._predict_many.__func__

    def counting_predict(self, weights):
        scored.append("one")
        return predict(self, weights)

    def counting_many(cls, clients, weights, cache=None):
        scored.append("many")
        return many(cls, clients, weights, cache)

    monkeypatch.setattr(GNNClient, "predict", counting_predict)
    monkeypatch.setattr(GNNClient, "_predict_many", classmethod(counting_many))
    server = _server(MODES[mode], batch)
    call = server.runtime.call
    crafted = _crafted(server, 1)

    first = call("fedavg.evaluate", {"weights": crafted}, phase="eval")
    after_first = len(scored)
    assert after_first >= 1
    # the same model again: riding on a fit under another round label, then on its own
    copy = {k: v.clone() for k, v in crafted.items()}
    fitted = call("fedavg.fit", {"weights": copy, "local_steps": 1, "round": 7, "evaluate": 1},
                  phase="train")
    again = call("fedavg.evaluate", {"weights": copy}, phase="eval")
    assert take_scores(fitted) == first == again
    assert len(scored) == after_first, "a model was scored a second time"
    # another model is a new evaluation (so the count above can fail)
    other = call("fedavg.evaluate", {"weights": _crafted(server, 2)}, phase="eval")
    assert len(scored) > after_first and set(other) == set(first)
    roles = [ep.role for ep in server.runtime._endpoints.values()]
    assert all(len(role.evaluated) == 2 for role in roles)
    server.runtime.close()
