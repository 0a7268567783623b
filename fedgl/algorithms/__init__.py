"""The algorithms, one package each (``fedgcn/``, ``fedgat/``, ...), and the mechanisms they share
(``base.py``: FedAvg client and server; ``runner.py``: the FedAvg driver; ``batched.py``: batched
local training; ``single_party.py``: the centralised loop).

Nothing is imported here: an algorithm is looked up through :mod:`fedgl.algorithms.registry`,
which imports its package only when it is chosen.
"""
