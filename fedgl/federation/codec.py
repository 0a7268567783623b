"""The wire encoding of a message: a JSON header and raw array buffers, never pickle.

A message is a type name plus a payload: a tree of dicts (string or integer keys), lists and
tuples whose leaves are arrays (torch tensors, numpy arrays), :class:`SparseRows` (packed:
:mod:`fedgl.federation.packed_rows`), bytes, numbers,
strings, booleans or None, or a registered wire type (e.g. a CKKS ciphertext). :func:`encode`
turns it into *frames*: one header (UTF-8 JSON: the type, the tree with every array replaced by
``{"$T"|"$N": buffer index, "dtype", "shape"}``) and one raw little-endian buffer per array.
:func:`decode` rebuilds the tree from those frames, building only the types listed above: a
decoder cannot be made to construct anything else, so a message cannot run code.

Layout of :func:`to_bytes` (one contiguous message, what a socket carries)::

    b"FGW1" | u32 header length | header | for each buffer: u64 length | bytes

:attr:`Encoded.nbytes` is exactly ``len(to_bytes(...))``: the ledger counts it as the message's
wire bytes.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedgl.federation.messages import SparseRows
from fedgl.federation.packed_rows import PackError, unpack

MAGIC = b"FGW1"
MAX_HEADER = 64 << 20  # bytes: a header beyond this is refused before it is parsed
MAX_DEPTH = 32
#: the largest array dimension a message may declare (far beyond any real array, far below
#: where a product of dimensions could overflow int64 arithmetic downstream)
MAX_DIM = 1 << 48

_TORCH_DTYPES = {str(dt).removeprefix("torch."): dt for dt in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool)}
_NUMPY_DTYPES = {np.dtype(t).str: np.dtype(t) for t in (
    np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint64,
    np.uint32, np.uint16, np.uint8, np.bool_)}


class WireError(ValueError):
    """A message that cannot be encoded or decoded (the one-line reason)."""


@dataclass(frozen=True)
class WireType:
    """A value type with its own encoding into a payload tree (of the basic leaves)."""

    tag: str
    cls: type
    to_tree: Callable[[Any], Any]
    from_tree: Callable[[Any], Any]


_WIRE_TYPES: dict[str, WireType] = {}


def wire_type(tag: str, to_tree: Callable[[Any], Any], from_tree: Callable[[Any], Any]):
    """Class decorator: let instances of the class cross the wire as ``to_tree(obj)``."""

    def register(cls: type) -> type:
        _WIRE_TYPES[tag] = WireType(tag, cls, to_tree, from_tree)
        return cls

    return register


def wire_types() -> dict[str, WireType]:
    """The registered wire types by tag."""
    return dict(_WIRE_TYPES)


@dataclass
class Encoded:
    """A message as frames: the JSON header and the array buffers (views, not copies)."""

    header: bytes
    buffers: list[memoryview]

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: magic, header length and header, each buffer with its length."""
        return len(MAGIC) + 4 + len(self.header) + sum(8 + b.nbytes for b in self.buffers)

    def to_bytes(self) -> bytes:
        parts = [MAGIC, struct.pack("<I", len(self.header)), self.header]
        for b in self.buffers:
            parts += [struct.pack("<Q", b.nbytes), b]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> Encoded:
        view = memoryview(data).cast("B")
        if bytes(view[:4]) != MAGIC:
            raise WireError("not a fedgl message (bad magic)")
        if len(view) < 8:
            raise WireError("truncated message header")
        (hlen,) = struct.unpack_from("<I", view, 4)
        if hlen > MAX_HEADER or 8 + hlen > len(view):
            raise WireError("message header length out of bounds")
        pos, header, buffers = 8 + hlen, bytes(view[8:8 + hlen]), []
        while pos < len(view):
            if pos + 8 > len(view):
                raise WireError("truncated message")
            (n,) = struct.unpack_from("<Q", view, pos)
            if pos + 8 + n > len(view):
                raise WireError("truncated message buffer")
            buffers.append(view[pos + 8:pos + 8 + n])
            pos += 8 + n
        return cls(header, buffers)


def encode(msg_type: str, payload: Any) -> Encoded:
    """Frames for ``payload`` under ``msg_type`` (see the module docstring)."""
    buffers: list[memoryview] = []
    tree = _to_tree(payload, buffers, 0)
    header = json.dumps({"type": msg_type, "payload": tree}, separators=(",", ":"),
                        allow_nan=True).encode()
    return Encoded(header, buffers)


def decode(enc: Encoded) -> tuple[str, Any]:
    """``(type, payload)``: every array a fresh, writable copy owned by the receiver."""
    if len(enc.header) > MAX_HEADER:
        raise WireError("message header too large")
    try:
        head = json.loads(enc.header)
    except RecursionError:  # e.g. 200,000 nested brackets: refused, never a Python error
        raise WireError("message header nested too deeply") from None
    except ValueError as exc:  # bad JSON or UTF-8, an integer of thousands of digits
        raise WireError(f"unreadable message header ({exc.__class__.__name__})") from None
    if not isinstance(head, dict) or not isinstance(head.get("type"), str) or "payload" not in head:
        raise WireError("message header lacks a type or payload")
    used: set[int] = set()
    payload = _from_tree(head["payload"], enc.buffers, used, 0)
    if len(used) != len(enc.buffers):
        raise WireError("message carries buffers its header does not name")
    return head["type"], payload


def roundtrip(msg_type: str, payload: Any) -> tuple[Any, int]:
    """What the receiver gets, and the wire bytes: encode then decode (the in-process wire)."""
    enc = encode(msg_type, payload)
    return decode(enc)[1], enc.nbytes


# ---------------------------------------------------------------------- tree <-> values
def _buffer(arr: np.ndarray, buffers: list[memoryview]) -> int:
    arr = np.ascontiguousarray(arr)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    buffers.append(memoryview(arr.reshape(-1).view(np.uint8)))
    return len(buffers) - 1


def _to_tree(obj: Any, buffers: list[memoryview], depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError("payload nested too deeply")
    kind = type(obj)   # the two commonest nodes first (exact types: no other branch takes them)
    if kind is torch.Tensor:
        return _tensor_node(obj, buffers)
    if kind is dict:
        return _dict_node(obj, buffers, depth)
    if obj is None or isinstance(obj, bool | str):
        return obj
    if isinstance(obj, int | float) and not isinstance(obj, np.generic):
        return obj
    if isinstance(obj, torch.Tensor):
        return _tensor_node(obj, buffers)
    if isinstance(obj, np.ndarray | np.generic):
        arr = np.asarray(obj)
        key = arr.dtype.newbyteorder("<").str if arr.dtype.byteorder == ">" else arr.dtype.str
        if key not in _NUMPY_DTYPES:
            raise WireError(f"array dtype {arr.dtype} cannot cross the wire")
        node = {"$N": _buffer(arr, buffers), "dtype": key, "shape": list(arr.shape)}
        if isinstance(obj, np.generic):
            node["scalar"] = True
        return node
    if isinstance(obj, bytes | bytearray | memoryview):
        buffers.append(memoryview(bytes(obj)) if not isinstance(obj, bytes) else memoryview(obj))
        return {"$B": len(buffers) - 1}
    if isinstance(obj, SparseRows):
        node, body = obj.packed()
        if node["dtype"] not in _NUMPY_DTYPES:
            raise WireError(f"array dtype {obj.values.dtype} cannot cross the wire")
        buffers.append(memoryview(body))
        return {"$P": len(buffers) - 1, **node}
    if isinstance(obj, dict):
        return _dict_node(obj, buffers, depth)
    if isinstance(obj, list):
        return [_to_tree(v, buffers, depth + 1) for v in obj]
    if isinstance(obj, tuple):
        return {"$L": [_to_tree(v, buffers, depth + 1) for v in obj]}
    for wt in _WIRE_TYPES.values():
        if type(obj) is wt.cls:
            return {"$W": wt.tag, "v": _to_tree(wt.to_tree(obj), buffers, depth + 1)}
    raise WireError(f"a {type(obj).__name__} cannot cross the wire (arrays, numbers, strings, "
                    "bytes and containers of them only)")


def _tensor_node(obj: torch.Tensor, buffers: list[memoryview]) -> dict:
    if obj.layout != torch.strided:
        raise WireError("a sparse torch tensor cannot cross the wire (send SparseRows)")
    t = obj.detach().cpu().contiguous()
    name = str(t.dtype).removeprefix("torch.")
    if name not in _TORCH_DTYPES:
        raise WireError(f"tensor dtype {name} cannot cross the wire")
    raw = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else np.zeros(0, np.uint8)
    return {"$T": _buffer(raw, buffers), "dtype": name, "shape": list(t.shape)}


def _dict_node(obj: dict, buffers: list[memoryview], depth: int) -> dict:
    items = []
    for k, v in obj.items():
        if type(k) is not str and (isinstance(k, bool) or not isinstance(k, str | int | np.integer)):
            raise WireError(f"dict key of type {type(k).__name__} cannot cross the wire")
        items.append([k if isinstance(k, str) else int(k), _to_tree(v, buffers, depth + 1)])
    return {"$D": items}


def _take(index: Any, buffers: list[memoryview], used: set[int]) -> memoryview:
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(buffers):
        raise WireError("message names a buffer it does not carry")
    if index in used:
        raise WireError("message names one buffer twice")
    used.add(index)
    return buffers[index]


def _shape(node: dict) -> tuple[int, ...]:
    """The declared shape: at most 8 dimensions, each an integer in [0, MAX_DIM]."""
    shape = node.get("shape")
    if not isinstance(shape, list) or len(shape) > 8 or not all(
            isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_DIM for s in shape):
        raise WireError("malformed array shape in message (at most 8 dimensions, each in "
                        f"0..{MAX_DIM})")
    return tuple(shape)


def _count(shape: tuple[int, ...]) -> int:
    """The number of elements, exact (Python integers: a product cannot wrap around)."""
    count = 1
    for s in shape:
        count *= s
    return count


def _from_tree(node: Any, buffers: list[memoryview], used: set[int], depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError("payload nested too deeply")
    if type(node) is not dict:   # (a JSON header's objects are exactly dicts)
        if node is None or isinstance(node, bool | int | float | str):
            return node
        if isinstance(node, list):
            return [_from_tree(v, buffers, used, depth + 1) for v in node]
        raise WireError("malformed payload node in message")
    if len(node) == 0:
        raise WireError("malformed payload node in message")
    if "$T" in node:
        dtype = _TORCH_DTYPES.get(node.get("dtype"))
        if dtype is None:
            raise WireError(f"unknown tensor dtype {node.get('dtype')!r} in message")
        shape, buf = _shape(node), _take(node["$T"], buffers, used)
        count = _count(shape)
        size = torch.empty(0, dtype=dtype).element_size()
        if buf.nbytes != count * size:
            raise WireError("tensor buffer size does not match its shape")
        if count == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(buf), dtype=dtype).reshape(shape)
    if "$N" in node:
        dtype = _NUMPY_DTYPES.get(node.get("dtype"))
        if dtype is None:
            raise WireError(f"unknown array dtype {node.get('dtype')!r} in message")
        shape, buf = _shape(node), _take(node["$N"], buffers, used)
        if buf.nbytes != _count(shape) * dtype.itemsize:
            raise WireError("array buffer size does not match its shape")
        arr = np.frombuffer(bytearray(buf), dtype=dtype).reshape(shape)
        return arr[()] if node.get("scalar") else arr
    if "$B" in node:
        return bytes(_take(node["$B"], buffers, used))
    if "$P" in node:
        dtype = _NUMPY_DTYPES.get(node.get("dtype"))
        if dtype is None:
            raise WireError(f"unknown array dtype {node.get('dtype')!r} in message")
        body = _take(node["$P"], buffers, used)
        try:
            indptr, indices, values, shape = unpack(node, body, dtype, MAX_DIM)
        except PackError as exc:
            raise WireError(str(exc)) from None
        rows = SparseRows(indptr, indices, values, shape)
        rows._packed = ({k: node[k] for k in ("shape", "nnz", "dtype", "table", "coded")},
                        bytes(body))  # its size as it crossed; not packed again
        return rows
    if "$D" in node:
        items = node["$D"]
        if not isinstance(items, list):
            raise WireError("malformed mapping in message")
        out: dict = {}
        for item in items:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str | int)
                    and not isinstance(item[0], bool)):
                raise WireError("malformed mapping entry in message")
            out[item[0]] = _from_tree(item[1], buffers, used, depth + 1)
        return out
    if "$L" in node:
        if not isinstance(node["$L"], list):
            raise WireError("malformed tuple in message")
        return tuple(_from_tree(v, buffers, used, depth + 1) for v in node["$L"])
    if "$W" in node:
        wt = _WIRE_TYPES.get(node["$W"])
        if wt is None:
            raise WireError(f"unknown value type {node['$W']!r} in message")
        return wt.from_tree(_from_tree(node.get("v"), buffers, used, depth + 1))
    raise WireError("malformed payload node in message")
