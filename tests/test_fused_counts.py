"""One secure sum per round: with secure models, the evaluation that rides on the next fit puts
its counts into that round's model sum (``fuse_counts``), so the server learns the model
average and the pooled counts from one sum, over the same clients. The histories equal the
runs with two sums per round and the plaintext run; a deviating server that asks for the
counts or the update in a second sum, or for counts the client did not just produce, is
refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedgl.algorithms.base import evaluation_key, take_scores
from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.algorithms.fedgcn.server import FedGCNServer
from fedgl.algorithms.runner import build_federation
from fedgl.config import Config
from fedgl.evaluation import pooled_accuracy
from fedgl.privacy.identity import AttackDetected
from fedgl.privacy.secagg_server import SecureSumServer, secure_vector_sum
from fedgl.privacy.secure_models import SecureFedAvg
from tests.helpers import random_graph, random_partition

SPLITS = ("train", "val", "test")


def _server(mode: str = "mask", clients: int = 3, secure_models: bool = True, rounds: int = 1,
            **keys) -> FedGCNServer:
    graph = random_graph(nodes=90, seed=11)
    part = random_partition(graph.num_nodes, clients, seed=11)
    cfg = Config.from_dict({"clients": clients, "hops": 2, "rounds": rounds, "progress": False,
                            "dropout": 0.0, "leakage_report": False, "secure_sum": mode,
                            **keys})
    server = build_federation(graph, part, cfg, 0, FedGCNClient, FedGCNServer, secure_mode=mode,
                              secure_models=secure_models)
    server.pretrain()
    return server


def _roles(server: FedGCNServer) -> dict[int, FedGCNClient]:
    return {k: ep.role for k, ep in server.runtime._endpoints.items()}


def _caller(server: FedGCNServer, phase: str = "train"):
    def call(method, args, clients):
        out = server.runtime.call(method, args, phase=phase, clients=clients)
        return None if any(r.get("stale") for r in out.values()) else out
    return call


def _fit(server: FedGCNServer, *, evaluate: bool = True, fuse: bool = True,
         round: int = 1) -> dict:
    args = {"weights": server.weights, "local_steps": 1, "round": round}
    if evaluate:
        args["evaluate"] = 1
    if fuse:
        args["fuse_counts"] = 1
    return server.runtime.call("fedavg.fit", args, phase="train")


def _sum(server: FedGCNServer, mode: str, clients: list[int], instance: str, length: int):
    return secure_vector_sum(_caller(server), clients, instance, length, SecureSumServer(mode))


# ---------------------------------------------------------------------- honest runs
def _counting(server: FedGCNServer) -> dict[str, int]:
    counts: dict[str, int] = {}
    call = server.runtime.call

    def spying(method, args=None, *, phase, clients=None):
        counts[method] = counts.get(method, 0) + 1
        return call(method, args, phase=phase, clients=clients)

    server.runtime.call = spying
    return counts


@pytest.mark.parametrize("mode", ["mask", "robust"])
def test_one_secure_sum_per_round_gives_the_histories_of_two(mode, monkeypatch):
    """Five rounds with secure models: fused, every round's accuracies and model equal the run
    with a separate evaluation sum (and the plaintext run's accuracies); the fused run takes
    one secure sum per round plus the last round's evaluation sum (6 R + 6 exchanges with
    robust's five steps, against 11 R + 1)."""
    rounds = 5
    fused = _server(mode, rounds=rounds)
    fused_calls = _counting(fused)
    fused_rows = list(fused.rounds())
    monkeypatch.setattr(SecureFedAvg, "fuses_counts", False)
    separate = _server(mode, rounds=rounds)
    separate_calls = _counting(separate)
    separate_rows = list(separate.rounds())
    plain = _server("none", secure_models=False, rounds=rounds)
    plain_rows = list(plain.rounds())
    assert len(fused_rows) == len(separate_rows) == len(plain_rows) == rounds
    for (tf, wf, mf), (ts, ws, ms), (tp, _, mp) in zip(fused_rows, separate_rows, plain_rows,
                                                        strict=True):
        assert tf == ts == tp
        for split in SPLITS:
            assert mf[f"{split}_acc"] == ms[f"{split}_acc"] == mp[f"{split}_acc"], (tf, split)
        assert mf["train_loss"] == ms["train_loss"]
        assert all(torch.equal(wf[k], ws[k]) for k in wf)
    steps = 5 if mode == "robust" else 3   # advertise, keys, upload (, consistency, unmask)
    assert sum(separate_calls.values()) == rounds + steps * rounds + steps * (rounds - 1) + 1 \
        + steps
    assert sum(fused_calls.values()) == rounds + steps * rounds + 1 + steps
    assert fused_calls["secagg.upload"] == rounds + 1
    assert fused_calls["fedavg.evaluate"] == 1   # the last round's, on its own
    # each fused upload committed the update and the counts to one aggregate
    for role in _roles(fused).values():
        update, counts = role._model_consumes
        record = role.secagg.record
        assert record.aggregate_of(update) == {**record.aggregate_of(counts), "input": update}


def test_fused_rows_equal_the_plaintext_run_on_cora(data_root, monkeypatch):
    """Real data, the run's own keys: FedGCN 2-hop on Cora, 3 clients, robust secure sum and
    secure models, four rounds: the fused run's history equals the run with two sums per
    round and the plaintext run's, accuracy for accuracy."""
    import fedgl

    base = dict(dataset="cora", data_root=str(data_root), clients=3, rounds=4, eval_every=1,
                progress=False, oracle_eval=False, leakage_report=False)
    policy = dict(secure_sum="robust", secure_models=True)
    plain = fedgl.run(**base).repeats[0]
    fused = fedgl.run(**base, **policy).repeats[0]
    monkeypatch.setattr(SecureFedAvg, "fuses_counts", False)
    separate = fedgl.run(**base, **policy).repeats[0]
    for a, b, c in zip(plain.history, fused.history, separate.history, strict=True):
        for split in SPLITS:
            assert a[f"{split}_acc"] == b[f"{split}_acc"] == c[f"{split}_acc"], (a["round"], split)
        assert b["train_loss"] == c["train_loss"]
        assert abs(a["train_loss"] - b["train_loss"]) < 1e-5


def test_robust_a_dropout_is_left_out_of_the_model_and_the_counts_alike():
    """Four clients, threshold 3: client 3 stops answering at round 2's upload. The one sum
    covers clients 0 to 2 only, for both parts: round 1's pooled accuracy is theirs (not all
    four clients'), and round 2's model is the average of their updates."""
    server = _server("robust", clients=4, rounds=3, secagg_threshold=3)
    call = server.runtime.call
    gone = {"now": False}
    sums: list[np.ndarray] = []

    def dropping(method, args=None, *, phase, clients=None):
        if method == "secagg.upload" and server.strategy.rounds == 2:
            gone["now"] = True
        targets = [k for k in (clients if clients is not None else server.runtime.client_ids)
                   if not (gone["now"] and k == 3)]
        if isinstance(args, dict) and all(isinstance(k, int) for k in args):
            args = {k: args[k] for k in targets}
        out = call(method, args, phase=phase, clients=targets)
        if method == "secagg.upload" and server.strategy.rounds == 2:
            roles = _roles(server)
            sums.append(sum(roles[k]._model_input for k in sorted(out)))
        return out

    server.runtime.call = dropping
    rows = list(server.rounds())
    roles = _roles(server)
    _, w1, m1 = rows[0]
    key = evaluation_key(w1)
    survivors = pooled_accuracy({k: roles[k].evaluated[key] for k in (0, 1, 2)})
    everyone = pooled_accuracy({k: roles[k].evaluated[key] for k in (0, 1, 2, 3)})
    assert {s: m1[f"{s}_acc"] for s in SPLITS} == {s: survivors[f"{s}_acc"] for s in SPLITS}
    assert survivors != everyone   # so the comparison above can fail
    (held,) = sums
    model = held[:-6]
    flat = torch.cat([v.reshape(-1).double() for v in rows[1][1].values()]).numpy()
    assert np.allclose(flat, model[:-1] / model[-1], atol=1e-6)
    server.runtime.close()


# ---------------------------------------------------------------------- a deviating server
@pytest.mark.parametrize("mode", ["mask", "robust"])
def test_fused_counts_then_a_separate_evaluation_sum_is_refused(mode):
    """The counts went into the fused sum: a separate sum of the same counts (which, with the
    fused sum, would isolate the model part) is refused before anything is revealed."""
    server = _server(mode)
    replies = _fit(server)
    assert take_scores(replies) == {k: {"secure_counts": 6} for k in range(3)}
    length = replies[0]["weights"]["secure_length"]
    assert replies[0]["weights"]["with_counts"] == 6
    total, who = _sum(server, mode, [0, 1, 2], "model/1", length)
    assert who == [0, 1, 2] and total.shape == (length,)
    with pytest.raises(AttackDetected, match="already went into another secure sum") as err:
        secure_vector_sum(_caller(server, "eval"), [0, 1, 2], "eval/1", 6,
                          SecureSumServer(mode))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("alone", [False, True], ids=["riding", "evaluated-alone"])
@pytest.mark.parametrize("mode", ["mask", "robust"])
def test_a_separate_evaluation_sum_then_the_fused_sum_is_refused(mode, alone):
    """The reverse order: the counts summed on their own first (asked riding on the fit, or
    evaluated on their own before it), then the fused sum: refused, the counts are in an
    aggregate already."""
    server = _server(mode)
    if alone:
        server.runtime.call("fedavg.evaluate", {"weights": server.weights}, phase="eval")
        secure_vector_sum(_caller(server, "eval"), [0, 1, 2], "eval/1", 6, SecureSumServer(mode))
        replies = _fit(server, evaluate=False)
    else:
        replies = _fit(server)
        secure_vector_sum(_caller(server, "eval"), [0, 1, 2], "eval/1", 6, SecureSumServer(mode))
    length = replies[0]["weights"]["secure_length"]
    with pytest.raises(AttackDetected, match="already went into another secure sum") as err:
        _sum(server, mode, [0, 1, 2], "model/1", length)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("mode", ["mask", "robust"])
def test_the_update_of_a_fused_sum_cannot_enter_a_plain_model_sum(mode):
    """The fit asked again from the same model without the counts (a plain model sum of the
    same update), after the fused sum or before it: refused either way."""
    server = _server(mode)
    length = _fit(server)[0]["weights"]["secure_length"]
    _sum(server, mode, [0, 1, 2], "model/1", length)
    plain = _fit(server, evaluate=False, fuse=False)[0]["weights"]
    assert set(plain) == {"secure_length"} and plain["secure_length"] == length - 6
    with pytest.raises(AttackDetected, match="already went into another secure sum"):
        _sum(server, mode, [0, 1, 2], "model/1-plain", length - 6)

    server = _server(mode)
    length = _fit(server, evaluate=False, fuse=False)[0]["weights"]["secure_length"]
    _sum(server, mode, [0, 1, 2], "model/1", length)
    fused = _fit(server)[0]["weights"]["secure_length"]
    with pytest.raises(AttackDetected, match="already went into another secure sum"):
        _sum(server, mode, [0, 1, 2], "model/1-fused", fused)


def test_robust_the_fused_sum_again_with_fewer_survivors_is_refused():
    """The fused sum over {0, 1, 2}; the same again is the same aggregate (served, nothing
    new); over {0, 1} ("2 dropped") it would difference out client 2's model and counts:
    refused."""
    server = _server("robust")
    length = _fit(server)[0]["weights"]["secure_length"]
    first, _ = _sum(server, "robust", [0, 1, 2], "model/1", length)
    _fit(server)   # the same fit again: the same update and counts
    again, _ = _sum(server, "robust", [0, 1, 2], "model/1-again", length)
    assert np.array_equal(first, again)
    _fit(server)
    with pytest.raises(AttackDetected, match="second secure sum over the same values") as err:
        _sum(server, "robust", [0, 1], "model/1-without-2", length)
    assert "\n" not in str(err.value)


def _crafted(server: FedGCNServer, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=g).to(v.dtype) for k, v in server.weights.items()}


@pytest.mark.parametrize("scored", ["nothing", "another-model"])
def test_counts_of_a_model_not_just_scored_are_refused(scored):
    """``fuse_counts`` without the client having scored the model the fit starts from (no
    evaluation, or one of another model): refused before training."""
    server = _server("mask")
    if scored == "another-model":
        server.runtime.call("fedavg.evaluate", {"weights": _crafted(server, 4)}, phase="eval")
    with pytest.raises(AttackDetected, match="was not asked to score") as err:
        _fit(server, evaluate=False)
    assert "\n" not in str(err.value)
    assert all(role._model_input is None for role in _roles(server).values())


@pytest.mark.parametrize("mode", ["none", "mask", "robust"])
def test_fusing_counts_without_secure_models_is_refused(mode):
    """A client whose models are averaged in the clear (plaintext, or a secure sum for
    pre-training and counts only) has no masked model sum to put counts in: refused."""
    server = _server(mode, secure_models=False)
    with pytest.raises(AttackDetected, match="outside a masked secure sum") as err:
        _fit(server)
    assert "\n" not in str(err.value)


def test_a_fused_fit_scores_the_model_once(monkeypatch):
    """The fused fit asked twice from the same model (another round label): the model is
    scored once, and the same counts are held and fused both times."""
    from fedgl.algorithms.base import GNNClient

    scored: list[int] = []
    predict = GNNClient.predict

    def counting(self, weights):
        scored.append(self.data.client_id)
        return predict(self, weights)

    monkeypatch.setattr(GNNClient, "predict", counting)
    server = _server("mask")
    _fit(server)
    assert sorted(scored) == [0, 1, 2]
    held = {k: r._model_input[-6:].copy() for k, r in _roles(server).items()}
    _fit(server, round=2)
    assert sorted(scored) == [0, 1, 2], "a model was scored a second time"
    assert all(np.array_equal(held[k], r._model_input[-6:]) for k, r in _roles(server).items())
