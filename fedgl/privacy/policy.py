"""A client's own safety policy: what it will take part in, whatever the server's set-up says.

An organisation states its policy when it starts its client (``fedgl client`` flags or a policy
file, :func:`load_policy`); a simulated client's policy is the run's configuration
(:meth:`ClientPolicy.from_config`). The policy decides two things:

1. **Which runs the client joins.** A deployed party checks the server's set-up against its
   policy (:meth:`ClientPolicy.check`) and refuses, in one line naming the setting, a run that
   asks for anything weaker. "Weaker" is defined per field in :data:`RULES` (the one place).
2. **Which message types the client answers.** Every protocol handler may declare the kind of
   step it is (``handles(..., needs=TAG)``); the client's endpoint enables only the tags of
   :meth:`ClientPolicy.message_tags`. A secure-mode client has no plaintext exchange step at all
   (the server's ``fedgcn.partial_sums`` is "not a message type" of it), and a plaintext client
   has no secure steps it does not need.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedgl.errors import ConfigError

SECURE_SUM_MODES = ("none", "mask", "robust", "he")
#: the adjacency checks from the weakest to the strongest
ADJACENCY_ORDER = ("node", "edge")

# ---------------------------------------------------------------------- message tags
#: the plaintext pre-training exchange: the server sees each client's partial sums
PLAINTEXT_SUMS = "plaintext-sums"
#: signed ephemeral keys and their directory (secure sums, HE key distribution)
KEY_EXCHANGE = "key-exchange"
#: the CKKS key holder shares, and the others install, the HE secret context
HE_KEYS = "he-keys"
#: the secure pre-training exchange: masked or encrypted uploads, aggregated replies
SECURE_SUMS = "secure-sums"
#: generic masked sums: this client's latest model (``--secure-models``) and its evaluation
#: counts (every secure-sum mode)
SECURE_MODEL_SUMS = "secure-model-sums"
#: the robust secure sum's recovery steps (consistency signatures, unmasking shares)
DROPOUT_RECOVERY = "dropout-recovery"
TAGS = (PLAINTEXT_SUMS, KEY_EXCHANGE, HE_KEYS, SECURE_SUMS, SECURE_MODEL_SUMS, DROPOUT_RECOVERY)
_FLOATS = ("dp_epsilon", "dp_delta", "dp_clip", "dp_budget", "feature_bound", "update_bound")
#: a policy's ``feature_bound: any``: the run must set a feature bound, of any value (the
#: federation's public fact about its features)
ANY_BOUND = math.inf

#: a deployed client's policy with DP ε and no ``dp_budget`` gets this many releases' worth:
#: ``dp_budget = DEFAULT_DP_RELEASES × dp_epsilon`` (so runs with a slightly different clip,
#: each a new input with fresh noise, cannot average the noise away without end)
DEFAULT_DP_RELEASES = 4

#: what a deployed client requires where its organisation names nothing else (flags or policy
#: file): the robust secure sum with secure models, the edge adjacency check, at least two
#: contributors to every received sum and a public feature bound; a named secure-sum mode keeps
#: the others (:func:`with_protective_defaults`). Plaintext is served only when the policy names
#: ``secure_sum: none``.
PROTECTIVE: dict[str, Any] = {"secure_sum": "robust", "secure_models": True,
                              "adjacency_check": "edge", "min_contributors": 2,
                              "feature_bound": ANY_BOUND}


@dataclass(frozen=True)
class Rule:
    """How one policy field compares with the run's value.

    ``kind``:

    - ``"equal"``: the run must ask for exactly the policy's value (the secure-sum mode: the
      organisations run one protocol; the robust Shamir threshold);
    - ``"on"``: a switch the policy turns on must be on in the run (secure or encrypted models);
    - ``"at_most"``: a bound the policy sets must be set in the run and no larger (DP ε, δ and
      clip, the ε budget, the feature and update bounds: a larger value is looser; unset is off);
    - ``"at_least"``: the run's value must be at least the policy's (min contributors);
    - ``"ordered"``: the run's choice must be at least as strong in ``order`` (the adjacency
      check: ``node`` < ``edge``);
    - ``"member"``: the run's value must be one the policy lists (the algorithms; no list: any).

    ``when``: the policy field whose value makes the rule apply (DP δ and clip only constrain a
    policy with DP on; the threshold only the robust mode); ``flag``: ``fedgl client``'s flag.
    """

    kind: str
    flag: str
    when: str | None = None
    order: tuple[str, ...] = ()


#: "weaker than the policy", per field (see :class:`Rule`)
RULES: dict[str, Rule] = {
    "secure_sum": Rule("equal", "--secure-sum"),
    "secagg_threshold": Rule("equal", "--secagg-threshold", when="robust"),
    "secure_models": Rule("on", "--secure-models"),
    "encrypt_models": Rule("on", "--encrypt-models"),
    "dp_epsilon": Rule("at_most", "--dp-epsilon"),
    "dp_delta": Rule("at_most", "--dp-delta", when="dp_epsilon"),
    "dp_clip": Rule("at_most", "--dp-clip", when="dp_epsilon"),
    "dp_budget": Rule("at_most", "--dp-budget"),
    "feature_bound": Rule("at_most", "--feature-bound"),
    "update_bound": Rule("at_most", "--update-bound"),
    "adjacency_check": Rule("ordered", "--adjacency-check", order=ADJACENCY_ORDER),
    "min_contributors": Rule("at_least", "--min-contributors"),
    "min_partial_nodes": Rule("at_least", "--min-partial-nodes"),
    "pretrain_releases": Rule("at_most", "--pretrain-releases"),
    "own_scoring_only": Rule("on", "--own-scoring-only"),
    "algorithms": Rule("member", "--algorithms"),
}


@dataclass(frozen=True)
class ClientPolicy:
    """One organisation's safety settings (field names as the run's configuration calls them;
    ``algorithms``: the algorithms it runs, None for any)."""

    secure_sum: str = "none"
    secagg_threshold: int = 0
    min_contributors: int = 1
    secure_models: bool = False
    encrypt_models: bool = False
    dp_epsilon: float | None = None
    dp_delta: float = 1e-5
    dp_clip: float = 1.0
    dp_budget: float | None = None
    feature_bound: float | None = None
    update_bound: float | None = None
    adjacency_check: str = "node"
    #: the fewest of its own nodes a partial sum for another organisation's node must aggregate
    #: before it is sent (withheld rows go as zeros): whatever the server does, no row it sends
    #: for another organisation carries fewer of its customers
    min_partial_nodes: int = 1
    #: the pre-training releases it makes over its data set, counted by content (training is
    #: one; each scoring of new nodes, its own or another organisation's, one more); None: any
    pretrain_releases: int | None = None
    #: in an exchange over changed data (its second or later pre-training release: scoring
    #: nodes that arrived after training), it sends nothing for other organisations' nodes
    own_scoring_only: bool = False
    algorithms: tuple[str, ...] | None = None
    #: whether this organisation takes the trained model at the end of a run (not a rule on
    #: the run: the run's result does not depend on it)
    receive_model: bool = True

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ building
    @classmethod
    def from_config(cls, cfg: Any) -> ClientPolicy:
        """A simulated client's policy: the run's own configuration (its algorithm only)."""
        values = {name: _run_value(cfg, name) for name in RULES if name != "algorithms"}
        return cls(**values, algorithms=(str(cfg.algorithm),))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], source: str = "policy") -> ClientPolicy:
        """From plain values (a policy file, flags); an unknown key or a bad value is one
        :class:`~fedgl.errors.ConfigError` line naming it."""
        known = {f.name for f in dataclasses.fields(cls)}
        for key in values:
            if key not in known:
                raise ConfigError(f"{source}: unknown policy key {key!r}; the keys are "
                                  f"{', '.join(sorted(known))}")
        values = dict(values)
        algos = values.get("algorithms")
        if isinstance(algos, str):
            values["algorithms"] = tuple(a.strip() for a in algos.split(",") if a.strip())
        elif isinstance(algos, list | tuple):
            values["algorithms"] = tuple(algos)
        if isinstance(values.get("feature_bound"), str) and \
                values["feature_bound"].strip().lower() == "any":
            values["feature_bound"] = ANY_BOUND
        for name in _FLOATS:  # YAML reads 1e-5 as a string
            if isinstance(values.get(name), str):
                try:
                    values[name] = float(values[name])
                except ValueError:
                    raise ConfigError(f"{source}: policy {name} must be a number (got "
                                      f"{values[name]!r})") from None
        try:
            return cls(**values)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    def provisioned(self, mode: str, secure_models: bool) -> ClientPolicy:
        """This policy with the secure-sum mode the client was provisioned for (mask or robust;
        other modes leave it as it is) and secure models on if either says so. In simulation the
        experimenter provisions; in a deployment the party, with the run it accepted."""
        if mode not in ("mask", "robust"):
            return self
        return dataclasses.replace(self, secure_sum=mode,
                                   secure_models=self.secure_models or secure_models)

    def validate(self) -> None:
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"policy {name} {why}")

        if self.secure_sum not in SECURE_SUM_MODES:
            raise bad("secure_sum", f"must be one of {', '.join(SECURE_SUM_MODES)} "
                                    f"(got {self.secure_sum!r})")
        if self.adjacency_check not in ADJACENCY_ORDER:
            raise bad("adjacency_check", f"must be node or edge (got {self.adjacency_check!r})")
        for name in ("secure_models", "encrypt_models", "receive_model", "own_scoring_only"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, "must be true or false")
        for name in ("secagg_threshold", "min_contributors", "min_partial_nodes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name[0] == "m" else 0):
                raise bad(name, f"must be an integer >= {1 if name[0] == 'm' else 0} (got {v!r})")
        v = self.pretrain_releases
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise bad("pretrain_releases", f"must be an integer >= 1 (got {v!r})")
        for name in _FLOATS:
            v = getattr(self, name)
            if v is None and name in ("dp_epsilon", "dp_budget", "feature_bound",
                                      "update_bound"):
                continue
            if name == "feature_bound" and v == ANY_BOUND:
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < math.inf:
                raise bad(name, f"must be a positive number (got {v!r})")
        if not self.dp_delta < 1:
            raise bad("dp_delta", f"must be below 1 (got {self.dp_delta})")
        if self.algorithms is not None and (
                not isinstance(self.algorithms, tuple) or not self.algorithms
                or not all(isinstance(a, str) and a for a in self.algorithms)):
            raise bad("algorithms", "must be a non-empty list of algorithm names")

    # ------------------------------------------------------------------ the two decisions
    def weaker(self, cfg: Any) -> str | None:
        """Why the run ``cfg`` asks for less than this policy (the first field, one line), or
        None when it asks for at least as much everywhere."""
        for name, rule in RULES.items():
            if rule.when == "robust" and self.secure_sum != "robust":
                continue
            if rule.when == "dp_epsilon" and self.dp_epsilon is None:
                continue
            theirs = str(cfg.algorithm) if name == "algorithms" else _run_value(cfg, name)
            why = _compare(name, rule, getattr(self, name), theirs)
            if why is not None:
                return why
        return None

    def check(self, cfg: Any) -> None:
        """Refuse (one :class:`~fedgl.errors.ConfigError` line) a run weaker than the policy."""
        why = self.weaker(cfg)
        if why is not None:
            raise ConfigError(why)

    def message_tags(self) -> frozenset[str]:
        """The kinds of protocol step this client answers (see the module docstring)."""
        tags = set()
        if self.secure_sum == "none":
            tags.add(PLAINTEXT_SUMS)
        else:
            tags.update((KEY_EXCHANGE, SECURE_SUMS))
        if self.secure_sum == "he" or self.encrypt_models:
            tags.update((KEY_EXCHANGE, HE_KEYS))
        if self.secure_sum != "none":   # the evaluation counts' sums (and secure models')
            tags.add(SECURE_MODEL_SUMS)
        if self.secure_sum == "robust":
            tags.add(DROPOUT_RECOVERY)
        return frozenset(tags)

    @property
    def plaintext(self) -> bool:
        """Whether this client serves the plaintext exchange (its partial sums in clear)."""
        return self.secure_sum == "none"

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if self.feature_bound == ANY_BOUND:
            out["feature_bound"] = "any"
        if self.algorithms is not None:
            out["algorithms"] = list(self.algorithms)
        return out


def _run_value(cfg: Any, name: str) -> Any:
    """The run's value of a policy field; an option the run's algorithm lacks is off."""
    default = {f.name: f.default for f in dataclasses.fields(ClientPolicy)}[name]
    return getattr(cfg, name, default)


def _compare(name: str, rule: Rule, mine: Any, theirs: Any) -> str | None:
    """Why the run's value ``theirs`` is weaker than the policy's ``mine`` under ``rule``."""
    flag = rule.flag
    if rule.kind == "equal":
        if theirs == mine:
            return None
        fix = ("; this client serves plaintext only with `secure_sum: none` (or --secure-sum "
               "none) named in its policy") if name == "secure_sum" and theirs == "none" else \
            "; the organisations must agree"
        return f"the run asks for {name} {theirs!r} but this client runs {mine!r} (its " \
               f"{flag}){fix}"
    if rule.kind == "on":
        return None if not mine or theirs else \
            f"the run has {name} off but this client requires it ({flag})"
    if rule.kind == "at_most":
        if mine is None or (theirs is not None and theirs <= mine):
            return None
        if theirs is None and mine == ANY_BOUND:
            return f"the run has {name} off but this client requires one ({flag} any)"
        if theirs is None:
            return f"the run has {name} off but this client requires at most {flag} {mine}"
        return f"the run's {name} {theirs} is above this client's {flag} {mine}"
    if rule.kind == "at_least":
        return None if theirs >= mine else \
            f"the run's {name} {theirs} is below this client's {flag} {mine}"
    if rule.kind == "ordered":
        return None if theirs in rule.order[rule.order.index(mine):] else \
            f"the run's {name} {theirs!r} is weaker than this client's {flag} {mine!r} " \
            f"({' < '.join(rule.order)})"
    if rule.kind == "member":
        return None if mine is None or theirs in mine else \
            f"the run's algorithm {theirs!r} is not one this client runs ({flag} " \
            f"{','.join(mine)})"
    raise ValueError(f"unknown rule kind {rule.kind!r}")


def _yaml_where(exc: Exception) -> str:
    """`` at line N (what is wrong)`` for a YAML error: the line of the construct at fault. A
    key without its colon, an unclosed quote or bracket is found only on a later line (or at
    the end of the file), where the parser notices; it names the line where the construct
    began as its context, which is the line to fix."""
    problem = getattr(exc, "problem_mark", None)
    context = getattr(exc, "context_mark", None)
    why = str(getattr(exc, "context", None) or "")
    mark = context if context is not None and (why.startswith("while scanning")
                                               or why.startswith("while parsing a flow")) \
        else problem
    if mark is None:
        return ""
    what = getattr(exc, "problem", None)
    return f" at line {mark.line + 1}" + (f" ({what})" if what else "")


def read_policy_file(path: str | Path) -> dict[str, Any]:
    """A policy file's mapping (YAML or JSON) as written; every problem, an empty or
    comment-only file included, is one ConfigError line."""
    import yaml

    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise ConfigError(f"policy file '{path}' does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"policy file '{path}' is unreadable ({type(exc).__name__})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"policy file '{path}' is not valid YAML{_yaml_where(exc)}; write "
                          "`key: value` lines") from None
    if data is None or data == {}:
        raise ConfigError(f"policy file '{path}' is empty (or only comments); write the "
                          "policy's `key: value` lines, e.g. `secure_sum: robust` (`secure_sum: "
                          "none` for plaintext), or drop --policy for the protective default")
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ConfigError(f"policy file '{path}' is not a mapping of policy keys; write "
                          "`key: value` lines")
    return data


def with_protective_defaults(values: Mapping[str, Any]) -> dict[str, Any]:
    """A deployed client's policy values: what the organisation named, and :data:`PROTECTIVE`
    for every key it left out. A named secure-sum mode replaces the robust default only: the
    edge check, two contributors and a feature bound stay unless named otherwise, and secure
    models too where the mode can average models (mask, robust) and the keys named allow them
    (not beside ``encrypt_models`` or ``update_bound``, which need the server to see or
    encrypt each update instead). ``secure_sum: none`` (plaintext, asked for by name) is taken
    as written: a plaintext server sees every partial sum anyway, and the algorithms without a
    secure sum or an edge check run only in plaintext."""
    values = dict(values)
    mode = values.get("secure_sum", PROTECTIVE["secure_sum"])
    if mode == "none":
        return values
    defaults = dict(PROTECTIVE)
    if values.get("encrypt_models") or values.get("update_bound") is not None or \
            mode not in ("mask", "robust"):
        defaults.pop("secure_models")
    return {**defaults, **values}


def with_dp_budget(values: Mapping[str, Any]) -> dict[str, Any]:
    """A deployed client's policy values with a DP budget: where DP is named (``dp_epsilon``)
    and ``dp_budget`` is not, ``dp_budget = DEFAULT_DP_RELEASES × dp_epsilon``. A value that
    is not a positive number is left for :meth:`ClientPolicy.validate` to name."""
    values = dict(values)
    eps = values.get("dp_epsilon")
    if isinstance(eps, str):
        try:
            eps = float(eps)
        except ValueError:
            return values
    if values.get("dp_budget") is None and isinstance(eps, int | float) and \
            not isinstance(eps, bool) and 0 < eps < math.inf:
        values["dp_budget"] = DEFAULT_DP_RELEASES * float(eps)
    return values


def load_policy(path: str | Path, overrides: Mapping[str, Any] | None = None) -> ClientPolicy:
    """A policy file (YAML or JSON mapping of the policy's keys), with ``overrides`` (flags the
    organisation gave explicitly) on top, as given (no defaults added: see
    :func:`with_protective_defaults`). Every problem is one ConfigError line."""
    data = read_policy_file(path)
    return ClientPolicy.from_mapping({**data, **(overrides or {})}, source=f"policy file '{path}'")
