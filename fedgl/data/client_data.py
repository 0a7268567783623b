"""Per-client views of a partitioned graph: what one organisation owns, and nothing more.

A :class:`ClientData` holds its own node ids (global), their features, labels and split masks,
and the edges incident to its own nodes, including cross-client edges whose remote endpoint id
(but not features) it knows. :func:`split_graph` is the set-up step that hands each organisation
its data; after it, the full graph must not be reachable from any client or server object.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition

#: the labelled splits every client holds a mask of
SPLITS = ("train", "val", "test")


@dataclass
class ClientData:
    """Data owned by one client (horizontal setting).

    ``edge_index`` is ``[2, E_k]`` in global ids, each column ``(j, i)`` an edge into an owned node
    ``i`` from a neighbour ``j`` (owned or remote). As the graph is undirected this lists every
    edge incident to an owned node, once per direction that ends at an owned node.
    """

    client_id: int
    node_ids: Tensor
    x: Tensor
    y: Tensor
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor
    edge_index: Tensor
    num_classes: int
    #: stable keys (``uint8 [num_nodes + num_remote, 16]``) of the own nodes, then of the remote
    #: neighbours (:meth:`remote_neighbors` order), where global ids may change between set-ups:
    #: own data's pseudonyms. None: the global ids are stable (built-in data sets).
    keys: Tensor | None = None

    @property
    def num_nodes(self) -> int:
        return int(self.node_ids.numel())

    @property
    def num_features(self) -> int:
        return int(self.x.size(1))

    def degrees(self) -> Tensor:
        """Full-graph degree (without self-loop) of each owned node, in ``node_ids`` order."""
        local = self.global_to_local(self.edge_index[1])
        return torch.bincount(local, minlength=self.num_nodes)

    def global_to_local(self, ids: Tensor) -> Tensor:
        """Position of owned global ids in ``node_ids`` (which is sorted); ids must be owned."""
        return torch.searchsorted(self.node_ids, ids)

    def owns(self, ids: Tensor) -> Tensor:
        pos = torch.searchsorted(self.node_ids, ids).clamp(max=max(self.num_nodes - 1, 0))
        return self.node_ids[pos] == ids if self.num_nodes else torch.zeros_like(ids, dtype=torch.bool)

    def remote_neighbors(self) -> Tensor:
        """Sorted global ids of non-owned nodes adjacent to an owned node."""
        src = self.edge_index[0]
        return torch.unique(src[~self.owns(src)])

    def tensors(self) -> dict[str, Tensor]:
        return {k: getattr(self, k) for k in ("node_ids", "x", "y", "train_mask", "val_mask",
                                               "test_mask", "edge_index")}


def split_graph(graph: GraphData, part: Partition) -> list[ClientData]:
    """Give each client its own nodes, features, labels, masks and incident edges (copies).

    Equal to ``[client_shard(graph, part, k) for k in range(K)]``, in O(N + E log E) rather
    than O(K (N + E)): nodes and edges are grouped by owner once (stable sorts keep ids and
    edge order as :func:`client_shard` has them), so 10,000 clients split as fast as 10."""
    k = part.num_clients
    owner = torch.from_numpy(part.owner)
    nodes = torch.argsort(owner, stable=True).split(torch.bincount(owner, minlength=k).tolist())
    edge_owner = owner[graph.edge_index[1]]
    edges = torch.argsort(edge_owner, stable=True).split(
        torch.bincount(edge_owner, minlength=k).tolist())
    shards = [ClientData(client_id=c, node_ids=ids, x=graph.x[ids], y=graph.y[ids],
                         train_mask=graph.train_mask[ids], val_mask=graph.val_mask[ids],
                         test_mask=graph.test_mask[ids], edge_index=graph.edge_index[:, edges[c]],
                         num_classes=graph.num_classes)
              for c, ids in enumerate(nodes)]
    node_keys = getattr(graph, "node_keys", None)
    if node_keys is not None:  # own data: every client's rows keep their pseudonyms
        for shard in shards:
            shard.keys = node_keys[torch.cat([shard.node_ids, shard.remote_neighbors()])]
    return shards


def client_shard(graph: GraphData, part: Partition, client: int) -> ClientData:
    """One client's data (copies): own nodes, their features, labels, masks, incident edges."""
    owner = torch.from_numpy(part.owner)
    ids = torch.from_numpy(part.nodes_of(client))
    return ClientData(
        client_id=client, node_ids=ids.clone(), x=graph.x[ids].clone(), y=graph.y[ids].clone(),
        train_mask=graph.train_mask[ids].clone(), val_mask=graph.val_mask[ids].clone(),
        test_mask=graph.test_mask[ids].clone(),
        edge_index=graph.edge_index[:, owner[graph.edge_index[1]] == client].clone(),
        num_classes=graph.num_classes)
