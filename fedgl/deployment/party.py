"""One organisation's party in a Flower deployment: its client role, built from its own shard and
identity key only, answering fedgl messages on a local Unix socket.

The party reads three files: its shard (:mod:`fedgl.data.shard_format`), its private identity key
(``client-<k>.key`` from ``fedgl keys``) and the roster (public keys of every client). It never
reads a dataset or another client's file. The Flower ClientApp relay
(:mod:`fedgl.federation.flower.client_app`) forwards to it:

- ``hello``: the server's challenge; the party signs ``(challenge, Flower node id, run id,
  roster digest)`` with its key, so the server maps the Flower node to the roster's client id.
- ``setup``: the run's configuration and seed from the server. The party checks it against its
  own safety settings (its secure-sum mode and threshold must be the run's, the run's
  ``min_contributors`` at least its own; otherwise it refuses) and builds its client role.
- ``types``: the message types its role declares (the relay registers one handler each).
- ``message``: one encoded fedgl message, handed to the role's protocol
  :class:`~fedgl.federation.protocol.Endpoint`; its encoded reply or one-line refusal.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedgl.config import Config
from fedgl.data.shard_format import read_manifest, read_shard
from fedgl.errors import ConfigError, DataError, FedglError, RunAborted
from fedgl.federation.codec import Encoded, WireError
from fedgl.federation.flower.local_link import LinkError, recv_frame, send_frame
from fedgl.federation.protocol import Endpoint, handler_table
from fedgl.privacy.identity import Identity, Roster, frame

#: algorithms that run deployed: their client class (module:qualname) and the server side's
#: driver in :mod:`fedgl.deployment.server_app` ("fedavg": a FedAvg server class, given here;
#: "minibatch": the mini-batch FedSGD server with the algorithm's schedule; "vertical": GLASU's
#: server, :mod:`fedgl.deployment.drivers_vertical`, whose client entry is a factory taking the
#: same ``(shard, config, seed)``). FedAvg is ``fedgcn`` with ``hops: 0``. See
#: :mod:`fedgl.deployment.drivers_horizontal`.
_MINIBATCH = ("fedgl.algorithms.minibatch.client:MiniBatchClient", "minibatch")
DEPLOYABLE = {
    "fedgcn": ("fedgl.algorithms.fedgcn.client:FedGCNClient",
               "fedgl.algorithms.fedgcn.server:FedGCNServer"),
    "swift-fedgnn": _MINIBATCH,
    "fedgnn-g": _MINIBATCH,
    "local-only": _MINIBATCH,
    "llcg": _MINIBATCH,
    "fedgnn-pns": _MINIBATCH,
    "fedgat": ("fedgl.algorithms.fedgat.client:FedGATClient",
               "fedgl.deployment.drivers_horizontal:DeployedFedGATServer"),
    "distgat": ("fedgl.algorithms.fedgat.dist_gat:DistGATClient",
                "fedgl.deployment.drivers_horizontal:DeployedDistGATServer"),
    "fedsage-plus": ("fedgl.algorithms.fedsage_plus.client:FedSagePlusClient",
                     "fedgl.algorithms.fedsage_plus.server:FedSagePlusServer"),
    "glasu": ("fedgl.deployment.drivers_vertical:glasu_client", "vertical"),
}
_ONE_PARTY = "one party holds the whole graph (a reference, not a federation)"
_CLUSTER = ("its clients exchange raw boundary features and hidden states through the server at "
            "every local step and layer: a method for one organisation's trusted cluster (Ray), "
            "and a Flower round trip per layer and step")
_GLASU_REFERENCE = ("a GLASU reference: it gives one party every edge or every feature column, "
                    "or trains the parties apart")
#: algorithms that stay simulation-only, and why (``fedgl server`` says so)
SIMULATION_ONLY = {
    "glasu-simulated": _GLASU_REFERENCE,
    "glasu-centralized": _GLASU_REFERENCE,
    "glasu-standalone": _GLASU_REFERENCE,
    "centralized": _ONE_PARTY,
    "centralized-gat": _ONE_PARTY,
    "bns-gcn": _CLUSTER,
    "distributed-gcn": _CLUSTER,
}
HELLO_CONTEXT = "fedgl-flower-hello/1"


def load_class(path: str) -> type:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def deployable(algorithm: str) -> tuple[str, str]:
    if algorithm in SIMULATION_ONLY:
        raise ConfigError(f"algorithm '{algorithm}' is simulation-only: "
                          f"{SIMULATION_ONLY[algorithm]}; run it with --runtime local or ray")
    if algorithm not in DEPLOYABLE:
        raise ConfigError(f"algorithm '{algorithm}' does not run deployed on Flower yet (only "
                          f"{', '.join(sorted(DEPLOYABLE))}); run it with --runtime local or ray")
    return DEPLOYABLE[algorithm]


def hello_message(challenge: bytes, node_id: int, run_id: int, roster: Roster) -> bytes:
    """What a party signs to prove its client id to the server for one Flower node and run."""
    return frame(HELLO_CONTEXT, challenge, str(node_id), str(run_id), roster.digest())


def read_roster(path: str | Path) -> Roster:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"roster '{path}' does not exist; make it with `fedgl keys`") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"roster '{path}' is unreadable ({type(exc).__name__}); make it with "
                          "`fedgl keys`") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"roster '{path}' is not {{client id: hex key}}; make it with "
                          "`fedgl keys`")
    return Roster.from_dict(data)


def read_identity(path: str | Path) -> Identity:
    try:
        raw = bytes.fromhex(Path(path).read_text().strip())
    except FileNotFoundError:
        raise ConfigError(f"key file '{path}' does not exist; use client-<k>.key from "
                          "`fedgl keys`") from None
    except (OSError, UnicodeDecodeError, ValueError):
        raise ConfigError(f"key file '{path}' is not a hex Ed25519 key from `fedgl keys`") from None
    if len(raw) != 32:
        raise ConfigError(f"key file '{path}' is not a 32-byte Ed25519 key from `fedgl keys`")
    return Identity(raw)


@dataclass(frozen=True)
class Safety:
    """The organisation's own privacy settings; a run that asks for less is refused."""

    secure_sum: str = "none"
    secagg_threshold: int = 0
    min_contributors: int = 1

    def check(self, cfg: Config) -> None:
        if cfg.secure_sum != self.secure_sum:
            raise ConfigError(f"the run asks for secure_sum '{cfg.secure_sum}' but this client "
                              f"runs '{self.secure_sum}' (its --secure-sum); the organisations "
                              "must agree")
        if cfg.secure_sum == "robust" and cfg.secagg_threshold != self.secagg_threshold:
            raise ConfigError(f"the run's secagg_threshold {cfg.secagg_threshold} differs from "
                              f"this client's --secagg-threshold {self.secagg_threshold}")
        if cfg.min_contributors < self.min_contributors:
            raise ConfigError(f"the run's min_contributors {cfg.min_contributors} is below this "
                              f"client's --min-contributors {self.min_contributors}")


class Party:
    """The client role of one organisation (see the module docstring)."""

    def __init__(self, data: str | Path, key: str | Path, roster: str | Path,
                 safety: Safety | None = None, *, device: str | None = None,
                 threads: int | None = None) -> None:
        self.manifest = read_manifest(data)
        self.shard = read_shard(data)
        self.client_id = int(self.shard.client_id)
        self.roster = read_roster(roster)
        self.identity = read_identity(key)
        if self.client_id not in self.roster:
            raise ConfigError(f"client {self.client_id} (the shard's) is not in the roster "
                              f"'{roster}'; a client without a roster key is refused")
        if self.roster.to_dict()[str(self.client_id)] != self.identity.public.hex():
            raise ConfigError(f"key '{key}' is not client {self.client_id}'s roster key; use "
                              f"client-{self.client_id}.key")
        self.safety = safety or Safety()
        self.device = device
        self.threads = threads
        self.endpoint: Endpoint | None = None
        self.lock = threading.Lock()

    # ------------------------------------------------------------------ operations
    def hello(self, header: dict[str, Any]) -> dict[str, Any]:
        challenge = bytes.fromhex(str(header.get("challenge", "")))
        if len(challenge) < 16:
            raise ConfigError("the server's challenge is too short")
        message = hello_message(challenge, int(header["node_id"]), int(header["run_id"]),
                                self.roster)
        return {"client_id": self.client_id, "signature": self.identity.sign(message).hex(),
                "setting": self.manifest["setting"], "num_nodes": self.manifest["num_nodes"],
                "num_features": int(self.shard.num_features),
                "num_classes": int(self.shard.num_classes)}

    def setup(self, body: bytes) -> dict[str, Any]:
        try:
            job = json.loads(body)
            cfg = Config.from_dict(job["config"])
            seed = int(job["seed"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"the server's run set-up is unreadable ({exc})") from None
        self.safety.check(cfg)
        overrides = {k: v for k, v in (("device", self.device), ("threads", self.threads))
                     if v is not None}
        if overrides:
            cfg = cfg.replace(**overrides)
        if cfg.threads:
            import torch

            torch.set_num_threads(cfg.threads)
        client_cls = load_class(deployable(cfg.algorithm)[0])
        role = client_cls(self.shard, copy.deepcopy(cfg), seed)
        mode = cfg.secure_sum
        if (mode != "none" or cfg.encrypt_models) and hasattr(role, "install_identity"):
            role.install_identity(self.identity, self.roster,
                                  mode if mode in ("mask", "robust") else "auth",
                                  self.safety.secagg_threshold, cfg.secure_models)
        self.endpoint = Endpoint(role, f"client {self.client_id}")
        return {"ok": True}

    def types(self) -> dict[str, list[str]]:
        if self.endpoint is None:
            return {}
        return {t: list(h.phases) for t, h in handler_table(type(self.endpoint.role)).items()}

    def message(self, header: dict[str, Any], body: bytes) -> bytes:
        if self.endpoint is None:
            raise RunAborted(f"client {self.client_id} has no run set up; the server must send "
                             "its set-up first")
        return self.endpoint.handle(Encoded.from_bytes(body), str(header.get("phase"))).to_bytes()

    def answer(self, header: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        """One relayed request; a refusal is a one-line ``{"refused": ...}``."""
        op = header.get("op")
        with self.lock:
            try:
                if op == "hello":
                    return self.hello(header), b""
                if op == "setup":
                    return self.setup(body), b""
                if op == "types":
                    return {"types": self.types()}, b""
                if op == "message":
                    return {}, self.message(header, body)
                return {"refused": f"client {self.client_id}: unknown operation {op!r}"}, b""
            except (FedglError, RunAborted, WireError) as exc:
                return {"refused": f"client {self.client_id}: {exc}"}, b""
            except Exception as exc:  # noqa: BLE001 - the server gets one line, not a traceback
                return {"refused": f"client {self.client_id}: {type(exc).__name__}: {exc}"}, b""

    # ------------------------------------------------------------------ serving
    def serve(self, path: str | Path, stop: threading.Event | None = None) -> None:
        """Answer the relay on the Unix socket ``path`` (mode 0600) until ``stop`` is set."""
        path = str(path)
        if os.path.exists(path):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        sock.listen(16)
        sock.settimeout(0.5)
        try:
            while stop is None or not stop.is_set():
                try:
                    conn, _ = sock.accept()
                except TimeoutError:
                    continue
                threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()
        finally:
            sock.close()
            if os.path.exists(path):
                os.unlink(path)

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            header, body = recv_frame(conn)
            reply_header, reply = self.answer(header, body)
            send_frame(conn, reply_header, reply)
        except (LinkError, OSError, DataError):
            pass
        finally:
            conn.close()
