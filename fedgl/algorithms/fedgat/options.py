"""Configuration keys of the GAT algorithms: the GAT model's (shared by FedGAT and its baselines
DistGAT and centralised GAT) and FedGAT's first-layer approximation and protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedgl.config.fields import at_least, at_most, choice, option
from fedgl.errors import ConfigError


@dataclass(frozen=True)
class GATOptions:
    """The GAT model and its local training (Veličković et al.; FedGAT paper's settings)."""

    heads: int = option(8, "attention heads per hidden layer")
    gat_hidden: int = option(8, "hidden units per head")
    output_heads: int = option(1, "heads of the output layer, averaged (8 for PubMed)")
    gat_optimizer: str = option("sgd", "local optimiser: sgd (with --lr, --weight-decay) or adam "
                                       "(state kept per client across rounds; use e.g. --lr 0.005)")
    gat_features: str = option("l2", "feature scaling: l2 (unit rows, FedGAT's assumption 3), "
                                     "center-l2 (the authors' code) or none")
    fedgat_max_degree: int = option(0, "keep at most this many neighbours per node, sampled by "
                                       "seed (0: all; the authors' limit_node_degree)")

    def validate(self, cfg: Any) -> None:
        at_least("heads", self.heads, 1)
        at_least("gat_hidden", self.gat_hidden, 1)
        at_least("output_heads", self.output_heads, 1)
        at_least("fedgat_max_degree", self.fedgat_max_degree, 0)
        choice("gat_optimizer", self.gat_optimizer, ("adam", "sgd"))
        choice("gat_features", self.gat_features, ("l2", "center-l2", "none"))


@dataclass(frozen=True)
class FedGATOptions(GATOptions):
    """FedGAT (Ambekar et al.): the first layer's score exp(ψ(x)) by a degree-p Chebyshev
    approximation on [-R, R], computed from obfuscation matrices the server sends once."""

    degree: int = option(16, "degree p of the Chebyshev approximation of the first-layer "
                             "attention score exp(LeakyReLU(x))")
    fedgat_backend: str = option("fast", "first layer: fast (edge-wise; the server sends raw "
                                         "feature rows) or protocol (the paper's matrices)")
    fedgat_range: float = option(2.0, "interval [-R, R] of the approximation")
    fedgat_cap: bool = option(True, "rescale attention vectors so |x_ij| <= R for unit-norm "
                                    "features (keeps the polynomial in its interval)")
    fedgat_psi: str = option("leaky_relu", "score exp(psi(x)) with psi leaky_relu or smooth "
                                           "(softplus-smoothed, the authors' code)")
    fedgat_coefficients: str = option("projection", "Chebyshev coefficients by projection, "
                                                    "interpolation or lstsq")
    fedgat_basis: str = option("power", "evaluate the polynomial as a power series (paper eq. 6) "
                                        "or by the Chebyshev recurrence (same polynomial)")
    fedgat_send_p: bool = option(True, "protocol: send P_i instead of the d matrices "
                                       "M_1i(s) = h_i(s) P_i for a client's own nodes")
    vec_fedgat: bool = option(False, "Vector FedGAT (appendix F): cheaper, but LEAKS neighbour "
                                     "features to clients; needs --fedgat-backend protocol")
    fedgat_node_mb: float = option(1024.0, "protocol: refuse a node whose matrices exceed this "
                                           "many MB (use --fedgat-backend fast or "
                                           "--fedgat-max-degree)")

    def validate(self, cfg: Any) -> None:
        super().validate(cfg)
        at_least("degree", self.degree, 1)
        at_most("degree", self.degree, 64, "a polynomial of higher degree on [-R, R] only adds "
                "rounding error (the paper uses at most 16)")
        choice("fedgat_backend", self.fedgat_backend, ("fast", "protocol"))
        choice("fedgat_psi", self.fedgat_psi, ("leaky_relu", "smooth"))
        choice("fedgat_coefficients", self.fedgat_coefficients,
               ("projection", "interpolation", "lstsq"))
        choice("fedgat_basis", self.fedgat_basis, ("power", "chebyshev"))
        if self.fedgat_range <= 0:
            raise ConfigError(f"fedgat_range must be > 0 (got {self.fedgat_range}); use e.g. 2")
        if self.fedgat_node_mb <= 0:
            raise ConfigError(f"fedgat_node_mb must be > 0 (got {self.fedgat_node_mb}); use e.g. "
                              "1024, or --fedgat-backend fast")
        if self.vec_fedgat and self.fedgat_backend != "protocol":
            raise ConfigError("vec_fedgat is a variant of the FedGAT protocol; add "
                              "--fedgat-backend protocol, or drop --vec-fedgat")
