"""A GLASU party lost mid-run (``on_client_failure: drop`` on a runtime that drops clients):
the survivors train on exactly what they would see if the lost party's block were zero, nothing
is sent to it again, and losing the only label holder stops the run in one line."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fedgl.algorithms.glasu.client import GlasuClient
from fedgl.algorithms.glasu.server import GlasuServer
from fedgl.data.vertical import vertical_split
from fedgl.errors import RunAborted
from fedgl.federation.runtime import LocalRuntime
from tests.glasu_helpers import glasu_params
from tests.helpers import random_graph


class LosingRuntime(LocalRuntime):
    """In-process clients, one of which is lost (never answers again) from the ``at``-th call
    of ``method`` on, as a runtime with ``on_client_failure: drop`` records it."""

    def __init__(self, clients: dict[int, Any], lost: int, method: str, at: int) -> None:
        super().__init__(clients, batch=False)
        self.lost, self.method, self.at = lost, method, at
        self.seen = 0
        self.gone = False
        self.after: list[tuple[str, list[int]]] = []   # (message type, targets) once it is lost

    @property
    def client_ids(self) -> list[int]:
        return [k for k in super().client_ids if not (self.gone and k == self.lost)]

    def call(self, method: str, args: Any = None, *, phase: str,
             clients: list[int] | None = None) -> dict[int, Any]:
        if method == self.method:
            self.seen += 1
            if self.seen == self.at and not self.gone:
                self.gone = True
                self.events.append({"client": self.lost, "method": method, "action": "dropped"})
        targets = [k for k in (self.client_ids if clients is None else clients)
                   if not (self.gone and k == self.lost)]
        if self.gone:
            self.after.append((method, targets))
        return super().call(method, args, phase=phase, clients=targets)


def _federation(params, lost: int | None = None, at: int = 0) -> GlasuServer:
    graph = random_graph(nodes=80, seed=3)
    parts = vertical_split(graph, params.clients, labels=params.label_holders, seed=0)
    clients = {d.client_id: GlasuClient(d, params, 0) for d in parts}
    runtime = LocalRuntime(clients, batch=False) if lost is None else \
        LosingRuntime(clients, lost, "glasu.sample", at)
    server = GlasuServer(runtime, params, 0)
    server.setup()
    return server


def _silence(client: GlasuClient) -> None:
    """The lost party's stand-in: its model outputs zeros and never learns."""
    with torch.no_grad():
        for w in client.model.parameters():
            w.zero_()
    for group in client.opt.param_groups:
        group["lr"] = 0.0


#: one aggregation, at the last layer (K = 1): the batch's node sets need no union of the
#: parties' samples, so the lost party changes nothing but its own block
CASES = {"mean, labels everywhere": dict(aggregate="mean", label_holders="all", lost=2),
         "concat, labels at one client": dict(aggregate="concat", label_holders="one", lost=1)}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_survivors_train_as_with_a_silent_party(case: dict) -> None:
    """Reference: the same federation where, from round 3 on, the lost party answers with zeros
    and does not learn. Losing it at round 3's first message instead gives the survivors
    bit-identical models after 5 rounds, and sends it nothing from then on."""
    graph = random_graph(nodes=80, seed=3)
    params = glasu_params(graph, clients=3, layers=2, agg="1", stale_steps=2,
                          aggregate=case["aggregate"], label_holders=case["label_holders"])
    lost = case["lost"]
    dropped = _federation(params, lost, at=3)
    reference = _federation(params)
    for t in range(1, 6):
        if t == 3:
            _silence(reference.runtime.local_client(lost))
        dropped.train_round()
        reference.train_round()
    assert dropped.runtime.gone and dropped.runtime.events[0]["client"] == lost
    for m in (m for m in range(3) if m != lost):
        ours = dropped.runtime.local_client(m).model.state_dict()
        theirs = reference.runtime.local_client(m).model.state_dict()
        assert ours.keys() == theirs.keys()
        for key in ours:
            assert torch.equal(ours[key], theirs[key]), (m, key)
    assert dropped.runtime.after and all(lost not in targets for _, targets in
                                         dropped.runtime.after)
    # evaluation goes on with the label holders still in the run
    scores = dropped.evaluate()
    assert lost not in {int(m) for m in scores["client_test_acc"]}
    assert 0.0 <= scores["test_acc"] <= 1.0


def test_concat_aggregate_gives_a_lost_party_a_zero_block() -> None:
    graph = random_graph(nodes=20, seed=1)
    params = glasu_params(graph, clients=3, hidden=7, aggregate="concat")
    server = GlasuServer(LocalRuntime({}), params, 0)
    outs = {m: torch.full((4, params.share(m)[1] - params.share(m)[0]), float(m + 1))
            for m in range(3)}
    full = server.aggregate(outs)
    without = server.aggregate({m: outs[m] for m in (0, 2)})
    a, b = params.share(1)
    assert without.shape == full.shape == (4, 7)
    assert torch.equal(without[:, a:b], torch.zeros(4, b - a))
    assert torch.equal(torch.cat([without[:, :a], without[:, b:]], 1),
                       torch.cat([full[:, :a], full[:, b:]], 1))
    mean = GlasuServer(LocalRuntime({}), glasu_params(graph, clients=3, hidden=7), 0)
    same = {m: torch.full((4, 7), float(m + 1)) for m in range(3)}
    assert torch.equal(mean.aggregate({0: same[0], 2: same[2]}),
                       mean.aggregate({0: same[0], 1: torch.zeros(4, 7), 2: same[2]}))


def test_losing_the_only_label_holder_stops_the_run_in_one_line() -> None:
    graph = random_graph(nodes=80, seed=3)
    params = glasu_params(graph, clients=3, layers=2, agg="1", aggregate="concat",
                          label_holders="one")
    server = _federation(params, lost=0, at=2)
    server.train_round()
    with pytest.raises(RunAborted) as err:
        server.train_round()
    line = str(err.value)
    assert "\n" not in line and "label holder (client 0) has left the run" in line
