"""One organisation's party in a Flower deployment: its client role, built from its own shard and
identity key only, answering fedgl messages on a local Unix socket.

The party reads three files: its shard (:mod:`fedgl.data.shard_format`), its private identity key
(``client-<k>.key`` from ``fedgl keys``) and the roster (public keys of every client); with
``--state-dir`` it keeps its own records there (its DP release log). It never reads a dataset or
another client's file. The Flower ClientApp relay (:mod:`fedgl.federation.flower.client_app`)
forwards every server message to it; the party is itself a protocol role, declaring the two
set-up messages (phase ``setup``) beside its algorithm role's:

- ``party.hello`` (``challenge``: at least 16 random bytes): the party signs ``(challenge, its
  Flower node id, run id, roster digest)`` with its key, so the server maps the Flower node to
  the roster's client id. The node and run ids are the SuperNode's own, not the server's.
- ``party.setup`` (``config``, ``seed``, ``run_tag``, ``resumed``), accepted once per run and
  only after that run's hello: the party checks the configuration against its own safety
  policy (:class:`~fedgl.privacy.policy.ClientPolicy`, from ``fedgl client``'s flags or
  ``--policy FILE``) and refuses, in one line, a run that asks for anything weaker (DP off or
  looser, secure or encrypted models off, a bound off or looser, a weaker adjacency check,
  fewer min contributors, an algorithm it does not run; the secure-sum mode and robust
  threshold must be its own); then it builds its client role, whose message types follow from
  the run's (at least as strong) settings. Its reply lists the DP releases the party has logged
  for the run so far (a resumed run counts them) and carries the role's answer to
  ``setup.facts`` (:mod:`fedgl.federation.facts`: its node count, feature and class widths,
  from its own shard), so that the server learns them without a third round trip.

- ``party.not_admitted`` (``reason``: ``duplicate``), after this run's hello: the server did not
  admit this node (another node proved the same identity first); one line says so, in the
  party's own words for the reason.
- ``party.finished`` (``round``: the run's last round, 0 for a scoring run), the server's last
  message of a run, once its results are written (and the model handed over): the party says
  in one line that the run finished and where its files are (``--out``, its log file).

Any other message goes to the role's protocol :class:`~fedgl.federation.protocol.Endpoint`;
before a run is set up it is refused. Every refusal is one line, recorded in
:attr:`Party.refused` and printed to the party's log. The relay's ``types`` request (which Flower
handlers to register) is local, not a server message.

On its socket (:meth:`Party.serve`) the party reads a request's header first and decides before
reading the body (:meth:`Party.frame_limit`): a request without the relay's token (which ``fedgl
client`` hands its relay runner through a pipe) is refused; a body longer than the message may
carry is refused unread: :data:`SETUP_MAX_BODY` before the run is set up and for the set-up
messages, the organisation's ``max_message_bytes`` (``--max-message-mb``) for the role's.
"""

from __future__ import annotations

import copy
import hmac
import json
import os
import socket
import threading
from pathlib import Path
from typing import Any

from fedgl.algorithms.base import MODEL as RUN_MODEL
from fedgl.config import Config
from fedgl.config.registry import load_path
from fedgl.data.provenance import mismatch, shard_record
from fedgl.data.shard_format import read_ids, read_manifest, read_shard
from fedgl.errors import ConfigError, DataError, FedglError, RunAborted
from fedgl.federation.codec import Encoded, WireError, decode, encode
from fedgl.federation.facts import FACTS
from fedgl.federation.flower.local_link import (
    HELLO,
    SETUP,
    SETUP_PHASE,
    TOKEN_KEY,
    FrameRefused,
    LinkError,
    recv_frame,
    send_frame,
)
from fedgl.federation.protocol import (
    Any_,
    Bool,
    Bytes,
    Endpoint,
    Int,
    MapOf,
    ProtocolViolation,
    Str,
    handler_table,
    handles,
)
from fedgl.privacy.identity import Identity, Roster, frame
from fedgl.privacy.inputs import party_record
from fedgl.privacy.policy import ClientPolicy, with_protective_defaults

HELLO_CONTEXT = "fedgl-flower-hello/1"
#: the trained model at the end of a run (:mod:`fedgl.deployment.model_release`), or, for a
#: model split among the parties, the order to keep one's own part
MODEL, OWN_PART = "party.model", "party.own_part"
#: scoring with a split model (``fedgl server --predict``): use the part kept under ``--out``
LOAD_PART = "party.load_part"
#: the server's last message of a run: the party prints its "finished" line
FINISHED = "party.finished"
#: the server did not admit this node to the run (its hello proved an identity another node of
#: the run proved first): the party says so in one line instead of waiting in silence
NOT_ADMITTED = "party.not_admitted"
#: why a node was not admitted (``party.not_admitted``'s ``reason``) -> the party's own words
NOT_ADMITTED_WHY = {
    "duplicate": "another SuperNode proved this client's identity first (a second `fedgl "
                 "client` with the same identity key, here or elsewhere?); stop one of them"}
#: the fewest random bytes a hello challenge may have
MIN_CHALLENGE = 16
#: the largest body a set-up message (``party.hello``: a challenge of at most 1 KiB;
#: ``party.setup``: a configuration of at most 1024 entries) may have on the party's socket;
#: before a run is set up, no other message is accepted
SETUP_MAX_BODY = 1 << 20
#: the default largest body of any other message (``fedgl client --max-message-mb``)
DEFAULT_MAX_MESSAGE = 1 << 30


def hello_message(challenge: bytes, node_id: int, run_id: int, roster: Roster) -> bytes:
    """What a party signs to prove its client id to the server for one Flower node and run."""
    return frame(HELLO_CONTEXT, challenge, str(node_id), str(run_id), roster.digest())


def _listening_socket(path: str) -> socket.socket:
    """A Unix socket listening at ``path`` (mode 0600) that appears there only once it listens:
    bound under a temporary name beside it, then renamed, so that a peer waiting for the file
    never finds a socket that is bound but not yet listening (its connection would be
    refused)."""
    staged = path + "~"
    if len(os.fsencode(staged)) >= 108:   # no room for the temporary name: bound in place
        staged = path
    if os.path.exists(staged):
        os.unlink(staged)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(staged)
    finally:
        os.umask(old)
    sock.listen(16)
    if staged != path:
        os.replace(staged, path)
    return sock


def warm_up() -> None:
    """Pay torch's lazy imports now rather than inside a run: the first optimizer a process
    builds imports torch's compiler stack (``torch._dynamo``, about 1 CPU second on the 2-core
    development machine), which the party's first fit would otherwise pay while the server and
    the other organisations wait (docs/deployment.md). ``fedgl client`` calls it on a thread as
    it starts; nothing of a run is touched."""
    import torch

    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.0)


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



class Party:
    """The client role of one organisation (see the module docstring)."""

    def __init__(self, data: str | Path, key: str | Path, roster: str | Path,
                 safety: ClientPolicy | None = None, *, device: str | None = None,
                 threads: int | None = None, state_dir: str | Path | None = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE, out: str | Path | None = None,
                 receive_model: bool = True) -> None:
        self.manifest = read_manifest(data)
        self.shard = read_shard(data)
        self.client_id = int(self.shard.client_id)
        #: the organisation's own raw ids of its shard's nodes (``fedgl place`` keeps them
        #: beside the shard), for the scores it writes; None: the shard's node numbers
        self.own_ids = read_ids(data, self.client_id)
        self.roster = read_roster(roster)
        self.identity = read_identity(key)
        if self.client_id not in self.roster:
            raise ConfigError(f"client {self.client_id} (the shard's) is not in the roster "
                              f"'{roster}'; a client without a roster key is refused")
        if self.roster.to_dict()[str(self.client_id)] != self.identity.public.hex():
            raise ConfigError(f"key '{key}' is not client {self.client_id}'s roster key; use "
                              f"client-{self.client_id}.key")
        # no policy given: the protective default `fedgl client` starts with (never plaintext)
        self.safety = safety if safety is not None else \
            ClientPolicy.from_mapping(with_protective_defaults({}))
        self.device = device
        self.threads = threads
        #: the torch threads of the run set up (its ``threads``, or this party's ``threads``);
        #: applied on every thread that answers a message
        self.compute_threads: int | None = None
        self.state_dir = Path(state_dir) if state_dir is not None else None
        #: the party's input record (fedgl.privacy.inputs), for every run it serves: under
        #: --state-dir it survives restarts too; the server's config never chooses where
        self.record = party_record(self.state_dir, self.client_id)
        self.max_message_bytes = int(max_message_bytes)
        #: where this organisation keeps the model it receives at the end of a run, its scores
        #: and metrics (``fedgl client --out``), and whether it takes the model at all
        self.out = Path(out) if out is not None else Path(f"fedgl-client-{self.client_id}")
        self.receive_model = bool(receive_model) and self.safety.receive_model
        self.endpoint: Endpoint | None = None
        self._round_shown: int | None = None   # the latest round a progress line named
        self._rounds: int | None = None        # the run's rounds (from its set-up)
        #: the party's own set-up protocol: ``new`` -> hello -> ``greeted`` -> setup -> ``set-up``
        self.protocol_state = "new"
        self.run_id: int | None = None
        self.own = Endpoint(self, f"client {self.client_id}")
        self.refused: list[str] = []
        self._context: tuple[int, int] = (-1, -1)   # (node id, run id) of the message in hand
        self.lock = threading.Lock()
        self._relay_token: str | None = None
        #: the organisation's log file (``fedgl client`` sets it), named in the finished line
        self.log_path: Path | None = None

    # ------------------------------------------------------------------ set-up messages
    @handles(HELLO, phases=(SETUP_PHASE,), enters="greeted", schema={"challenge": Bytes(max_len=1024)})
    def hello(self, challenge: bytes) -> dict[str, Any]:
        """Prove this party's client id for the SuperNode's node and run (a new run's hello
        starts over: the previous run's role is dropped)."""
        node_id, run_id = self._context
        if len(challenge) < MIN_CHALLENGE:
            raise ValueError(f"the challenge is {len(challenge)} bytes, fewer than "
                             f"{MIN_CHALLENGE}")
        if run_id == self.run_id and self.protocol_state != "new":
            raise ValueError(f"run {run_id} already said hello")
        self.endpoint, self.run_id, self.protocol_state = None, run_id, "new"
        message = hello_message(challenge, node_id, run_id, self.roster)
        return {"client_id": self.client_id, "signature": self.identity.sign(message)}

    @handles(SETUP, phases=(SETUP_PHASE,), states=("greeted",), enters="set-up",
             schema={"config": MapOf(Str(max_len=64), Any_(), max_len=1024),
                     "seed": Int(0, 2**63 - 1), "run_tag": Str(max_len=64),
                     "resumed": Bool()})
    def setup(self, config: dict[str, Any], seed: int, run_tag: str,
              resumed: bool) -> dict[str, Any]:
        """Check the run against this organisation's safety policy and build the role."""
        if self._context[1] != self.run_id:
            raise ValueError(f"it is for run {self._context[1]}, but run {self.run_id} said "
                             "hello")
        if not run_tag.isalnum():
            raise ValueError("its run_tag is not alphanumeric")
        try:
            cfg = Config.from_dict(config)
            self.safety.check(cfg)
            made = mismatch(self.manifest.get("source") or {}, cfg, str(self.manifest["setting"]))
            if made is not None:
                raise ConfigError(made)
            cfg, logged = self._own_records(cfg, seed, run_tag, resumed)
        except FedglError as exc:
            self.own.refuse(f"'{SETUP}' {exc}")
        overrides = {k: v for k, v in (("device", self.device), ("threads", self.threads))
                     if v is not None}
        if cfg.state_dir is not None:  # the party's own record is used, never a server's path
            overrides["state_dir"] = None
        if overrides:
            cfg = cfg.replace(**overrides)
        self.compute_threads = cfg.threads or None   # this run's, not an earlier run's
        if cfg.threads:
            import torch

            torch.set_num_threads(cfg.threads)
        client_cls = load_path(cfg.spec.deployment()[0])
        try:
            role = client_cls(self.shard, copy.deepcopy(cfg), seed)
            if hasattr(role, "use_input_record"):
                role.use_input_record(self.record)
            mode = cfg.secure_sum
            if (mode != "none" or cfg.encrypt_models) and hasattr(role, "install_identity"):
                role.install_identity(self.identity, self.roster,
                                      mode if mode in ("mask", "robust") else "auth",
                                      self.safety.secagg_threshold, cfg.secure_models)
        except FedglError as exc:
            self.own.refuse(f"'{SETUP}' {exc}")
        self.endpoint = Endpoint(role, f"client {self.client_id}")
        self._round_shown = None
        rounds = getattr(cfg, "rounds", None)
        self._rounds = rounds if isinstance(rounds, int) else None
        # the set-up's second step in the same round trip: the role's own public facts
        facts = self.endpoint.dispatch(FACTS, {}, SETUP_PHASE)
        aligned = (self.manifest.get("source") or {}).get("common_sha256")
        if isinstance(facts, dict) and isinstance(aligned, str):
            facts = {**facts, "alignment": aligned}   # a PSI-placed shard: its entities' digest
        reply = {"ok": True, "dp_releases": logged, "facts": facts}
        data = shard_record(self.manifest.get("source") or {}, self.client_id,
                            self.shard.num_nodes)
        if data:
            reply["data"] = data   # what the result records of this shard (environment.data)
        return reply

    @handles(MODEL, phases=(SETUP_PHASE,), states=("set-up",), enters="released",
             schema={"weights": RUN_MODEL, "card": Str(max_len=1 << 24)})
    def model(self, weights: Any, card: str) -> dict[str, Any]:
        """The trained model at the end of the run (once per run): taken where this
        organisation's settings say so, checked against the card's digest and the role's model,
        written under ``--out`` with the scores of the own nodes and their metrics
        (:func:`fedgl.deployment.model_release.accept_model`); the reply is the digest."""
        from fedgl.deployment.model_release import accept_model

        if self._context[1] != self.run_id:
            raise ValueError(f"it is for run {self._context[1]}, not run {self.run_id}")
        if not self.receive_model:
            raise ValueError("this organisation does not take the model (its policy's "
                             "receive_model: false, or fedgl client --no-model)")
        assert self.endpoint is not None
        reply = accept_model(self.endpoint.role, weights, card, self.out,
                             f"client {self.client_id}",
                             (self.manifest.get("source") or {}).get("classes"),
                             self.own_ids)
        print(f"model received (SHA-256 {reply['sha256'][:16]}...) -> {self.out / 'model'}"
              + (f"; {reply['scored']} own nodes scored -> {self.out / 'scores.csv'}"
                 if "scored" in reply else ""), flush=True)
        return reply

    @handles(OWN_PART, phases=(SETUP_PHASE,), states=("set-up",), enters="released",
             schema={"card": Str(max_len=1 << 24)})
    def own_part(self, card: str) -> dict[str, Any]:
        """The end of a vertical run (once per run): keep this party's own part of the split
        model under ``--out`` with the card, where its settings take the model
        (:func:`fedgl.deployment.model_release.keep_own_part`); the reply is its digest."""
        from fedgl.deployment.model_release import keep_own_part

        if self._context[1] != self.run_id:
            raise ValueError(f"it is for run {self._context[1]}, not run {self.run_id}")
        if not self.receive_model:
            raise ValueError("this organisation does not take the model (its policy's "
                             "receive_model: false, or fedgl client --no-model)")
        assert self.endpoint is not None
        reply = keep_own_part(self.endpoint.role, card, self.out,
                              (self.manifest.get("source") or {}).get("classes"), self.own_ids)
        print(f"own part of the model kept ({reply['part']}, SHA-256 {reply['sha256'][:16]}...) "
              f"-> {self.out / 'model'}"
              + (f"; {reply['scored']} common entities scored -> {self.out / 'scores.csv'}"
                 if "scored" in reply else ""), flush=True)
        return reply

    @handles(LOAD_PART, phases=(SETUP_PHASE,), states=("set-up",))
    def load_part(self) -> dict[str, Any]:
        """Scoring with a model split among the parties (``fedgl server --predict``): this
        party's own part, as it kept it under ``--out`` at the end of training, goes into its
        role, checked against its own card. Nothing of it is sent (asked again, it loads the
        same part again); the reply is its digest."""
        from fedgl.deployment.model_release import load_own_part

        if self._context[1] != self.run_id:
            raise ValueError(f"it is for run {self._context[1]}, not run {self.run_id}")
        assert self.endpoint is not None
        reply = load_own_part(self.endpoint.role, self.out)
        print(f"own part of the model loaded ({reply['part']}, SHA-256 "
              f"{reply['sha256'][:16]}...) from {self.out / 'model'}", flush=True)
        return reply

    @handles(NOT_ADMITTED, phases=(SETUP_PHASE,), states=("greeted",), enters="new",
             schema={"reason": Str(max_len=32)})
    def not_admitted(self, reason: str) -> dict[str, Any]:
        """The server did not admit this node to the run it greeted: one line why."""
        if self._context[1] != self.run_id:
            raise ValueError(f"it is for run {self._context[1]}, not run {self.run_id}")
        why = NOT_ADMITTED_WHY.get(reason)
        if why is None:
            raise ValueError(f"unknown reason {reason[:32]!r}")
        print(f"fedgl: client {self.client_id}: run {self.run_id} did not admit this node: "
              f"{why}", flush=True)
        return {}

    @handles(FINISHED, phases=(SETUP_PHASE,), states=("set-up", "released"), enters="finished",
             schema={"round": Int(0, 1 << 31)})
    def finished(self, round: int) -> dict[str, Any]:
        """The end of this run: one line saying so, with where this organisation's files are
        (its ``--out`` folder where it holds anything, its log file)."""
        if self._context[1] != self.run_id:
            raise ValueError(f"it is for run {self._context[1]}, not run {self.run_id}")
        where = [f"files in {self.out}"] if self.out.is_dir() and any(self.out.iterdir()) \
            else []
        if self.log_path is not None:
            where.append(f"log in {self.log_path}")
        rounds = f" after round {round}" if round else ""
        print(f"client {self.client_id}: run {self.run_id} finished{rounds}"
              f"{'; ' + ', '.join(where) if where else ''}; waiting for the next run (Ctrl-C "
              "stops)", flush=True)
        return {}

    def _own_records(self, cfg: Config, seed: int, run_tag: str, resumed: bool
                     ) -> tuple[Config, list[str]]:
        """The role's config with ``out`` at this party's own records for the run (its DP
        release log; a vertical party's checkpointed model), never the server's folder; and the
        DP releases logged there so far."""
        from fedgl.privacy.dp import logged_releases

        resumable = bool(cfg.checkpoint_every or resumed)
        keeps_model = resumable and cfg.spec.setting == "vertical"
        if cfg.dp_epsilon is None and not keeps_model:
            return cfg.replace(out=None), []
        if self.state_dir is None:
            if resumable:
                what = "log its DP releases" if cfg.dp_epsilon is not None else \
                    "keep its own model's checkpoints"
                raise ConfigError(f"the run can be resumed, so this client must {what}: start "
                                  "it with --state-dir DIR")
            return cfg.replace(out=None), []
        folder = self.state_dir / "runs" / run_tag
        # a run that can be resumed keeps the log (the local rule: fedgl.privacy.dp)
        every = cfg.checkpoint_every or (1 if resumed else 0)
        logged = logged_releases(folder, seed).get(str(self.client_id), []) \
            if cfg.dp_epsilon is not None else []
        return cfg.replace(out=str(folder), checkpoint_every=every), logged

    def types(self) -> dict[str, list[str]]:
        """The role's message types and their phases (the party's own are always served)."""
        if self.endpoint is None:   # greeted, perhaps not admitted; nothing else before set-up
            return {NOT_ADMITTED: [SETUP_PHASE]}
        own = {MODEL: [SETUP_PHASE], OWN_PART: [SETUP_PHASE],   # its own, after the set-up
               LOAD_PART: [SETUP_PHASE], FINISHED: [SETUP_PHASE]}
        # every declared type, also those the role's policy does not take: the relay forwards
        # them, and the party refuses them in its own one line ("not a message type")
        return {**own, **{t: list(h.phases)
                          for t, h in handler_table(type(self.endpoint.role)).items()}}

    def message(self, header: dict[str, Any], body: bytes) -> bytes:
        """One encoded server message: a set-up message to the party itself, any other to its
        role; the encoded reply (or :class:`ProtocolViolation`, recorded)."""
        node, run = header.get("node_id", -1), header.get("run_id", -1)
        self._context = (int(node) if isinstance(node, int) else -1,
                         int(run) if isinstance(run, int) else -1)
        phase = str(header.get("phase"))
        try:
            msg_type, payload = decode(Encoded.from_bytes(body))
        except WireError as exc:
            self.own.refuse(f"malformed message ({exc})")
        carried = header.get("type")
        if carried is not None and carried != msg_type:
            self.own.refuse(f"'{msg_type}' came as Flower message type '{carried}'")
        if msg_type in handler_table(Party):
            out = self.own.dispatch(msg_type, payload, phase)
        elif self.endpoint is None or self.protocol_state != "set-up" or \
                self._context[1] != self.run_id:
            self.own.refuse(f"'{msg_type}' arrived before this run's '{SETUP}'; the server must "
                            "set the run up first")
        else:
            out = self.endpoint.dispatch(msg_type, payload, phase)
            self._progress(payload)
        return encode(msg_type + ".reply", out).to_bytes()

    def _progress(self, payload: Any) -> None:
        """One line when the server's messages reach a new training round (a message that
        names its ``round``), so that the organisation sees the run advance."""
        r = payload.get("round") if isinstance(payload, dict) else None
        if isinstance(r, int) and not isinstance(r, bool) and r != self._round_shown:
            self._round_shown = r
            rounds = self._rounds
            print(f"client {self.client_id}: round {r}"
                  f"{f'/{rounds}' if rounds else ''}", flush=True)

    def answer(self, header: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        """One relayed request; a refusal is a one-line ``{"refused": ...}``."""
        op = header.get("op")
        with self.lock:
            try:
                if op == "types":
                    return {"types": self.types()}, b""
                if op == "message":
                    return {}, self.message(header, body)
                line = f"client {self.client_id}: unknown operation {op!r}"
            except ProtocolViolation as exc:   # its line names this client already
                line = str(exc)
            except (FedglError, RunAborted, WireError) as exc:
                line = f"client {self.client_id}: {exc}"
            except Exception as exc:  # noqa: BLE001 - the server gets one line, not a traceback
                line = f"client {self.client_id}: {type(exc).__name__}: {exc}"
            self.refused.append(line)
            print(f"refused: {line}", flush=True)
            return {"refused": line}, b""

    # ------------------------------------------------------------------ serving
    def frame_limit(self, header: dict[str, Any], length: int) -> int:
        """The most body bytes the party reads for a request with ``header``, decided before
        it reads any: the relay's token must match (when :meth:`serve` was given one); before a
        run is set up, and for the set-up messages, :data:`SETUP_MAX_BODY`; any other message,
        the organisation's ``max_message_bytes``. :class:`FrameRefused` otherwise."""
        if self._relay_token is not None and not hmac.compare_digest(
                str(header.get(TOKEN_KEY, "")).encode(), self._relay_token.encode()):
            raise FrameRefused("a request without this party's relay token (only the relay that "
                               "`fedgl client` started may ask)")
        if header.get("op") != "message":
            return 0
        msg_type = header.get("type") if isinstance(header.get("type"), str) else None
        set_up = self.endpoint is not None and self.protocol_state == "set-up"
        if not set_up or msg_type in handler_table(Party):
            most, why = SETUP_MAX_BODY, "the set-up messages' limit"
        else:
            most, why = self.max_message_bytes, "this client's --max-message-mb"
        if length > most:
            raise FrameRefused(f"a {length}-byte body for {msg_type!r} is over {most} bytes "
                               f"({why}); refused unread")
        return most

    def serve(self, path: str | Path, stop: threading.Event | None = None,
              token: str | None = None) -> None:
        """Answer the relay on the Unix socket ``path`` (mode 0600) until ``stop`` is set;
        with ``token``, only requests that carry it (the relay's credential)."""
        self._relay_token = token
        path = str(path)
        if os.path.exists(path):
            os.unlink(path)
        sock = _listening_socket(path)
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
        if self.compute_threads:
            # each message is answered on a new thread, and a thread starts with OpenMP's own
            # thread count (every core), whatever the set-up set: without this, each matrix
            # product of a 1-thread run spins a second OpenMP thread (4 times the CPU seconds
            # per message on a busy 2-core machine, docs/performance.md)
            import torch

            torch.set_num_threads(self.compute_threads)
        try:
            try:
                header, body = recv_frame(conn, self.frame_limit)
            except FrameRefused as exc:   # the body (if any) stays unread
                line = f"client {self.client_id}: {exc}"
                self.refused.append(line)
                print(f"refused: {line}", flush=True)
                send_frame(conn, {"refused": line})
                return
            reply_header, reply = self.answer(header, body)
            send_frame(conn, reply_header, reply)
        except (LinkError, OSError, DataError):
            pass
        finally:
            conn.close()
