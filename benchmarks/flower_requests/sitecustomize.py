"""Counts the HTTP requests each Flower process makes (``bench_flower.py --count-requests``).

Put this folder first on ``PYTHONPATH``: every Python process started with it wraps Flower's
protobuf client (``flwr.supercore.protobuf.client.ProtobufClient._unary_unary``, the one call
every Fleet, Runtime and Control request goes through) when Flower imports it, and rewrites
``$FEDGL_REQUEST_COUNTS/<pid>.json`` (its command line and its requests by RPC method) every
10 requests and at exit. A measurement aid for the benchmarks only; fedgl never imports it.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import sys

_FOLDER = os.environ.get("FEDGL_REQUEST_COUNTS")
_COUNTS: collections.Counter[str] = collections.Counter()
_TARGET = "flwr.supercore.protobuf.client"


def _dump() -> None:
    if _FOLDER and _COUNTS:
        path = os.path.join(_FOLDER, f"{os.getpid()}.json")
        with open(path + ".tmp", "w") as f:
            json.dump({"argv": sys.argv, "requests": dict(_COUNTS)}, f)
        os.replace(path + ".tmp", path)


def _wrap(module: object) -> None:
    cls = module.ProtobufClient  # type: ignore[attr-defined]
    original = cls._unary_unary

    def counted(self: object, *args: object, **kwargs: object) -> object:
        _COUNTS[str(kwargs.get("rpc_method") or kwargs.get("path"))] += 1
        if sum(_COUNTS.values()) % 10 == 0:
            _dump()
        return original(self, *args, **kwargs)

    cls._unary_unary = counted


class _Finder:
    """Wraps the client class right after its module is first executed."""

    def find_spec(self, name: str, path: object, target: object = None) -> object:
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: object) -> None:
            execute(module)
            _wrap(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if _FOLDER:
    sys.meta_path.insert(0, _Finder())
    atexit.register(_dump)
