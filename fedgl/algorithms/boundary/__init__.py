"""Per-round boundary exchange shared by the GCN baselines that communicate every round
(BNS-GCN, Distributed GCN). Import-light: the client and server live in submodules."""
