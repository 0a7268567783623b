"""The Flower transport: fedgl's protocol between separate organisations.

Each organisation runs its own *party* (:mod:`fedgl.deployment.party`: its client role built
from its own shard and identity key, listening on a local socket only it can open) and a Flower
SuperNode beside it. The SuperNode runs in Flower's process isolation mode, and its only task
runner is :mod:`.relay_runner`, which answers every message, whatever app a run submitted, with
:mod:`.client_app`, a relay that hands the message's fedgl bytes to the party and returns the
party's encoded reply. The server side is a
Flower ServerApp whose :class:`~fedgl.federation.flower.runtime.FlowerRuntime` implements the
same ``call(msg_type, args, phase=, clients=)`` as the local runtime, so every fedgl server runs
over it unchanged.

Nothing here is imported unless a deployment runs (``flwr`` is the optional extra
``fedgl[flower]``).
"""
