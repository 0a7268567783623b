"""``fedgl client``'s safety policy: its flags and ``--policy FILE``
(:class:`~fedgl.privacy.policy.ClientPolicy`).

The file is a YAML mapping of the policy's keys (the run's configuration names: ``secure_sum``,
``dp_epsilon``, ``feature_bound``, ..., and ``algorithms``: a list); a flag given on the command
line overrides the file's value. Every key left out takes its protective default
(:data:`~fedgl.privacy.policy.PROTECTIVE`: the robust secure sum with secure models, the edge
adjacency check, two contributors at least, a feature bound), also where a secure-sum mode is
named (``--secure-sum mask`` keeps the others; secure models only with mask or robust), until
the organisation names otherwise (``--adjacency-check node``, ``--min-contributors 1``,
``--feature-bound none``, ``--no-secure-models``); plaintext is served only when ``secure_sum:
none`` (``--secure-sum none``) is named, which takes the policy as written, and the client then
says, in one line, what a plaintext server learns (:func:`plaintext_notice`). An empty or
comment-only policy file is an error. A policy with DP and no ``dp_budget`` gets
:data:`~fedgl.privacy.policy.DEFAULT_DP_RELEASES` releases' worth, and needs ``--state-dir``
(where the ε spent is kept across restarts).
"""

from __future__ import annotations

import argparse
from typing import Any

from fedgl.errors import ConfigError
from fedgl.privacy.policy import (
    ANY_BOUND,
    DEFAULT_DP_RELEASES,
    ClientPolicy,
    read_policy_file,
    with_dp_budget,
    with_protective_defaults,
)

#: ``--feature-bound none`` (``feature_bound: none`` in a file): no feature bound required
NO_BOUND = "none"

#: what an independent decoder found a plaintext FedGCN server knows (docs/threat-model.md,
#: "Plaintext: what the server learns"); the run's leakage report counts it for its own graph
PLAINTEXT_KNOWN = "99.96 % of Cora's feature values (10 clients, beta 1)"


def plaintext_notice(who: str) -> str:
    """The one line a client or run starting in plaintext prints: what the server learns."""
    return (f"{who}: plaintext secure_sum none: the server sees exact partial sums and, from "
            f"them, decodes e.g. {PLAINTEXT_KNOWN}; name --secure-sum robust (or mask/he) to "
            "hide them")

def plaintext_exchange(cfg: Any) -> bool:
    """Whether the run ``cfg`` sends partial sums to the server in clear (FedGCN's plaintext
    pre-training exchange, 1 or 2 hops)."""
    return ("secure_sum" in getattr(cfg.spec, "privacy", ()) and cfg.secure_sum == "none"
            and int(getattr(cfg, "hops", 0) or 0) >= 1)


def _bound(text: str) -> float | str:
    """``--feature-bound``'s value: a positive number, ``any`` (a bound must be set) or
    ``none`` (none required: :data:`NO_BOUND`)."""
    word = text.strip().lower()
    return ANY_BOUND if word == "any" else NO_BOUND if word == "none" else float(text)


#: flag dest -> (type, metavar or None for a switch, help)
_FLAGS: dict[str, tuple[Any, str | None, str]] = {
    "secure_models": (bool, None, "require models averaged through the secure sum (mask or "
                                  "robust)"),
    "encrypt_models": (bool, None, "require CKKS-encrypted model updates"),
    "own_scoring_only": (bool, None, "in an exchange over changed data (scoring nodes that "
                                     "arrived after training), send nothing for other "
                                     "organisations' nodes; its own are scored"),
    "dp_epsilon": (float, "EPS", "require DP on the released sums with ε at most EPS"),
    "dp_delta": (float, "DELTA", "with --dp-epsilon: require δ at most DELTA (default 1e-5)"),
    "dp_clip": (float, "C", "with --dp-epsilon: require the clip at most C (default 1)"),
    "dp_budget": (float, "EPS", "require the run's dp_budget set and at most EPS (with "
                                f"--dp-epsilon: default {DEFAULT_DP_RELEASES} times its ε)"),
    "feature_bound": (_bound, "B", "require the public feature bound set and at most B ('any': "
                                   "set, of any value, the default; 'none': not required)"),
    "update_bound": (float, "U", "require the server's model-update bound set and at most U"),
    "min_partial_nodes": (int, "K", "require the run's min_partial_nodes at least K: a partial "
                                    "sum for another organisation's node is sent only where it "
                                    "aggregates at least K of this organisation's nodes (else "
                                    "zeros), whatever the server does"),
    "pretrain_releases": (int, "N", "require the run's pretrain_releases set and at most N: "
                                    "the pre-training releases over this organisation's data, "
                                    "counted by content (1: training only; each scoring of new "
                                    "nodes one more; keep them across runs with --state-dir)"),
    "adjacency_check": (str, "{node,edge}", "require at least this adjacency check (node < "
                                            "edge; default: edge, node with --secure-sum "
                                            "none)"),
    "algorithms": (str, "A,B", "the algorithms this client runs (comma-separated; default: "
                               "any deployable one)"),
}


def add_policy_flags(parser: argparse.ArgumentParser) -> None:
    """The policy flags of ``fedgl client`` (all default to 'not given')."""
    parser.add_argument("--policy", default=None, metavar="FILE",
                        help="this organisation's safety policy (YAML keys as the flags below); "
                             "flags given override it. A run asking for anything weaker is "
                             "refused in one line")
    parser.add_argument("--secure-sum", choices=("none", "mask", "robust", "he"), default=None,
                        help="this organisation's secure-sum mode; a run asking another is "
                             "refused (default: robust; the other keys keep their protective "
                             "defaults with any mode but none, which is plaintext, only when "
                             "named, and takes the other keys as given)")
    parser.add_argument("--secagg-threshold", type=int, default=None, metavar="T",
                        help="robust secure sum: this client's Shamir threshold (0: clients // "
                             "2 + 1); must be the run's")
    parser.add_argument("--min-contributors", type=int, default=None, metavar="K",
                        help="refuse runs with a smaller min_contributors (default: 2; 1 "
                             "with --secure-sum none)")
    for dest, (kind, metavar, text) in _FLAGS.items():
        flag = "--" + dest.replace("_", "-")
        if kind is bool:
            parser.add_argument(flag, dest=dest, action="store_const", const=True, default=None,
                                help=text)
            if dest == "secure_models":
                parser.add_argument("--no-secure-models", dest=dest, action="store_const",
                                    const=False, help="do not require secure models (the "
                                                      "default with --secure-sum mask or "
                                                      "robust requires them)")
        elif dest == "adjacency_check":
            parser.add_argument(flag, dest=dest, choices=("node", "edge"), default=None,
                                help=text)
        else:
            parser.add_argument(flag, dest=dest, type=kind, default=None, metavar=metavar,
                                help=text)


def policy_from_args(args: Any) -> ClientPolicy:
    """The policy of ``fedgl client``'s parsed arguments (file, then the flags given)."""
    names = ("secure_sum", "secagg_threshold", "min_contributors", *_FLAGS)
    given = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
    if getattr(args, "no_model", False):
        given["receive_model"] = False
    path = getattr(args, "policy", None)
    written = read_policy_file(path) if path is not None else {}
    source = f"policy file '{path}'" if path is not None else "fedgl client flags"
    values = with_dp_budget(with_protective_defaults({**written, **given}))
    bound = values.get("feature_bound")
    if isinstance(bound, str) and bound.strip().lower() == NO_BOUND:
        values["feature_bound"] = None   # named: no bound required
    policy = ClientPolicy.from_mapping(values, source=source)
    from fedgl.config.registry import deployable_names, get_spec

    def runs_deployed(name: str) -> bool:
        try:
            spec = get_spec(name)
        except ConfigError:
            return False
        return spec.deployable and spec.name == name   # the name a run's config carries

    if policy.dp_epsilon is not None and getattr(args, "state_dir", "unset") is None:
        raise ConfigError("this client's policy names DP (dp_epsilon): start it with "
                          "--state-dir DIR, where it keeps the ε it spent against its dp_budget "
                          "across restarts")
    unknown = [a for a in policy.algorithms or () if not runs_deployed(a)]
    if unknown:
        raise ConfigError(f"policy algorithms: {unknown[0]!r} does not run deployed; name some "
                          f"of {', '.join(sorted(deployable_names()))}")
    return policy
