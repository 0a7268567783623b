"""HE decrypts only what it can check: a malicious server hands a client, as "its sums", another
client's unsummed ciphertexts, a sum over a subset of the block's members, a sum it made itself,
or a block of an older session; or, as the encrypted global model, one client's update. The
client refuses in one line before decrypting anything and never trains on it. Honest sums are
the very ciphertexts the server used to add."""

from __future__ import annotations

import pytest
import torch

from fedgl.federation.protocol import ProtocolViolation
from fedgl.privacy.he import EncryptedModel, EncryptedModelSum, HEClientContext
from fedgl.privacy.identity import AttackDetected
from tests.helpers import fedgcn_federation, random_graph, random_partition

VICTIM = 0


@pytest.fixture(scope="module")
def small():
    graph = random_graph(nodes=100, seed=11)
    return graph, random_partition(graph.num_nodes, 4, seed=11)


class _Server:
    """The server's runtime, with the ``secure_receive`` message to the victim rewritten by
    ``edit(runtime, args)`` (after the honest upload, with everything the server holds)."""

    def __init__(self, runtime, edit=None):
        self.rt, self.edit = runtime, edit
        self.uploads: dict | None = None
        self.received: list[dict] = []  # every secure_receive payload the server sent

    def __getattr__(self, name):
        return getattr(self.rt, name)

    @property
    def client_ids(self):
        return self.rt.client_ids

    def call(self, method, args=None, *, phase, clients=None):
        if method == "fedgcn.secure_receive":
            self.received.append(args)
            if self.edit is not None:
                args = {**args, VICTIM: self.edit(self, args)}
        out = self.rt.call(method, args, phase=phase, clients=clients)
        if method == "fedgcn.secure_upload":
            self.uploads = out
        return out


def _federation(small, edit=None, **cfg):
    server = fedgcn_federation(*small, hops=2, secure_sum="he", **cfg)
    server.runtime = _Server(server.runtime, edit)
    server.runtime.server = server
    return server


def _another_clients_block(rt, args):
    """Client j's own, unsummed ciphertexts (signed by j) of a block the victim is not sent,
    handed over as the victim's first block."""
    blocks = [list(r) for r in args[VICTIM]["blocks"]]
    forwarded = {id(c["chunks"]) for r in blocks for c in r}
    j = next(k for k in sorted(rt.uploads) if k != VICTIM)
    i = next(i for i, c in enumerate(rt.uploads[j]["blocks"]) if id(c) not in forwarded)
    blocks[0] = [{"client": j, "chunks": rt.uploads[j]["blocks"][i],
                  "sig": rt.uploads[j]["sigs"][i]}]
    return {**args[VICTIM], "blocks": blocks}


def _relabelled_block(rt, args):
    """A co-member's signed contribution to *another* block, handed over as its contribution
    to this one."""
    blocks = [list(r) for r in args[VICTIM]["blocks"]]
    j, chunks = blocks[0][0]["client"], blocks[0][0]["chunks"]
    other = next(i for i, c in enumerate(rt.uploads[j]["blocks"]) if c is not chunks)
    blocks[0][0] = {"client": j, "chunks": rt.uploads[j]["blocks"][other],
                    "sig": rt.uploads[j]["sigs"][other]}
    return {**args[VICTIM], "blocks": blocks}


def _subset(rt, args):
    """One co-member left out of a block with three or more members: a sum over fewer."""
    blocks = [list(r) for r in args[VICTIM]["blocks"]]
    i = next(i for i, r in enumerate(blocks) if len(r) >= 2)
    blocks[i] = blocks[i][1:]
    return {**args[VICTIM], "blocks": blocks}


def _server_summed(rt, args):
    """The server adds the co-members' ciphertexts itself and labels the sum as one of them."""
    blocks = [list(r) for r in args[VICTIM]["blocks"]]
    i = next(i for i, r in enumerate(blocks) if len(r) >= 2)
    summed = rt.server.he_context.add([c["chunks"] for c in blocks[i]])
    blocks[i] = [{**blocks[i][0], "chunks": summed}] + blocks[i][1:]
    return {**args[VICTIM], "blocks": blocks}


def _old_format(rt, args):
    """Today's message: one summed ciphertext list per block (the form a decryption oracle
    accepted); here the lone ciphertexts of another client."""
    j = next(k for k in sorted(rt.uploads) if k != VICTIM)
    return {**args[VICTIM], "blocks": [rt.uploads[j]["blocks"][0]]
            * len(args[VICTIM]["blocks"])}


@pytest.mark.parametrize("attack,error,match", [
    ("another_clients_block", AttackDetected, "not the planned co-members|not signed by it"),
    ("relabelled_block", AttackDetected, "not signed by it for this session, block"),
    ("subset", AttackDetected, "not the planned co-members"),
    ("server_summed", AttackDetected, "not signed by it"),
    ("old_format", ProtocolViolation, "blocks"),
])
def test_server_cannot_get_a_ciphertext_decrypted(small, monkeypatch, attack, error, match):
    """After an honest upload the server rewrites the victim's ``secure_receive``: refused in
    one line, the victim's key decrypts nothing, and it never reaches state ``ready`` (so it
    neither trains on the block nor returns weights). Before signed contributions, the
    ``old_format`` message with another client's ciphertexts was decrypted and trained on."""
    edit = {"another_clients_block": _another_clients_block, "relabelled_block": _relabelled_block,
            "subset": _subset, "server_summed": _server_summed, "old_format": _old_format}[attack]
    server = _federation(small, edit)
    victim = server.runtime.local_client(VICTIM)
    calls: list = []
    original = HEClientContext._decrypt_slots

    def spy(self, chunks):
        calls.append(self is victim._he)
        return original(self, chunks)

    monkeypatch.setattr(HEClientContext, "_decrypt_slots", spy)
    with pytest.raises(error, match=match) as err:
        server.pretrain()
    assert "\n" not in str(err.value)
    assert True not in calls  # the victim decrypted nothing
    assert victim.received_sums is None and victim.protocol_state == "pretraining"  # no training


def test_replayed_block_from_an_older_session_is_refused(small):
    """Session 1 runs honestly; in session 2 the server hands the victim session 1's
    (authentic, signed) contributions. The signatures bind the session: refused, and the
    victim keeps session 1's sums."""
    server = _federation(small)
    server.pretrain()
    victim = server.runtime.local_client(VICTIM)
    first = victim.received_sums.clone()
    old = server.runtime.received[-1][VICTIM]["blocks"]
    server.runtime.edit = lambda rt, args: {**args[VICTIM], "blocks": old}
    with pytest.raises(AttackDetected, match="not signed by it for this session") as err:
        server.pretrain()
    assert "\n" not in str(err.value)
    assert torch.equal(victim.received_sums, first)


def test_honest_sum_is_the_ciphertext_the_server_used_to_add(small):
    """The receiver adds the checked contributions in member order: the same ciphertext bytes
    the server's addition gives (ciphertext addition is exact), so honest runs decrypt exactly
    what they decrypted before."""
    server = _federation(small, he_pack=2)
    server.pretrain()
    args = server.runtime.received[-1]
    checked = 0
    for k in server.runtime.client_ids:
        client = server.runtime.local_client(k)
        for b, received in zip(sorted(client._he_own), args[k]["blocks"], strict=True):
            view, own = client._he_own[b]
            by = {c["client"]: c["chunks"] for c in received}
            parts = [own if m == k else by[m] for m in view.members]
            mine, servers = client._he.add(parts), server.he_context.add(parts)
            assert [c.data for c in mine] == [c.data for c in servers]
            checked += 1
    assert checked > 0
    assert server.privacy_stats["ciphertexts_down"] >= checked


def _without_peers(plan):
    return {k: v for k, v in plan.items() if k not in ("peers", "peer_counts")}


def _outsider(plan):
    peers = plan["peers"].clone()
    peers[0] = 99
    return {**plan, "peers": peers}


def _block_id_twice(plan):
    ids = plan["block_ids"].clone()
    ids[1] = ids[0]
    return {**plan, "block_ids": ids}


@pytest.mark.parametrize("craft,match", [
    (_without_peers, "lacks the co-members"),
    (_outsider, "not in this session's directory"),
    (_block_id_twice, "lists a block id twice"),
])
def test_he_plan_that_cannot_be_signed_is_refused(small, craft, match):
    """An HE plan without the blocks' co-members (nothing to sign a member set over), with a
    co-member outside this session's directory, or with a block id twice: refused before
    anything is encrypted."""
    server = _federation(small)
    real = server.runtime.rt.call

    def call(method, args=None, *, phase, clients=None):
        if method == "fedgcn.secure_upload":
            args = {**args, VICTIM: {**args[VICTIM], "plan": craft(dict(args[VICTIM]["plan"]))}}
        return real(method, args, phase=phase, clients=clients)

    server.runtime.rt.call = call
    with pytest.raises(AttackDetected, match=match) as err:
        server.pretrain()
    assert "\n" not in str(err.value)
    assert server.runtime.local_client(VICTIM)._he_own == {}


# ---------------------------------------------------------------------- encrypted models
@pytest.fixture(scope="module")
def model_round(small):
    """Keys distributed, one honest round of encrypted updates (round 1)."""
    server = fedgcn_federation(*small, hops=0, encrypt_models=True, oracle_eval=False)
    server.pretrain()
    ups = server.runtime.call("fedavg.fit", {"weights": server.weights, "local_steps": 1,
                                             "round": 1}, phase="train")
    return server, {k: ups[k]["weights"] for k in sorted(ups)}


def _model_attack(attack, server, ups):
    parts = [ups[k] for k in sorted(ups)]
    if attack == "one_update":
        return ups[1]
    if attack == "one_part":
        return EncryptedModelSum((ups[1],))
    if attack == "twice":
        return EncryptedModelSum((ups[1], ups[1]))
    if attack == "mixed_rounds":
        p = ups[2]
        return EncryptedModelSum((*parts[:2], EncryptedModel(p.chunks, p.weight, p.client,
                                                             p.round + 1, p.sig)))
    if attack == "altered":  # the server scales client 1's share of the sum by its weight
        p = ups[1]
        return EncryptedModelSum((*parts[:1], EncryptedModel(p.chunks, 2 * p.weight, p.client,
                                                             p.round, p.sig), *parts[2:]))
    if attack == "server_made":  # a part the server built from another part's ciphertexts
        p = ups[0]
        return EncryptedModelSum((EncryptedModel(ups[1].chunks, p.weight, p.client, p.round,
                                                 p.sig), *parts[1:]))
    raise AssertionError(attack)


@pytest.mark.parametrize("attack,match", [
    ("one_update", "one encrypted model, not the signed updates"),
    ("one_part", "not at least 2 distinct clients"),
    ("twice", "not at least 2 distinct clients"),
    ("mixed_rounds", "mixes updates of different rounds"),
    ("altered", "not signed by it for this key, round and weight"),
    ("server_made", "not signed by it"),
])
@pytest.mark.parametrize("method", ["fedavg.fit", "fedavg.evaluate"])
def test_server_cannot_get_one_clients_model_decrypted(model_round, monkeypatch, attack, match,
                                                       method):
    """``--encrypt-models``: the server sends, as the global model, one client's update, a
    "sum" of one, a part twice, parts of two rounds, a part whose weight it changed, or another
    client's ciphertexts under a signature: refused in one line, nothing decrypted."""
    server, ups = model_round
    victim = server.runtime.local_client(VICTIM)
    calls: list = []
    original = HEClientContext._decrypt_slots
    monkeypatch.setattr(HEClientContext, "_decrypt_slots",
                        lambda self, chunks: (calls.append(self is victim._he),
                                              original(self, chunks))[1])
    fake = _model_attack(attack, server, ups)
    args = {"weights": fake} if method == "fedavg.evaluate" else \
        {"weights": fake, "local_steps": 1, "round": 2}
    with pytest.raises(AttackDetected, match=match) as err:
        server.runtime.call(method, args, phase="train", clients=[VICTIM])
    assert "\n" not in str(err.value)
    assert True not in calls


def test_honest_model_sum_decrypts_as_the_servers_sum_did(model_round):
    """The client adds the round's checked updates: bit for bit the model that decrypting the
    server's sum of the same updates gives."""
    server, ups = model_round
    client = server.runtime.local_client(VICTIM)
    parts = tuple(ups[k] for k in sorted(ups))
    got = client.decode_weights(EncryptedModelSum(parts))
    total = sum(v.numel() for v in got.values())
    flat = client._he.decrypt_real(server.he_context.add([p.chunks for p in parts]), total) / sum(
        p.weight for p in parts)
    assert torch.equal(torch.cat([v.reshape(-1).double() for v in got.values()]),
                       torch.from_numpy(flat).float().double())
    # and the round's updates are all signed, for round 1, by distinct clients
    assert sorted(p.client for p in parts) == sorted(server.runtime.client_ids)
    assert {p.round for p in parts} == {1} and all(len(p.sig) == 64 for p in parts)


def test_signed_payloads_cross_the_wire_exactly(model_round):
    """What the Ray and Flower transports carry: the forwarded block contributions and the
    signed model sum decode to the same bytes, and the client's schema accepts them."""
    from fedgl.federation.codec import Encoded, decode, encode
    from fedgl.federation.protocol import Wire
    from fedgl.privacy.he_signed import CONTRIBUTION

    _, ups = model_round
    model_sum = EncryptedModelSum(tuple(ups[k] for k in sorted(ups)))
    part = ups[1]
    payload = {"blocks": [[{"client": part.client, "chunks": list(part.chunks),
                            "sig": part.sig}]], "weights": model_sum}
    _, got = decode(Encoded.from_bytes(encode("test.he", payload).to_bytes()))
    c = got["blocks"][0][0]
    assert CONTRIBUTION.check(c, {}) is None
    assert c["client"] == part.client and c["sig"] == part.sig
    assert [x.data for x in c["chunks"]] == [x.data for x in part.chunks]
    assert Wire("ckks.model_sum").check(got["weights"], {}) is None
    for a, b in zip(got["weights"].parts, model_sum.parts, strict=True):
        assert (a.client, a.round, a.weight, a.sig) == (b.client, b.round, b.weight, b.sig)
        assert [x.data for x in a.chunks] == [x.data for x in b.chunks]


def test_one_client_per_round_with_encrypted_models_is_refused_at_configuration():
    """Its "average" would be one client's model, which every client refuses to decrypt."""
    from fedgl.config import Config
    from fedgl.errors import ConfigError

    with pytest.raises(ConfigError, match="one client per round") as err:
        Config.from_dict({"clients": 3, "clients_per_round": 1, "encrypt_models": True,
                          "oracle_eval": False})
    assert "\n" not in str(err.value)
    Config.from_dict({"clients": 3, "clients_per_round": 2, "encrypt_models": True,
                      "oracle_eval": False})


def test_a_key_holder_that_lost_its_key_stops_an_encrypted_model_run(small):
    """The global model is the round's signed updates under the holder's key: a holder that
    comes back with a new key cannot decrypt it, so the run stops with that line."""
    from fedgl.errors import RunAborted

    server = fedgcn_federation(*small, hops=0, encrypt_models=True, oracle_eval=False, rounds=2)
    server.pretrain()
    next(server.rounds())
    assert isinstance(server.weights, EncryptedModelSum)
    server.runtime.local_client(server.config.he_key_holder)._he = None  # as after a restart
    with pytest.raises(RunAborted, match="restarted and its key is lost"):
        server.pretrain()
