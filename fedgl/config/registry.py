"""The algorithm registry: what each algorithm is called, which setting it runs in, which keys it
reads, and where its code is — without importing that code.

An algorithm package declares itself in a small ``spec.py``::

    from fedgl.algorithms.registry import AlgorithmSpec, register
    from fedgl.algorithms.fedgat.options import FedGATOptions

    register(AlgorithmSpec(
        name="fedgat", setting="horizontal", summary="FedGAT: polynomial attention",
        entry="fedgl.algorithms.fedgat.runner:run_fedgat",   # imported only when fedgat runs
        options=FedGATOptions, runtimes=("local", "ray"), privacy=(),
        unread=("model", "hidden"),
        defaults={"rounds": 150, "dropout": 0.0},          # its paper's recipe
        key_help={"rounds": "FedAvg rounds T of E local steps"}))

and one line in :data:`BUILTIN` maps its name to that module, so looking an algorithm up imports
only its ``spec.py`` (an options dataclass and this module), and running it imports its entry
point. ``import fedgl`` imports no algorithm package.

The entry point runs one seeded repeat::

    run_repeat(graph, cfg, *, repeat, seed, progress, resume_from=None, checkpointer=None,
               on_round=None) -> RepeatResult
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fedgl.config import plugins
from fedgl.config.plugins import discover
from fedgl.errors import ConfigError

#: built-in algorithm name -> the module whose import registers it
BUILTIN: dict[str, str] = {
    "fedgcn": "fedgl.algorithms.fedgcn.spec",
    "centralized": "fedgl.algorithms.fedgcn.spec",
    "fedgat": "fedgl.algorithms.fedgat.spec",
    "distgat": "fedgl.algorithms.fedgat.spec",
    "centralized-gat": "fedgl.algorithms.fedgat.spec",
    "swift-fedgnn": "fedgl.algorithms.swift_fedgnn.spec",
    "fedgnn-g": "fedgl.algorithms.minibatch_baselines.spec",
    "local-only": "fedgl.algorithms.minibatch_baselines.spec",
    "llcg": "fedgl.algorithms.minibatch_baselines.spec",
    "fedgnn-pns": "fedgl.algorithms.minibatch_baselines.spec",
    "glasu": "fedgl.algorithms.glasu.spec",
    "glasu-simulated": "fedgl.algorithms.glasu.spec",
    "glasu-centralized": "fedgl.algorithms.glasu.spec",
    "glasu-standalone": "fedgl.algorithms.glasu.spec",
    "bns-gcn": "fedgl.algorithms.bns_gcn.spec",
    "distributed-gcn": "fedgl.algorithms.distributed_gcn.spec",
    "fedsage-plus": "fedgl.algorithms.fedsage_plus.spec",
}

#: common keys only one setting reads
HORIZONTAL_KEYS = ("partition", "beta", "mcmahan_p", "metis_max_degree", "min_client_size")
VERTICAL_KEYS = ("feature_split", "edge_share")

#: privacy features an algorithm may support (see ``PrivacyConfig`` field metadata)
PRIVACY_FEATURES = ("secure_sum", "he", "encrypt_models", "dp", "min_contributors",
                    "release_budget")


@dataclass(frozen=True)
class AlgorithmSpec:
    """What the configuration, the CLI and the driver need to know about one algorithm."""

    name: str
    setting: str                      # "horizontal" or "vertical"
    entry: str                        # "package.module:function", imported when the algorithm runs
    summary: str = ""
    options: type | None = None       # dataclass of the algorithm's own keys
    runtimes: tuple[str, ...] = ("local", "ray")
    privacy: tuple[str, ...] = ()     # subset of PRIVACY_FEATURES
    unread: tuple[str, ...] = ()      # common keys the algorithm ignores (off default: an error)
    checkpoints: bool = True          # supports --checkpoint-every / --resume
    aliases: tuple[str, ...] = ()
    #: the algorithm's own defaults of common keys (its paper's recipe: model, hidden, optimiser,
    #: lr, rounds, batch, fan-outs, partition...); they replace the section defaults for this
    #: algorithm, and a value the user gives (flag, YAML, API) still wins
    defaults: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    #: what a common key means for this algorithm, where it differs from the generic help
    #: (e.g. ``rounds`` counts FedSGD iterations for the mini-batch algorithms)
    key_help: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    #: deployed on Flower (``fedgl client``/``fedgl server``): the client role a party builds
    #: from its own shard, ``client(shard, cfg, seed)`` ("module:Class" or a factory)
    client: str = ""
    #: the deployed server's driver: ``"fedavg"`` (pre-training exchange, then FedAvg rounds, with
    #: the server class ``server``), ``"minibatch"`` (mini-batch FedSGD with the schedule
    #: function ``server``: ``(cfg, settings) -> (Schedule, PNS fan-out)``), or a
    #: ``"module:function"`` called as ``driver(runtime, cfg, seed, t0) -> RepeatResult`` (it
    #: learns the clients' facts itself: :func:`fedgl.federation.facts.learn_facts`)
    driver: str = ""
    server: str = ""
    #: why the algorithm stays simulation-only (one line ``fedgl server`` prints)
    simulation_only: str = ""
    #: a deployable vertical algorithm's shard writer, ``shards(graph, cfg, out) -> manifest
    #: paths`` behind ``fedgl shard`` (horizontal shards are the partitioner's, for every one)
    shards: str = ""
    #: how the trained model is used (``fedgl.load_model``, ``fedgl predict``): ``model`` builds
    #: the torch module from a model card, ``model(card, cfg, part) -> nn.Module`` (``cfg``: the
    #: card's configuration; "" : the configured
    #: GCN/SAGE/GIN of ``fedgl.models.build_model``); ``predict`` scores every client's own nodes
    #: with the saved weights as the run's evaluation does, ``predict(graph, cfg, seed, parts)
    #: -> Scores`` (:mod:`fedgl.inference.predict`; "" : the algorithm does not score nodes
    #: after training, which ``fedgl predict`` says in one line)
    model: str = ""
    predict: str = ""

    def __post_init__(self) -> None:
        self._check()
        object.__setattr__(self, "defaults", dict(self.defaults))
        object.__setattr__(self, "key_help", dict(self.key_help))

    def _check(self) -> None:
        if self.setting not in ("horizontal", "vertical"):
            raise ValueError(f"{self.name}: setting must be horizontal or vertical")
        unknown = set(self.privacy) - set(PRIVACY_FEATURES)
        if unknown:
            raise ValueError(f"{self.name}: unknown privacy features {sorted(unknown)}")
        if self.options is not None and not dataclasses.is_dataclass(self.options):
            raise ValueError(f"{self.name}: options must be a dataclass")
        unread = set(self.defaults) & set(self.unread_keys())
        if unread:
            raise ValueError(f"{self.name}: defaults given for keys it does not read: "
                             f"{sorted(unread)}")
        if bool(self.client) != bool(self.driver):
            raise ValueError(f"{self.name}: a deployable algorithm names both its client and "
                             "its driver")
        if self.driver in GENERIC_DRIVERS and not self.server:
            raise ValueError(f"{self.name}: the '{self.driver}' driver needs a server")
        if self.driver and self.driver not in GENERIC_DRIVERS and ":" not in self.driver:
            raise ValueError(f"{self.name}: driver must be one of {', '.join(GENERIC_DRIVERS)} "
                             "or 'module:function'")
        if self.setting == "vertical" and self.client and not self.shards:
            raise ValueError(f"{self.name}: a deployable vertical algorithm names its shards' "
                             "writer")
        if self.client and self.simulation_only:
            raise ValueError(f"{self.name}: a deployable algorithm is not simulation-only")

    def unread_keys(self) -> tuple[str, ...]:
        """Common keys this algorithm ignores: its own list plus the other setting's keys."""
        other = VERTICAL_KEYS if self.setting == "horizontal" else HORIZONTAL_KEYS
        return tuple(dict.fromkeys((*self.unread, *other)))

    def option_names(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self.options)] if self.options else []

    def load_entry(self) -> Callable[..., Any]:
        """Import and return the entry point (this is where the algorithm's code is imported)."""
        return load_path(self.entry)

    @property
    def deployable(self) -> bool:
        return bool(self.client)

    def deployment(self) -> tuple[str, str, str]:
        """``(client, driver, server)`` of a deployed run; :class:`ConfigError` naming why the
        algorithm does not run deployed."""
        if self.simulation_only:
            raise ConfigError(f"algorithm '{self.name}' is simulation-only: "
                              f"{self.simulation_only}; run it with --runtime local or ray")
        if not self.client:
            raise ConfigError(f"algorithm '{self.name}' does not run deployed on Flower (its "
                              "spec names no client and driver); run it with --runtime local "
                              "or ray")
        return self.client, self.driver, self.server


#: the server drivers the deployment knows generically (``AlgorithmSpec.driver``)
GENERIC_DRIVERS = ("fedavg", "minibatch")


def load_path(path: str) -> Any:
    """The object a ``"module:qualname"`` path names (importing the module)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


_SPECS: dict[str, AlgorithmSpec] = {}
_ALIASES: dict[str, str] = {}


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Add an algorithm (built-in spec modules call this on import; so may a user's code)."""
    _SPECS[spec.name] = spec
    for alias in spec.aliases:
        _ALIASES[alias] = spec.name
    return spec


def algorithm_names() -> list[str]:
    """Every known algorithm name (built-in, registered, and installed plugins' entry points),
    without importing any."""
    return sorted(set(BUILTIN) | set(_SPECS) | set(plugin_names()))


def plugin_names() -> list[str]:
    """Names of the installed plugin algorithms (entry point group ``fedgl.algorithms``) that do
    not clash with a built-in (metadata only: no plugin is imported)."""
    found = discover()
    if not found:
        return []
    load_all()  # the built-ins' aliases (light: spec and options modules only)
    return sorted(n for n in found if n not in BUILTIN and n not in _builtin_aliases())


def _builtin_aliases() -> set[str]:
    return {alias for alias, target in _ALIASES.items() if target in BUILTIN}


def canonical_name(name: str) -> str:
    name = str(name)
    if name in BUILTIN or name in _SPECS:
        return name
    if name not in _ALIASES and name in plugin_names():
        return name
    if name in _ALIASES:
        return _ALIASES[name]
    load_all()
    return _ALIASES.get(name, name)


def get_spec(name: str) -> AlgorithmSpec:
    """The spec of ``name`` (or an alias); ConfigError naming the choices if unknown, and
    :class:`~fedgl.errors.PluginError` if it is a plugin that cannot be used."""
    name = canonical_name(name)
    if name not in _SPECS and name in BUILTIN:
        importlib.import_module(BUILTIN[name])
    if name not in _SPECS and name in discover():
        load_plugin(name)
    if name not in _SPECS:
        names = algorithm_names()
        close = difflib.get_close_matches(name.lower(), names, n=1)  # names are lower case
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"unknown algorithm '{name}'{hint}; choose one of {', '.join(names)}")
    return _SPECS[name]


def load_plugin(name: str) -> AlgorithmSpec:
    """Import the installed plugin ``name``, check its spec and register it."""
    from fedgl.config.schema import COMMON_KEYS

    load_all()
    builtin_names = set(BUILTIN) | _builtin_aliases()
    spec = plugins.load(discover()[name], builtin_names, set(COMMON_KEYS))
    return register(spec)


def load_all() -> list[AlgorithmSpec]:
    """Every built-in spec and every registered one (imports every built-in ``spec.py``, and no
    plugin that was not used yet; for --help and cross-algorithm hints)."""
    for module in sorted(set(BUILTIN.values())):
        importlib.import_module(module)
    return [_SPECS[n] for n in sorted(_SPECS)]


def deployable_names() -> list[str]:
    """The algorithms that run deployed: the built-ins' and every registered (or used) plugin's
    whose spec names a client and a driver."""
    return [s.name for s in load_all() if s.deployable]


def readers_of(key: str) -> list[str]:
    """Names of the algorithms whose options include ``key``."""
    return [s.name for s in load_all() if key in s.option_names()]
