"""FedSage+'s own configuration keys, with the reference implementation's defaults where it has
one (Zhang et al. 2021, released code: num_pred 5, hidden_portion 0.5, gen_epochs 20 full-batch
steps (its ``batch_size`` 32 is the classifier's), latent 128, encoder hidden 32, Adam lr 1e-3
and weight decay 1e-4, loss weights a = b = c = 1, cross-client candidates: num_pred = 5
neighbours of one random node of the other client).

``mend exact`` is not FedSage+ but the idealisation FedGCN's Table 2 assumes for it (a
generator that "perfectly learns neighbor information"): no generator is trained, and every own
node is mended with the true features of up to ``num_pred`` of its cross-client neighbours, sent
by their owners through the server (raw features travel: no privacy)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedgl.config.fields import choice
from fedgl.config.fields import option as _f
from fedgl.errors import ConfigError

#: how the local subgraphs are mended (see the module docstring)
MENDS = ("generated", "exact")


@dataclass(frozen=True)
class FedSagePlusOptions:
    """Options of ``--algorithm fedsage-plus``."""

    num_pred: int = _f(5, "NeighGen: most neighbours generated per node")
    hidden_portion: float = _f(0.5, "NeighGen training: share of own nodes hidden to make the "
                                    "impaired graph")
    gen_epochs: int = _f(20, "NeighGen training epochs (each: every batch of impaired-graph nodes)")
    gen_batch_size: int = _f(0, "NeighGen nodes whose local losses count per step (0: all, one "
                                "full-batch step per epoch, as the reference); every step still "
                                "encodes and mends the whole impaired graph")
    latent_dim: int = _f(128, "NeighGen encoder output size")
    gen_encoder_hidden: int = _f(32, "NeighGen encoder hidden units")
    gen_hidden: int = _f(256, "feature generator's last hidden layer (the reference uses 2048; "
                              "its parameters travel to every other client at every step)")
    gen_lr: float = _f(0.001, "NeighGen Adam learning rate")
    gen_weight_decay: float = _f(1e-4, "NeighGen Adam weight decay")
    count_weight: float = _f(1.0, "loss weight a: missing-neighbour count (smooth L1)")
    feat_weight: float = _f(1.0, "loss weight b: generated-feature matching (local and "
                                 "cross-client)")
    cls_weight: float = _f(1.0, "loss weight c: classifier on the mended impaired graph")
    cross_clients: int = _f(0, "other clients scoring each generator per step (0: all)")
    cross_candidates: int = _f(5, "cross-client feature matching: candidate features the "
                                  "scoring client draws per generated node, as the reference "
                                  "(num_pred local neighbours of one random own node); 0: all "
                                  "its nodes (exact all-pairs, O(n_i·n_j) time)")

    mend: str = _f("generated", "generated: NeighGen's neighbours (FedSage+); exact: the true "
                                "features of up to num_pred cross-client neighbours per node, "
                                "sent by their owners (the perfect generator FedGCN's Table 2 "
                                "assumes; raw features travel, no generator is trained)")

    def validate(self, cfg: Any = None) -> None:
        choice("mend", self.mend, MENDS)
        if self.num_pred < 1:
            raise ConfigError(f"num_pred must be >= 1 (got {self.num_pred}); e.g. --num-pred 5")
        if not 0.0 < self.hidden_portion < 1.0:
            raise ConfigError(f"hidden_portion must be in (0, 1) (got {self.hidden_portion}); "
                              "e.g. --hidden-portion 0.5")
        for name in ("gen_epochs", "latent_dim", "gen_encoder_hidden", "gen_hidden"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1 (got {getattr(self, name)})")
        for name in ("gen_batch_size", "cross_clients", "cross_candidates"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0 (got {getattr(self, name)}); 0 means all")
        for name in ("gen_lr", "gen_weight_decay", "count_weight", "feat_weight", "cls_weight"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0 (got {getattr(self, name)})")


def options_of(config: Any) -> FedSagePlusOptions:
    """The FedSage+ options of a configuration."""
    opts = config.options
    assert isinstance(opts, FedSagePlusOptions), "not a fedsage-plus configuration"
    return opts
