"""Mini-batch FedSGD machinery shared by Swift-FedGNN and its baselines (FedGNN-G, local-only,
LLCG, FedGNN-PNS): clients that sample their own subgraph or join a server-mediated
cross-client computation, a server that averages one gradient per client per iteration, and a
schedule that says which clients go cross-client when. Import-light: nothing is imported here."""
