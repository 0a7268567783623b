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
