"""FedGCN server: sums the clients' partial neighbour aggregates once, then runs FedAvg.

The server never holds features or edges: it learns which global ids each client touches, the
partial sums, and (2-hop) the degrees of each client's own nodes, and returns to every client
only the rows it asked for (Algorithm 1, "Server Operation").

Privacy (issue 4, docs/threat-model.md): with ``secure_sum: mask`` it sees only masked rows (and
learns the sums), with ``he`` only ciphertexts and a public CKKS context (it learns nothing about
values; it forwards each block's signed ciphertexts to the block's receivers, which check and add
them: :mod:`fedgl.privacy.he_signed`); ``min_contributors`` makes it drop, per receiving client,
rows whose remote part comes from too few nodes; ``encrypt_models`` makes its FedAvg strategy
send the round's signed encrypted updates, which clients check and add.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

from fedgl import progress
from fedgl.algorithms.base import FedAvgServer
from fedgl.algorithms.fedgcn.bounds import (
    UploadBounds,
    first_excess,
    full_sum_limits,
    noise_sigma,
    update_norm,
    value_bound,
)
from fedgl.algorithms.fedgcn.checks import ClientMisbehaved, check_announcements
from fedgl.algorithms.fedgcn.one_hop import exchanges_neighbour_rows
from fedgl.algorithms.fedgcn.sparse_sums import DEFAULT_CHUNK_ROWS
from fedgl.algorithms.fedgcn.stream import DEFAULT_BLOCK_ROWS, ServerBlocks
from fedgl.algorithms.fedgcn.update import UpdateServer
from fedgl.errors import ConfigError, RunAborted
from fedgl.federation.aggregate import EncryptedFedAvg
from fedgl.federation.messages import (
    SparseRows,
    as_dense,
    compact_rows,
    payload_dense_nbytes,
    payload_nbytes,
)
from fedgl.privacy.he import EncryptedModelSum, HEParams, HEServerContext
from fedgl.privacy.secagg_server import SecureSumServer
from fedgl.privacy.secure_sum import RowPlan, plan_rows

PRETRAIN = "fedgcn/pretrain"  # the clients' secure-sum instance name (see client.py)


class FedGCNServer(UpdateServer, FedAvgServer):
    """FedAvg server with FedGCN's pre-training communication round (over changed data,
    restricted to the rows that changed: :mod:`.update`)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.privacy_stats: dict = {}  # what the server knows about the protocol it ran
        self._in_pretrain = False
        self._restart_pending = False
        self._key_id: bytes | None = None
        self._last_frac: dict | None = None
        self.he_context: HEServerContext | None = None  # public CKKS context (no key)
        self.pretrain_stats: dict = {}  # plaintext round: real and dense-equivalent bytes
        self.chunk_rows = int(getattr(self.config, "pretrain_chunk_rows", DEFAULT_CHUNK_ROWS))
        self.block_rows = int(getattr(self.config, "pretrain_block_rows", DEFAULT_BLOCK_ROWS))
        # the secure-sum mode: the config's secure_sum, or "robust" set by the driver
        self.secure_mode: str = self.config.secure_sum
        self.secagg = SecureSumServer(self.secure_mode if self.secure_mode in ("mask", "robust")
                                      else "mask", getattr(self.config, "secagg_threshold", 0))
        self.feature_bound = value_bound(self.config)  # public bound on feature values, or None
        self.update_bound = getattr(self.config, "update_bound", None)
        self.edge_check = getattr(self.config, "adjacency_check", "node") == "edge"
        self._num_own: dict[int, int] = {}  # own node counts announced (bounds num_train)

    def pooled_counts(self, clients: list[int], length: int) -> dict[str, float]:
        """The pooled accuracies from one secure sum of the clients' held evaluation counts
        (:func:`fedgl.privacy.secure_models.pooled_counts`), under a secure-sum mode without
        secure models (with them, the strategy's own sum does it)."""
        from fedgl.privacy.secure_models import EVAL_INSTANCE, pooled_counts

        self.evaluations = getattr(self, "evaluations", 0) + 1
        return pooled_counts(lambda m, a, c: self._eval_call(m, a, c), clients,
                             f"{EVAL_INSTANCE}{self.evaluations}", length, self.secagg)

    def _eval_call(self, method: str, args: dict, clients: list[int]) -> dict | None:
        """One secure-sum step of an evaluation sum (phase ``eval``); None when a client
        restarted (its reply says stale)."""
        out = self.runtime.call(method, args, phase="eval", clients=clients)
        return None if any(isinstance(r, dict) and r.get("stale") for r in out.values()) else out

    # ------------------------------------------------------------------ client checks
    def _check(self, msgs: dict) -> None:
        """The announcement checks (:mod:`~fedgl.algorithms.fedgcn.checks`), over the clients
        taking part (every client not refused)."""
        if self._full_announced is not None:
            self._check_restricted(msgs)
            return
        check_announcements(msgs, not self.refused and len(msgs) == self.config.clients,
                            edges=self.edge_check)
        for k, m in msgs.items():
            self._num_own[k] = len(m["degrees"]) if "degrees" in m else int(m["num_requested"])

    def _refuse(self, k: int, why: str) -> None:
        """Client k sent a value no honest client sends: recorded (one line); with
        ``on_client_failure: drop`` the client is left out of the rest of the run, otherwise
        the run stops with that line."""
        line = f"client {k} sent {why}"
        self.refusal_log.append(line)
        if self.config.on_client_failure != "drop":
            raise ClientMisbehaved(line + "; the run stops")
        self.refused[k] = line
        if not self.active_clients():
            raise ClientMisbehaved(line + "; no client is left, the run stops")

    def _upload_bounds(self, announced: dict) -> UploadBounds | None:
        if self.feature_bound is None:
            return None
        return UploadBounds(announced, self.feature_bound, noise_sigma(self.config),
                            edges=self.edge_check)

    def aggregate_fits(self, results: dict[int, dict]) -> dict:
        """FedAvg over the updates that pass the server's checks: a weighted client's
        ``num_train`` at most the own nodes it announced, and with ``update_bound`` a finite
        update within that L2 distance of the global model. A refused update is left out
        (``drop``) or stops the run."""
        kept = {}
        for k, r in sorted(results.items()):
            why = None
            n_own = self._num_own.get(k)
            if not isinstance(r.get("num_train"), int | np.integer) or r["num_train"] < 0 or (
                    n_own is not None and r["num_train"] > n_own):
                why = (f"a training-node count of {r.get('num_train')!r} (it announced {n_own} "
                       "own nodes)")
            elif self.update_bound is not None and isinstance(r.get("weights"), dict):
                norm = update_norm(r["weights"], self.weights)
                if not norm <= self.update_bound:
                    why = (f"a model update of L2 norm {norm:.6g} beyond --update-bound "
                           f"{self.update_bound:g}")
            if why is None:
                kept[k] = r
            else:
                self._refuse(k, why)
        if not kept:  # every update of this round refused (drop): the global model stays
            return {"train_loss": float("nan")}
        return super().aggregate_fits(kept)

    # ------------------------------------------------------------------ plaintext round
    def pretrain(self) -> None:
        cfg = self.config
        secure = cfg.secure_sum != "none" or cfg.encrypt_models  # needs client keys
        plain = cfg.secure_sum == "none" and cfg.hops > 0
        if not (secure or plain):
            return
        with self.runtime.ledger.timer("pretrain"):
            if secure:
                self._secure_rounds()
            if plain:
                self._plain_round()

    def _secure_rounds(self) -> None:
        self.privacy_stats["restarts"] = self._with_restarts(self._secure_round,
                                                             "the secure pre-training round")

    def _with_restarts(self, attempt_once, what: str) -> int:
        """Run a pre-training protocol until one attempt completes (``attempt_once`` returns
        True); a client restarting meanwhile (:meth:`restore_client`) or answering ``stale``
        makes the attempt return False. Returns the number of restarts."""
        self._in_pretrain = True
        try:
            for attempt in range(len(self.runtime.client_ids) + 1):
                self._restart_pending = False
                if attempt_once():
                    return attempt
            raise RunAborted(f"{what} kept losing clients; giving up")
        finally:
            self._in_pretrain = False

    def restore_client(self, client_id: int) -> None:
        """A restarted client lost its keys: inside the secure round, restart that round (the
        runtime's re-sent call then answers 'stale'); otherwise re-run pre-training.

        With the robust secure sum a restarted client cannot rejoin: the others take part in
        one sum per release (a second one would let a server difference them), so the run
        stops with the fix (the ``drop`` policy, which the robust sum tolerates)."""
        if self.secure_mode == "robust" or getattr(self.config, "secure_models", False):
            raise RunAborted(f"client {client_id} restarted and lost its state, but the robust "
                             "secure sum (and secure model averaging) never sums the same input "
                             "twice; use --on-client-failure drop, which it tolerates")
        if self._in_pretrain:
            self._restart_pending = True
            return
        super().restore_client(client_id)

    def _plain_round(self) -> None:
        if self._chunked_path():
            self._streamed_round()
            return
        cfg = self.config
        while True:  # again without a client refused for out-of-bound values (drop policy)
            msgs = self.runtime.call("fedgcn.partial_sums", None, phase="pretrain",
                                     clients=self.active_clients())
            self._check(msgs)
            self._count_releases(msgs)
            bounds = self._upload_bounds(msgs)
            whys = {k: bounds.check(k, msgs[k]["ids"].numpy(), msgs[k]["sums"])
                    for k in sorted(msgs)} if bounds is not None else {}
            bad = [k for k, why in whys.items() if why is not None]
            for k in bad:
                self._refuse(k, whys[k])
            if not bad:
                break
        clients = sorted(msgs)
        compact = self._full_announced is not None  # a restricted exchange: sparse where smaller
        for k in clients:
            msgs[k]["sums"] = as_dense(msgs[k]["sums"])
        ids = torch.cat([msgs[k]["ids"] for k in clients])
        uniq, inverse = torch.unique(ids, return_inverse=True)
        total = torch.zeros(len(uniq), msgs[clients[0]]["sums"].size(1),
                            dtype=msgs[clients[0]]["sums"].dtype)
        total.index_add_(0, inverse, torch.cat([msgs[k]["sums"] for k in clients]))
        rows_of, offset = {}, 0
        for k in clients:
            rows_of[k] = inverse[offset:offset + len(msgs[k]["ids"])]
            offset += len(msgs[k]["ids"])
        plan = None
        if cfg.min_contributors > 1:
            plan = plan_rows({k: msgs[k]["ids"] for k in clients},
                             {k: msgs[k]["num_requested"] for k in clients},
                             {k: msgs[k]["counts"] for k in clients}, cfg.min_contributors,
                             skip_local=False)
            self.privacy_stats["suppressed_rows"] = plan.suppressed()
        degree = self._degrees(msgs, rows_of, len(uniq))
        replies = {}
        for k in clients:
            want = rows_of[k][:msgs[k]["num_requested"]]
            if plan is None:
                reply = {"sums": compact_rows(total[want]) if compact else total[want]}
            else:
                reply = {"sums": total[want[~plan.use_own[k]]], "use_own": plan.use_own[k]}
            if degree is not None:
                reply["degrees"] = degree[want[len(msgs[k]["degrees"]):]]
            replies[k] = reply
        self.runtime.call("fedgcn.receive_sums", replies, phase="pretrain", clients=clients)

    def _chunked_path(self) -> bool:
        """Without ``min_contributors`` the exchange is streamed in blocks, sparse where smaller
        (:mod:`~fedgl.algorithms.fedgcn.stream`)."""
        return self.config.min_contributors == 1 and self._full_announced is None

    def _streamed_round(self) -> None:
        """The streamed exchange; restarted from the announcement when a client restarts (its
        cursor is gone) or the set of answering clients changes mid-stream (a dropped client's
        earlier blocks are already in the sums)."""
        self._with_restarts(self._stream_once, "the pre-training exchange")

    def _stream_once(self) -> bool:
        announced = self.runtime.call("fedgcn.announce_rows", None, phase="pretrain",
                                      clients=self.active_clients())
        if self._restart_pending or not announced:
            return False
        self._check(announced)
        self._count_releases(announced)
        clients = sorted(announced)
        blocks = ServerBlocks(announced, self.block_rows,
                              send_degrees=exchanges_neighbour_rows(self.config))
        bounds = self._upload_bounds(announced)
        up_bytes = sum(payload_nbytes(m) for m in announced.values())
        up_dense = sum(payload_dense_nbytes(m) for m in announced.values())
        down_bytes = down_dense = sparse = 0
        for i in progress.track(range(blocks.num_blocks), "FedGCN pre-training blocks"):
            up = self.runtime.call("fedgcn.block_sums", None, phase="pretrain", clients=clients)
            if self._interrupted(up, clients):
                return False
            if bounds is not None and not self._within_bounds(bounds, blocks, i, up):
                return False  # (drop) again without the refused client
            for k in clients:
                up_bytes += payload_nbytes(up[k])
                up_dense += payload_dense_nbytes(up[k])
                sparse += isinstance(up[k]["sums"], SparseRows)
            uploads = {k: up[k]["sums"] for k in clients}
            del up  # the block's rows are now held once, by ``uploads``, which replies() empties
            replies = blocks.replies(i, uploads)
            for k in clients:
                down_bytes += payload_nbytes(replies[k])
                down_dense += payload_dense_nbytes(replies[k])
                sparse += isinstance(replies[k]["sums"], SparseRows)
            done = self.runtime.call("fedgcn.receive_block", replies, phase="pretrain",
                                     clients=clients)
            del replies
            if self._interrupted(done, clients):
                return False
        self.pretrain_stats = {
            "chunk_rows": self.chunk_rows, "block_rows": self.block_rows,
            "blocks": blocks.num_blocks,
            "bytes_up": up_bytes, "bytes_up_dense_equivalent": up_dense,
            "bytes_down": down_bytes, "bytes_down_dense_equivalent": down_dense,
            "sparse_messages": sparse,
        }
        return True

    def _within_bounds(self, bounds: UploadBounds, blocks: ServerBlocks, i: int,
                       up: dict) -> bool:
        """Every client's upload of block i within the public bound, before any is added."""
        ok = True
        for k in sorted(up):
            why = bounds.check(k, blocks.block_ids(k, i), up[k]["sums"])
            if why is not None:
                self._refuse(k, why)
                ok = False
        return ok

    def _interrupted(self, out: dict, clients: list[int]) -> bool:
        return (self._restart_pending or sorted(out) != clients
                or any(isinstance(r, dict) and r.get("stale") for r in out.values()))

    def result_extra(self) -> dict:
        """What the result records about this server's pre-training exchange (and the clients
        it refused for out-of-bound values)."""
        out = {"fedgcn_pretrain": dict(self.pretrain_stats)} if self.pretrain_stats else {}
        if self.refusal_log:
            out["client_refusals"] = list(self.refusal_log)
        return out

    def _count_releases(self, msgs: dict) -> None:
        """DP accounting: every distinct release a client announced (a restarted or resumed
        client draws fresh noise: a new release of the same features)."""
        seen = self.privacy_stats.setdefault("dp_releases", {})
        for k, m in msgs.items():
            rid = m.get("dp_release") if isinstance(m, dict) else None
            if rid is not None and rid not in seen.setdefault(str(k), []):
                seen[str(k)].append(rid)

    def _degrees(self, msgs: dict, rows_of: dict, n: int) -> torch.Tensor | None:
        if not exchanges_neighbour_rows(self.config):  # 2-hop, or 1-hop paper-code
            return None
        degree = torch.zeros(n, dtype=torch.long)
        for k in msgs:
            own = msgs[k]["degrees"]
            degree[rows_of[k][:len(own)]] = own
        return degree

    # ------------------------------------------------------------------ secure round
    def _call(self, method: str, args, clients: list[int]) -> dict | None:
        """A protocol step; None when it must restart (a client restarted or answered stale)."""
        out = self.runtime.call(method, args, phase="pretrain", clients=clients)
        refusals = [r["refused"] for r in out.values() if isinstance(r, dict) and "refused" in r]
        if refusals:
            self.privacy_stats.setdefault("refusals", []).extend(refusals)
        if self._restart_pending or any(isinstance(r, dict) and r.get("stale")
                                        for r in out.values()):
            return None
        return out

    def _secure_round(self) -> bool:
        """One attempt: signed keys, directory check and key confirmation, (HE) key
        distribution, (secure sums) plan, upload, unmask, reply. False when a client restarted
        mid-way, or (mask) dropped: the caller starts over with fresh keys (the mask mode's
        clients accept a new session only over the same clients; see docs/threat-model.md)."""
        cfg = self.config
        session = os.urandom(16)
        announce = cfg.secure_sum != "none" and cfg.hops > 0
        hello = self._call("fedgcn.privacy_hello", {"session": session, "announce": announce},
                           self.active_clients())
        if hello is None:
            return False
        alive = sorted(hello)
        self._count_releases(hello)
        directory = self.secagg.directory({k: hello[k]["adv"] for k in alive})
        keys = self._call("secagg.keys", {"session": session, "directory": directory}, alive)
        if keys is None or (self.secure_mode != "robust" and sorted(keys) != alive):
            return False
        relayed = self.secagg.relay(keys)
        u2 = sorted(keys)
        if (cfg.secure_sum == "he" or cfg.encrypt_models) and \
                not self._distribute_he_key(session, u2, relayed):
            return False
        if not announce:
            return True
        return self._secure_sums(session, u2, hello, directory, relayed)

    def _distribute_he_key(self, session: bytes, alive: list[int], relayed: dict) -> bool:
        cfg = self.config
        holder = cfg.he_key_holder
        if holder not in alive:
            raise RunAborted(f"the HE key holder (client {holder}) is gone; the key cannot be "
                             "distributed (choose another --he-key-holder)")
        out = self._call("fedgcn.he_share_keys", {holder: {"session": session}}, [holder])
        if out is None or holder not in out:
            return False
        reply = out[holder]
        if isinstance(self.weights, EncryptedModelSum) and reply["key_id"] != self._key_id:
            raise RunAborted(f"the HE key holder (client {holder}) restarted and its key is lost: "
                             "the encrypted global model cannot be decrypted any more")
        self._key_id = reply["key_id"]
        he = HEServerContext(reply["public_context"])
        self.he_context = he  # public: parameters only, no key (tests assert it cannot decrypt)
        others = [k for k in alive if k != holder]
        args = {k: {"session": session, "received": relayed[k], "sealed": reply["sealed"][k]}
                for k in others}
        if others and self._call("fedgcn.he_install", args, others) is None:
            return False
        if cfg.encrypt_models and not isinstance(self.strategy, EncryptedFedAvg):
            self.strategy = EncryptedFedAvg(self.strategy.weighting)
        return True

    def _secure_sums(self, session: bytes, alive: list[int], hello: dict, directory: dict,
                     relayed: dict) -> bool:
        cfg = self.config
        mask = self.secure_mode in ("mask", "robust")
        self._check({k: hello[k] for k in alive})
        counts = {k: hello[k]["counts"] for k in alive} if cfg.min_contributors > 1 else None
        plan = plan_rows({k: hello[k]["ids"] for k in alive},
                         {k: hello[k]["num_requested"] for k in alive}, counts,
                         cfg.min_contributors, skip_local=True)
        params = None if mask else HEParams.from_config(cfg)
        frac = self._frac_bits(plan, hello, params) if params is not None and params.pack > 1 \
            else None
        self._last_frac = {"min": min(frac), "max": max(frac)} if frac else None
        args = {}
        for k in alive:
            mine = plan.blocks_of(k)
            blocks = [plan.blocks[b] for b in mine]
            p = {"block_ids": torch.tensor(mine, dtype=torch.long),
                 "block_sizes": torch.tensor([len(b.rows) for b in blocks], dtype=torch.long),
                 "rows": _cat([b.positions[k] for b in blocks]),
                 "use_own": plan.use_own[k]}
            peers = [[m for m in b.members if m != k] for b in blocks]
            p.update(peers=torch.tensor([m for ms in peers for m in ms], dtype=torch.long),
                     peer_counts=torch.tensor([len(ms) for ms in peers], dtype=torch.long))
            if not mask:
                p["receive"] = torch.tensor([k in b.receivers for b in blocks], dtype=torch.bool)
                if frac is not None:
                    p["frac_bits"] = torch.tensor([frac[b] for b in mine], dtype=torch.long)
            args[k] = {"session": session, "plan": p}
            if mask:
                args[k]["received"] = relayed[k]
        up = self._call("fedgcn.secure_upload", args, alive)
        if up is None or (self.secure_mode != "robust" and sorted(up) != alive):
            return False  # a client dropped: masks would not cancel, counts would be wrong
        survivors = sorted(up)
        rows_of = plan.inverse
        degree = self._degrees({k: hello[k] for k in alive}, rows_of, len(plan.uniq))
        replies = {}
        if mask:
            total = self._unmask(session, plan, directory, alive, up)
            if total is None:
                return False
            self._check_masked_sums(total, plan, hello, alive)
            for k in survivors:
                want = rows_of[k][:plan.requested[k]]
                replies[k] = {"session": session, "sums": total[want[~plan.use_own[k]]]}
        else:
            # HE: no sum here. Each receiver gets the other members' signed ciphertexts and
            # adds them itself after checking them (fedgl/privacy/he_signed.py)
            index = {k: {b: i for i, b in enumerate(plan.blocks_of(k))} for k in alive}
            parts = [{k: {"client": k, "chunks": up[k]["blocks"][index[k][b]],
                          "sig": up[k]["sigs"][index[k][b]]} for k in blk.members}
                     for b, blk in enumerate(plan.blocks)]
            for k in alive:
                replies[k] = {"session": session, "blocks": [
                    [c for m, c in parts[b].items() if m != k]
                    for b in plan.blocks_of(k) if k in plan.blocks[b].receivers]}
            self.privacy_stats["ciphertexts_up"] = sum(len(c["chunks"]) for p in parts
                                                       for c in p.values())
            self.privacy_stats["ciphertexts_down"] = sum(
                len(c["chunks"]) for r in replies.values() for blk in r["blocks"] for c in blk)
        if degree is not None:
            for k in survivors:
                want = rows_of[k][:plan.requested[k]]
                replies[k]["degrees"] = degree[want[len(hello[k]["degrees"]):]]
        if self._call("fedgcn.secure_receive", replies, survivors) is None:
            return False
        self._record_plan(plan, params)
        return True

    def _unmask(self, session: bytes, plan: RowPlan, directory: dict, u2: list[int],
                up: dict) -> torch.Tensor | None:
        """The row sums from the masked uploads (:class:`~fedgl.privacy.secagg.SecureSumServer`):
        the global vector is the blocks' rows laid out one after another."""
        sizes = [len(b.rows) for b in plan.blocks]
        some = next((k for k in up if up[k]["masked"].size), None)
        d = 0 if some is None else up[some]["masked"].size // sum(
            sizes[b] for b in plan.blocks_of(some))
        starts = np.cumsum([0] + [n * d for n in sizes])
        placement, segments = {}, {}
        for k in u2:
            mine = plan.blocks_of(k)
            placement[k] = [(int(starts[b]), sizes[b] * d) for b in mine]
            segments[k] = [(sizes[b] * d, [m for m in plan.blocks[b].members if m != k])
                           for b in mine]
        flat = self.secagg.unmask(self._call_steps, session, PRETRAIN, directory, u2,
                                  {k: r["masked"] for k, r in up.items()}, placement, segments,
                                  int(starts[-1]))
        if flat is None:
            return None
        total = torch.zeros(len(plan.uniq), d, dtype=torch.float32)
        for b, blk in enumerate(plan.blocks):
            total[blk.rows] = torch.from_numpy(
                flat[starts[b]:starts[b + 1]].reshape(sizes[b], d)).float()
        dropped = self.secagg.stats.get("dropped_in_session", [])
        if dropped:
            self.privacy_stats["dropped_in_secure_sum"] = list(dropped)
        return total

    def _check_masked_sums(self, total: torch.Tensor, plan: RowPlan, hello: dict,
                           alive: list[int]) -> None:
        """Masked modes: the server sees only full sums, so it checks each unmasked row against
        the bound of a full sum of its degree. Which client sent the excess the masks hide, so
        the run stops."""
        if self.feature_bound is None or not plan.blocks:
            return
        deg = np.zeros(len(plan.uniq))
        for k in alive:
            own = hello[k]["degrees"]
            deg[plan.inverse[k][:len(own)].numpy()] = own.numpy()
        rows = torch.cat([torch.as_tensor(b.rows) for b in plan.blocks]).numpy()
        limits = full_sum_limits(deg[rows], self.feature_bound, noise_sigma(self.config))
        row = first_excess(total[rows], limits)
        if row is not None:
            line = (f"the secure sum of the row of node {int(plan.uniq[rows[row]])} lies beyond "
                    "the public feature bound: some client sent out-of-bound values (the masks "
                    "hide which)")
            self.refusal_log.append(line)
            raise ClientMisbehaved(line + "; the run stops")

    def _call_steps(self, method: str, args: dict, clients: list[int]) -> dict | None:
        return self._call(method, args, clients)

    def _frac_bits(self, plan: RowPlan, hello: dict, params: HEParams) -> list[int]:
        """Fixed-point fractional bits per block, so that the block's sum fits the packing
        fields: |Σ_k S_k| ≤ Σ_{k ∈ members} 2^{range_exp_k} < 2^I, f = field_bits - 1 - I."""
        out = []
        for blk in plan.blocks:
            bound = sum(2.0 ** hello[k]["range_exp"] for k in blk.members)
            top = math.floor(math.log2(bound)) + 1
            f = params.field_bits - 1 - top
            if f < 0:
                raise ConfigError(f"pre-training sums up to 2^{top} do not fit {params.pack} "
                                  f"values per CKKS slot ({params.field_bits}-bit fields); use a "
                                  f"smaller --he-pack")
            out.append(min(f, 50))
        return out

    def _record_plan(self, plan: RowPlan, params: HEParams | None) -> None:
        stats = self.privacy_stats
        stats["blocks"] = len(plan.blocks)
        stats["rows_sent"] = sum(len(b.rows) * len(b.members) for b in plan.blocks)
        stats["rows_kept_local_or_suppressed"] = plan.suppressed()
        if params is not None and params.pack > 1:
            stats["frac_bits"] = self._last_frac


def _cat(parts: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
