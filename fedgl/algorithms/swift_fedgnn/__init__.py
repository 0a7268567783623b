"""Swift-FedGNN: mini-batch federated GNN training with periodic server-mediated cross-client
training (see docs/swift-fedgnn.md). Import-light: submodules are imported when the algorithm
runs."""
