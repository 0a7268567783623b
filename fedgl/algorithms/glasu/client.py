"""A GLASU client: its feature columns, its edges, its copy of the split model.

One round (paper Alg. 1-4, merged as notes A16 recommend): the client samples its node sets
top-down from its own edges (:meth:`sample`; shared sets at aggregation layers come from the
server), runs its sub-layers segment by segment (:meth:`sample` returns the first segment's
output, :meth:`forward` each later one, given the server's aggregate ``H[l_k + 1]``), and
stores, at every aggregation layer, the all-but-own part ``H_{-m} = Extract(H, H⁺_m)``:

- mean:   ``H_{-m} = H - H⁺_m / M`` and locally ``Agg(H_{-m}, H⁺_m) = H_{-m} + H⁺_m / M``
- concat: ``H_{-m}`` = the other clients' column blocks; ``Agg`` re-inserts the own block.

:meth:`local_updates` then takes ``Q`` SGD steps on the client's own loss with the stale
``H_{-m}`` as constants (``local_stale``). ``exact`` instead backpropagates through the server
(:meth:`backward_top`, :meth:`backward_segment`): the server sums the clients' gradients with
respect to each aggregate and returns each client its share.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from fedgl.algorithms.glasu import batched
from fedgl.algorithms.glasu.blocks import Block, RowSparse, full_block, is_simple, sampled_block
from fedgl.algorithms.glasu.model import ClientStack
from fedgl.algorithms.glasu.options import GlasuParams
from fedgl.data.sampling import CSRGraph, expand_nodes
from fedgl.data.vertical import VerticalClientData
from fedgl.errors import DataError
from fedgl.evaluation import SPLITS
from fedgl.federation.facts import FactsParty
from fedgl.federation.protocol import Arr, Int, Opt, Str, handles

#: an aggregated hidden representation or its gradient: one row per sampled node
HIDDEN = Arr(ndim=2)


class GlasuClient(FactsParty):
    """Client ``data.client_id``; built from its own :class:`VerticalClientData` only.

    Features sparser than ``SPARSE_BELOW`` (bag-of-words) are also kept as a sparse copy for the
    first layer's gathers and products (same values, fewer operations)."""

    SPARSE_BELOW = 0.25
    # the local runtime may run these broadcasts for all in-process clients as one stacked
    # computation (glasu/batched.py; the same messages, each client's own random stream)
    BATCHABLE = ("sample", "forward", "local_updates")

    def __init__(self, data: VerticalClientData, params: GlasuParams, seed: int, *,
                 state_dir: str | Path | None = None) -> None:
        self.data = data
        #: the client's own folder for its checkpointed state (``glasu.save_state``)
        self.state_dir = state_dir
        self.p = params
        self.m = data.client_id
        self.gen = torch.Generator().manual_seed(seed * 1_000_003 + 7919 * self.m + 1)
        with torch.random.fork_rng():
            torch.manual_seed(seed * 1_000_003 + 31 * self.m + 2)
            self.model = ClientStack(params, self.m, data.num_features, data.has_labels)
            if self.model.classifier is not None:  # identical classifiers at every client (A5)
                torch.manual_seed(seed * 1_000_003 + 3)
                self.model.classifier.reset_parameters()
        cls = torch.optim.SGD if params.optimizer == "sgd" else torch.optim.Adam
        extra = {"momentum": params.momentum} if params.optimizer == "sgd" else {}
        # fused: one update kernel over all parameter tensors (the same arithmetic per element)
        self.opt = cls(self.model.parameters(), lr=params.lr, weight_decay=params.weight_decay,
                       fused=True, **extra)
        self.csr = CSRGraph.from_edge_index(data.edge_index, data.num_nodes)
        density = float((data.x != 0).float().mean()) if data.x.numel() else 1.0
        self._xs = RowSparse.from_dense(data.x) if density < self.SPARSE_BELOW else None
        self._simple = is_simple(self.csr)  # sampled blocks need no duplicate check
        self.a, self.b = params.share(self.m)
        self.sets: dict[int, Tensor] = {}
        self.trace: list[Tensor] = []  # own sub-layer outputs of the last forward (tests)
        self._full: list[Block] | None = None
        self._blocks: list[Block] = []
        self._round: dict = {}

    @classmethod
    def from_shard(cls, data: VerticalClientData, params: dict, seed: int) -> GlasuClient:
        """Built where the client runs (a Ray actor) from its shard and the plain parameters
        (``state_dir``: its own checkpoint folder on that machine, if any)."""
        params = dict(params)
        state_dir = params.pop("state_dir", None)
        return cls(data, GlasuParams(**{**params, "agg": tuple(params["agg"])}), seed,
                   state_dir=state_dir)

    @staticmethod
    def sample_many(group: list[GlasuClient], nodes: Tensor, top: int, cache: dict
                    ) -> list | None:
        return batched.sample_many(group, nodes, top, cache)

    @staticmethod
    def forward_many(group: list[GlasuClient], h: Tensor, k: int, cache: dict) -> list | None:
        return batched.forward_many(group, h, k, cache)

    @staticmethod
    def local_updates_many(group: list[GlasuClient], h: Tensor | None, cache: dict,
                           grad: Tensor | None = None) -> list | None:
        return batched.local_updates_many(group, h, cache, grad)

    # ------------------------------------------------------------------ set-up / batches
    @handles("glasu.training_nodes", phases=("pretrain",))
    def training_nodes(self) -> dict:
        """The training node ids (a label holder's index list; the server samples from it)."""
        return {"ids": torch.nonzero(self.data.train_mask).flatten()}

    @handles("glasu.sample_batch", phases=("train",))
    def sample_batch(self) -> dict:
        """Labels at one client (Alg. 5): the label holder draws the batch ``S[L]``."""
        ids = self.training_nodes()["ids"]
        size = self.p.batch_size if 0 < self.p.batch_size < ids.numel() else ids.numel()
        return {"ids": ids[torch.randperm(ids.numel(), generator=self.gen)[:size]]}

    # ------------------------------------------------------------------ sampling
    def _below(self, top: int) -> int:
        lower = [j for j in self.p.shared_sets if j < top]
        return lower[-1] if lower else 0

    @handles("glasu.sample", phases=("train",),
             schema={"nodes": Arr(("int64",), ndim=1), "top": Int(0, 64)})
    def sample(self, nodes: Tensor, top: int) -> dict:
        """Set ``S_m[top]`` (shared), sample ``S_m[l]`` down to the next shared set (or 0).
        Returns ``S_m[bottom]`` for the server's union, or at the bottom the first segment's
        output ``H⁺_m[l_1]``."""
        if top == self.p.layers:
            self._round = {"own": {}, "stale": {}, "leaf": {}, "q0": False}
            self.sets = {}
        self.sets[top] = nodes
        bottom = self._below(top)
        for layer in range(top - 1, bottom - 1, -1):
            self.sets[layer] = expand_nodes(self.csr, self.sets[layer + 1], self.p.fanout,
                                            self.gen)[0]
        if bottom > 0:
            return {"nodes": self.sets[bottom]}
        self._blocks = [sampled_block(self.csr, self.sets[i], self.sets[i + 1], self._simple)
                        for i in range(self.p.layers)]
        self.model.train()
        return {"h": self._segment(1, None, self._blocks, self._round).detach()}

    # ------------------------------------------------------------------ forward pieces
    def _dropout(self, h: Tensor) -> Tensor:
        if not self.model.training or self.p.dropout <= 0:
            return h
        if h.is_sparse:  # dropping stored entries is dropping entries (zeros stay zero)
            h = h.coalesce()
            keep = torch.rand(h.values().shape, generator=self.gen) >= self.p.dropout
            return torch.sparse_coo_tensor(h.indices(), h.values() * keep / (1.0 - self.p.dropout),
                                           h.shape, check_invariants=False)
        keep = torch.rand(h.shape, generator=self.gen, dtype=h.dtype) >= self.p.dropout
        return (h * keep).div_(1.0 - self.p.dropout)

    def _segment_layers(self, k: int) -> range:
        agg = self.p.agg
        return range(agg[k - 2] + 1 if k > 1 else 0, agg[k - 1] + 1)

    def _segment(self, k: int, h: Tensor | None, blocks: list[Block], state: dict) -> Tensor:
        """Run segment ``k`` (layers ``l_{k-1}+1 .. l_k``); returns ``H⁺_m[l_k]``."""
        gcnii = self.p.backbone == "gcnii"
        if k == 1:
            h = self._input_rows(blocks[0].src)
            if gcnii:  # GCNII: dropout, then the own input projection H₀
                h = state["h0"] = self.model.first_input(self._dropout(h))
        for layer in self._segment_layers(k):
            block = blocks[layer]
            h0 = state["h0"][self._h0_rows(blocks, layer)] if gcnii else None
            # dropout between layers (and before GCNII's layers), not on raw GCN/GAT input
            h = self.model.layer(layer, self._dropout(h) if layer or gcnii else h, block, h0)
            if not self.model.training:
                self.trace.append(h)
        state["own"][k] = h
        return h

    def _input_rows(self, src: Tensor) -> Tensor:
        """``X_m[S_m[0]]`` (sparse when the features are), kept while ``S_m[0]`` is unchanged."""
        cached = getattr(self, "_rows", None)
        if cached is not None and cached[0] is src:
            return cached[1]
        rows = (self._xs.gather(src) if self._xs is not None
                else self.data.x[src])
        self._rows = (src, rows)
        return rows

    @staticmethod
    def _h0_rows(blocks: list[Block], layer: int) -> Tensor:
        """Positions of ``S[layer+1]`` within ``S[0]`` (the rows of ``H₀`` for the skip)."""
        idx = blocks[layer].dst_in_src
        for below in range(layer - 1, -1, -1):
            idx = blocks[below].dst_in_src[idx]
        return idx

    def _extract(self, agg: Tensor, own: Tensor) -> Tensor:
        if self.p.aggregate == "mean":
            return (agg - own / self.p.clients).detach()
        return agg.detach().clone()

    def _local_agg(self, stale: Tensor, own: Tensor) -> Tensor:
        if self.p.aggregate == "mean":
            return stale + own / self.p.clients
        return torch.cat([stale[:, :self.a], own, stale[:, self.b:]], dim=1)

    def _input_from(self, k: int, h: Tensor, state: dict) -> Tensor:
        """``H_m[l_{k-1}+1]`` from the server's aggregate (stale split, or an exact leaf)."""
        if self.p.grad_mode == "exact" and self.model.training:
            leaf = h.clone().requires_grad_(True)
            state["leaf"][k] = leaf
            return leaf
        own = state["own"][k - 1]
        if not self.model.training:
            return h
        state["stale"][k] = self._extract(h, own)
        return self._local_agg(state["stale"][k], own)

    @handles("glasu.forward", phases=("train",), schema={"h": HIDDEN, "k": Int(0, 64)})
    def forward(self, h: Tensor, k: int) -> dict:
        """Segment ``k`` given the aggregate of segment ``k-1``; returns ``H⁺_m[l_k]``."""
        return {"h": self._segment(k, self._input_from(k, h, self._round), self._blocks,
                                   self._round).detach()}

    # ------------------------------------------------------------------ local updates
    def _top(self, h: Tensor, state: dict) -> Tensor:
        """``H_m[L]`` with gradient to the own output only (local_stale)."""
        return self._input_from(len(self.p.agg) + 1, h, state)

    def _loss(self, h_top: Tensor) -> Tensor:
        logits = self.model.classifier(self._dropout(h_top))
        return F.cross_entropy(logits, self.data.y[self.sets[self.p.layers]])

    def _full_local_forward(self) -> Tensor:
        """A whole forward pass with the stored stale ``H_{-m}`` at every aggregation layer."""
        state = {"own": {}, "h0": None}
        h = self._segment(1, None, self._blocks, state)
        for k in range(2, len(self.p.agg) + 2):
            h = self._local_agg(self._round["stale"][k], h)
            if k <= len(self.p.agg):
                h = self._segment(k, h, self._blocks, state)
        return h

    def _step(self, loss: Tensor) -> None:
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()

    @handles("glasu.top_gradient", phases=("train",), schema={"h": HIDDEN})
    def top_gradient(self, h: Tensor) -> dict:
        """Labels at one client (Alg. 6): the label holder's q=0 step and ``∂L_1/∂H[L]``."""
        top = self._top(h, self._round)
        top.retain_grad()
        loss = self._loss(top)
        self._step(loss)
        self._round["q0"] = True
        self._round["loss"] = float(loss.detach())
        return {"grad": top.grad.detach(), "loss": float(loss.detach())}

    @handles("glasu.local_updates", phases=("train",), optional=("grad",),
             schema={"h": Opt(HIDDEN), "grad": Opt(HIDDEN)})
    def local_updates(self, h: Tensor | None, grad: Tensor | None = None) -> dict:
        """``Q`` local steps on the own loss (or the surrogate ``Σ g ⊙ H_m[L]`` at a client
        without labels), other clients' embeddings stale; returns the q=0 loss."""
        first = float("nan")
        for q in range(self.p.stale_steps):
            if q == 0 and self._round["q0"]:
                first = self._round["loss"]
                continue
            top = self._top(h, self._round) if q == 0 else self._full_local_forward()
            if grad is not None:
                self._round["grad"] = grad
            g = self._round.get("grad")
            loss = self._loss(top) if self.model.classifier is not None else (g * top).sum()
            self._step(loss)
            if q == 0:
                first = float(loss.detach())
        return {"loss": first} if self.model.classifier is not None else {}

    # ------------------------------------------------------------------ exact gradients
    @handles("glasu.backward_top", phases=("train",), schema={"h": HIDDEN})
    def backward_top(self, h: Tensor) -> dict:
        """Exact mode: own loss on ``H[L]``; returns ``∂L_m/∂H[L]``."""
        leaf = self._top(h, self._round)
        loss = self._loss(leaf)
        self.opt.zero_grad()
        loss.backward()
        return {"grad": leaf.grad.detach(), "loss": float(loss.detach())}

    @handles("glasu.backward_segment", phases=("train",), schema={"grad": HIDDEN, "k": Int(0, 64)})
    def backward_segment(self, grad: Tensor, k: int) -> dict | None:
        """Exact mode: push the server's share of ``∂L/∂H[l_k+1]`` through segment ``k``;
        returns ``∂L/∂H[l_{k-1}+1]`` (k > 1) or takes the SGD step (k = 1)."""
        # k > 1: GCNII's skip reaches H₀ of segment 1, whose graph must survive until k = 1
        self._round["own"][k].backward(grad, retain_graph=k > 1)
        if k > 1:
            return {"grad": self._round["leaf"][k].grad.detach()}
        self.opt.step()
        return None

    # ------------------------------------------------------------------ evaluation
    @handles("glasu.eval_forward", phases=("eval",), schema={"h": Opt(HIDDEN), "k": Int(0, 64)})
    def eval_forward(self, h: Tensor | None, k: int) -> dict:
        """Full-neighbourhood inference (notes A14), segment ``k``."""
        if self._full is None:
            self._full = [full_block(self.data.edge_index, self.data.num_nodes)] * self.p.layers
        self.model.eval()
        with torch.no_grad():
            if k == 1:
                self.trace = []
                self._eval = {"own": {}}
            inp = None if k == 1 else self._input_from(k, h, self._eval)
            out = self._segment(k, inp, self._full, self._eval)
        return {"h": out}

    @handles("glasu.eval_scores", phases=("eval",), schema={"h": HIDDEN})
    def eval_scores(self, h: Tensor) -> dict:
        """Accuracy of the own classifier on ``H[L]`` for each split (label holders)."""
        self.model.train()
        self.trace.append(h)  # H[L] after the own sub-layer outputs (tests)
        if self.model.classifier is None:
            return {}
        with torch.no_grad():
            pred = self.model.classifier(h).argmax(1)
        out = {}
        for split in SPLITS:
            mask = getattr(self.data, f"{split}_mask")
            out[f"{split}_acc"] = float((pred[mask] == self.data.y[mask]).float().mean())
        return out

    # ------------------------------------------------------------------ checkpoints
    def _state_file(self, round_: int) -> Path:
        if self.state_dir is None:
            raise DataError(f"GLASU client {self.m} has no state folder to keep its checkpoint "
                            "in; checkpoint with --out set (local) or give the party one")
        return Path(self.state_dir) / f"glasu-client-{self.m}-round-{round_}.pt"

    @handles("glasu.save_state", phases=("train",), schema={"round": Int(0, 2**31)})
    def save_state(self, round: int) -> dict:  # noqa: A002 - the message's field name
        """Checkpoint: keep everything that carries over between rounds (weights, optimiser
        moments, the random stream of sampling and dropout) in the client's *own* state folder,
        and return only its SHA-256, which the server stores to check the restore. The file of
        the previous checkpoint is kept until this one exists (a crash in between leaves the
        server's last checkpoint restorable); older ones are removed."""
        path = self._state_file(round)
        buf = io.BytesIO()
        torch.save({"model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                    "generator": self.gen.get_state(), "round": int(round)}, buf)
        data = buf.getvalue()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        kept = sorted(path.parent.glob(f"glasu-client-{self.m}-round-*.pt"),
                      key=lambda p: p.stat().st_mtime_ns)
        for old in kept[:-2]:
            old.unlink(missing_ok=True)
        return {"digest": hashlib.sha256(data).hexdigest()}

    @handles("glasu.load_state", phases=("train",),
             schema={"round": Int(0, 2**31), "digest": Str(max_len=64)})
    def load_state(self, round: int, digest: str) -> None:  # noqa: A002 - the field name
        """Resume: restore the state this client saved at ``round`` from its own folder, once
        its SHA-256 is the one the server's checkpoint recorded."""
        path = self._state_file(round)
        try:
            data = path.read_bytes()
        except OSError:
            raise DataError(f"GLASU client {self.m} has no saved state for round {round} "
                            f"('{path}'); start the run again") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise DataError(f"GLASU client {self.m}'s saved state for round {round} is not the "
                            "one the server's checkpoint recorded; start the run again")
        try:
            state = torch.load(io.BytesIO(data), weights_only=True)
            self.model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["optimizer"])
            self.gen.set_state(state["generator"])
        except (KeyError, RuntimeError, ValueError, TypeError, pickle.UnpicklingError) as exc:
            raise DataError(f"GLASU client {self.m}'s saved state does not fit the config "
                            f"({str(exc).splitlines()[0][:120]}); start the run again") from None

    def parameters_dict(self) -> dict[str, Tensor]:
        """A copy of the client's parameters (tests and checkpoints)."""
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
