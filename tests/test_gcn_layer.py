"""fedgl's GCN layer against PyG's ``GCNConv(normalize=False, add_self_loops=False)``: the same
parameters, initialisation draws, outputs and gradients, bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn import GCNConv

from fedgl.models import build_model, gcn_edge_weights
from fedgl.models.base import scatter_sum
from fedgl.models.gcn import GCNLayer


def pyg_layer(d_in: int, d_out: int) -> GCNConv:
    return GCNConv(d_in, d_out, add_self_loops=False, normalize=False)


def random_graph(n: int, e: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    ei = ei[:, ei[0] != ei[1]]
    deg = torch.bincount(ei[1], minlength=n) + 1
    return gcn_edge_weights(ei, n, deg)


@pytest.mark.parametrize("d_in,d_out", [(1433, 16), (16, 7), (5, 64)])
def test_same_parameters_and_rng_draws(d_in, d_out):
    torch.manual_seed(3)
    ref = pyg_layer(d_in, d_out)
    after_ref = torch.rand(4)
    torch.manual_seed(3)
    own = GCNLayer(d_in, d_out)
    after_own = torch.rand(4)
    assert list(own.state_dict()) == list(ref.state_dict()) == ["bias", "lin.weight"]
    for name, value in ref.state_dict().items():
        assert torch.equal(own.state_dict()[name], value), name
    assert torch.equal(after_own, after_ref)   # the global RNG stream continues alike


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_same_output_and_gradients(weighted, dtype):
    n, d_in, d_out = 300, 40, 9
    ei, ew = random_graph(n, 2000, seed=1)
    ew = ew.to(dtype) if weighted else None
    torch.manual_seed(0)
    ref = pyg_layer(d_in, d_out).to(dtype)
    own = GCNLayer(d_in, d_out).to(dtype)
    own.load_state_dict(ref.state_dict())
    x = torch.randn(n, d_in, dtype=dtype)
    xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
    outs = [ref(xs[0], ei, ew), own(xs[1], ei, ew)]
    assert torch.equal(outs[0], outs[1])
    target = torch.randn(n, d_out, dtype=dtype)
    for out in outs:
        ((out - target) ** 2).sum().backward()
    assert torch.equal(xs[0].grad, xs[1].grad)
    for (name, p_ref), (_, p_own) in zip(ref.named_parameters(), own.named_parameters(),
                                         strict=True):
        assert torch.equal(p_ref.grad, p_own.grad), name


def test_rows_without_edges_get_the_bias_only():
    own = GCNLayer(3, 2)
    with torch.no_grad():
        own.bias.copy_(torch.tensor([1.0, -2.0]))
    ei = torch.tensor([[0], [1]])
    out = own(torch.randn(4, 3), ei, torch.tensor([0.5]))
    assert torch.equal(out[2:], own.bias.detach().expand(2, 2))
    assert not torch.equal(out[1], own.bias.detach())


def test_scatter_sum_matches_pyg():
    from torch_geometric.utils import scatter

    g = torch.Generator().manual_seed(5)
    src = torch.randn(500, 7, generator=g)
    index = torch.randint(0, 40, (500,), generator=g)
    assert torch.equal(scatter_sum(src, index, 45), scatter(src, index, 0, dim_size=45,
                                                            reduce="sum"))
    assert torch.equal(scatter_sum(src[:, 0].double(), index, 40),
                       scatter(src[:, 0].double(), index, 0, dim_size=40, reduce="sum"))


def test_whole_model_matches_a_pyg_gcn():
    """The two-layer GCN built by build_model equals the same stack of PyG layers, in training
    mode with a seeded dropout generator as well as in evaluation mode."""
    n = 200
    ei, ew = random_graph(n, 1200, seed=2)
    torch.manual_seed(7)
    model = build_model("gcn", 30, 16, 5, 2, 0.5)
    torch.manual_seed(7)
    convs = [pyg_layer(30, 16), pyg_layer(16, 5)]
    x = torch.randn(n, 30)
    for c_ref, c_own in zip(convs, model.convs, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(c_ref.state_dict().values(),
                                                     c_own.state_dict().values(), strict=True))
    for training in (False, True):
        model.train(training)
        gen = torch.Generator().manual_seed(11)
        out = model(x, ei, ew, generator=gen)
        h = torch.relu(convs[0](x, ei, ew))
        if training:
            keep = torch.rand(h.shape, generator=torch.Generator().manual_seed(11)) >= 0.5
            h = h * keep / 0.5
        ref = torch.log_softmax(convs[1](h, ei, ew), dim=-1)
        assert torch.equal(out, ref)


@pytest.mark.parametrize("weight_decay", [0.0, 5e-4])
def test_sgd_step_matches_torch_sgd(weight_decay):
    from fedgl.algorithms.batched import sgd_step

    g = torch.Generator().manual_seed(9)
    start = [torch.randn(4, 6, 5, generator=g), torch.randn(4, 5, generator=g)]
    x = torch.randn(6, 30, generator=g)
    runs = []
    for manual in (False, True):
        params = [t.clone().requires_grad_() for t in start]
        opt = None if manual else torch.optim.SGD(params, lr=0.5, weight_decay=weight_decay)
        for _ in range(3):
            for p in params:
                p.grad = None
            h = torch.einsum("kij,kj->ki", params[0], params[1]).tanh()   # [4, 6]
            loss = (h @ x).pow(2).sum()
            loss.backward()
            if manual:
                sgd_step(params, 0.5, weight_decay)
            else:
                opt.step()
        runs.append(params)
    for ref, own in zip(*runs, strict=True):
        assert torch.equal(ref, own)
    assert not torch.equal(runs[1][0], start[0])   # it did move
