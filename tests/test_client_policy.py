"""The client's own safety policy decides what it answers: a deployed party refuses a set-up
that asks for anything weaker (one line), and the message types a role accepts follow from its
policy (a secure-mode client has no plaintext exchange step at all), on every runtime."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.algorithms.fedgcn.server import FedGCNServer
from fedgl.algorithms.runner import build_federation
from fedgl.config import Config
from fedgl.config.registry import algorithm_names
from fedgl.data.shard_format import write_shard
from fedgl.errors import ConfigError
from fedgl.federation.codec import Encoded, decode, encode
from fedgl.federation.protocol import Endpoint, ProtocolViolation, handler_table
from fedgl.privacy.identity import write_keys
from fedgl.privacy.policy import ANY_BOUND, RULES, ClientPolicy, load_policy
from tests.flower_helpers import needs_flwr, tiny_shard
from tests.helpers import random_graph, random_partition

BASE = {"algorithm": "fedgcn", "clients": 4, "hops": 2}

# ---------------------------------------------------------------------- "weaker", per field
#: (field, the policy, run keys weaker than it, run keys at least as strong)
WEAKER = [
    ("secure_sum", {"secure_sum": "mask"}, [{}, {"secure_sum": "robust"}],
     [{"secure_sum": "mask"}]),
    ("secagg_threshold", {"secure_sum": "robust", "secagg_threshold": 3},
     [{"secure_sum": "robust", "secagg_threshold": 2}],
     [{"secure_sum": "robust", "secagg_threshold": 3}]),
    ("secure_models", {"secure_sum": "mask", "secure_models": True},
     [{"secure_sum": "mask"}], [{"secure_sum": "mask", "secure_models": True}]),
    ("encrypt_models", {"encrypt_models": True}, [{}],
     [{"encrypt_models": True, "oracle_eval": False}]),
    ("dp_epsilon", {"dp_epsilon": 1.0}, [{}, {"dp_epsilon": 2.0}],
     [{"dp_epsilon": 1.0}, {"dp_epsilon": 0.5}]),
    ("dp_delta", {"dp_epsilon": 1.0, "dp_delta": 1e-5},
     [{"dp_epsilon": 1.0, "dp_delta": 1e-4}], [{"dp_epsilon": 1.0, "dp_delta": 1e-6}]),
    ("dp_clip", {"dp_epsilon": 1.0, "dp_clip": 1.0}, [{"dp_epsilon": 1.0, "dp_clip": 2.0}],
     [{"dp_epsilon": 1.0, "dp_clip": 0.5}]),
    ("dp_budget", {"dp_epsilon": 1.0, "dp_budget": 8.0},
     [{"dp_epsilon": 1.0}, {"dp_epsilon": 1.0, "dp_budget": 16.0}],
     [{"dp_epsilon": 1.0, "dp_budget": 4.0}]),
    ("feature_bound", {"feature_bound": 1.0}, [{}, {"feature_bound": 2.0}],
     [{"feature_bound": 1.0}, {"feature_bound": 0.5}]),
    ("update_bound", {"update_bound": 5.0}, [{}, {"update_bound": 10.0}],
     [{"update_bound": 5.0}]),
    ("adjacency_check", {"adjacency_check": "edge"}, [{}, {"adjacency_check": "node"}],
     [{"adjacency_check": "edge"}]),
    ("min_contributors", {"min_contributors": 2}, [{}, {"min_contributors": 1}],
     [{"min_contributors": 2}, {"min_contributors": 3}]),
    ("min_partial_nodes", {"min_partial_nodes": 2}, [{}, {"min_partial_nodes": 1}],
     [{"min_partial_nodes": 2}, {"min_partial_nodes": 3}]),
    ("own_scoring_only", {"own_scoring_only": True}, [{}],
     [{"own_scoring_only": True}]),
    ("pretrain_releases", {"pretrain_releases": 2}, [{}, {"pretrain_releases": 3}],
     [{"pretrain_releases": 2}, {"pretrain_releases": 1}]),
    ("algorithms", {"algorithms": ("fedgcn",)}, [{"algorithm": "fedgat", "hops": None}],
     [{}]),
]


def _cfg(keys: dict[str, Any]) -> Config:
    values = {**BASE, **keys}
    return Config.from_dict({k: v for k, v in values.items() if v is not None})


def test_every_policy_field_has_a_rule():
    # receive_model is what the organisation does with the model, not a rule on the run
    assert set(RULES) == {f.name for f in dataclasses.fields(ClientPolicy)} - {"receive_model"}
    assert {row[0] for row in WEAKER} == set(RULES)


@pytest.mark.parametrize("name,policy,weaker,ok", WEAKER, ids=[r[0] for r in WEAKER])
def test_a_run_weaker_than_the_policy_is_refused_in_one_line(name, policy, weaker, ok):
    pol = ClientPolicy(**policy)
    for keys in weaker:
        with pytest.raises(ConfigError) as err:
            pol.check(_cfg(keys))
        line = str(err.value)
        assert "\n" not in line and name.removesuffix("s") in line, line
    for keys in ok:
        assert pol.weaker(_cfg(keys)) is None, keys


def test_a_simulated_clients_policy_is_its_runs_configuration():
    cfg = _cfg({"secure_sum": "robust", "secagg_threshold": 3, "secure_models": True,
                "dp_epsilon": 2.0, "dp_budget": 6.0, "feature_bound": 1.0,
                "adjacency_check": "edge", "min_contributors": 2})
    pol = ClientPolicy.from_config(cfg)
    assert pol == ClientPolicy(secure_sum="robust", secagg_threshold=3, secure_models=True,
                               dp_epsilon=2.0, dp_budget=6.0, feature_bound=1.0,
                               adjacency_check="edge", min_contributors=2,
                               algorithms=("fedgcn",))
    assert pol.weaker(cfg) is None


# ---------------------------------------------------------------------- the policy file
def test_a_policy_file_and_flags_on_top(tmp_path: Path):
    path = tmp_path / "policy.yaml"
    path.write_text("secure_sum: mask\nsecure_models: true\ndp_epsilon: 1\ndp_delta: 1e-6\n"
                    "feature_bound: 1\nadjacency_check: edge\nmin_contributors: 2\n"
                    "algorithms: [fedgcn]\n")
    pol = load_policy(path, {"dp_epsilon": 0.5})
    assert pol == ClientPolicy(secure_sum="mask", secure_models=True, dp_epsilon=0.5,
                               dp_delta=1e-6, feature_bound=1.0, adjacency_check="edge",
                               min_contributors=2, algorithms=("fedgcn",))


@pytest.mark.parametrize("text,match", [
    ("secure_sum: mask\nfeature_bond: 1\n", "unknown policy key 'feature_bond'"),
    ("secure_sum: [mask\n", "not valid YAML at line"),
    ("- mask\n", "not a mapping"),
    ("secure_sum: sometimes\n", "policy secure_sum must be one of"),
    ("dp_epsilon: -1\n", "policy dp_epsilon must be a positive number"),
    ("dp_epsilon: lots\n", "policy dp_epsilon must be a number"),
    ("min_contributors: 0\n", "policy min_contributors must be an integer >= 1"),
    ("adjacency_check: nodes\n", "policy adjacency_check must be node or edge"),
    ("algorithms: []\n", "policy algorithms must be a non-empty list"),
])
def test_a_bad_policy_file_is_one_line(tmp_path: Path, text, match):
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as err:
        load_policy(path)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="does not exist"):
        load_policy(tmp_path / "missing.yaml")


@needs_flwr
def test_fedgl_client_with_a_bad_policy_exits_2_in_one_line(tmp_path: Path, capsys):
    from fedgl.cli import main
    from fedgl.deployment.commands import free_port

    roster = write_keys(tmp_path / "keys", 3)
    manifest = write_shard(tiny_shard(1), tmp_path / "shard")
    (tmp_path / "p.yaml").write_text("secure_sum: mask\ndp_epsilon: 0\n")
    code = main(["client", "--superlink", f"127.0.0.1:{free_port()}", "--data", str(manifest),
                 "--key", str(tmp_path / "keys" / "client-1.key"), "--roster", str(roster),
                 "--insecure", "--policy", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "policy dp_epsilon must be a positive" in err, err


# ---------------------------------------------------------------------- the deployed party
RUN_ID, NODE_ID = 7, 2**64 - 5


def _party(tmp_path: Path, policy: ClientPolicy):
    from fedgl.deployment.party import Party

    roster = write_keys(tmp_path / "keys", 3)
    manifest = write_shard(tiny_shard(1, test_node=True), tmp_path / "shard")
    return Party(manifest, tmp_path / "keys" / "client-1.key", roster, policy)


def _send(party, msg_type: str, payload: Any, phase: str = "setup") -> tuple[dict, Any]:
    head, reply = party.answer({"op": "message", "phase": phase, "node_id": NODE_ID,
                                "run_id": RUN_ID}, encode(msg_type, payload).to_bytes())
    return head, (decode(Encoded.from_bytes(reply))[1] if reply else None)


def _setup(**keys: Any) -> dict[str, Any]:
    cfg = Config.from_dict({"algorithm": "fedgcn", "clients": 3, "hops": 2, **keys})
    return {"config": cfg.to_dict(), "seed": 0, "run_tag": "a1b2", "resumed": False}


STRICT = dict(secure_sum="mask", dp_epsilon=1.0, secure_models=True, feature_bound=1.0)
SERVED = {"secure_sum": "mask", "dp_epsilon": 1.0, "secure_models": True, "feature_bound": 1.0}


@pytest.mark.parametrize("off,match", [
    (("dp_epsilon", "secure_models", "feature_bound"), "secure_models off"),
    (("dp_epsilon",), "dp_epsilon off"),
    (("secure_models",), "secure_models off"),
    (("feature_bound",), "feature_bound off"),
])
def test_a_party_refuses_a_set_up_that_switches_its_protections_off(tmp_path, off, match):
    """The server's set-up turns DP, secure models and the feature bound off (all of them, or
    one): the party refuses in one line and builds no role; a set-up that keeps them is served,
    and its role has no plaintext exchange step."""
    party = _party(tmp_path, ClientPolicy(**STRICT))
    _send(party, "party.hello", {"challenge": b"\x05" * 32})
    head, _ = _send(party, "party.setup", _setup(**{k: v for k, v in SERVED.items()
                                                    if k not in off}))
    assert match in head["refused"] and "\n" not in head["refused"], head
    assert party.endpoint is None and party.protocol_state == "greeted"
    head, reply = _send(party, "party.setup", _setup(**SERVED))
    assert "refused" not in head and reply["ok"] is True
    head, _ = _send(party, "fedgcn.partial_sums", {}, phase="pretrain")
    assert "'fedgcn.partial_sums' is not a message type of FedGCNClient" in head["refused"]
    for msg_type in ("fedgcn.announce_rows", "fedgcn.block_sums", "fedgcn.receive_sums"):
        head, _ = _send(party, msg_type, {}, phase="pretrain")
        assert f"'{msg_type}' is not a message type" in head["refused"], head


# ---------------------------------------------------------------------- message types
#: every role answers the set-up's facts (fedgl.federation.facts), whatever its policy
FACTS = {"setup.facts"}
#: every FedGCN client, whatever its mode: scoring over changed data (fedgcn/update.py)
UPDATE = {"fedgcn.changed_rows", "fedgcn.restrict_rows"}
FIT_EVAL = {"fedavg.fit", "fedavg.evaluate"} | FACTS | UPDATE
PLAIN = {"fedgcn.partial_sums", "fedgcn.announce_rows", "fedgcn.block_sums",
         "fedgcn.receive_block", "fedgcn.receive_sums"}
KEYS = {"fedgcn.privacy_hello", "secagg.keys"}
HE_KEYS = {"fedgcn.he_share_keys", "fedgcn.he_install"}
SECURE = {"fedgcn.secure_upload", "fedgcn.secure_receive"}
MODEL_SUM = {"secagg.advertise", "secagg.upload"}
RECOVERY = {"secagg.consistency", "secagg.unmask"}
#: FedGCN's accepted message types per (secure-sum mode, model protection): the expectation
ACCEPTED = {
    ("none", ""): FIT_EVAL | PLAIN,
    ("none", "encrypt_models"): FIT_EVAL | PLAIN | KEYS | HE_KEYS,
    # every secure mode takes the generic secure sums: its evaluation counts go only there
    ("mask", ""): FIT_EVAL | KEYS | SECURE | MODEL_SUM,
    ("mask", "secure_models"): FIT_EVAL | KEYS | SECURE | MODEL_SUM,
    ("robust", ""): FIT_EVAL | KEYS | SECURE | MODEL_SUM | RECOVERY,
    ("robust", "secure_models"): FIT_EVAL | KEYS | SECURE | MODEL_SUM | RECOVERY,
    ("he", ""): FIT_EVAL | KEYS | HE_KEYS | SECURE | MODEL_SUM,
    ("he", "encrypt_models"): FIT_EVAL | KEYS | HE_KEYS | SECURE | MODEL_SUM,
}
#: algorithms whose clients support a secure sum (every other one is refused by its config)
SECURE_CAPABLE = {"fedgcn"}
UNDECLARED = ["_release", "provision", "install_identity", "__init__", "fedgcn.nothing"]


@pytest.fixture(scope="module")
def small():
    graph = random_graph(nodes=60, seed=5)
    return graph, random_partition(graph.num_nodes, 3, seed=5)


def _accepts(endpoint: Endpoint, msg_type: str) -> bool:
    """Whether the endpoint takes ``msg_type`` as one of its message types (any other refusal,
    an empty payload's schema or state, is past that check)."""
    try:
        endpoint.handle(encode(msg_type, {}), "pretrain")
    except ProtocolViolation as exc:
        assert "\n" not in str(exc)
        return "is not a message type" not in str(exc)
    return True


@pytest.mark.parametrize("mode,models", sorted(ACCEPTED))
def test_every_declared_message_type_against_every_mode(small, mode, models):
    """Every message type any role declares (and a few internal names) sent to a FedGCN client
    of each mode: exactly the expected ones are message types of it."""
    keys = {"clients": 3, "hops": 2, "progress": False, "secure_sum": mode}
    if models:
        keys[models] = True
    if models == "encrypt_models":
        keys["oracle_eval"] = False
    server = build_federation(*small, Config.from_dict(keys), 0, FedGCNClient, FedGCNServer)
    client = server.runtime.local_client(0)
    endpoint = Endpoint(client, "client 0")
    declared = set(handler_table(FedGCNClient))
    assert declared == FIT_EVAL | PLAIN | KEYS | HE_KEYS | SECURE | MODEL_SUM | RECOVERY
    accepted = {t for t in sorted(declared) + UNDECLARED if _accepts(endpoint, t)}
    assert accepted == ACCEPTED[(mode, models)]
    assert set(server.runtime._endpoints[0].table) == ACCEPTED[(mode, models)]


@pytest.mark.parametrize("mode", ["mask", "robust", "he"])
def test_no_other_algorithm_runs_a_secure_mode(mode):
    """The other roles never run under a secure-sum policy: their configuration is refused."""
    for name in algorithm_names():
        if name in SECURE_CAPABLE:
            continue
        with pytest.raises(ConfigError):
            Config.from_dict({"algorithm": name, "secure_sum": mode})


def test_a_secure_models_client_never_returns_its_model(small):
    """``fedavg.fit`` of a client whose policy says secure models replies with the length of the
    input it holds for the secure sum, never the weights, even when no identity was installed."""
    cfg = Config.from_dict({"clients": 3, "hops": 2, "progress": False, "secure_sum": "mask",
                            "secure_models": True})
    server = build_federation(*small, cfg, 0, FedGCNClient, FedGCNServer)
    server.pretrain()
    reply = server.runtime.call("fedavg.fit", {"weights": server.weights, "local_steps": 1},
                                phase="train")
    assert all(set(r["weights"]) == {"secure_length"} for r in reply.values())
    bare = FedGCNClient(server.runtime.local_client(1).data, cfg, 0)
    bare.received_sums = server.runtime.local_client(1).received_sums
    bare.remote_deg_tilde = server.runtime.local_client(1).remote_deg_tilde
    bare.protocol_state = "ready"
    out = bare.fit({k: v.clone() for k, v in server.weights.items()}, 1)
    assert set(out["weights"]) == {"secure_length"}
    assert not any(isinstance(v, torch.Tensor) for v in out["weights"].values())


def test_client_flags_build_the_policy_and_name_a_bad_algorithm(tmp_path: Path):
    import argparse

    from fedgl.deployment.client_policy import add_policy_flags, policy_from_args

    parser = argparse.ArgumentParser()
    add_policy_flags(parser)
    args = parser.parse_args(["--secure-sum", "robust", "--secure-models", "--dp-epsilon", "2",
                              "--feature-bound", "1", "--adjacency-check", "edge",
                              "--algorithms", "fedgcn,fedgat"])
    assert policy_from_args(args) == ClientPolicy(   # DP named: the default budget, 4 ε
        secure_sum="robust", secure_models=True, dp_epsilon=2.0, dp_budget=8.0,
        feature_bound=1.0, adjacency_check="edge", algorithms=("fedgcn", "fedgat"),
        min_contributors=2)
    # no secure-sum mode named: the protective default; plaintext only when named
    assert policy_from_args(parser.parse_args([])) == ClientPolicy(
        secure_sum="robust", secure_models=True, adjacency_check="edge", min_contributors=2,
        feature_bound=ANY_BOUND)
    assert policy_from_args(parser.parse_args(["--secure-sum", "none"])) == ClientPolicy()
    (tmp_path / "p.yaml").write_text("secure_sum: mask\nmin_contributors: 3\n")
    args = parser.parse_args(["--policy", str(tmp_path / "p.yaml"), "--min-contributors", "2"])
    assert policy_from_args(args) == ClientPolicy(   # a named mode keeps the other defaults
        secure_sum="mask", min_contributors=2, secure_models=True, adjacency_check="edge",
        feature_bound=ANY_BOUND)
    with pytest.raises(ConfigError, match="'fedgcm' does not run deployed") as err:
        policy_from_args(parser.parse_args(["--algorithms", "fedgcm"]))
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------------- safe by default
def _default_policy(*flags: str) -> ClientPolicy:
    import argparse

    from fedgl.deployment.client_policy import add_policy_flags, policy_from_args

    parser = argparse.ArgumentParser()
    add_policy_flags(parser)
    return policy_from_args(parser.parse_args(list(flags)))


def test_a_client_without_a_named_mode_refuses_plaintext_and_names_the_fix():
    """``fedgl client`` with no policy flags requires the robust secure sum with secure models,
    the edge check, two contributors and a feature bound: a plaintext run is refused in one
    line that says how to ask for plaintext, a run with all of them is served."""
    pol = _default_policy()
    assert not pol.plaintext and pol.message_tags().isdisjoint({"plaintext-sums"})
    line = pol.weaker(_cfg({}))
    assert line is not None and "\n" not in line
    assert "secure_sum 'none'" in line and "`secure_sum: none`" in line
    protected = {"secure_sum": "robust", "secure_models": True, "adjacency_check": "edge",
                 "min_contributors": 2}
    line = pol.weaker(_cfg(protected))
    assert line == "the run has feature_bound off but this client requires one " \
                   "(--feature-bound any)"
    assert pol.weaker(_cfg({**protected, "feature_bound": 3.0})) is None
    for off in ("secure_models", "adjacency_check", "min_contributors"):
        weaker = {k: v for k, v in protected.items() if k != off}
        assert off in (pol.weaker(_cfg({**weaker, "feature_bound": 1.0})) or ""), off
    # another algorithm (no secure sum) is refused too, until plaintext is named
    assert "secure_sum 'none'" in pol.weaker(_cfg({"algorithm": "fedgat", "hops": None}))
    named = _default_policy("--secure-sum", "none")
    assert named.plaintext and named.weaker(_cfg({"algorithm": "fedgat", "hops": None})) is None
    # a protective default a named key cannot have beside it is left out (encrypted models)
    assert _default_policy("--encrypt-models").secure_models is False
    assert _default_policy("--feature-bound", "any").feature_bound == ANY_BOUND
    assert _default_policy("--feature-bound", "2").feature_bound == 2.0


def test_a_default_party_serves_only_the_protected_run(tmp_path: Path):
    """A party built without a policy (as ``fedgl client`` without flags) refuses a plaintext
    set-up and has no plaintext step once a protected run is set up."""
    from fedgl.deployment.party import Party

    roster = write_keys(tmp_path / "keys", 3)
    manifest = write_shard(tiny_shard(1, test_node=True), tmp_path / "shard")
    party = Party(manifest, tmp_path / "keys" / "client-1.key", roster)
    _send(party, "party.hello", {"challenge": b"\x05" * 32})
    head, _ = _send(party, "party.setup", _setup())
    assert "secure_sum 'none'" in head["refused"] and party.endpoint is None
    head, reply = _send(party, "party.setup", _setup(
        secure_sum="robust", secure_models=True, adjacency_check="edge", min_contributors=2,
        feature_bound=1.0))
    assert "refused" not in head and reply["ok"] is True
    head, _ = _send(party, "fedgcn.partial_sums", {}, phase="pretrain")
    assert "'fedgcn.partial_sums' is not a message type" in head["refused"]


@pytest.mark.parametrize("text", ["", "# only a comment\n\n", "{}\n"])
def test_an_empty_policy_file_is_one_line(tmp_path: Path, text: str):
    from fedgl.deployment.client_policy import policy_from_args

    path = tmp_path / "policy.yaml"
    path.write_text(text)

    class Args:
        policy = str(path)

    for load in (lambda: load_policy(path), lambda: policy_from_args(Args())):
        with pytest.raises(ConfigError) as err:
            load()
        line = str(err.value)
        assert "\n" not in line and "is empty (or only comments)" in line
        assert "secure_sum: robust" in line and "drop --policy" in line


@needs_flwr
def test_fedgl_client_with_an_empty_policy_exits_2(tmp_path: Path, capsys):
    from fedgl.cli import main
    from fedgl.deployment.commands import free_port

    roster = write_keys(tmp_path / "keys", 3)
    manifest = write_shard(tiny_shard(1), tmp_path / "shard")
    (tmp_path / "p.yaml").write_text("# to be written\n")
    code = main(["client", "--superlink", f"127.0.0.1:{free_port()}", "--data", str(manifest),
                 "--key", str(tmp_path / "keys" / "client-1.key"), "--roster", str(roster),
                 "--insecure", "--policy", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "is empty (or only comments)" in err, err


def test_a_plaintext_run_says_what_the_server_learns(tmp_path: Path, capsys):
    """``fedgl run`` (and ``fedgl server``, ``fedgl client``) starting a plaintext exchange
    prints one line with the leakage figure; a secure or 0-hop run prints none."""
    from fedgl.cli import main
    from fedgl.deployment.client_policy import PLAINTEXT_KNOWN, plaintext_exchange

    assert plaintext_exchange(_cfg({}))
    assert not plaintext_exchange(_cfg({"secure_sum": "mask"}))
    assert not plaintext_exchange(_cfg({"hops": 0}))
    assert not plaintext_exchange(_cfg({"algorithm": "fedgat", "hops": None}))
    tiny = ["run", "--algorithm", "fedgcn", "--dataset", "sbm", "--sbm-nodes", "60",
            "--clients", "2", "--rounds", "1", "--no-oracle-eval", "--no-leakage-report"]
    for hops, expected in (("2", 1), ("0", 0)):
        assert main([*tiny, "--hops", hops, "--out", str(tmp_path / hops)]) == 0
        out = capsys.readouterr().out
        lines = [line for line in out.splitlines() if line.startswith("fedgl run: plaintext")]
        assert len(lines) == expected, out
        assert all(PLAINTEXT_KNOWN in line for line in lines)


def test_a_named_secure_mode_keeps_the_other_protective_defaults(tmp_path: Path):
    """``--secure-sum mask`` (or robust, he) alone still requires the edge check, two
    contributors and a feature bound (and secure models where the mode averages models); each
    is dropped only when named otherwise, by flag or in the file; plaintext takes what it is
    given."""
    protective = {"adjacency_check": "edge", "min_contributors": 2, "feature_bound": ANY_BOUND}
    for mode in ("mask", "robust"):
        assert _default_policy("--secure-sum", mode) == ClientPolicy(
            secure_sum=mode, secure_models=True, **protective)
    assert _default_policy("--secure-sum", "he") == ClientPolicy(secure_sum="he", **protective)
    pol = _default_policy("--secure-sum", "mask")
    line = pol.weaker(_cfg({"secure_sum": "mask"}))   # the run asks for the mode only
    assert line is not None and "\n" not in line
    assert _default_policy("--secure-sum", "mask", "--adjacency-check", "node",
                           "--min-contributors", "1", "--feature-bound", "none",
                           "--no-secure-models") == ClientPolicy(secure_sum="mask")
    (tmp_path / "p.yaml").write_text("secure_sum: robust\nadjacency_check: node\n"
                                     "min_contributors: 1\nfeature_bound: none\n"
                                     "secure_models: false\n")
    assert _default_policy("--policy", str(tmp_path / "p.yaml")) == ClientPolicy(
        secure_sum="robust")
    assert _default_policy("--secure-sum", "none") == ClientPolicy()


# ---------------------------------------------------------------------- DP needs a budget
def test_a_dp_policy_without_a_budget_gets_the_default_one():
    from fedgl.privacy.policy import DEFAULT_DP_RELEASES

    pol = _default_policy("--secure-sum", "mask", "--dp-epsilon", "0.5")
    assert pol.dp_budget == DEFAULT_DP_RELEASES * 0.5
    assert _default_policy("--dp-epsilon", "1", "--dp-budget", "2").dp_budget == 2.0
    assert _default_policy("--secure-sum", "mask").dp_budget is None   # no DP, no budget
    # a run with DP and no budget (or a larger one) is refused by such a policy, in one line
    protected = {"secure_sum": "mask", "secure_models": True, "adjacency_check": "edge",
                 "min_contributors": 2, "feature_bound": 1.0, "dp_epsilon": 0.5}
    line = pol.weaker(_cfg(protected))
    assert line is not None and "dp_budget off" in line and "\n" not in line
    assert pol.weaker(_cfg({**protected, "dp_budget": 2.0})) is None


@needs_flwr
def test_fedgl_client_with_dp_and_no_state_dir_exits_2(tmp_path: Path, capsys):
    from fedgl.cli import main
    from fedgl.deployment.commands import free_port

    roster = write_keys(tmp_path / "keys", 3)
    manifest = write_shard(tiny_shard(1), tmp_path / "shard")
    code = main(["client", "--superlink", f"127.0.0.1:{free_port()}", "--data", str(manifest),
                 "--key", str(tmp_path / "keys" / "client-1.key"), "--roster", str(roster),
                 "--insecure", "--secure-sum", "mask", "--dp-epsilon", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "--state-dir DIR" in err, err


def test_runs_with_a_slightly_smaller_clip_each_stop_at_the_default_budget(tmp_path: Path):
    """The averaging attack: each run asks for a slightly smaller clip, a new input with fresh
    noise. A party with the policy ``--dp-epsilon 1`` (default budget: 4 releases) serves four
    of them and refuses the fifth before releasing anything; the ε spent stays 4 across a
    restart with the same --state-dir."""
    from fedgl.deployment.party import Party
    from fedgl.privacy.policy import DEFAULT_DP_RELEASES
    from tests.test_flower_operations import make_party, send, setup_payload

    state = tmp_path / "state"
    policy = _default_policy("--secure-sum", "none", "--dp-epsilon", "1")
    party = make_party(tmp_path, safety=policy, state_dir=state)
    budget = {"dp_epsilon": 1.0, "dp_budget": policy.dp_budget}
    released, refused = [], []
    for i in range(DEFAULT_DP_RELEASES + 2):
        if i == 2:   # `fedgl client` restarted with the same --state-dir
            party = Party(tmp_path / "shard" / "client-1.json",
                          tmp_path / "keys" / "client-1.key", tmp_path / "keys" / "roster.json",
                          policy, state_dir=state)
        run = 100 + i
        send(party, "party.hello", {"challenge": b"\x06" * 32}, run=run)
        payload = {**setup_payload(**budget, dp_clip=1.0 - 0.01 * i), "run_tag": f"c{i}"}
        head, _ = send(party, "party.setup", payload, run=run)
        assert "refused" not in head, head
        head, reply = send(party, "fedgcn.announce_rows", {}, phase="pretrain", run=run)
        if "refused" in head:
            refused.append(head["refused"])
            assert reply is None
        else:
            released.append(reply[1]["dp_release"])
    assert len(set(released)) == DEFAULT_DP_RELEASES == len(released)
    assert len(refused) == 2 and all("dp_budget" in line and "\n" not in line
                                     for line in refused), refused
    assert sum(r["epsilon"] for r in party.record.releases()) == DEFAULT_DP_RELEASES
