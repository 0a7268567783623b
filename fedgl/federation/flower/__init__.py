"""The Flower transport: fedgl's protocol between separate organisations.

Each organisation runs its own *party* (:mod:`fedgl.deployment.party`: its client role built
from its own shard and identity key, listening on a local socket only it can open) and a Flower
SuperNode beside it (:mod:`.supernode`: Flower's own, its fixed waits paced by :mod:`.pacing`).
The SuperNode runs in Flower's process isolation mode and answers every message itself, whatever
app a run submitted, with :mod:`.client_app`, a relay that hands the message's fedgl bytes to
the party and returns the party's encoded reply (:mod:`.relay_runner` does the same from a
process of its own, the layout before, kept for the benchmarks). The server side is a
Flower ServerApp whose :class:`~fedgl.federation.flower.runtime.FlowerRuntime` implements the
same ``call(msg_type, args, phase=, clients=)`` as the local runtime, so every fedgl server runs
over it unchanged.

Nothing here is imported unless a deployment runs (``flwr`` is the optional extra
``fedgl[flower]``).
"""
