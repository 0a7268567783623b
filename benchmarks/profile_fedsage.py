"""FedSage+ generator training: seconds and peak RSS per generator epoch, and bytes per step.

Builds the federation (the real protocol, every message through the runtime and its ledger),
then runs the generator epochs one at a time, resetting the process's peak RSS (Linux
``/proc/self/clear_refs``) before each, and prints JSON: per epoch the wall seconds, the peak
resident set size reached in that epoch, the pre-training bytes it sent and the mean losses.

    python benchmarks/profile_fedsage.py --dataset synthetic:16934,116624,128,40 --epochs 2 \
        --set gen_batch_size=0 gen_hidden=256 cross_clients=1
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import numpy as np
import torch


def _peak_mb() -> float:
    """The peak RSS since the last reset (VmHWM), else the process's lifetime peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def profile(setting: dict, epochs: int, seed: int) -> dict:
    from fedgl.algorithms.fedsage_plus.client import FedSagePlusClient
    from fedgl.algorithms.fedsage_plus.server import FedSagePlusServer
    from fedgl.algorithms.runner import build_federation
    from fedgl.api import as_config, load_graph
    from fedgl.data.shards import make_partition

    cfg = as_config(algorithm="fedsage-plus", progress=False, seed=seed, gen_epochs=epochs,
                    **setting)
    t0 = time.perf_counter()
    graph = load_graph(cfg)
    part = make_partition(graph, cfg, seed)
    server = build_federation(graph, part, cfg, seed, FedSagePlusClient, FedSagePlusServer)
    setup_s = time.perf_counter() - t0
    setup_peak = _peak_mb()
    del graph
    led = server.runtime.ledger
    per_epoch = []
    server.generator_log = []
    batches = max(r["batches"] for r in server.runtime.call("gen_setup", phase="pretrain").values())
    rng = np.random.default_rng(cfg.seed + 17)
    for epoch in range(epochs):
        reset = _reset_peak()
        before = led.bytes("pretrain")
        t = time.perf_counter()
        for batch in range(batches):
            server.generator_step(epoch, batch, rng)
        log = [e for e in server.generator_log if e["epoch"] == epoch]
        per_epoch.append({"epoch": epoch, "seconds": round(time.perf_counter() - t, 2),
                          "peak_rss_mb": round(_peak_mb(), 1), "peak_reset": reset,
                          "steps": batches,
                          "pretrain_mb": round((led.bytes("pretrain") - before) / 1e6, 2),
                          "loss": round(float(np.mean([e["loss"] for e in log])), 4),
                          "cross_loss": round(float(np.mean([e["cross_loss"] for e in log])), 4)})
        print(json.dumps(per_epoch[-1]), file=sys.stderr, flush=True)
    _reset_peak()
    t = time.perf_counter()
    mended = server.runtime.call("mend", phase="pretrain")
    mend = {"seconds": round(time.perf_counter() - t, 2), "peak_rss_mb": round(_peak_mb(), 1),
            "generated": int(sum(v["generated"] for v in mended.values()))}
    server.runtime.close()
    return {"setting": setting, "seed": seed, "setup_seconds": round(setup_s, 1),
            "setup_peak_rss_mb": round(setup_peak, 1), "epochs": per_epoch, "mend": mend,
            "lifetime_peak_rss_mb": round(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic:16934,116624,128,40")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="FedSage+ or common config keys (e.g. gen_batch_size=0)")
    args = parser.parse_args(argv)
    setting = {"dataset": args.dataset, "clients": args.clients, "beta": args.beta,
               "threads": args.threads}
    for item in args.set:
        key, value = item.split("=", 1)
        setting[key] = _value(value)
    torch.set_num_threads(args.threads)
    print(json.dumps(profile(setting, args.epochs, args.seed), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
