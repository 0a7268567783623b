"""Third-party algorithms: packages that declare an entry point in the group ``fedgl.algorithms``.

A plugin package names one algorithm per entry point; the entry point's object is the algorithm's
:class:`~fedgl.config.registry.AlgorithmSpec` (or a function without arguments returning it)::

    [project.entry-points."fedgl.algorithms"]
    fedprox = "fedgl_fedprox:SPEC"

Discovery reads only the installed packages' metadata (:mod:`importlib.metadata`): listing the
algorithms imports no plugin. A plugin's module is imported when its algorithm is chosen (or
checked with ``fedgl plugins``). A broken plugin — it fails to import, its name is a built-in
algorithm's, or its spec is malformed — raises a :class:`~fedgl.errors.PluginError` naming the
plugin, its package and the fix, only when that plugin is used; every other algorithm runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fedgl.errors import PluginError

GROUP = "fedgl.algorithms"

#: field annotations an option may have (what the CLI and the YAML reader can parse)
OPTION_KINDS = ("bool", "int", "float", "str")


@dataclass(frozen=True)
class Plugin:
    """One entry point of the group: the algorithm name, ``module:attr``, and its package."""

    name: str
    value: str
    package: str
    version: str

    @property
    def where(self) -> str:
        return f"plugin '{self.name}' (package {self.package} {self.version}, entry point {self.value})"

    @property
    def uninstall(self) -> str:
        return f"pip uninstall {self.package}"


_DISCOVERED: dict[str, Plugin] | None = None


def discover(refresh: bool = False) -> dict[str, Plugin]:
    """Every installed plugin entry point by name (metadata only; cached; ``refresh`` re-reads
    it, e.g. after installing a package in the same process)."""
    global _DISCOVERED
    if _DISCOVERED is None or refresh:
        from importlib import metadata  # ~20 ms: only when algorithms are looked up

        found: dict[str, Plugin] = {}
        for ep in metadata.entry_points(group=GROUP):
            dist = getattr(ep, "dist", None)
            package = dist.metadata["Name"] if dist is not None else "?"
            version = dist.version if dist is not None else "?"
            # the first of two same-named entry points wins (sys.path order, as for imports)
            found.setdefault(ep.name, Plugin(ep.name, ep.value, package, version))
        _DISCOVERED = found
    return _DISCOVERED


def clash_error(plugin: Plugin) -> PluginError:
    return PluginError(f"{plugin.where} has the name of a built-in algorithm, which always "
                       f"wins; rename the entry point in {plugin.package}'s pyproject.toml, or "
                       f"{plugin.uninstall}")


def load(plugin: Plugin, builtin: set[str], common_keys: set[str]) -> Any:
    """Import the plugin and return its checked spec; :class:`PluginError` if anything is wrong."""
    from fedgl.config.registry import AlgorithmSpec

    if plugin.name in builtin:
        raise clash_error(plugin)
    fix = f"fix the package or {plugin.uninstall}"
    module, _, attr = plugin.value.partition(":")
    try:
        import importlib

        obj: Any = importlib.import_module(module.strip())
        for part in filter(None, attr.strip().split(".")):
            obj = getattr(obj, part)
        if callable(obj) and not isinstance(obj, AlgorithmSpec) and not isinstance(obj, type):
            obj = obj()
    except Exception as exc:  # noqa: BLE001 - any failure of third-party code is one line
        raise PluginError(f"{plugin.where} failed to load ({type(exc).__name__}: "
                          f"{_first_line(exc)}); {fix}") from None
    if not isinstance(obj, AlgorithmSpec):
        raise PluginError(f"{plugin.where} gives a {type(obj).__name__}, not an AlgorithmSpec "
                          f"(from fedgl.plugins); point the entry point at the spec")
    if obj.name != plugin.name:
        raise PluginError(f"{plugin.where} gives the spec of '{obj.name}'; name the entry point "
                          f"'{obj.name}' or the spec '{plugin.name}'")
    clashing = [a for a in obj.aliases if a in builtin]
    if clashing:
        raise PluginError(f"{plugin.where}: alias '{clashing[0]}' is a built-in algorithm's "
                          f"name; drop the alias")
    check_spec(obj, plugin.where, common_keys)
    return obj


def check_spec(spec: Any, where: str, common_keys: set[str]) -> None:
    """What the CLI, the config reader and the driver rely on: ``entry`` is ``module:function``,
    every option field has a default, one line of help, a bool/int/float/str annotation and a
    name no common key has."""
    module, sep, func = spec.entry.partition(":")
    if not (module and sep and func):
        raise PluginError(f"{where}: entry '{spec.entry}' must be 'package.module:function' "
                          "(the function that runs one repeat)")
    if spec.options is None:
        return
    for f in dataclasses.fields(spec.options):
        if f.name in common_keys:
            raise PluginError(f"{where}: option '{f.name}' is a common config key; rename the "
                              "option (the common value is read as cfg." + f.name + ")")
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise PluginError(f"{where}: option '{f.name}' has no default; declare it with "
                              "fedgl.plugins.option(default, help)")
        if not isinstance(f.metadata.get("help"), str):
            raise PluginError(f"{where}: option '{f.name}' has no help text; declare it with "
                              "fedgl.plugins.option(default, help)")
        from fedgl.config.fields import field_kind

        kind = field_kind(f)
        if kind not in OPTION_KINDS:
            raise PluginError(f"{where}: option '{f.name}' is annotated '{kind}'; use bool, "
                              "int, float or str (optionally '| None')")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else "no message"
