"""FedGCN's own configuration keys."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fedgl.config.fields import choice, option
from fedgl.errors import ConfigError

ONE_HOP_VARIANTS = ("eq33", "paper-code")  # see fedgl/algorithms/fedgcn/one_hop.py
ADJACENCY_CHECKS = ("node", "edge")  # see fedgl/algorithms/fedgcn/checks.py


@dataclass(frozen=True)
class FedGCNOptions:
    """FedGCN (Yao et al.): how many hops the one pre-training exchange reaches."""

    hops: int = option(2, "communication hops L of the pre-training round (0, 1 or 2; at most "
                          "--layers)")
    one_hop_variant: str = option("eq33", "with --hops 1: 'eq33' (the paper's eq. 33: own rows "
                                          "only, later layers on the local subgraph) or "
                                          "'paper-code' (the released code: also the remote "
                                          "neighbours' rows, layer 2 keeps the cross-client "
                                          "edges; costs the 2-hop exchange)")
    pretrain_chunk_rows: int = option(65536, "pre-training sums computed this many rows at a "
                                             "time by clients and server (bounds memory; same "
                                             "result for any value)")
    pretrain_block_rows: int = option(262144, "the pre-training exchange streams blocks of this "
                                              "many consecutive global ids (upload, sum, reply "
                                              "per block; bounds every party's memory; same "
                                              "sums for any value)")
    feature_bound: float | None = option(None, "public bound B on every feature value (|x| <= B, "
                                               "e.g. 1 for 0/1 features): the server refuses a "
                                               "pre-training upload beyond what B allows and "
                                               "clients refuse received sums beyond it (off when "
                                               "unset; docs/threat-model.md)")
    update_bound: float | None = option(None, "the server refuses a model update whose L2 "
                                              "distance from the global model exceeds this, or "
                                              "that is not finite (off when unset)")
    adjacency_check: str = option("node", "which remote nodes a client may ask about: 'node' "
                                          "(a node of a client that lists one of its nodes as "
                                          "a neighbour) or 'edge' (both ends announce their "
                                          "cross-client edges; only confirmed neighbours; the "
                                          "server learns those edges)")
    leakage_report: bool = option(True, "after each repeat the experimenter's leakage report "
                                        "(who can reconstruct which features, with the full "
                                        "graph; tens of seconds on Cora): "
                                        "--no-leakage-report skips it")

    def validate(self, cfg: Any) -> None:
        from fedgl.algorithms.minibatch_checks import check_minibatch

        check_minibatch(cfg)
        if self.pretrain_chunk_rows < 1:
            raise ConfigError(f"pretrain_chunk_rows must be >= 1 (got {self.pretrain_chunk_rows}); "
                              "use e.g. 65536")
        if self.pretrain_block_rows < 1:
            raise ConfigError(f"pretrain_block_rows must be >= 1 (got {self.pretrain_block_rows}); "
                              "use e.g. 262144")
        if self.hops < 0:
            raise ConfigError(f"hops must be 0, 1, 2, ... (got {self.hops})")
        if self.hops > 2:
            raise ConfigError(f"hops must be 0, 1 or 2 (got {self.hops}): the pre-training round "
                              "reaches 2 hops; deeper models use --layers with --hops 2")
        if self.hops > cfg.layers:
            raise ConfigError(f"hops ({self.hops}) cannot exceed layers ({cfg.layers}); "
                              f"use --hops {cfg.layers} or more --layers")
        choice("one_hop_variant", self.one_hop_variant, ONE_HOP_VARIANTS)
        self._validate_bounds(cfg)
        if self.one_hop_variant != "eq33":
            if self.hops != 1:
                raise ConfigError(f"one_hop_variant '{self.one_hop_variant}' applies to --hops 1 "
                                  f"(got --hops {self.hops}); drop it or use --hops 1")
            if cfg.secure_sum != "none" or cfg.dp_epsilon is not None or \
                    cfg.min_contributors > 1 or getattr(cfg, "min_partial_nodes", 1) > 1 or \
                    getattr(cfg, "own_scoring_only", False):
                raise ConfigError("one_hop_variant 'paper-code' runs the plaintext exchange only; "
                                  "drop secure_sum/dp_epsilon/min_contributors/"
                                  "min_partial_nodes/own_scoring_only or use eq33")
        if cfg.model == "sage" and self.hops > 0:
            raise ConfigError("FedGCN with model 'sage' supports only --hops 0 (SAGE's root term "
                              "would need remote raw features); use --model gcn for 1/2-hop")
        if cfg.model == "gin":
            raise ConfigError("FedGCN trains gcn or sage models; use --model gcn")
        pretrain_only = [name for name, on in (("secure_sum", cfg.secure_sum != "none"),
                                               ("dp_epsilon", cfg.dp_epsilon is not None),
                                               ("min_contributors", cfg.min_contributors > 1))
                         if on]
        if pretrain_only and self.hops == 0:
            raise ConfigError(f"{pretrain_only[0]} protects the pre-training sums, which 0-hop "
                              "does not send; use --hops 1 or 2 or drop it")

    def _validate_bounds(self, cfg: Any) -> None:
        choice("adjacency_check", self.adjacency_check, ADJACENCY_CHECKS)
        for name in ("feature_bound", "update_bound"):
            value = getattr(self, name)
            if value is not None and not (0 < value < math.inf):
                raise ConfigError(f"{name} must be a positive number (got {value}); e.g. "
                                  f"--{name.replace('_', '-')} 1, or leave it unset (off)")
        if self.hops == 0:
            on = [n for n, v in (("feature_bound", self.feature_bound is not None),
                                 ("adjacency_check", self.adjacency_check != "node")) if v]
            if on:
                raise ConfigError(f"{on[0]} checks the pre-training exchange, which 0-hop does "
                                  "not run; use --hops 1 or 2 or drop it")
        if self.update_bound is not None and (cfg.secure_models or cfg.encrypt_models):
            raise ConfigError("update_bound needs the server to see each model update, which "
                              "secure_models/encrypt_models hide; drop one of them")
