"""A round's evaluation rides on the next round's fit: the same histories as evaluating every
round on its own, fewer messages, and a client that scores only the model of that message and
only where it would accept ``fedavg.evaluate`` itself."""

from __future__ import annotations

import pytest
import torch

import fedgl
from fedgl.algorithms.base import FedAvgClient, FedAvgServer
from fedgl.checkpoint import load_checkpoint
from fedgl.federation.codec import decode, encode
from fedgl.federation.protocol import Endpoint, Int, ProtocolViolation, handles, not_a_message
from tests.helpers import fedgcn_federation, interrupt_at, random_graph, random_partition

BASE = dict(dataset="sbm", sbm_nodes=300, clients=3, progress=False)


def _alone(monkeypatch) -> None:
    """Every evaluation as its own ``fedavg.evaluate`` exchange (the protocol before)."""
    monkeypatch.setattr(FedAvgServer, "_may_ride", lambda self, t, metrics: False)


@pytest.mark.parametrize("algorithm,extra", [
    ("fedgcn", {"hops": 2, "rounds": 5}),
    ("fedgcn", {"hops": 0, "rounds": 5, "eval_every": 2}),
    ("fedgcn", {"hops": 2, "rounds": 4, "batch_clients": False}),
    ("fedgat", {"rounds": 3}),
])
def test_same_history_fewer_messages(monkeypatch, algorithm, extra):
    cfg = {**BASE, "algorithm": algorithm, **extra}
    rides = fedgl.run(**cfg).repeats[0]
    with monkeypatch.context() as m:
        _alone(m)
        alone = fedgl.run(**cfg).repeats[0]
    assert rides.history == alone.history
    for key in ("test_acc", "val_acc", "train_loss", "selected_round", "selected_test_acc",
                "oracle_selected_test_acc"):
        assert rides.final[key] == alone.final[key]
    c, rounds, every = 3, extra["rounds"], extra.get("eval_every", 1)
    evaluated = len([t for t in range(1, rounds + 1) if t % every == 0 or t == rounds])
    carried = evaluated - 1   # every evaluation but the last rides on the next fit
    a, b = rides.ledger, alone.ledger
    assert a["messages"]["eval"]["down"] == a["messages"]["eval"]["up"] == c
    assert b["messages"]["eval"]["down"] == c * evaluated
    assert a["messages"]["train"] == b["messages"]["train"]
    assert a["messages"]["pretrain"] == b["messages"]["pretrain"]
    assert a["bytes"]["pretrain"] == b["bytes"]["pretrain"]
    # the eval downloads of the model are gone; each carrying fit adds the flag (one int) down
    # and the counts (what a standalone evaluate reply carried) up
    model_down = b["bytes"]["eval"]["down"] // (c * evaluated)
    counts_up = b["bytes"]["eval"]["up"] // (c * evaluated)
    assert a["bytes"]["eval"]["down"] == c * model_down
    assert a["bytes"]["eval"]["up"] == c * counts_up
    assert a["bytes"]["train"]["down"] == b["bytes"]["train"]["down"] + 8 * c * carried
    assert a["bytes"]["train"]["up"] == b["bytes"]["train"]["up"] + counts_up * c * carried
    assert a["total_bytes"] == b["total_bytes"] - model_down * c * carried + 8 * c * carried


def test_a_simulated_network_counts_a_rows_bytes_as_of_its_round(monkeypatch):
    cfg = {**BASE, "algorithm": "fedgcn", "hops": 2, "rounds": 4, "bandwidth": "10Mbps"}
    rides = fedgl.run(**cfg).repeats[0]
    with monkeypatch.context() as m:
        _alone(m)
        alone = fedgl.run(**cfg).repeats[0]
    # round 1's training bytes: its fit only (round 2's fit, which carried its scores, later)
    assert rides.history[0]["train_bytes"] == alone.history[0]["train_bytes"]
    for a, b in zip(rides.history, alone.history, strict=True):
        assert {k: v for k, v in a.items() if k not in ("train_bytes", "sim_seconds")} == \
            {k: v for k, v in b.items() if k not in ("train_bytes", "sim_seconds")}
        assert a["train_bytes"] > b["train_bytes"] or a["round"] == 1


def test_a_checkpoint_of_a_riding_round_resumes_to_the_same_bytes(tmp_path):
    cfg = {**BASE, "algorithm": "fedgcn", "hops": 2, "rounds": 5}
    reference = fedgl.run(**cfg).repeats[0]
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        fedgl.run(**cfg, checkpoint_every=2, out=str(out), on_round=interrupt_at(3))
    progress = load_checkpoint(out).progress
    assert progress.round == 2 and progress.server.get("evaluation_rides") is True
    # the checkpoint's ledger is the end of round 2: round 3's fit is not in it
    assert sum(v for p, d, _, v in progress.ledger["messages"] if p == "train") == 2 * 2 * 3
    resumed = fedgl.run(resume=out, progress=False).repeats[0]
    assert resumed.history == reference.history
    assert resumed.ledger["bytes"] == reference.ledger["bytes"]
    assert resumed.ledger["wire_bytes"] == reference.ledger["wire_bytes"]
    assert resumed.ledger["messages"] == reference.ledger["messages"]


# ---------------------------------------------------------------- the client's side
def _client(hops: int = 0):
    graph = random_graph(nodes=60, seed=3)
    server = fedgcn_federation(graph, random_partition(60, 2, seed=3), hops=hops, rounds=1,
                               dropout=0.0)
    if hops:
        server.pretrain()
    return server.runtime.local_client(0), server.weights


def _fit(endpoint: Endpoint, payload: dict, phase: str = "train") -> dict:
    return decode(endpoint.handle(encode("fedavg.fit", payload), phase))[1]


def test_the_client_scores_the_model_of_that_message_then_trains_as_without():
    client, w = _client()
    other = {k: v + 0.5 * torch.randn(v.shape, generator=torch.Generator().manual_seed(1))
             for k, v in w.items()}
    endpoint = Endpoint(client, "client 0")
    for weights in (w, other):
        with_scores = _fit(endpoint, {"weights": weights, "local_steps": 2, "round": 3,
                                      "evaluate": 1})
        plain = _fit(endpoint, {"weights": weights, "local_steps": 2, "round": 3})
        alone = decode(endpoint.handle(encode("fedavg.evaluate", {"weights": weights}),
                                       "train"))[1]
        assert with_scores["correct"] == alone["correct"]
        assert with_scores["total"] == alone["total"]
        assert set(plain) == {"weights", "num_train", "loss"}
        assert with_scores["loss"] == plain["loss"]
        assert with_scores["num_train"] == plain["num_train"]
        for k in plain["weights"]:
            assert torch.equal(with_scores["weights"][k], plain["weights"][k])
    # the two models really score differently: the counts are of the model sent
    first = _fit(endpoint, {"weights": w, "local_steps": 1, "evaluate": 1})["correct"]
    second = _fit(endpoint, {"weights": other, "local_steps": 1, "evaluate": 1})["correct"]
    assert first != second


@pytest.mark.parametrize("value", [0, 2, -1, 1.0])
def test_only_the_request_itself_is_accepted(value):
    client, w = _client()
    endpoint = Endpoint(client, "client 0")
    with pytest.raises(ProtocolViolation, match="'evaluate'"):
        _fit(endpoint, {"weights": w, "local_steps": 1, "evaluate": value})


def test_a_fit_cannot_carry_an_evaluation_the_client_would_refuse_alone():
    # FedGCN before its pre-training sums arrived: neither fit nor evaluate is in order
    graph = random_graph(nodes=60, seed=3)
    server = fedgcn_federation(graph, random_partition(60, 2, seed=3), hops=2, rounds=1)
    endpoint = Endpoint(server.runtime.local_client(0), "client 0")
    with pytest.raises(ProtocolViolation, match="out of order"):
        _fit(endpoint, {"weights": server.weights, "local_steps": 1, "evaluate": 1})


class NoScores(FedAvgClient):
    """A client whose own policy leaves evaluation out (withdrawn)."""

    @not_a_message
    def evaluate(self, weights):
        raise AssertionError("never called")


class TaggedScores(FedAvgClient):
    """A client that serves evaluation only when its policy enables the tag ``scores``."""

    tags: frozenset = frozenset()

    def protocol_tags(self):
        return self.tags

    @handles("fedavg.evaluate", phases=("train", "eval"), needs="scores",
             schema={"weights": FedAvgClient.fit.__fedgl_handler__["schema"]["weights"]})
    def evaluate(self, weights):
        return super().evaluate(weights)


@pytest.mark.parametrize("cls,why", [(NoScores, "not a message type"),
                                     (TaggedScores, "its policy does not take 'scores'")])
def test_a_client_policy_that_gates_evaluation_gates_the_rider(cls, why):
    client, w = _client()
    client.__class__ = cls
    endpoint = Endpoint(client, "client 0")
    with pytest.raises(ProtocolViolation, match=f"requests field 'evaluate': .*{why}"):
        _fit(endpoint, {"weights": w, "local_steps": 1, "evaluate": 1})
    assert set(_fit(endpoint, {"weights": w, "local_steps": 1})) == {"weights", "num_train",
                                                                     "loss"}
    if cls is TaggedScores:   # enabled by its policy: served, riding or alone
        client.tags = frozenset({"scores"})
        endpoint = Endpoint(client, "client 0")
        assert "correct" in _fit(endpoint, {"weights": w, "local_steps": 1, "evaluate": 1})


class OwnFit(FedAvgClient):
    """A plugin's client that overrides ``fit`` with the signature it always had."""

    def fit(self, weights, local_steps, round=1):
        self.fits = getattr(self, "fits", 0) + 1
        return super().fit(weights, local_steps, round)


def test_a_client_that_overrides_fit_serves_the_rider_unchanged():
    client, w = _client()
    client.__class__ = OwnFit
    endpoint = Endpoint(client, "client 0")
    reply = _fit(endpoint, {"weights": w, "local_steps": 1, "evaluate": 1})
    alone = decode(endpoint.handle(encode("fedavg.evaluate", {"weights": w}), "train"))[1]
    assert list(reply) == ["weights", "num_train", "loss", "correct", "total"]
    assert reply["correct"] == alone["correct"] and client.fits == 1


class Toy:
    @handles("toy.fit", phases=("train",), optional=("score",), rides={"score": "toy.score"},
             schema={"score": Int(1, 1)})
    def fit(self, score: int = 0):
        return {"scored": score}

    @handles("toy.score", phases=("eval",))
    def score(self):
        return {}


def test_a_rider_is_refused_in_a_phase_its_step_is_not_accepted_in():
    endpoint = Endpoint(Toy(), "toy")
    assert endpoint.dispatch("toy.fit", {}, "train") == {"scored": 0}
    with pytest.raises(ProtocolViolation, match="'toy.score' is not accepted in phase train"):
        endpoint.dispatch("toy.fit", {"score": 1}, "train")


def test_a_riders_reply_field_that_clashes_with_the_carriers_is_an_error_not_an_overwrite():
    from fedgl.federation.protocol import with_riders

    assert with_riders({"weights": 1, "loss": 0.5}, [{"correct": [1], "total": [2]}]) == {
        "weights": 1, "loss": 0.5, "correct": [1], "total": [2]}
    assert with_riders({"loss": 0.5}, []) == {"loss": 0.5}
    with pytest.raises(ProtocolViolation, match="rider's reply field 'loss'"):
        with_riders({"weights": 1, "loss": 0.5}, [{"loss": 0.1}])
