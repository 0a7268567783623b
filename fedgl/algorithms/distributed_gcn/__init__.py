"""Distributed GCN (Scardapane et al. 2020): every boundary node's features and hidden states
exchanged at every step. Import-light: see ``client``, ``runner``."""
