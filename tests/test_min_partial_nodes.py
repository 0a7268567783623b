"""A client's own rule on the partial sums it sends (``min_partial_nodes``): a sum for another
organisation's node goes out only where it aggregates at least k of the client's own nodes,
else as zeros. The rule is the client's: the server asks for the partial sums with no argument
it could bend, and under any secure-sum mode the values that enter the sum are the same rows.

Without it, a lone node whose only neighbour is another organisation's customer receives that
customer's (degree-scaled) features as its aggregate; ``min_contributors`` stops that only where
the server applies it.
"""

from __future__ import annotations

import pytest
import torch

import fedgl
from tests.helpers import fedgcn_federation, random_graph, random_partition


def _own_counts(graph, part, k: int, touched: torch.Tensor) -> torch.Tensor:
    """How many of client k's own nodes each touched row aggregates (its own row: itself)."""
    owner = torch.as_tensor(part.owner)
    src, dst = graph.edge_index
    mine = owner[dst] == k
    counts = torch.zeros(graph.num_nodes, dtype=torch.long)
    counts.index_add_(0, src[mine], torch.ones(int(mine.sum()), dtype=torch.long))
    counts[owner == k] += 1
    return counts[touched]


@pytest.mark.parametrize("least", [2, 3])
def test_rows_for_others_with_fewer_own_nodes_leave_as_zeros(least: int) -> None:
    graph = random_graph(nodes=150, seed=7)
    part = random_partition(graph.num_nodes, 4, seed=7)
    exact = fedgcn_federation(graph, part, hops=2)
    ruled = fedgcn_federation(graph, part, hops=2, min_partial_nodes=least)
    sent = ruled.runtime.call("fedgcn.partial_sums", {}, phase="pretrain")
    full = exact.runtime.call("fedgcn.partial_sums", {}, phase="pretrain")
    withheld_any = kept_any = False
    for k in ruled.runtime.client_ids:
        ids, sums = sent[k]["ids"], sent[k]["sums"]
        assert torch.equal(ids, full[k]["ids"])
        n_own = int((torch.as_tensor(part.owner) == k).sum())
        counts = _own_counts(graph, part, k, ids)
        others = torch.zeros(len(ids), dtype=torch.bool)
        others[n_own:] = True
        withheld = others & (counts < least)
        assert bool((sums[withheld] == 0).all())   # not one of them carries a value
        assert torch.equal(sums[~withheld], full[k]["sums"][~withheld])   # the rest exact
        withheld_any |= bool(withheld.any())
        kept_any |= bool((others & ~withheld).any())
    assert withheld_any and kept_any   # the graph has rows of both kinds


def test_a_run_under_the_rule_trains(data_root) -> None:
    """Cora, 2-hop, 10 clients: the rule withholds the single cross-client contributions, so the
    clients learn from less of their neighbourhoods; the run still trains."""
    common = {"algorithm": "fedgcn", "dataset": "cora", "data_root": str(data_root),
              "hops": 2, "rounds": 30, "progress": False, "leakage_report": False}
    ruled = fedgl.run(**common, min_partial_nodes=2)
    full = fedgl.run(**common)
    print(f"test accuracy with min_partial_nodes 2: {ruled.mean('test_acc'):.4f}, "
          f"without: {full.mean('test_acc'):.4f}")
    assert ruled.mean("test_acc") > 0.6
    assert ruled.mean("test_acc") != full.mean("test_acc")   # the rule changed the inputs


def test_scoring_after_training_for_its_own_nodes_only(tmp_path, monkeypatch) -> None:
    """``own_scoring_only``: the client's first release over its data set (training) is whole;
    in a later release over changed data (scoring nodes that arrived after training) it sends
    nothing for other organisations' nodes, only its own nodes' rows."""
    monkeypatch.setenv("FEDGL_STAMP_DIR", str(tmp_path / "stamps"))
    graph = random_graph(nodes=150, seed=8)
    keys = {"hops": 2, "own_scoring_only": True, "state_dir": str(tmp_path / "state")}
    first = fedgcn_federation(graph, random_partition(graph.num_nodes, 3, seed=1), **keys)
    later = fedgcn_federation(graph, random_partition(graph.num_nodes, 3, seed=2), **keys)
    for server, whole in ((first, True), (later, False)):
        sent = server.runtime.call("fedgcn.partial_sums", {}, phase="pretrain")
        for k, msg in sent.items():
            n_own = server.runtime.local_client(k).data.num_nodes
            others = msg["sums"][n_own:]
            assert bool((others != 0).any()) == whole, (k, whole)
            assert bool((msg["sums"][:n_own] != 0).any())   # its own rows still go


@pytest.mark.parametrize("least", [1, 2, 3])
def test_the_leakage_report_counts_only_the_partial_sums_sent(least: int) -> None:
    """The report models the rule: the remote part of every row a client receives is exactly
    the sum of the report's remote pairs that reach the sums (withheld partial sums left out),
    its per-row remote counts are their number, and with the rule the plaintext server reads
    fewer nodes alone."""
    import numpy as np

    from fedgl.privacy.leakage import _ClosedNeighbourhoods, leakage_report, remote_counts

    graph = random_graph(nodes=150, seed=7)
    part = random_partition(graph.num_nodes, 4, seed=7)
    server = fedgcn_federation(graph, part, hops=2, min_partial_nodes=least)
    server.pretrain()
    pairs = _ClosedNeighbourhoods(graph, part, least)
    z = graph.x * (graph.degrees() + 1).to(graph.x.dtype).pow(-0.5).unsqueeze(1)
    counts = remote_counts(graph, part, 2, pairs)
    for k in server.runtime.client_ids:
        client = server.runtime.local_client(k)
        touched = client._full_touched()
        # its own part as it sent it (its own withheld sums are zeros too)
        remote_part = client.received_sums - client._release()[2]
        sel = pairs.col_owner != k
        if pairs.sent is not None:
            sel &= pairs.sent
        expected = torch.zeros_like(graph.x)
        expected.index_add_(0, torch.from_numpy(pairs.rows[sel].astype(np.int64)),
                            z[torch.from_numpy(pairs.cols[sel].astype(np.int64))])
        torch.testing.assert_close(remote_part, expected[touched], rtol=1e-5, atol=1e-5)
        per_row = np.bincount(pairs.rows[sel], minlength=graph.num_nodes)
        assert np.array_equal(counts[k], per_row[np.sort(touched.numpy())])
    if least > 1:
        cfg = fedgl.as_config(algorithm="fedgcn", hops=2, clients=4, secure_sum="none")
        ruled = leakage_report(graph, part, cfg.replace(min_partial_nodes=least))
        plain = leakage_report(graph, part, cfg)
        assert ruled["min_partial_nodes"] == least and plain["min_partial_nodes"] == 1
        # the plaintext server reads fewer nodes alone (no lone foreign partial sum is sent);
        # a receiver may see more rows of one remote node (a row's owner alone, once the lone
        # foreign parts are withheld): the report counts what is received, either way
        assert ruled["server_view"]["nodes_in_single_contributor_rows"] < \
            plain["server_view"]["nodes_in_single_contributor_rows"]
        assert ruled["total"] != plain["total"]
