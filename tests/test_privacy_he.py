"""CKKS with client-held keys: the server cannot decrypt, sums match plaintext, packing is exact,
the ledger counts serialized ciphertexts, and a whole HE run trains like a plaintext one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedgl
from fedgl.federation.messages import payload_nbytes
from fedgl.federation.runtime import LocalRuntime
from fedgl.privacy.he import (
    Ciphertext,
    EncryptedModel,
    HEClientContext,
    HEParams,
    HEServerContext,
    pack_fixed,
    unpack_fixed,
)
from tests.helpers import fedgcn_federation, random_graph, random_partition


def _received(server):
    return [server.runtime.local_client(k).received_sums for k in server.runtime.client_ids]


@pytest.fixture(scope="module")
def small():
    graph = random_graph(nodes=90, seed=5)
    return graph, random_partition(graph.num_nodes, 3, seed=5)


@pytest.fixture(scope="module")
def plain_sums(small):
    graph, part = small
    out = {}
    for hops in (1, 2):
        server = fedgcn_federation(graph, part, hops=hops)
        server.pretrain()
        out[hops] = _received(server)
    return out


def test_server_context_is_public_and_cannot_decrypt(small):
    graph, part = small
    server = fedgcn_federation(graph, part, hops=2, secure_sum="he")
    server.pretrain()
    ctx = server.he_context.context
    assert not ctx.is_private() and ctx.is_public()
    with pytest.raises(ValueError):
        ctx.secret_key()
    # A ciphertext the server handled (client 0 re-encrypts one of its rows) cannot be decrypted
    # with anything the server holds.
    client = server.runtime.local_client(0)
    ct = client._he.encrypt_real(np.arange(5.0))[0]
    with pytest.raises(ValueError, match="secret"):
        server.he_context.load(ct).decrypt()
    # The server's state holds no private TenSEAL context anywhere.
    state = {k: v for k, v in vars(server).items() if k != "runtime"}
    assert not any(getattr(v, "is_private", lambda: False)() for v in state.values())
    # Every client can decrypt (they share the key holder's secret key).
    for k in server.runtime.client_ids:
        ctx_k = server.runtime.local_client(k)._he
        assert np.allclose(ctx_k.decrypt_real([ct], 5), np.arange(5.0), atol=1e-6)


@pytest.mark.parametrize("hops", [1, 2])
@pytest.mark.parametrize(("pack", "atol"), [(1, 1e-5), (2, 1e-3), (3, 2e-2)])
def test_decrypted_sums_match_plaintext(small, plain_sums, hops, pack, atol):
    graph, part = small
    server = fedgcn_federation(graph, part, hops=hops, secure_sum="he", he_pack=pack)
    server.pretrain()
    for got, want in zip(_received(server), plain_sums[hops], strict=True):
        assert got.shape == want.shape
        assert torch.allclose(got, want, atol=atol, rtol=0)
    if pack > 1:  # the quantisation step actually used bounds the error
        step = 2.0 ** -server.privacy_stats["frac_bits"]["min"]
        worst = max((g - w).abs().max().item()
                    for g, w in zip(_received(server), plain_sums[hops], strict=True))
        assert worst <= part.num_clients * step / 2 + 1e-4


def test_packing_is_exact_for_sums_of_signed_values():
    rng = np.random.default_rng(0)
    params = HEParams(pack=3, clients=4)
    w, f = params.field_bits, 5
    parts = [rng.uniform(-3, 3, size=1001) for _ in range(4)]
    quantised = [np.rint(p * 2 ** f) / 2 ** f for p in parts]
    packed_sum = sum(pack_fixed(p, f, w, 3) for p in parts)
    assert np.array_equal(unpack_fixed(packed_sum, 1001, f, w, 3), sum(quantised))
    with pytest.raises(OverflowError):
        pack_fixed(np.array([2.0 ** (w - f)]), f, w, 3)


def test_ckks_packed_sum_decrypts_exactly():
    params = HEParams(pack=2, clients=3)
    ctx = HEClientContext.generate(params)
    server = HEServerContext(ctx.public_bytes())
    rng = np.random.default_rng(1)
    vals = [rng.uniform(-100, 100, size=3000) for _ in range(3)]
    f = params.field_bits - 1 - 9  # |sum| < 300 < 2^9
    total = server.add([ctx.encrypt_packed(v, f) for v in vals])
    expect = sum(np.rint(v * 2 ** f) / 2 ** f for v in vals)
    assert np.array_equal(ctx.decrypt_packed(total, 3000, f), expect)


def test_key_is_sealed_to_clients_and_opaque_to_the_server(small):
    graph, part = small
    server = fedgcn_federation(graph, part, hops=1, secure_sum="he")
    server.pretrain()
    holder = server.runtime.local_client(0)
    secret = holder._he.secret_bytes()
    other = server.runtime.local_client(1)
    session = holder._session
    # Nothing sealed for client 1 opens at client 2 (wrong pairwise secret).
    sealed = holder.secagg.seal(session, 1, secret)
    from fedgl.privacy.identity import AttackDetected
    with pytest.raises(AttackDetected, match="does not open"):
        server.runtime.local_client(2).secagg.open(session, 0, sealed)
    assert other.secagg.open(session, 0, sealed) == secret
    assert secret not in sealed


class _Recorder(LocalRuntime):
    """Keeps every reply, to recount the bytes the ledger charged."""

    def __init__(self, clients):
        super().__init__(clients)
        self.replies: list[tuple[str, dict]] = []

    def call(self, method, args=None, *, phase, clients=None):
        before = self.ledger.bytes(phase, "up")
        out = super().call(method, args, phase=phase, clients=clients)
        self.replies.append((method, out, self.ledger.bytes(phase, "up") - before))
        return out


def test_ledger_counts_serialized_ciphertext_bytes(small):
    graph, part = small
    server = fedgcn_federation(graph, part, hops=2, secure_sum="he")
    rt = _Recorder({k: server.runtime.local_client(k) for k in server.runtime.client_ids})
    server.runtime = rt
    server.pretrain()
    uploads, charged = [(out, up) for method, out, up in rt.replies
                        if method == "fedgcn.secure_upload"][0]
    # The upload replies hold only ciphertexts and one Ed25519 signature (64 bytes) per block:
    # the ledger charged exactly their serialized length (TenSEAL's serialize(), what a real
    # transport would carry).
    serialized = sum(len(ct.data) for r in uploads.values() for blk in r["blocks"] for ct in blk)
    sigs = [s for r in uploads.values() for s in r["sigs"]]
    assert len(sigs) == sum(len(r["blocks"]) for r in uploads.values())
    assert all(len(s) == 64 for s in sigs)
    assert serialized > 0 and charged == serialized + 64 * len(sigs)
    ct = uploads[0]["blocks"][0][0]
    assert isinstance(ct, Ciphertext) and payload_nbytes(ct) == len(ct.data)
    assert payload_nbytes(EncryptedModel((ct, ct), 2.0)) == 2 * len(ct.data) + 8


def test_he_run_trains_like_plaintext():
    graph = random_graph(nodes=120, seed=11)
    common = dict(graph=graph, clients=3, rounds=15, hops=2, progress=False, oracle_eval=False,
                  dropout=0.0, min_client_size=5)
    plain = fedgl.run(**common)
    enc = fedgl.run(**common, secure_sum="he", encrypt_models=True, he_pack=2)
    assert abs(plain.mean("test_acc") - enc.mean("test_acc")) <= 0.02
    rep = enc.repeats[0]
    assert rep.extra["privacy"]["he"]["poly_degree"] == 4096
    assert rep.extra["privacy"]["encrypt_models"] is True
    # Encrypted model rounds carry ciphertexts: far more bytes than the float32 model.
    assert rep.final["train_bytes"] > 5 * plain.repeats[0].final["train_bytes"]


@pytest.mark.parametrize("hops", [0, 2])
def test_encrypted_models_with_plaintext_sums(hops):
    graph = random_graph(nodes=90, seed=12)
    common = dict(graph=graph, clients=3, rounds=3, hops=hops, progress=False,
                  oracle_eval=False, min_client_size=5, aggregation="weighted", dropout=0.0)
    plain = fedgl.run(**common).repeats[0]
    rep = fedgl.run(**common, encrypt_models=True).repeats[0]
    # the key distribution is counted on top of the plaintext pre-training bytes
    assert rep.final["pretrain_bytes"] > plain.final["pretrain_bytes"]
    assert rep.final["test_acc"] == pytest.approx(plain.final["test_acc"], abs=0.02)
    assert rep.extra["privacy"]["protocol"]["restarts"] == 0
