"""Cross-organisation deployment on Flower: the party of each organisation, the ServerApp, and
the ``fedgl shard`` / ``fedgl client`` / ``fedgl server`` commands (docs/deployment.md).
Imported only when used; needs the optional extra ``fedgl[flower]``."""
