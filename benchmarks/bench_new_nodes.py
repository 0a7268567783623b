"""Nodes that arrive after training: the time and bytes of scoring them, beside appendix F.

Three organisations hold Cora's nodes (a seeded random owner each); ``--new`` nodes (none of them
training nodes) are held back from the tables they train FedGCN 2-hop on, then added with their
edges the next day. Each organisation re-ingests its tables (the same secret) and
``fedgl.predict`` scores every node over the updated folders. Reported (one JSON object):

- ``score_seconds`` and ``score_peak_rss_mb``: the whole ``fedgl.predict`` call (set-up over the
  ingest folders, the pre-training exchange, every organisation's forward pass), in a fresh
  process, and the held-back nodes' accuracy; ``restricted`` where the clients kept the
  training run's exchange in their state folder (only the rows that changed are exchanged),
  ``whole`` where they kept nothing (the whole exchange), and whether their predictions agree;
- ``exchange``: the bytes each scoring's exchange sent (the ledger's, up and down) beside the
  training run's pre-training bytes;
- ``appendix_f``: appendix F's values (``Σ_i |c(Ñ_i)| d`` up, ``Σ_k |N(V_k)| d`` down, 2-hop)
  for the whole updated graph and for the rows the new nodes change (every row whose
  neighbourhood holds a new node or a node whose degree changed), and their ratio: what the
  restricted exchange should send, against the whole exchange.

    FEDGL_DATA=../shared/data python benchmarks/bench_new_nodes.py --new 1000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ORGS = ("north", "south", "east")
TRAIN = {"algorithm": "fedgcn", "hops": 2, "rounds": 100, "local_steps": 3, "lr": 0.5,
         "progress": False, "secure_sum": "none", "leakage_report": False}


def changed_rows(edge_index, n: int, new: np.ndarray) -> np.ndarray:
    """Rows whose 2-hop aggregate changes when ``new`` nodes arrive with their edges: the new
    nodes, the nodes whose degree changed (their other ends), and every neighbour of those."""
    src, dst = edge_index.numpy()
    is_new = np.zeros(n, dtype=bool)
    is_new[new] = True
    touched = is_new.copy()
    touched[src[is_new[dst]]] = True   # a new edge changes both ends' degrees
    rows = touched.copy()
    rows[dst[touched[src]]] = True     # Ñ_i holds a touched node
    return np.flatnonzero(rows)


def appendix_f(edge_index, owner: np.ndarray, clients: int, rows: np.ndarray, d: int) -> dict:
    """Appendix F's 2-hop values over ``rows`` only: up ``Σ_{i∈rows} |c(Ñ_i)| d``, down
    ``Σ_k |N(V_k) ∩ rows| d``."""
    import torch

    n = len(owner)
    keep = np.zeros(n, dtype=bool)
    keep[rows] = True
    own = torch.from_numpy(owner.astype(np.int64))
    src, dst = edge_index
    i = torch.cat([torch.arange(n), dst])
    k = torch.cat([own, own[src]])
    sel = torch.from_numpy(keep)[i]
    up = int(torch.unique(i[sel] * clients + k[sel]).numel())
    return {"rows": int(keep.sum()), "values_up": up * d, "values_down": up * d}


def _peak_rss_mb() -> float:
    """This process's own peak RSS (``VmHWM``: unlike ``ru_maxrss``, which Linux carries over
    ``execve`` from the forking parent, it starts anew with the spawned interpreter)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _score(model: str, folders: list[str], state_dir: str, queue) -> None:
    import fedgl

    t0 = time.perf_counter()
    pred = fedgl.predict(model, shards=folders, state_dir=state_dir)
    seconds = time.perf_counter() - t0
    rows = {o.name: (o.ids, o.predicted().tolist()) for o in pred.organisations}
    queue.put({"seconds": seconds, "exchange": pred.exchange["bytes"],
               "peak_rss_mb": _peak_rss_mb(),
               "rows": rows})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--new", type=int, default=1000, help="nodes held back, then added")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="scorings of each kind, alternated")
    args = ap.parse_args()

    import fedgl
    from fedgl.cli import main as fedgl_cli
    from fedgl.comm_analysis import formula_counts
    from tests.test_new_nodes import _write_tables

    graph = fedgl.load_graph(fedgl.as_config(dataset="cora"))
    rng = np.random.default_rng(args.seed)
    owner = rng.integers(0, len(ORGS), size=graph.num_nodes)
    held = rng.choice(np.flatnonzero(~graph.train_mask.numpy()), size=args.new, replace=False)
    keep = np.ones(graph.num_nodes, dtype=bool)
    keep[held] = False
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        assert fedgl_cli(["secret", "--out", str(root / "secret")]) == 0

        def ingest(day: str, mask: np.ndarray) -> list[str]:
            _write_tables(root / day, graph, owner, mask)
            out = []
            for k, org in enumerate(ORGS):
                folder = root / day / org
                assert fedgl_cli(["ingest", "--nodes", str(folder / "nodes.csv"), "--edges",
                                  str(folder / "edges.csv"), "--client-id", str(k),
                                  "--id-column", "node", "--label-column", "label",
                                  "--split-column", "split", "--classes",
                                  *map(str, range(7)), "--name", "cora-orgs", "--secret",
                                  str(root / "secret"), "--out", str(folder / "ingest")]) == 0
                out.append(str(folder / "ingest"))
            return out

        t0 = time.perf_counter()
        trained = fedgl.run_shards(ingest("today", keep), **TRAIN, out=str(root / "run"),
                                   state_dir=str(root / "state"))
        train_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        folders = ingest("tomorrow", np.ones(graph.num_nodes, dtype=bool))
        ingest_seconds = time.perf_counter() - t0
        runs: dict[str, list[dict]] = {"restricted": [], "whole": []}
        # restricted: the clients' state folders hold the training run's exchange (a fresh copy
        # each time: a scoring keeps the newest exchange); whole: nothing kept. Alternated, in
        # fresh processes, ``--repeats`` times each.
        for r in range(args.repeats):
            kept = root / f"state-{r}"
            shutil.copytree(root / "state", kept)
            for name, state in (("restricted", kept), ("whole", root / f"nothing-{r}")):
                queue = mp.get_context("spawn").Queue()
                proc = mp.get_context("spawn").Process(
                    target=_score, args=(str(root / "run" / "model"), folders, str(state),
                                         queue))
                proc.start()
                runs[name].append(queue.get())
                proc.join()
        first = {name: done[0] for name, done in runs.items()}
        same = all(d["rows"] == first["whole"]["rows"] for done in runs.values() for d in done)
        timings = {name: sorted(d["seconds"] for d in done) for name, done in runs.items()}
        runs = first
        scored = runs["restricted"]
    held_ids = {str(i) for i in held}
    hit = sum(int(p) == int(graph.y[int(i)]) for ids, preds in scored["rows"].values()
              for i, p in zip(ids, preds, strict=True) if i in held_ids)
    d = graph.num_features
    full = formula_counts(graph.edge_index, owner, len(ORGS))
    rows = changed_rows(graph.edge_index, graph.num_nodes, held)
    changed = appendix_f(graph.edge_index, owner, len(ORGS), rows, d)
    out = {
        "graph": "cora", "organisations": len(ORGS), "new_nodes": int(args.new),
        "train_seconds": round(train_seconds, 2), "reingest_seconds": round(ingest_seconds, 2),
        "score_seconds_median": {k: round(float(np.median(t)), 2) for k, t in timings.items()},
        "score_seconds_all": {k: [round(x, 2) for x in t] for k, t in timings.items()},
        "score_peak_rss_mb": {k: round(r["peak_rss_mb"], 1) for k, r in runs.items()},
        "new_nodes_accuracy": hit / len(held_ids),
        "restricted_equals_whole_predictions": same,
        "exchange": {"scoring_bytes": {k: r["exchange"]["pretrain"] for k, r in runs.items()},
                     "training_pretrain_bytes": trained.repeats[0].ledger["bytes"]["pretrain"]},
        "appendix_f": {"full": {"rows": graph.num_nodes, "values_up": full["sum_c_N"] * d,
                                "values_down": full["sum_N_Vk"] * d},
                       "changed_rows_only": changed,
                       "changed_over_full": changed["values_up"] / (full["sum_c_N"] * d)},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
