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
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fedgl.errors import RunAborted
from fedgl.federation.aggregate import FedAvg, State
from fedgl.privacy.inputs import data_digest, digest
from fedgl.privacy.secagg import EVAL_INSTANCE, SecAggClient, SecureSumParty
from fedgl.privacy.secagg_server import Call, SecureSumServer, secure_vector_sum

__all__ = ["EVAL_INSTANCE", "SecureFedAvg", "SecureModelParty", "pooled_counts"]


def pooled_counts(call: Call, clients: list[int], instance: str, length: int,
                  server: SecureSumServer) -> dict[str, float]:
    """The pooled accuracies (``<split>_acc``) from one secure sum (``call``: the runtime's,
    phase ``eval``) of the ``clients``' held evaluation counts (``length``: correct then total,
    per split); ``instance`` starts with :data:`EVAL_INSTANCE`."""
    from fedgl.data.client_data import SPLITS

    if length != 2 * len(SPLITS):
        raise RunAborted(f"clients announced {length} secure evaluation counts, not "
                         f"{2 * len(SPLITS)}; the run stops")
    out = secure_vector_sum(call, sorted(clients), instance, length, server)
    if out is None:
        raise RunAborted("a client dropped or restarted during the secure evaluation sum: "
                         "mask and he need every client (use --secure-sum robust for "
                         "dropouts)")
    total = np.rint(out[0]).astype(np.int64)
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
    _eval_input: np.ndarray | None = None
    _eval_input_id: str = "evaluation:none"

    def bind_model_input(self, global_weights: State) -> None:
        """Called by ``fit`` with the global model it received, before training."""
        self._model_source = digest("global", global_weights)

    def hold_model(self, weights: State, num_train: int, weighting: str) -> dict:
        coeff = float(num_train) if weighting == "weighted" else 1.0
        flat = torch.cat([v.detach().reshape(-1).double() for v in weights.values()]).numpy()
        self._model_input = np.concatenate([flat * coeff, [coeff]])
        self._model_input_id = digest("model", self._model_source or "unknown",
                                      self.input_data_digest())
        return {"secure_length": int(self._model_input.size)}

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

    def secagg_input(self, instance: str) -> np.ndarray:
        if instance.startswith(EVAL_INSTANCE):
            if self._eval_input is None:
                raise RunAborted("a secure evaluation sum was asked for before any evaluation")
            return self._eval_input
        if self._model_input is None:
            raise RunAborted("a secure model sum was asked for before any local training")
        return self._model_input


class SecureFedAvg(FedAvg):
    """The server's strategy: one secure sum per round through ``runtime`` (phase ``train``)."""

    def __init__(self, weighting: str, runtime, server: SecureSumServer,
                 template: State) -> None:
        super().__init__(weighting)
        self.runtime, self.server = runtime, server
        self.shapes = {k: (tuple(v.shape), v.dtype) for k, v in template.items()}
        self.rounds = 0

    def _call(self, method: str, args: dict, clients: list[int], phase: str = "train"
              ) -> dict | None:
        out = self.runtime.call(method, args, phase=phase, clients=clients)
        return None if any(isinstance(r, dict) and r.get("stale") for r in out.values()) else out

    def pooled_counts(self, clients: list[int], length: int) -> dict[str, float]:
        """:func:`pooled_counts` through this strategy's runtime and secure-sum server."""
        self.evaluations = getattr(self, "evaluations", 0) + 1
        return pooled_counts(lambda m, a, c: self._call(m, a, c, "eval"), clients,
                             f"{EVAL_INSTANCE}{self.evaluations}", length, self.server)

    def aggregate(self, states: Sequence[dict], num_samples: Sequence[int]) -> State:
        if not states:
            raise ValueError("nothing to aggregate")
        length = int(states[0]["secure_length"])
        self.rounds += 1
        out = secure_vector_sum(self._call, self.runtime.client_ids, f"model/{self.rounds}",
                                length, self.server)
        if out is None:
            raise RunAborted("a client dropped or restarted during the secure model sum: mask "
                             "mode needs every client (use --secure-sum robust for dropouts), "
                             "and a restarted client has lost its model")
        total, _ = out
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
