"""Unpickling that cannot run code: only an allow-list of data types may be constructed.

``pickle.load`` calls whatever callable a file names, so a crafted data file runs code before
any format check. :func:`restricted_load` resolves only the globals in an allow-list (by default
the numpy and scipy types the Planetoid files contain); a file that asks for anything else is
refused with a one-line :class:`~fedgl.errors.DataError` before anything it names is called.
Every loader in fedgl that reads a pickle goes through this function.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fedgl.errors import DataError

# (module, name) pairs a Planetoid file may name: its arrays, sparse matrices and graph dict.
# Python-2 pickles say ``__builtin__``; numpy moved ``core`` to ``_core`` in 2.0; scipy moved the
# csr module to ``_csr``.
PLANETOID_GLOBALS: frozenset[tuple[str, str]] = frozenset({
    ("__builtin__", "list"), ("builtins", "list"), ("__builtin__", "dict"), ("builtins", "dict"),
    ("__builtin__", "set"), ("builtins", "set"),
    ("collections", "defaultdict"), ("collections", "OrderedDict"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("scipy.sparse.csr", "csr_matrix"), ("scipy.sparse._csr", "csr_matrix"),
    ("scipy.sparse", "csr_matrix"),
})


class _Restricted(pickle.Unpickler):
    def __init__(self, file: io.BufferedIOBase, allowed: frozenset[tuple[str, str]]) -> None:
        super().__init__(file, encoding="latin1")  # Python-2 pickles (numpy buffers as bytes)
        self._allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._allowed:
            raise _Refused(f"{module}.{name}")
        if module.startswith("scipy.sparse"):  # the old module path is deprecated
            import scipy.sparse

            return getattr(scipy.sparse, name)
        return super().find_class(module, name)


class _Refused(pickle.UnpicklingError):
    pass


def restricted_load(path: str | Path, allowed: Iterable[tuple[str, str]] = PLANETOID_GLOBALS,
                    *, fix: str = "replace it with an intact copy") -> Any:
    """Unpickle ``path`` constructing only the allowed globals.

    Raises :class:`DataError` (one line, naming the file, the refused type and ``fix``) for a
    file that names any other global, and for a damaged one."""
    allow = frozenset(allowed)
    try:
        with open(path, "rb") as f:
            return _Restricted(f, allow).load()
    except _Refused as exc:
        raise DataError(f"'{path}' asks to construct {exc}, which a data file never needs: refused "
                        f"without running it; {fix}") from None
    except Exception as exc:  # noqa: BLE001 - any other failure means a corrupt file
        raise DataError(f"'{path}' could not be read ({type(exc).__name__}); {fix}") from None
