"""Client sampling per round: the cross-device setting (McMahan et al. 2017, "C·K clients").

Round t trains ``m`` clients drawn uniformly without replacement from the clients alive at that
round, with a generator seeded by ``(seed, t)`` only. The choice is therefore a pure function of
the seed, the round and the alive clients: a resumed run draws exactly the clients an
uninterrupted one would have, and a checkpoint needs to store nothing beyond the round number.
"""

from __future__ import annotations

import numpy as np


class ClientSampler:
    """``sample(t, ids)``: the sorted ids of the ``per_round`` clients training in round ``t``
    (all of them when ``per_round`` is 0 or at least their number)."""

    def __init__(self, per_round: int, seed: int) -> None:
        if per_round < 0:
            raise ValueError(f"clients_per_round must be >= 0 (got {per_round})")
        self.per_round = per_round
        self.seed = seed

    def sample(self, round: int, client_ids: list[int]) -> list[int]:
        ids = sorted(client_ids)
        if self.per_round == 0 or self.per_round >= len(ids):
            return ids
        rng = np.random.default_rng([self.seed, round, 0xC11E])
        pick = rng.choice(len(ids), size=self.per_round, replace=False)
        return sorted(ids[i] for i in pick)

    def state_dict(self) -> dict:
        """All a checkpoint needs to rebuild the sampler (the draw itself is stateless)."""
        return {"per_round": self.per_round, "seed": self.seed}
