"""The FedSage+ client: trains its NeighGen with the others' help, mends its local subgraph, then
trains the shared classifier on the mended graph (FedAvg, :class:`GNNClient`).

Generator training (phase ``pretrain``; one step per call triple, driven by the server):

- ``gen_share``: encode the impaired graph (own nodes minus a hidden share, own-own edges), draw
  the fGen noise for a batch and send ``fGen``'s parameters and the batch's noisy latents
  ``z_v + ε`` (never features) to the server, which forwards them to other clients;
- ``gen_cross``: for every other client i's generator, generate ``H = fGen_i(z + ε)`` and score it
  against *its own* features, ``L_ij = mean_{v,p} min_{u ∈ U_v} ||H_vp - x_u||² / d`` with
  ``U_v`` ``cross_candidates`` own nodes drawn per generated node (the reference's sampling; 0:
  all own nodes); return only ``∂L_ij/∂θ_fGen_i`` and ``L_ij`` (own features never leave);
- ``gen_step``: local loss ``a·L_count + b·L_feat + c·L_cls`` on the impaired graph, plus
  ``b · mean_j ∂L_ij/∂θ`` on fGen's parameters, one Adam step.

``mend`` then runs NeighGen on the full local subgraph and attaches ``round(n̂_v)`` generated
neighbours to every own node; :meth:`model_inputs` is that mended graph (GCN weights from the
mended graph's degrees). Cross-client edges are not used (FedSage's subgraph setting).

With ``mend exact`` (the perfect generator FedGCN's Table 2 assumes) there is no generator:
``exact_share`` picks up to ``num_pred`` cross-client neighbours of every own node (seeded) and
offers the raw features of its own nodes that have a cross-client neighbour; ``exact_mend``
attaches the features the server relays from their owners.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from fedgl.algorithms.base import GNNClient, ModelInputs, client_seed
from fedgl.algorithms.fedsage_plus.neighgen import (
    FeatureGenerator,
    NeighGen,
    count_loss,
    cross_match_loss,
    local_match_loss,
    sample_candidates,
)
from fedgl.algorithms.fedsage_plus.options import options_of
from fedgl.config import Config
from fedgl.data.client_data import ClientData
from fedgl.federation.protocol import (
    Arr,
    Int,
    MapOf,
    ProtocolViolation,
    Record,
    Seq,
    Weights,
    handles,
)
from fedgl.models import build_model, gcn_edge_weights

IDS = Arr(("int64",), ndim=1)


def local_edges(data: ClientData) -> Tensor:
    """Own-own edges of a client in local row ids (both directions)."""
    src, dst = data.edge_index
    own = data.owns(src)
    return torch.stack([data.global_to_local(src[own]), data.global_to_local(dst[own])])


def mended_inputs(x: Tensor, edge_index: Tensor, gen: Tensor, n_gen: Tensor,
                  rows: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Attach ``n_gen[v]`` generated rows ``gen[v, :n_gen[v]]`` to row ``rows[v]`` of ``x``.

    Returns the mended features, edges (with self-loops) and GCN weights ``d̃^-1/2 d̃^-1/2`` from
    the mended graph's degrees."""
    n, p = x.size(0), gen.size(1)
    keep = torch.arange(p).unsqueeze(0) < n_gen.unsqueeze(1)  # [m, P]
    owner = rows.unsqueeze(1).expand(-1, p)[keep]
    new_rows = torch.arange(n, n + int(keep.sum()))
    feats = torch.cat([x, gen[keep]])
    ei = torch.cat([edge_index, torch.stack([new_rows, owner]), torch.stack([owner, new_rows])],
                   dim=1)
    deg = torch.bincount(ei[1], minlength=feats.size(0)) + 1
    ei, w = gcn_edge_weights(ei, feats.size(0), deg)
    return feats, ei, w


class FedSagePlusClient(GNNClient):
    """A FedSage+ party (see module docstring)."""

    def __init__(self, data: ClientData, config: Config, seed: int) -> None:
        super().__init__(data, config, seed)
        self.opts = o = options_of(config)
        o.validate()
        torch.manual_seed(client_seed(seed, data.client_id))
        self.neighgen = NeighGen(data.num_features, o.gen_encoder_hidden, o.latent_dim,
                                 o.gen_hidden, o.num_pred, config.dropout)
        self.aux = build_model(config.model, data.num_features, config.hidden, data.num_classes,
                               config.layers, config.dropout)
        self.gen_opt = torch.optim.Adam([*self.neighgen.parameters(), *self.aux.parameters()],
                                        lr=o.gen_lr, weight_decay=o.gen_weight_decay)
        self.local_ei = local_edges(data)
        order = torch.argsort(self.local_ei[0], stable=True)
        self.local_col = self.local_ei[1, order]  # local CSR: neighbours of row r at
        self.local_ptr = torch.zeros(data.num_nodes + 1, dtype=torch.long)  # ptr[r]:ptr[r+1]
        self.local_ptr[1:] = torch.bincount(self.local_ei[0], minlength=data.num_nodes).cumsum(0)
        self._cross_calls = 0
        self._impair()
        self._mend: tuple[Tensor, Tensor, Tensor] | None = None
        self._cache: dict | None = None
        self._scratch: FeatureGenerator | None = None  # holds another client's fGen while scoring
        self.cross_losses: list[float] = []

    # ------------------------------------------------------------------ impaired graph
    def _impair(self) -> None:
        """Hide ``hidden_portion`` of the own nodes: the kept nodes, their edges among themselves,
        their true missing-neighbour counts and (kept row, hidden row) pairs."""
        n = self.data.num_nodes
        g = torch.Generator().manual_seed(client_seed(self.seed, self.data.client_id) + 99991)
        hidden = torch.zeros(n, dtype=torch.bool)
        hidden[torch.randperm(n, generator=g)[: int(round(self.opts.hidden_portion * n))]] = True
        kept = (~hidden).nonzero().flatten()
        new_id = torch.full((n,), -1, dtype=torch.long)
        new_id[kept] = torch.arange(len(kept))
        src, dst = self.local_ei
        both = ~hidden[src] & ~hidden[dst]
        self.kept = kept
        self.x_imp = self.data.x[kept]
        self.imp_ei = new_id[self.local_ei[:, both]]
        into = hidden[src] & ~hidden[dst]  # hidden neighbour u=src of kept node v=dst
        self.missing = torch.bincount(new_id[dst[into]], minlength=len(kept))
        self.pairs = torch.stack([new_id[dst[into]], src[into]])  # (kept row, own row of u)

    def _batches(self) -> int:
        bs = self.opts.gen_batch_size
        return 1 if bs == 0 else max(1, math.ceil(len(self.kept) / bs))

    def _batch(self, epoch: int, batch: int) -> Tensor:
        k = len(self.kept)
        if self.opts.gen_batch_size == 0:
            return torch.arange(k)
        g = torch.Generator().manual_seed(client_seed(self.seed, self.data.client_id) + 31 * epoch)
        perm = torch.randperm(k, generator=g)
        bs = self.opts.gen_batch_size
        return perm[(batch % self._batches()) * bs:][:bs]

    # ------------------------------------------------------------------ generator protocol
    @handles("fedsage.gen_setup", phases=("pretrain",))
    def gen_setup(self) -> dict:
        """How many batches one generator epoch has here (the server runs the maximum)."""
        return {"batches": self._batches()}

    @handles("fedsage.gen_share", phases=("pretrain",), schema={"epoch": Int(0), "batch": Int(0)})
    def gen_share(self, epoch: int, batch: int) -> dict:
        """Encode the impaired graph, draw the noise; send fGen's parameters and the batch's
        noisy latents."""
        ng = self.neighgen
        ng.train()
        self.aux.train()
        g = torch.Generator().manual_seed(client_seed(self.seed, self.data.client_id)
                                          + 1_000 * epoch + batch + 1)
        z = ng.encode(self.x_imp, self.imp_ei, g)
        noise = torch.randn(z.shape, generator=g)
        rows = self._batch(epoch, batch)
        self._cache = {"z": z, "noise": noise, "rows": rows, "g": g}
        return {"fgen": {k: v.detach().clone() for k, v in ng.fgen.state_dict().items()},
                "z": (z[rows] + noise[rows]).detach()}

    @handles("fedsage.gen_cross", phases=("pretrain",), schema={"others": MapOf(Int(0), Record(
        {"fgen": Weights(), "z": Arr(ndim=2)}), max_len=1 << 16)})
    def gen_cross(self, others: dict[int, dict]) -> dict:
        """Score other clients' generators against own features; return parameter gradients.

        For each generated node the candidates are ``cross_candidates`` own nodes drawn as the
        reference draws them (:func:`sample_candidates`; 0: all own nodes)."""
        o, d = self.opts, self.data
        grads, losses = {}, {}
        if others and self._scratch is None:
            self._scratch = FeatureGenerator(o.latent_dim, o.gen_hidden, o.num_pred,
                                             d.num_features, self.neighgen.drop)
        step = self._cross_calls
        self._cross_calls += 1
        for i, msg in sorted(others.items()):
            gen = self._scratch
            assert gen is not None
            gen.load_state_dict(msg["fgen"])
            gen.train()
            g = torch.Generator().manual_seed(client_seed(self.seed, d.client_id) + 7 * i + 3
                                              + 1_000_003 * step)
            cand = None
            if o.cross_candidates > 0:
                cand = sample_candidates(msg["z"].size(0), o.cross_candidates, self.local_ptr,
                                         self.local_col, g)
            loss = cross_match_loss(gen(msg["z"], g), d.x, cand)
            params = dict(gen.named_parameters())
            grad = torch.autograd.grad(loss, list(params.values()))
            grads[i] = {k: v.detach() for k, v in zip(params, grad, strict=True)}
            losses[i] = loss.item()
        return {"grads": grads, "loss": losses}

    @handles("fedsage.gen_step", phases=("pretrain",), schema={"grads": Seq(Weights(), max_len=1 << 16)})
    def gen_step(self, grads: list[dict]) -> dict:
        """One NeighGen (and auxiliary classifier) step: local loss plus the others' gradients."""
        assert self._cache is not None
        o, ng, c = self.opts, self.neighgen, self._cache
        z, noise, rows, g = c["z"], c["noise"], c["rows"], c["g"]
        x_imp = self.x_imp
        gen = ng.fgen(z + noise, g)  # [kept, P, d]
        pred = ng.counts(z)
        loss = o.count_weight * count_loss(pred[rows], self.missing[rows], o.num_pred)
        sel = torch.isin(self.pairs[0], rows)
        remap = torch.full((len(self.kept),), -1, dtype=torch.long)
        remap[rows] = torch.arange(len(rows))
        pairs = torch.stack([remap[self.pairs[0, sel]], self.pairs[1, sel]])
        loss = loss + o.feat_weight * local_match_loss(gen[rows], self.data.x, pairs,
                                                       self.missing[rows])
        if o.cls_weight > 0:
            n_gen = pred.detach().round().clamp(0, o.num_pred).long()
            feats, ei, w = mended_inputs(x_imp, self.imp_ei, gen, n_gen,
                                         torch.arange(len(self.kept)))
            out = self.aux(feats, ei, w, generator=g)[: len(self.kept)]
            train = self.data.train_mask[self.kept]
            if train.any():
                loss = loss + o.cls_weight * F.nll_loss(out[train], self.data.y[self.kept][train])
        self.gen_opt.zero_grad(set_to_none=True)
        loss.backward()
        if grads:
            for name, p in ng.fgen.named_parameters():
                extra = torch.stack([gr[name] for gr in grads]).mean(0)
                p.grad = extra * o.feat_weight if p.grad is None else p.grad + o.feat_weight * extra
        self.gen_opt.step()
        self._cache = None
        return {"loss": loss.item()}

    @handles("fedsage.mend", phases=("pretrain",))
    def mend(self) -> dict:
        """Generate neighbours for every own node on the full local subgraph and keep them."""
        ng, d = self.neighgen, self.data
        ng.eval()
        g = torch.Generator().manual_seed(client_seed(self.seed, d.client_id) + 4242)
        with torch.no_grad():
            z = ng.encode(d.x, self.local_ei, g)
            n_gen = ng.counts(z).round().clamp(0, self.opts.num_pred).long()
            gen = ng.fgen(z + torch.randn(z.shape, generator=g), g)
        self._mend = mended_inputs(d.x, self.local_ei, gen, n_gen, torch.arange(d.num_nodes))
        self._inputs = self._train_cache = None
        # generator training is over: free what only it used (Adam's moments, gradients, the
        # scratch fGen that scored the others' generators); NeighGen itself is kept
        self.gen_opt.state.clear()
        self.gen_opt.zero_grad(set_to_none=True)
        self._scratch = self._cache = None
        return {"generated": int(n_gen.sum())}

    # ------------------------------------------------------------------ exact mending
    def _exact_choice(self) -> tuple[Tensor, Tensor]:
        """(own row v, global id u) for up to ``num_pred`` cross-client neighbours u of every own
        node v, a seeded random subset where v has more."""
        d = self.data
        src, dst = d.edge_index
        remote = ~d.owns(src)
        v, u = d.global_to_local(dst[remote]), src[remote]
        g = torch.Generator().manual_seed(client_seed(self.seed, d.client_id) + 5151)
        order = torch.randperm(v.numel(), generator=g)
        v, u = v[order], u[order]
        order = torch.argsort(v, stable=True)
        v, u = v[order], u[order]
        counts = torch.bincount(v, minlength=d.num_nodes)
        slot = torch.arange(v.numel()) - (torch.cumsum(counts, 0) - counts)[v]
        keep = slot < self.opts.num_pred
        return v[keep], u[keep]

    @handles("fedsage.exact_share", phases=("pretrain",))
    def exact_share(self) -> dict:
        """``mend exact``: the ids of the cross-client neighbours this client wants, and the ids
        and raw features of its own nodes that have a cross-client neighbour."""
        d = self.data
        src, dst = d.edge_index
        boundary = torch.unique(dst[~d.owns(src)])
        return {"want": torch.unique(self._exact_choice()[1]), "ids": boundary,
                "x": d.x[d.global_to_local(boundary)].clone()}

    @handles("fedsage.exact_mend", phases=("pretrain",), schema={
        "ids": IDS, "x": Arr(ndim=2, cols="features")})
    def exact_mend(self, ids: Tensor, x: Tensor) -> dict:
        """``mend exact``: attach the received features ``x`` (row r: node ``ids[r]``) of the
        chosen cross-client neighbours to their own nodes."""
        d, p = self.data, self.opts.num_pred
        v, u = self._exact_choice()
        order = torch.argsort(ids)
        pos = torch.searchsorted(ids[order], u).clamp(max=max(ids.numel() - 1, 0))
        if u.numel() and (ids.numel() == 0 or not bool((ids[order][pos] == u).all())):
            raise ProtocolViolation("exact mending: the server did not send the features of "
                                    "every cross-client neighbour this client asked for")
        counts = torch.bincount(v, minlength=d.num_nodes)
        slot = torch.arange(v.numel()) - (torch.cumsum(counts, 0) - counts)[v]
        gen = torch.zeros(d.num_nodes, p, d.num_features, dtype=d.x.dtype)
        if u.numel():
            gen[v, slot] = x[order][pos].to(d.x.dtype)
        self._mend = mended_inputs(d.x, self.local_ei, gen, counts, torch.arange(d.num_nodes))
        self._inputs = self._train_cache = None
        return {"generated": int(counts.sum())}

    def model_inputs(self) -> ModelInputs:
        """The mended local subgraph (before :meth:`mend`: the plain local subgraph)."""
        d = self.data
        if self._mend is None:
            deg = torch.bincount(self.local_ei[1], minlength=d.num_nodes) + 1
            ei, w = gcn_edge_weights(self.local_ei, d.num_nodes, deg)
            return ModelInputs(d.x, ei, w, torch.arange(d.num_nodes))
        feats, ei, w = self._mend
        return ModelInputs(feats, ei, w, torch.arange(d.num_nodes))
