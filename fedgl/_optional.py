"""Optional dependencies ("extras"): one helper imports them, or explains how to install them.

``pip install fedgl`` installs what the default run needs; these come with an extra:

====================  ===========  ==========================================
module                extra        features
====================  ===========  ==========================================
``ray``               ``ray``      ``--runtime ray``
``tenseal``           ``he``       ``--secure-sum he``, ``--encrypt-models``
``pymetis``           ``metis``    ``--partition metis``
``flwr``              ``flower``   the Flower deployment
``matplotlib``        ``plots``    ``--plot``, ``fedgl report`` figures
``pyarrow``           ``parquet``  Parquet tables and the columnar reader of ``fedgl ingest``
``threadpoolctl``     ``speed``    one-threaded BLAS in the leakage report
``private_set_...``   ``psi``      OpenMined's PSI, compared in ``benchmarks/bench_psi.py``
====================  ===========  ==========================================

``[all]`` installs every one but ``psi`` (openmined-psi pins a protobuf older than Flower's).
A missing module raises :class:`~fedgl.errors.MissingExtraError`
(the CLI prints it as one line and exits with code 2).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from fedgl.errors import MissingExtraError

#: import name -> the extra that installs it
EXTRAS: dict[str, str] = {"ray": "ray", "tenseal": "he", "pymetis": "metis", "flwr": "flower",
                          "matplotlib": "plots", "pyarrow": "parquet", "threadpoolctl": "speed",
                          "private_set_intersection": "psi"}


def require(module: str, *, feature: str, extra: str | None = None) -> ModuleType:
    """Import ``module`` (e.g. ``"ray"`` or ``"matplotlib.pyplot"``) for ``feature``, or raise a
    :class:`MissingExtraError` naming the extra and the command that installs it.

    >>> require("json", feature="reading results", extra="core").__name__
    'json'
    """
    top = module.split(".")[0]
    extra = extra or EXTRAS.get(top, top)
    missing = MissingExtraError(
        f"{feature} needs {top}, which is not installed; install it with "
        f"pip install 'fedgl[{extra}]' (or 'fedgl[all]' for every optional feature)")
    if not available(top):
        raise missing
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        name = getattr(exc, "name", None) or top
        if name.split(".")[0] != top:
            raise  # the package is there but one of its own dependencies is broken
        raise missing from None


def available(module: str) -> bool:
    """Whether ``module`` is installed (checked without importing it). A bare folder of that
    name on ``sys.path`` (a namespace package, e.g. Ray's session folder ``/tmp/ray`` when
    fedgl runs in ``/tmp``) does not count."""
    import importlib.util
    import sys

    if module in sys.modules:
        found = sys.modules[module]
        return found is not None and getattr(found, "__file__", None) is not None
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin not in (None, "namespace")


def check_config(cfg: object) -> None:
    """Before any work: raise :class:`MissingExtraError` if the configuration asks for a feature
    whose extra is not installed (the same error the feature's own import gives later)."""
    needs = []
    if getattr(cfg, "runtime", "local") == "ray":
        needs.append(("ray", "--runtime ray"))
    if getattr(cfg, "secure_sum", "none") == "he" or getattr(cfg, "encrypt_models", False):
        needs.append(("tenseal", "CKKS encryption (--secure-sum he, --encrypt-models)"))
    if getattr(cfg, "partition", None) == "metis":
        needs.append(("pymetis", "--partition metis"))
    for module, feature in needs:
        if not available(module):
            require(module, feature=feature)
