"""The protocol between parties: message types, their payload schemas and the handlers each role
declares (as Flower's Message API registers a handler per message type).

A client role declares what it accepts, next to its algorithm::

    class MyClient:
        @handles("myalgo.fit", phases=("train",),
                 schema={"weights": Weights(), "local_steps": Int(1, 10_000)})
        def fit(self, weights, local_steps): ...

The transport (:mod:`~fedgl.federation.runtime`, Ray, Flower) carries encoded messages
(:mod:`~fedgl.federation.codec`) and hands each to the receiving role's :class:`Endpoint`, which
refuses, with a one-line :class:`ProtocolViolation` and without calling anything, a message whose
type the role does not declare, that arrives in a phase or state its handler does not accept, or
whose payload does not match the schema (names, types, dtypes, shape bounds). Nothing else of a
role is reachable: no method name or Python object crosses. Set-up steps (identity, roster) are
not message types: they are done by the party itself when it is built.

Policy: a handler may declare the kind of step it is (``needs``: a tag such as
``"plaintext-sums"``); the role's ``protocol_tags()`` (its own safety policy,
:mod:`fedgl.privacy.policy`) names the tags it enables, and its :class:`Endpoint` serves only
untagged handlers and those whose tag is enabled. A disabled step is not a message type of that
role: refused like an undeclared one, on every runtime (they all use :class:`Endpoint`).

Riders: a handler may let an optional field of its message request the step of another of the
role's message types (``rides={"evaluate": "fedavg.evaluate"}``: the next round's fit carries the
evaluation of the model it brings, one exchange instead of two). The :class:`Endpoint` accepts
such a message only if the role would accept the carried type itself, alone, in that phase and
state, with the fields of the message its schema names (its policy included): a step a role does
not take cannot ride on one it does. It runs the carried handler first, then the message's own
without the rider field, and the reply holds both replies' fields.

States: a role may keep ``self.protocol_state`` (a string, default ``"ready"``); a handler may
require one of ``states`` and move the role to ``enters`` after it succeeds. Multi-step protocols
(secure sums, streams) use this so a step cannot be replayed or taken out of order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedgl.errors import RunAborted
from fedgl.federation.codec import Encoded, WireError, decode, encode, wire_types
from fedgl.federation.messages import SparseRows


class ProtocolViolation(RunAborted):
    """A party refused a message: it is not in its protocol, out of order, or malformed (the
    run stops with this one line)."""


# ---------------------------------------------------------------------- payload specs
class Spec:
    """A payload field's schema. ``check`` returns None when ``value`` conforms, else why not."""

    def check(self, value: Any, limits: Mapping[str, int]) -> str | None:
        raise NotImplementedError


def _bound(bound: int | str | None, limits: Mapping[str, int]) -> int | None:
    if bound is None or isinstance(bound, int):
        return bound
    return limits.get(bound)


@dataclass(frozen=True)
class Arr(Spec):
    """A tensor (or numpy array) of one of ``dtypes`` with ``ndim`` dimensions; ``rows`` and
    ``cols`` bound the first two dimensions (an int, or the name of a limit the role states,
    e.g. ``"num_nodes"``); ``finite`` refuses NaN/inf."""

    dtypes: tuple[str, ...] = ("float32", "float64")
    ndim: int | None = None
    rows: int | str | None = None
    cols: int | str | None = None
    finite: bool = True
    sparse: bool = False  # SparseRows accepted too

    def check(self, value: Any, limits: Mapping[str, int]) -> str | None:
        if self.sparse and isinstance(value, SparseRows):
            shape, dtype, data = value.shape, str(value.values.dtype), value.values
        elif isinstance(value, torch.Tensor):
            shape, dtype, data = tuple(value.shape), str(value.dtype).removeprefix("torch."), value
        elif isinstance(value, np.ndarray):
            shape, dtype, data = value.shape, str(value.dtype), value
        else:
            return f"expected an array, got {type(value).__name__}"
        if dtype not in self.dtypes:
            return f"dtype {dtype} not in {'/'.join(self.dtypes)}"
        if self.ndim is not None and len(shape) != self.ndim:
            return f"{len(shape)} dimensions, expected {self.ndim}"
        for axis, bound in ((0, self.rows), (1, self.cols)):
            limit = _bound(bound, limits)
            if limit is not None and len(shape) > axis and shape[axis] > limit:
                return f"dimension {axis} is {shape[axis]} > {limit}"
        if self.finite and dtype.startswith(("float", "bfloat")):
            arr = torch.as_tensor(data)
            if arr.numel() and not bool(torch.isfinite(arr).all()):
                return "non-finite values"
        return None


@dataclass(frozen=True)
class Int(Spec):
    lo: int | None = None
    hi: int | str | None = None

    def check(self, value: Any, limits: Mapping[str, int]) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            return f"expected an integer, got {type(value).__name__}"
        hi = _bound(self.hi, limits)
        if (self.lo is not None and value < self.lo) or (hi is not None and value > hi):
            return f"{int(value)} outside [{self.lo}, {hi}]"
        return None


@dataclass(frozen=True)
class Float(Spec):
    lo: float | None = None
    hi: float | None = None

    def check(self, value: Any, limits: Mapping[str, int]) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
            return f"expected a number, got {type(value).__name__}"
        if not math.isfinite(float(value)):
            return "non-finite number"
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            return f"{float(value)} outside [{self.lo}, {self.hi}]"
        return None


@dataclass(frozen=True)
class Bool(Spec):
    def check(self, value: Any, limits: Mapping[str, int]) -> str | None:
        return None if isinstance(value, bool | np.bool_) else "expected true/false"


@dataclass(frozen=True)
class Str(Spec):
    choices: tuple[str, ...] | None = None
    max_len: int = 256

    def check(self, value: Any, limits: Mapping[str, int]) -> str | None:
        if not isinstance(value, str) or len(value) > self.max_len:
            return "expected a short string"
        if self.choices is not None and value not in self.choices:
            return f"{value!r} not one of {', '.join(self.choices)}"
        return None


@dataclass(frozen=True)
class Bytes(Spec):
    max_len: int = 1 << 30

    def check(self, value: Any, limits: Mapping[str, int]) -> str | None:
        if not isinstance(value, bytes) or len(value) > self.max_len:
            return "expected bytes"
        return None


@dataclass(frozen=True)
class Opt(Spec):
    """``inner`` or None."""

    inner: Spec

    def check(self, value: Any, limits: Mapping[str, int]) -> str | None:
        return None if value is None else self.inner.check(value, limits)


@dataclass(frozen=True)
class Seq(Spec):
    """A list or tuple of ``item`` (at most ``max_len``: an int or a limit's name)."""

    item: Spec
    max_len: int | str | None = None

    def check(self, value: Any, limits: Mapping[str, int]) -> str | None:
        if not isinstance(value, list | tuple):
            return f"expected a list, got {type(value).__name__}"
        limit = _bound(self.max_len, limits)
        if limit is not None and len(value) > limit:
            return f"{len(value)} items > {limit}"
        for i, v in enumerate(value):
            why = self.item.check(v, limits)
            if why:
                return f"[{i}]: {why}"
        return None


@dataclass(frozen=True)
class MapOf(Spec):
    """A mapping from ``key`` to ``value`` (at most ``max_len`` entries)."""

    key: Spec
    value: Spec
    max_len: int | str | None = None

    def check(self, value: Any, limits: Mapping[str, int]) -> str | None:
        if not isinstance(value, dict):
            return f"expected a mapping, got {type(value).__name__}"
        limit = _bound(self.max_len, limits)
        if limit is not None and len(value) > limit:
            return f"{len(value)} entries > {limit}"
        for k, v in value.items():
            why = self.key.check(k, limits) or self.value.check(v, limits)
            if why:
                return f"[{k!r}]: {why}"
        return None


@dataclass(frozen=True)
class Record(Spec):
    """A mapping with exactly these named fields (``optional`` ones may be absent)."""

    fields: Mapping[str, Spec]
    optional: tuple[str, ...] = ()

    def check(self, value: Any, limits: Mapping[str, int]) -> str | None:
        if not isinstance(value, dict):
            return f"expected a record, got {type(value).__name__}"
        return check_fields(value, self.fields, self.optional, limits)


@dataclass(frozen=True)
class OneOf(Spec):
    """Any one of ``options``."""

    options: tuple[Spec, ...]

    def check(self, value: Any, limits: Mapping[str, int]) -> str | None:
        whys = [o.check(value, limits) for o in self.options]
        return None if any(w is None for w in whys) else " / ".join(str(w) for w in whys)


@dataclass(frozen=True)
class Wire(Spec):
    """A value of the registered wire type ``tag`` (:func:`~fedgl.federation.codec.wire_type`)."""

    tag: str

    def check(self, value: Any, limits: Mapping[str, int]) -> str | None:
        wt = wire_types().get(self.tag)
        return None if wt is not None and type(value) is wt.cls else f"expected a {self.tag}"


def Weights() -> Spec:  # noqa: N802 - reads as a type in schemas
    """A model's state dict: parameter name -> float tensor (not required finite: a diverged
    model is the run's divergence check's business, and reveals nothing)."""
    return MapOf(Str(max_len=512), Arr(("float32", "float64", "float16", "bfloat16"),
                                       finite=False), max_len=4096)


def Any_() -> Spec:  # noqa: N802
    """Any value the codec can carry (for fields whose content the handler checks itself)."""
    return _Anything()


class _Anything(Spec):
    def check(self, value: Any, limits: Mapping[str, int]) -> str | None:
        return None


def check_fields(payload: Mapping, fields: Mapping[str, Spec], optional: tuple[str, ...],
                 limits: Mapping[str, int]) -> str | None:
    extra = sorted(set(payload) - set(fields), key=str)
    if extra:
        return f"unexpected field {extra[0]!r}"
    for name, spec in fields.items():
        if name not in payload:
            if name in optional:
                continue
            return f"missing field {name!r}"
        why = spec.check(payload[name], limits)
        if why:
            return f"field {name!r}: {why}"
    return None


# ---------------------------------------------------------------------- handlers
@dataclass(frozen=True)
class Handler:
    """One message type a role accepts: the method that handles it, its payload schema, the
    phases and states in which it is accepted, and the state it leaves the role in."""

    type: str
    method: str
    schema: Mapping[str, Spec] = field(default_factory=dict)
    optional: tuple[str, ...] = ()
    phases: tuple[str, ...] = ("pretrain", "train", "eval")
    states: tuple[str, ...] | None = None
    enters: str | None = None
    needs: str | None = None
    rides: Mapping[str, str] = field(default_factory=dict)


def handles(msg_type: str, *, schema: Mapping[str, Spec] | None = None,
            optional: tuple[str, ...] = (), phases: tuple[str, ...] = ("pretrain", "train", "eval"),
            states: tuple[str, ...] | None = None, enters: str | None = None,
            needs: str | None = None, rides: Mapping[str, str] | None = None) -> Callable:
    """Method decorator: declare the method as the handler of ``msg_type`` (``needs``: the tag
    a role's policy must enable for it to be served; None: always served; ``rides``: optional
    fields that, when set, request the step of another message type, see the module
    docstring)."""

    def mark(fn: Callable) -> Callable:
        fn.__fedgl_handler__ = dict(type=msg_type, schema=dict(schema or {}),
                                    optional=tuple(optional), phases=tuple(phases),
                                    states=states, enters=enters, needs=needs,
                                    rides=dict(rides or {}))
        return fn

    return mark


def not_a_message(fn: Callable) -> Callable:
    """Method decorator: a subclass's override that withdraws the message type its base class
    declared for this method (the role does not take part in that step)."""
    fn.__fedgl_not_a_message__ = True
    return fn


def handler_table(cls: type) -> dict[str, Handler]:
    """Every message type ``cls`` (and its bases) declares, by type name. A subclass may
    re-declare a type (its handler wins); declaring one type on two methods is an error."""
    cached = cls.__dict__.get("_fedgl_handlers")
    if cached is not None:
        return cached
    table: dict[str, Handler] = {}
    for klass in reversed(cls.__mro__):
        for name, fn in vars(klass).items():
            fn = getattr(fn, "__func__", fn)
            if getattr(fn, "__fedgl_not_a_message__", False):  # a subclass withdraws a type
                table = {t: h for t, h in table.items() if h.method != name}
                continue
            spec = getattr(fn, "__fedgl_handler__", None)
            if spec is not None:  # a subclass re-declaring a type replaces its base's handler
                table[spec["type"]] = Handler(method=name, **spec)
    # a method overridden without the decorator keeps its base's declaration (same name)
    type.__setattr__(cls, "_fedgl_handlers", table)
    return table


def enabled_table(cls: type, tags: frozenset[str] | set[str]) -> dict[str, Handler]:
    """The message types of ``cls`` that a role enabling ``tags`` serves: the untagged ones and
    those whose ``needs`` is among ``tags``."""
    return {t: h for t, h in handler_table(cls).items() if h.needs is None or h.needs in tags}


def role_tags(role: Any) -> frozenset[str]:
    """The tags ``role``'s policy enables (``role.protocol_tags()``; none if it states none)."""
    fn = getattr(role, "protocol_tags", None)
    return frozenset(fn()) if fn is not None else frozenset()


def message_type_for(cls: type, method: str) -> str:
    """The message type whose handler is ``method`` (how servers name what they send)."""
    for t, h in handler_table(cls).items():
        if h.method == method:
            return t
    raise ProtocolViolation(f"{cls.__name__} declares no message handled by {method!r}")


class Endpoint:
    """A role behind the wire: decodes a message, checks it against the role's handler table,
    runs the handler, encodes the reply. Every refusal is recorded in :attr:`refused`. Its table
    is the role class's, filtered by the role's policy (:func:`role_tags`) when it is built."""

    def __init__(self, role: Any, name: str = "client") -> None:
        self.role = role
        self.name = name
        self.tags = role_tags(role)
        self.table = enabled_table(type(role), self.tags)
        self.refused: list[str] = []

    def limits(self) -> Mapping[str, int]:
        fn = getattr(self.role, "protocol_limits", None)
        return fn() if fn is not None else {}

    def accept(self, msg_type: str, payload: Any, phase: str) -> Handler:
        """The handler for a decoded message, or :class:`ProtocolViolation` (recorded)."""
        handler = self.table.get(msg_type)
        why = self._refusal(msg_type, handler, payload, phase)
        if why is None and handler is not None:
            for name, carried in riders(handler, payload):   # as if it had come alone
                why = self._refusal(carried, self.table.get(carried),
                                    rider_payload(self.table.get(carried), payload), phase)
                if why is not None:
                    why = f"'{msg_type}' requests field {name!r}: {why}"
                    break
        if why is not None:
            return self.refuse(why)
        return handler

    def _refusal(self, msg_type: str, handler: Handler | None, payload: Any, phase: str
                 ) -> str | None:
        """Why the role refuses ``msg_type`` with ``payload`` in ``phase`` and its state, or
        None."""
        why = None
        if handler is None:
            why = f"'{msg_type}' is not a message type of {type(self.role).__name__}"
            declared = handler_table(type(self.role)).get(msg_type)
            if declared is not None:  # declared, but a step this role's policy does not take
                why += f" (its policy does not take '{declared.needs}' steps)"
        elif phase not in handler.phases:
            why = f"'{msg_type}' is not accepted in phase {phase}"
        elif handler.states is not None and \
                getattr(self.role, "protocol_state", "ready") not in handler.states:
            why = (f"'{msg_type}' is out of order (state "
                   f"{getattr(self.role, 'protocol_state', 'ready')})")
        elif not isinstance(payload, dict) or not all(isinstance(k, str) for k in payload):
            why = f"'{msg_type}' payload is not a record of named fields"
        else:
            why = check_fields(payload, handler.schema, handler.optional, self.limits())
            if why:
                why = f"'{msg_type}' {why}"
        return why

    def refuse(self, why: str):
        line = f"{self.name} refused a message: {why}"
        self.refused.append(line)
        raise ProtocolViolation(line)

    def dispatch(self, msg_type: str, payload: Any, phase: str) -> Any:
        """Run the handler of a decoded, checked message; its reply (a record or None). The
        steps its riders request run first, each as its own handler, and their replies'
        fields join the reply (:func:`with_riders`)."""
        handler = self.accept(msg_type, payload, phase)
        first = [self._run(carried, self.table[carried],
                           rider_payload(self.table[carried], payload))
                 for _, carried in riders(handler, payload)]
        own = {k: v for k, v in payload.items() if k not in handler.rides}
        return with_riders(self._run(msg_type, handler, own), first)

    def _run(self, msg_type: str, handler: Handler, payload: dict) -> Any:
        try:
            out = getattr(self.role, handler.method)(**payload)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError,
                NotImplementedError) as exc:
            # a payload that passed the schema but not the handler's own checks (or a crafted
            # structure deeper than the schema states): refused, one line
            self.refuse(f"'{msg_type}' could not be handled ({type(exc).__name__}: {exc})")
        if handler.enters is not None:
            self.role.protocol_state = handler.enters
        return out

    def handle(self, message: Encoded, phase: str) -> Encoded:
        """Decode, check, run, encode: what a transport calls with a received message."""
        try:
            msg_type, payload = decode(message)
        except WireError as exc:
            self.refuse(f"malformed message ({exc})")
        out = self.dispatch(msg_type, payload, phase)
        return encode(msg_type + ".reply", out)


def riders(handler: Handler, payload: Mapping) -> list[tuple[str, str]]:
    """The ``(field, carried type)`` of the riders ``payload`` sets (see the module
    docstring)."""
    return [(name, carried) for name, carried in handler.rides.items() if payload.get(name)]


def rider_payload(carried: Handler | None, payload: Mapping) -> dict:
    """The carried step's payload: the fields of its own schema that the message holds."""
    if carried is None:
        return {}
    return {k: payload[k] for k in carried.schema if k in payload}


def with_riders(out: Any, first: list[Any]) -> Any:
    """A reply with its riders' replies: their fields after the handler's own. A field that two
    of them both answer is an error of the handlers' declarations (one would hide the other),
    never overwritten silently."""
    if not first:
        return out
    merged = dict(out or {})
    for extra in first:
        clash = sorted(set(merged) & set(extra or {}))
        if clash:
            raise ProtocolViolation(f"a rider's reply field {clash[0]!r} is also answered by the "
                                    "message it rides on; give the rider's reply fields their "
                                    "own names")
        merged.update(extra or {})
    return merged


def bind_many(cls: type, msg_type: str) -> Callable | None:
    """The class's batched handler for a broadcast ``msg_type`` (``<method>_many``), if any."""
    handler = handler_table(cls).get(msg_type)
    if handler is None:
        return None
    return getattr(cls, f"{handler.method}_many", None)
