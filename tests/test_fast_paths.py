"""The CPU run's shortcuts give what the general code gives: CSR evaluation products, loading a
model by copying into its parameters, dense rows to SparseRows by torch's CSR conversion."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from fedgl.federation.messages import SparseRows
from fedgl.models import GCN
from fedgl.models.base import load_state, sparse_rows


def _sparse_matrix(rows=40, cols=30, density=0.05, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(rows, cols, generator=g, dtype=dtype)
    return x * (torch.rand(rows, cols, generator=g) < density)


def test_sparse_rows_converts_only_sparse_cpu_float_matrices():
    x = _sparse_matrix()
    assert sparse_rows(x).layout == torch.sparse_csr
    dense = _sparse_matrix(density=0.5)
    assert sparse_rows(dense) is dense                       # above the density bound
    ints = (x > 0).long()
    assert sparse_rows(ints) is ints                         # not floating point
    vec = x[0]
    assert sparse_rows(vec) is vec                           # not a matrix
    empty = torch.zeros(0, 5)
    assert sparse_rows(empty) is empty


def test_a_csr_first_product_equals_the_dense_one():
    x, w = _sparse_matrix(200, 120), torch.randn(16, 120)
    assert torch.allclose(F.linear(sparse_rows(x), w), F.linear(x, w), atol=1e-6)
    model = GCN(120, 16, 4).eval()
    ei = torch.randint(0, 200, (2, 600))
    ew = torch.rand(600)
    with torch.no_grad():
        assert torch.allclose(model(sparse_rows(x), ei, ew), model(x, ei, ew), atol=1e-5)


def test_load_state_copies_exactly_what_load_state_dict_loads():
    a, b = GCN(30, 8, 3), GCN(30, 8, 3)
    state = {k: v.clone() + 1.0 for k, v in a.state_dict().items()}
    load_state(a, state)
    b.load_state_dict(state)
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in state)
    assert all(a.state_dict()[k].data_ptr() != state[k].data_ptr() for k in state)  # copied


@pytest.mark.parametrize("bad", ["missing", "extra", "shape", "not_a_tensor"])
def test_load_state_refuses_what_load_state_dict_refuses(bad):
    model = GCN(30, 8, 3)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    name = next(iter(state))
    if bad == "missing":
        del state[name]
    elif bad == "extra":
        state["convs.9.bias"] = torch.zeros(3)
    elif bad == "shape":
        state[name] = torch.zeros(2, 2)
    else:
        state[name] = [1.0, 2.0]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises((RuntimeError, TypeError)):
        load_state(model, state)
    if bad != "not_a_tensor":   # load_state_dict's own checks come before any copy
        assert all(torch.equal(model.state_dict()[k], before[k]) for k in before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sparse_rows_from_dense_equal_the_scipy_conversion(dtype):
    x = _sparse_matrix(50, 70, 0.1, dtype)
    x[0, 0], x[1, 1], x[2] = -0.0, float("nan"), 0.0      # a negative zero, a NaN, an empty row
    got = SparseRows.from_dense(x)
    ref = SparseRows.from_scipy(sp.csr_matrix(x.numpy()))
    assert got.shape == ref.shape
    for a, b in ((got.indptr, ref.indptr), (got.indices, ref.indices)):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert got.values.dtype == ref.values.dtype
    assert got.values.tobytes() == ref.values.tobytes()    # bit for bit, the NaN included
    assert torch.equal(got.to_dense().nan_to_num(7.0), x.nan_to_num(7.0))
    assert SparseRows.from_dense(x.numpy()).values.tobytes() == ref.values.tobytes()


def test_sparse_rows_from_dense_of_an_empty_matrix():
    got = SparseRows.from_dense(torch.zeros(0, 4))
    assert got.shape == (0, 4) and got.nnz == 0 and list(got.indptr) == [0]


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("n", [7, 5000, 60000])
def test_distinct_bits_equal_numpys_unique(dtype, n):
    """The wire's value table: torch's sort for large arrays, NumPy's for small, the same
    table and codes (64-bit patterns with the top bit set, i.e. negative floats, included)."""
    from fedgl.federation.packed_rows import distinct_bits

    rng = np.random.default_rng(n)
    top = np.iinfo(dtype).max
    pool = rng.integers(0, top, 300, dtype=dtype, endpoint=True)
    if dtype == np.uint64:
        pool[:3] = [top, np.uint64(1 << 63), 0]
    bits = pool[rng.integers(0, len(pool), n)]
    table, codes = distinct_bits(bits)
    ref_table, ref_codes = np.unique(bits, return_inverse=True)
    assert table.dtype == ref_table.dtype and np.array_equal(table, ref_table)
    assert np.array_equal(codes, ref_codes.reshape(-1))


@pytest.mark.parametrize("density", [0.0, 0.02, 0.3, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_picked_rows_are_compact_rows_of_the_dense_rows(density, dtype):
    """FedGCN's server picks each client's rows from one CSR form of its block: the same wire
    form (sparse or dense, the same arrays) as ``compact_rows`` of the dense rows."""
    from fedgl.federation.messages import RowPicker, SparseRows, compact_rows

    g = torch.Generator().manual_seed(3)
    x = torch.randn(60, 40, generator=g, dtype=dtype)
    x[torch.rand(60, 40, generator=g) >= density] = 0.0
    x[5] = -0.0   # a row of negative zeros is no entry either way
    picker = RowPicker(x)
    for index in (np.array([], dtype=np.int64), np.array([5]), np.array([0, 7, 7, 59, 3]),
                  np.arange(60)):
        got, want = picker.pick(index), compact_rows(x[torch.from_numpy(index)])
        assert type(got) is type(want)
        if isinstance(want, SparseRows):
            assert got.shape == want.shape
            for a, b in ((got.indptr, want.indptr), (got.indices, want.indices),
                         (got.values, want.values)):
                assert a.dtype == b.dtype and np.array_equal(a, b)
            assert got.packed() == want.packed()
        else:
            assert torch.equal(got, want) and got.dtype == want.dtype


def _framed_digest(tag, *parts):
    """The digest as first written: every part framed into one bytes object, then hashed."""
    import hashlib
    from collections.abc import Mapping

    from fedgl.privacy.identity import frame

    def part_bytes(part):
        if hasattr(part, "detach"):
            part = part.detach().cpu().contiguous().numpy()
        if isinstance(part, np.ndarray):
            a = np.ascontiguousarray(part)
            return frame(a.dtype.str, repr(a.shape), a.tobytes())
        if isinstance(part, Mapping):
            return frame(*[frame(str(k), part_bytes(v)) for k, v in part.items()])
        if isinstance(part, bytes | str | int):
            return frame(part)
        return frame(repr(part))

    return f"{tag}:{hashlib.sha256(frame(tag, *[part_bytes(p) for p in parts])).hexdigest()}"


def test_digest_hashes_the_same_bytes_as_framing_every_part():
    """Names already written (input records, stored reports, evaluation keys) stay valid."""
    from fedgl.privacy.inputs import digest

    g = torch.Generator().manual_seed(1)
    cases = [
        ("evaluate", {"convs.0.lin.weight": torch.randn(16, 30, generator=g),
                      "convs.0.bias": torch.zeros(16)}),
        ("data", torch.randn(7, 5, generator=g).t(), np.arange(12).reshape(3, 4)[:, ::2],
         np.array(3.5), np.zeros((0, 4), np.float32), torch.tensor([True, False])),
        ("mixed", b"raw", "text", 12, -7, True, None, (1, 2), 2.5, {"nested": {"a": np.ones(3)}}),
        ("empty",),
    ]
    for tag, *parts in cases:
        assert digest(tag, *parts) == _framed_digest(tag, *parts)
    assert digest("x", np.ones(3)) != digest("x", np.ones(3, np.float32))


def test_oracle_scores_only_the_split_nodes_with_the_whole_graphs_floats():
    """The oracle's GCN computes its last layer only for nodes in some split: the same
    log-probabilities for them as the whole graph's pass, so the same accuracies."""
    from fedgl.api import as_config, load_graph
    from fedgl.evaluation import OracleEvaluator

    cfg = as_config(dataset="sbm", sbm_nodes=200, sbm_classes=3, sbm_features=12, progress=False)
    graph = load_graph(cfg)
    graph.test_mask[:50] = False   # some nodes in no split
    graph.val_mask[:50] = False
    graph.train_mask[:50] = False
    oracle = OracleEvaluator(graph, cfg)
    assert oracle.scored is not None and oracle.scored[0].numel() < graph.num_nodes
    g = torch.Generator().manual_seed(0)
    weights = {k: v + torch.randn(v.shape, generator=g) for k, v in
               oracle.model.state_dict().items()}
    full = oracle.logits(weights)
    rows, edges = oracle.scored
    part = oracle.model(oracle.x, oracle.edge_index, oracle.edge_weight, out_rows=rows,
                        out_edges=edges)
    assert torch.equal(part, full[rows])
    hit = full.argmax(-1) == graph.y
    want = {f"oracle_{s}_acc": float(hit[getattr(graph, f"{s}_mask")].float().mean())
            for s in ("train", "val", "test")}
    assert oracle(weights) == want


@pytest.mark.parametrize("values_dtype", [np.float32, np.float64])
def test_sparse_rows_put_where_they_go_as_their_dense_rows(values_dtype):
    """A client places received sparse rows straight into its input: the same floats as the
    dense rows (an explicit -0.0 arrives as 0.0, as SciPy's toarray makes it), every other
    entry of those rows zeroed, the rest untouched; rows that repeat a column are added."""
    from fedgl.federation.messages import SparseRows

    indptr = np.array([0, 2, 2, 5])
    indices = np.array([1, 3, 0, 2, 4])
    values = np.array([1.5, -0.0, 2.0, -3.25, 7.0], dtype=values_dtype)
    rows = SparseRows(indptr, indices, values, (3, 5))
    repeated = SparseRows(np.array([0, 2, 2, 3]), np.array([1, 1, 4]),
                          np.array([1.0, 2.0, 3.0], dtype=values_dtype), (3, 5))
    at = torch.tensor([4, 0, 2])
    for sparse in (rows, repeated, SparseRows(np.zeros(4, np.int64), np.zeros(0, np.int64),
                                               np.zeros(0, values_dtype), (3, 5))):
        want = torch.full((6, 5), 9.0)
        want[at] = sparse.to_dense().to(torch.float32)
        got = torch.full((6, 5), 9.0)
        sparse.put_rows(got, at)
        assert torch.equal(got, want)
        assert torch.equal(torch.signbit(got), torch.signbit(want))
