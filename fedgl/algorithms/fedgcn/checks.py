"""The server's checks on what clients announce before the pre-training exchange.

The server trusts no client's announcement blindly (docs/threat-model.md, "client trust"): every
client's own node ids must be its own alone (no two clients claim a node), every remote
neighbour it asks about must be a node another client owns, ids are listed once, the degrees it
reports are at least 1 (the self-loop), and the number of rows it asks back lies between its own
nodes and everything it touches. A violation stops the run with one line naming the client.

By default (``adjacency_check: node``) the check is per pair of clients: client k may ask about
nodes of client j when j lists some node of k as a neighbour. A client sharing one edge with j can
then ask about any node of j. With ``adjacency_check: edge`` both ends announce their cross-client
edges (own id, remote id) and the server accepts a request of client k for node v only when v's
owner announced an edge from v to a node of k: a modified client receives only sums of its real
neighbours. The price: the server learns every cross-client edge (docs/threat-model.md).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from fedgl.errors import RunAborted


class ClientMisbehaved(RunAborted):
    """A client announced something no honest client sends (the run stops)."""


def cross_edges(data) -> torch.Tensor:
    """A client's cross-client edges as ``[2, E]`` global ids (own node, remote node), each once
    and sorted: what it announces with ``adjacency_check: edge``."""
    j, i = data.edge_index
    remote = ~data.owns(j)
    if not bool(remote.any()):
        return torch.zeros((2, 0), dtype=torch.long)
    return torch.unique(torch.stack([i[remote], j[remote]]), dim=1)


def check_announcements(msgs: Mapping[int, dict], complete: bool, own_key: str = "degrees",
                        edges: bool = False) -> None:
    """Check every client's ``ids`` / ``num_requested`` / ``degrees`` announcement.
    ``complete``: every client of the federation announced (else a remote node may belong to a
    client that dropped, and only the other checks apply). ``edges``: the announcements carry
    ``cross_edges`` and every remote node must be a confirmed neighbour (per edge)."""
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
    if edges:
        _check_edges(msgs, owners, remote, complete)
    elif complete:
        _check_mutual(owners, remote)


def _owner_lookup(owners: Mapping[int, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.cat(list(owners.values())) if owners else torch.zeros(0, dtype=torch.long)
    who = torch.cat([torch.full((len(o),), k, dtype=torch.long) for k, o in owners.items()]) \
        if owners else ids
    order = torch.argsort(ids)
    return ids[order], who[order]


def _owner_of(ids: torch.Tensor, who: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
    """Owner of each node (-1 where no announcing client owns it)."""
    if not len(ids):
        return torch.full_like(nodes, -1)
    pos = torch.searchsorted(ids, nodes).clamp(max=len(ids) - 1)
    return torch.where(ids[pos] == nodes, who[pos], torch.full_like(nodes, -1))


def _check_edges(msgs: Mapping[int, dict], owners: Mapping[int, torch.Tensor],
                 remote: Mapping[int, torch.Tensor], complete: bool) -> None:
    """Per-edge adjacency: client k's announced cross edges start at its own nodes and end at
    nodes it touches, and each remote node it asks about is confirmed by its owner's
    announcement of an edge to a node of k. (A node whose owner did not announce may belong to
    a client that dropped out; only when every client announced is that refused.)"""
    ids, who = _owner_lookup(owners)
    top = 1 + max([int(ids.max())] if len(ids) else [0]
                  + [int(r.max()) for r in remote.values() if len(r)])
    keys = []  # asker * top + node: client `asker` may ask about `node`
    for k, m in msgs.items():
        e = m.get("cross_edges")
        if not isinstance(e, torch.Tensor) or e.dtype != torch.int64 or e.dim() != 2 \
                or e.size(0) != 2:
            raise ClientMisbehaved(f"client {k} announced no cross-client edges (adjacency "
                                   "check 'edge'); the run stops")
        stray = ~torch.isin(e[0], owners[k])
        if bool(stray.any()):
            raise ClientMisbehaved(f"client {k} announced a cross-client edge from node "
                                   f"{int(e[0][stray][0])}, which it does not own; the run stops")
        stray = ~torch.isin(e[1], remote[k])
        if bool(stray.any()):
            raise ClientMisbehaved(f"client {k} announced a cross-client edge to node "
                                   f"{int(e[1][stray][0])}, which it does not list as a "
                                   "neighbour; the run stops")
        asker = _owner_of(ids, who, e[1])
        keys.append((asker * top + e[0])[asker >= 0])
    confirmed = torch.unique(torch.cat(keys)) if keys else torch.zeros(0, dtype=torch.long)
    for k, r in remote.items():
        owner = _owner_of(ids, who, r)
        ok = torch.isin(k * top + r, confirmed) | (owner < 0)
        if complete:
            ok &= owner >= 0
        if not bool(ok.all()):
            raise ClientMisbehaved(f"client {k} asked about node {int(r[~ok][0])}, but its owner "
                                   f"(client {int(owner[~ok][0])}) announced no edge from it to "
                                   f"a node of client {k}; the run stops")


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
