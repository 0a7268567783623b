"""The secure-sum component for any vector sum (a model average), through a real runtime:
exact sums, dropouts up to n - t recovered exactly, more than n - t a clear abort, Shamir."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedgl.errors import RunAborted
from fedgl.federation.runtime import LocalRuntime
from fedgl.privacy.identity import make_roster, shamir_combine, shamir_split
from fedgl.privacy.secagg import SecureSumParty
from fedgl.privacy.secagg_server import SecureSumServer, secure_vector_sum


class Party(SecureSumParty):
    """A client whose input is one vector (e.g. its coefficient times its flattened model)."""

    def __init__(self, k: int, x: np.ndarray) -> None:
        self.k, self.x = k, x

    def client_id_for_secagg(self) -> int:
        return self.k

    def secagg_input(self, instance: str) -> np.ndarray:
        return self.x


class DropAt(LocalRuntime):
    """Clients in ``victims`` stop answering from ``method`` on (their replies never arrive)."""

    def __init__(self, clients, victims=(), method=""):
        super().__init__(clients)
        self.victims, self.method, self.gone = set(victims), method, False

    def call(self, method, args=None, *, phase, clients=None):
        self.gone |= method == self.method
        targets = [k for k in (clients if clients is not None else self.client_ids)
                   if not (self.gone and k in self.victims)]
        if isinstance(args, dict) and all(isinstance(k, int) for k in args):
            args = {k: args[k] for k in targets}
        return super().call(method, args, phase=phase, clients=targets)


def federation(n: int, mode: str, threshold: int = 0, length: int = 50, seed: int = 0,
               runtime=LocalRuntime, **kw):
    rng = np.random.default_rng(seed)
    roster, ids = make_roster(range(n))
    parties = {k: Party(k, rng.normal(size=length) * 3) for k in range(n)}
    for k, p in parties.items():
        # each party's policy: its input (a model) leaves only inside secure sums
        p.install_identity(ids[k], roster, mode, threshold, secure_models=True)
    rt = runtime(parties, **kw)
    return parties, rt


def caller(rt):
    def call(method, args, clients):
        out = rt.call(method, args, phase="train", clients=clients)
        return None if any(r.get("stale") for r in out.values()) else out
    return call


@pytest.mark.parametrize("mode", ["mask", "robust"])
def test_vector_sum_is_exact(mode):
    parties, rt = federation(6, mode)
    total, who = secure_vector_sum(caller(rt), rt.client_ids, "round-1", 50,
                                   SecureSumServer(mode))
    assert who == list(range(6))
    want = sum(p.x for p in parties.values())
    assert np.allclose(total, want, atol=6 * 2.0 ** -32)
    assert rt.ledger.bytes("train") > 0  # every step went through the runtime and the ledger


@pytest.mark.parametrize("method", ["secagg.keys", "secagg.upload", "secagg.consistency"])
def test_robust_sum_survives_up_to_n_minus_t_dropouts(method):
    """n = 7, t = 4: three clients vanish at ``method``; the sum over the survivors is exact
    (those gone before uploading are not in it)."""
    parties, rt = federation(7, "robust", 4, runtime=DropAt, victims=(1, 4, 6), method=method)
    out = secure_vector_sum(caller(rt), rt.client_ids, "round-1", 50, SecureSumServer("robust", 4))
    if method == "secagg.consistency":
        # they uploaded but never signed the survivor set: nobody reveals a share without every
        # survivor's signature, so the session ends unrevealed and a new one runs without them
        assert out is None
        assert all(not p.secagg.record.aggregate_of(p.secagg_instance("round-1"))
                   for p in parties.values())
        out = secure_vector_sum(caller(rt), [0, 2, 3, 5], "round-1", 50,
                                SecureSumServer("robust", 4))
    assert out is not None
    total, who = out
    assert who == [0, 2, 3, 5]
    assert np.allclose(total, sum(parties[k].x for k in who), atol=1e-8)


def test_robust_sum_aborts_beyond_n_minus_t_dropouts():
    parties, rt = federation(7, "robust", 4, runtime=DropAt, victims=(1, 2, 4, 6),
                             method="secagg.upload")
    with pytest.raises(RunAborted, match="below the secure-sum threshold") as err:
        secure_vector_sum(caller(rt), rt.client_ids, "round-1", 50, SecureSumServer("robust", 4))
    assert "\n" not in str(err.value)


def test_shamir_threshold():
    secret = bytes(range(32))
    shares = shamir_split(secret, range(7), 4)
    assert shamir_combine({k: shares[k] for k in (0, 3, 5, 6)}) == secret
    assert shamir_combine({k: shares[k] for k in (1, 2, 4, 5)}) == secret
    try:  # t - 1 shares: a wrong value, almost surely outside the secret range
        assert shamir_combine({k: shares[k] for k in (0, 3, 5)}) != secret
    except ValueError:
        pass


@pytest.mark.parametrize("mode", ["mask", "robust"])
def test_fedavg_over_the_secure_sum_equals_plain_fedavg(mode):
    """FedGCN (2-hop) with models averaged through the secure sum: the same global model as
    plain FedAvg after every round (fixed point: 2^-32 per client), and no fit reply carries a
    model."""
    from fedgl.algorithms.fedgcn.client import FedGCNClient
    from fedgl.algorithms.fedgcn.server import FedGCNServer
    from fedgl.algorithms.runner import build_federation
    from fedgl.config import Config
    from tests.helpers import random_graph, random_partition

    graph = random_graph(nodes=100, seed=3)
    part = random_partition(graph.num_nodes, 4, seed=3)
    cfg = Config.from_dict({"clients": 4, "progress": False, "hops": 2, "rounds": 3,
                            "dropout": 0.0, "aggregation": "weighted", "secure_sum": "mask"})
    plain = build_federation(graph, part, Config.from_dict({**cfg.to_dict(), "secure_sum": "none"}),
                             0, FedGCNClient, FedGCNServer)
    secure = build_federation(graph, part, cfg, 0, FedGCNClient, FedGCNServer, secure_mode=mode,
                              secure_models=True)
    plain.pretrain()
    secure.pretrain()
    for (_, wp, _), (_, ws, _) in zip(plain.rounds(), secure.rounds(), strict=True):
        for key in wp:
            assert torch.allclose(wp[key], ws[key], atol=1e-6), key
    replies = secure.runtime.call("fedavg.fit", {"weights": secure.weights, "local_steps": 1,
                                          "round": 9}, phase="train")
    assert all(set(r["weights"]) == {"secure_length"} for r in replies.values())


def test_cora_robust_secure_sum_and_models_train_like_plaintext(data_root):
    """Real data, the run's own configuration keys: FedGCN 2-hop on Cora, 10 clients, with the
    robust secure sum for pre-training and models gives the plaintext run's accuracies."""
    import fedgl

    base = dict(dataset="cora", data_root=str(data_root), clients=10, rounds=3, eval_every=1,
                progress=False, oracle_eval=False, leakage_report=False)  # report: its own tests
    plain = fedgl.run(**base).repeats[0]
    robust = fedgl.run(**base, secure_sum="robust", secagg_threshold=7, secure_models=True)
    rep = robust.repeats[0]
    assert rep.extra["privacy"]["secure_sum"] == "robust"
    for a, b in zip(plain.history, rep.history, strict=True):
        assert a["test_acc"] == b["test_acc"] and a["val_acc"] == b["val_acc"]
        assert abs(a["train_loss"] - b["train_loss"]) < 1e-5
    assert rep.final["pretrain_bytes"] > plain.final["pretrain_bytes"]
