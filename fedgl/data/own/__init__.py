"""Organisations' own data: from their tables to fedgl shards (docs/own-data.md).

:mod:`.secret` (the federation secret and the keyed pseudonyms), :mod:`.ingest` (one
organisation's tables to its private ingest folder and the pseudonyms-only request it hands to
set-up) with its two readers: :mod:`.columnar`, :mod:`.vectorised` and :mod:`.joins` (pyarrow:
Arrow columns, checked per column, the edges joined a batch at a time) and :mod:`.tables` with
:mod:`.checks` (the core install: Python rows; the same files and errors), :mod:`.placement`
(set-up: integer positions from the pseudonyms, then each organisation's shard).
"""
