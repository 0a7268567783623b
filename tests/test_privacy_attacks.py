"""A malicious server: each attack sends crafted messages through ``runtime.call`` to clients
running unmodified code, exactly as the server could. Every one now stops the run with a named
one-line error, or leaves the server a view that does not depend on the target's input."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from fedgl.algorithms.fedgcn.client import PRETRAIN
from fedgl.errors import RunAborted
from fedgl.privacy.identity import AttackDetected, Identity, frame
from fedgl.privacy.secagg import _x25519_pair
from fedgl.privacy.secagg_server import SecureSumServer, secure_vector_sum
from tests.helpers import fedgcn_federation, random_graph, random_partition
from tests.test_secagg import caller, federation

ATTACKER = Identity()  # the server's own signing key: not in the roster


@pytest.fixture(scope="module")
def small():
    graph = random_graph(nodes=100, seed=11)
    return graph, random_partition(graph.num_nodes, 4, seed=11)


def _call(server, method, args, clients=None):
    return server.runtime.call(method, args, phase="pretrain", clients=clients)


def _hello(server, session, announce=False):
    hello = _call(server, "fedgcn.privacy_hello", {"session": session, "announce": announce})
    return hello, server.secagg.directory({k: h["adv"] for k, h in hello.items()})


def _forged_entry(session, client_id, instance=PRETRAIN):
    """An ephemeral key the server controls, 'signed' with its own identity."""
    (_, c), (_, s) = _x25519_pair(), _x25519_pair()
    return c, s, ATTACKER.sign(frame(b"fedgl/adv/v2", session, instance, client_id, c, s))


def _with_entry(directory, client_id, entry, replace):
    d = {key: list(v) for key, v in directory.items()}
    if replace:
        i = d["ids"].index(client_id)
        d["c"][i], d["s"][i], d["sig"][i] = entry
    else:
        d["ids"].append(client_id)
        for key, value in zip(("c", "s", "sig"), entry, strict=True):
            d[key].append(value)
    return d


# ---------------------------------------------------------------------- HE key relay
@pytest.mark.parametrize("attack,match", [
    ("phantom", "not in the roster"),
    ("substitute", "not signed by its roster identity"),
    ("duplicate", "lists a client twice"),
])
def test_he_key_holder_refuses_a_forged_directory(small, attack, match):
    """The server adds a phantom entry with its own key (or swaps client 2's key, or lists
    client 2 twice) in the directory it hands the key holder: the holder stops before sealing."""
    server = fedgcn_federation(*small, hops=1, secure_sum="he")
    session = os.urandom(16)
    _, directory = _hello(server, session)
    forged = {"phantom": lambda: _with_entry(directory, 7, _forged_entry(session, 7), False),
              "substitute": lambda: _with_entry(directory, 2, _forged_entry(session, 2), True),
              "duplicate": lambda: _with_entry(directory, 2, _forged_entry(session, 2), False),
              }[attack]()
    with pytest.raises(AttackDetected, match=match) as err:
        _call(server, "secagg.keys", {"session": session, "directory": forged}, [0])
    assert "\n" not in str(err.value)
    assert server.runtime.local_client(0)._he is None  # no key made, nothing sealed


def test_client_accepts_only_the_holder_key_sealed_by_the_holder(small):
    """``he_install`` with a secret context the server sealed itself (under a key of its own)
    is refused: only what the roster-authenticated holder sealed opens."""
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    server = fedgcn_federation(*small, hops=1, secure_sum="he")
    session = os.urandom(16)
    _, directory = _hello(server, session)
    keys = _call(server, "secagg.keys", {"session": session, "directory": directory})
    relayed = server.secagg.relay(keys)
    nonce = os.urandom(12)
    fake = nonce + ChaCha20Poly1305(os.urandom(32)).encrypt(nonce, b"server's own key", b"")
    with pytest.raises(AttackDetected, match="does not open"):
        _call(server, "fedgcn.he_install", {2: {"session": session, "received": relayed[2],
                                         "sealed": fake}}, [2])
    assert server.runtime.local_client(2)._he is None


def test_stale_key_caught_by_key_confirmation(small):
    """All entries authentic, but client 0 gets an older (re-advertised) key of client 1: the
    directories differ, so the keys bound to them differ, and confirmation fails before any
    masked value leaves client 0."""
    server = fedgcn_federation(*small, hops=2, secure_sum="mask")
    session = os.urandom(16)
    old, _ = _hello(server, session, announce=True)
    hello, directory = _hello(server, session, announce=True)  # every client re-advertises
    stale = _with_entry(directory, 1, (old[1]["adv"]["c"], old[1]["adv"]["s"],
                                      old[1]["adv"]["sig"]), True)
    with pytest.raises(AttackDetected, match="not signed|own key"):
        # client 1's old advert was for the same session but is no longer its own key
        _call(server, "secagg.keys", {"session": session, "directory": stale}, [1])
    keys = _call(server, "secagg.keys", {0: {"session": session, "directory": stale},
                                         1: {"session": session, "directory": directory},
                                         2: {"session": session, "directory": directory},
                                         3: {"session": session, "directory": directory}})
    relayed = server.secagg.relay(keys)
    plan = {"block_ids": torch.tensor([0]), "block_sizes": torch.tensor([1]),
            "rows": torch.tensor([0]),
            "use_own": torch.zeros(hello[0]["num_requested"], dtype=torch.bool),
            "peers": torch.tensor([1]), "peer_counts": torch.tensor([1])}
    with pytest.raises(AttackDetected, match="key confirmation with client 1 failed"):
        _call(server, "fedgcn.secure_upload", {0: {"session": session, "plan": plan,
                                            "received": relayed[0]}}, [0])


# ---------------------------------------------------------------------- pairwise masks
def test_fake_co_member_with_the_servers_key_is_refused(small):
    """The server lists a fake co-member carrying its own key to strip client 1's masks."""
    server = fedgcn_federation(*small, hops=2, secure_sum="mask")
    session = os.urandom(16)
    _, directory = _hello(server, session, announce=True)
    for forged in (_with_entry(directory, 9, _forged_entry(session, 9), False),
                   _with_entry(directory, 3, _forged_entry(session, 3), True)):
        with pytest.raises(AttackDetected, match="roster"):
            _call(server, "secagg.keys", {"session": session, "directory": forged}, [1])


def test_local_rows_listed_with_a_real_co_member_stay_hidden(small):
    """With a real co-member the server cannot impersonate, client 1's rows that an honest
    plan keeps local reach the server masked by a key the server does not have."""
    server = fedgcn_federation(*small, hops=2, secure_sum="mask")
    session = os.urandom(16)
    hello, directory = _hello(server, session, announce=True)
    relayed = server.secagg.relay(_call(server, "secagg.keys",
                                        {"session": session, "directory": directory}))
    client = server.runtime.local_client(1)
    exact = client._release()[1]
    n = exact.size(0)
    plan = {"block_ids": torch.tensor([0]), "block_sizes": torch.tensor([n]),
            "rows": torch.arange(n), "use_own": torch.zeros(hello[1]["num_requested"],
                                                            dtype=torch.bool),
            "peers": torch.tensor([2]), "peer_counts": torch.tensor([1])}
    up = _call(server, "fedgcn.secure_upload", {1: {"session": session, "plan": plan,
                                             "received": relayed[1]}}, [1])
    seen = torch.from_numpy(up[1]["masked"].view(np.int64).astype(np.float64) / 2.0 ** 32)
    dist = torch.cdist(seen.reshape(n, -1), exact.double())
    assert float(dist.min()) > 1.0  # no uploaded row is near any true row


# ---------------------------------------------------------------------- dropout differencing
def test_mask_mode_refuses_a_second_sum_without_a_client(small):
    """After an honest secure round, the server claims client 3 dropped and starts a second
    session without it: the other clients refuse (no second sum to difference)."""
    server = fedgcn_federation(*small, hops=2, secure_sum="mask")
    server.pretrain()
    session = os.urandom(16)
    hello = _call(server, "fedgcn.privacy_hello", {"session": session, "announce": True}, [0, 1, 2])
    directory = server.secagg.directory({k: h["adv"] for k, h in hello.items()})
    with pytest.raises(RunAborted, match="needs every roster client") as err:
        _call(server, "secagg.keys", {"session": session, "directory": directory}, [0])
    assert "\n" not in str(err.value)


def test_robust_mode_refuses_a_second_sum_over_the_same_values():
    parties, rt = federation(5, "robust", 3)
    call = caller(rt)
    assert secure_vector_sum(call, rt.client_ids, "round-1", 50, SecureSumServer("robust", 3))
    with pytest.raises(AttackDetected, match="second secure sum over the same values"):
        secure_vector_sum(call, [0, 1, 2, 4], "round-1", 50, SecureSumServer("robust", 3))


def _fake_dropout_view(x3_scale: float) -> tuple[np.ndarray, dict]:
    """The server claims client 3 dropped after it uploaded, collects the others' shares of
    client 3's mask key, and unmasks: what it computes, and the shares it got."""
    parties, rt = federation(5, "robust", 3, seed=1)
    parties[3].x = parties[3].x * x3_scale
    session = os.urandom(16)
    everyone = rt.client_ids
    adv = rt.call("secagg.advertise", {"session": session, "instance": "r"}, phase="train")
    srv = SecureSumServer("robust", 3)
    directory = srv.directory({k: a["adv"] for k, a in adv.items()})
    relayed = srv.relay(rt.call("secagg.keys", {"session": session, "directory": directory},
                                phase="train"))
    segments = {k: [(50, [v for v in everyone if v != k])] for k in everyone}
    up = rt.call("secagg.upload", {k: {"session": session, "received": relayed[k],
                                       "segments": segments[k]} for k in everyone}, phase="train")
    claimed = [0, 1, 2, 4]  # "3 dropped"
    sigs = rt.call("secagg.consistency", {"session": session, "survivors": claimed},
                   phase="train", clients=claimed)
    revealed = rt.call("secagg.unmask", {"session": session, "signatures": {
        k: r["sig"] for k, r in sigs.items()}}, phase="train", clients=claimed)
    got = {"b3": sum(3 in r["b"] for r in revealed.values()),
           "s3": sum(3 in r["s"] for r in revealed.values())}
    # Asking again for client 3's self-mask shares (now claiming it survived) is refused.
    for k in claimed:
        with pytest.raises(AttackDetected, match="asked twice|reveal shares twice"):
            rt.call("secagg.consistency", {"session": session, "survivors": everyone},
                    phase="train", clients=[k])
    return _unmask_claimed(srv, session, directory, everyone, up, claimed, revealed, segments), got


def _unmask_claimed(srv, session, directory, everyone, up, claimed, revealed, segments):
    """The server's unmasking with the shares it collected (re-using the component's steps)."""
    replies = {"secagg.consistency": None, "secagg.unmask": revealed}

    def call(method, args, clients):
        if method == "secagg.consistency":
            return {k: {"sig": b""} for k in clients}
        return replies[method]
    return srv.unmask(call, session, "r", directory, everyone,
                      {k: up[k]["masked"] for k in claimed}, {k: [(0, 50)] for k in claimed},
                      segments, 50)


def test_robust_fake_dropout_reveals_nothing_about_the_target():
    """The server fakes client 3's dropout inside a session: it gets the shares of client 3's
    mask key but none of its self-mask seed, so what it can compute is the survivors' sum, the
    same whatever client 3's input (two runs with different inputs for client 3)."""
    a, got_a = _fake_dropout_view(1.0)
    b, got_b = _fake_dropout_view(-5.0)
    assert got_a == got_b == {"b3": 0, "s3": 4}
    assert np.allclose(a, b, atol=1e-8)  # independent of client 3's input
    parties, _ = federation(5, "robust", 3, seed=1)
    assert np.allclose(a, sum(parties[k].x for k in (0, 1, 2, 4)), atol=1e-8)


def test_robust_split_survivor_sets_cannot_collect_both_shares():
    """The server tells clients {0, 1} that 3 survived and {2, 4} that 3 dropped, hoping for
    self-mask shares from one group and mask-key shares from the other: neither group holds
    every survivor's signature on its set, so no client reveals anything."""
    parties, rt = federation(5, "robust", 3, seed=2)
    session = os.urandom(16)
    everyone = rt.client_ids
    adv = rt.call("secagg.advertise", {"session": session, "instance": "r"}, phase="train")
    srv = SecureSumServer("robust", 3)
    directory = srv.directory({k: a["adv"] for k, a in adv.items()})
    relayed = srv.relay(rt.call("secagg.keys", {"session": session, "directory": directory},
                                phase="train"))
    segments = {k: [(50, [v for v in everyone if v != k])] for k in everyone}
    rt.call("secagg.upload", {k: {"session": session, "received": relayed[k],
                                  "segments": segments[k]} for k in everyone}, phase="train")
    sig_a = rt.call("secagg.consistency", {"session": session, "survivors": everyone},
                    phase="train", clients=[0, 1])
    sig_b = rt.call("secagg.consistency", {"session": session, "survivors": [0, 1, 2, 4]},
                    phase="train", clients=[2, 4])
    sigs = {k: r["sig"] for k, r in {**sig_a, **sig_b}.items()}
    for k in everyone:
        if k == 3:
            continue
        out = rt.call("secagg.unmask", {"session": session, "signatures": sigs},
                      phase="train", clients=[k])[k]
        assert "signed the survivor set" in out["refused"] and not {"b", "s"} & set(out)


def test_fedgl_keys_writes_a_roster_and_private_keys(tmp_path, capsys):
    from fedgl.cli import main
    from fedgl.privacy.identity import Identity, Roster

    assert main(["keys", "--clients", "3", "--out", str(tmp_path / "k")]) == 0
    import json

    roster = Roster.from_dict(json.loads((tmp_path / "k" / "roster.json").read_text()))
    assert roster.ids == [0, 1, 2]
    ident = Identity(bytes.fromhex((tmp_path / "k" / "client-1.key").read_text().strip()))
    assert roster.verify(1, b"m", ident.sign(b"m")) and not roster.verify(0, b"m", ident.sign(b"m"))
    assert (tmp_path / "k" / "client-1.key").stat().st_mode & 0o077 == 0
    assert main(["keys", "--clients", "3", "--out", str(tmp_path / "k")]) == 2  # no overwrite
