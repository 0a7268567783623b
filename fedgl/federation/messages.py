"""Message payloads: their size on the wire and defensive copies.

A payload is any nesting of dicts, lists and tuples whose leaves are tensors, numpy arrays,
numbers, strings or None. :func:`payload_nbytes` counts the bytes of the values a real transport
must carry: ``numel * element_size`` per tensor or array, 8 bytes per int or float, 1 per bool,
UTF-8 length per string. Dict keys and container structure are a fixed schema known to both ends
and are not counted.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def payload_nbytes(obj: Any) -> int:
    """Bytes of the values in ``obj`` (see module docstring)."""
    if obj is None:
        return 0
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, bool):
        return 1
    if isinstance(obj, int | float | np.integer | np.floating):
        return 8
    if isinstance(obj, str):
        return len(obj.encode())
    if isinstance(obj, bytes | bytearray):
        return len(obj)
    if isinstance(obj, dict):
        return sum(payload_nbytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(payload_nbytes(v) for v in obj)
    if hasattr(obj, "serialized_nbytes"):
        return int(obj.serialized_nbytes())
    raise TypeError(f"cannot size a payload of type {type(obj).__name__}")


def copy_payload(obj: Any) -> Any:
    """A deep copy in which no tensor or array shares memory with ``obj``."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if isinstance(obj, dict):
        return type(obj)((k, copy_payload(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return [copy_payload(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(copy_payload(v) for v in obj)
    return obj
