"""FedSage+ (Zhang et al. 2021): federatedly trained missing-neighbour generators (NeighGen) mend
each client's local subgraph; the classifier then trains on the mended graphs with FedAvg.
Import-light: see ``neighgen``, ``client``, ``server``, ``options``, ``runner``."""
