"""Swift-FedGNN's baselines on the shared mini-batch FedSGD machinery: FedGNN-G, local-only
(the paper's "FedSage" row), LLCG and FedGNN-PNS. Import-light."""
