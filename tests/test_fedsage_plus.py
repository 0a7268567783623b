"""FedSage+: the generator never receives another client's raw features, every message is
counted, mending adds generated neighbours, and a Cora run learns."""

from __future__ import annotations

import pytest
import torch

from fedgl.algorithms.fedsage_plus.client import FedSagePlusClient
from fedgl.algorithms.fedsage_plus.server import FedSagePlusServer
from fedgl.algorithms.runner import build_federation, run_federated
from fedgl.config import Config
from fedgl.federation.messages import payload_nbytes
from fedgl.federation.runtime import LocalRuntime
from fedgl.progress import RoundProgress
from tests.helpers import random_graph, random_partition

TINY = {"algorithm": "fedsage-plus", "gen_epochs": 2, "gen_batch_size": 16, "latent_dim": 8,
        "gen_encoder_hidden": 8, "gen_hidden": 16, "num_pred": 3, "progress": False,
        "oracle_eval": False, "hidden": 8, "rounds": 3}


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _tensors(v)


class RecordingRuntime(LocalRuntime):
    """Records every payload a client receives and what every call should have counted."""

    def __init__(self, clients, ledger=None, **kw):
        super().__init__(clients, ledger, **kw)
        self.received: dict[int, list] = {k: [] for k in clients}
        self.expected: dict[tuple[str, str], int] = {}

    def call(self, method, args=None, *, phase, clients=None):
        out = super().call(method, args, phase=phase, clients=clients)
        targets = self.client_ids if clients is None else clients
        for k in targets:
            a = args if args is None or not all(isinstance(x, int) for x in args) else args[k]
            self.received[k].append(a)
            for d, payload in (("down", a or {}), ("up", out[k])):
                self.expected[(phase, d)] = self.expected.get((phase, d), 0) + payload_nbytes(payload)
        return out


def _federation(g, part, **kw):
    cfg = Config.from_dict({**TINY, "clients": part.num_clients, **kw})
    server = build_federation(g, part, cfg, 0, FedSagePlusClient, FedSagePlusServer)
    clients = {k: server.runtime.local_client(k) for k in server.runtime.client_ids}
    server.runtime = RecordingRuntime(clients)
    return server, clients


def test_generator_never_receives_another_clients_raw_features():
    g = random_graph(120, seed=7)  # Gaussian features: no row repeats by chance
    part = random_partition(g.num_nodes, 3, seed=1)
    server, clients = _federation(g, part)
    server.pretrain()
    list(server.rounds())
    for k, client in clients.items():
        others = g.x[torch.from_numpy(part.owner) != k]
        seen = [t for msg in server.runtime.received[k] for t in _tensors(msg)]
        seen += [t for t in _tensors(vars(client)) if t.dim() >= 1]
        for t in seen:
            if t.dim() >= 1 and t.size(-1) == g.num_features and t.numel():
                rows = t.reshape(-1, g.num_features)
                assert torch.cdist(rows.float(), others).min() > 1e-4, (k, t.shape)
        # and the others did score its generator: cross-client gradients arrived
        assert any("grads" in (m or {}) and len(m["grads"]) == 2 for m in server.runtime.received[k])


def test_every_message_is_counted_and_mending_adds_neighbours():
    g = random_graph(120, seed=8)
    part = random_partition(g.num_nodes, 3, seed=2)
    server, clients = _federation(g, part)
    server.pretrain()
    list(server.rounds())
    led = server.runtime.ledger
    for (phase, d), nbytes in server.runtime.expected.items():
        assert led.bytes(phase, d) == nbytes
    # per step each client uploads its generator once and each other client returns a gradient
    fgen = payload_nbytes(clients[0].neighgen.fgen.state_dict())
    assert led.bytes("pretrain", "up") > 2 * 3 * fgen * (1 + 2)
    assert sum(server.generated.values()) > 0
    for k, c in clients.items():
        inp = c.model_inputs()
        extra = inp.x.size(0) - c.data.num_nodes
        assert extra == server.generated[k]
        assert (inp.x[c.data.num_nodes:].abs() < 1).all()  # tanh outputs


def test_cross_clients_limits_the_scorers_and_bytes():
    g = random_graph(120, seed=9)
    part = random_partition(g.num_nodes, 4, seed=3)
    all_server, _ = _federation(g, part)
    one_server, _ = _federation(g, part, cross_clients=1)
    all_server.pretrain()
    one_server.pretrain()
    assert one_server.runtime.ledger.bytes("pretrain") < all_server.runtime.ledger.bytes("pretrain")


def test_fedsage_plus_on_cora(data_root):
    from fedgl.data.datasets import load_dataset

    g = load_dataset("cora", str(data_root))
    cfg = Config.from_dict({"algorithm": "fedsage-plus", "clients": 5, "beta": 10000,
                            "rounds": 20, "eval_every": 20, "gen_epochs": 2, "gen_batch_size": 0,
                            "gen_hidden": 64, "cross_clients": 1, "progress": False})
    res = run_federated(g, cfg, repeat=0, seed=0, client_cls=FedSagePlusClient,
                        server_cls=FedSagePlusServer, progress=RoundProgress(None))
    assert res.final["test_acc"] > 0.6
    assert res.final["pretrain_bytes"] > 0


def test_feature_matching_is_the_references_mse_by_hand():
    """min over candidates of the mean squared difference per feature (``F.mse_loss``), as the
    reference's greedy loss: [1, 1] against {[0, 0], [3, 1]} -> min(1, 2) = 1 (a sum would give
    2 and make the loss weight b d times the reference's)."""
    from fedgl.algorithms.fedsage_plus.neighgen import cross_match_loss, local_match_loss

    gen = torch.tensor([[[1.0, 1.0]]])
    x = torch.tensor([[0.0, 0.0], [3.0, 1.0]])
    pairs = torch.tensor([[0, 0], [0, 1]])
    assert local_match_loss(gen, x, pairs, torch.tensor([2])).item() == 1.0
    assert cross_match_loss(gen, x).item() == pytest.approx(1.0, rel=1e-6)  # cdist rounding


def test_chunked_cross_matching_equals_the_all_pairs_minimum():
    """Exact reference: the chunked arg-min loss has the value and the gradient of the autograd
    all-pairs ``cdist`` minimum it replaces (the previous formula), for any chunk size."""
    from fedgl.algorithms.fedsage_plus.neighgen import cross_match_loss

    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 6, generator=g)
    base = torch.randn(9, 3, 6, generator=g)
    ref_gen = base.clone().requires_grad_(True)
    flat = ref_gen.reshape(-1, 6)
    ref = torch.cdist(flat, x).pow(2).min(dim=1).values.mean() / 6
    ref.backward()
    for budget in (1, 37, 100, 1 << 22):  # one row per chunk ... everything at once
        gen = base.clone().requires_grad_(True)
        loss = cross_match_loss(gen, x, None, budget=budget)
        loss.backward()
        assert loss.item() == pytest.approx(ref.item(), rel=1e-5)
        assert torch.allclose(gen.grad, ref_gen.grad, atol=1e-6)


def test_sampled_cross_candidates_by_hand_and_drawn_as_the_reference():
    """With candidates U_v: mean over (v, p) of min over U_v of the per-feature mean squared
    difference (a Python loop); candidates are the local neighbours of one node."""
    from fedgl.algorithms.fedsage_plus.neighgen import cross_match_loss, sample_candidates

    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 4, generator=g)
    gen = torch.randn(5, 2, 4, generator=g)
    cand = torch.randint(8, (5, 3), generator=g)
    want = sum(min(((gen[v, p] - x[u]) ** 2).mean().item() for u in cand[v])
               for v in range(5) for p in range(2)) / 10
    assert cross_match_loss(gen, x, cand, budget=4).item() == pytest.approx(want, rel=1e-6)
    # local graph: 0-1, 1-2, 4-5 (both directions); 3, 6, 7 isolated
    src = torch.tensor([0, 1, 1, 2, 4, 5])
    dst = torch.tensor([1, 0, 2, 1, 5, 4])
    order = torch.argsort(src, stable=True)
    col = dst[order]
    ptr = torch.zeros(9, dtype=torch.long)
    ptr[1:] = torch.bincount(src, minlength=8).cumsum(0)
    nbrs = [set(col[ptr[r]:ptr[r + 1]].tolist()) for r in range(8)]
    drawn = sample_candidates(400, 5, ptr, col, g)
    assert drawn.shape == (400, 5)
    for row in drawn.tolist():
        assert any(set(row) <= nb for nb in nbrs if nb)  # all from one node's neighbours
    assert set(drawn.flatten().tolist()) == {0, 1, 2, 4, 5}
    none = sample_candidates(6, 3, torch.zeros(5, dtype=torch.long), col[:0], g)
    assert none.shape == (6, 3) and int(none.max()) < 4  # no local edge: uniform own rows


def test_negative_cross_candidates_is_refused_naming_the_key():
    from fedgl.algorithms.fedsage_plus.options import FedSagePlusOptions
    from fedgl.errors import ConfigError

    with pytest.raises(ConfigError, match="cross_candidates must be >= 0"):
        FedSagePlusOptions(cross_candidates=-1).validate()
    FedSagePlusOptions(cross_candidates=0).validate()  # 0: all of the scorer's nodes


# ---------------------------------------------------------------- mend exact (perfect generator)
def _full_adjacency(g):
    a = torch.zeros(g.num_nodes, g.num_nodes)
    a[g.edge_index[0], g.edge_index[1]] = 1.0
    return a


def _neighbour_sums(inp, n_own):
    """Per own row: the unweighted sum of its in-neighbours' rows (self-loops left out) and its
    in-degree, on a client's model inputs."""
    src, dst = inp.edge_index
    off = src != dst
    sums = torch.zeros_like(inp.x).index_add_(0, dst[off], inp.x[src[off]])
    deg = torch.bincount(dst[off], minlength=inp.x.size(0))
    return sums[:n_own], deg[:n_own]


def test_exact_mend_rebuilds_every_nodes_full_neighbourhood():
    """Exact reference (the oracle mend): with num_pred above every cross-client degree, each own
    node's neighbours in the mended graph sum to its row of A·X on the whole graph and number its
    true degree, i.e. FedGCN 1-hop's layer-1 input before normalisation, and its normalisation
    degree is the true one; the generated rows are other clients' raw features, counted."""
    g = random_graph(120, seed=8)
    part = random_partition(g.num_nodes, 3, seed=2)
    server, clients = _federation(g, part, mend="exact", num_pred=64)
    server.pretrain()
    ax, deg = _full_adjacency(g) @ g.x, _full_adjacency(g).sum(0)
    for k, c in clients.items():
        own = c.data.node_ids
        sums, d = _neighbour_sums(c.model_inputs(), c.data.num_nodes)
        assert torch.allclose(sums, ax[own], atol=1e-5)
        assert torch.equal(d, deg[own].long())
        remote = int((~c.data.owns(c.data.edge_index[0])).sum())
        assert server.generated[k] == remote > 0
    for (phase, d), nbytes in server.runtime.expected.items():
        assert server.runtime.ledger.bytes(phase, d) == nbytes
    assert server.generator_log == []  # no generator was trained
    assert all(c.gen_opt.state == {} for c in clients.values())


def test_exact_mend_caps_each_node_at_num_pred_true_neighbours():
    """num_pred 1: each own node gets one generated row when it has a cross-client neighbour, and
    that row is the raw feature row of one of those neighbours."""
    g = random_graph(120, seed=9)
    part = random_partition(g.num_nodes, 4, seed=3)
    server, clients = _federation(g, part, mend="exact", num_pred=1)
    server.pretrain()
    for c in clients.values():
        inp, n = c.model_inputs(), c.data.num_nodes
        src, dst = c.data.edge_index
        remote = ~c.data.owns(src)
        has = torch.zeros(n, dtype=torch.bool)
        has[c.data.global_to_local(dst[remote])] = True
        e_src, e_dst = inp.edge_index
        gen_edge = (e_src >= n) & (e_dst < n)
        assert torch.equal(torch.bincount(e_dst[gen_edge], minlength=n), has.long())
        for r, v in zip(e_src[gen_edge].tolist(), e_dst[gen_edge].tolist(), strict=True):
            nbrs = src[remote & (dst == c.data.node_ids[v])]
            assert torch.isclose(g.x[nbrs], inp.x[r]).all(dim=1).any()


def test_unknown_mend_is_refused_naming_the_choices():
    from fedgl.algorithms.fedsage_plus.options import FedSagePlusOptions
    from fedgl.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown mend 'exakt'.*generated, exact"):
        FedSagePlusOptions(mend="exakt").validate()


def test_exact_mend_refuses_a_reply_missing_a_wanted_neighbour():
    from fedgl.federation.protocol import ProtocolViolation

    g = random_graph(60, seed=4)
    part = random_partition(g.num_nodes, 2, seed=1)
    _server, clients = _federation(g, part, mend="exact")
    c = clients[0]
    want = c.exact_share()["want"]
    rows = g.x[want]
    c.exact_mend(want, rows)  # everything it asked for: accepted
    with pytest.raises(ProtocolViolation, match="asked for"):
        c.exact_mend(want[1:], rows[1:])
