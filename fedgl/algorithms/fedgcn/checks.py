"""The server's checks on what clients announce before the pre-training exchange.

The server trusts no client's announcement blindly (docs/threat-model.md, "client trust"): every
client's own node ids must be its own alone (no two clients claim a node), every remote
neighbour it asks about must be a node another client owns, ids are listed once, the degrees it
reports are at least 1 (the self-loop), and the number of rows it asks back lies between its own
nodes and everything it touches. A violation stops the run with one line naming the client.

What this cannot catch: a client that claims an edge to a node another client really owns. The
announcement carries node ids, not edges, so the server cannot tell a real cross-client neighbour
from an invented one (that would need both ends to confirm every edge, revealing the cross-client
edges to the server).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from fedgl.errors import RunAborted


class ClientMisbehaved(RunAborted):
    """A client announced something no honest client sends (the run stops)."""


def check_announcements(msgs: Mapping[int, dict], complete: bool, own_key: str = "degrees") -> None:
    """Check every client's ``ids`` / ``num_requested`` / ``degrees`` announcement.
    ``complete``: every client of the federation announced (else a remote node may belong to a
    client that dropped, and only the other checks apply)."""
    owners: dict[int, torch.Tensor] = {}
    remote: dict[int, torch.Tensor] = {}
    for k, m in msgs.items():
        ids, n_req = m["ids"], int(m["num_requested"])
        n_own = len(m[own_key]) if own_key in m else n_req
        why = None
        if ids.dtype != torch.int64 or ids.dim() != 1:
            why = "ids that are not a list of node ids"
        elif torch.unique(ids).numel() != ids.numel():
            why = "a node id more than once"
        elif not n_own <= n_req <= len(ids) or n_own > len(ids):
            why = f"{n_req} requested rows for {len(ids)} ids ({n_own} own)"
        elif own_key in m and bool((m[own_key] < 1).any()):
            why = "a degree below 1"
        if why is not None:
            raise ClientMisbehaved(f"client {k} announced {why}; the run stops")
        owners[k], remote[k] = ids[:n_own], ids[n_own:]
    all_own = torch.cat(list(owners.values())) if owners else torch.zeros(0, dtype=torch.long)
    uniq, counts = torch.unique(all_own, return_counts=True)
    if bool((counts > 1).any()):
        node = int(uniq[counts > 1][0])
        claim = sorted(k for k, o in owners.items() if bool((o == node).any()))
        raise ClientMisbehaved(f"clients {claim} all claim to own node {node}; the run stops")
    for k, r in remote.items():
        pos = torch.searchsorted(uniq, r).clamp(max=max(len(uniq) - 1, 0))
        known = (uniq[pos] == r) if len(uniq) else torch.zeros_like(r, dtype=torch.bool)
        bad = torch.isin(r, owners[k]) | (~known if complete else torch.zeros_like(known))
        if bool(bad.any()):
            node = int(r[bad][0])
            raise ClientMisbehaved(f"client {k} asked about node {node}, which no other client "
                                   "owns; the run stops")
    if complete:
        _check_mutual(owners, remote)


def _check_mutual(owners: Mapping[int, torch.Tensor], remote: Mapping[int, torch.Tensor]) -> None:
    """A cross-client edge is known to both ends: if client k lists a node of client j as a
    neighbour, j must list some node of k as one (node-level; edges are not announced)."""
    ids = torch.cat(list(owners.values()))
    who = torch.cat([torch.full((len(o),), k, dtype=torch.long) for k, o in owners.items()])
    order = torch.argsort(ids)
    ids, who = ids[order], who[order]
    neighbours_of: dict[int, set[int]] = {}
    for k, r in remote.items():
        pos = torch.searchsorted(ids, r).clamp(max=max(len(ids) - 1, 0))
        neighbours_of[k] = set(who[pos].tolist()) if len(r) else set()
    for k, js in neighbours_of.items():
        for j in sorted(js):
            if k not in neighbours_of.get(j, set()):
                raise ClientMisbehaved(f"client {k} asked about nodes of client {j}, but client "
                                       f"{j} has no neighbour at client {k} (an edge only one end "
                                       "knows); the run stops")
