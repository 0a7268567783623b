"""RayRuntime vs LocalRuntime: per-round overhead, and scaling of round time and driver memory.

Part 1 runs FedGCN 2-hop on Cora with 10 clients in both runtimes, side by side, and reports the
training-phase seconds per round (start-up excluded: pre-training and actor start happen before
the first round). Part 2 runs FedGCN 2-hop on SBM graphs with 2..50 clients on Ray and reports
round time, start-up time and the driver's resident memory. Prints JSON.

    FEDGL_DATA=../shared/data python benchmarks/bench_ray_runtime.py --rounds 30
"""

from __future__ import annotations

import argparse
import json
import os
import time


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def measure(runtime: str, rounds: int, **cfg) -> dict:
    import fedgl

    rss = []
    t0 = time.perf_counter()
    res = fedgl.run(runtime=runtime, rounds=rounds, progress=False, oracle_eval=False,
                    on_round=lambda r, t, s: rss.append(_rss_mb()), **cfg)
    wall = time.perf_counter() - t0
    rep = res.repeats[0]
    train = rep.seconds["train"]
    return {"runtime": runtime, "clients": cfg["clients"], "rounds": rounds,
            "train_seconds_per_round": train / rounds,
            "eval_seconds_per_round": rep.seconds["eval"] / rounds,
            "pretrain_seconds": rep.seconds["pretrain"],
            "startup_seconds": wall - rep.seconds["total"] + rep.seconds["setup"],
            "wall_seconds": wall, "driver_rss_mb": max(rss) if rss else None,
            "test_acc": rep.final["test_acc"]}


def transport_only(clients: int, rounds: int, payload_kb: int = 92) -> dict:
    """Ray's own cost per round, without client compute: broadcast a model-sized payload to
    ``clients`` echo actors and collect a model-sized reply from each (as one FedAvg round)."""
    import numpy as np
    import ray

    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)

    class Echo:
        def call(self, payload):
            return {"weights": payload["weights"].copy()}

    actors = [ray.remote(Echo).options(num_cpus=0.01).remote() for _ in range(clients)]
    weights = np.zeros(payload_kb * 256, dtype=np.float32)
    ray.get([a.call.remote({"weights": weights}) for a in actors])  # warm up
    t0 = time.perf_counter()
    for _ in range(rounds):
        ref = ray.put({"weights": weights})
        ray.get([a.call.remote(ref) for a in actors])
    per_round = (time.perf_counter() - t0) / rounds
    ray.shutdown()
    return {"clients": clients, "payload_kb": payload_kb, "ms_per_round": 1000 * per_round}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--clients", type=int, nargs="+", default=[2, 5, 10, 20, 50])
    parser.add_argument("--skip-cora", action="store_true")
    parser.add_argument("--skip-scaling", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import torch

    out: dict = {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    if not args.skip_cora:
        cora = {"dataset": "cora", "clients": 10, "hops": 2, "beta": 10000.0}
        local = measure("local", args.rounds, **cora)
        ray_ = measure("ray", args.rounds, **cora)
        out["cora_10_clients"] = {
            "local": local, "ray": ray_,
            "ray_overhead_ms_per_round": 1000 * (ray_["train_seconds_per_round"]
                                                 + ray_["eval_seconds_per_round"]
                                                 - local["train_seconds_per_round"]
                                                 - local["eval_seconds_per_round"]),
            "same_accuracy": abs(local["test_acc"] - ray_["test_acc"]) < 1e-6}
    out["transport_only_10_clients"] = transport_only(10, args.rounds)
    if not args.skip_scaling:
        out["sbm_scaling"] = [measure("ray", args.rounds, dataset="sbm", clients=k, hops=2,
                                      min_client_size=10) for k in args.clients]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
