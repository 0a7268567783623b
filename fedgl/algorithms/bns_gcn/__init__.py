"""BNS-GCN (Wan et al. 2022; "BDS-GCN" in the FedGCN paper): random boundary-node sampling.
Import-light: see ``client``, ``options``, ``runner``."""
