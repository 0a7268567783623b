"""The clients' public facts, learned through one set-up message on every runtime.

A server holds no data, so it cannot know the widths of the model it starts, the class count
or how many nodes each client holds. It asks: ``setup.facts`` (phase ``setup``, no fields) goes
to every client, and each client role answers from its own data only::

    setup.facts.reply = {setting: "horizontal" | "vertical", num_nodes: int,
                         num_features: int, num_classes: int[, alignment: str]}

``num_nodes`` is the number of nodes the client holds (horizontal: its own nodes; vertical: the
shared node set), ``num_features`` the width of its feature rows (vertical: its columns),
``num_classes`` the class count of the dataset the shard was written from; ``alignment``
(a vertical shard placed by ``fedgl psi place`` only) the SHA-256 of the common pseudonyms it
was aligned on, so parties placed from different PSI results are refused before training.
The ledger counts the message and its reply in phase ``setup`` like any other.

The same exchange runs on the local runtime (in-process parties), on Ray and on Flower; a
runtime whose set-up round trip already carried the answers (a Flower party answers
``setup.facts`` inside its ``party.setup`` reply, so a deployed set-up takes two round trips,
not three) hands them over in :attr:`answered` instead of asking again.

:func:`learn_facts` checks every answer against the reply's schema, then that the clients
agree: one setting (the algorithm's), one class count, and one feature width (horizontal) or
one node set size (vertical). Any disagreement stops the run before it starts, in one line.
The facts size the server's model and its bookkeeping only; they are never trusted for
anything privacy-relevant (aggregation weights come with each round's replies, privacy
settings are each client's own policy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedgl.errors import ConfigError
from fedgl.federation.ledger import SETUP
from fedgl.federation.protocol import Int, ProtocolViolation, Str, check_fields, handles

FACTS = "setup.facts"
#: what a client's ``setup.facts`` reply must be (checked before anything in it is used)
FACTS_REPLY = {"setting": Str(max_len=32), "num_nodes": Int(0, 1 << 40),
               "num_features": Int(1, 1 << 31), "num_classes": Int(1, 1 << 31),
               "alignment": Str(max_len=64)}
#: fields a reply may leave out: ``alignment``, the SHA-256 of the common pseudonyms a vertical
#: party's shard was aligned on by ``fedgl psi place`` (absent for any other shard)
FACTS_OPTIONAL = ("alignment",)
SETTINGS = ("horizontal", "vertical")


def facts_of(data: Any) -> dict[str, Any]:
    """The public facts of a client's own data (a :class:`~fedgl.data.client_data.ClientData`
    or :class:`~fedgl.data.vertical.VerticalClientData`)."""
    return {"setting": str(getattr(data, "setting", "horizontal")),
            "num_nodes": int(data.num_nodes), "num_features": int(data.num_features),
            "num_classes": int(data.num_classes)}


class FactsParty:
    """A client role's answer to ``setup.facts`` (mix into any role that holds ``data``)."""

    data: Any

    @handles(FACTS, phases=(SETUP,))
    def facts(self) -> dict[str, Any]:
        """This client's public facts, from its own data (see the module docstring)."""
        return facts_of(self.data)


@dataclass(frozen=True)
class Facts:
    """What the server learned: the setting, the class count, and per client its node count
    and feature width (keyed by client id, in the order the clients answered)."""

    setting: str
    num_classes: int
    nodes: dict[int, int]
    features: dict[int, int]

    @property
    def num_features(self) -> int:
        """The shared feature width (horizontal)."""
        return next(iter(self.features.values()))

    @property
    def num_nodes(self) -> int:
        """The shared node set's size (vertical)."""
        return next(iter(self.nodes.values()))

    def nodes_per_client(self) -> list[int]:
        return [self.nodes[k] for k in sorted(self.nodes)]

    def stats(self) -> dict[str, Any]:
        """The result's split statistics that a server can know (clients and their sizes)."""
        return {"clients": len(self.nodes), "nodes_per_client": self.nodes_per_client()}


def learn_facts(runtime: Any, setting: str) -> Facts:
    """Every client's public facts (one ``setup.facts`` exchange, or the answers the runtime's
    set-up round trip already carried), checked and agreed on; ``setting`` is the algorithm's.

    Raises :class:`~fedgl.federation.protocol.ProtocolViolation` for a malformed answer and
    :class:`~fedgl.errors.ConfigError` when the clients disagree (one line each)."""
    answered = getattr(runtime, "answered", None)
    replies = answered.pop(FACTS, None) if isinstance(answered, dict) else None
    if replies is None:
        replies = runtime.call(FACTS, None, phase=SETUP)
    if not replies:
        raise ConfigError("no client answered the set-up; start every client")
    facts = agree(replies, setting)
    try:   # the runtime remembers them (what a deployed run's model was trained on)
        runtime.facts = facts
    except AttributeError:
        pass
    return facts


def agree(replies: dict[int, Any], setting: str) -> Facts:
    """The facts of ``replies`` ({client: setup.facts reply}) once each is well-formed and they
    agree (see :func:`learn_facts`)."""
    for k in sorted(replies):
        reply = replies[k]
        bad = "not a record" if not isinstance(reply, dict) else \
            check_fields(reply, FACTS_REPLY, FACTS_OPTIONAL, {})
        if bad:
            raise ProtocolViolation(f"client {k}: malformed '{FACTS}' reply ({bad})")
    ks = sorted(replies)
    settings = _distinct(replies, "setting")
    if list(settings) != [setting]:
        raise ConfigError(f"the run is {setting} but the clients' shards are "
                          f"{_say(settings)}; write the shards for this algorithm with "
                          "`fedgl shard`")
    classes = _distinct(replies, "num_classes")
    if len(classes) != 1:
        raise ConfigError(f"the clients disagree on the class count ({_say(classes)}); write "
                          "every shard from one dataset with `fedgl shard`")
    key = "num_features" if setting == "horizontal" else "num_nodes"
    widths = _distinct(replies, key)
    if len(widths) != 1:
        what = "feature width" if key == "num_features" else "node count"
        raise ConfigError(f"the clients disagree on the {what} ({_say(widths)}); write every "
                          "shard from one dataset with `fedgl shard`")
    if setting == "vertical":
        aligned = _distinct({k: {"alignment": replies[k].get("alignment", "")} for k in ks},
                            "alignment")
        if len(aligned) != 1:
            raise ConfigError(f"the parties' shards were aligned on different entities "
                              f"(common-id digests {_say(aligned)}); run `fedgl psi` again with "
                              "every party and place each shard from its result")
    return Facts(setting, int(replies[ks[0]]["num_classes"]),
                 {k: int(replies[k]["num_nodes"]) for k in ks},
                 {k: int(replies[k]["num_features"]) for k in ks})


def _distinct(replies: dict[int, dict], key: str) -> dict[Any, list[int]]:
    """{value: the clients that said it} for one field."""
    out: dict[Any, list[int]] = {}
    for k in sorted(replies):
        out.setdefault(replies[k][key], []).append(k)
    return out


def _say(values: dict[Any, list[int]]) -> str:
    return "; ".join(f"{v!r} at client{'s' if len(ks) > 1 else ''} {', '.join(map(str, ks))}"
                     for v, ks in sorted(values.items(), key=lambda kv: str(kv[0])))
