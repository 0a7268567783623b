"""Every server learns its clients' public facts through one set-up message (``setup.facts``),
on every runtime; clients that disagree stop the run at set-up in one line, and a deployed
set-up carries the facts in the ``party.setup`` reply (two round trips, not three)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from fedgl.algorithms.base import FedAvgClient, FedAvgServer
from fedgl.algorithms.runner import build_federation, initial_weights, start_server
from fedgl.config import Config
from fedgl.data.client_data import split_graph
from fedgl.errors import ConfigError, RunAborted
from fedgl.federation.facts import FACTS, agree, learn_facts
from fedgl.federation.ledger import Ledger
from fedgl.federation.protocol import ProtocolViolation
from fedgl.federation.runtime import LocalRuntime
from fedgl.privacy.policy import ClientPolicy
from tests.helpers import random_graph, random_partition

CFG = {"algorithm": "fedgcn", "clients": 3, "hops": 0, "progress": False, "rounds": 2}


@pytest.fixture(scope="module")
def small():
    graph = random_graph(nodes=60, seed=3)
    return graph, random_partition(graph.num_nodes, 3, seed=3)


def test_a_local_server_learns_the_widths_through_one_counted_message(small) -> None:
    """The initial model is built from the clients' answers and equals the one the graph's
    widths give; the ledger counts one ``setup.facts`` message and reply per client."""
    graph, part = small
    cfg = Config.from_dict(CFG)
    server = build_federation(graph, part, cfg, 0, FedAvgClient, FedAvgServer)
    try:
        expected = initial_weights(graph, cfg, 0)
        assert sorted(server.weights) == sorted(expected)
        assert all(torch.equal(server.weights[k], expected[k]) for k in expected)
        ledger = server.runtime.ledger
        assert ledger.messages("setup", "down") == ledger.messages("setup", "up") == 3
        assert ledger.bytes("setup", "down") == 0   # the question carries nothing
        # each reply: four scalars (a string and three integers)
        assert ledger.bytes("setup", "up") > 0 and ledger.messages("train") == 0
    finally:
        server.runtime.close()


class Liar(FedAvgClient):
    """A client that reports what ``lie`` says about its own data."""

    lie: dict[str, Any] = {}

    def facts(self) -> dict[str, Any]:
        return {**super().facts(), **self.lie}


def _runtime(graph, part, cfg, liar: int, lie: dict[str, Any]) -> LocalRuntime:
    clients = {}
    for d in split_graph(graph, part):
        cls = Liar if d.client_id == liar else FedAvgClient
        clients[d.client_id] = cls(d, cfg, 0)
    clients[liar].lie = lie
    return LocalRuntime(clients, Ledger())


@pytest.mark.parametrize("lie,says", [
    ({"num_features": 5}, "the clients disagree on the feature width (5 at client 1; "),
    ({"num_classes": 9}, "the clients disagree on the class count ("),
    ({"setting": "vertical"}, "the run is horizontal but the clients' shards are "),
])
def test_clients_that_disagree_stop_the_set_up_in_one_line(small, lie, says) -> None:
    graph, part = small
    cfg = Config.from_dict(CFG)
    runtime = _runtime(graph, part, cfg, 1, lie)
    with pytest.raises(ConfigError) as err:
        start_server(runtime, FedAvgServer, cfg, 0, secure_mode="none", secagg_threshold=0,
                     secure_models=False)
    line = str(err.value)
    assert says in line and "\n" not in line and "`fedgl shard`" in line
    assert runtime.client_ids == []   # the set-up closed the runtime


@pytest.mark.parametrize("reply,why", [
    ({"setting": "horizontal", "num_nodes": 3, "num_features": 4}, "num_classes"),
    ({"setting": "horizontal", "num_nodes": -1, "num_features": 4, "num_classes": 2},
     "num_nodes"),
    ({"setting": "horizontal", "num_nodes": 3, "num_features": 4, "num_classes": 2,
      "x": [1.0]}, "unexpected field 'x'"),
    ([1, 2], "not a record"),
])
def test_a_malformed_answer_is_refused_by_name(reply, why) -> None:
    good = {"setting": "horizontal", "num_nodes": 3, "num_features": 4, "num_classes": 2}
    with pytest.raises(ProtocolViolation, match=f"client 2: malformed 'setup.facts' reply.*{why}"):
        agree({0: good, 2: reply}, "horizontal")


def test_vertical_parties_placed_from_different_psi_results_are_refused() -> None:
    """A shard placed by ``fedgl psi place`` says which entities it was aligned on; parties
    whose digests differ (or one placed and one not) would train on misaligned rows."""
    def reply(alignment: str | None) -> dict[str, Any]:
        r = {"setting": "vertical", "num_nodes": 8, "num_features": 2, "num_classes": 3}
        return r if alignment is None else {**r, "alignment": alignment}

    same = agree({0: reply("a" * 64), 1: reply("a" * 64)}, "vertical")
    assert same.num_nodes == 8
    for other in ("b" * 64, None):
        with pytest.raises(ConfigError, match="aligned on different entities.*fedgl psi"):
            agree({0: reply("a" * 64), 1: reply(other)}, "vertical")
    with pytest.raises(ProtocolViolation, match="field 'alignment'"):
        agree({0: reply("a" * 65)}, "vertical")


def test_answers_already_carried_are_used_once_and_not_asked_again() -> None:
    """A runtime whose set-up round trip carried the answers (a Flower ``party.setup``) hands
    them over; the server sends no ``setup.facts`` of its own."""
    sent: list[str] = []
    facts = {k: {"setting": "vertical", "num_nodes": 8, "num_features": 2 + k, "num_classes": 3}
             for k in range(3)}
    runtime = SimpleNamespace(answered={FACTS: facts},
                              call=lambda method, *a, **k: sent.append(method))
    got = learn_facts(runtime, "vertical")
    assert sent == [] and runtime.answered == {}
    assert (got.num_nodes, got.num_classes) == (8, 3) and got.features == {0: 2, 1: 3, 2: 4}
    assert got.stats() == {"clients": 3, "nodes_per_client": [8, 8, 8]}


def test_a_deployed_set_up_reply_brings_the_facts_and_a_malformed_one_stops_the_run() -> None:
    pytest.importorskip("flwr")
    from fedgl.deployment.server_app import setup_clients

    good = {"setting": "horizontal", "num_nodes": 3, "num_features": 4, "num_classes": 2}
    replies: dict[int, Any] = {0: {"ok": True, "dp_releases": [], "facts": good},
                               1: {"ok": True, "dp_releases": ["r1"], "facts": good}}
    runtime = SimpleNamespace(on_client_failure="drop", call=lambda *a, **k: replies)
    cfg = Config.from_dict(CFG)
    assert setup_clients(runtime, cfg, 0, "a1b2", False) == {"1": ["r1"]}
    assert runtime.answered == {FACTS: {0: good, 1: good}}
    assert runtime.on_client_failure == "drop"
    assert learn_facts(runtime, "horizontal").nodes == {0: 3, 1: 3}
    replies[1] = {"ok": True, "dp_releases": []}   # no facts
    with pytest.raises(RunAborted, match="client 1 answered the run set-up with a malformed "
                                         "reply .*'facts'"):
        setup_clients(runtime, cfg, 0, "a1b2", False)


def test_a_vertical_run_learns_its_facts_the_same_way() -> None:
    """GLASU's local run: one ``setup.facts`` per party in phase ``setup``, then its own
    pre-training exchange; the run trains."""
    from fedgl.api import run

    rep = run(algorithm="glasu", dataset="sbm", sbm_nodes=150, clients=3, layers=2, hidden=8,
              rounds=2, eval_every=2, backbone="gcn", batch_size=16, num_neighbors="3",
              label_holders="all", progress=False).repeats[0]
    assert rep.ledger["messages"]["setup"] == {"up": 3, "down": 3}
    assert rep.ledger["bytes"]["setup"]["down"] == 0
    assert [h["round"] for h in rep.history] == [1, 2]


def test_deployed_parties_whose_shards_disagree_are_refused_at_set_up(tmp_path) -> None:
    """Parties built from their own shards and keys as ``fedgl client`` builds them; one shard
    has another feature width. The server learns the facts from the ``party.setup`` replies and
    stops before it builds a model, in one line."""
    pytest.importorskip("flwr")
    import dataclasses

    from fedgl.data.shard_format import write_shard
    from fedgl.deployment.party import HELLO, SETUP, SETUP_PHASE, Party
    from fedgl.deployment.server_app import run_deployed
    from fedgl.federation.codec import Encoded, decode, encode
    from fedgl.privacy.identity import write_keys
    from tests.flower_helpers import InProcessFlower, tiny_shard

    roster = write_keys(tmp_path / "keys", 3)
    cfg = Config.from_dict({**CFG, "hops": 2})
    parties, facts = [], {}
    for k in range(3):
        shard = tiny_shard(k)
        if k == 2:
            shard = dataclasses.replace(shard, x=torch.rand(3, 5))
        manifest = write_shard(shard, tmp_path / f"shard-{k}")
        party = Party(manifest, tmp_path / "keys" / f"client-{k}.key", roster,
                      ClientPolicy(secure_sum="none"))
        for msg_type, payload in ((HELLO, {"challenge": bytes(32)}),
                                  (SETUP, {"config": cfg.to_dict(), "seed": 0,
                                           "run_tag": "t1", "resumed": False})):
            head, reply = party.answer({"op": "message", "phase": SETUP_PHASE, "node_id": 1,
                                        "run_id": 1}, encode(msg_type, payload).to_bytes())
            assert "refused" not in head, head
        facts[k] = decode(Encoded.from_bytes(reply))[1]["facts"]
        parties.append(party)
    runtime = InProcessFlower({p.client_id: p.endpoint.role for p in parties})
    runtime.answered = {FACTS: facts}
    with pytest.raises(ConfigError) as err:
        run_deployed(runtime, cfg, 0, {})
    assert str(err.value).startswith("the clients disagree on the feature width (4 at clients "
                                     "0, 1; 5 at client 2); write every shard from one dataset")
    assert runtime.ledger.messages() == 0   # nothing was sent after the set-up
