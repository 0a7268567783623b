"""Pairwise-masked secure aggregation: masks cancel exactly, the server sees only masked
vectors; on a dropout the mask mode refuses a sum without a roster client and the robust mode
sums the survivors exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedgl.errors import RunAborted
from fedgl.federation.runtime import LocalRuntime
from fedgl.privacy.identity import AttackDetected, make_roster
from fedgl.privacy.secagg import (
    FIXED_POINT_BITS,
    NonFiniteInput,
    SecAggClient,
    decode_fixed,
    encode_fixed,
)
from fedgl.privacy.secagg_server import SecureSumServer
from fedgl.privacy.secure_sum import plan_rows
from tests.helpers import fedgcn_federation, random_graph, random_partition


def _received(server):
    return {k: server.runtime.local_client(k).received_sums for k in server.runtime.client_ids}


def test_pairwise_masks_cancel_exactly_over_blocks():
    """Blocks (members): A = {0, 1, 2}, B = {1, 3}, C = {0, 1, 2, 3}, with 3, 2, 4 rows of 5
    values: each block's masked uploads add up to the members' fixed-point sum exactly."""
    session = b"s" * 16
    roster, ids = make_roster(range(4))
    agg = {k: SecAggClient(k, ids[k], roster, "mask") for k in range(4)}
    adverts = {k: agg[k].advertise(session, "test") for k in range(4)}
    directory = SecureSumServer().directory(adverts)
    relayed = SecureSumServer().relay({k: agg[k].keys(session, directory) for k in range(4)})
    rng = np.random.default_rng(0)
    d = 5
    blocks = {"A": ([0, 1, 2], 3), "B": ([1, 3], 2), "C": ([0, 1, 2, 3], 4)}
    order = ["A", "B", "C"]
    values, uploads = {}, {}
    for k in range(4):
        agg[k].accept(session, relayed[k]["confirm"])
        mine = [b for b in order if k in blocks[b][0]]
        vals = rng.normal(size=(sum(blocks[b][1] for b in mine), d))
        segments = [(blocks[b][1] * d, [m for m in blocks[b][0] if m != k]) for b in mine]
        values[k] = (mine, vals)
        uploads[k] = agg[k].mask(session, vals, segments)
        assert not np.any(uploads[k] == encode_fixed(vals, 4))  # the server sees no encoding
    for b in order:
        members, rows = blocks[b]
        total = np.zeros(rows * d, dtype=np.uint64)
        expect = np.zeros(rows * d, dtype=np.uint64)
        plain = np.zeros(rows * d)
        for k in members:
            mine, vals = values[k]
            first = sum(blocks[x][1] for x in mine[:mine.index(b)])
            part = vals[first:first + rows].ravel()
            total += uploads[k][first * d:(first + rows) * d]
            expect += encode_fixed(part, 4)
            plain += part
        assert np.array_equal(total, expect)  # exact: the masks cancel mod 2^64
        assert np.allclose(decode_fixed(total), plain, atol=1e-6)


def test_fixed_point_range_and_non_finite_values_are_refused():
    with pytest.raises(OverflowError, match="fixed-point"):
        encode_fixed(np.array([2.0 ** (62 - FIXED_POINT_BITS)]), 2)
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(NonFiniteInput, match="non-finite") as err:
            encode_fixed(np.array([1.0, bad]), 2)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("hops", [1, 2])
def test_masked_sums_equal_plaintext_sums(hops):
    graph = random_graph(nodes=100, seed=6)
    part = random_partition(graph.num_nodes, 4, seed=6)
    plain = fedgcn_federation(graph, part, hops=hops)
    plain.pretrain()
    masked = fedgcn_federation(graph, part, hops=hops, secure_sum="mask")
    masked.pretrain()
    for k, want in _received(plain).items():
        assert torch.allclose(_received(masked)[k], want, atol=1e-6, rtol=0)
    assert masked.privacy_stats["restarts"] == 0


class _Recorder(LocalRuntime):
    def __init__(self, clients):
        super().__init__(clients)
        self.calls: list[tuple[str, dict, dict]] = []

    def call(self, method, args=None, *, phase, clients=None):
        out = super().call(method, args, phase=phase, clients=clients)
        self.calls.append((method, args, out))
        return out


def test_server_sees_only_masked_rows():
    graph = random_graph(nodes=100, seed=7)
    part = random_partition(graph.num_nodes, 4, seed=7)
    server = fedgcn_federation(graph, part, hops=2, secure_sum="mask")
    rt = _Recorder({k: server.runtime.local_client(k) for k in server.runtime.client_ids})
    server.runtime = rt
    server.pretrain()
    uploads = {method: out for method, _, out in rt.calls}["fedgcn.secure_upload"]
    for k, reply in uploads.items():
        client = rt.local_client(k)
        touched, exact, _, _ = client._release()
        masked = reply["masked"].view(np.int64).astype(np.float64) / 2.0 ** FIXED_POINT_BITS
        sent_rows = masked.reshape(-1, graph.num_features)
        # No uploaded row is (close to) any of the client's true partial-sum rows.
        dist = torch.cdist(torch.from_numpy(sent_rows), exact.double())
        assert float(dist.min()) > 1.0
    # Rows that only one client touches and only it asked for never leave that client.
    plan = plan_rows({k: rt.local_client(k)._touched() for k in rt.client_ids},
                     {k: rt.local_client(k)._num_requested() for k in rt.client_ids}, None, 1,
                     skip_local=True)
    assert all(len(b.members) >= 2 for b in plan.blocks)


class _DropOnce(LocalRuntime):
    """A client dies while answering ``method`` the first time and stays gone (like the Ray
    runtime's ``drop`` policy)."""

    def __init__(self, clients, victim, method):
        super().__init__(clients)
        self.victim, self.method, self.dropped = victim, method, False

    @property
    def client_ids(self):
        return [k for k in super().client_ids if not (self.dropped and k == self.victim)]

    def call(self, method, args=None, *, phase, clients=None):
        targets = self.client_ids if clients is None else list(clients)
        if method == self.method and not self.dropped and self.victim in targets:
            self.dropped = True
            out = super().call(method, args, phase=phase, clients=targets)
            out.pop(self.victim)  # its reply never arrives
            return out
        return super().call(method, args, phase=phase,
                            clients=[k for k in targets if k in self.client_ids])


def _dropout_federation(graph, part, method, **cfg):
    server = fedgcn_federation(graph, part, hops=2, **cfg)
    server.runtime = _DropOnce({k: server.runtime.local_client(k) for k in range(4)},
                               victim=2, method=method)
    server.pretrain()
    return server


@pytest.mark.parametrize("method", ["secagg.keys", "fedgcn.secure_upload"])
def test_mask_mode_refuses_to_sum_without_a_client(method):
    """The cheap mode has no dropout recovery: a session without a roster client is refused
    by the other clients (one line), since re-running the sum without a client would reveal
    that client's input by differencing."""
    graph = random_graph(nodes=100, seed=8)
    part = random_partition(graph.num_nodes, 4, seed=8)
    with pytest.raises(RunAborted, match="needs every roster client") as err:
        _dropout_federation(graph, part, method, secure_sum="mask")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("method", ["secagg.keys", "fedgcn.secure_upload"])
def test_robust_mode_sums_the_survivors_exactly(method):
    """Client 2 drops before sharing its secrets (keys) or after (upload, its masks then
    recovered from the others' Shamir shares): the survivors receive exactly the plaintext sums
    of a federation where client 2 sent nothing, in one session."""
    graph = random_graph(nodes=100, seed=8)
    part = random_partition(graph.num_nodes, 4, seed=8)
    plain = _dropout_federation(graph, part, "fedgcn.announce_rows")
    robust = fedgcn_federation(graph, part, hops=2, secure_sum="mask")
    robust.secure_mode = "robust"
    robust.secagg = SecureSumServer("robust", 3)
    for k in range(4):
        c = robust.runtime.local_client(k)
        c.install_identity(c.secagg.identity, c.secagg.roster, "robust", 3)
    robust.runtime = _DropOnce({k: robust.runtime.local_client(k) for k in range(4)}, victim=2,
                               method=method)
    robust.pretrain()
    if method == "fedgcn.secure_upload":
        # client 2 vanished after uploading; a client whose block had only client 2 beside it
        # refuses the survivor set (unmasking would expose its rows), so the server starts over
        assert robust.privacy_stats["refusals"]
        assert robust.privacy_stats["restarts"] == 1
    else:
        assert robust.privacy_stats["restarts"] == 0
    want, got = _received(plain), _received(robust)
    assert sorted(got) == [0, 1, 3]
    for k in got:
        assert torch.allclose(got[k], want[k], atol=1e-5, rtol=0)


def test_he_dropout_before_the_upload_restarts_without_the_client():
    """Client 2 drops while the keys are exchanged: no ciphertext has left anyone, so the
    server starts over without it and the survivors receive the exact sums."""
    graph = random_graph(nodes=100, seed=8)
    part = random_partition(graph.num_nodes, 4, seed=8)
    plain = _dropout_federation(graph, part, "fedgcn.announce_rows")
    secure = _dropout_federation(graph, part, "secagg.keys", secure_sum="he")
    assert secure.privacy_stats["restarts"] == 1
    want, got = _received(plain), _received(secure)
    assert sorted(got) == [0, 1, 3]
    for k in got:
        assert torch.allclose(got[k], want[k], atol=1e-5, rtol=0)


def test_he_dropout_after_the_upload_is_refused_like_mask():
    """Client 2 vanishes after the others uploaded their signed ciphertexts (blocks planned
    with client 2). The server cannot show that it did not receive client 2's upload, so every
    block may still be decrypted by its receivers; a session without client 2 would be a second
    aggregate over the same inputs. The survivors refuse it in one line (the same rule as mask:
    docs/threat-model.md, "one aggregate per input")."""
    graph = random_graph(nodes=100, seed=8)
    part = random_partition(graph.num_nodes, 4, seed=8)
    with pytest.raises(AttackDetected, match="second secure sum over the same values") as err:
        _dropout_federation(graph, part, "fedgcn.secure_upload", secure_sum="he")
    assert "\n" not in str(err.value)


def test_client_refuses_to_send_an_unmaskable_block():
    graph = random_graph(nodes=60, seed=9)
    part = random_partition(graph.num_nodes, 3, seed=9)
    server = fedgcn_federation(graph, part, hops=2, secure_sum="mask")
    clients = {k: server.runtime.local_client(k) for k in range(3)}
    session = b"x" * 16
    hello = {k: c.privacy_hello(session, announce=True) for k, c in clients.items()}
    directory = server.secagg.directory({k: h["adv"] for k, h in hello.items()})
    relayed = server.secagg.relay({k: c.secagg_keys(session, directory)
                                   for k, c in clients.items()})
    plan = {"block_ids": torch.tensor([0]), "block_sizes": torch.tensor([1]),
            "rows": torch.tensor([0]),
            "use_own": torch.zeros(hello[0]["num_requested"], dtype=bool),
            "peers": torch.zeros(0, dtype=torch.long), "peer_counts": torch.tensor([0])}
    with pytest.raises(RunAborted, match="without co-members"):
        clients[0].secure_upload(session, plan, relayed[0])


def test_non_finite_values_are_refused_before_ckks_encoding():
    from fedgl.privacy.he import pack_fixed

    with pytest.raises(NonFiniteInput, match="non-finite"):
        pack_fixed(np.array([0.5, np.nan]), 10, 20, 2)


def test_a_nan_feature_stops_the_masked_round_with_one_line():
    graph = random_graph(nodes=60, seed=12)
    graph.x[3, 0] = float("nan")
    part = random_partition(graph.num_nodes, 3, seed=12)
    server = fedgcn_federation(graph, part, hops=2, secure_sum="mask")
    with pytest.raises(NonFiniteInput, match="non-finite") as err:
        server.pretrain()
    assert "\n" not in str(err.value)
