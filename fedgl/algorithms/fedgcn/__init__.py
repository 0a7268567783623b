"""FedGCN (Yao et al.): one pre-training exchange of neighbour sums, then FedAvg."""

from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.algorithms.fedgcn.server import FedGCNServer

__all__ = ["FedGCNClient", "FedGCNServer"]
