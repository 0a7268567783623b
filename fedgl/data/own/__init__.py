"""Organisations' own data: from their tables to fedgl shards (docs/own-data.md).

:mod:`.secret` (the federation secret and the keyed pseudonyms), :mod:`.tables` (reading CSV and
Parquet), :mod:`.ingest` (one organisation's tables to its private ingest folder and the
pseudonyms-only request it hands to set-up), :mod:`.placement` (set-up: integer positions from
the pseudonyms, then each organisation's shard).
"""
