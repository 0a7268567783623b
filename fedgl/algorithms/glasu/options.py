"""GLASU's own options and the resolved protocol parameters every party is built from.

Aggregation layers (notes A1): layers are numbered ``1..L`` for the user (``--agg-layers 2,4``:
the server aggregates the outputs of layers 2 and 4); internally ``I ⊆ {0..L-1}`` with ``l ∈ I``
meaning the output ``H[l+1]`` is aggregated. A count ``K`` gives the uniform schedule
``I = {kL/K - 1 : k = 1..K}`` (``L = 4``: K=1 → {4}, K=2 → {2, 4}, K=4 → {1, 2, 3, 4} in user
numbering). The last layer always aggregates, so every client predicts from the same ``H[L]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedgl.config.fields import option
from fedgl.errors import ConfigError

BACKBONES = ("gcn", "gat", "gcnii")
AGGREGATES = ("mean", "concat")
GRAD_MODES = ("local_stale", "exact")
MODES = ("glasu", "centralized", "standalone", "simulated")


@dataclass(frozen=True)
class GlasuModelOptions:
    """The split model and its optimiser: read by GLASU and its baselines."""

    backbone: str = option("gcnii", "GLASU backbone GNN: gcn, gat or gcnii")
    aggregate: str = option("mean", "GLASU server aggregation of embeddings: mean or concat "
                                    "(gcn/gat only)")
    gcnii_alpha: float = option(0.1, "GCNII initial-residual weight alpha")
    gcnii_lambda: float = option(0.5, "GCNII identity-mapping lambda (beta_l = log(lambda/l + 1))")
    glasu_optimizer: str = option("adam", "GLASU client optimiser: adam (the recipe that "
                                          "reproduced the paper's Table 1, with --lr 0.01) or sgd "
                                          "(the algorithm box's plain steps)")
    glasu_momentum: float = option(0.0, "GLASU SGD momentum")

    def validate(self, cfg: object = None) -> None:
        for name, allowed in (("backbone", BACKBONES), ("aggregate", AGGREGATES),
                              ("glasu_optimizer", ("sgd", "adam"))):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)} "
                                  f"(got {getattr(self, name)!r})")
        if self.backbone == "gcnii" and self.aggregate == "concat":
            raise ConfigError("gcnii needs a constant width: use --aggregate mean with it")


@dataclass(frozen=True)
class GlasuOptions(GlasuModelOptions):
    """Options of ``--algorithm glasu``."""

    agg_layers: str = option("2", "GLASU aggregation layers: a count K (uniform schedule, always "
                                  "the last layer) or 1-based layers ending with L, e.g. 2,4")
    stale_steps: int = option(4, "GLASU local updates Q per round, other clients' embeddings "
                                 "stale")
    grad_mode: str = option("local_stale", "GLASU gradients: local_stale (paper Alg. 4: others' "
                                           "embeddings are constants) or exact (backprop through "
                                           "the server each step; needs --stale-steps 1)")
    label_holders: str = option("all", "GLASU labels at all clients, or at one (client 0; "
                                       "paper appendix B.2)")

    def validate(self, cfg: object = None) -> None:
        super().validate(cfg)
        for name, allowed in (("grad_mode", GRAD_MODES), ("label_holders", ("all", "one"))):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)} "
                                  f"(got {getattr(self, name)!r})")
        if self.stale_steps < 1:
            raise ConfigError(f"stale_steps must be at least 1 (got {self.stale_steps})")
        if self.grad_mode == "exact" and self.stale_steps != 1:
            raise ConfigError("grad_mode exact backpropagates through the server every step; "
                              "use --stale-steps 1 with it")
        if self.label_holders == "one" and self.grad_mode == "exact":
            raise ConfigError("label_holders one uses the paper's stale gradient (B.2); use "
                              "--grad-mode local_stale with it")
        if cfg is not None:
            agg_layer_set(self.agg_layers, int(getattr(cfg, "layers", 2)))


def agg_layer_set(spec: str | int, layers: int) -> tuple[int, ...]:
    """0-based aggregation layers ``I`` from a count ``K`` or a 1-based list (see module doc)."""
    text = str(spec).strip()
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"agg_layers must be a count or a list like 2,4 (got {text!r})") from None
    if not values:
        raise ConfigError("agg_layers is empty; give a count K or a list like 2,4")
    if "," not in text:
        k = values[0]
        if not 1 <= k <= layers or layers % k:
            raise ConfigError(f"agg_layers count K={k} must divide layers={layers} (uniform "
                              f"schedule); or list the layers, e.g. --agg-layers {layers}")
        return tuple(j * layers // k - 1 for j in range(1, k + 1))
    if sorted(set(values)) != values or values[0] < 1 or values[-1] != layers:
        raise ConfigError(f"agg_layers list must be increasing 1-based layers ending with "
                          f"L={layers} (got {text!r})")
    return tuple(v - 1 for v in values)


@dataclass(frozen=True)
class GlasuParams:
    """Everything a GLASU party needs, resolved from the config (plain values only)."""

    clients: int
    layers: int
    hidden: int
    num_classes: int
    agg: tuple[int, ...]  # 0-based aggregation layers I
    stale_steps: int = 1
    aggregate: str = "mean"
    grad_mode: str = "local_stale"
    backbone: str = "gcn"
    dropout: float = 0.0
    lr: float = 0.1
    weight_decay: float = 0.0
    optimizer: str = "sgd"
    momentum: float = 0.0
    batch_size: int = 16
    fanout: int = 3
    label_holders: str = "all"
    gcnii_alpha: float = 0.1
    gcnii_lambda: float = 0.5

    @property
    def shared_sets(self) -> tuple[int, ...]:
        """Output-set indices ``j_k = l_k + 1`` whose node sets all clients share."""
        return tuple(i + 1 for i in self.agg)

    def share(self, client: int) -> tuple[int, int]:
        """Columns ``[a, b)`` of an aggregated ``H`` that ``client`` produces (concat), or the
        whole width (mean)."""
        if self.aggregate == "mean":
            return 0, self.hidden
        base, extra = divmod(self.hidden, self.clients)
        a = client * base + min(client, extra)
        return a, a + base + (1 if client < extra else 0)
