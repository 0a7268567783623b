"""The server holds no client's private key: after a secure pre-training round (and, with
encrypted models, a training round), nothing reachable from the server's own state (its
runtime, which in simulation holds the client objects themselves, left out) is an identity
key, an ephemeral X25519 key, a private CKKS context, or bytes equal to a client's private
identity key."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers import fedgcn_federation, random_graph, random_partition


def _reachable(root, skip: set[int]):
    """Every object reachable from ``root`` through containers, attributes and slots."""
    seen, stack = set(skip), [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, str | int | float | bool | type(None)):
            continue
        seen.add(id(obj))
        yield obj
        if isinstance(obj, torch.Tensor | np.ndarray | type) or callable(obj) and not hasattr(
                obj, "__dict__"):
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend(obj)
        else:
            stack.extend(getattr(obj, "__dict__", {}).values())
            for name in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, name):
                    stack.append(getattr(obj, name))


@pytest.mark.parametrize("cfg", [{"secure_sum": "mask", "secure_models": True},
                                 {"secure_sum": "robust"},
                                 {"secure_sum": "he", "encrypt_models": True,
                                  "oracle_eval": False}])
def test_the_server_holds_no_private_key(cfg):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from fedgl.privacy.identity import Identity

    graph = random_graph(nodes=80, seed=5)
    part = random_partition(graph.num_nodes, 3, seed=5)
    server = fedgcn_federation(graph, part, hops=2, rounds=1, local_steps=1, **cfg)
    server.pretrain()
    next(iter(server.rounds()))  # one training round (secure or encrypted models)
    clients = [server.runtime.local_client(k) for k in range(3)]
    secrets = {c.secagg.identity.private_bytes() for c in clients}
    found = []
    for obj in _reachable(server, {id(server.runtime)}):
        if isinstance(obj, Identity | Ed25519PrivateKey | X25519PrivateKey):
            found.append(type(obj).__name__)
        elif isinstance(obj, bytes) and obj in secrets:
            found.append("identity key bytes")
        elif getattr(obj, "is_private", None) is not None and callable(obj.is_private) \
                and obj.is_private():
            found.append("private CKKS context")
    assert found == []
    # the walk does reach the server's protocol state (a check that can fail): its secure-sum
    # server and, with HE, its public context
    reached = {type(o).__name__ for o in _reachable(server, {id(server.runtime)})}
    assert "SecureSumServer" in reached
    if cfg["secure_sum"] == "he":
        assert "HEServerContext" in reached
