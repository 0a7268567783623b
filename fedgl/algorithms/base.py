"""Mechanics shared by the horizontal FedAvg-style algorithms: the client's local training and
evaluation, and the server's round loop. Algorithms subclass these and supply only what differs
(a client's model inputs, a server's pre-training round).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from fedgl import progress
from fedgl.config import Config, parse_num_neighbors
from fedgl.data.client_data import ClientData
from fedgl.errors import RunAborted
from fedgl.evaluation import SPLITS, pooled_accuracy
from fedgl.federation.aggregate import FedAvg, State
from fedgl.federation.client_sampling import ClientSampler
from fedgl.federation.facts import FactsParty
from fedgl.federation.ledger import Ledger
from fedgl.federation.protocol import Int, OneOf, Weights, Wire, handles
from fedgl.federation.runtime import Runtime
from fedgl.models import build_model, gcn_edge_weights
from fedgl.models.base import load_state

#: evaluating this many clients or more shows a progress line (fewer take a moment)
MANY_CLIENTS = 100
#: a global model as the server sends it: a state dict, or the round's signed CKKS updates
#: (``encrypt_models``); a lone encrypted model is accepted here to be refused by name
MODEL = OneOf((Weights(), Wire("ckks.model"), Wire("ckks.model_sum")))
MAX_LOCAL_STEPS = 1_000_000

@dataclass
class ModelInputs:
    """What a client feeds its model: rows ``x`` (raw features or first-layer aggregates), the
    edges among those rows with normalised weights, and which rows are the client's own nodes
    (``own_rows[i]`` is the row of ``data.node_ids[i]``)."""

    x: Tensor
    edge_index: Tensor
    edge_weight: Tensor | None
    own_rows: Tensor
    pre_aggregated: bool = False
    # GCN inputs: ``n = d̃^{-1/2}`` with ``edge_weight = n_src n_dst`` (mini-batch training
    # re-weights sampled edges from it, :mod:`fedgl.algorithms.sampled`); None otherwise
    node_norm: Tensor | None = None


def client_seed(seed: int, client_id: int) -> int:
    return (seed * 1_000_003 + client_id * 7_919 + 17) % (2**63 - 1)


class GNNClient(FactsParty, ABC):
    """A client that trains a copy of the global model on data it owns.

    Subclasses implement :meth:`model_inputs`. Training uses SGD with the configured learning rate
    and weight decay (no momentum, so the optimiser carries no state across rounds).

    A subclass that sets ``minibatch_capable`` (and fills ``ModelInputs.node_norm`` for GCN)
    trains on sampled mini-batches when ``batch_size > 0`` (:mod:`fedgl.algorithms.sampled`):
    each local step is one batch of training nodes with its sampled neighbourhood, and
    evaluation runs full-neighbour inference in bounded memory.
    """

    minibatch_capable = False

    def __init__(self, data: ClientData, config: Config, seed: int) -> None:
        self.data = data
        self.config = config
        self.device = torch.device(config.device)
        self._model: torch.nn.Module | None = None
        self._model_is_default = False  # built by :meth:`_build_model` (so it can be rebuilt)
        self._held: State | None = None  # a local result not yet in the model (hold_weights)
        # Cross-device federations (clients sampled per round) keep no model between rounds.
        self.keep_model = not getattr(config, "clients_per_round", 0)
        self.seed = seed
        self.generator = torch.Generator(device=self.device)
        self._inputs: ModelInputs | None = None
        self._train_cache: ModelInputs | None = None
        self._sampled = None  # SampledInputs of mini-batch training, built on first use
        self._y = data.y.to(self.device)
        self._masks = {s: getattr(data, f"{s}_mask").to(self.device) for s in SPLITS}
        #: the evaluations this client has answered, by the digest of the model scored: a
        #: model is evaluated once, a repeat is answered from here (the same counts)
        self.evaluated: dict[str, dict] = {}

    def protocol_limits(self) -> dict[str, int]:
        """Shape bounds of the messages this client accepts (named in handler schemas)."""
        return {"features": self.data.num_features, "own": self.data.num_nodes}

    # ----------------------------------------------------------------- the local model
    @property
    def model(self) -> torch.nn.Module:
        """The local copy of the model, built on first use. It carries no state between rounds
        (every ``fit``/``evaluate`` loads the global weights), so with ``keep_model`` off it is
        dropped after each call: 10,000 idle clients then hold their data and nothing else."""
        if self._model is None:
            self._model = self._build_model()
            self._model_is_default = True
        if self._held is not None:
            held, self._held = self._held, None
            load_state(self._model, held)
        return self._model

    @model.setter
    def model(self, module: torch.nn.Module) -> None:
        self._model, self._model_is_default, self._held = module, False, None

    def hold_weights(self, state: State) -> None:
        """Make ``state`` (this client's own result, a plain state dict) its local model,
        copied in when the model is next used: what a batched round leaves each client, mostly
        replaced by the next round's global model before anything reads it (ten copies a round
        saved on Cora's ten clients)."""
        self._held = state

    def _build_model(self) -> torch.nn.Module:
        cfg, d = self.config, self.data
        return build_model(cfg.model, d.num_features, cfg.hidden, d.num_classes, cfg.layers,
                           cfg.dropout).to(self.device)

    def release_model(self) -> None:
        """Drop the local model copy when it can be rebuilt exactly (the default model with
        the stateless SGD optimiser) and ``keep_model`` is off."""
        if (not self.keep_model and self._model_is_default
                and type(self)._optimizer is GNNClient._optimizer):
            self._model, self._held = None, None

    # ----------------------------------------------------------------- subclass hook
    @abstractmethod
    def model_inputs(self) -> ModelInputs:
        """The rows, edges and weights this client's model runs on."""

    def _cached_inputs(self) -> ModelInputs:
        if self._inputs is None:
            inp = self.model_inputs()
            self._inputs = ModelInputs(
                inp.x.to(self.device), inp.edge_index.to(self.device),
                None if inp.edge_weight is None else inp.edge_weight.to(self.device),
                inp.own_rows.to(self.device), inp.pre_aggregated)
        return self._inputs

    def _train_inputs(self) -> ModelInputs:
        """The inputs restricted to the receptive field of the training nodes.

        Message passing in layers >= 2 (and in layer 1 unless it is pre-aggregated) only needs
        rows within that many in-hops of a training node; on the induced subgraph, with the
        original edge weights, the outputs at the training nodes are exactly those of the full
        inputs, at a fraction of the cost. ``own_rows`` then lists the training nodes' rows.
        """
        if self._train_cache is None:
            inp = self._cached_inputs()
            train_rows = inp.own_rows[self._masks["train"]]
            depth = self.config.layers - (1 if inp.pre_aggregated else 0)
            self._train_cache = restrict_to_receptive_field(inp, train_rows, depth)
        return self._train_cache

    # ----------------------------------------------------------------- mini-batch training
    @property
    def minibatch(self) -> bool:
        """Whether local steps are sampled mini-batches (``batch_size > 0``)."""
        return self.minibatch_capable and int(getattr(self.config, "batch_size", 0)) > 0

    def _sampled_inputs(self):  # -> fedgl.algorithms.sampled.SampledInputs
        """The inputs as a CSR for sampling, built once from :meth:`model_inputs` (whose
        edge list is not kept)."""
        from fedgl.algorithms.sampled import SampledInputs

        if self._sampled is None:
            self._sampled = self._lean_sampled_inputs()
        if self._sampled is None:
            inp = self.model_inputs()
            if self.config.model == "gcn" and inp.node_norm is None:
                raise RuntimeError("mini-batch GCN needs ModelInputs.node_norm")
            train = self._masks["train"].nonzero().flatten()
            norm = None if self.config.model != "gcn" else inp.node_norm.to(torch.float32)
            inp.edge_weight = None  # not needed (re-derived from norm): free it before the CSR
            self._sampled = SampledInputs.build(
                inp.x.to(self.device), inp.edge_index, norm, inp.own_rows, train,
                self._y[train], inp.pre_aggregated)
        return self._sampled

    def _lean_sampled_inputs(self):
        """Hook: the sampled inputs built without the full edge list, or None (then they are
        made from :meth:`model_inputs`)."""
        return None

    def _minibatch_steps(self, opt: torch.optim.Optimizer, local_steps: int, round: int
                         ) -> list[float]:
        """``local_steps`` optimiser steps, each on one sampled batch. Batches and neighbour
        samples come from a CPU generator seeded by (seed, client, round), dropout from
        ``self.generator``, so a round's result depends on nothing else (exact resumes)."""
        from fedgl.algorithms.sampled import local_step_batch, minibatch_forward

        cfg = self.config
        si = self._sampled_inputs()
        fanouts = parse_num_neighbors(getattr(cfg, "num_neighbors", ""), cfg.layers)
        gen = torch.Generator().manual_seed(
            (client_seed(self.seed, self.data.client_id) * 31 + round * 1_000_033 + 5)
            % (2**63 - 1))
        losses = []
        for _ in range(local_steps):
            seeds, y = local_step_batch(si, int(cfg.batch_size), gen)
            opt.zero_grad(set_to_none=True)
            loss = self.local_loss(minibatch_forward(self.model, cfg.model, si, seeds, fanouts,
                                                     gen, self.generator), y)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        return torch.stack(losses).tolist()   # one device-to-host copy, not one per step

    def _forward(self, inp: ModelInputs) -> Tensor:
        kwargs = {"pre_aggregated": True} if inp.pre_aggregated else {}
        return self.model(inp.x, inp.edge_index, inp.edge_weight, generator=self.generator,
                          out_rows=inp.own_rows, **kwargs)

    def load_weights(self, weights: State) -> None:
        self._held = None   # replaced before it was ever read
        load_state(self.model, self.decode_weights(weights))

    def get_weights(self) -> State:
        return {k: v.detach().cpu() for k, v in self.model.state_dict().items()}

    def decode_weights(self, weights: State) -> State:
        """Hook: turn a received global model into a state dict (identity; a subclass that
        encrypts models decrypts here)."""
        return weights

    def encode_weights(self, weights: State, num_train: int) -> State:
        """Hook: what ``fit`` sends back for the new weights (identity; a subclass that encrypts
        models returns an opaque payload that the server's strategy can aggregate)."""
        return weights

    def _optimizer(self) -> torch.optim.Optimizer:
        """The local optimiser of one ``fit``: plain SGD (no state across rounds)."""
        return torch.optim.SGD(self.model.parameters(), lr=self.config.lr,
                               weight_decay=self.config.weight_decay)

    def local_loss(self, log_probs: Tensor, y: Tensor) -> Tensor:
        """The loss of one local step: the mean NLL of the training nodes' log-probabilities.

        A subclass may add terms (FedProx's proximal term, see docs/extending.md); the model
        being trained is ``self.model``. Clients whose class overrides this train one by one
        (the batched fast path of :meth:`fit_many` computes only the NLL)."""
        return F.nll_loss(log_probs, y)

    def _train_forward(self) -> Callable[[], Tensor]:
        """Log-probabilities of the training nodes (in ``_y[train]`` order), for one step."""
        inp = self._train_inputs()
        return lambda: self._forward(inp)

    # ----------------------------------------------------------------- protocol methods
    @handles("fedavg.fit", phases=("train",), optional=("round", "evaluate"),
             rides={"evaluate": "fedavg.evaluate"}, schema={
                 "weights": MODEL, "local_steps": Int(1, MAX_LOCAL_STEPS), "round": Int(0),
                 "evaluate": Int(1, 1)})
    def fit(self, weights: State, local_steps: int, round: int = 1) -> dict:
        """Load the global model, take ``local_steps`` optimiser steps on own training nodes,
        and return the new weights, the number of training nodes and the mean training loss.

        Dropout masks are drawn from a generator seeded by (seed, client, round), so a round's
        result does not depend on earlier calls: runs resume exactly and every runtime agrees.

        ``evaluate=1`` in the message (the previous round's evaluation riding on this fit) is
        served by the endpoint before this method runs: it calls this client's
        ``fedavg.evaluate`` handler on the same ``weights``, where this client would accept that
        message itself, and the reply carries its ``correct`` and ``total`` beside the update
        (:mod:`fedgl.federation.protocol`, riders)."""
        self.load_weights(weights)
        self.generator.manual_seed(client_seed(self.seed, self.data.client_id) + round)
        train = self._masks["train"].nonzero().flatten()
        if train.numel() == 0:
            return {"weights": self.encode_weights(self.get_weights(), 0), "num_train": 0,
                    "loss": float("nan")}
        self.model.train()
        opt = self._optimizer()
        losses = []
        if self.minibatch:
            losses = self._minibatch_steps(opt, local_steps, round)
        else:
            forward, y_train = self._train_forward(), self._y[train]
            for _ in range(local_steps):
                opt.zero_grad(set_to_none=True)
                loss = self.local_loss(forward(), y_train)
                loss.backward()
                opt.step()
                losses.append(loss.detach())
            losses = torch.stack(losses).tolist()   # one device-to-host copy per fit
        out = {"weights": self.encode_weights(self.get_weights(), int(train.numel())),
               "num_train": int(train.numel()), "loss": sum(losses) / len(losses)}
        self.release_model()
        return out

    @classmethod
    def fit_many(cls, clients: list[GNNClient], weights: State, local_steps: int,
                 round: int = 1, *, cache: dict | None = None) -> list[dict] | None:
        """Every client's :meth:`fit` as one batched computation (in-process clients starting
        from the same model; :mod:`fedgl.algorithms.batched`), or None where that would not
        reproduce ``fit``: models other than GCN, encrypted models, mixed devices or inputs."""
        from fedgl.algorithms.batched import fit_gcn_clients, uniform_group

        if (not uniform_group(clients) or clients[0].config.model != "gcn"
                or clients[0].minibatch or type(clients[0]).local_loss is not GNNClient.local_loss):
            return None
        out = fit_gcn_clients(clients, weights, local_steps, round, cache)
        for c in clients:
            c.release_model()
        return out

    @torch.no_grad()
    def predict(self, weights: State) -> Tensor:
        """Log-probabilities (eval mode) for the own nodes, in ``data.node_ids`` order. Local
        only: not a protocol method, the server never asks for predictions."""
        self.load_weights(weights)
        self.model.eval()
        if self.minibatch:
            from fedgl.algorithms.sampled import full_inference

            return full_inference(self.model, self.config.model, self._sampled_inputs())
        return self._forward(self._cached_inputs())

    @handles("fedavg.evaluate", phases=("train", "eval"), schema={"weights": MODEL})
    def evaluate(self, weights: State) -> dict:
        """Correct predictions and node counts of the given model on own train/val/test nodes.

        A given model is evaluated once: asked again for the same weights (as a rider or on
        its own, under any round), the client answers from :attr:`evaluated`, the same counts,
        without scoring it a second time."""
        key = evaluation_key(weights)
        done = self.evaluated.get(key)
        if done is not None:
            return _copy_counts(done)
        out = self._counts(self.predict(weights))
        self.release_model()
        self.evaluated[key] = _copy_counts(out)
        return out

    def _counts(self, log_probs: Tensor) -> dict:
        return _counts_many([self], [log_probs])[0]

    @classmethod
    def evaluate_many(cls, clients: list[GNNClient], weights: State, *,
                      cache: dict | None = None) -> list[dict] | None:
        """Every client's :meth:`evaluate` from one forward pass over the union of their inputs
        (they all score the same model, and no edge joins two clients' inputs), or None where
        that does not apply (encrypted models, mixed devices or input kinds)."""
        from fedgl.algorithms.batched import uniform_group

        if not uniform_group(clients) or clients[0].minibatch:
            return None
        key = evaluation_key(weights)
        if all(key in c.evaluated for c in clients):   # each has scored this model once
            return [_copy_counts(c.evaluated[key]) for c in clients]
        log_probs = cls._predict_many(clients, weights, cache)
        for c in clients:
            c.release_model()
        if log_probs is None:
            return None
        out = []
        for c, counts in zip(clients, _counts_many(clients, log_probs, cache), strict=True):
            counts = c.evaluated.setdefault(key, counts)   # an earlier answer stands
            out.append(_copy_counts(counts))
        return out

    @classmethod
    def _predict_many(cls, clients: list[GNNClient], weights: State,
                      cache: dict | None = None) -> list[Tensor] | None:
        """Every client's :meth:`predict` in one pass
        (:func:`fedgl.algorithms.batched.predict_gnn_clients`), or None."""
        from fedgl.algorithms.batched import predict_gnn_clients

        return predict_gnn_clients(clients, weights, cache)


class FedAvgClient(GNNClient):
    """The FedAvg client: trains on its local subgraph only (own nodes with their raw features,
    the edges among them, GCN normalisation with the local degrees). FedGCN with ``--hops 0``
    computes exactly this; subclass it to change the local objective (:meth:`local_loss`)."""

    minibatch_capable = True

    def model_inputs(self) -> ModelInputs:
        return local_subgraph_inputs(self.data, self.data.x)


def evaluation_key(weights: State) -> str:
    """The name of a model a client is asked to score: the digest of its names and values."""
    from fedgl.privacy.inputs import digest

    return digest("evaluate", weights)


def _counts_many(clients: list[GNNClient], log_probs: list[Tensor],
                 cache: dict | None = None) -> list[dict]:
    """``[c._counts(lp) for c, lp in zip(clients, log_probs)]`` in a few vectorised steps and
    one device-to-host copy (the batched evaluation's: each client's own counts). The labels,
    split masks and totals of a group of clients are kept in ``cache`` (the runtime's, which
    holds the clients anyway): they change with no round."""
    sizes = tuple(lp.size(0) for lp in log_probs)
    ident = (tuple(id(c) for c in clients), sizes)
    fixed = cache.get("counts") if cache is not None else None
    if fixed is None or fixed[0] != ident:
        device = log_probs[0].device
        owner = torch.repeat_interleave(torch.arange(len(clients), device=device),
                                        torch.tensor(sizes, device=device))
        masks = torch.stack([torch.cat([c._masks[s] for c in clients]) for s in SPLITS], 1)
        totals = torch.zeros(len(clients), len(SPLITS), dtype=torch.long, device=device) \
            .index_add_(0, owner, masks.long()).tolist()
        fixed = (ident, torch.cat([c._y for c in clients]), owner, masks, totals)
        if cache is not None:
            cache["counts"] = fixed
    _, y, owner, masks, totals = fixed
    hit = torch.cat(log_probs).argmax(dim=-1) == y
    correct = torch.zeros(len(clients), len(SPLITS), dtype=torch.long, device=hit.device) \
        .index_add_(0, owner, (masks & hit.unsqueeze(1)).long()).tolist()
    return [{"correct": list(correct[k]), "total": list(totals[k])} for k in range(len(clients))]


def _copy_counts(counts: dict) -> dict:
    return {k: list(v) if isinstance(v, list) else v for k, v in counts.items()}


def local_subgraph_inputs(data: ClientData, x: Tensor, *, pre_aggregated: bool = False
                          ) -> ModelInputs:
    """Rows = the client's own nodes (features ``x``); edges = own-own edges weighted
    ``d̃_i^-1/2 d̃_j^-1/2`` with the local degrees (the graph A_k), self-loops appended."""
    j, i = data.edge_index
    own_src = data.owns(j)
    ei = torch.stack([data.global_to_local(j[own_src]), data.global_to_local(i[own_src])])
    local_deg = torch.bincount(ei[1], minlength=data.num_nodes) + 1
    ei, w = gcn_edge_weights(ei, data.num_nodes, local_deg)
    return ModelInputs(x, ei, w, torch.arange(data.num_nodes), pre_aggregated=pre_aggregated,
                       node_norm=local_deg.to(torch.float32).pow(-0.5))


def restrict_to_receptive_field(inp: ModelInputs, rows: Tensor, depth: int) -> ModelInputs:
    """Induced subgraph on the rows within ``depth`` in-hops of ``rows`` (see ``_train_inputs``)."""
    n = inp.x.size(0)
    keep = torch.zeros(n, dtype=torch.bool, device=rows.device)
    keep[rows] = True
    src, dst = inp.edge_index
    for _ in range(depth):
        keep[src[keep[dst]]] = True
    sel = keep[src] & keep[dst]
    new_id = torch.cumsum(keep, 0) - 1
    weight = None if inp.edge_weight is None else inp.edge_weight[sel]
    return ModelInputs(inp.x[keep], new_id[inp.edge_index[:, sel]], weight, new_id[rows],
                       inp.pre_aggregated)


class FedAvgServer:
    """Drives FedAvg rounds through a runtime; holds no graph data, only the global model.

    :meth:`rounds` is a generator so that whoever drives the run (and may hold an oracle
    evaluator) sees each round's global model without the server ever holding that evaluator.
    """

    def __init__(self, runtime: Runtime, strategy: FedAvg, init_weights: State,
                 config: Config) -> None:
        self.runtime = runtime
        self.strategy = strategy
        self.weights = {k: v.clone() for k, v in init_weights.items()}
        self.config = config
        self.client_sampler: ClientSampler | None = None  # None: every client, every round
        self.refused: dict[int, str] = {}  # clients left out for what they sent (drop policy)
        self.refusal_log: list[str] = []  # one line per refused client message
        #: while a round's row waits for the scores riding on the next fit: how many of the
        #: runtime's failure events, and a copy of the ledger, from before that fit (the row's
        #: network columns and its checkpoint are as of the end of its round); else None
        self.row_mark: tuple[int, Ledger] | None = None
        #: with :attr:`row_mark`, what Flower had carried by then (a deployment; else None)
        self.row_flower: dict[str, dict[str, int]] | None = None
        #: resumed from a checkpoint taken while its round's scores rode on the next fit: that
        #: fit carries the request again (the bytes of an uninterrupted run); the scores are
        #: already in the history
        self.resume_ride = False

    def active_clients(self) -> list[int] | None:
        """The clients taking part: None (every client) unless some were refused."""
        if not self.refused:
            return None
        return [k for k in self.runtime.client_ids if k not in self.refused]

    def pretrain(self) -> None:
        """Optional pre-training communication round; FedAvg itself has none."""

    def pretrain_update(self) -> None:
        """The pre-training round again over data that may have changed since an earlier one
        (scoring after training); an algorithm that can exchange only what changed overrides
        it. By default the whole round."""
        self.pretrain()

    def restore_client(self, client_id: int) -> None:
        """Bring a restarted client (fresh process, own shard reloaded) back into the protocol.

        FedAvg clients get the global model with every call, so only the pre-training state must
        be rebuilt: the pre-training exchange is run again (deterministic, and counted)."""
        self.pretrain()

    def aggregate_fits(self, results: dict[int, dict]) -> dict:
        """FedAvg over the clients' ``fit`` replies (``weights``, ``num_train``, ``loss``): sets
        the new global model and returns the round's ``train_loss`` (mean over training nodes)."""
        ordered = [results[k] for k in sorted(results)]
        self.weights = self.strategy.aggregate([r["weights"] for r in ordered],
                                               [r["num_train"] for r in ordered])
        trained = [r for r in ordered if r["num_train"] > 0]
        n = sum(r["num_train"] for r in trained)
        return {"train_loss": (sum(r["loss"] * r["num_train"] for r in trained) / n
                               if n else float("nan"))}

    def rounds(self, start: int = 1) -> Iterator[tuple[int, State, dict]]:
        """Yield ``(round, global_weights, metrics)`` after every round from ``start`` on;
        metrics include the mean training loss and, on evaluation rounds, the federated
        accuracies. Resuming sets ``weights`` and passes the next round as ``start``.

        An evaluation rides on the next round's fit: round t's model w_t is what round t+1's
        ``fedavg.fit`` carries, so that message asks the clients to score it first
        (``evaluate=1``) and their replies bring the counts beside the update; round t's row is
        yielded once they arrive (after round t+1's exchange, before its aggregation). A
        standalone ``fedavg.evaluate`` remains for the last round, with client sampling (the
        next fit goes to other clients), a non-finite model or loss, and when a client's scores
        did not come back (it dropped). While the row waits, :attr:`row_mark` keeps the
        ledger and the events as they were at the end of its round (its checkpoint's state;
        resuming from it sets :attr:`resume_ride`). The rows are those of evaluating
        every round on its own; the ledger counts fewer messages (no ``fedavg.evaluate`` and no
        second download of w_t) and a few bytes more in each fit (the flag, the counts).
        With a strategy whose secure model sum takes the counts (secure models), the fit also
        sets ``fuse_counts`` and the round's one secure sum gives both the model average and
        round t's pooled counts (:meth:`pool_fused`), over the same clients."""
        cfg = self.config
        ledger = self.runtime.ledger
        # a round whose row waits for the scores riding on the next fit: (round, model,
        # metrics, the clients it is scored by (None: all), their ids)
        pending: tuple[int, State, dict, list[int] | None, list[int]] | None = None
        rerun, self.resume_ride = self.resume_ride, False
        for t in range(start, cfg.rounds + 1):
            with ledger.timer("train"):
                chosen = (self.active_clients() if self.client_sampler is None
                          else [k for k in self.client_sampler.sample(t, self.runtime.client_ids)
                                if k not in self.refused])
            if pending is not None and chosen != pending[3]:   # not the clients it would score
                yield self._evaluated(pending, self.evaluate(pending[1], clients=pending[3]))
                pending = None
            args = {"weights": self.weights, "local_steps": cfg.local_steps, "round": t}
            if pending is not None or rerun:
                args["evaluate"] = 1
            fuse = "evaluate" in args and self._may_fuse(chosen, pending)
            if fuse:   # the counts join this round's secure model sum (one sum, not two)
                args["fuse_counts"] = 1
            if pending is not None:   # the row's ledger and events: as of the end of its round
                copy = Ledger.from_state_dict(self.runtime.ledger.state_dict())
                copy.network = self.runtime.ledger.network
                self.row_mark = (len(self.runtime.events), copy)
                carried = getattr(self.runtime, "flower_bytes", None)   # a deployment's
                self.row_flower = None if carried is None else defaultdict(
                    lambda: {"up": 0, "down": 0}, {p: dict(v) for p, v in carried.items()})
            with ledger.timer("train"):
                results = self.runtime.call("fedavg.fit", args, phase="train", clients=chosen)
            scores = take_scores(results) if "evaluate" in args else {}
            rerun = False
            if pending is not None:
                if fuse:   # the round's model sum (survivors) gives the pooled counts too
                    with ledger.timer("train"):
                        accuracies = self.pool_fused(results, scores)
                else:
                    if set(scores) != set(pending[4]):   # a client dropped: score w_t alone
                        scores = self._score(pending[1], pending[3])
                    accuracies = self.pool(scores)
                yield self._evaluated(pending, accuracies)
                pending = None
            self.row_mark = None
            with ledger.timer("train"):
                metrics = self.aggregate_fits(results)
            if fuse:
                self.strategy.end_round()
            if t % cfg.eval_every == 0 or t == cfg.rounds:
                if self._may_ride(t, metrics):
                    clients = self.active_clients()
                    pending = (t, self.weights, metrics, clients,
                               list(self.runtime.client_ids if clients is None else clients))
                    continue
                metrics.update(self.evaluate())
            yield t, self.weights, metrics

    def _may_fuse(self, chosen: list[int] | None, pending: tuple | None) -> bool:
        """Whether the counts riding on this fit join the round's secure model sum: a strategy
        whose sum takes them (secure models), every client taking part (the sum covers them
        all, or the robust survivors)."""
        return bool(getattr(self.strategy, "fuses_counts", False)) and chosen is None and (
            pending is None or pending[3] is None)

    def pool_fused(self, results: dict[int, dict], scores: dict[int, dict]) -> dict[str, float]:
        """The pooled accuracies from the round's one secure sum of the updates and the
        evaluation counts they carry (:meth:`SecureFedAvg.fused_counts
        <fedgl.privacy.secure_models.SecureFedAvg.fused_counts>`), over exactly the clients
        that sum covers."""
        if not scores or any("secure_counts" not in s for s in scores.values()):
            raise RunAborted("the clients answered an evaluation whose counts were to join the "
                             "secure model sum in the clear, or not at all; the run stops")
        return self.strategy.fused_counts([results[k]["weights"] for k in sorted(results)])

    def _may_ride(self, t: int, metrics: dict) -> bool:
        """Whether round ``t``'s evaluation may ride on round t+1's fit (see :meth:`rounds`)."""
        if t >= self.config.rounds or self.client_sampler is not None:
            return False
        loss = metrics.get("train_loss")
        if isinstance(loss, float) and math.isinf(loss):
            return False
        return not isinstance(self.weights, dict) or all(
            bool(torch.isfinite(v).all()) for v in self.weights.values()
            if isinstance(v, Tensor) and v.is_floating_point())

    @staticmethod
    def _evaluated(pending: tuple, accuracies: dict) -> tuple[int, State, dict]:
        t, weights, metrics = pending[:3]
        metrics.update(accuracies)
        return t, weights, metrics

    def evaluate(self, weights: State | None = None, *, clients: list[int] | None = None
                 ) -> dict:
        """Federated accuracy: every client scores the global model (or ``weights``) on its own
        nodes; the server pools the counts (the paper's metric: per-client accuracy weighted by
        node counts). ``clients``: those taking part (default: :meth:`active_clients`)."""
        return self.pool(self._score(self.weights if weights is None else weights,
                                     self.active_clients() if clients is None else clients))

    def pool(self, scores: dict[int, dict]) -> dict[str, float]:
        """The pooled accuracies of the clients' evaluation replies: their counts, or, where
        they answered ``secure_counts`` (a secure-sum mode), one secure sum of the counts they
        hold (:func:`fedgl.privacy.secure_models.pooled_counts`: the strategy's with secure
        models, else the server's own)."""
        secure = [k for k, s in scores.items() if "secure_counts" in s]
        if not secure:
            return pooled_accuracy(scores)
        summed = getattr(self.strategy, "pooled_counts", None) or \
            getattr(self, "pooled_counts", None)
        if len(secure) != len(scores) or summed is None:
            raise RunAborted("some clients answered the evaluation only through the secure sum, "
                             "which this run has none of; the run stops")
        lengths = {int(scores[k]["secure_counts"]) for k in secure}
        if len(lengths) != 1:
            raise RunAborted("clients announced different numbers of secure evaluation counts; "
                             "the run stops")
        return summed(sorted(secure), lengths.pop())

    def _score(self, weights: State, clients: list[int] | None) -> dict[int, dict]:
        n = len(self.runtime.client_ids if clients is None else clients)
        with self.runtime.ledger.timer("eval"), progress.phase(f"evaluating {n} clients",
                                                               show=n >= MANY_CLIENTS):
            return self.runtime.call("fedavg.evaluate", {"weights": weights},
                                     phase="eval", clients=clients)


def take_scores(results: dict[int, dict]) -> dict[int, dict]:
    """The ``correct``/``total`` counts that came back beside fit updates, or their number
    (``secure_counts``) where the client keeps them for the secure sum (removed from the
    replies); clients whose reply carries neither are left out."""
    out: dict[int, dict] = {}
    for k, r in results.items():
        if "correct" in r and "total" in r:
            out[k] = {"correct": r.pop("correct"), "total": r.pop("total")}
        elif "secure_counts" in r:
            out[k] = {"secure_counts": r.pop("secure_counts")}
    return out
