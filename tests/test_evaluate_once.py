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


# ---------------------------------------------------------------------- secure modes
#: every secure-sum mode sums the evaluation counts, with or without secure models
SECURE = {
    "mask-secure-models": MODES["mask"],
    "mask": {"secure_sum": "mask"},
    "robust": {"secure_sum": "robust"},
    "he": {"secure_sum": "he"},
}


def _secure_server(name: str, batch: bool) -> FedGCNServer:
    if name == "he":
        pytest.importorskip("tenseal", reason="tenseal is not installed (fedgl[he])")
    return _server(SECURE[name], batch=batch)


@pytest.mark.parametrize("batch", [False, True], ids=["one-by-one", "batched"])
@pytest.mark.parametrize("name", sorted(SECURE))
def test_under_a_secure_mode_the_server_learns_only_the_pooled_accuracy(name, batch):
    """Every secure-sum mode (mask with or without secure models, robust, he): every
    evaluation reply (riding on a fit or on its own) carries the number of counts only; the
    round's accuracies come from one secure sum of them and equal the pooled accuracy of what
    each client scored."""
    from fedgl.algorithms.base import evaluation_key
    from fedgl.evaluation import pooled_accuracy

    server = _secure_server(name, batch=batch)
    calls: list[tuple[str, dict]] = []
    call = server.runtime.call

    def spying(method, args, phase, clients=None):
        out = call(method, args, phase=phase, clients=clients)
        calls.append((method, {k: dict(v) for k, v in out.items() if isinstance(v, dict)}))
        return out

    server.runtime.call = spying
    server.config = server.config.replace(rounds=3)
    rows = list(server.rounds())
    assert [t for t, _, _ in rows] == [1, 2, 3]
    replies = [r for method, out in calls if method in ("fedavg.fit", "fedavg.evaluate")
               for r in out.values()]
    assert replies and not any("correct" in r or "total" in r for r in replies)
    assert any(r.get("secure_counts") == 6 for r in replies)
    uploads = sum(method == "secagg.upload" for method, _ in calls)
    # secure models: one sum per round (rounds 1 and 2's counts ride in rounds 2 and 3's model
    # sums) and round 3's counts alone; else one sum of the counts per round
    assert uploads == (4 if name == "mask-secure-models" else 3)
    roles = [ep.role for ep in server.runtime._endpoints.values()]
    for _, weights, metrics in rows:
        key = evaluation_key(weights)
        truth = pooled_accuracy({r.data.client_id: r.evaluated[key] for r in roles})
        for split in ("train", "val", "test"):
            assert metrics[f"{split}_acc"] == truth[f"{split}_acc"]
    server.runtime.close()


@pytest.mark.parametrize("name", sorted(SECURE))
def test_a_malicious_server_cannot_isolate_one_clients_counts(name):
    """The server crafts a model and asks for the counts: the reply holds their number only.
    A secure sum of the counts over client 0 alone is refused (mask: every client; robust:
    the threshold), and after the sum over everyone, a second sum without client 2 (which the
    difference would give away) is refused too: the counts of one scored model are one input,
    in one aggregate."""
    from fedgl.errors import RunAborted
    from fedgl.privacy.secagg_server import secure_vector_sum

    server = _secure_server(name, batch=False)
    replies = server.runtime.call("fedavg.evaluate", {"weights": _crafted(server, 3)},
                                  phase="eval")
    assert all(r == {"secure_counts": 6} for r in replies.values()), replies

    def secure_sum(clients: list[int], instance: str):
        return secure_vector_sum(server._eval_call, clients, instance, 6, server.secagg)

    with pytest.raises(Exception) as err:
        secure_sum([0], "eval/alone")
    assert isinstance(err.value, RunAborted) or "refused" in str(err.value)
    assert "\n" not in str(err.value)
    total, members = secure_sum([0, 1, 2], "eval/all")
    assert members == [0, 1, 2] and total.shape == (6,)
    with pytest.raises(Exception) as err:
        secure_sum([0, 1], "eval/without-2")
    line = str(err.value)
    assert "\n" not in line and ("missing" in line or "differencing" in line), line
    server.runtime.close()
