"""Aggregation strategies: how the server combines client models (Flower's ``Strategy`` role)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

State = dict[str, Tensor]


class FedAvg:
    """Federated averaging (McMahan et al. 2017).

    ``uniform`` uses weights 1/K as in FedGCN's eq. (2); ``weighted`` weights client k by its
    number of training nodes n_k / Σ n (clients with no training nodes then get weight 0).
    """

    def __init__(self, weighting: str = "uniform") -> None:
        if weighting not in ("uniform", "weighted"):
            raise ValueError(f"unknown weighting {weighting!r}")
        self.weighting = weighting

    def weights(self, num_samples: Sequence[int]) -> list[float]:
        k = len(num_samples)
        total = float(sum(num_samples))
        if self.weighting == "uniform" or total == 0:
            return [1.0 / k] * k
        return [n / total for n in num_samples]

    def aggregate(self, states: Sequence[State], num_samples: Sequence[int]) -> State:
        """Weighted average of state dicts with identical keys and shapes."""
        if not states:
            raise ValueError("nothing to aggregate")
        w = self.weights(num_samples)
        return {key: torch.stack([s[key] for s in states]).mul_(
                    torch.tensor(w, dtype=states[0][key].dtype).view(-1, *[1] * states[0][key].dim())
                ).sum(0) for key in states[0]}


class EncryptedFedAvg(FedAvg):
    """FedAvg over CKKS-encrypted models (``--encrypt-models``). The server never sees a model.

    Each client sends ``Enc(c_k · w_k)`` with ``c_k = 1`` (uniform) or ``n_k`` (weighted),
    ``c_k`` in clear, signed with its identity. The server adds nothing: the global model is the
    round's signed updates, which each client checks, adds and decrypts, dividing by ``Σ c_k``:
    ``Σ c_k w_k / Σ c_k``, the same average as :class:`FedAvg`
    (:mod:`fedgl.privacy.he_signed`).
    """

    def aggregate(self, states, num_samples):
        from fedgl.privacy.he import EncryptedModelSum

        if not states:
            raise ValueError("nothing to aggregate")
        total = float(sum(s.weight for s in states))
        if total == 0:
            raise RuntimeError("weighted FedAvg of encrypted models: no client has training "
                               "nodes, so the weighted average is undefined")
        return EncryptedModelSum(tuple(states))
