"""The run's configuration: the common sections plus the chosen algorithm's options.

Built from flat keys (``rounds: 50``, ``--rounds 50``), nested sections (``optim: {rounds: 50}``,
``fedgat: {degree: 16}``) or both; read flat (``cfg.rounds``, ``cfg.degree``) or by section
(``cfg.optim.rounds``, ``cfg.section("model").hidden``, ``cfg.options.degree``). One rule covers
every algorithm: a key the chosen algorithm does not read is an error naming the algorithm that
reads it (a key left at its default is accepted and ignored, so old result files still load).

Defaults, lowest first: the section's field default, then the chosen algorithm's own default
(``AlgorithmSpec.defaults``: its paper's recipe, e.g. GLASU's hidden 64 and Adam at lr 0.01),
then the values given (YAML file, then flags or keyword arguments).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from pathlib import Path
from typing import Any

from fedgl.config.fields import check_fields
from fedgl.config.registry import (
    HORIZONTAL_KEYS,
    VERTICAL_KEYS,
    AlgorithmSpec,
    algorithm_names,
    canonical_name,
    get_spec,
    load_all,
)
from fedgl.config.sections import (
    OWN_PARTITION,
    SECTIONS,
    DataConfig,
    ExperimentConfig,
    FederationConfig,
    OptimConfig,
    OutputConfig,
    PrivacyConfig,
    Section,
    own_keys_line,
)
from fedgl.errors import ConfigError

#: the data-shaping keys the organisations' own shards decide (beside ``partition``, which such a
#: run records as ``own``): at their defaults there, and left out of its recorded config
OWN_DECIDED = tuple(k for k in (*HORIZONTAL_KEYS, *VERTICAL_KEYS) if k != "partition")

#: common key -> the section it belongs to
COMMON_KEYS: dict[str, str] = {f.name: name for name, cls in SECTIONS.items()
                               for f in dataclasses.fields(cls)}
#: other spellings accepted for a key
KEY_ALIASES: dict[str, str] = {}
#: keys renamed when fan-outs moved to PyG's order (first layer first); an old key given by the
#: user is refused with the fix (its list was read the other way round), while a config fedgl
#: stored under the old name is translated (:meth:`Config.from_stored`)
RENAMED_KEYS: dict[str, str] = {"fanouts": "num_neighbors", "fanout": "num_neighbors",
                                "eval_fanouts": "eval_num_neighbors"}
DEFAULT_ALGORITHM = "fedgcn"


class _DuplicateKey(Exception):
    def __init__(self, key: object, line: int) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key, self.line = key, line


@functools.lru_cache(maxsize=1)
def _unique_key_loader() -> type:
    """YAML's safe loader, but a key given twice in one mapping is an error (not last-wins).
    Built on first use: PyYAML loads only for a config file (9 ms of every run's start)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
            seen: set = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise _DuplicateKey(key, key_node.start_mark.line + 1)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


class Config:
    """All settings of a run. Immutable: use :meth:`replace` for a changed copy.

    >>> cfg = Config(algorithm="fedgcn", dataset="cora", rounds=50)
    >>> cfg.rounds, cfg.optim.rounds, cfg.hops
    (50, 50, 2)
    """

    def __init__(self, algorithm: str = DEFAULT_ALGORITHM, **keys: Any) -> None:
        self._install(_build(algorithm, keys, "config"))
        self.validate()

    def _install(self, built: tuple[AlgorithmSpec, dict[str, Section], Any, frozenset[str]]
                 ) -> None:
        object.__setattr__(self, "_spec", built[0])
        object.__setattr__(self, "_sections", built[1])
        object.__setattr__(self, "_options", built[2])
        object.__setattr__(self, "_given", built[3])

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, values: dict[str, Any], *, source: str = "config") -> Config:
        """Build from a mapping of flat keys and/or nested sections."""
        if not isinstance(values, dict):
            raise ConfigError(f"{source} must be a mapping of keys to values, "
                              f"not a {type(values).__name__}")
        flat = _flatten(values, source)
        algorithm = flat.pop("algorithm", DEFAULT_ALGORITHM)
        cfg = cls.__new__(cls)
        cfg._install(_build(algorithm, flat, source))
        cfg.validate()
        return cfg

    @classmethod
    def from_stored(cls, values: dict[str, Any], *, source: str = "stored config") -> Config:
        """A config fedgl wrote itself (a checkpoint's or result's flat keys), translating keys
        renamed since: ``fanouts``/``eval_fanouts`` were written input layer first, so they become
        ``num_neighbors``/``eval_num_neighbors`` reversed, the same sampled neighbourhoods."""
        return cls.from_dict(migrate_stored(values), source=source)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> Config:
        """Read a YAML mapping; ``overrides`` (e.g. CLI flags, flat keys) win over the file."""
        import yaml

        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file '{p}' not found; pass an existing YAML file")
        try:
            data = yaml.load(p.read_text(), Loader=_unique_key_loader())  # noqa: S506 - safe
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file '{p}' could not be read ({type(exc).__name__}); "
                              "pass a readable UTF-8 YAML file") from None
        except RecursionError:
            raise ConfigError(f"config file '{p}' is nested too deeply; use flat keys or one level "
                              "of sections") from None
        except _DuplicateKey as exc:
            raise ConfigError(f"config file '{p}' gives key '{exc.key}' twice (line {exc.line}); "
                              "keep one") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"config file '{p}' is not valid YAML{where}; fix its syntax") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"config file '{p}' must hold a mapping of keys to values, "
                              f"not a {type(data).__name__}")
        source = f"config file '{p}'"
        flat = _flatten(data, source)
        for key, value in (overrides or {}).items():
            flat[_canonical_key(key)] = value
        return cls.from_dict(flat, source=source)

    def replace(self, **changes: Any) -> Config:
        """A validated copy with ``changes`` (flat keys) applied. A change of ``algorithm`` keeps
        only the keys that were given, so the new algorithm's own defaults apply to the rest.
        The copy's :attr:`given_keys` are this config's and the changed keys."""
        new = changes.get("algorithm")
        if new is not None and canonical_name(str(new)) != self.algorithm:
            full = self.to_dict()
            return Config.from_dict({**{k: full[k] for k in self._given if k in full}, **changes})
        copy = Config.from_dict({**self.to_dict(), **changes})
        object.__setattr__(copy, "_given", self._given | copy._given_of(changes))
        return copy

    @staticmethod
    def _given_of(changes: dict[str, Any]) -> frozenset[str]:
        """The keys a flat mapping of changes sets (canonical names)."""
        return frozenset(_canonical_key(k) for k in changes if k != "algorithm")

    # ------------------------------------------------------------------ access
    @property
    def algorithm(self) -> str:
        return self._spec.name

    @property
    def spec(self) -> AlgorithmSpec:
        return self._spec

    @property
    def options(self) -> Any:
        """The chosen algorithm's options dataclass instance (None if it has none)."""
        return self._options

    @property
    def given_keys(self) -> frozenset[str]:
        """The keys given when this config was built (the rest are defaults)."""
        return self._given

    @property
    def setting(self) -> str:
        """horizontal or vertical: the algorithm's (``--setting`` may only confirm it)."""
        return self._spec.setting

    def section(self, name: str) -> Section:
        return self._sections[name]

    @property
    def data(self) -> DataConfig:
        return self._sections["data"]

    @property
    def federation(self) -> FederationConfig:
        return self._sections["federation"]

    @property
    def optim(self) -> OptimConfig:
        return self._sections["optim"]

    @property
    def experiment(self) -> ExperimentConfig:
        return self._sections["experiment"]

    @property
    def privacy(self) -> PrivacyConfig:
        return self._sections["privacy"]

    @property
    def output(self) -> OutputConfig:
        return self._sections["output"]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        section = COMMON_KEYS.get(name)
        if section is not None:
            return getattr(self._sections[section], name)
        if self._options is not None and name in self._spec.option_names():
            return getattr(self._options, name)
        raise AttributeError(f"{self._spec.name} has no config key '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Config is immutable; use cfg.replace({name}=...)")

    def __reduce__(self) -> tuple:
        return (Config.from_dict, (self.to_dict(),))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, repr(v)) for k, v in self.to_dict().items())))

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.to_dict().items() if k != "algorithm"
                   and v != _default(self._spec, k)}
        inner = ", ".join(f"{k}={v!r}" for k, v in changed.items())
        return f"Config(algorithm={self.algorithm!r}{', ' if inner else ''}{inner})"

    # ------------------------------------------------------------------ export
    def to_dict(self) -> dict[str, Any]:
        """Flat keys: ``algorithm``, every common key, then the algorithm's options. Over the
        organisations' own data (``own:NAME``, partition ``own``) the keys their shards decide
        (:data:`OWN_DECIDED`, at their defaults there) are left out: a result records what
        ran."""
        out: dict[str, Any] = {"algorithm": self.algorithm}
        for section in self._sections.values():
            out.update(dataclasses.asdict(section))
        if self._options is not None:
            out.update(dataclasses.asdict(self._options))
        if out.get("partition") == OWN_PARTITION:
            for key in OWN_DECIDED:
                out.pop(key, None)
        return out

    def to_nested(self) -> dict[str, Any]:
        """Sections as mappings (the nested YAML form), the options under the algorithm's name."""
        out: dict[str, Any] = {"algorithm": self.algorithm}
        for name, section in self._sections.items():
            out[name] = dataclasses.asdict(section)
        if self._options is not None:
            out[self.algorithm] = dataclasses.asdict(self._options)
        return out

    @classmethod
    def field_names(cls, algorithm: str | None = None) -> list[str]:
        """Common keys plus the options of ``algorithm`` (of every algorithm when None)."""
        names = ["algorithm", *COMMON_KEYS]
        specs = [get_spec(algorithm)] if algorithm else load_all()
        for spec in specs:
            names += [n for n in spec.option_names() if n not in names]
        return names

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Check every section, the rules between sections, and the algorithm's options."""
        spec = self._spec
        self._check_own_data(spec)
        for section in self._sections.values():
            section.validate()
        if self._options is not None:
            check_fields(self._options)
        self._check_unread(spec)
        fed, run = self._sections["federation"], self._sections["runtime"]
        if fed.setting is not None and fed.setting != spec.setting:
            others = [s.name for s in load_all() if s.setting == fed.setting]
            raise ConfigError(f"algorithm {spec.name} runs in the {spec.setting} setting, not "
                              f"{fed.setting}; drop --setting or choose one of "
                              f"{', '.join(others) or '(none yet)'}")
        if run.runtime not in spec.runtimes:
            raise ConfigError(f"algorithm {spec.name} runs on the {', '.join(spec.runtimes)} "
                              f"runtime; drop --runtime {run.runtime}")
        if run.checkpoint_every and not spec.checkpoints:
            raise ConfigError(f"checkpoints are for federated runs; drop --checkpoint-every for "
                              f"the {spec.name} algorithm")
        self._check_privacy(spec)
        if self._options is not None and hasattr(self._options, "validate"):
            self._options.validate(self)

    def _check_own_data(self, spec: AlgorithmSpec) -> None:
        """Partition ``own`` exactly where the data set is the organisations' own, and there
        no other data-shaping key off its default (their shards decide them)."""
        partition = self._sections["federation"].partition
        if not _is_own(self._sections["data"].dataset):
            if partition == OWN_PARTITION:
                raise ConfigError("partition own is that of the organisations' own data "
                                  "(--dataset own:NAME, from fedgl ingest); choose another "
                                  "--partition, e.g. dirichlet")
            return
        off = [k for k in OWN_DECIDED if getattr(self, k) != _default(spec, k)]
        if partition != OWN_PARTITION:
            off.insert(0, "partition")
        if off:
            raise ConfigError(own_keys_line(off))

    def _check_unread(self, spec: AlgorithmSpec) -> None:
        for key in spec.unread_keys():
            section = self._sections[COMMON_KEYS[key]]
            if key == "partition" and section.partition == OWN_PARTITION:
                continue   # the organisations' own data, in any setting
            if getattr(section, key) != _default(spec, key):
                raise ConfigError(f"{key} is not read by {spec.name}; drop --{_flag(key)} (see "
                                  f"`fedgl run --algorithm {spec.name} --help`)")

    def _check_privacy(self, spec: AlgorithmSpec) -> None:
        privacy = self._sections["privacy"]
        for feature in privacy.features_in_use():
            if feature not in spec.privacy:
                keys = [f.name for f in dataclasses.fields(privacy)
                        if f.metadata["feature"] == feature]
                users = [s.name for s in load_all() if feature in s.privacy]
                hint = f" or use --algorithm {users[0]}" if users else ""
                raise ConfigError(f"{keys[0]} is not supported by {spec.name} (supported by "
                                  f"{', '.join(users) or 'no algorithm yet'}); drop it{hint}")
        if privacy.he_key_holder >= self.clients:
            raise ConfigError(f"he_key_holder must be a client id below clients ({self.clients}); "
                              f"got {privacy.he_key_holder}")
        t = privacy.secagg_threshold
        if t and not self.clients // 2 + 1 <= t <= self.clients:
            raise ConfigError(f"secagg_threshold must be between clients // 2 + 1 = "
                              f"{self.clients // 2 + 1} (so that two survivor sets cannot both "
                              f"be signed) and clients = {self.clients}; got {t}")
        if privacy.secure_sum == "he" or privacy.encrypt_models or "he" in privacy.features_in_use():
            _check_he_params(privacy, self.clients)
        if privacy.encrypt_models:
            if self.oracle_eval:
                raise ConfigError("encrypt_models keeps the global model encrypted at the server, "
                                  "so the oracle metric cannot score it; add --no-oracle-eval")
            if self.checkpoint_every:
                raise ConfigError("encrypt_models cannot checkpoint: the key lives only in client "
                                  "memory, so a resumed run could not decrypt the model; drop "
                                  "--checkpoint-every")
            if self.clients >= 2 and self.clients_per_round == 1:
                raise ConfigError("encrypt_models with one client per round would make every "
                                  "client decrypt that one client's model, which clients refuse; "
                                  "use --clients-per-round 2 or more (or 0: all)")


# ---------------------------------------------------------------------- helpers
def _check_he_params(privacy: PrivacyConfig, clients: int) -> None:
    # the CKKS geometry rules live with the HE code; this is the one import of the privacy layer
    # from the config layer (declared in pyproject's import-linter contract)
    from fedgl.privacy.he import HEParams, parse_coeff_bits

    try:
        bits = parse_coeff_bits(privacy.he_coeff_bits)
    except ValueError:
        raise ConfigError(f"he_coeff_bits must be comma-separated prime sizes in bits, e.g. "
                          f"60,49 (got '{privacy.he_coeff_bits}')") from None
    problem = HEParams(privacy.he_poly_degree, bits, privacy.he_scale_bits, privacy.he_pack,
                       clients).problems()
    if problem:
        raise ConfigError(problem)


def _flag(key: str) -> str:
    return key.replace("_", "-")


def _canonical_key(key: Any) -> str:
    name = str(key).replace("-", "_")
    return KEY_ALIASES.get(name, name)


def _is_own(dataset: Any) -> bool:
    """Whether ``dataset`` names the organisations' own data (``own:NAME``)."""
    return isinstance(dataset, str) and dataset.lower().startswith("own:")


def _field_default(cls: type, name: str) -> Any:
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return f.default


def _default(spec: AlgorithmSpec, key: str) -> Any:
    """The default of ``key`` for ``spec``: the algorithm's own, else the section's."""
    if key in spec.defaults:
        return spec.defaults[key]
    if key in COMMON_KEYS:
        return _field_default(SECTIONS[COMMON_KEYS[key]], key)
    return _field_default(spec.options, key) if spec.options else None


def _flatten(values: dict[str, Any], source: str) -> dict[str, Any]:
    """Flat keys from a mapping that may nest sections (``optim: {...}``) and an algorithm's
    options (``fedgat: {...}``); a key given twice is an error."""
    flat: dict[str, Any] = {}
    names = set(algorithm_names())

    def put(key: str, value: Any) -> None:
        if key in flat:
            raise ConfigError(f"{source}: key '{key}' is given twice; keep one")
        flat[key] = value

    for raw_key, value in values.items():
        key = _canonical_key(raw_key)
        if isinstance(value, dict) and (key in SECTIONS or raw_key in names):
            for inner_key, inner in value.items():
                inner_name = _canonical_key(inner_key)
                if inner_name in RENAMED_KEYS:
                    _refuse_renamed(inner_name, inner)
                if key in SECTIONS and COMMON_KEYS.get(inner_name) != key:
                    raise ConfigError(f"{source}: '{inner_key}' is not a key of section '{key}'"
                                      f"{_where(inner_name)}")
                if raw_key in names:
                    put("__options_of__" + raw_key + ":" + inner_name, inner)
                else:
                    put(inner_name, inner)
        else:
            put(key, value)
    return flat


def _where(name: str) -> str:
    if name in COMMON_KEYS:
        return f" (it belongs to section '{COMMON_KEYS[name]}')"
    return ""


def spec_defaults(spec: AlgorithmSpec) -> dict[str, Any]:
    """The algorithm's own defaults of common keys (checked: each must be a common key)."""
    for key in spec.defaults:
        if key not in COMMON_KEYS:
            raise ValueError(f"{spec.name}: default for '{key}', which is not a common key; "
                             "declare it in the algorithm's options instead")
    return dict(spec.defaults)


def _build(algorithm: Any, flat: dict[str, Any], source: str
           ) -> tuple[AlgorithmSpec, dict[str, Section], Any, frozenset[str]]:
    if not isinstance(algorithm, str):
        raise ConfigError(f"algorithm must be a name, e.g. fedgcn (got {algorithm!r})")
    spec = get_spec(canonical_name(algorithm))
    section_values: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for key, value in spec_defaults(spec).items():
        section_values[COMMON_KEYS[key]][key] = value
    option_values: dict[str, Any] = {}
    own = set(spec.option_names())
    given: set[str] = set()
    for raw_key, value in flat.items():
        key = _canonical_key(raw_key)
        if key in RENAMED_KEYS:
            _refuse_renamed(key, value)
        if isinstance(value, Section):   # Config(data=DataConfig(...))
            if SECTIONS.get(key) is not type(value):
                raise ConfigError(f"{source}: '{raw_key}' is not a section")
            section_values[key].update(dataclasses.asdict(value))
            given.update(section_values[key])
            continue
        if str(raw_key).startswith("__options_of__"):
            owner, _, key = str(raw_key)[len("__options_of__"):].partition(":")
            if canonical_name(owner) != spec.name:
                raise ConfigError(f"{source}: section '{owner}' holds options of {owner}, but the "
                                  f"algorithm is {spec.name}; drop it or use --algorithm {owner}")
            if key not in own:
                raise ConfigError(f"{source}: '{key}' is not an option of {spec.name}"
                                  f"{_suggest(key, spec.option_names())}")
        if key in COMMON_KEYS:
            section_values[COMMON_KEYS[key]][key] = value
            given.add(key)
        elif key in own:
            option_values[key] = value
            given.add(key)
        else:
            _refuse_foreign(key, value, spec, source)
    if _is_own(section_values["data"].get("dataset", _field_default(DataConfig, "dataset"))):
        # the organisations' own data: their shards are the partition, recorded as such; a
        # partition at the algorithm's default (carried over by replace(), or stored by an
        # earlier fedgl) is theirs, another one is refused by validate()
        fed = section_values["federation"]
        if fed.get("partition", _default(spec, "partition")) == _default(spec, "partition"):
            fed["partition"] = OWN_PARTITION
    sections = {}
    for name, cls in SECTIONS.items():
        try:
            sections[name] = cls(**section_values[name])
        except TypeError as exc:  # pragma: no cover - keys are routed by COMMON_KEYS
            raise ConfigError(f"{source}: {exc}") from None
    options = spec.options(**option_values) if spec.options is not None else None
    return spec, sections, options, frozenset(given)


def _reversed_list(value: Any) -> str:
    parts = [p.strip() for p in str(value).split(",")]
    return ",".join(reversed(parts))


def migrate_stored(values: dict[str, Any]) -> dict[str, Any]:
    """Flat keys of a config written before fan-outs moved to PyG's order, in today's keys."""
    out = dict(values)
    for old, new in (("fanouts", "num_neighbors"), ("eval_fanouts", "eval_num_neighbors")):
        if old in out and new not in out:
            out[new] = _reversed_list(out.pop(old))
    return out


def _refuse_renamed(key: str, value: Any) -> None:
    """An old fan-out key: one line with the new key and the reversed list."""
    new = RENAMED_KEYS[key]
    text = str(value).strip()
    if "," in text:
        fix = (f"reverse your list: --{_flag(key)} {text} is --{_flag(new)} "
               f"{_reversed_list(text)}")
    else:
        fix = f"--{_flag(new)} {text or '(empty)'} means the same"
    raise ConfigError(f"{key} is now {new}, first layer first as PyG's NeighborLoader ({fix}; "
                      "see docs/decisions.md)")


def _refuse_foreign(key: str, value: Any, spec: AlgorithmSpec, source: str) -> None:
    """A key that is not the chosen algorithm's: harmless at another algorithm's default,
    otherwise an error naming who reads it; unknown keys get a did-you-mean."""
    readers = [s for s in load_all() if key in s.option_names()]
    if readers:
        if any(value == _field_default(s.options, key) for s in readers):
            return
        names = ", ".join(s.name for s in readers)
        raise ConfigError(f"{key} is read by {names}, not by {spec.name}; drop --{_flag(key)} or "
                          f"use --algorithm {readers[0].name}")
    every = [*COMMON_KEYS, *{n for s in load_all() for n in s.option_names()}, *SECTIONS]
    raise ConfigError(f"{source}: unknown key '{key}'{_suggest(key, every)}; valid keys: see "
                      "`fedgl run --help`")


def _suggest(key: str, names: list[str]) -> str:
    close = difflib.get_close_matches(key, names, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
