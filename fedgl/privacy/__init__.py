"""Privacy for the federation (docs/threat-model.md).

- :mod:`fedgl.privacy.he`: CKKS (TenSEAL) with a client-held key, integer packing, encrypted models.
- :mod:`fedgl.privacy.he_signed`: signed CKKS contributions, which a client checks and adds
  itself before it decrypts (pre-training blocks and encrypted models).
- :mod:`fedgl.privacy.identity`: Ed25519 identities, the roster, Shamir sharing.
- :mod:`fedgl.privacy.secagg`: authenticated secure aggregation for any sum (``mask`` and the
  dropout-robust ``robust``), client side; :mod:`fedgl.privacy.secagg_server`, server side;
  :mod:`fedgl.privacy.secure_models`: FedAvg over it.
- :mod:`fedgl.privacy.secure_sum`: the row plan that aligns FedGCN's rows across clients.
- :mod:`fedgl.privacy.dp`: per-node clipping, the (analytic) Gaussian mechanism, accounting.
- :mod:`fedgl.privacy.leakage`: the disclosure report, single rows, linear-algebra
  reconstruction and the value-level attack (:mod:`fedgl.privacy.value_decoding`), for the
  clients and for the server (an analysis outside the federation).

Submodules import TenSEAL and ``cryptography`` lazily, so plaintext runs do not load them.
"""
