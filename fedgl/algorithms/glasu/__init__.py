"""GLASU: vertical federated GNN training with a split model, lazy aggregation at K of L layers
and Q stale local updates (papers/glasu.txt; docs/glasu.md). Import-light: nothing is imported
until the algorithm runs."""
