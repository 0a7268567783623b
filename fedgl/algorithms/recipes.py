"""Each paper's training recipe: the defaults of common keys its algorithms declare in their
specs (``AlgorithmSpec.defaults``), so that ``fedgl run --algorithm X --dataset cora`` with
nothing else trains X as its paper does. A baseline takes the recipe of the paper that compares
it. A value the user gives (flag, YAML, API) always wins. Plain data: no algorithm code here.

Where a paper leaves a value open, the recipe takes the setting that reproduced its tables in
this project (``docs/reproduction-*.md``, ``benchmarks/reproduce_*.py``); docs/decisions.md
lists each such choice.
"""

from __future__ import annotations

from typing import Any

#: FedGCN (Yao et al., appendix E.2), also for the baselines it compares with (centralised GCN,
#: BNS-GCN, Distributed GCN, FedSage+): 2-layer GCN, 16 hidden, dropout 0.5, SGD lr 0.5, weight
#: decay 5e-4, T = 300 rounds of E = 3 local steps, 10 clients, Dirichlet label split β = 1
FEDGCN_PAPER: dict[str, Any] = {
    "clients": 10, "partition": "dirichlet", "beta": 1.0, "model": "gcn", "layers": 2,
    "hidden": 16, "dropout": 0.5, "lr": 0.5, "weight_decay": 5e-4, "rounds": 300,
    "local_steps": 3}

#: FedGAT (Ambekar et al.) and its baselines DistGAT and centralised GAT: 2 layers of 8 heads x 8
#: units (``heads``/``gat_hidden`` are GAT options), no dropout, SGD lr 0.5, weight decay 5e-4,
#: T = 150 rounds of E = 3 local steps, 10 clients, Dirichlet β = 1 (docs/reproduction-fedgat.md)
FEDGAT_PAPER: dict[str, Any] = {
    "clients": 10, "partition": "dirichlet", "beta": 1.0, "layers": 2, "dropout": 0.0,
    "lr": 0.5, "weight_decay": 5e-4, "rounds": 150, "local_steps": 3}

#: Swift-FedGNN (§4.2, appendix) and the baselines it compares with (FedGNN-G, local-only, LLCG,
#: FedGNN-PNS): 10 clients on a METIS partition, 2-layer GraphSAGE with 256 hidden, no dropout,
#: batch 256 per client, fan-outs [15, 10] in DGL's order (10 one-hop, 15 two-hop neighbours:
#: ``num_neighbors`` 10,15 first layer first), Adam at the server with lr 1e-3 (the paper's
#: arxiv/Reddit value) and weight decay 5e-4, row-normalised features, T = 200 iterations
#: evaluated every 10 (docs/reproduction-swift.md)
SWIFT_PAPER: dict[str, Any] = {
    "clients": 10, "partition": "metis", "model": "sage", "layers": 2, "hidden": 256,
    "dropout": 0.0, "batch_size": 256, "num_neighbors": "10,15", "lr": 1e-3,
    "weight_decay": 5e-4, "rounds": 200, "normalize_features": True, "eval_every": 10}

#: GLASU (appendix; docs/reproduction-glasu.md, Table 1): M = 3 clients, GCNII with L = 4
#: layers of 64 hidden, dropout 0.5, batch 16, 3 neighbours per node at every layer, Adam
#: (``glasu_optimizer``, a GLASU option) at lr 0.01 with weight decay 5e-4, 800 model updates:
#: GLASU (Q = 4 stale updates per round) runs T = 200 rounds, evaluated every 5
GLASU_PAPER: dict[str, Any] = {
    "clients": 3, "layers": 4, "hidden": 64, "dropout": 0.5, "batch_size": 16,
    "num_neighbors": "3", "lr": 0.01, "weight_decay": 5e-4, "rounds": 200, "eval_every": 5}
#: GLASU's baselines take one exact model update per round: the same 800 updates are T = 800
#: rounds, evaluated every 20 (the same cadence in model updates)
GLASU_BASELINES: dict[str, Any] = {**GLASU_PAPER, "rounds": 800, "eval_every": 20}

#: what ``rounds`` counts, per family (``fedgl run --algorithm X --help``)
ROUNDS_HELP: dict[str, str] = {
    "fedavg": "communication rounds T; each is E = --local-steps local SGD steps on every client, "
              "then FedAvg (centralised: T x E steps)",
    "fedsgd": "iterations T: each is one synchronous FedSGD step (every client uploads one "
              "mini-batch gradient, the server averages and steps); not FedAvg rounds, and there "
              "are no local steps",
    "glasu": "communication rounds T; each holds Q = --stale-steps local model updates on one "
             "sampled batch (T x Q updates in all)",
    "glasu_baseline": "rounds T, one exact model update each (no stale updates)",
}

#: why an algorithm stays simulation-only (``AlgorithmSpec.simulation_only``; ``fedgl server``
#: prints it): a one-party reference ...
ONE_PARTY = "one party holds the whole graph (a reference, not a federation)"
#: ... and the methods for one organisation's trusted cluster
CLUSTER_ONLY = ("its clients exchange raw boundary features and hidden states through the server "
                "at every local step and layer: a method for one organisation's trusted cluster "
                "(Ray), and a Flower round trip per layer and step")
