"""Reading Planetoid pickles without running them: fedgl's own interpreter of the pickle format.

``pickle.load`` calls whatever callable a file names, and even a restricted ``find_class`` leaves
the ``BUILD`` instruction free to set attributes on any object the file can reach, a library
class included (a data file could replace ``scipy.sparse.csr_matrix.toarray`` for the whole
process). :func:`restricted_load` therefore never hands a file's instructions to Python's
unpickler. It walks the instruction stream itself (:func:`pickletools.genops` only parses it) and
understands exactly what the Planetoid files hold:

- plain data: ``None``, booleans, numbers, strings, bytes, tuples, lists and dicts;
- numpy arrays (``numpy.core.multiarray._reconstruct`` of ``numpy.ndarray`` with a numeric
  ``numpy.dtype``) and numpy scalars, built by fedgl from their raw bytes (``numpy.frombuffer``);
- scipy CSR matrices, built by fedgl as a :class:`~fedgl.data.csr.CSR` from the arrays the
  file's state names, and checked as SciPy's ``check_format(full_check=True)`` checks;
- ``collections.defaultdict(list)``, read as a plain dict (the Planetoid graph).

A global outside the allow-list of (module, name) pairs, a dotted name, any call other than those
constructors, ``BUILD`` on anything but a fresh array, dtype or sparse matrix of this file, an
object-dtype array, or any other instruction is refused with a one-line
:class:`~fedgl.errors.DataError` before anything is built: nothing the file names is ever looked
up, called or modified, so no class in the process can change.
"""

from __future__ import annotations

import io
import os
import pickletools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fedgl.data.csr import CSR
from fedgl.errors import DataError

#: files up to this size are read into memory before they are parsed
IN_MEMORY_BYTES = 256 << 20

# (module, name) a Planetoid file may name -> what fedgl builds for it. Python-2 pickles say
# ``__builtin__``; numpy moved ``core`` to ``_core`` in 2.0; scipy moved the csr module to
# ``_csr``. Nothing is imported from these modules: the names only select a fedgl constructor.
PLANETOID_GLOBALS: dict[tuple[str, str], str] = {
    ("numpy.core.multiarray", "_reconstruct"): "reconstruct",
    ("numpy._core.multiarray", "_reconstruct"): "reconstruct",
    ("numpy", "ndarray"): "ndarray",
    ("numpy", "dtype"): "dtype",
    ("numpy.core.multiarray", "scalar"): "scalar",
    ("numpy._core.multiarray", "scalar"): "scalar",
    ("scipy.sparse.csr", "csr_matrix"): "csr",
    ("scipy.sparse._csr", "csr_matrix"): "csr",
    ("scipy.sparse", "csr_matrix"): "csr",
    ("collections", "defaultdict"): "defaultdict",
    ("__builtin__", "list"): "list",
    ("builtins", "list"): "list",
    # how Python 3 writes the same types at other protocols: bytes at protocol 0-2, a class
    # instance at protocol 0-1, an array at protocol 5
    ("_codecs", "encode"): "encode",
    ("__builtin__", "bytes"): "bytes",
    ("builtins", "bytes"): "bytes",
    ("copy_reg", "_reconstructor"): "reconstructor",
    ("copyreg", "_reconstructor"): "reconstructor",
    ("__builtin__", "object"): "object",
    ("builtins", "object"): "object",
    ("numpy.core.numeric", "_frombuffer"): "frombuffer",
    ("numpy._core.numeric", "_frombuffer"): "frombuffer",
}
# The attributes a pickled csr_matrix's state may carry (scipy 0.x to 1.x spellings).
CSR_STATE_KEYS = frozenset({"data", "indices", "indptr", "_shape", "shape", "format", "maxprint",
                            "_has_sorted_indices", "_cs_matrix__has_sorted_indices",
                            "_has_canonical_format", "has_sorted_indices"})
NUMERIC_KINDS = "biufc"

_CONSTANTS = frozenset({
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
    "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8"})


class _Refused(Exception):
    """The file asks for something a Planetoid file never needs (message: what)."""


class _Corrupt(Exception):
    """The instruction stream does not fit together (message: what)."""


class _Global:
    """A name from the allow-list, as a token: it selects a constructor, it is never resolved."""

    __slots__ = ("role", "name")

    def __init__(self, role: str, name: str) -> None:
        self.role, self.name = role, name


class _Fresh:
    """An object this file asked for and fedgl builds once its state arrives (one ``BUILD``)."""

    __slots__ = ("kind", "value", "built")

    def __init__(self, kind: str, value: Any = None) -> None:
        self.kind, self.value, self.built = kind, value, False


def restricted_load(path: str | Path, *, fix: str = "replace it with an intact copy") -> Any:
    """The content of the pickle ``path``, built by fedgl from the Planetoid types only.

    Raises :class:`DataError` (one line, naming the file, the refused request and ``fix``) for
    a file that asks for anything else, and for a damaged one."""
    try:
        with open(path, "rb") as f:
            # parsed from memory where the file is of a data file's size: the parser asks for
            # its position at every instruction, a system call on a file (Cora's graph: 24,000
            # instructions, 14 against 6 ms)
            small = os.fstat(f.fileno()).st_size <= IN_MEMORY_BYTES
            return _finish(_run(pickletools.genops(io.BytesIO(f.read()) if small else f)), {})
    except _Refused as exc:
        raise DataError(f"'{path}' asks to construct {exc}, which a data file never needs: refused "
                        f"without running it; {fix}") from None
    except _Corrupt as exc:
        raise DataError(f"'{path}' could not be read ({exc}); {fix}") from None
    except Exception as exc:  # noqa: BLE001 - any other failure means a corrupt file
        raise DataError(f"'{path}' could not be read ({type(exc).__name__}); {fix}") from None


def _run(ops: Iterator[tuple[Any, Any, int | None]]) -> Any:
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}

    def pop_mark() -> list[Any]:
        if not marks:
            raise _Corrupt("an instruction needs a mark that is not there")
        start = marks.pop()
        items = stack[start:]
        del stack[start:]
        return items

    for op, arg, _pos in ops:
        name = op.name
        if name in ("PROTO", "FRAME"):
            continue
        if name == "STOP":
            if len(stack) != 1 or marks:
                raise _Corrupt("the stream ends with a malformed stack")
            return stack[0]
        if name in _CONSTANTS:
            stack.append(arg)
        elif name == "NONE":
            stack.append(None)
        elif name in ("NEWTRUE", "NEWFALSE"):
            stack.append(name == "NEWTRUE")
        elif name == "MARK":
            marks.append(len(stack))
        elif name == "POP":
            stack.pop()
        elif name == "POP_MARK":
            pop_mark()
        elif name == "DUP":
            stack.append(stack[-1])
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[int(arg)] = stack[-1]
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            if int(arg) not in memo:
                raise _Corrupt(f"memo entry {arg} is read before it is written")
            stack.append(memo[int(arg)])
        elif name == "EMPTY_LIST":
            stack.append([])
        elif name == "EMPTY_DICT":
            stack.append({})
        elif name == "EMPTY_TUPLE":
            stack.append(())
        elif name == "LIST":
            stack.append(pop_mark())
        elif name == "TUPLE":
            stack.append(tuple(pop_mark()))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            if len(stack) < n:
                raise _Corrupt("a tuple needs more items than the stack holds")
            items = tuple(stack[-n:])
            del stack[-n:]
            stack.append(items)
        elif name == "DICT":
            items = pop_mark()
            stack.append(_fill({}, items))
        elif name == "APPEND":
            value = stack.pop()
            _target(stack, list).append(value)
        elif name == "APPENDS":
            items = pop_mark()
            _target(stack, list).extend(items)
        elif name == "SETITEM":
            value, key = stack.pop(), stack.pop()
            _fill(_target(stack, dict), [key, value])
        elif name == "SETITEMS":
            items = pop_mark()
            _fill(_target(stack, dict), items)
        elif name == "GLOBAL":
            module, _, qual = str(arg).partition(" ")
            stack.append(_global(module, qual))
        elif name == "STACK_GLOBAL":
            qual, module = stack.pop(), stack.pop()
            if not isinstance(module, str) or not isinstance(qual, str):
                raise _Corrupt("a global is named by non-strings")
            stack.append(_global(module, qual))
        elif name == "REDUCE":
            args = stack.pop()
            stack.append(_call(stack.pop(), args))
        elif name == "NEWOBJ":
            args = stack.pop()
            stack.append(_new(stack.pop(), args))
        elif name == "BUILD":
            state = stack.pop()
            if not stack:
                raise _Corrupt("BUILD without an object")
            _build(stack[-1], state)
        else:  # INST, OBJ, NEWOBJ_EX, EXT*, PERSID, sets, buffers, ...
            raise _Refused(f"an object by the pickle instruction {name}")
    raise _Corrupt("the stream ends before its STOP instruction")


def _target(stack: list[Any], kind: type) -> Any:
    """The container on top of the stack, which must be a plain list / dict this file made."""
    if not stack or type(stack[-1]) is not kind:
        what = type(stack[-1]).__name__ if stack else "nothing"
        raise _Refused(f"an update of {what} (only a new {kind.__name__} may be filled)")
    return stack[-1]


def _fill(d: dict, items: list[Any]) -> dict:
    if len(items) % 2:
        raise _Corrupt("a dict is given an odd number of items")
    for key, value in zip(items[::2], items[1::2], strict=True):
        if not isinstance(key, int | str | bytes | float) or isinstance(key, bool):
            raise _Refused(f"a dict keyed by {type(key).__name__}")
        d[key] = value
    return d


def _global(module: str, qual: str) -> _Global:
    role = PLANETOID_GLOBALS.get((module, qual))
    if role is None:
        raise _Refused(f"{module}.{qual}")
    return _Global(role, f"{module}.{qual}")


def _call(fn: Any, args: Any) -> Any:
    if not isinstance(fn, _Global):
        raise _Refused(f"a call of {type(fn).__name__}")
    if not isinstance(args, tuple):
        raise _Corrupt(f"{fn.name} is called without an argument tuple")
    if fn.role == "reconstruct":
        if len(args) != 3 or not (isinstance(args[0], _Global) and args[0].role == "ndarray"):
            raise _Refused(f"{fn.name} of anything but numpy.ndarray")
        return _Fresh("array")
    if fn.role == "dtype":
        if not args or not isinstance(args[0], str):
            raise _Corrupt("numpy.dtype is called without a type name")
        return _Fresh("dtype", (_dtype(args[0]), "="))
    if fn.role == "scalar":
        if len(args) != 2 or not isinstance(args[1], bytes | str):
            raise _Corrupt("a numpy scalar without its bytes")
        dtype = _resolved_dtype(args[0])
        raw = _raw(args[1])
        if len(raw) != dtype.itemsize:
            raise _Corrupt("a numpy scalar of the wrong size")
        return np.frombuffer(raw, dtype=dtype, count=1)[0].copy()
    if fn.role == "encode":  # _codecs.encode(text, "latin1"): bytes written by protocol 0-2
        if len(args) != 2 or not isinstance(args[0], str) or args[1] not in ("latin1",
                                                                               "latin-1"):
            raise _Refused("_codecs.encode of anything but latin-1 text")
        return args[0].encode("latin-1")
    if fn.role == "bytes":  # bytes(): empty bytes written by protocol 0-2
        if args != ():
            raise _Refused(f"{fn.name} of anything but nothing")
        return b""
    if fn.role == "reconstructor":  # copyreg._reconstructor(csr_matrix, object, None)
        if (len(args) != 3 or not isinstance(args[0], _Global) or args[0].role != "csr"
                or not isinstance(args[1], _Global) or args[1].role != "object"
                or args[2] is not None):
            raise _Refused(f"{fn.name} of anything but a csr_matrix")
        return _Fresh("csr")
    if fn.role == "frombuffer":  # numpy's _frombuffer(buffer, dtype, shape, order)
        if len(args) != 4 or not isinstance(args[0], bytes | bytearray):
            raise _Refused(f"{fn.name} of anything but an in-band buffer")
        fresh = _Fresh("array", _array((args[2], args[1], args[3] == "F", bytes(args[0]))))
        fresh.built = True
        return fresh
    if fn.role == "defaultdict":
        if args not in ((),) and not (len(args) == 1 and isinstance(args[0], _Global)
                                      and args[0].role == "list"):
            raise _Refused("a defaultdict with a factory other than list")
        return {}
    raise _Refused(f"a call of {fn.name}")


def _new(cls: Any, args: Any) -> _Fresh:
    if not isinstance(cls, _Global) or cls.role != "csr" or args != ():
        what = cls.name if isinstance(cls, _Global) else type(cls).__name__
        raise _Refused(f"a new {what}")
    return _Fresh("csr")


def _dtype(name: str) -> np.dtype:
    try:
        dtype = np.dtype(name)
    except (TypeError, ValueError):
        raise _Corrupt(f"unknown dtype {name!r}") from None
    if dtype.kind not in NUMERIC_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise _Refused(f"an array of dtype {name!r} (only numbers are data)")
    return dtype


def _resolved_dtype(obj: Any) -> np.dtype:
    if not isinstance(obj, _Fresh) or obj.kind != "dtype":
        raise _Corrupt("an array's dtype is not a dtype")
    dtype, endian = obj.value
    return dtype.newbyteorder(endian) if endian in "<>" else dtype


def _raw(data: bytes | str) -> bytes:
    # Python-2 pickles carry an array's buffer as a str (read as latin-1)
    return data.encode("latin-1") if isinstance(data, str) else bytes(data)


def _build(obj: Any, state: Any) -> None:
    """``BUILD``: only the first state of a fresh array, dtype or sparse matrix of this file."""
    if not isinstance(obj, _Fresh) or obj.built:
        what = obj.name if isinstance(obj, _Global) else type(obj).__name__
        if isinstance(obj, _Fresh):
            what = f"an already built {obj.kind}"
        raise _Refused(f"a change to the state of {what} (only a new array or matrix is built)")
    obj.built = True
    if obj.kind == "dtype":
        if not isinstance(state, tuple) or len(state) < 5 or state[1] not in ("<", ">", "|", "="):
            raise _Corrupt("a dtype with a malformed state")
        if any(s is not None for s in state[2:5]):
            raise _Refused("a structured or sub-array dtype")
        obj.value = (obj.value[0], state[1])
    elif obj.kind == "array":
        obj.value = _array(state)
    else:
        obj.value = _csr(state)


def _array(state: Any) -> np.ndarray:
    if not isinstance(state, tuple) or len(state) not in (4, 5):
        raise _Corrupt("an array with a malformed state")
    shape, dtype, fortran, data = state[-4:]
    if not isinstance(shape, tuple) or not all(isinstance(s, int) and not isinstance(s, bool)
                                               and s >= 0 for s in shape):
        raise _Corrupt("an array with a malformed shape")
    dtype = _resolved_dtype(dtype)
    if not isinstance(data, bytes | bytearray | str):
        raise _Refused("an array of Python objects")
    raw = _raw(data)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if len(raw) != count * dtype.itemsize:
        raise _Corrupt(f"an array of shape {shape} holds {len(raw)} bytes")
    flat = np.frombuffer(raw, dtype=dtype, count=count).copy()
    return flat.reshape(shape, order="F" if fortran else "C")


def _csr(state: Any) -> CSR:
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise _Corrupt("a sparse matrix with a malformed state")
    extra = sorted(set(state) - CSR_STATE_KEYS)
    if extra:
        raise _Refused(f"a sparse matrix with the attribute {extra[0]!r}")
    parts = []
    for key in ("data", "indices", "indptr"):
        part = state.get(key)
        if not isinstance(part, _Fresh) or part.kind != "array" or not part.built:
            raise _Corrupt(f"a sparse matrix without its {key} array")
        parts.append(part.value)
    shape = state.get("_shape", state.get("shape"))
    if not (isinstance(shape, tuple) and len(shape) == 2
            and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)):
        raise _Corrupt("a sparse matrix with a malformed shape")
    data, indices, indptr = parts
    if indices.dtype.kind not in "iu" or indptr.dtype.kind not in "iu":
        raise _Corrupt("a sparse matrix with non-integer indices")
    try:
        return CSR.from_arrays(data, indices, indptr, shape)
    except ValueError as exc:
        raise _Corrupt(f"an inconsistent sparse matrix: {str(exc).splitlines()[0]}") from None


def _finish(obj: Any, seen: dict[int, Any]) -> Any:
    """Replace every fresh object by what fedgl built; refuse leftovers (bare globals, objects
    never built)."""
    if isinstance(obj, _Fresh):
        if not obj.built and obj.kind != "dtype":
            raise _Corrupt(f"a {obj.kind} that is never built")
        if obj.kind == "dtype":
            return _resolved_dtype(obj)
        return obj.value
    if isinstance(obj, _Global):
        raise _Refused(f"a bare reference to {obj.name}")
    if id(obj) in seen:
        return seen[id(obj)]
    if type(obj) is list:
        seen[id(obj)] = obj
        obj[:] = [_finish(v, seen) for v in obj]
    elif type(obj) is dict:
        seen[id(obj)] = obj
        for k in list(obj):
            obj[k] = _finish(obj[k], seen)
    elif type(obj) is tuple:
        out = tuple(_finish(v, seen) for v in obj)
        seen[id(obj)] = out
        return out
    return obj
