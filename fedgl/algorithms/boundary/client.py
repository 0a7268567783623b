"""A client of the per-round boundary exchange (Distributed GCN, Scardapane et al. 2020; BNS-GCN,
Wan et al. 2022), adapted to FedAvg.

Client k owns ``V_k``; its *boundary* ``R_k`` is the set of remote neighbours of its own nodes.
Every round it keeps a random subset ``B_k ⊆ R_k`` (each node independently with probability ρ;
ρ = 1: all of them, Distributed GCN) and, through the server (there is no client-to-client
channel), receives their features ``x_j`` and true degrees ``d̃_j`` once per round and, at every
local step and for every layer ``l < L``, their current hidden states ``h_j^{(l)}`` computed by
their owners. Layer ``l`` at an own node i is

    h_i^{(l+1)} = σ( Σ_{j ∈ Ñ(i) ∩ (V_k ∪ B_k)} s_ij d̃_i^{-1/2} d̃_j^{-1/2} h_j^{(l)} W_l + b_l ),

with ``s_ij = 1/ρ`` for a sampled remote j during training (an unbiased estimate of the full sum)
and 1 otherwise. With every boundary node present and the same weights, this is exactly the
centralised GCN at the own nodes. Received hidden states are constants for the receiver: the
gradient of client k's loss reaches only client k's model (FedAvg then averages the models).
Hidden states are sent after ReLU and before dropout; the receiver draws dropout for every row
it uses from its own generator.

The protocol is driven by :class:`~fedgl.algorithms.boundary.server.BoundaryServer` through
``directory``, ``sample``, ``serve``, ``begin``, ``layer`` (once per layer per local step) and
``finish``; each is one counted message each way.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from fedgl.algorithms.base import GNNClient, ModelInputs, client_seed
from fedgl.config import Config
from fedgl.data.client_data import ClientData
from fedgl.errors import ConfigError
from fedgl.federation.aggregate import State
from fedgl.federation.protocol import Arr, Bool, Int, Opt, Weights, handles, not_a_message
from fedgl.models.base import dropout

#: node ids this client owns, each once (checked by the handler against its own nodes)
OWN_IDS = Arr(("int64",), ndim=1, rows="own")


class BoundaryClient(GNNClient):
    """A GCN party that trains with (sampled) cross-client neighbours exchanged every step.

    ``rate`` is ρ, the fraction of boundary nodes kept per round (1.0 keeps all of them)."""

    def __init__(self, data: ClientData, config: Config, seed: int, *, rate: float = 1.0) -> None:
        if config.model != "gcn":
            raise ConfigError(f"the boundary-exchange baselines train a GCN (got --model "
                              f"{config.model}); use --model gcn")
        if not 0.0 < rate <= 1.0:
            raise ConfigError(f"boundary_rate must be in (0, 1] (got {rate}); e.g. 0.1")
        super().__init__(data, config, seed)
        self.rate = float(rate)
        self.deg_tilde = data.degrees() + 1  # true degree + self-loop, own nodes
        self.boundary = data.remote_neighbors()  # R_k, sorted global ids
        self._sampled = self.boundary  # B_k of the current exchange
        self._served = torch.empty(0, dtype=torch.long)  # local rows others asked for
        self._x_remote: Tensor | None = None
        self._edges: tuple[Tensor, Tensor] | None = None
        self._layer = 0
        self._h_own: Tensor | None = None
        self._training = False
        self._opt: torch.optim.Optimizer | None = None
        self._losses: list[float] = []
        self.last_log_probs: Tensor | None = None  # own nodes, last evaluation (local only)

    def model_inputs(self) -> ModelInputs:
        raise NotImplementedError("boundary clients build their inputs every round (begin)")

    # ------------------------------------------------------------------ protocol methods
    @handles("boundary.directory", phases=("pretrain",))
    def directory(self) -> dict:
        """Set-up: the ids of the own nodes, so that the server can route requests."""
        return {"ids": self.data.node_ids.clone()}

    @handles("boundary.sample", phases=("train", "eval"), schema={"round": Int(0), "full": Bool()})
    def sample(self, round: int, full: bool) -> dict:
        """Draw ``B_k`` for this exchange (all of ``R_k`` when ``full``) and request it."""
        if full or self.rate >= 1.0:
            self._sampled = self.boundary
        else:
            g = torch.Generator().manual_seed(client_seed(self.seed, self.data.client_id) + round)
            keep = torch.rand(len(self.boundary), generator=g) < self.rate
            self._sampled = self.boundary[keep]
        return {"ids": self._sampled.clone()}

    @handles("boundary.serve", phases=("train", "eval"), schema={"ids": OWN_IDS})
    def serve(self, ids: Tensor) -> dict:
        """Features and true degrees of own nodes requested by others (``ids`` sorted, owned);
        their hidden states follow at every layer call of this exchange."""
        if not bool(self.data.owns(ids).all()) or torch.unique(ids).numel() != ids.numel():
            raise ValueError("the requested ids are not this client's own nodes, each once")
        self._served = self.data.global_to_local(ids)
        return {"x": self.data.x[self._served].clone(), "deg": self.deg_tilde[self._served].clone()}

    @handles("boundary.begin", phases=("train", "eval"), schema={
        "weights": Weights(), "x": Arr(ndim=2, cols="features"), "deg": Arr(("int64",), ndim=1),
        "round": Int(0), "train": Bool()})
    def begin(self, weights: State, x: Tensor, deg: Tensor, round: int, train: bool) -> None:
        """Load the global model and build this exchange's rows: own nodes, then ``B_k`` (whose
        features ``x`` and degrees ``deg`` arrive here, aligned with the requested ids)."""
        d = self.data
        self.load_weights(weights)
        self._training = train
        self.model.train(train)
        self.generator.manual_seed(client_seed(self.seed, d.client_id) + round)
        self._x_remote = x
        n = d.num_nodes
        src, dst = d.edge_index
        own_src = d.owns(src)
        pos = torch.searchsorted(self._sampled, src).clamp(max=max(len(self._sampled) - 1, 0))
        in_b = (~own_src & (self._sampled[pos] == src) if len(self._sampled)
                else torch.zeros_like(own_src))
        keep = own_src | in_b
        row_src = torch.where(own_src, d.global_to_local(src), n + pos)[keep]
        row_dst = d.global_to_local(dst[keep])
        deg_rows = torch.cat([self.deg_tilde, deg]).to(torch.float32)
        loops = torch.arange(n)
        ei = torch.cat([torch.stack([row_src, row_dst]), torch.stack([loops, loops])], dim=1)
        w = deg_rows[ei[0]].pow(-0.5) * deg_rows[ei[1]].pow(-0.5)
        if train and self.rate < 1.0:
            w = torch.where(ei[0] >= n, w / self.rate, w)
        self._edges = (ei.to(self.device), w.to(self.device))
        self._layer = 0
        self._losses = []
        self._opt = self._optimizer() if train else None

    @handles("boundary.layer", phases=("train", "eval"), optional=("remote",),
             schema={"remote": Opt(Arr(ndim=2))})
    def layer(self, remote: Tensor | None = None) -> dict:
        """Compute the next layer at the own nodes. ``remote``: the previous layer's hidden states
        of ``B_k`` (None for layer 1, which uses the features received in :meth:`begin`).

        Returns the new hidden states of the served rows (layers < L); after the last layer,
        {} (training: one optimiser step taken) or the counts on own train/val/test nodes."""
        assert self._edges is not None and self._x_remote is not None
        convs = self.model.convs
        l = self._layer
        if l == 0:
            if self._training and self._opt is not None:
                self._opt.zero_grad(set_to_none=True)
            rows = torch.cat([self.data.x.to(self.device), self._x_remote.to(self.device)])
        else:
            assert self._h_own is not None and remote is not None
            rows = dropout(torch.cat([self._h_own, remote.to(self.device)]), self.model.dropout,
                           self._training, self.generator)
        ei, w = self._edges
        out = convs[l](rows, ei, w)[: self.data.num_nodes]
        self._layer = l + 1
        if self._layer < len(convs):
            self._h_own = torch.relu(out)
            return {"h": self._h_own[self._served].detach().cpu()}
        self._layer, self._h_own = 0, None
        log_probs = torch.log_softmax(out, dim=-1)
        if not self._training:
            self.last_log_probs = log_probs.detach().cpu()
            return self._counts(log_probs)
        train = self._masks["train"]
        if train.any():
            loss = F.nll_loss(log_probs[train], self._y[train])
            loss.backward()
            assert self._opt is not None
            self._opt.step()
            self._losses.append(loss.item())
        return {}

    @handles("boundary.finish", phases=("train",))
    def finish(self) -> dict:
        """End of the round: the new local model, the number of training nodes, the mean loss."""
        n = int(self._masks["train"].sum())
        loss = sum(self._losses) / len(self._losses) if self._losses else float("nan")
        self._x_remote, self._edges, self._opt = None, None, None
        return {"weights": self.encode_weights(self.get_weights(), n), "num_train": n,
                "loss": loss}

    # ------------------------------------------------------------------ not used by this protocol
    @not_a_message
    def fit(self, weights: State, local_steps: int, round: int = 1) -> dict:
        raise NotImplementedError("boundary clients train through begin/layer/finish")

    @not_a_message
    def evaluate(self, weights: State) -> dict:
        raise NotImplementedError("boundary clients evaluate through begin/layer")
