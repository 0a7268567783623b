"""FedGAT (Ambekar et al., "FedGAT: A Privacy-Preserving Federated Approximation Algorithm for
Graph Attention Networks"): polynomial first-layer attention from obfuscation matrices sent once,
then FedAvg. See docs/fedgat.md."""

from fedgl.algorithms.fedgat.client import FedGATClient, GATClient, GATView, restrict_view
from fedgl.algorithms.fedgat.common import (
    GATOracle,
    build_gat,
    cap_in_degree,
    gat_initial_weights,
    run_gat_federated,
    scale_features,
)
from fedgl.algorithms.fedgat.server import FedGATServer, GATFedAvgServer

__all__ = ["FedGATClient", "FedGATServer", "GATClient", "GATFedAvgServer", "GATOracle",
           "GATView", "build_gat", "cap_in_degree", "gat_initial_weights", "restrict_view",
           "run_gat_federated", "scale_features"]
