"""FedGCN client (Yao et al., "FedGCN: Convergence-Communication Tradeoffs in Federated Training
of Graph Convolutional Networks", Algorithm 1 and DESIGN.md §FedGCN).

Pre-training (L ∈ {1, 2}): the client sends, for every node i with a neighbour or itself in its
own set V_k, the partial sum ``S_k[i] = Σ_{j ∈ V_k ∩ Ñ(i)} d̃_j^{-1/2} x_j`` (only rows it touches,
never a raw remote feature), and receives the full sums ``S[i] = Σ_k S_k[i]`` for its own nodes
(1-hop) or for V_k ∪ N(V_k) with those nodes' degrees (2-hop). Layer 1 then sees
``(ÂX)_i = d̃_i^{-1/2} S[i]`` exactly; further layers run on the received subgraph (the edges the
client knows: those incident to its own nodes), normalised with the true degrees.

0-hop is FedAvg on the local subgraph: raw own features, own-own edges, local degrees.

Privacy (issue 4, docs/threat-model.md): the released sums may be clipped and noised (DP), sent
masked (``secure_sum: mask``) or CKKS-encrypted (``he``); rows whose remote part is suppressed
by ``min_contributors`` (or that only this client touches, in the secure modes) are filled with
the client's own partial sum. With ``encrypt_models`` the model updates are encrypted too.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from fedgl.algorithms.base import (
    MAX_LOCAL_STEPS,
    MODEL,
    GNNClient,
    ModelInputs,
    evaluation_key,
    local_subgraph_inputs,
)
from fedgl.algorithms.fedgcn.bounds import first_excess, full_sum_limits, noise_sigma, value_bound
from fedgl.algorithms.fedgcn.checks import ClientMisbehaved, cross_edges
from fedgl.algorithms.fedgcn.one_hop import exchanges_neighbour_rows, held_subgraph_degrees
from fedgl.algorithms.fedgcn.sparse_sums import (
    DEFAULT_CHUNK_ROWS,
    incidence,
    scaled_incidence,
    unscaled_features,
)
from fedgl.algorithms.fedgcn.stream import DEFAULT_BLOCK_ROWS, ClientStream
from fedgl.algorithms.fedgcn.update import UpdateClient
from fedgl.config import Config
from fedgl.data.client_data import ClientData
from fedgl.federation.aggregate import State
from fedgl.federation.messages import SparseRows, as_dense, compact_rows
from fedgl.federation.protocol import (
    Arr,
    Bool,
    Bytes,
    Int,
    Opt,
    ProtocolViolation,
    Record,
    Seq,
    handles,
)
from fedgl.models import gcn_edge_weights
from fedgl.privacy.dp import GaussianMechanism, clip_rows, record_release
from fedgl.privacy.he import EncryptedModel, EncryptedModelSum, HEClientContext, HEParams
from fedgl.privacy.he_signed import (
    CONTRIBUTION,
    BlockView,
    check_contributions,
    check_model_sum,
    rows_digest,
    sign_contribution,
    sign_model,
)
from fedgl.privacy.inputs import digest, feature_digest
from fedgl.privacy.policy import (
    HE_KEYS,
    KEY_EXCHANGE,
    PLAINTEXT_SUMS,
    SECURE_SUMS,
    ClientPolicy,
)
from fedgl.privacy.secagg import RECEIVED, SESSION, AttackDetected
from fedgl.privacy.secure_models import SecureModelParty

PRETRAIN = "fedgcn/pretrain"  # the secure-sum instance: the pre-training release, summed once

# payload schemas of the pre-training messages (row counts bounded by the rows a client asked for)
SUMS = Arr(("float32", "float64"), ndim=2, rows="touched", cols="features", sparse=True)
DEGREES = Arr(("int64",), ndim=1, rows="touched")
FLAGS = Arr(("bool",), ndim=1, rows="touched")
_IDX = Arr(("int64",), ndim=1, rows="plan_rows")
PLAN = Record({"block_ids": _IDX, "block_sizes": _IDX, "rows": _IDX, "use_own": FLAGS,
               "peers": Arr(("int64",), ndim=1), "peer_counts": _IDX,
               "receive": Arr(("bool",), ndim=1, rows="plan_rows"), "frac_bits": _IDX},
              optional=("peers", "peer_counts", "receive", "frac_bits"))


class FedGCNClient(UpdateClient, GNNClient, SecureModelParty):
    """A FedGCN party. Holds only its :class:`ClientData` and, after pre-training, the sums it
    received (rows for its own nodes, and with 2-hop for its remote neighbours). Over changed
    data the exchange may cover only the rows that changed (:mod:`.update`)."""

    minibatch_capable = True  # --batch-size/--num-neighbors: sampled local steps on its own inputs

    def __init__(self, data: ClientData, config: Config, seed: int) -> None:
        super().__init__(data, config, seed)
        self.hops = config.hops
        self.neighbour_rows = exchanges_neighbour_rows(config)  # rows of V_k ∪ N(V_k) come back
        self.chunk_rows = int(getattr(config, "pretrain_chunk_rows", DEFAULT_CHUNK_ROWS))
        self.block_rows = int(getattr(config, "pretrain_block_rows", DEFAULT_BLOCK_ROWS))
        self._stream: ClientStream | None = None  # the streamed exchange in progress
        self.deg_tilde = data.degrees() + 1  # true degrees + self-loop, of own nodes
        self.received_sums: Tensor | None = None
        self._consumed = False  # received_sums scaled in place into the mini-batch inputs
        self.remote_deg_tilde: Tensor | None = None
        self._dp_seed: int | None = None  # secret: the DP noise is derived from it
        self._dp_release: str | None = None  # public random name of this release (accounting)
        self._session: bytes | None = None  # the secure protocol session in progress
        self._plan: dict | None = None
        self._he_own: dict[int, tuple] = {}  # HE: own (view, ciphertexts) of blocks it receives
        self._he: HEClientContext | None = None
        self._fit_round = 0
        self._he_params = (HEParams.from_config(config)
                           if config.secure_sum == "he" or config.encrypt_models else None)
        self.feature_bound = value_bound(config)  # public bound on feature values, or None
        # this client's own safety policy (in simulation, the run's configuration): it decides
        # which message types this client answers (plaintext or secure steps) and whether its
        # models leave only inside secure sums
        self.policy = ClientPolicy.from_config(config)
        self.secure_models = self.policy.secure_models
        # order rule: with 1/2-hop, no training or evaluation before the pre-training sums
        # arrived (``fedavg.fit``/``fedavg.evaluate`` accept state "ready" only)
        self.protocol_state = "ready" if self.hops == 0 else "pretraining"
        self._num_touched: int | None = None  # |V_k ∪ N(V_k)|, counted on first use
        self._release_counted = False  # this release counted in the record (pretrain_releases)
        self._release_number = 1  # which of its data set's pre-training releases this is

    def protocol_limits(self) -> dict[str, int]:
        """Shape bounds of the messages this client accepts (checked on every message: the
        number of touched rows is counted once, its own data does not change)."""
        if self._num_touched is None:
            self._num_touched = self.data.num_nodes + len(self.data.remote_neighbors())
        touched = self._num_touched
        return {**super().protocol_limits(), "touched": touched, "plan_rows": touched}

    # ------------------------------------------------------------------ pre-training round
    def _full_touched(self) -> Tensor:
        """Global ids of rows this client contributes to: own nodes first, then remote neighbours."""
        return torch.cat([self.data.node_ids, self.data.remote_neighbors()])

    def _touched(self) -> Tensor:
        """The rows this release covers: :meth:`_full_touched`, or in a restricted exchange
        those among the rows that changed (own first, then remote, each ascending)."""
        full = self._full_touched()
        return full if self._restrict is None else full[self._restrict]

    def _own_rows(self) -> int:
        """How many of :meth:`_touched`'s rows are own nodes."""
        n = self.data.num_nodes
        return n if self._restrict is None else int(self._restrict[:n].sum())

    def _own_degrees(self) -> Tensor:
        """The own rows' degrees (with self-loop), aligned with :meth:`_touched`'s own rows."""
        deg = self.deg_tilde.clone()
        return deg if self._restrict is None else deg[self._restrict[:self.data.num_nodes]]

    @handles("fedgcn.partial_sums", phases=("pretrain",), needs=PLAINTEXT_SUMS)
    def partial_sums(self) -> dict:
        """Step 1 of the pre-training round: ``S_k[i]`` for every touched node i.

        Message: ``ids`` (touched rows, own first), ``sums`` (one row of d values each),
        ``num_requested`` (how many leading rows it wants back: own nodes for 1-hop, all touched
        rows for 2-hop) and, for 2-hop, ``degrees`` of its own nodes (aligned with the first ids).
        With ``min_contributors > 1`` also ``counts``: how many own nodes each row aggregates.
        """
        touched, _, released, counts = self._release()
        if self._restrict is not None:  # (the whole exchange is streamed, sparse where smaller)
            released = compact_rows(released)
        msg = {**self._announcement(touched, self._num_requested()), "sums": released}
        if counts is not None:
            msg["counts"] = counts
        return msg

    def _announcement(self, touched: Tensor, num_requested: int) -> dict:
        """What both pre-training paths announce about the rows: ``ids``, ``num_requested``,
        the DP release's public name (lets the run count releases: ε composes) and, when
        neighbour rows come back, the own nodes' degrees."""
        msg = {"ids": touched, "num_requested": num_requested}
        if self._dp_release is not None:
            msg["dp_release"] = self._dp_release
        if self.neighbour_rows or self.feature_bound is not None:
            msg["degrees"] = self._own_degrees()
        if getattr(self.config, "adjacency_check", "node") == "edge" and self._restrict is None:
            msg["cross_edges"] = cross_edges(self.data)
        return msg

    # ------------------------------------------------------------------ streamed exchange
    @handles("fedgcn.announce_rows", phases=("pretrain",), needs=PLAINTEXT_SUMS)
    def announce_rows(self) -> dict:
        """Step 1 of the streamed plaintext round (:mod:`~fedgl.algorithms.fedgcn.stream`): the
        touched ids (own first), how many leading ones it wants back and, when neighbour rows
        come back, its own nodes' degrees. No feature values. Starts a new stream."""
        d = self.data
        if self._restrict is not None:
            raise ProtocolViolation("a restricted exchange is not streamed; the server asked "
                                    "for the streamed one")
        self._count_release()
        touched = self._touched()
        order = torch.argsort(touched)
        n_req = self._num_requested()
        if self._sparse_path():
            j, i = d.edge_index
            b = incidence(self._row_of(j, touched), d.global_to_local(i), len(touched),
                          d.num_nodes)
            source = scaled_incidence(b.take_rows(order.numpy()), self.deg_tilde, d.x.dtype)
            del b
            features = unscaled_features(d.x)  # a view: no scaled copy of the own features
        else:
            source, features = self._release()[2][order], None  # DP: one release, sliced
        wanted = touched[:n_req]
        want_order = torch.argsort(wanted)
        self._stream = ClientStream(
            sorted_ids=touched[order].numpy(), source=source, features=features,
            chunk_rows=self.chunk_rows, want_ids=wanted[want_order].numpy(),
            want_pos=want_order.numpy(), num_own=d.num_nodes,
            # every requested row is written exactly once before the rows are used, so the
            # buffer's pages become resident only as the blocks arrive
            incoming=torch.empty((n_req, d.num_features), dtype=d.x.dtype),
            remote_degrees=(torch.zeros(n_req - d.num_nodes, dtype=torch.long)
                            if self.neighbour_rows else None))
        del source
        self._stream.split_by_block(self.block_rows)
        return self._announcement(touched, n_req)

    @handles("fedgcn.block_sums", phases=("pretrain",), needs=PLAINTEXT_SUMS)
    def block_sums(self) -> dict:
        """Step 2: the next block's partial sums, ascending ids (``stale`` after a restart)."""
        if self._stream is None:
            return {"stale": True}
        return {"sums": self._stream.upload(self.block_rows)}

    @handles("fedgcn.receive_block", phases=("pretrain",), optional=("degrees",),
             needs=PLAINTEXT_SUMS, schema={"sums": SUMS, "degrees": Opt(DEGREES)})
    def receive_block(self, sums: Tensor | SparseRows, degrees: Tensor | None = None) -> dict:
        """Step 3: the block's summed rows this client asked for (and remote degrees). Once
        every requested row has arrived they become the client's received sums."""
        stream = self._stream
        if stream is None or stream.block is None:
            return {"stale": True}
        was_done = stream.done
        if stream.download(self.block_rows, sums, degrees) and not was_done:
            self.receive_sums(stream.incoming, stream.remote_degrees)
            stream.release()
        return {}

    def _sparse_path(self) -> bool:
        """The exact plaintext release (no DP noise, no per-row counts) is streamed, computed in
        row chunks and sent sparse where smaller (:mod:`fedgl.algorithms.fedgcn.sparse_sums`);
        otherwise the release is drawn once (:meth:`_release`)."""
        cfg = self.config
        return cfg.dp_epsilon is None and cfg.min_contributors == 1 and \
            int(getattr(cfg, "min_partial_nodes", 1)) == 1 and \
            not getattr(cfg, "own_scoring_only", False)

    def _num_requested(self) -> int:
        return len(self._touched()) if self.neighbour_rows else self._own_rows()

    def _sums_of(self, x: Tensor, touched: Tensor) -> Tensor:
        """``S_k[i] = Σ_{j ∈ V_k ∩ Ñ(i)} d̃_j^{-1/2} x_j`` for every touched row i."""
        d = self.data
        scaled = x * self.deg_tilde.to(x.dtype).pow(-0.5).unsqueeze(1)
        sums = torch.zeros(len(touched), d.num_features, dtype=x.dtype)
        sums[:d.num_nodes] = scaled  # self-loop term of own nodes
        # Column (j -> i) with i owned: own node i contributes its scaled features to row j.
        j, i = d.edge_index
        sums.index_add_(0, self._row_of(j, touched), scaled[d.global_to_local(i)])
        return sums

    def _release(self) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """(touched ids, exact partial sums, released sums, own-node counts per row or None).

        The released sums are the exact ones, or with DP the sums of clipped features plus
        Gaussian noise. The noise comes from a secret seed drawn once per input (this data and
        these DP settings) and kept in the party's input record
        (:mod:`fedgl.privacy.inputs`): a restarted protocol, and with a state folder a
        restarted client or a new run over the same data, resends the same release (its
        privacy spent once, within ``dp_budget``), and nothing feature-sized is kept."""
        cfg, d = self.config, self.data
        self._count_release()
        touched = self._full_touched()
        exact = self._sums_of(d.x, touched)
        released = exact
        if cfg.dp_epsilon is not None:
            mech = GaussianMechanism(cfg.dp_epsilon, cfg.dp_delta, cfg.dp_clip)
            if self._dp_seed is None:
                draw = self.input_record().noise(
                    self.pretrain_input(), feature_digest(d), mech.epsilon, mech.delta,
                    mech.clip, getattr(cfg, "dp_budget", None), f"client {d.client_id}")
                self._dp_seed, self._dp_release = draw.seed, draw.release
                # counted (and persisted) before any message carrying it can leave
                record_release(cfg, d.client_id, self.seed, self._dp_release, mech)
            released = mech.add_noise(self._sums_of(clip_rows(d.x, cfg.dp_clip), touched),
                                      np.random.default_rng(self._dp_seed))
        counts = None
        least = int(getattr(cfg, "min_partial_nodes", 1))
        # scoring after training (a release over changed data) for its own nodes only
        own_only = bool(getattr(cfg, "own_scoring_only", False)) and self._release_number > 1
        if cfg.min_contributors > 1 or least > 1 or own_only:
            counts = torch.zeros(len(touched), dtype=torch.long)
            counts[:d.num_nodes] = 1
            counts.index_add_(0, self._row_of(d.edge_index[0], touched),
                              torch.ones(d.edge_index.size(1), dtype=torch.long))
        if least > 1 or own_only:
            # this client's own rules, whatever the server does: a partial sum for another
            # organisation's node that aggregates fewer than `least` own nodes (with own_only:
            # any) is sent as zeros and counted as none, so no such row carries one of its
            # customers alone (or at all)
            withheld = torch.ones(len(touched), dtype=torch.bool) if own_only else counts < least
            withheld[:d.num_nodes] = False   # its own nodes' rows come back to itself
            released = released.clone()
            released[withheld] = 0
            counts = counts.clone()
            counts[withheld] = 0
        if cfg.min_contributors == 1:
            counts = None
        sel = self._restrict
        if sel is not None:  # a restricted exchange: the rows that changed only
            touched, exact, released = touched[sel], exact[sel], released[sel]
            counts = counts[sel] if counts is not None else None
        return touched, exact, released, counts

    def _count_release(self) -> None:
        """Before any pre-training value leaves: this release counted in the party's record
        against its data set, by content (the same data again is free; changed data, nodes
        that arrived after training, is one more), refused beyond its ``pretrain_releases``
        (:meth:`fedgl.privacy.inputs.InputRecord.pretrain_release`)."""
        if self._release_counted:
            return
        self._release_number = self.input_record().pretrain_release(
            digest("pretrain-data", self.input_data_digest()), str(self.config.dataset),
            getattr(self.config, "pretrain_releases", None), f"client {self.data.client_id}")
        self._release_counted = True

    def pretrain_input(self) -> str:
        """The name of this client's pre-training release (:mod:`fedgl.privacy.inputs`): its
        data and, with DP, the settings of the noise. The values depend on nothing else, so no
        label, session, hop count or plan gives the same values another name."""
        cfg = self.config
        dp = (None if cfg.dp_epsilon is None
              else (float(cfg.dp_epsilon), float(cfg.dp_delta), float(cfg.dp_clip)))
        return digest("pretrain", self.input_data_digest(), dp)

    def _row_of(self, ids: Tensor, touched: Tensor) -> Tensor:
        """Row of each id in ``touched`` (own nodes sorted, then remote neighbours sorted)."""
        n_own = self.data.num_nodes
        remote = touched[n_own:]
        own = self.data.owns(ids)
        rows = torch.empty_like(ids)
        rows[own] = self.data.global_to_local(ids[own])
        rows[~own] = n_own + torch.searchsorted(remote, ids[~own])
        return rows

    @handles("fedgcn.receive_sums", phases=("pretrain",), optional=("degrees", "use_own"),
             needs=PLAINTEXT_SUMS,
             schema={"sums": SUMS, "degrees": Opt(DEGREES), "use_own": Opt(FLAGS)})
    def receive_sums(self, sums: Tensor | SparseRows, degrees: Tensor | None = None,
                     use_own: Tensor | None = None) -> None:
        """Step 3: the server's full sums for the requested rows (and remote degrees, 2-hop).

        With ``use_own`` (min-contributors), ``sums`` holds only the rows not flagged; flagged
        rows get this client's own partial sum (their remote part is dropped)."""
        if use_own is not None and bool(use_own.any()):
            full = self._release()[1][:len(use_own)].clone()
            if not bool(use_own.all()):
                full[~use_own] = sums.to(full.dtype)
            sums = full
        sums = as_dense(sums)
        if self._restrict is not None:
            sums, degrees = self._merged(sums, degrees)
        self._check_bound(sums, degrees)  # before anything of this client changes
        self._keep_exchange(sums, degrees)
        self.received_sums = sums
        self._consumed = False
        self.remote_deg_tilde = self._known_degrees(degrees)
        self._inputs = self._train_cache = self._sampled = None
        self.protocol_state = "ready"

    def _known_degrees(self, degrees: Tensor | None) -> Tensor | None:
        """Remote degrees as received; a degree the server could not give (0: the node's owner
        left the exchange, e.g. refused or dropped) becomes the degree this client sees, its
        own edges to the node plus the self-loop, instead of dividing by zero."""
        if degrees is None or not bool((degrees < 1).any()):
            return degrees
        remote = self._touched()[self.data.num_nodes:][:len(degrees)]
        j = self.data.edge_index[0]
        j = j[~self.data.owns(j)]
        held = torch.ones(len(remote), dtype=degrees.dtype)
        held.index_add_(0, torch.searchsorted(remote, j), torch.ones_like(j, dtype=degrees.dtype))
        return torch.where(degrees < 1, held, degrees)

    def _check_bound(self, sums: Tensor, degrees: Tensor | None) -> None:
        """With ``feature_bound``: every received full sum must lie within what the bound
        allows for its row's degree (:mod:`~fedgl.algorithms.fedgcn.bounds`). This is the
        check of the masked and HE modes, where the server never sees one client's values."""
        if self.feature_bound is None:
            return
        deg = self.deg_tilde if degrees is None else torch.cat([self.deg_tilde, degrees])
        deg = deg[:sums.size(0)].numpy()
        row = first_excess(sums, full_sum_limits(deg, self.feature_bound,
                                                 noise_sigma(self.config)))
        if row is not None:
            node = int(self._touched()[row])
            raise ClientMisbehaved(
                f"client {self.data.client_id} received a pre-training sum beyond the public "
                f"feature bound (row of node {node}): some client sent out-of-bound values; "
                "the run stops")

    # ------------------------------------------------------------------ training, in order
    @handles("fedavg.fit", phases=("train",), optional=("round", "evaluate", "fuse_counts"),
             states=("ready",), rides={"evaluate": "fedavg.evaluate"}, schema={
                 "weights": MODEL, "local_steps": Int(1, MAX_LOCAL_STEPS), "round": Int(0),
                 "evaluate": Int(1, 1), "fuse_counts": Int(1, 1)})
    def fit(self, weights: State, local_steps: int, round: int = 1,
            fuse_counts: int = 0) -> dict:
        """FedAvg's local training (:meth:`GNNClient.fit`), accepted only once the
        pre-training sums it trains on have arrived (state ``ready``). With secure models the
        update is named by the global model received (one aggregate per update).
        ``fuse_counts=1``: the evaluation counts this client holds for ``weights`` (it was
        just asked to score them) join the update in the round's one secure model sum
        (:meth:`SecureModelParty.fuse_counts`)."""
        self._fit_round = round  # an encrypted update is signed for its round
        self._fuse_with = None
        if self.secure_models:
            self.bind_model_input(weights)
        if fuse_counts:
            self.fuse_counts(weights)
        return super().fit(weights, local_steps, round)

    @classmethod
    def fit_many(cls, clients: list[GNNClient], weights: State, local_steps: int,
                 round: int = 1, fuse_counts: int = 0, *, cache: dict | None = None
                 ) -> list[dict] | None:
        """:meth:`GNNClient.fit_many`; a fit whose update carries counts runs client by
        client (:meth:`fit`)."""
        if fuse_counts:
            return None
        return super().fit_many(clients, weights, local_steps, round, cache=cache)

    @handles("fedavg.evaluate", phases=("train", "eval"), states=("ready",),
             schema={"weights": MODEL})
    def evaluate(self, weights: State) -> dict:
        """FedAvg's evaluation (:meth:`GNNClient.evaluate`), in state ``ready`` only. Under a
        secure-sum mode the counts stay here for the server's secure sum (the reply carries
        their number only: :meth:`SecureModelParty.hold_counts`)."""
        out = super().evaluate(weights)
        if self.holds_counts():
            return self.hold_counts(evaluation_key(weights), out)
        return out

    @classmethod
    def evaluate_many(cls, clients: list[GNNClient], weights: State, *,
                      cache: dict | None = None) -> list[dict] | None:
        """:meth:`GNNClient.evaluate_many`, each client's counts held as :meth:`evaluate`
        holds them under a secure-sum mode."""
        out = super().evaluate_many(clients, weights, cache=cache)
        if out is None or not all(c.holds_counts() for c in clients):
            return out
        key = evaluation_key(weights)
        return [c.hold_counts(key, o) for c, o in zip(clients, out, strict=True)]

    # ------------------------------------------------------------------ secure pre-training
    @handles("fedgcn.privacy_hello", phases=("pretrain",), needs=KEY_EXCHANGE,
             schema={"session": SESSION, "announce": Bool()})
    def privacy_hello(self, session: bytes, announce: bool) -> dict:
        """Start a protocol session: signed ephemeral keys (:mod:`fedgl.privacy.secagg`) and,
        when the sums are to be sent securely, what the server needs to plan the rows (ids,
        counts, degrees), but no values. With packed HE also ``range_exp``: a power-of-two bound
        on |released sums|."""
        self._session, self._plan, self._he_own = bytes(session), None, {}
        out: dict = {"adv": self._agg().advertise(session, PRETRAIN, self.pretrain_input())}
        if announce:
            out.update(ids=self._touched(), num_requested=self._num_requested())
            if self.hops >= 2 or self.feature_bound is not None:
                out["degrees"] = self._own_degrees()
            if getattr(self.config, "adjacency_check", "node") == "edge":
                out["cross_edges"] = cross_edges(self.data)
            if self.config.dp_epsilon is not None:
                self._release()
                out["dp_release"] = self._dp_release
            if self.config.min_contributors > 1:
                out["counts"] = self._release()[3]
            if self._he_params is not None and self._he_params.pack > 1:
                released = self._release()[2]
                top = float(released.abs().max()) if released.numel() else 0.0
                out["range_exp"] = min(max(math.ceil(math.log2(top)), -30), 60) if top > 0 else -30
        return out

    def _stale(self, session: bytes) -> bool:
        return self._session != bytes(session) or self._agg().current(session) is None

    @handles("fedgcn.he_share_keys", phases=("pretrain",), schema={"session": SESSION},
             needs=HE_KEYS)
    def he_share_keys(self, session: bytes) -> dict:
        """Key holder only: the public context for the server and the secret context sealed to
        every other client of the checked directory (the holder keeps an existing key)."""
        if self._stale(session):
            return {"stale": True}
        if self._he is None:
            self._he = HEClientContext.generate(self._he_params)
        secret, me = self._he.secret_bytes(), self.data.client_id
        peers = sorted(self._agg().current(session).directory)
        return {"public_context": self._he.public_bytes(), "key_id": self._he.key_id,
                "sealed": {k: self._agg().seal(session, k, secret) for k in peers if k != me}}

    @handles("fedgcn.he_install", phases=("pretrain",), needs=HE_KEYS,
             schema={"session": SESSION, "received": RECEIVED, "sealed": Bytes(1 << 30)})
    def he_install(self, session: bytes, received: dict, sealed: bytes) -> dict:
        """Confirm keys, then open the secret context that the key holder (authenticated by its
        roster identity) sealed to this client."""
        if self._stale(session):
            return {"stale": True}
        self._agg().accept(session, received["confirm"], received.get("shares"))
        secret = self._agg().open(session, self.config.he_key_holder, sealed)
        self._he = HEClientContext.from_secret_bytes(secret, self._he_params)
        return {}

    @handles("fedgcn.secure_upload", phases=("pretrain",), optional=("received",),
             needs=SECURE_SUMS,
             schema={"session": SESSION, "plan": PLAN, "received": Opt(RECEIVED)})
    def secure_upload(self, session: bytes, plan: dict, received: dict | None = None) -> dict:
        """Send the released rows of this client's blocks: one masked fixed-point vector
        (mask/robust, :class:`~fedgl.privacy.secagg.SecAggClient`), or per block a list of CKKS
        ciphertexts (HE). ``plan`` lists the blocks: sizes, row positions, co-members (masks)
        or fixed-point bits (packed HE); ``received``: peers' key confirmations (and shares).
        Either way the input enters one aggregate (:mod:`fedgl.privacy.inputs`): the plan is
        recorded before a masked value or a ciphertext leaves, and another plan for the same
        input is refused."""
        if self._stale(session):
            return {"stale": True}
        values = self._release()[2].double().numpy()
        he = self.config.secure_sum == "he"
        self._check_plan(plan, len(values), he)
        self._plan, self._he_own = plan, {}
        rows = plan["rows"].numpy()
        agg, d = self._agg(), values.shape[1]
        segments = [(int(n) * d, [int(p) for p in ps]) for n, ps in zip(
            plan["block_sizes"].tolist(), _split(plan["peers"], plan["peer_counts"]),
            strict=True)]
        if not he:
            agg.accept(session, received["confirm"], received.get("shares"))
            return {"masked": agg.mask(session, values[rows], segments, selection=rows)}
        agg.enter(session, segments, rows)  # one aggregate per input, before a ciphertext leaves
        out, sigs = [], []
        for b, block_rows in enumerate(_split(plan["rows"], plan["block_sizes"])):
            block = values[block_rows]
            if self._he_params.pack == 1:
                chunks = self._he.encrypt_real(block)
            else:
                chunks = self._he.encrypt_packed(block, int(plan["frac_bits"][b]))
            view = self._block_view(session, plan, b, block_rows, values.shape[1])
            out.append(chunks)
            sigs.append(sign_contribution(self._agg().identity, self.data.client_id, view, chunks))
            if bool(plan["receive"][b]):
                self._he_own[b] = (view, chunks)
        return {"blocks": out, "sigs": sigs}

    def _block_view(self, session: bytes, plan: dict, b: int, block_rows: np.ndarray,
                    d: int) -> BlockView:
        """What this client signs for (and checks the sum of) its ``b``-th HE block: the
        session, the block id, its members, its rows as global ids, its encoding."""
        peers = _split(plan["peers"], plan["peer_counts"])[b]
        frac = int(plan["frac_bits"][b]) if self._he_params.pack > 1 else -1
        return BlockView(bytes(session), self._agg().current(session).dir_hash,
                         int(plan["block_ids"][b]),
                         tuple(sorted([*(int(p) for p in peers), self.data.client_id])),
                         rows_digest(self._touched()[torch.from_numpy(block_rows)].numpy()),
                         frac, len(block_rows) * d)

    def _check_plan(self, plan: dict, num_rows: int, he: bool = False) -> None:
        """Before anything is revealed: the plan's rows are this client's own and each listed
        once (a row listed twice lets the server solve for it), its blocks cover them, and
        every block has a co-member to mask with. HE: the co-members are listed too (each
        block's signed member set), distinct, in this session's directory, and the block ids
        distinct."""
        rows, sizes = plan["rows"], plan["block_sizes"]
        why = None
        if he and not all(f in plan for f in ("peers", "peer_counts", "receive")):
            why = "lacks the co-members or the receive flags of its blocks"
        elif he and (len(plan["receive"]) != len(sizes) or (
                self._he_params.pack > 1 and ("frac_bits" not in plan
                                              or len(plan["frac_bits"]) != len(sizes)))):
            why = "has per-block fields that do not match its blocks"
        elif he and torch.unique(plan["block_ids"]).numel() != len(plan["block_ids"]):
            why = "lists a block id twice"
        elif rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= num_rows):
            why = "lists rows this client does not hold"
        elif torch.unique(rows).numel() != rows.numel():
            why = "lists a row more than once"
        elif bool((sizes < 0).any()) or int(sizes.sum()) != rows.numel() or \
                len(plan["block_ids"]) != len(sizes):
            why = "has blocks that do not cover its rows"
        elif "peers" in plan and (len(plan["peer_counts"]) != len(sizes)
                                  or int(plan["peer_counts"].sum()) != len(plan["peers"])
                                  or bool((plan["peer_counts"][sizes > 0] < 1).any())):
            why = "has a block without co-members"
        elif he:
            me = self.data.client_id
            known = set(self._agg().current(self._session).directory)
            for peers in _split(plan["peers"], plan["peer_counts"]):
                ps = [int(p) for p in peers]
                if len(set(ps)) != len(ps) or me in ps or not set(ps) <= known:
                    why = ("has a block whose co-members repeat, include this client, or are "
                           "not in this session's directory")
                    break
        if why is not None:
            raise AttackDetected(f"the secure upload plan {why}: it could reveal this client's "
                                 "rows; the run stops")

    @handles("fedgcn.secure_receive", phases=("pretrain",), optional=("sums", "blocks", "degrees"),
             needs=SECURE_SUMS,
             schema={"session": SESSION, "sums": Opt(SUMS), "degrees": Opt(DEGREES),
                     "blocks": Opt(Seq(Seq(CONTRIBUTION)))})
    def secure_receive(self, session: bytes, sums: Tensor | None = None,
                       blocks: list | None = None, degrees: Tensor | None = None) -> dict:
        """The aggregated rows: plaintext sums (mask; the server learns sums, not parts) or,
        per block this client receives (HE), the other members' signed ciphertexts, checked
        and added to its own here, then decrypted (:mod:`fedgl.privacy.he_signed`)."""
        if self._stale(session) or self._plan is None:
            return {"stale": True}
        plan = self._plan
        use_own = plan["use_own"]
        he = self.config.secure_sum == "he"
        if (blocks is not None) != he:
            raise AttackDetected("the secure sums arrived in the other mode's form ("
                                 f"{'ciphertexts' if blocks is not None else 'plaintext'} in "
                                 f"secure-sum mode {self.config.secure_sum}); the run stops")
        if not he:
            self.receive_sums(sums, degrees, use_own)
            return {}
        exact = self._release()[1]
        got = exact[:len(use_own)].clone()  # rows flagged use_own keep the own partial sum
        filled = use_own.clone()
        d = exact.size(1)
        block_rows = _split(plan["rows"], plan["block_sizes"])
        mine = sorted(self._he_own)  # the blocks flagged for receiving, in plan order
        if len(blocks) != len(mine):
            raise AttackDetected(f"the server sent {len(blocks)} HE sums for the {len(mine)} "
                                 "blocks this client receives; nothing decrypted, the run stops")
        roster, me = self._agg().roster, self.data.client_id
        parts = [check_contributions(roster, me, *self._he_own[b], received)
                 for b, received in zip(mine, blocks, strict=True)]  # all, before decrypting
        for b, part in zip(mine, parts, strict=True):
            rows, n = block_rows[b], len(block_rows[b]) * d
            chunks = self._he.add(part)
            if self._he_params.pack == 1:
                flat = self._he.decrypt_real(chunks, n)
            else:
                flat = self._he.decrypt_packed(chunks, n, int(plan["frac_bits"][b]))
            got[torch.from_numpy(rows)] = torch.from_numpy(flat.reshape(len(rows), d)).to(got.dtype)
            filled[torch.from_numpy(rows)] = True
        if not bool(filled.all()):
            raise RuntimeError("secure pre-training: some requested rows never arrived")
        self.receive_sums(got, degrees)
        return {}

    # ------------------------------------------------------------------ encrypted models
    def encode_weights(self, weights: State, num_train: int):
        """With ``encrypt_models``: ``Enc(c · w)`` with c = 1 (uniform) or the number of
        training nodes (weighted), and c in clear for the server's divisor. With secure models
        the weights stay here until the server's secure sum asks for them."""
        if self.secure_models or self.policy.secure_models:
            return self.hold_model(weights, num_train, self.config.aggregation)
        if not self.config.encrypt_models:
            return weights
        coeff = float(num_train) if self.config.aggregation == "weighted" else 1.0
        flat = torch.cat([v.detach().reshape(-1).double() for v in weights.values()]) * coeff
        he = self._require_he()
        chunks = tuple(he.encrypt_real(flat.numpy()))
        me, r = self.data.client_id, int(self._fit_round)
        return EncryptedModel(chunks, coeff, me, r,
                              sign_model(self._agg().identity, me, he.key_id, r, coeff, chunks))

    def decode_weights(self, weights):
        if not isinstance(weights, EncryptedModel | EncryptedModelSum):
            return weights
        if not self.config.encrypt_models:
            # this client's key decrypts only what its protocol says: with plaintext models a
            # ciphertext posing as the global model would make the client a decryption oracle
            raise AttackDetected("the server sent an encrypted model but this run's models are "
                                 "not encrypted (a decryption-oracle attempt); the run stops")
        if isinstance(weights, EncryptedModel):
            raise AttackDetected("the server sent one encrypted model, not the signed updates of "
                                 "a round (a single client's model could be decrypted); the run "
                                 "stops")
        shapes = self.model.state_dict()
        total = sum(v.numel() for v in shapes.values())
        he = self._require_he()
        st = self._agg().current(self._session) if self._session is not None else None
        if st is None:
            raise AttackDetected("an encrypted model arrived outside a key session; the run stops")
        check_model_sum(self._agg().roster, he.key_id, sorted(st.directory), weights.parts,
                        -(-total // he.params.slots))
        coeff = float(sum(p.weight for p in weights.parts))
        if coeff == 0:
            raise AttackDetected("the encrypted model's updates all have weight 0; the run stops")
        flat = he.decrypt_real(he.add([p.chunks for p in weights.parts]), total) / coeff
        out, offset = {}, 0
        for key, ref in shapes.items():
            n = ref.numel()
            out[key] = torch.from_numpy(np.ascontiguousarray(flat[offset:offset + n])).to(
                ref.dtype).reshape(ref.shape)
            offset += n
        return out

    def _require_he(self) -> HEClientContext:
        if self._he is None:
            raise RuntimeError("encrypted model received before the HE key was installed")
        return self._he

    # ------------------------------------------------------------------ model inputs
    def model_inputs(self) -> ModelInputs:
        d = self.data
        n_own = d.num_nodes
        if self.hops == 0:
            return local_subgraph_inputs(d, d.x)
        if not self.neighbour_rows:
            # Eq. (33): layer 1 on the received (ÂX) rows, later layers on the local graph A_k.
            agg = self._aggregates(self.deg_tilde)
            return local_subgraph_inputs(d, agg, pre_aggregated=True)
        # Eq. (34): rows V_k ∪ N(V_k); later layers on the known edges with the true degrees
        # (1-hop paper-code: with the degrees of the held subgraph, fedgcn/one_hop.py).
        row_ids = self._touched()
        deg = torch.cat([self.deg_tilde, self.remote_deg_tilde])
        agg = self._aggregates(deg)
        # Known edges among the rows (both directions), without duplicates.
        j, i = d.edge_index
        src = torch.cat([j, i])
        dst = torch.cat([i, j])
        keep = _isin_sorted_rows(src, row_ids, n_own) & _isin_sorted_rows(dst, row_ids, n_own)
        rows = self._row_of(src[keep], row_ids), self._row_of(dst[keep], row_ids)
        key = torch.unique(rows[1] * len(row_ids) + rows[0])
        ei = torch.stack([key % len(row_ids), key // len(row_ids)])
        if self.hops == 1:
            deg = held_subgraph_degrees(ei, len(row_ids))
        ei, w = gcn_edge_weights(ei, len(row_ids), deg)
        return ModelInputs(agg, ei, w, torch.arange(n_own), pre_aggregated=True,
                           node_norm=deg.to(torch.float32).pow(-0.5))

    def _aggregates(self, deg: Tensor) -> Tensor:
        """Layer 1's exact aggregates ``(ÂX)_i = d̃_i^{-1/2} S[i]`` of the received rows.

        Mini-batch training builds its sampled inputs once per received exchange and never
        reads the raw sums again, so there the rows are scaled in place and the raw sums given
        up: a 2-hop client on a products-sized graph would otherwise hold its
        ``|V_k ∪ N(V_k)| × d`` rows twice."""
        if self.received_sums is None:
            why = ("its received sums were consumed by the mini-batch inputs" if self._consumed
                   else "before the pre-training round")
            raise RuntimeError(f"FedGCN client with hops >= 1 used {why}")
        scale = deg.to(self.received_sums.dtype).pow(-0.5).unsqueeze(1)
        if not self.minibatch:
            return self.received_sums * scale
        agg = self.received_sums.mul_(scale)
        self.received_sums, self._consumed = None, True
        return agg

    def _lean_sampled_inputs(self):
        """Mini-batch inputs built straight into a CSR, never as an edge list with weights.

        0/1-hop (own nodes, own-own edges), in edge chunks: the same rows, edges and local
        degrees as :func:`~fedgl.algorithms.base.local_subgraph_inputs` (a products-sized single
        party fits). 2-hop and 1-hop paper-code (rows ``V_k ∪ N(V_k)``):
        :meth:`_lean_neighbour_row_inputs`."""
        from fedgl.algorithms.sampled import SampledInputs, index_dtype, own_subgraph_keys
        from fedgl.data.sampling import CSRGraph

        if self.neighbour_rows:
            return self._lean_neighbour_row_inputs()
        d = self.data
        n = d.num_nodes
        csr = CSRGraph.from_keys(own_subgraph_keys(d.node_ids, d.edge_index), n, index_dtype(n))
        local_deg = (csr.indptr[1:] - csr.indptr[:-1]).long() + 1
        norm = local_deg.to(torch.float32).pow(-0.5)
        if self.hops == 0:
            x = d.x
        else:
            x = self._aggregates(self.deg_tilde)
        train = self._masks["train"].nonzero().flatten()
        own = torch.arange(n)
        return SampledInputs(x.to(self.device), csr,
                             norm.to(self.device) if self.config.model == "gcn" else None,
                             own, own[train.cpu()], self._y[train], self.hops == 1)


    def _lean_neighbour_row_inputs(self):
        """The mini-batch inputs of :meth:`model_inputs`' rows ``V_k ∪ N(V_k)`` (2-hop, 1-hop
        paper-code) without its weighted edge list: every known edge ``(j, i)`` (i own) gives
        the keys ``i·n + j`` and ``j·n + i`` (destination row · n + source row, n rows), sorted
        in place and deduplicated, and the CSR is read off the keys. The same rows, CSR and
        normalisation as the edge-list path (true degrees, or with 1-hop paper-code the held
        subgraph's ``1 + in-degree``); about 16 bytes per known edge and direction at the
        peak instead of several edge-sized lists."""
        from fedgl.algorithms.sampled import SampledInputs, index_dtype
        from fedgl.data.sampling import CSRGraph

        d = self.data
        row_ids = self._touched()
        n = max(len(row_ids), 1)
        deg = torch.cat([self.deg_tilde, self.remote_deg_tilde])
        x = self._aggregates(deg)
        j, i = d.edge_index
        rj, ri = self._row_of(j, row_ids), d.global_to_local(i)
        keys = torch.cat([ri * n + rj, rj * n + ri])
        del rj, ri
        keys.numpy().sort()
        if keys.numel() > 1:
            fresh = torch.ones(keys.numel(), dtype=torch.bool)
            torch.ne(keys[1:], keys[:-1], out=fresh[1:])
            keys = keys[fresh]
            del fresh
        if self.hops == 1:  # paper-code: the held subgraph's degrees (self-loops counted once)
            deg = torch.bincount(torch.div(keys, n, rounding_mode="floor"),
                                 minlength=len(row_ids)) + 1
        loops = torch.div(keys, n, rounding_mode="floor") == keys.remainder(n)
        if bool(loops.any()):
            keys = keys[~loops]
        del loops
        csr = CSRGraph.from_keys(keys, len(row_ids), index_dtype(len(row_ids)))
        train = self._masks["train"].nonzero().flatten()
        own = torch.arange(d.num_nodes)
        norm = deg.to(torch.float32).pow(-0.5)
        return SampledInputs(x.to(self.device), csr,
                             norm.to(self.device) if self.config.model == "gcn" else None,
                             own, own[train.cpu()], self._y[train], True)


def _split(flat: Tensor, sizes: Tensor) -> list[np.ndarray]:
    """Consecutive pieces of ``flat`` of the given sizes (as numpy arrays)."""
    return np.split(flat.numpy(), np.cumsum(sizes.numpy())[:-1]) if len(sizes) else []


def _isin_sorted_rows(ids: Tensor, row_ids: Tensor, n_own: int) -> Tensor:
    """Membership of ids in ``row_ids`` = sorted own ids ++ sorted remote ids."""
    out = torch.zeros_like(ids, dtype=torch.bool)
    for part in (row_ids[:n_own], row_ids[n_own:]):
        if part.numel():
            pos = torch.searchsorted(part, ids).clamp(max=part.numel() - 1)
            out |= part[pos] == ids
    return out
