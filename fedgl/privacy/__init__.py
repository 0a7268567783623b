"""Privacy for the federation (issue 4; docs/threat-model.md).

- :mod:`fedgl.privacy.he`: CKKS (TenSEAL) with a client-held key, integer packing, encrypted models.
- :mod:`fedgl.privacy.secure_sum`: X25519 pairwise keys, sealed client-to-client messages,
  pairwise additive masks, and the row plan that aligns rows across clients.
- :mod:`fedgl.privacy.dp`: per-node clipping and the (analytic) Gaussian mechanism.
- :mod:`fedgl.privacy.leakage`: the exact-disclosure report (an analysis outside the federation).

Submodules import TenSEAL and ``cryptography`` lazily, so plaintext runs do not load them.
"""
