"""FedAvg over the secure sum: the server learns the average model and nothing finer.

Client k's input is the vector ``[c_k w_k, c_k]`` (its flattened model times ``c_k = 1``, or its
number of training nodes with weighted FedAvg, and the coefficient itself), kept on the client
after ``fit``; the server runs one secure sum (:mod:`fedgl.privacy.secagg`, ``mask`` or
``robust``) per round and divides: ``w = Σ_{k ∈ U} c_k w_k / Σ_{k ∈ U} c_k`` over exactly the
clients U whose inputs the sum covers (with the robust mode, dropouts are left out of both).
Unlike ``--encrypt-models`` (CKKS), the server does hold the global model in clear.

The input is named ``H("model", global weights received, data)`` (:mod:`fedgl.privacy.inputs`),
not by round: a fit asked twice from the same global model (under any round label) is the same
input and enters one aggregate only, so ``Σ_{0,1,2} − Σ_{0,1}`` cannot isolate client 2's model.

Evaluation counts go the same way, under every secure-sum mode (mask, robust, he; with or
without secure models): a client's ``fedavg.evaluate`` (on its own or riding on a fit) answers
only ``secure_counts`` (their number) and keeps its ``[correct per split, total per split]`` as
the input ``H("evaluation", model scored, data)``; the server sums them with a secure sum whose
instance starts with :data:`EVAL_INSTANCE` (:func:`pooled_counts`) and learns the pooled
accuracy only, over every client (mask, he) or at least the threshold's survivors (robust),
never one client's per-class counts. Under ``he`` (whose key exchange masks nothing) the
client masks its counts with a second, mask-mode secure-sum client over the same identity,
roster and input record (:meth:`SecureModelParty.install_identity`).

*One sum per round.* With secure models, an evaluation that rides on the next fit (the client
scores the global model it is sent, then fits from it) enters that round's model sum: the
server sets ``fuse_counts`` in the fit, the client appends the counts it holds for that very
model to its update, ``[c_k w_k, c_k, correct per split, total per split]``, and the one secure
sum gives both the model average and the pooled counts, over exactly the same clients (robust:
the survivors; a dropout is left out of both). The upload holds two inputs, the update
``H("model", …)`` and the counts ``H("evaluation", …)``, and commits both to that one
aggregate (:meth:`InputRecord.commit <fedgl.privacy.inputs.InputRecord.commit>`): a later
separate evaluation sum of those counts, or a model sum without them, is refused, and so is a
fused sum after either. A client asked to fuse counts of a model it has not just scored, or
without a masked model sum, refuses. Where nothing rides (the last round, an evaluation on its
own, client sampling) the separate evaluation sum runs as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fedgl.errors import RunAborted
from fedgl.federation.aggregate import FedAvg, State
from fedgl.privacy.identity import AttackDetected
from fedgl.privacy.inputs import data_digest, digest
from fedgl.privacy.secagg import EVAL_INSTANCE, SecAggClient, SecureSumParty
from fedgl.privacy.secagg_server import Call, SecureSumServer, secure_vector_sum

__all__ = ["EVAL_INSTANCE", "SecureFedAvg", "SecureModelParty", "pooled_counts"]


def pooled_counts(call: Call, clients: list[int], instance: str, length: int,
                  server: SecureSumServer) -> dict[str, float]:
    """The pooled accuracies (``<split>_acc``) from one secure sum (``call``: the runtime's,
    phase ``eval``) of the ``clients``' held evaluation counts (``length``: correct then total,
    per split); ``instance`` starts with :data:`EVAL_INSTANCE`."""
    check_counts_length(length)
    out = secure_vector_sum(call, sorted(clients), instance, length, server)
    if out is None:
        raise RunAborted("a client dropped or restarted during the secure evaluation sum: "
                         "mask and he need every client (use --secure-sum robust for "
                         "dropouts)")
    return accuracies(out[0])


def check_counts_length(length: int) -> None:
    """Refuse a number of secure evaluation counts other than correct and total per split."""
    from fedgl.data.client_data import SPLITS

    if length != 2 * len(SPLITS):
        raise RunAborted(f"clients announced {length} secure evaluation counts, not "
                         f"{2 * len(SPLITS)}; the run stops")


def accuracies(summed: np.ndarray) -> dict[str, float]:
    """``<split>_acc`` from summed counts (correct then total, per split)."""
    from fedgl.data.client_data import SPLITS

    total = np.rint(summed).astype(np.int64)
    n = len(SPLITS)
    return {f"{s}_acc": (int(total[i]) / int(total[n + i]) if total[n + i] else float("nan"))
            for i, s in enumerate(SPLITS)}


class SecureModelParty(SecureSumParty):
    """Client mixin: after ``fit`` the new weights stay here until a secure sum asks for them.
    The client's :meth:`encode_weights` returns :meth:`hold_model` when secure models are on;
    its evaluations' counts are held (:meth:`hold_counts`) under every secure-sum mode."""

    _model_input: np.ndarray | None = None
    _model_source: str | None = None  # digest of the global model the next fit starts from
    _model_input_id: str = "model:none"
    _model_consumes: tuple[str, ...] | None = None  # fused: the update's and the counts' names
    _eval_input: np.ndarray | None = None
    _eval_input_id: str = "evaluation:none"
    _eval_key: str | None = None  # the model whose counts are held (``evaluate:`` digest)
    _fuse_with: str | None = None  # set by :meth:`fuse_counts` for the fit in progress

    def fuse_counts(self, global_weights: State) -> None:
        """Called by ``fit`` (with ``fuse_counts`` in the message, before training): the counts
        this client holds for ``global_weights``, the model it was just asked to score, join
        the update into the round's one secure model sum (see the module docstring). Refused
        without a masked model sum (secure models, mask or robust) or without counts held for
        this very model."""
        self._fuse_with = None
        agg = self.secagg
        if not (self.secure_models and self.holds_counts() and agg is not None
                and agg.mode in ("mask", "robust") and self.eval_agg is None):
            raise AttackDetected("the server asked to put evaluation counts into the model "
                                 "update, but this client averages models outside a masked "
                                 "secure sum; the run stops")
        key = digest("evaluate", global_weights)
        if self._eval_input is None or self._eval_key != key:
            raise AttackDetected("the server asked to put into the model sum the evaluation "
                                 "counts of a model this client was not asked to score; the "
                                 "run stops")
        self._fuse_with = key

    def bind_model_input(self, global_weights: State) -> None:
        """Called by ``fit`` with the global model it received, before training."""
        self._model_source = digest("global", global_weights)

    def hold_model(self, weights: State, num_train: int, weighting: str) -> dict:
        coeff = float(num_train) if weighting == "weighted" else 1.0
        flat = torch.cat([v.detach().reshape(-1).double() for v in weights.values()]).numpy()
        model = np.concatenate([flat * coeff, [coeff]])
        model_id = digest("model", self._model_source or "unknown", self.input_data_digest())
        fuse, self._fuse_with = self._fuse_with, None
        if fuse is None:
            self._model_input, self._model_input_id = model, model_id
            self._model_consumes = None
            return {"secure_length": int(model.size)}
        if self._eval_input is None or self._eval_key != fuse:   # held counts replaced meanwhile
            raise AttackDetected("the evaluation counts to join the model sum are no longer "
                                 "held; the run stops")
        self._model_input = np.concatenate([model, self._eval_input])
        self._model_input_id = digest("fused", model_id, self._eval_input_id)
        self._model_consumes = (model_id, self._eval_input_id)
        return {"secure_length": int(self._model_input.size),
                "with_counts": int(self._eval_input.size)}

    def install_identity(self, identity, roster, mode: str = "mask", threshold: int = 0,
                         secure_models: bool = False) -> None:
        """:meth:`SecureSumParty.install_identity`, and under ``auth`` (HE) a mask-mode client
        for the evaluation sums (:data:`EVAL_INSTANCE`) over the same identity, roster and
        input record."""
        super().install_identity(identity, roster, mode, threshold, secure_models)
        self.eval_agg = SecAggClient(self.client_id_for_secagg(), identity, roster, "mask",
                                     0, self.input_record()) if mode == "auth" else None

    def holds_counts(self) -> bool:
        """Whether this client's evaluation counts go only into the server's secure sum: every
        run with a secure-sum mode (and an identity to take part with)."""
        return self.secagg is not None and \
            getattr(getattr(self, "config", None), "secure_sum", "none") != "none"

    def hold_counts(self, model_key: str, counts: dict) -> dict:
        """Keep an evaluation's counts for the server's secure sum (see the module docstring);
        the reply carries their number only."""
        values = [*counts["correct"], *counts["total"]]
        self._eval_input = np.asarray(values, dtype=np.float64)
        self._eval_input_id = digest("evaluation", model_key, self.input_data_digest())
        self._eval_key = model_key
        return {"secure_counts": len(values)}

    def input_data_digest(self) -> str:
        """The name of this client's data version (cached: a party's data does not change)."""
        name = self.__dict__.get("_data_digest")
        if name is None:
            name = self._data_digest = data_digest(self.data)  # type: ignore[attr-defined]
        return name

    def secagg_instance(self, instance: str) -> str:
        """The input is this client's latest update, named by the global model it came from and
        the data, whatever the server calls the sum; an evaluation sum's
        (:data:`EVAL_INSTANCE`), the counts of the latest model it scored."""
        if instance.startswith(EVAL_INSTANCE):
            return self._eval_input_id
        return self._model_input_id

    def secagg_consumes(self, instance: str) -> tuple[str, ...] | None:
        """A fused update's two inputs (the update and the counts), committed together."""
        return None if instance.startswith(EVAL_INSTANCE) else self._model_consumes

    def secagg_input(self, instance: str) -> np.ndarray:
        if instance.startswith(EVAL_INSTANCE):
            if self._eval_input is None:
                raise RunAborted("a secure evaluation sum was asked for before any evaluation")
            return self._eval_input
        if self._model_input is None:
            raise RunAborted("a secure model sum was asked for before any local training")
        return self._model_input


class SecureFedAvg(FedAvg):
    """The server's strategy: one secure sum per round through ``runtime`` (phase ``train``);
    with the round's evaluation counts in it where they ride (:meth:`fused_counts`)."""

    #: the clients' updates can carry the counts of the model they started from
    fuses_counts = True

    def __init__(self, weighting: str, runtime, server: SecureSumServer,
                 template: State) -> None:
        super().__init__(weighting)
        self.runtime, self.server = runtime, server
        self.shapes = {k: (tuple(v.shape), v.dtype) for k, v in template.items()}
        self.rounds = 0
        #: the round's fused sum, run by :meth:`fused_counts` before :meth:`aggregate`:
        #: (length, counts, total)
        self._fused: tuple[int, int, np.ndarray] | None = None

    def _call(self, method: str, args: dict, clients: list[int], phase: str = "train"
              ) -> dict | None:
        out = self.runtime.call(method, args, phase=phase, clients=clients)
        return None if any(isinstance(r, dict) and r.get("stale") for r in out.values()) else out

    def pooled_counts(self, clients: list[int], length: int) -> dict[str, float]:
        """:func:`pooled_counts` through this strategy's runtime and secure-sum server."""
        self.evaluations = getattr(self, "evaluations", 0) + 1
        return pooled_counts(lambda m, a, c: self._call(m, a, c, "eval"), clients,
                             f"{EVAL_INSTANCE}{self.evaluations}", length, self.server)

    def fused_counts(self, states: Sequence[dict]) -> dict[str, float]:
        """The round's one secure sum of the updates with the evaluation counts they carry
        (``with_counts``): returns the pooled accuracies, over exactly the clients the sum
        covers, and keeps the model part for :meth:`aggregate`."""
        length, counts = _layout(states)
        if not counts:
            raise RunAborted("clients did not put the evaluation counts into the model sum "
                             "as asked; the run stops")
        check_counts_length(counts)
        total = self._model_sum(length)
        self._fused = (length, counts, total)
        return accuracies(total[length - counts:])

    def end_round(self) -> None:
        """Forget a fused sum the round did not aggregate (every update refused)."""
        self._fused = None

    def _model_sum(self, length: int) -> np.ndarray:
        self.rounds += 1
        out = secure_vector_sum(self._call, self.runtime.client_ids, f"model/{self.rounds}",
                                length, self.server)
        if out is None:
            raise RunAborted("a client dropped or restarted during the secure model sum: mask "
                             "mode needs every client (use --secure-sum robust for dropouts), "
                             "and a restarted client has lost its model")
        return out[0]

    def aggregate(self, states: Sequence[dict], num_samples: Sequence[int]) -> State:
        if not states:
            raise ValueError("nothing to aggregate")
        length, counts = _layout(states)
        fused, self._fused = self._fused, None
        if fused is not None and fused[:2] == (length, counts):
            total = fused[2]
        else:   # nothing summed yet (counts that ride on a resumed run's first fit: dropped)
            total = self._model_sum(length)
        total = total[:length - counts]
        coeff = float(total[-1])
        if coeff <= 0:
            raise RunAborted("weighted FedAvg over the secure sum: no client has training nodes")
        flat = torch.from_numpy(total[:-1] / coeff)
        weights, offset = {}, 0
        for key, (shape, dtype) in self.shapes.items():
            n = int(np.prod(shape)) if shape else 1
            weights[key] = flat[offset:offset + n].reshape(shape).to(dtype)
            offset += n
        return weights


def _layout(states: Sequence[dict]) -> tuple[int, int]:
    """(secure_length, with_counts) that every client's fit reply announces alike."""
    layouts = {(int(s["secure_length"]), int(s.get("with_counts", 0))) for s in states}
    if len(layouts) != 1:
        raise RunAborted("clients announced different secure-sum layouts for their updates "
                         f"({sorted(layouts)}); the run stops")
    length, counts = layouts.pop()
    if not 0 <= counts < length:
        raise RunAborted(f"clients announced {counts} counts in a secure sum of {length} values; "
                         "the run stops")
    return length, counts
