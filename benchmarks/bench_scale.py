"""Large graphs and many clients: accuracy, seconds per round and peak memory, side by side.

    # arxiv-sized synthetic graph, 10 clients: FedGCN 2-hop and 0-hop vs centralised
    python benchmarks/bench_scale.py arxiv --rounds 30
    # cross-device: 10,000 clients, 100 per round (FedAvg = FedGCN 0-hop; or --hops 1)
    python benchmarks/bench_scale.py cross-device --clients 10000 --per-round 100 --rounds 20
    # FedGCN pre-training bytes against the appendix formula (counts only, no exchange)
    python benchmarks/bench_scale.py formula --dataset synthetic:products --clients 20
    # bytes really sent by FedGCN's pre-training (sparse where smaller) vs the dense count
    FEDGL_DATA=../shared/data python benchmarks/bench_scale.py pretrain-bytes --dataset cora
    # products-sized graph: partition once (timed, cached as .npy), then mini-batch runs
    python benchmarks/bench_scale.py formula --dataset synthetic:products --clients 20 \
        --partition metis --save-partition /tmp/scale_parts/metis.npy
    python benchmarks/bench_scale.py products --runs centralized dirichlet:0 metis:0 metis:1 \
        --partition-dir /tmp/scale_parts --rounds 100 --batch-size 1024 --num-neighbors 5,10
    # FedGCN 2-hop on the Ray runtime, 10 actors: peak memory per actor and in total
    python benchmarks/bench_scale.py ray-arxiv --clients 10 --hops 2 --rounds 5 --eval-every 5

Every run is a separate process (so that its peak RSS is its own) and prints its summary as
JSON; the parent prints one JSON object with all runs and the ratios to the centralised run.
Seconds per round are the federation's training time (local steps and aggregation) divided by
the rounds; evaluation and the oracle are reported separately. Every run also reports its
memory by phase (``memory_by_phase``: RSS sampled every second and the phase that raised the
peak, :class:`RssTimeline`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

COMMON = dict(progress=False, threads=1, repeats=1, seed=0)


def one_run(kwargs: dict) -> dict:
    """Run one configuration in this process; a summary of its single repeat."""
    import fedgl
    from fedgl.api import as_config, load_graph

    part_file = kwargs.pop("_partition_file", None)
    cfg = as_config(**kwargs)
    if part_file:
        _use_cached_partition(part_file)
    memory = RssTimeline()
    t0 = time.perf_counter()
    graph = load_graph(cfg)
    load_seconds = time.perf_counter() - t0
    rss_after_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    memory.mark("set-up")
    memory.watch_ledger_phases()

    def alive(repeat: int, t: int, server) -> None:
        memory.mark("driver" if t < cfg.rounds else "after the last round")
        if t % 10 == 0:
            print(f"  round {t} at {time.perf_counter() - started:.0f} s", file=sys.stderr,
                  flush=True)

    result = fedgl.run(cfg, graph=graph, on_round=alive)
    memory.stop()
    rep = result.repeats[0]
    rounds = max(1, rep.final["rounds"])
    out = {
        "config": {k: v for k, v in kwargs.items() if k not in COMMON and k != "progress"},
        "test_acc": rep.final["test_acc"],
        "selected_test_acc": rep.final["selected_test_acc"],
        "oracle_test_acc": rep.final["oracle_test_acc"],
        "load_seconds": round(load_seconds, 2),
        "setup_seconds": round(rep.seconds["setup"], 2),
        "pretrain_seconds": round(rep.seconds["pretrain"], 2),
        "seconds_per_round": round(rep.seconds["train"] / rounds, 3),
        "eval_seconds": round(rep.seconds["eval"], 2),
        "total_seconds": round(rep.seconds["total"], 2),
        "pretrain_bytes": rep.final["pretrain_bytes"],
        "train_bytes": rep.final["train_bytes"],
        "peak_rss_mb_after_load": round(rss_after_load),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    if "fedgcn_pretrain" in rep.extra:
        out["fedgcn_pretrain"] = rep.extra["fedgcn_pretrain"]
    out["memory_by_phase"] = memory.summary()
    return out


class RssTimeline:
    """Resident memory by phase of one run: a thread reads the process's RSS every ``period``
    seconds (``/proc/self/statm``), and every phase change records ``ru_maxrss``, the exact
    peak so far, so the phase that set the run's peak is known exactly (MB = MiB). Phases:
    load, set-up, the ledger's timed phases (pre-training, round 1's training, training,
    evaluation), the driver between them, and what follows the last round (closing the
    parties, the leakage report, the result)."""

    def __init__(self, period: float = 1.0) -> None:
        import threading

        self.page_mb = os.sysconf("SC_PAGE_SIZE") / 2**20
        self.phases: list[dict] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.mark("load")
        self._thread = threading.Thread(target=self._sample, args=(period,), daemon=True)
        self._thread.start()

    def _rss_mb(self) -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page_mb

    def _sample(self, period: float) -> None:
        while not self._done.wait(period):
            rss = self._rss_mb()
            with self._lock:
                cur = self.phases[-1]
                cur["sampled_max_mb"] = max(cur["sampled_max_mb"], rss)

    def mark(self, phase: str) -> None:
        """End the current phase (recording the exact peak so far) and start ``phase``."""
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        with self._lock:
            if self.phases:
                self.phases[-1]["peak_so_far_mb"] = peak
                if self.phases[-1]["name"] == phase:
                    return
            self.phases.append({"name": phase, "sampled_max_mb": self._rss_mb(),
                                "peak_at_start_mb": peak, "peak_so_far_mb": None})

    def watch_ledger_phases(self) -> None:
        """Mark every ledger-timed phase (pre-training, training, evaluation) of this process
        as a phase here; the first training round is a phase of its own (the clients build
        their mini-batch inputs in it)."""
        import contextlib

        from fedgl.federation.ledger import Ledger

        timer, timeline = Ledger.timer, self
        seen: set[str] = set()
        self._restore = (Ledger, timer)

        @contextlib.contextmanager
        def marked(ledger, phase: str):
            name = phase if phase != "train" or "train" in seen else "train (round 1)"
            seen.add(phase)
            timeline.mark(name)
            try:
                with timer(ledger, phase):
                    yield
            finally:
                timeline.mark("driver")

        Ledger.timer = marked

    def stop(self) -> None:
        self.mark("end")
        self._done.set()
        self._thread.join()
        if getattr(self, "_restore", None):
            cls, timer = self._restore
            cls.timer = timer

    def summary(self) -> dict[str, dict]:
        """Per phase name (first appearance order; repeated phases merged): the largest
        sampled RSS and, where the phase raised the process's peak, the peak it raised it
        to (``raised_peak_to_mb``; the run's peak RSS is the largest of these)."""
        out: dict[str, dict] = {}
        for p in self.phases:
            if p["name"] == "end":
                continue
            row = out.setdefault(p["name"], {"sampled_max_mb": 0, "raised_peak_to_mb": None})
            row["sampled_max_mb"] = max(row["sampled_max_mb"], round(p["sampled_max_mb"]))
            end = p["peak_so_far_mb"]
            if end is not None and end > p["peak_at_start_mb"]:
                row["raised_peak_to_mb"] = max(row["raised_peak_to_mb"] or 0, round(end))
        return out


def _use_cached_partition(path: str) -> None:
    """Benchmark shortcut: the federated driver takes the owner array that ``formula
    --save-partition`` computed (and timed) once, instead of recomputing METIS per run."""
    import numpy as np

    import fedgl.algorithms.runner as runner
    from fedgl.data.partition import Partition

    owner = np.load(path)

    def cached(graph, cfg, seed):
        if len(owner) != graph.num_nodes or int(owner.max()) + 1 != cfg.clients:
            raise SystemExit(f"{path} does not fit this graph / client count")
        return Partition(owner.astype(np.int64), cfg.clients)

    runner.make_partition = cached


def spawn(kwargs: dict, stream: bool = False) -> dict:
    """Run one configuration in a fresh process; ``stream``: its progress goes to stderr."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(),
                                                                      os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, __file__, "_one", json.dumps(kwargs)], env=env,
                          stdout=subprocess.PIPE, stderr=None if stream else subprocess.PIPE,
                          text=True, check=False)
    if proc.returncode != 0:
        err = (proc.stderr or "").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        return {"config": kwargs, "error": err}
    return json.loads(proc.stdout)


def ratios(runs: dict, base: str) -> dict:
    ref = runs[base]
    out = {}
    for name, r in runs.items():
        if name == base or "error" in r or "error" in ref:
            continue
        out[name] = {"accuracy_minus_centralized": round(r["test_acc"] - ref["test_acc"], 4),
                     "seconds_per_round_ratio": round(r["seconds_per_round"]
                                                      / max(ref["seconds_per_round"], 1e-9), 2),
                     "peak_rss_ratio": round(r["peak_rss_mb"] / max(ref["peak_rss_mb"], 1), 2)}
    return out


def formula(args: argparse.Namespace) -> dict:
    """FedGCN appendix F counts on the real partition, without running the exchange."""
    import numpy as np
    import torch

    from fedgl.api import as_config, load_graph
    from fedgl.data.shards import make_partition

    cfg = as_config(dataset=args.dataset, clients=args.clients, beta=args.beta,
                    partition=args.partition, **COMMON)
    early = None
    if args.partition == "metis" and args.dataset.startswith("synthetic:"):
        early = _metis_from_cache(cfg)  # before the graph is loaded: METIS alone in memory
    t0 = time.perf_counter()
    graph = load_graph(cfg)
    load = time.perf_counter() - t0
    rss_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"loaded in {load:.1f} s; partitioning ({args.partition})", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    lean = args.partition == "metis" and _sorted_by_destination(graph.edge_index.numpy())
    if early is not None:
        part, part_seconds, rss_part = early
    else:
        part = _lean_metis(graph, cfg) if lean else make_partition(graph, cfg, cfg.seed)
        part_seconds = time.perf_counter() - t0
        rss_part = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"partitioned in {part_seconds:.1f} s", file=sys.stderr, flush=True)
    if args.save_partition:
        os.makedirs(os.path.dirname(os.path.abspath(args.save_partition)), exist_ok=True)
        np.save(args.save_partition, part.owner)
    owner = torch.from_numpy(part.owner)
    src, dst = graph.edge_index
    n, k, d = graph.num_nodes, part.num_clients, graph.num_features
    # Σ_i |c(Ñ_i)|: distinct (node, client) pairs over closed neighbourhoods
    keys = torch.cat([torch.arange(n) * k + owner, dst * k + owner[src]])
    c_sum = int(torch.unique(keys).numel())
    del keys
    # Σ_k |N(V_k)| with V_k included: distinct (client, node) pairs of own and neighbour rows
    nv = int(torch.unique(torch.cat([owner * n + torch.arange(n),
                                     owner[dst] * n + src])).numel())
    f32 = 4
    one_hop = (c_sum * d + n * d) * f32
    two_hop = (c_sum * d + nv * d) * f32
    return {"dataset": args.dataset, "nodes": n, "edges": graph.num_edges, "features": d,
            "clients": k, "partition": cfg.partition, "beta": cfg.beta,
            "load_seconds": round(load, 2), "partition_seconds": round(part_seconds, 2),
            "peak_rss_mb_after_load": round(rss_load),
            "peak_rss_mb_after_partition": round(rss_part),
            "metis_input": ("cached CSR, before the graph is loaded" if early is not None
                            else "edge list as CSR, no copy" if lean else "fedgl.data.partition"),
            "cross_client_edges": part.cross_client_edges(graph.edge_index),
            "sum_c_N_i": c_sum, "sum_N_V_k": nv,
            "formula_values_bytes": {"1hop": one_hop, "2hop": two_hop},
            "formula_vs_full_features": {"1hop": round(one_hop / (n * d * f32), 2),
                                         "2hop": round(two_hop / (n * d * f32), 2)},
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "note": "counts of float32 values only (ids and degrees add 8 bytes per row)",
            "largest_client_rows": int(np.bincount(part.owner).max())}


def _sorted_by_destination(ei) -> bool:
    """Columns ordered by (destination, source), strictly; checked in chunks."""
    import numpy as np

    n, step = ei.shape[1], 1 << 24
    for a in range(0, max(n - 1, 0), step):
        d, s = ei[1, a:min(n, a + step + 1)], ei[0, a:min(n, a + step + 1)]
        if not bool(np.all((d[1:] > d[:-1]) | ((d[1:] == d[:-1]) & (s[1:] > s[:-1])))):
            return False
    return True


def _lean_metis(graph, cfg):
    """``fedgl.data.partition.metis_partition``'s METIS call (same options, same adjacency, so
    the same partition) without its sorted copies of the edge list: the graph's symmetric edge
    list, sorted by (destination, source), already is METIS's CSR (rows = destinations). On
    products the copying version was OOM-killed at 14.8 GB on this 24 GB machine."""
    import numpy as np
    import pymetis

    from fedgl.data.partition import Partition

    ei = graph.edge_index.numpy()
    xadj = np.zeros(graph.num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(ei[1], minlength=graph.num_nodes), out=xadj[1:])
    opts = pymetis.Options(seed=int(cfg.seed) % (2**31 - 1), ufactor=30)  # imbalance 0.03
    result = pymetis.part_graph(cfg.clients, pymetis.CSRAdjacency(xadj, ei[0]), options=opts,
                                recursive=False)
    owner = np.asarray(result.vertex_part, dtype=np.int64)
    if np.bincount(owner, minlength=cfg.clients).min() < cfg.min_client_size:
        raise SystemExit("METIS left a client below min_client_size")
    return Partition(owner, cfg.clients)


def _metis_from_cache(cfg):
    """METIS on the cached CSR of a synthetic graph (rows = destinations, the same adjacency
    as :func:`_lean_metis` gets from the edge list): (partition, seconds, peak RSS MB)."""
    import numpy as np
    import pymetis

    from fedgl.data.partition import Partition
    from fedgl.data.synthetic import load_synthetic_arrays, parse_synthetic

    arrays = load_synthetic_arrays(parse_synthetic(cfg.dataset), cfg.seed)
    xadj, adjncy = arrays["indptr"].astype(np.int64), arrays["indices"]
    del arrays
    print(f"METIS on the cached CSR ({len(adjncy)} entries)", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    opts = pymetis.Options(seed=int(cfg.seed) % (2**31 - 1), ufactor=30)  # imbalance 0.03
    result = pymetis.part_graph(cfg.clients, pymetis.CSRAdjacency(xadj, adjncy), options=opts,
                                recursive=False)
    seconds = time.perf_counter() - t0
    owner = np.asarray(result.vertex_part, dtype=np.int64)
    del result, xadj, adjncy
    print(f"METIS done in {seconds:.1f} s", file=sys.stderr, flush=True)
    return (Partition(owner, cfg.clients), seconds,
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def pretrain_bytes(args: argparse.Namespace) -> dict:
    """FedGCN's pre-training bytes really sent and their dense-equivalent count, per hops."""
    import fedgl

    out = {"dataset": args.dataset, "clients": args.clients, "beta": args.beta}
    for hops in args.hops if args.hops is not None else [1, 2]:
        t0 = time.perf_counter()
        rep = fedgl.run(algorithm="fedgcn", dataset=args.dataset, clients=args.clients,
                        beta=args.beta, hops=hops, rounds=1, **COMMON).repeats[0]
        stats = rep.extra["fedgcn_pretrain"]
        dense = stats["bytes_up_dense_equivalent"] + stats["bytes_down_dense_equivalent"]
        out[f"{hops}hop"] = {"bytes_sent": rep.final["pretrain_bytes"], "dense_equivalent": dense,
                             "ratio": round(dense / max(rep.final["pretrain_bytes"], 1), 1),
                             "pretrain_seconds": round(rep.seconds["pretrain"], 3),
                             "run_seconds": round(time.perf_counter() - t0, 2), **stats}
    return out


def products(args: argparse.Namespace) -> dict:
    """Mini-batch runs on a large graph, each in its own process: ``centralized`` (one party,
    the same batch size, fan-outs and number of sequential steps) and ``<partition>:<hops>``
    (FedGCN, the partition read from ``<partition-dir>/<partition>.npy``)."""
    base = dict(dataset=args.dataset, rounds=args.rounds, lr=args.lr, eval_every=args.eval_every,
                local_steps=args.local_steps, batch_size=args.batch_size, num_neighbors=args.num_neighbors,
                oracle_eval=False, **COMMON)
    fedgcn_only = {"pretrain_block_rows": args.pretrain_block_rows} if args.pretrain_block_rows \
        else {}
    runs: dict[str, dict] = {}
    for spec in args.runs:
        t0 = time.perf_counter()
        if spec == "centralized":
            kwargs = {**base, "algorithm": "centralized"}
        else:
            method, hops = spec.split(":")
            kwargs = {**base, "algorithm": "fedgcn", "hops": int(hops), "clients": args.clients,
                      "partition": method, "beta": args.beta, **fedgcn_only}
            cached = os.path.join(args.partition_dir, f"{method}.npy")
            if os.path.exists(cached):
                kwargs["_partition_file"] = cached
        print(f"[{time.strftime('%H:%M:%S')}] {spec} ...", file=sys.stderr, flush=True)
        runs[spec] = spawn({**kwargs, "progress": True}, stream=True)
        runs[spec]["wall_seconds"] = round(time.perf_counter() - t0, 1)
        print(json.dumps({spec: runs[spec]}), file=sys.stderr, flush=True)
    out = {"runs": runs}
    if "centralized" in runs:
        out["vs_centralized"] = ratios(runs, "centralized")
    return out


def ray_arxiv(args: argparse.Namespace) -> dict:
    """FedGCN on the Ray runtime, one actor per client: every actor's peak RSS (its own
    process: its shard, received sums, model and torch), their total, and the driver's."""
    import fedgl

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    hops = args.hops[0] if args.hops else 2
    t0 = time.perf_counter()
    res = fedgl.run(algorithm="fedgcn", dataset=args.dataset, clients=args.clients, hops=hops,
                    beta=args.beta, rounds=args.rounds, lr=args.lr, eval_every=args.eval_every,
                    runtime="ray", oracle_eval=False, **COMMON)
    rep = res.repeats[0]
    per_actor = {int(k): round(v) for k, v in rep.extra["client_peak_rss_mb"].items()}
    return {"dataset": args.dataset, "clients": args.clients, "hops": hops, "runtime": "ray",
            "rounds": rep.final["rounds"], "test_acc": rep.final["test_acc"],
            "pretrain_seconds": round(rep.seconds["pretrain"], 2),
            "seconds_per_round": round(rep.seconds["train"] / max(1, rep.final["rounds"]), 3),
            "pretrain_bytes": rep.final["pretrain_bytes"],
            "actor_peak_rss_mb": per_actor,
            "actor_peak_rss_mb_max": max(per_actor.values()),
            "actor_peak_rss_mb_total": sum(per_actor.values()),
            "driver_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "wall_seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "_one":
        print(json.dumps(one_run(json.loads(sys.argv[2]))))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["arxiv", "cross-device", "formula", "pretrain-bytes",
                                     "products", "ray-arxiv"])
    ap.add_argument("--dataset", default="synthetic:arxiv")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--per-round", type=int, default=100)
    ap.add_argument("--hops", type=int, nargs="*", default=None)
    ap.add_argument("--beta", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--partition", default="dirichlet")
    ap.add_argument("--save-partition", default="")
    ap.add_argument("--runs", nargs="*", default=["centralized", "dirichlet:0", "metis:0"])
    ap.add_argument("--partition-dir", default="/tmp/scale_parts")
    ap.add_argument("--local-steps", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--num-neighbors", default="5,10",
                    help="per hop, first layer first (the measurements in docs/ used 5 one-hop, "
                         "10 two-hop neighbours, written --fanouts 10,5 in the old order)")
    ap.add_argument("--pretrain-block-rows", type=int, default=0,
                    help="products: FedGCN's streamed exchange block (0: the default)")
    args = ap.parse_args()
    single = {"ray-arxiv": ray_arxiv, "products": products, "formula": formula,
              "pretrain-bytes": pretrain_bytes}
    if args.what in single:
        print(json.dumps(single[args.what](args), indent=1))
        return
    base = dict(dataset=args.dataset, rounds=args.rounds, lr=args.lr, eval_every=args.eval_every,
                beta=args.beta, **COMMON)
    runs: dict[str, dict] = {}
    if args.what == "arxiv":
        runs["centralized"] = spawn({**base, "algorithm": "centralized"})
        for hops in args.hops if args.hops is not None else [0, 2]:
            runs[f"fedgcn_{hops}hop"] = spawn({**base, "algorithm": "fedgcn", "hops": hops,
                                               "clients": args.clients})
        print(json.dumps({"runs": runs, "vs_centralized": ratios(runs, "centralized")}, indent=1))
        return
    for hops in args.hops if args.hops is not None else [0]:
        runs[f"fedgcn_{hops}hop"] = spawn({**base, "algorithm": "fedgcn", "hops": hops,
                                           "clients": args.clients, "partition": "iid",
                                           "min_client_size": 1,
                                           "clients_per_round": args.per_round})
    print(json.dumps({"runs": runs}, indent=1))


if __name__ == "__main__":
    main()
