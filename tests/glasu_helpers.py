"""GLASU federations built directly from parameters (no config), for the GLASU tests."""

from __future__ import annotations

from fedgl.algorithms.glasu.client import GlasuClient
from fedgl.algorithms.glasu.options import GlasuParams, agg_layer_set
from fedgl.algorithms.glasu.server import GlasuServer
from fedgl.data.graph import GraphData
from fedgl.data.vertical import vertical_split
from fedgl.federation.runtime import LocalRuntime


def glasu_params(graph: GraphData, clients: int = 3, layers: int = 4, agg: str = "2",
                 **kw) -> GlasuParams:
    defaults = dict(hidden=6, stale_steps=1, backbone="gcn", lr=0.1, batch_size=8, fanout=3)
    defaults.update(kw)
    return GlasuParams(clients=clients, layers=layers, num_classes=graph.num_classes,
                       agg=agg_layer_set(agg, layers), **defaults)


def glasu_federation(graph: GraphData, params: GlasuParams, *, seed: int = 0,
                     edge_share: float = 0.8, feature_split: str = "random",
                     full_edges: bool = False, batch: bool = False) -> GlasuServer:
    parts = vertical_split(graph, params.clients, feature_split=feature_split,
                           edge_share=edge_share, labels=params.label_holders, seed=seed,
                           full_edges=full_edges)
    runtime = LocalRuntime({d.client_id: GlasuClient(d, params, seed) for d in parts},
                           batch=batch)
    server = GlasuServer(runtime, params, seed)
    server.setup()
    return server
