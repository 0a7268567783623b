"""Each private input enters one aggregate, its DP noise is drawn once, its ε is budgeted: a
malicious server drives real clients' handlers through ``runtime.call`` (or a deployed party's
relay) with as many sessions, plans, fits and runs as it likes."""

from __future__ import annotations

import json
import os
import secrets

import numpy as np
import pytest
import torch

from fedgl.errors import ConfigError, OutputError
from fedgl.privacy.identity import AttackDetected
from fedgl.privacy.inputs import BudgetExceeded, InputRecord, InputReused
from fedgl.privacy.secagg import decode_fixed
from fedgl.privacy.secagg_server import SecureSumServer, secure_vector_sum
from tests.helpers import fedgcn_federation, random_graph, random_partition


@pytest.fixture(scope="module")
def small():
    graph = random_graph(nodes=100, seed=21)
    return graph, random_partition(graph.num_nodes, 4, seed=21)


def _call(server, method, args, clients=None, phase="pretrain"):
    return server.runtime.call(method, args, phase=phase, clients=clients)


# ---------------------------------------------------------------------- mask: several plans
def _pairwise_session(server, pairs, n, rows=None):
    """One mask session over every client, with a crafted plan: each pair's first ``n``
    released rows in one block with the partner as the only co-member. Returns, per pair, the
    sum the server unmasks: ``x_a[:n] + x_b[:n]``."""
    session = os.urandom(16)
    hello = _call(server, "fedgcn.privacy_hello", {"session": session, "announce": True})
    directory = server.secagg.directory({k: h["adv"] for k, h in hello.items()})
    relayed = server.secagg.relay(_call(server, "secagg.keys",
                                        {"session": session, "directory": directory}))
    args = {}
    for a, b in pairs:
        for k, partner in ((a, b), (b, a)):
            args[k] = {"session": session, "received": relayed[k], "plan": {
                "block_ids": torch.tensor([0]), "block_sizes": torch.tensor([n]),
                "rows": torch.arange(n) if rows is None else rows,
                "use_own": torch.zeros(hello[k]["num_requested"], dtype=torch.bool),
                "peers": torch.tensor([partner]), "peer_counts": torch.tensor([1])}}
    up = _call(server, "fedgcn.secure_upload", args)
    return {(a, b): decode_fixed(up[a]["masked"] + up[b]["masked"]) for a, b in pairs}


def test_mask_sessions_with_other_plans_cannot_isolate_a_client(small):
    """Three sessions pairing {0,1}, {1,2}, {0,2} would give ``x₀ = (S₀₁ − S₁₂ + S₀₂)/2``:
    after the first, every client refuses to put the same input into another aggregate,
    before its masked upload leaves it."""
    server = fedgcn_federation(*small, hops=2, secure_sum="mask")
    n = min(len(server.runtime.local_client(k)._touched()) for k in range(4))
    first = _pairwise_session(server, [(0, 1), (2, 3)], n)
    x = {k: server.runtime.local_client(k)._release()[2][:n].double().numpy().ravel()
         for k in range(4)}
    assert np.allclose(first[(0, 1)], x[0] + x[1], atol=1e-8)  # the first sum is honest
    with pytest.raises(InputReused, match="already went into another secure sum") as err:
        _pairwise_session(server, [(1, 2), (0, 3)], n)
    assert "\n" not in str(err.value)


def test_mask_the_same_pairs_with_other_rows_is_another_aggregate(small):
    """The same clients and co-members, but the rows laid out in another order: the sums
    per position differ (``x₀[r] + x₁[r']``), so it is another aggregate, refused."""
    server = fedgcn_federation(*small, hops=2, secure_sum="mask")
    n = min(len(server.runtime.local_client(k)._touched()) for k in range(4))
    _pairwise_session(server, [(0, 1), (2, 3)], n)
    _pairwise_session(server, [(0, 1), (2, 3)], n)  # the very same plan: served
    with pytest.raises(InputReused, match="already went into another secure sum"):
        _pairwise_session(server, [(0, 1), (2, 3)], n, rows=torch.arange(n).flip(0))


def test_mask_the_same_aggregate_again_is_served(small):
    """An honest restart of the round (a new session, the same plan) re-sends the same input to
    the same aggregate: allowed, the same sums; one record entry per client."""
    server = fedgcn_federation(*small, hops=2, secure_sum="mask")
    server.pretrain()
    before = {k: server.runtime.local_client(k).received_sums.clone() for k in range(4)}
    server.pretrain()
    for k in range(4):
        client = server.runtime.local_client(k)
        assert torch.equal(client.received_sums, before[k])
        assert client.secagg.record.aggregate_of(client.pretrain_input()) is not None


def test_a_restarted_client_keeps_its_record_in_the_state_dir(small, tmp_path):
    """The record lives in the state folder: a client rebuilt from its data (a restart, or a
    new run over the same data) still refuses a different aggregate for the same input."""
    from fedgl.algorithms.fedgcn.client import FedGCNClient

    server = fedgcn_federation(*small, hops=2, secure_sum="mask", state_dir=str(tmp_path))
    n = min(len(server.runtime.local_client(k)._touched()) for k in range(4))
    _pairwise_session(server, [(0, 1), (2, 3)], n)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"client-{k}" for k in range(4)]
    for k in range(4):  # every client restarts: a fresh object, its identity re-installed
        old = server.runtime.local_client(k)
        new = FedGCNClient(old.data, old.config, old.seed)
        new.install_identity(old.secagg.identity, old.secagg.roster, "mask")
        server.runtime.replace_client(k, new)
    with pytest.raises(InputReused, match="already went into another secure sum"):
        _pairwise_session(server, [(0, 2), (1, 3)], n)
    # the same record read afresh: one entry per input
    lines = (tmp_path / "client-0" / "inputs.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["members"] == [0, 1, 2, 3]


# ---------------------------------------------------------------------- he: several block plans
def _he_pairwise_session(server, pairs, n, rows=None):
    """One HE session over every client (keys, the key holder's sealed key), then a crafted
    plan: each pair's first ``n`` released rows in one block with the partner as the only
    co-member (each receiving). Returns the uploads: per client its signed ciphertexts, which
    the partner, holding the key, would add to its own and decrypt (``x_a[:n] + x_b[:n]``)."""
    session = os.urandom(16)
    hello = _call(server, "fedgcn.privacy_hello", {"session": session, "announce": True})
    directory = server.secagg.directory({k: h["adv"] for k, h in hello.items()})
    relayed = server.secagg.relay(_call(server, "secagg.keys",
                                        {"session": session, "directory": directory}))
    holder = server.config.he_key_holder
    key = _call(server, "fedgcn.he_share_keys", {holder: {"session": session}}, [holder])[holder]
    others = [k for k in hello if k != holder]
    _call(server, "fedgcn.he_install", {k: {"session": session, "received": relayed[k],
                                            "sealed": key["sealed"][k]} for k in others}, others)
    args = {}
    for a, b in pairs:
        for k, partner in ((a, b), (b, a)):
            args[k] = {"session": session, "plan": {
                "block_ids": torch.tensor([0]), "block_sizes": torch.tensor([n]),
                "rows": torch.arange(n) if rows is None else rows,
                "use_own": torch.zeros(hello[k]["num_requested"], dtype=torch.bool),
                "peers": torch.tensor([partner]), "peer_counts": torch.tensor([1]),
                "receive": torch.tensor([True])}}
    return _call(server, "fedgcn.secure_upload", args)


def test_he_sessions_with_other_block_plans_cannot_isolate_a_client(small, monkeypatch):
    """HE: the server pairs the clients' rows in block {0,1} (and {2,3}), then asks for the same
    rows in blocks {1,2} and {0,3}: with the three sums a key holder's decryptions give
    ``x₀``. After the first upload every client refuses another block plan for the same input
    in one line, before it encrypts anything (no ciphertext leaves)."""
    from fedgl.privacy.he import HEClientContext

    server = fedgcn_federation(*small, hops=2, secure_sum="he")
    n = min(len(server.runtime.local_client(k)._touched()) for k in range(4))
    first = _he_pairwise_session(server, [(0, 1), (2, 3)], n)
    assert sorted(first) == [0, 1, 2, 3] and all(len(first[k]["blocks"]) == 1 for k in first)
    encrypted: list = []
    original = HEClientContext.encrypt_real
    monkeypatch.setattr(HEClientContext, "encrypt_real",
                        lambda self, *a, **kw: encrypted.append(1) or original(self, *a, **kw))
    with pytest.raises(InputReused, match="already went into another secure sum") as err:
        _he_pairwise_session(server, [(1, 2), (0, 3)], n)
    assert "\n" not in str(err.value)
    assert encrypted == []  # refused before a ciphertext was made, let alone sent


def test_he_the_same_block_plan_again_is_served_other_rows_are_not(small):
    """The same block plan in a new session (an honest restart) is the same aggregate: served.
    The same pairs over the rows in another order put other sums in each position: refused."""
    server = fedgcn_federation(*small, hops=2, secure_sum="he")
    n = min(len(server.runtime.local_client(k)._touched()) for k in range(4))
    _he_pairwise_session(server, [(0, 1), (2, 3)], n)
    again = _he_pairwise_session(server, [(0, 1), (2, 3)], n)
    assert sorted(again) == [0, 1, 2, 3]
    with pytest.raises(InputReused, match="already went into another secure sum"):
        _he_pairwise_session(server, [(0, 1), (2, 3)], n, rows=torch.arange(n).flip(0))
    lines = [c.secagg.record.aggregate_of(c.pretrain_input())
             for c in (server.runtime.local_client(k) for k in range(4))]
    assert all(e is not None and e["members"] == [0, 1, 2, 3] for e in lines)


def test_he_honest_pretraining_twice_is_the_same_aggregate(small, tmp_path):
    """An honest HE pre-training run twice (a new session each time, the same plan) enters the
    same aggregate: the second run is served and every client's record holds one line."""
    server = fedgcn_federation(*small, hops=2, secure_sum="he", state_dir=str(tmp_path))
    server.pretrain()
    before = {k: server.runtime.local_client(k).received_sums.clone() for k in range(4)}
    server.pretrain()
    for k in range(4):
        assert torch.allclose(server.runtime.local_client(k).received_sums, before[k],
                              atol=1e-6, rtol=0)
        lines = (tmp_path / f"client-{k}" / "inputs.jsonl").read_text().splitlines()
        assert len(lines) == 1 and json.loads(lines[0])["members"] == [0, 1, 2, 3]


# ---------------------------------------------------------------------- robust: fit twice
def _secure_models_federation(small, mode, **keys):
    from fedgl.algorithms.fedgcn.client import FedGCNClient
    from fedgl.algorithms.fedgcn.server import FedGCNServer
    from fedgl.algorithms.runner import build_federation
    from fedgl.config import Config

    graph, _ = small
    part = random_partition(graph.num_nodes, 3, seed=21)
    cfg = Config.from_dict({"clients": 3, "progress": False, "hops": 2, "dropout": 0.0,
                            "secure_sum": "mask", **keys})
    server = build_federation(graph, part, cfg, 0, FedGCNClient, FedGCNServer, secure_mode=mode,
                              secure_models=True)
    server.pretrain()
    return server


def _caller(server):
    def call(method, args, clients):
        out = server.runtime.call(method, args, phase="train", clients=clients)
        return None if any(r.get("stale") for r in out.values()) else out
    return call


@pytest.mark.parametrize("second_round", [1, 7])
def test_robust_fit_asked_twice_cannot_isolate_a_model(small, second_round):
    """The server asks for round 1's fit, sums {0, 1, 2}, asks for the fit again from the same
    global model (same or another round label: the same update) and sums {0, 1} ("2 dropped"):
    the difference would be client 2's model. Clients 0 and 1 refuse the second sum."""
    server = _secure_models_federation(small, "robust")
    fit = {"weights": server.weights, "local_steps": 2, "round": 1}
    length = _call(server, "fedavg.fit", fit, phase="train")[0]["weights"]["secure_length"]
    call = _caller(server)
    total, who = secure_vector_sum(call, [0, 1, 2], "model/1", length, SecureSumServer("robust"))
    assert who == [0, 1, 2]
    _call(server, "fedavg.fit", {**fit, "round": second_round}, phase="train")
    with pytest.raises(AttackDetected, match="second secure sum over the same values") as err:
        secure_vector_sum(call, [0, 1], "model/1-again", length, SecureSumServer("robust"))
    assert "\n" not in str(err.value)


def test_robust_fit_asked_twice_is_refused_on_ray(small, local_ray, tmp_path):
    """The same attack against Ray actors (each client in its own process, its record in its
    state folder): the second sum is refused there too."""
    from fedgl.errors import RunAborted

    server = _secure_models_federation(small, "robust", runtime="ray",
                                       state_dir=str(tmp_path))
    try:
        fit = {"weights": server.weights, "local_steps": 2, "round": 1}
        length = _call(server, "fedavg.fit", fit, phase="train")[0]["weights"]["secure_length"]
        call = _caller(server)
        assert secure_vector_sum(call, [0, 1, 2], "model/1", length, SecureSumServer("robust"))
        _call(server, "fedavg.fit", {**fit, "round": 2}, phase="train")
        with pytest.raises(RunAborted, match="second secure sum over the same values"):
            secure_vector_sum(call, [0, 1], "model/1-again", length, SecureSumServer("robust"))
    finally:
        server.runtime.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["client-0", "client-1", "client-2"]


def test_robust_a_larger_survivor_set_after_a_smaller_one_is_refused(small):
    """The other order: {0, 1} first (client 2 'dropped' before keys), then {0, 1, 2}: clients
    0 and 1 refuse to sign the second survivor set, so no share of theirs is revealed."""
    server = _secure_models_federation(small, "robust")
    fit = {"weights": server.weights, "local_steps": 2, "round": 1}
    length = _call(server, "fedavg.fit", fit, phase="train")[0]["weights"]["secure_length"]
    call = _caller(server)
    assert secure_vector_sum(call, [0, 1], "model/1", length, SecureSumServer("robust"))
    with pytest.raises(AttackDetected, match="other survivors"):
        secure_vector_sum(call, [0, 1, 2], "model/1b", length, SecureSumServer("robust"))


def test_secure_model_rounds_still_train_every_round(small):
    """Honest rounds: every round's update comes from a new global model, a new input."""
    server = _secure_models_federation(small, "robust")
    rounds = list(server.rounds())
    assert len(rounds) == server.config.rounds


# ---------------------------------------------------------------------- DP: noise once, budget
def _noisy_release(graph, part, **cfg):
    server = fedgcn_federation(graph, part, hops=2, dp_epsilon=1.0, **cfg)
    return server.runtime.local_client(0)._release()[2]


def test_dp_noise_is_drawn_once_per_input_across_runs(small, tmp_path):
    """Eight runs over the same data with one state folder release the same noisy values (the
    noise cannot be averaged away) and spend ε once; without a folder every run draws anew."""
    runs = [_noisy_release(*small, state_dir=str(tmp_path)) for _ in range(8)]
    assert all(torch.equal(r, runs[0]) for r in runs)
    record = InputRecord(tmp_path / "client-0")
    assert len(record.releases()) == 1 and record.releases()[0]["epsilon"] == 1.0
    fresh = [_noisy_release(*small) for _ in range(2)]
    assert not torch.equal(fresh[0], fresh[1])


def test_dp_budget_refuses_a_release_beyond_it(small, tmp_path):
    """ε = 1 per release, budget 2.5: two releases with other settings (other inputs) pass, the
    third is refused in one line before anything is released or recorded; re-using an earlier
    setting re-uses its noise and costs nothing."""
    state = str(tmp_path)
    for clip in (1.0, 2.0):
        _noisy_release(*small, state_dir=state, dp_budget=2.5, dp_clip=clip)
    server = fedgcn_federation(*small, hops=2, dp_epsilon=1.0, dp_clip=3.0, state_dir=state,
                               dp_budget=2.5)
    with pytest.raises(BudgetExceeded, match="above its dp_budget 2.5") as err:
        server.pretrain()
    assert "\n" not in str(err.value) and "spent so far: 2" in str(err.value)
    assert server.runtime.ledger.bytes("pretrain") == 0  # nothing left any client
    assert len(InputRecord(tmp_path / "client-0").releases()) == 2
    again = _noisy_release(*small, state_dir=state, dp_budget=2.5, dp_clip=1.0)
    assert again.shape[0] > 0 and len(InputRecord(tmp_path / "client-0").releases()) == 2


def test_dp_budget_without_a_folder_limits_the_run(small):
    """In memory the record covers the client's run: a release is refused when its ε alone
    exceeds the budget (a config error) and counted once however often it is resent."""
    from fedgl.config import Config

    with pytest.raises(ConfigError, match="above dp_budget"):
        Config.from_dict({"dp_epsilon": 2.0, "dp_budget": 1.0})
    with pytest.raises(ConfigError, match="add --dp-epsilon"):
        Config.from_dict({"dp_budget": 1.0})
    server = fedgcn_federation(*small, hops=2, dp_epsilon=1.0, dp_budget=1.0)
    server.pretrain()
    server.pretrain()  # the round again: every client resends its one release
    releases = server.privacy_stats["dp_releases"]
    assert sorted(releases) == ["0", "1", "2", "3"]
    assert all(len(v) == 1 for v in releases.values())


def test_a_deployed_party_re_releases_the_same_noise_in_every_run(tmp_path):
    """The attack on a deployed party: eight runs (run ids, run tags) of the same DP set-up, the
    party restarted half-way with its --state-dir: the same release name and noisy sums each
    time, ε spent once."""
    from fedgl.deployment.party import Party
    from fedgl.privacy.policy import ClientPolicy
    from tests.test_flower_operations import RUN_ID, make_party, send, setup_payload

    state = tmp_path / "state"
    party = make_party(tmp_path, state_dir=state)
    seen = []
    for i in range(8):
        if i == 4:  # a restart of `fedgl client` with the same --state-dir
            party = Party(tmp_path / "shard" / "client-1.json", tmp_path / "keys" / "client-1.key",
                          tmp_path / "keys" / "roster.json", ClientPolicy(), state_dir=state)
        run = RUN_ID + i
        send(party, "party.hello", {"challenge": b"\x06" * 32}, run=run)
        payload = {**setup_payload(dp_epsilon=1.0), "run_tag": f"r{i}"}
        head, _ = send(party, "party.setup", payload, run=run)
        assert "refused" not in head, head
        head, (_, announced) = send(party, "fedgcn.announce_rows", {}, phase="pretrain", run=run)
        head, (_, block) = send(party, "fedgcn.block_sums", {}, phase="pretrain", run=run)
        assert "refused" not in head, head
        seen.append((announced["dp_release"], block["sums"]))
    assert len({name for name, _ in seen}) == 1
    assert all(torch.equal(torch.as_tensor(s), torch.as_tensor(seen[0][1])) for _, s in seen)
    assert party.record.folder == state / "client-1"
    assert [r["epsilon"] for r in party.record.releases()] == [1.0]


def test_a_deployed_party_ignores_a_state_dir_sent_by_the_server(tmp_path):
    """The server's config may name a ``state_dir`` (an empty folder, to wipe the record): the
    party keeps its own record."""
    from tests.test_flower_operations import make_party, send, setup_payload

    party = make_party(tmp_path, state_dir=tmp_path / "state")
    send(party, "party.hello", {"challenge": b"\x06" * 32})
    head, _ = send(party, "party.setup", setup_payload(dp_epsilon=1.0,
                                                       state_dir=str(tmp_path / "elsewhere")))
    assert "refused" not in head, head
    role = party.endpoint.role
    assert role.config.state_dir is None and role.input_record() is party.record
    send(party, "fedgcn.announce_rows", {}, phase="pretrain")
    assert not (tmp_path / "elsewhere").exists()


# ---------------------------------------------------------------------- the record itself
def test_the_record_survives_reopening_and_refuses_damage(tmp_path):
    rec = InputRecord(tmp_path / "p")
    rec.commit("pretrain:ab", "aggregate:1", [0, 1], "x")
    rec.commit("pretrain:ab", "aggregate:1", [0, 1], "x")  # the same aggregate: no new line
    with pytest.raises(InputReused):
        rec.commit("pretrain:ab", "aggregate:2", [0, 2], "x")
    draw = rec.noise("pretrain:ab", "features:f", 0.5, 1e-5, 1.0, 1.0, "client 0")
    back = InputRecord(tmp_path / "p")
    assert back.aggregate_of("pretrain:ab")["aggregate"] == "aggregate:1"
    assert back.noise("pretrain:ab", "features:f", 0.5, 1e-5, 1.0, 1.0, "client 0") == \
        type(draw)(draw.seed, draw.release, False)
    assert back.spent("features:f") == 0.5
    path = tmp_path / "p" / "inputs.jsonl"
    assert len(path.read_text().splitlines()) == 1
    with open(path, "a") as f:
        f.write('{"input": "pretrain:cd", "aggre')  # a write torn by a crash: ignored
    assert InputRecord(tmp_path / "p").aggregate_of("pretrain:cd") is None
    rec.commit("pretrain:cd", "aggregate:3", [0, 1], "x")  # cuts the torn line first
    assert InputRecord(tmp_path / "p").aggregate_of("pretrain:cd") is not None
    path.write_text("garbage\n" + path.read_text())
    with pytest.raises(OutputError, match="is damaged") as err:
        InputRecord(tmp_path / "p")
    assert "\n" not in str(err.value)


def test_an_unusable_state_folder_stops_before_anything_is_sent(small, tmp_path):
    """A state folder that cannot be written (here: a file in its place) stops the client with
    one line before its masked upload leaves."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    server = fedgcn_federation(*small, hops=2, secure_sum="mask", state_dir=str(blocker))
    with pytest.raises(OutputError, match="cannot be used") as err:
        server.pretrain()
    assert "\n" not in str(err.value)
    assert all(server.runtime.local_client(k).received_sums is None for k in range(4))


# ---------------------------------------------------------------------- honest runs unchanged
@pytest.mark.parametrize("keys", [{"secure_sum": "mask"}, {"dp_epsilon": 1.0},
                                  {"secure_sum": "robust", "secure_models": True}])
def test_honest_runs_are_the_same_with_a_state_folder(tmp_path, monkeypatch, keys):
    """The record changes no value or byte of an honest run: the same history and ledger with
    the record in memory or in a state folder (the DP noise seed pinned for both)."""
    import fedgl

    monkeypatch.setattr(secrets, "randbits", lambda bits: 12345)
    graph = random_graph(nodes=90, seed=22)
    base = dict(graph=graph, clients=3, rounds=3, progress=False, min_client_size=5,
                leakage_report=False, **keys)
    a = fedgl.run(**base).repeats[0]
    b = fedgl.run(**base, state_dir=str(tmp_path / "s")).repeats[0]
    assert a.history == b.history
    for key in ("pretrain_bytes", "train_bytes", "test_acc", "train_loss"):
        assert a.final[key] == b.final[key], key
    assert a.extra["privacy"]["protocol"] == b.extra["privacy"]["protocol"]
    assert (tmp_path / "s" / "client-0").is_dir()


def test_a_restored_backup_of_the_record_is_refused(tmp_path):
    """A backup taken after one aggregate and one DP draw, restored after two more of each:
    opening it is refused in one line (it would reopen the later inputs); the latest record
    opens; deleting the stamp accepts the restored one."""
    import shutil

    from fedgl.privacy.inputs import RecordRolledBack, stamp_path

    folder = tmp_path / "state" / "client-0"
    rec = InputRecord(folder)
    rec.commit("pretrain:a", "aggregate:1", [0, 1], "x")
    rec.noise("pretrain:a", "features:f", 1.0, 1e-5, 1.0, None, "client 0")
    shutil.copytree(folder, tmp_path / "backup")
    for name in ("b", "c"):
        rec.commit(f"pretrain:{name}", f"aggregate:{name}", [0, 1], "x")
        rec.noise(f"pretrain:{name}", "features:f", 1.0, 1e-5, 1.0, None, "client 0")
    assert stamp_path(folder).is_file() and not str(stamp_path(folder)).startswith(str(folder))
    latest = tmp_path / "latest"
    shutil.copytree(folder, latest)
    shutil.rmtree(folder)
    shutil.copytree(tmp_path / "backup", folder)
    with pytest.raises(RecordRolledBack) as err:
        InputRecord(folder)
    line = str(err.value)
    assert "\n" not in line and "holds 1 entries but 3 were recorded" in line
    assert "reopens every input released since" in line and str(stamp_path(folder)) in line
    shutil.rmtree(folder)
    shutil.copytree(latest, folder)
    assert InputRecord(folder).aggregate_of("pretrain:c") is not None   # the latest opens
    shutil.rmtree(folder)
    shutil.copytree(tmp_path / "backup", folder)
    stamp_path(folder).unlink()   # the operator accepts the restored copy
    back = InputRecord(folder)
    assert back.aggregate_of("pretrain:c") is None and len(back.releases()) == 1
    # a record in memory has no stamp
    InputRecord(None).commit("pretrain:z", "aggregate:z", [0], "x")
