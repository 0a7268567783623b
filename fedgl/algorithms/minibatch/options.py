"""Options every mini-batch FedSGD algorithm reads (a base class of their options)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedgl.config.fields import option, parse_num_neighbors
from fedgl.errors import ConfigError

OPTIMIZERS = ("adam", "sgd")
EVAL_MODES = ("cross", "local")


@dataclass(frozen=True)
class MiniBatchOptions:
    server_optimizer: str = option(
        "adam", "server optimiser on the averaged gradient: adam (the paper's experiments) or "
                "sgd (its Algorithm 1)")
    eval_mode: str = option(
        "cross", "cross: full-neighbour federated inference through the server (global-graph "
                 "accuracy); local: each client on its own subgraph")
    eval_batch: int = option(
        0, "cross evaluation: labelled nodes per exchange (0: all at once; bounds memory on "
           "large graphs)")
    eval_max_nodes: int = option(
        0, "cross evaluation: at most this many labelled nodes per split per client, a fixed "
           "seeded uniform subset (0: all; bounds evaluation on large graphs)")
    eval_num_neighbors: str = option(
        "", "cross evaluation: neighbours sampled per hop, first layer first (as "
            "--num-neighbors); empty: all neighbours (exact)")

    def validate(self, cfg: Any) -> None:
        if self.server_optimizer not in OPTIMIZERS:
            raise ConfigError(f"server_optimizer {self.server_optimizer!r} is not one of "
                              f"{', '.join(OPTIMIZERS)}; use --server-optimizer adam")
        if self.eval_mode not in EVAL_MODES:
            raise ConfigError(f"eval_mode {self.eval_mode!r} is not one of "
                              f"{', '.join(EVAL_MODES)}; use --eval-mode cross")
        if self.eval_batch < 0:
            raise ConfigError(f"eval_batch must be >= 0 (got {self.eval_batch}); 0 means all")
        if self.eval_max_nodes < 0:
            raise ConfigError(f"eval_max_nodes must be >= 0 (got {self.eval_max_nodes}); "
                              "0 means all")
        parse_num_neighbors(self.eval_num_neighbors, int(getattr(cfg, "layers", 2)),
                            "eval_num_neighbors")
        if getattr(cfg, "model", "sage") not in ("sage", "gin", "gcn"):
            raise ConfigError(f"model {cfg.model!r} has no mini-batch form; use --model sage, "
                              "gin or gcn")
