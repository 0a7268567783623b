"""Field helpers shared by every config section and every algorithm's options.

A field is a dataclass field whose metadata carries its ``help`` text (shown by
``fedgl run --help``). :func:`check_fields` checks the declared type of every field, so a
section or an options class only states its ranges and choices.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from typing import Any

from fedgl.errors import ConfigError

INT64 = 2**63


def option(default: Any, help: str, **extra: Any) -> Any:
    """A config field with a default and one line of help (``extra`` goes into its metadata)."""
    return dataclasses.field(default=default, metadata={"help": help, **extra})


def field_kind(f: dataclasses.Field) -> str:
    """``bool``, ``int``, ``float`` or ``str`` from a field's annotation (``X | None`` -> X;
    a string annotation, as under ``from __future__ import annotations``, or the type itself)."""
    text = f.type.__name__ if isinstance(f.type, type) else str(f.type)
    return text.split(" ")[0].split("|")[0].strip()


def is_optional(f: dataclasses.Field) -> bool:
    return "None" in str(f.type)


def check_fields(obj: Any) -> None:
    """Check (and normalise) every field's value against its declared type.

    numpy scalars are accepted as the Python numbers they are; ints are accepted for floats.
    """
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if value is None:
            if is_optional(f):
                continue
            raise ConfigError(f"{f.name} must be set (got null)")
        kind = field_kind(f)
        if kind == "bool":
            ok = isinstance(value, bool) or (type(value).__module__ == "numpy"
                                             and type(value).__name__ in ("bool_", "bool"))
            value = bool(value) if ok else value
        elif kind == "int":
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
            value = int(value) if ok else value
            if ok and not -INT64 <= value < INT64:
                raise ConfigError(f"{f.name} must lie in -2**63..2**63-1, the range torch and "
                                  f"numpy accept (got {value})")
        elif kind == "float":
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
            if ok:
                value = float(value)
                if not math.isfinite(value):
                    raise ConfigError(f"{f.name} must be a finite number (got {value})")
        else:
            ok = isinstance(value, str)
        if not ok:
            raise ConfigError(f"{f.name} must be of type {kind} (got {value!r})")
        object.__setattr__(obj, f.name, value)


def choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        close = difflib.get_close_matches(str(value), choices, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"unknown {name} '{value}'{hint}; choose one of {', '.join(choices)}")


def at_least(name: str, value: float, low: float) -> None:
    if value < low:
        raise ConfigError(f"{name} must be >= {low} (got {value}); use {low} or more")


def at_most(name: str, value: float, high: float, why: str = "") -> None:
    """Upper bound of a key; ``why`` says where the bound comes from."""
    if value > high:
        raise ConfigError(f"{name} must be <= {high:g} (got {value:g}){'; ' + why if why else ''}")


def parse_num_neighbors(text: str, layers: int, key: str = "num_neighbors") -> list[int]:
    """``"15,10"`` -> ``[15, 10]``: neighbours sampled per hop, **first layer first** as PyG's
    ``NeighborLoader(num_neighbors=[15, 10])`` (15 one-hop neighbours of each seed, then 10 of
    each of those). One number applies to every layer; ``""``, ``"0"``, ``"-1"`` or ``"all"``
    mean all neighbours (``-1``). The list has ``layers`` entries."""
    text = str(text).strip()
    if text in ("", "0", "-1", "all"):
        return [-1] * layers
    parts = [p.strip() for p in text.split(",")]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ConfigError(f"{key} must be comma-separated integers, first layer first, e.g. "
                          f"15,10 (got '{text}')") from None
    if any(v == 0 or v < -1 for v in values):
        raise ConfigError(f"{key} must be positive (or -1 for all neighbours); got '{text}'")
    if len(values) == 1:
        return values * layers
    if len(values) != layers:
        raise ConfigError(f"{key} '{text}' gives {len(values)} numbers for {layers} layers; "
                          f"give one per layer (first layer first) or a single number")
    return values
