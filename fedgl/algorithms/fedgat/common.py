"""Pieces shared by the GAT algorithms (FedGAT, DistGAT, centralised GAT): the model a config
asks for, feature scaling, the degree cap, seeded initial weights, the oracle evaluator and the
driver that runs one federated repeat with them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedgl.algorithms.runner import run_federated
from fedgl.config import Config
from fedgl.data.graph import GraphData
from fedgl.evaluation import SPLITS
from fedgl.federation.aggregate import State
from fedgl.models.gat import GAT, add_self_loops
from fedgl.models.poly_attention import PolyAttention
from fedgl.results import RepeatResult


def poly_attention(cfg: Config) -> PolyAttention:
    return PolyAttention(cfg.degree, cfg.fedgat_range, cfg.fedgat_psi, cfg.fedgat_coefficients)


def build_gat(cfg: Config, in_channels: int, num_classes: int, approximate: bool) -> GAT:
    """The GAT of a config; ``approximate``: FedGAT's polynomial first layer."""
    if not approximate:
        return GAT(in_channels, cfg.gat_hidden, num_classes, cfg.layers, cfg.heads,
                   cfg.output_heads, cfg.dropout)
    return GAT(in_channels, cfg.gat_hidden, num_classes, cfg.layers, cfg.heads, cfg.output_heads,
               cfg.dropout, attention=poly_attention(cfg), basis=cfg.fedgat_basis,
               cap=cfg.fedgat_cap)


def gat_initial_weights(cfg: Config, in_channels: int, num_classes: int, seed: int) -> State:
    """Initial global model for ``seed`` (the exact and approximated GAT share parameters and
    initialisation); drawn without touching the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_gat(cfg, in_channels, num_classes, approximate=False)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _gat_initial_weights(num_features: int, num_classes: int, cfg: Config, seed: int) -> State:
    """:func:`gat_initial_weights` in the signature the FedAvg set-up calls
    (:func:`fedgl.algorithms.runner.start_server`)."""
    return gat_initial_weights(cfg, num_features, num_classes, seed)


def scale_features(x: Tensor, mode: str) -> Tensor:
    """Row-wise scaling (each row on its own, so a client can apply it to its own nodes):
    ``l2`` unit rows; ``center-l2`` subtract the row mean, then unit rows (the authors' code);
    ``none``. All-zero rows stay zero."""
    if mode == "none":
        return x
    if mode == "center-l2":
        x = x - x.mean(dim=1, keepdim=True)
    norm = x.norm(dim=1, keepdim=True)
    return x / torch.where(norm == 0, torch.ones_like(norm), norm)


def cap_in_degree(edge_index: Tensor, cap: int, seed: int) -> Tensor:
    """Keep at most ``cap`` incoming edges per node (``cap`` 0: all), chosen by a hash of
    (seed, source, target): a pure function of a node's own in-edges, so every party computes
    the same subgraph from what it knows (the authors' ``limit_node_degree``)."""
    if cap <= 0 or edge_index.numel() == 0:
        return edge_index
    src, dst = edge_index
    prime = 2**31 - 1
    key = (src * 1_000_003 + dst * 7_919 + (seed % prime) * 104_729) % prime
    for _ in range(3):  # a few Lehmer steps mix the key
        key = (key * 48_271) % prime
    order = torch.argsort(dst * (2**31) + key)
    s_dst = dst[order]
    start = torch.searchsorted(s_dst, s_dst)
    rank = torch.arange(s_dst.numel()) - start
    keep = order[rank < cap]
    keep = keep.sort().values
    return edge_index[:, keep]


class GATOracle:
    """The global model scored on the full graph (outside the federation, labelled
    ``oracle_*``), with the algorithm's own first layer (polynomial for FedGAT)."""

    def __init__(self, graph: GraphData, cfg: Config, seed: int, approximate: bool) -> None:
        self.model = build_gat(cfg, graph.num_features, graph.num_classes, approximate)
        if graph.x.dtype == torch.float64:
            self.model = self.model.double()
        self.x = scale_features(graph.x, cfg.gat_features)
        ei = cap_in_degree(graph.edge_index, cfg.fedgat_max_degree, seed)
        self.edge_index = add_self_loops(ei, graph.num_nodes)
        self.y = graph.y
        self.masks = [getattr(graph, f"{s}_mask") for s in SPLITS]

    @torch.no_grad()
    def logits(self, weights: State) -> Tensor:
        ref = self.model.state_dict()
        self.model.load_state_dict({k: v.to(ref[k].dtype) for k, v in weights.items()})
        self.model.eval()
        return self.model(self.x.to(self.model.first.lin.weight.dtype), self.edge_index)

    def __call__(self, weights: State) -> dict[str, float]:
        hit = self.logits(weights).argmax(-1) == self.y
        return {f"oracle_{s}_acc": float(hit[m].float().mean()) if m.any() else float("nan")
                for s, m in zip(SPLITS, self.masks, strict=True)}


def run_gat_federated(graph: GraphData, cfg: Config, *, repeat: int, seed: int, progress,
                      client_cls, server_cls, approximate: bool, resume_from=None,
                      checkpointer=None, on_round=None) -> RepeatResult:
    """One repeat through the generic FedAvg driver, with the GAT's initial weights (for the
    widths the clients report at set-up) and the GAT oracle."""
    oracle = GATOracle(graph, cfg, seed, approximate) if cfg.oracle_eval else None
    made: list = []

    def make_server(runtime, strategy, init_weights, config):
        made.append(server_cls(runtime, strategy, init_weights, config, seed=seed))
        return made[-1]

    make_server.initial_weights = _gat_initial_weights  # type: ignore[attr-defined]

    rep = run_federated(graph, cfg, repeat=repeat, seed=seed, client_cls=client_cls,
                        server_cls=make_server, progress=progress, resume_from=resume_from,
                        checkpointer=checkpointer, on_round=on_round, oracle=oracle)
    stats = getattr(made[0], "pretrain_stats", None) if made else None
    if stats:
        rep.extra["fedgat"] = stats
    return rep


def predict_gat_federated(graph: GraphData, cfg: Config, seed: int, weights: State, client_cls,
                          server_cls) -> tuple:
    """Every client's predictions of a saved GAT model, after the algorithm's set-up exchange
    (:func:`fedgl.algorithms.runner.predict_federated`)."""
    from fedgl.algorithms.runner import predict_federated

    def make_server(runtime, strategy, init_weights, config):
        return server_cls(runtime, strategy, init_weights, config, seed=seed)

    make_server.initial_weights = _gat_initial_weights  # type: ignore[attr-defined]
    return predict_federated(graph, cfg, seed, weights, client_cls, make_server)


def gat_from_card(card: dict, cfg: Config, part: str = "global") -> GAT:
    """The GAT a model card describes (``fedgl.load_model``; ``cfg``: the card's
    configuration): FedGAT's with its polynomial first layer, the exact GAT for DistGAT and the
    centralised GAT."""
    arch = card["architecture"]
    return build_gat(cfg, int(arch["in_channels"]), int(arch["out_channels"]),
                     approximate=card.get("algorithm") == "fedgat")
