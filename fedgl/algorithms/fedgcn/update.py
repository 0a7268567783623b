"""The pre-training exchange again, restricted to what changed: scoring nodes that arrived later.

After every FedGCN exchange a client with a state folder (``fedgl client --state-dir``, or
``privacy.state_dir`` for simulated clients) keeps, privately, ``fedgcn-exchange.npz``:

- the stable key of every row it touched (own nodes, then remote neighbours: own data's
  pseudonyms, a built-in data set's node ids) and a fingerprint of its exact contribution
  ``S_k[i]`` to each;
- the full sums ``S[i]`` it received for its requested rows, and their remote degrees.

When the organisations' tables change (new nodes and edges, re-ingested with the same secret) and
the model scores again (``fedgl predict``, ``fedgl server --predict``), the server first asks
every client which rows its contribution changed (``fedgcn.changed_rows``): a row it did not
touch before, or whose contribution's fingerprint differs (a new neighbour, a changed degree).
The reply also carries the announcement of the full exchange (ids, requested rows, degrees, cross
edges; no values), which the server checks exactly as before pre-training. The union ``U`` of
the changed rows is every row whose full sum can differ; the server sends it
(``fedgcn.restrict_rows``) and the exchange runs as in pre-training, in the run's secure-sum mode
and under each client's own policy and record, over the rows in ``U`` only. Each client merges
the new sums into the ones it kept: its inputs equal those of a full exchange over the changed
data. Its bytes are appendix F's for the rows in ``U``.

Where more than :data:`WHOLE_ABOVE` of the rows changed, the whole exchange runs (it costs no
more). Every exchange kept carries its id (the restricted exchange's, chosen by the server; "" for the
whole pre-training exchange): the server merges only where every client kept the same exchange
(a client that restored an older state folder, or kept none, makes it the whole exchange again).
A client answers ``full`` (and the whole exchange runs) when it kept nothing, kept it under other
settings, or no longer touches a row it contributed to before (a removed edge or node changes a
sum it cannot name). A client checks that ``U`` holds every row it changed (else its kept sums
would be stale: the run stops), and a server that sends ``U`` without asking gets a refusal.
What the server learns beyond a full exchange: which rows each client's contribution changed.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedgl.federation.protocol import Arr, ProtocolViolation, Str, handles
from fedgl.privacy.secagg import AttackDetected

#: the kept exchange's file in the client's state folder
KEPT_FILE = "fedgcn-exchange.npz"
KEY_BYTES = 16
#: above this share of the rows changed, the server runs the whole exchange instead (its
#: streamed, sparse blocks cost no more than the restricted one's single message then)
WHOLE_ABOVE = 0.8
#: a client keeps no exchange whose rows hold more values than this (its fingerprints are
#: computed from the dense partial sums): the next scoring then runs the whole exchange
MAX_KEPT_VALUES = 200_000_000

IDS = Arr(("int64",), ndim=1)

# odd 64-bit multipliers of the two row fingerprints (fixed: a fingerprint is compared across runs)
_MULT = np.random.default_rng(0x6665_6467_6c).integers(1, 2**63, size=(2, 1 << 16),
                                                        dtype=np.uint64) | np.uint64(1)


def row_fingerprints(rows: Tensor) -> np.ndarray:
    """128 bits per row (``uint8 [n, 16]``): two multiply-add hashes of the row's 64-bit words,
    vectorised; equal rows give equal fingerprints, a changed row a different one except with
    probability about 2^-64 (the rows are the client's own data, not an adversary's)."""
    a = np.ascontiguousarray(rows.detach().cpu().numpy())
    n = a.shape[0]
    raw = a.view(np.uint8).reshape(n, -1)
    pad = (-raw.shape[1]) % 8
    if pad:
        raw = np.concatenate([raw, np.zeros((n, pad), dtype=np.uint8)], axis=1)
    words = raw.view(np.uint64)
    out = np.empty((n, 2), dtype=np.uint64)
    width = words.shape[1]
    for h in range(2):
        acc = np.zeros(n, dtype=np.uint64)
        for s in range(0, width, _MULT.shape[1]):
            w = words[:, s:s + _MULT.shape[1]]
            acc += (w * _MULT[h, :w.shape[1]]).sum(axis=1, dtype=np.uint64)
        out[:, h] = acc + np.uint64((width * 0x9E3779B97F4A7C15) % 2**64)
    return out.view(np.uint8).reshape(n, KEY_BYTES)


def stable_keys(data, num_rows: int) -> np.ndarray:
    """The first ``num_rows`` rows' stable keys (own nodes, then remote neighbours) as one
    sortable 16-byte value each: the shard's keys (own data), else the global ids."""
    keys = data.keys
    if keys is None:
        ids = torch.cat([data.node_ids, data.remote_neighbors()])[:num_rows].numpy()
        raw = np.zeros((len(ids), KEY_BYTES), dtype=np.uint8)
        raw[:, :8] = ids.astype(">u8").view(np.uint8).reshape(-1, 8)
    else:
        raw = np.ascontiguousarray(keys[:num_rows].numpy(), dtype=np.uint8)
    return _as_bytes(raw)


def _as_bytes(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1, KEY_BYTES).view(
        f"S{KEY_BYTES}").reshape(-1)


def _lookup(keys: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Position of each key in ``table`` (-1 where absent)."""
    if not len(table):
        return np.full(len(keys), -1, dtype=np.int64)
    order = np.argsort(table, kind="stable")
    at = np.searchsorted(table[order], keys).clip(max=len(table) - 1)
    return np.where(table[order][at] == keys, order[at], -1)


@dataclass
class KeptExchange:
    """What a client kept of its last exchange (see the module docstring)."""

    settings: str
    exchange: str              # the restricted exchange's id ("" for a whole exchange)
    touched: np.ndarray        # S16 keys of every touched row
    contributions: np.ndarray  # uint8 [touched, 16] fingerprints of its exact contributions
    wanted: np.ndarray         # S16 keys of the requested rows
    sums: Tensor               # [wanted, d] the full sums received
    degrees: Tensor            # int64 [wanted - own]: remote degrees (empty without)

    def save(self, folder: Path) -> None:
        import io

        from fedgl.data.shard_format import write_atomic

        buf = io.BytesIO()
        np.savez(buf, settings=np.frombuffer(self.settings.encode(), dtype=np.uint8),
                 exchange=np.frombuffer(self.exchange.encode(), dtype=np.uint8),
                 touched=self.touched.view(np.uint8), contributions=self.contributions,
                 wanted=self.wanted.view(np.uint8), sums=self.sums.numpy(),
                 degrees=self.degrees.numpy())
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / KEPT_FILE, buf.getvalue())

    @classmethod
    def load(cls, folder: Path) -> KeptExchange | None:
        """The kept exchange, or None where there is none or it is unreadable (then the whole
        exchange runs and is kept anew)."""
        path = folder / KEPT_FILE
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                return cls(settings=z["settings"].tobytes().decode(),
                           exchange=z["exchange"].tobytes().decode(),
                           touched=_as_bytes(z["touched"]), contributions=z["contributions"],
                           wanted=_as_bytes(z["wanted"]), sums=torch.from_numpy(z["sums"]),
                           degrees=torch.from_numpy(z["degrees"]))
        except (OSError, ValueError, KeyError, UnicodeDecodeError):
            return None


@dataclass
class _Update:
    """This session's comparison with the kept exchange (what keeping the new one reuses)."""

    kept: KeptExchange
    keys: np.ndarray          # S16 keys of the full touched rows, now
    fingerprints: np.ndarray  # their contributions' fingerprints, now
    changed: Tensor           # bool over the full touched rows: this client's contribution changed


class UpdateClient:
    """The client's side of the restricted exchange (mixed into the FedGCN client, which
    provides ``data``, ``config``, ``_full_touched``, ``_sums_of``, ``_announcement`` and
    ``input_record``)."""

    _restrict: Tensor | None = None   # bool over the full touched rows, during a restricted one
    _update: _Update | None = None    # this session's comparison with the kept exchange
    _exchange_id = ""                 # the id of the exchange in progress ("" for a whole one)

    def _kept_folder(self) -> Path | None:
        return self.input_record().folder

    def _exchange_settings(self) -> str:
        cfg, d = self.config, self.data
        fields = (str(cfg.dataset), int(cfg.hops), bool(self.neighbour_rows),
                  d.num_features, str(d.x.dtype), cfg.dp_epsilon, cfg.dp_delta, cfg.dp_clip,
                  int(cfg.min_contributors), int(getattr(cfg, "min_partial_nodes", 1)),
                  bool(getattr(cfg, "own_scoring_only", False)), str(cfg.secure_sum))
        return hashlib.sha256(repr(fields).encode()).hexdigest()

    def _contributions(self) -> np.ndarray:
        return row_fingerprints(self._sums_of(self.data.x, self._full_touched()))

    @handles("fedgcn.changed_rows", phases=("pretrain",), states=("pretraining",),
             schema={"exchange": Str(max_len=64)})
    def changed_rows(self, exchange: str) -> dict:
        """Step 1 of the restricted exchange: ``full`` (1: the whole exchange must run) or the
        rows this client's contribution changed since the exchange it kept (``changed``, global
        ids) and that exchange's id (``kept``: the server goes on only where every client kept
        the same one), with the full exchange's announcement (no values) for the server's
        checks. ``exchange``: this exchange's id, kept with it."""
        touched = self._full_touched()
        n_req = len(touched) if self.neighbour_rows else self.data.num_nodes
        msg = {**self._announcement(touched, n_req), "full": 1, "kept": "",
               "changed": torch.zeros(0, dtype=torch.long)}
        msg.pop("dp_release", None)
        self._update, self._exchange_id = None, str(exchange)
        folder = self._kept_folder()
        kept = KeptExchange.load(folder) if folder is not None else None
        if kept is None or kept.settings != self._exchange_settings():
            return msg
        if str(self.config.dataset).startswith("own:") and self.data.keys is None:
            return msg  # a shard placed without its rows' pseudonyms: its ids may have moved
        keys = stable_keys(self.data, len(touched))
        at = _lookup(kept.touched, keys)
        if bool((at < 0).any()):
            return msg  # a row it contributed to before is gone: a sum it cannot name changed
        before = np.zeros((len(keys), KEY_BYTES), dtype=np.uint8)
        known = _lookup(keys, kept.touched)
        before[known >= 0] = kept.contributions[known[known >= 0]]
        now = self._contributions()
        changed = (known < 0) | (before != now).any(axis=1)
        self._update = _Update(kept, keys, now, torch.from_numpy(changed))
        return {**msg, "full": 0, "kept": kept.exchange, "changed": touched[self._update.changed]}

    @handles("fedgcn.restrict_rows", phases=("pretrain",), states=("pretraining",),
             schema={"rows": IDS})
    def restrict_rows(self, rows: Tensor) -> dict:
        """Step 2: the rows ``U`` the exchange covers (sorted, once each). Its own changed rows
        must be among them. With ``U`` empty nothing changed anywhere: the kept sums are the
        inputs, and the client is ready."""
        if self._update is None:
            raise ProtocolViolation(f"client {self.data.client_id} was sent rows to restrict an "
                                    "exchange to, but kept none to compare (changed_rows first)")
        if len(rows) > 1 and not bool((rows[1:] > rows[:-1]).all()):
            raise ProtocolViolation("the rows of a restricted exchange are not sorted and "
                                    "distinct")
        inside = torch.isin(self._full_touched(), rows)
        if bool((self._update.changed & ~inside).any()):
            raise AttackDetected(f"the server left rows client {self.data.client_id} changed out "
                                 "of the restricted exchange: its sums would be stale; the run "
                                 "stops")
        self._restrict = inside
        if not len(rows):
            self.receive_sums(torch.zeros((0, self.data.num_features), dtype=self.data.x.dtype),
                              torch.zeros(0, dtype=torch.long))
        return {}

    def _merged(self, sums: Tensor, degrees: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """The full requested rows: the restricted exchange's where it covered them, the kept
        ones elsewhere (and the remote degrees alike). Ends the restriction."""
        sel, update = self._restrict, self._update
        self._restrict = None
        d = self.data
        n_own = d.num_nodes
        n_req = len(sel) if self.neighbour_rows else n_own
        fresh = sel[:n_req]
        if int(fresh.sum()) != sums.size(0):
            raise ProtocolViolation(f"client {d.client_id} received {sums.size(0)} rows for the "
                                    f"{int(fresh.sum())} rows of its restricted exchange")
        keys = update.keys[:n_req]
        merged = torch.empty((n_req, sums.size(1)), dtype=sums.dtype)
        merged[fresh] = sums
        old = np.flatnonzero(~fresh.numpy())
        at = _lookup(keys[old], update.kept.wanted)
        if bool((at < 0).any()):  # cannot happen: a row it did not keep is a changed row
            raise RuntimeError("a requested row is neither kept nor in the restricted exchange")
        merged[torch.from_numpy(old)] = update.kept.sums[torch.from_numpy(at)].to(sums.dtype)
        full_degrees = None
        if self.neighbour_rows:
            full_degrees = torch.zeros(n_req - n_own, dtype=torch.long)
            if degrees is not None:
                full_degrees[fresh[n_own:]] = degrees
            kept_own = len(update.kept.wanted) - len(update.kept.degrees)
            remote = old >= n_own
            if bool((at[remote] < kept_own).any()):  # a changed role is a changed row
                raise RuntimeError("a kept remote row was an own row")
            full_degrees[torch.from_numpy(old[remote] - n_own)] = \
                update.kept.degrees[torch.from_numpy(at[remote] - kept_own)]
        return merged, full_degrees

    def _keep_exchange(self, sums: Tensor, degrees: Tensor | None) -> None:
        """After every complete exchange, with a state folder: keep it (see the module
        docstring), so that scoring after new data exchanges only what changed."""
        folder = self._kept_folder()
        exchange, self._exchange_id = self._exchange_id, ""
        update, self._update = self._update, None
        if folder is None:
            return
        if len(self._full_touched()) * self.data.num_features > MAX_KEPT_VALUES:
            (folder / KEPT_FILE).unlink(missing_ok=True)   # an older one would be stale now
            return
        if update is None:   # a whole exchange: this client's rows as they are now
            keys = stable_keys(self.data, len(self._full_touched()))
            fingerprints = self._contributions()
        else:                # computed when it compared them with the kept exchange
            keys, fingerprints = update.keys, update.fingerprints
        KeptExchange(self._exchange_settings(), exchange, keys, fingerprints,
                     keys[:sums.size(0)], sums.detach().clone(),
                     degrees.clone() if degrees is not None else torch.zeros(0, dtype=torch.long)
                     ).save(folder)


class UpdateServer:
    """The server's side (mixed into the FedGCN server): :meth:`pretrain_update`."""

    _full_announced: dict | None = None  # the checked full announcements of a restricted one
    #: after :meth:`pretrain_update`: ``{"restricted": bool, "changed_rows": int | None}``
    update_stats: dict | None = None

    def pretrain_update(self) -> None:
        """Pre-training again over changed data: restricted to the rows that changed where
        every client kept its last exchange, else the whole exchange (:meth:`pretrain`)."""
        cfg = self.config
        if cfg.hops == 0 or cfg.encrypt_models:
            return self.pretrain()  # (encrypted models need the full secure round's keys)
        clients = self.active_clients()
        with self.runtime.ledger.timer("pretrain"):
            answers = self.runtime.call("fedgcn.changed_rows", {"exchange": os.urandom(8).hex()},
                                        phase="pretrain", clients=clients)
        expected = sorted(self.runtime.client_ids) if clients is None else sorted(clients)
        if sorted(answers) != expected or any(int(a["full"]) for a in answers.values()) or \
                len({str(a["kept"]) for a in answers.values()}) != 1:
            # (an exchange kept by some clients only, e.g. a restored backup, is not merged)
            self.update_stats = {"restricted": False, "changed_rows": None}
            return self.pretrain()
        self._check(answers)
        rows = torch.unique(torch.cat([a["changed"] for a in answers.values()]))
        every = torch.unique(torch.cat([a["ids"] for a in answers.values()]))
        if len(rows) > WHOLE_ABOVE * len(every):
            # most rows changed: the whole exchange (streamed, sparse) costs no more
            self.update_stats = {"restricted": False, "changed_rows": int(len(rows))}
            return self.pretrain()
        self.update_stats = {"restricted": True, "changed_rows": int(len(rows))}
        with self.runtime.ledger.timer("pretrain"):
            self.runtime.call("fedgcn.restrict_rows", {k: {"rows": rows} for k in expected},
                              phase="pretrain", clients=clients)
        if not len(rows):
            return None
        self._full_announced = answers
        try:
            return self.pretrain()
        finally:
            self._full_announced = None

    def _check_restricted(self, msgs: dict) -> None:
        """A restricted announcement is a part of the full one already checked: own ids among
        its own, remote ids among its remote ones, no more rows asked back."""
        for k, m in msgs.items():
            full = self._full_announced.get(k)
            ids, n_req = m["ids"], int(m["num_requested"])
            n_own = len(m["degrees"]) if "degrees" in m else n_req
            why = None
            if full is None:
                why = "an announcement without the full one"
            else:
                f_ids, f_req = full["ids"], int(full["num_requested"])
                f_own = len(full["degrees"]) if "degrees" in full else f_req
                if not (bool(torch.isin(ids[:n_own], f_ids[:f_own]).all())
                        and bool(torch.isin(ids[n_own:n_req], f_ids[f_own:f_req]).all())
                        and bool(torch.isin(ids[n_req:], f_ids).all())
                        and n_own <= n_req <= len(ids)):
                    why = "rows outside its checked full announcement"
            if why is not None:
                self._refuse(k, f"{why} in the restricted exchange")
            elif full is not None:
                self._num_own[k] = (len(full["degrees"]) if "degrees" in full
                                    else int(full["num_requested"]))
