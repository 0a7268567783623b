"""fedgl's Flower ClientApp: a relay between the SuperNode and the organisation's party.

The client role (its data, keys and protocol state) does not live here: it lives in the party
process, which listens on a private Unix socket. Under ``fedgl client`` this app runs in fedgl's
relay runner (:mod:`.relay_runner`), built per message with the party's socket and the relay's
token, whatever app the run submitted (without them it takes the socket from the node config key
``fedgl-party``, as a plain Flower SuperNode would give it). It registers one Flower handler per
protocol message type the party's role declares (message type ``<category>.<fedgl type with "."
as "__">``; category ``query`` for pre-training, ``train``, ``evaluate``), forwards each
message's fedgl bytes (:func:`fedgl_content`: one bytes value in the message's one record) and
phase to the party and returns its encoded reply, or the party's
one-line refusal. Each request names the fedgl type Flower carried (the party refuses a body of
another type) and carries the relay's token. The set-up messages are declared protocol types of
the party itself (``party.hello``: prove the client id by signing the server's challenge;
``party.setup``: the run's configuration, from which the party builds its role), carried in
phase ``setup`` as ``query.party__hello`` and ``query.party__setup`` and relayed the same way.
This module imports no torch and holds no data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedgl.federation.flower.local_link import (
    HELLO,
    SETUP,
    SETUP_PHASE,
    TOKEN_KEY,
    LinkError,
    ask,
)

PARTY_KEY = "fedgl-party"
CATEGORY = {"setup": "query", "pretrain": "query", "train": "train", "eval": "evaluate"}


def flower_action(msg_type: str) -> str:
    """The Flower action name of a fedgl message type (a Python identifier)."""
    return msg_type.replace(".", "__")


def flower_type(msg_type: str, phase: str) -> str:
    """The Flower message type that carries fedgl message ``msg_type`` in ``phase``."""
    return f"{CATEGORY[phase]}.{flower_action(msg_type)}"


#: the record of a fedgl message's header (its scalars) and, inline, of its encoded bytes
META = "fedgl-meta"
#: the key of the encoded fedgl message inside :data:`META`
BODY = "body"
#: the largest body carried inline: Flower's array chunk size, what it ships as one object anyway
INLINE_BODY = 5 * 1024 * 1024


def fedgl_content(header: dict[str, Any], body: bytes = b"", *, inline: bool = True
                  ) -> RecordDict:
    """A fedgl message as a Flower record dict: one config record :data:`META` with the
    header's scalars and the encoded message as one ``bytes`` value (Flower then carries three
    objects: the message, its record dict and this record). A body over :data:`INLINE_BODY`
    bytes, or with ``inline`` off (the layout before, kept for the benchmarks), travels as an
    array record ``fedgl`` beside it (Flower chunks it; the message, record dict, both records,
    the array and its chunks: six objects or more)."""
    meta = {k: v for k, v in header.items() if isinstance(v, str | int | float | bool)}
    if body and inline and len(body) <= INLINE_BODY:
        return RecordDict({META: ConfigRecord({**meta, BODY: body})})
    content = RecordDict({META: ConfigRecord(meta)})
    if body:
        content["fedgl"] = body_record(body)
    return content


def body_inline(content: RecordDict) -> bool:
    """Whether ``content`` carries its fedgl bytes inline (replies keep the layout they
    answer)."""
    meta = content.config_records.get(META)
    return meta is not None and isinstance(meta.get(BODY), bytes)


def has_body(content: RecordDict) -> bool:
    """Whether ``content`` carries fedgl bytes, in either layout."""
    return "fedgl" in content.array_records or body_inline(content)


def body_record(body: bytes) -> ArrayRecord:
    """fedgl bytes as a Flower array record (Flower chunks large arrays on the wire)."""
    return ArrayRecord({"message": Array(np.frombuffer(body, dtype=np.uint8))})


def record_body(content: RecordDict) -> bytes:
    """The fedgl bytes ``content`` carries, in either layout (KeyError: none)."""
    if body_inline(content):
        return bytes(content.config_records[META][BODY])
    return content.array_records["fedgl"]["message"].numpy().tobytes()


def _party(context: Context) -> str:
    path = context.node_config.get(PARTY_KEY)
    if not isinstance(path, str) or not path:
        raise LinkError(f"this SuperNode has no node config '{PARTY_KEY}'; start it with "
                        "`fedgl client`")
    return path


def reply_content(asked: RecordDict | None, header: dict[str, Any], body: bytes = b""
                  ) -> RecordDict:
    """A reply's records, in the layout of the message it answers (``asked``: its records)."""
    return fedgl_content(header, body, inline=asked is None or body_inline(asked)
                         or not has_body(asked))


def _reply(message: Message, header: dict[str, Any], body: bytes = b"") -> Message:
    asked = message.content if message.has_content() else None
    return Message(reply_content(asked, header, body), reply_to=message)


class RelayClientApp(ClientApp):
    """A ClientApp whose handlers are the party's declared message types. ``party`` is the
    party's socket (default: the node config ``fedgl-party``); ``token`` the relay's credential,
    sent with every request (:mod:`.relay_runner`)."""

    def __init__(self, party: str | None = None, token: str | None = None) -> None:
        super().__init__()
        self._socket = party
        self._token = token
        self._registered: set[str] = set()
        for msg_type in (HELLO, SETUP):
            self._add(CATEGORY[SETUP_PHASE], msg_type)

    def _ask(self, context: Context, header: dict[str, Any], body: bytes = b""
             ) -> tuple[dict[str, Any], bytes]:
        if self._token is not None:
            header = {**header, TOKEN_KEY: self._token}
        return ask(self._socket or _party(context), header, body)

    def _forward(self, msg_type: str):
        def handle(message: Message, context: Context) -> Message:
            meta = message.content.config_records.get(META, ConfigRecord())
            header = {k: v for k, v in meta.items() if isinstance(v, str | int | float | bool)}
            # the node and run ids are this SuperNode's own (Flower's context), never the
            # server's; the type is the one Flower carried (the party checks the body's)
            header.update(op="message", type=msg_type, node_id=int(context.node_id),
                          run_id=int(context.run_id))
            header.pop(TOKEN_KEY, None)
            body = record_body(message.content) if has_body(message.content) else b""
            try:
                head, reply = self._ask(context, header, body)
            except LinkError as exc:
                head, reply = {"refused": f"client relay: {exc}"}, b""
            return _reply(message, head, reply)

        return handle

    def _add(self, category: str, msg_type: str) -> None:
        name = f"{category}.{flower_action(msg_type)}"
        if name not in self._registered:
            getattr(self, category)(flower_action(msg_type))(self._forward(msg_type))
            self._registered.add(name)

    def __call__(self, message: Message, context: Context) -> Message:
        if message.metadata.message_type.split(".")[-1] not in map(flower_action, (HELLO, SETUP)):
            try:
                head, _ = self._ask(context, {"op": "types"})
            except LinkError as exc:
                return _reply(message, {"refused": f"client relay: {exc}"})
            for msg_type, phases in head.get("types", {}).items():
                for phase in phases:
                    if phase in CATEGORY:
                        self._add(CATEGORY[phase], msg_type)
        return super().__call__(message, context)


#: the component named in the deployment app's ``[tool.flwr.app.components] clientapp``
app = RelayClientApp()
