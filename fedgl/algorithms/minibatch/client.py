"""A mini-batch FedSGD client: one stochastic gradient per iteration, from its own subgraph
(local training, Swift-FedGNN's Algorithm 3) or from a server-mediated cross-client computation
(Algorithm 2, through :class:`fedgl.federation.cross_client.CrossClientParty`).

Within an iteration the client accumulates parameter gradients from everything it computed —
its own loss and its share of other clients' cross-client computations — and uploads the sum
once (``finish``/``step``); the server averages the uploads with weight 1/M (Eq. 1).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.utils import scatter

from fedgl.algorithms.base import client_seed
from fedgl.algorithms.minibatch.settings import MiniBatchSettings
from fedgl.data.client_data import ClientData
from fedgl.data.sampling import Block, CSRGraph, full_block, sample_blocks, uniform_batch
from fedgl.evaluation import SPLITS
from fedgl.federation.aggregate import State
from fedgl.federation.cross_client import CrossClientParty
from fedgl.federation.facts import FactsParty
from fedgl.federation.protocol import Any_, Arr, Bool, Int, MapOf, Str, Weights, handles
from fedgl.models import build_model
from fedgl.models.base import dropout
from fedgl.models.blocks import aggregation_kind, block_forward, conv_on_block, layer_update

#: the server's routing plan for one cross-client computation (ids and positions; the handler
#: checks them against this client's own rows)
CONTROL = MapOf(Str(max_len=64), Any_())
FLOAT_OR_INT = ("float32", "float64", "int64")


class MiniBatchClient(FactsParty):
    """Constructed from its :class:`ClientData` alone (plus settings and a seed)."""

    def __init__(self, data: ClientData, config: Any, seed: int) -> None:
        self.data = data
        self.s = MiniBatchSettings.from_config(config)
        self.model = build_model(self.s.model, data.num_features, self.s.hidden, data.num_classes,
                                 self.s.layers, self.s.dropout)
        self.kind = aggregation_kind(self.s.model)
        self.seed = client_seed(seed, data.client_id)
        self.generator = torch.Generator()
        src, dst = data.edge_index
        own = data.owns(src)
        local_ei = torch.stack([data.global_to_local(src[own]), data.global_to_local(dst[own])])
        # int32 indices where they fit: half the memory of int64
        dtype = torch.int32 if max(data.num_nodes, local_ei.shape[1]) < 2**31 - 1 else torch.int64
        self.csr = CSRGraph.from_edge_index(local_ei, data.num_nodes, dtype=dtype)
        del local_ei
        self.masks = {s: getattr(data, f"{s}_mask") for s in SPLITS}
        self.train_pool = self.masks["train"].nonzero().flatten()
        self.party = CrossClientParty(self.model, data.x, data.y, data.node_ids, self.masks,
                                      self.generator)
        self.cache: dict[str, Tensor] | None = None  # remote layer-1 aggregates (FedGNN-PNS)
        self._batch: Tensor | None = None
        self._eval_ids: Tensor | None = None

    # ------------------------------------------------------------------ helpers
    def _load(self, weights: State, iteration: int) -> None:
        self.model.load_state_dict(weights)
        self.model.train()
        self.model.zero_grad(set_to_none=True)
        self.generator.manual_seed(self.seed + 7919 * iteration)
        self._batch = uniform_batch(self.train_pool, self.s.batch_size, self.generator)

    def _grads(self) -> dict[str, Tensor]:
        return {n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
                for n, p in self.model.named_parameters()}

    def _forward_local(self, blocks: list[Block]) -> Tensor:
        """The model on local blocks; with a PNS cache, layer 1 adds the cached remote sums."""
        x = self.data.x[blocks[0].src_ids]
        if self.cache is None:
            return block_forward(self.model, self.kind, x, blocks, generator=self.generator)
        b0 = blocks[0]
        src, dst = b0.edge_index
        dst_ids = b0.dst_ids
        agg = scatter(x[src], dst, 0, dim_size=b0.num_dst, reduce="sum") + self.cache["sum"][dst_ids]
        cnt = torch.bincount(dst, minlength=b0.num_dst).float() + self.cache["count"][dst_ids]
        h = layer_update(self.model.convs[0], self.kind, x[: b0.num_dst], agg, cnt)
        for i, (conv, block) in enumerate(zip(self.model.convs, blocks, strict=True)):
            if i > 0:
                h = conv_on_block(conv, self.kind, h, block)
            if i < len(blocks) - 1:
                h = dropout(torch.relu(h), self.model.dropout, self.model.training, self.generator)
        return torch.log_softmax(h, dim=-1)

    def local_loss(self) -> tuple[float, int]:
        """Algorithm 3: sample the batch's L-hop neighbourhood on the local graph, back-propagate
        the mean loss (gradients accumulate on the parameters)."""
        batch = self._batch
        if batch is None or batch.numel() == 0:
            return float("nan"), 0
        blocks = sample_blocks(self.csr, batch, list(self.s.num_neighbors), self.generator)
        loss = F.nll_loss(self._forward_local(blocks), self.data.y[batch])
        loss.backward()
        return float(loss.detach()), int(batch.numel())

    # ------------------------------------------------------------------ protocol methods
    @handles("crossclient.structure", phases=("pretrain", "train", "eval"))
    def xc_structure(self) -> dict[str, Tensor]:
        """Set-up: own node ids and incident edges (ids only) for the server's structure."""
        return {"node_ids": self.data.node_ids, "edge_index": self.data.edge_index}

    @handles("minibatch.step", phases=("train",), schema={"weights": Weights(), "iteration": Int(0)})
    def step(self, weights: State, iteration: int) -> dict[str, Any]:
        """A local iteration: load θ_t, one local stochastic gradient, upload it."""
        self._load(weights, iteration)
        loss, count = self.local_loss()
        return {"grad": self._grads(), "loss": loss, "count": count}

    @handles("minibatch.begin", phases=("train",),
             schema={"weights": Weights(), "iteration": Int(0), "cross": Bool()})
    def begin(self, weights: State, iteration: int, cross: bool) -> dict[str, Any]:
        """A communicating iteration starts: load θ_t; a client chosen for cross-client training
        sends its mini-batch (global ids) so that the server can sample around it."""
        self._load(weights, iteration)
        return {"batch": self.data.node_ids[self._batch]} if cross else {}

    @handles("minibatch.finish", phases=("train",), schema={"local": Bool()})
    def finish(self, local: bool) -> dict[str, Any]:
        """Upload the accumulated gradient; a client not chosen for cross-client training adds
        its local gradient first. The loss reported is the client's own batch loss."""
        loss, count = self.local_loss() if local else (self._xc_loss, self._xc_count)
        self._xc_loss, self._xc_count = float("nan"), 0
        return {"grad": self._grads(), "loss": loss, "count": count}

    _xc_loss: float = float("nan")
    _xc_count: int = 0

    @handles("crossclient.begin", phases=("train", "eval"),
             schema={"control": CONTROL, "kind": Str(max_len=64), "train": Bool()})
    def xc_begin(self, control: dict, kind: str, train: bool) -> dict[str, Tensor]:
        if not train:
            self.model.eval()
        return self.party.begin(control, kind, train)

    @handles("crossclient.forward", phases=("train", "eval"),
             schema={"layer": Int(0, 64), "recv": MapOf(Str(max_len=64), Arr(FLOAT_OR_INT))})
    def xc_forward(self, layer: int, recv: dict[str, Tensor]) -> dict[str, Any]:
        out = self.party.forward(layer, recv)
        if "loss" in out:  # the last layer of a training computation: keep the own loss
            loss, count = out.pop("loss"), out.pop("count")
            if count:
                self._xc_loss, self._xc_count = loss, count
        return out

    @handles("crossclient.backward", phases=("train",), schema={"layer": Int(0, 64), "grad": Arr()})
    def xc_backward(self, layer: int, grad: Tensor) -> dict[str, Tensor]:
        return self.party.backward(layer, grad)

    @handles("minibatch.eval_nodes", phases=("eval", "train"))
    def eval_nodes(self) -> dict[str, Tensor]:
        """Evaluation control: the global ids of own labelled (train/val/test) nodes; with
        ``eval_max_nodes`` = m > 0, a uniform subset of at most m per split, drawn once with the
        client's seed (the same nodes at every evaluation)."""
        if self._eval_ids is None:
            m = self.s.eval_max_nodes
            gen = torch.Generator().manual_seed(self.seed + 104_723)
            keep = torch.zeros(self.data.num_nodes, dtype=torch.bool)
            for split in SPLITS:
                pool = self.masks[split].nonzero().flatten()
                keep[uniform_batch(pool, m, gen) if m > 0 else pool] = True
            self._eval_ids = self.data.node_ids[keep]
        return {"ids": self._eval_ids}

    @handles("minibatch.load", phases=("eval", "train"), schema={"weights": Weights()})
    def load(self, weights: State) -> dict:
        """Evaluation: load the model to score (eval mode)."""
        self.model.load_state_dict(weights)
        self.model.eval()
        return {}

    @handles("minibatch.pns_cache", phases=("train",),
             schema={"recv": MapOf(Str(max_len=64), Arr(FLOAT_OR_INT))})
    def pns_cache(self, recv: dict[str, Tensor]) -> dict:
        """FedGNN-PNS: keep the received remote layer-1 sums and counts of own nodes (the
        targets of the exchange just run) until the next sampling iteration."""
        ctl = self.party.control
        rows = self.data.global_to_local(ctl["ids"][ctl["layers"][0]["recv"]])
        n, d = self.data.num_nodes, self.data.num_features
        cache = {"sum": torch.zeros(n, d), "count": torch.zeros(n)}
        if rows.numel():
            cache["sum"][rows] = recv["sum"]
            if "count" in recv:
                cache["count"][rows] = recv["count"]
        self.cache = cache
        return {}

    @torch.no_grad()
    def predict(self, weights: State) -> Tensor:
        """Log-probabilities of every own node, local subgraph, all neighbours (eval mode).
        Local only: not a protocol method."""
        self.model.load_state_dict(weights)
        self.model.eval()
        csr, n = self.csr, self.data.num_nodes
        dst = torch.repeat_interleave(torch.arange(n), csr.degree(torch.arange(n)))
        block = full_block(torch.stack([csr.indices.long(), dst]), n)
        return self._forward_local([block] * self.s.layers)

    @torch.no_grad()
    @handles("minibatch.evaluate", phases=("eval", "train"), schema={"weights": Weights()})
    def evaluate(self, weights: State) -> dict:
        """Local-subgraph, full-neighbour accuracy counts (no cross-client edges)."""
        hit = self.predict(weights).argmax(-1) == self.data.y
        return {"correct": [int(hit[self.masks[s]].sum()) for s in SPLITS],
                "total": [int(self.masks[s].sum()) for s in SPLITS]}
