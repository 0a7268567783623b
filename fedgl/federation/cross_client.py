"""Server-mediated cross-client layer computation (Swift-FedGNN's Algorithm 2, eqs. 5-8).

The server knows the graph *structure* (node ids and owners, never features), gathered once by
:func:`gather_structure`. For a set of seed nodes it samples the L-hop neighbourhood on the global
structure (:mod:`fedgl.data.sampling`), and the layers are then computed by the parties:

At every layer l, for every target instance v (a node at depth l of some client's sample):
1. each remote client c holding sampled neighbours of v sends ``(S_c(v), n_c(v))`` with
   ``S_c(v) = Σ_{u∈Ñ_c(v)} h_u^{(l-1)}`` (the count only for mean-type layers);
2. the server adds them, ``R(v) = Σ_c S_c(v)``, ``n_R(v) = Σ_c n_c(v)``, and sends one vector per
   target to its owner m(v);
3. the owner forms ``S(v) = S_local(v) + R(v)``, ``n(v) = n_local(v) + n_R(v)`` and
4. applies the layer update (:func:`fedgl.models.blocks.layer_update`) with the global weights.
Sum-and-count makes the split exact: it equals centralised sampled aggregation.

Backward runs the same path in reverse: the owner sends ``∂loss/∂R(v)`` to the server, which
forwards it to every contributing client as ``∂loss/∂S_c(v)`` (the same vector, since R is a
sum); each contributor back-propagates it into its own embeddings. Parameter gradients
accumulate where the computation happened and travel with each client's ordinary gradient
upload. Layer-1 inputs are raw features, so no gradient is sent for layer 1.

Every message (control: instance ids and edge lists; forward: sums and counts; backward:
gradients) goes through ``runtime.call`` and is counted by the ledger. Client-side state lives in
:class:`CrossClientParty`, which an algorithm's client object owns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedgl.data.sampling import Block, CSRGraph
from fedgl.federation.messages import payload_nbytes
from fedgl.models.base import dropout, scatter_sum
from fedgl.models.blocks import layer_update, needs_count


@dataclass
class Structure:
    """What the server learns at set-up: the global adjacency (ids) and every node's owner."""

    csr: CSRGraph
    owner: Tensor


def gather_structure(runtime: Any, num_nodes: int | None = None, phase: str = "pretrain",
                     index_dtype: torch.dtype | None = None) -> Structure:
    """Every client uploads its node ids and incident edges (ids only); the server builds the
    global CSR and the owner table. This upload is the paper's assumption that the server knows
    the cross-client structure (see docs/threat-model.md). ``index_dtype`` None: int32 when the
    node and edge counts fit (half the memory), else int64."""
    res = runtime.call("crossclient.structure", phase=phase)
    n = num_nodes or 1 + max(int(r["node_ids"].max()) for r in res.values() if r["node_ids"].numel())
    owner = torch.full((n,), -1, dtype=torch.int64)
    for k, r in res.items():
        owner[r["node_ids"]] = k
    ei = torch.cat([r["edge_index"] for r in res.values()], dim=1)
    if index_dtype is None:
        index_dtype = torch.int32 if max(n, ei.shape[1]) < 2**31 - 1 else torch.int64
    return Structure(CSRGraph.from_edge_index(ei, n, dtype=index_dtype), owner)


@dataclass
class LayerRoute:
    """Server-side routing of one layer: per contributor, the global target of each slot; per
    receiver, the global targets it is sent (in the order of its ``recv`` positions)."""

    slot_targets: dict[int, Tensor]
    recv_targets: dict[int, Tensor]
    num_targets: int


@dataclass
class Plan:
    """One cross-client computation: per-client control messages and server routes."""

    control: dict[int, dict[str, Any]]
    routes: list[LayerRoute]
    parties: list[int]
    stats: dict[str, int] = field(default_factory=dict)


def build_plan(blocks: list[Block], owner: Tensor) -> Plan:
    """Split sampled blocks by owner: each party's instances (global ids, depth counts), its
    local edges, its contributor edges (source position, slot) and its receive positions."""
    ids = blocks[0].src_ids
    own = owner[ids]
    parties = torch.unique(own).tolist()
    depth_n = [blocks[0].num_src] + [b.num_dst for b in blocks]
    local_pos = torch.empty_like(ids)
    control: dict[int, dict[str, Any]] = {}
    for c in parties:
        mine = (own == c).nonzero().flatten()
        local_pos[mine] = torch.arange(mine.numel())
        control[c] = {"ids": ids[mine].clone(),
                      "depth": torch.tensor([int((mine < n).sum()) for n in depth_n]),
                      "layers": []}
    routes = []
    single = slots = 0
    for b in blocks:
        s, d = b.edge_index
        os, od = own[s], own[d]
        same = os == od
        route = LayerRoute({}, {}, b.num_dst)
        remote_d = d[~same]
        for c in parties:
            layer: dict[str, Any] = {}
            sel = same & (od == c)
            layer["local"] = torch.stack([local_pos[s[sel]], local_pos[d[sel]]])
            csel = (~same) & (os == c)
            targets, slot = torch.unique(d[csel], return_inverse=True)
            layer["contrib"] = torch.stack([local_pos[s[csel]], slot])
            layer["slots"] = int(targets.numel())
            route.slot_targets[c] = targets
            per_slot = torch.bincount(slot, minlength=targets.numel())
            single += int((per_slot == 1).sum())
            slots += int(targets.numel())
            recv = torch.unique(remote_d[od[~same] == c])
            layer["recv"] = local_pos[recv]
            route.recv_targets[c] = recv
            control[c]["layers"].append(layer)
        routes.append(route)
    stats = {"instances": int(ids.numel()), "edges": sum(int(b.edge_index.size(1)) for b in blocks),
             "aggregates": slots, "single_node_aggregates": single}
    return Plan(control, routes, parties, stats)


def combine_partials(route: LayerRoute, partials: dict[int, dict[str, Tensor]], with_count: bool
             ) -> dict[int, dict[str, Tensor]]:
    """Server step 2: add the contributors' partial sums per target; one message per receiver."""
    dim = next((p["sum"].size(1) for p in partials.values() if p["sum"].dim() == 2), 0)
    total = torch.zeros(route.num_targets, dim)
    count = torch.zeros(route.num_targets)
    for c, p in partials.items():
        t = route.slot_targets[c]
        if t.numel():
            total.index_add_(0, t, p["sum"])
            if with_count:
                count.index_add_(0, t, p["count"])
    out = {}
    for c, t in route.recv_targets.items():
        out[c] = {"sum": total[t]}
        if with_count:
            out[c]["count"] = count[t]
    return out


def _route_grads(route: LayerRoute, grads: dict[int, Tensor]) -> dict[int, Tensor]:
    """Server, backward: the gradient of each target's remote sum goes to every contributor."""
    dim = next((g.size(1) for g in grads.values() if g.dim() == 2 and g.numel()), 0)
    full = torch.zeros(route.num_targets, dim)
    for c, g in grads.items():
        if g.numel():
            full[route.recv_targets[c]] = g
    return {c: full[t] for c, t in route.slot_targets.items()}


def run_cross_client(runtime: Any, plan: Plan, kind: str, *, train: bool, phase: str = "train",
                     tally: dict[str, int] | None = None) -> dict[int, dict]:
    """Drive the forward (and, when ``train``, backward) exchange of ``plan``; returns each
    party's last-layer result (``loss``/``count`` when training, ``correct``/``total`` per split
    otherwise). ``tally`` accumulates bytes by message kind (control/forward/backward)."""
    with_count = needs_count(kind)
    parties = plan.parties
    num_layers = len(plan.routes)
    tally = tally if tally is not None else {}

    def _call(method: str, args: dict[int, dict], what: str) -> dict[int, Any]:
        out = runtime.call(method, args, phase=phase, clients=parties)
        tally[what] = tally.get(what, 0) + sum(payload_nbytes(a) for a in args.values())
        tally[what] = tally.get(what, 0) + sum(payload_nbytes(o) for o in out.values())
        return out

    partials = _call("crossclient.begin", {c: {"control": plan.control[c], "kind": kind, "train": train}
                                  for c in parties}, "control_and_forward")
    for layer in range(1, num_layers + 1):
        recv = combine_partials(plan.routes[layer - 1], partials, with_count)
        partials = _call("crossclient.forward", {c: {"layer": layer, "recv": recv[c]} for c in parties},
                         "forward")
    if not train:
        return partials
    last = partials
    grads = {c: last[c]["grad"] for c in parties}
    for layer in range(num_layers - 1, 0, -1):
        down = _route_grads(plan.routes[layer], grads)
        res = _call("crossclient.backward", {c: {"layer": layer, "grad": down[c]} for c in parties},
                    "backward")
        grads = {c: res[c]["grad"] for c in parties}
    return last


class CrossClientParty:
    """A client's side of :func:`run_cross_client`: holds this client's slice of the sampled
    computation between calls (its instances' embeddings with their autograd graphs)."""

    def __init__(self, model: nn.Module, x: Tensor, y: Tensor, node_ids: Tensor,
                 masks: dict[str, Tensor], generator: torch.Generator | None = None) -> None:
        self.model, self.x, self.y, self.node_ids = model, x, y, node_ids
        self.masks = masks
        self.generator = generator
        self._state: dict[str, Any] = {}

    @property
    def control(self) -> dict:
        """The control message of the computation in progress."""
        return self._state["control"]

    def _local(self, ids: Tensor) -> Tensor:
        return torch.searchsorted(self.node_ids, ids)

    def _partials(self, layer_ctl: dict, h: Tensor, with_count: bool) -> dict[str, Tensor]:
        src, slot = layer_ctl["contrib"]
        out = {"sum": scatter_sum(h[src], slot, layer_ctl["slots"])}
        if with_count:
            out["count"] = torch.bincount(slot, minlength=layer_ctl["slots"]).to(h.dtype)
        return out

    def begin(self, control: dict, kind: str, train: bool) -> dict[str, Tensor]:
        rows = self._local(control["ids"])
        x = self.x[rows]
        self._state = {"control": control, "kind": kind, "train": train, "rows": rows,
                       "h_in": [x], "h_out": [], "recv": []}
        return self._partials(control["layers"][0], x, needs_count(kind))

    def forward(self, layer: int, recv: dict[str, Tensor]) -> dict[str, Any]:
        st = self._state
        kind, ctl = st["kind"], st["control"]
        lay = ctl["layers"][layer - 1]
        n_dst = int(ctl["depth"][layer])
        h_in = st["h_in"][-1]
        r_sum = recv["sum"]
        if st["train"] and layer > 1:
            r_sum = r_sum.detach().requires_grad_(True)
        src, dst = lay["local"]
        agg = scatter_sum(h_in[src], dst, n_dst)
        cnt = torch.bincount(dst, minlength=n_dst).to(h_in.dtype)
        if lay["recv"].numel():
            agg = agg.index_add(0, lay["recv"], r_sum)
            if "count" in recv:
                cnt = cnt.index_add(0, lay["recv"], recv["count"])
        conv = self.model.convs[layer - 1]
        with torch.set_grad_enabled(st["train"]):
            h = layer_update(conv, kind, h_in[:n_dst], agg, cnt)
            last = layer == len(ctl["layers"])
            if not last:
                h = dropout(torch.relu(h), self.model.dropout, self.model.training, self.generator)
        st["recv"].append(r_sum)
        st["h_out"].append(h)
        if not last:
            h_leaf = h.detach().requires_grad_(st["train"])
            st["h_in"].append(h_leaf)
            return self._partials(ctl["layers"][layer], h_leaf, needs_count(kind))
        return self._finish(h, r_sum, n_dst)

    def _finish(self, logits: Tensor, r_sum: Tensor, n_dst: int) -> dict[str, Any]:
        st = self._state
        rows = st["rows"][:n_dst]
        self.last_output = torch.log_softmax(logits.detach(), -1)  # for tests and debugging
        self.last_ids = st["control"]["ids"][:n_dst]
        if not st["train"]:
            hit = logits.argmax(-1) == self.y[rows]
            masks = [self.masks[s][rows] for s in ("train", "val", "test")]
            return {"correct": [int(hit[m].sum()) for m in masks],
                    "total": [int(m.sum()) for m in masks]}
        if n_dst == 0:
            return {"grad": torch.zeros(0, 0), "loss": 0.0, "count": 0}
        loss = F.nll_loss(torch.log_softmax(logits, -1), self.y[rows])
        loss.backward()
        st["h_out"].pop()
        grad = _grad_of(r_sum)
        return {"grad": grad, "loss": float(loss.detach()), "count": int(n_dst)}

    def backward(self, layer: int, grad: Tensor) -> dict[str, Tensor]:
        """Back-propagate the gradients of the partial sums this party sent for ``layer + 1``
        into its layer-``layer`` embeddings, then through its layer-``layer`` update."""
        st = self._state
        h_leaf = st["h_in"][layer]
        ctl = st["control"]["layers"][layer]
        if grad.numel():
            part = self._partials(ctl, h_leaf, False)["sum"]
            part.backward(grad)
        h_out = st["h_out"][layer - 1]
        if h_leaf.grad is not None and h_out.requires_grad:
            h_out.backward(h_leaf.grad)
        r_sum = st["recv"][layer - 1]
        if layer == 1:
            self._state = {}
            return {"grad": torch.zeros(0, 0)}
        return {"grad": _grad_of(r_sum)}


def _grad_of(t: Tensor) -> Tensor:
    if t.requires_grad and t.grad is not None:
        return t.grad.detach().clone()
    if t.requires_grad:
        return torch.zeros_like(t)
    return torch.zeros(0, 0)
