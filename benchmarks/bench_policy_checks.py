"""What the client's safety policy and the codec's shape checks cost, side by side in one run.

    python benchmarks/bench_policy_checks.py [--repeat 200]

- decode of typical messages with the exact element count (Python integers, every dimension
  bounded) against the int64 ``np.prod`` it replaced (patched in for the comparison);
- an Endpoint built with the policy-filtered handler table against the class's whole table;
- a deployed party's set-up check (``ClientPolicy.check``) against building the run's Config;
- the wire bytes of the same messages (the checks add none).

Prints one JSON object with seconds (best of ``--repeat``), their ratios and peak RSS (MB).
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np
import torch

from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.config import Config
from fedgl.federation import codec
from fedgl.federation.protocol import enabled_table, handler_table
from fedgl.privacy.policy import ClientPolicy


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _messages() -> dict[str, dict]:
    g = torch.Generator().manual_seed(0)
    gcn = {"convs.0.lin.weight": torch.randn(16, 1433, generator=g),
           "convs.0.bias": torch.randn(16, generator=g),
           "convs.1.lin.weight": torch.randn(7, 16, generator=g),
           "convs.1.bias": torch.randn(7, generator=g)}
    many = {f"layer{i}": torch.randn(4, 4, generator=g) for i in range(256)}
    return {"fit (Cora GCN weights)": {"weights": gcn, "local_steps": 3, "round": 1},
            "256 small tensors": {"weights": many},
            "masked upload (uint64)": {"masked": np.arange(100_000, dtype=np.uint64)}}


def _old_count(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def bench_decode(repeat: int) -> dict:
    out = {}
    for name, payload in _messages().items():
        enc = codec.encode("bench.msg", payload)
        new_s = _best(lambda e=enc: codec.decode(e), repeat)
        exact = codec._count
        codec._count = _old_count
        try:
            old_s = _best(lambda e=enc: codec.decode(e), repeat)
        finally:
            codec._count = exact
        out[name] = {"decode_int64_prod_s": old_s, "decode_exact_s": new_s,
                     "ratio": new_s / old_s, "wire_bytes": enc.nbytes}
    return out


def bench_policy(repeat: int) -> dict:
    cfg = Config.from_dict({"algorithm": "fedgcn", "clients": 3, "hops": 2,
                            "secure_sum": "mask", "secure_models": True, "dp_epsilon": 1.0,
                            "feature_bound": 1.0})
    policy = ClientPolicy(secure_sum="mask", secure_models=True, dp_epsilon=1.0,
                          feature_bound=1.0, algorithms=("fedgcn",))
    tags = policy.message_tags()
    whole_s = _best(lambda: dict(handler_table(FedGCNClient)), repeat)
    filtered_s = _best(lambda: enabled_table(FedGCNClient, tags), repeat)
    config_s = _best(lambda: Config.from_dict(cfg.to_dict()), max(repeat // 10, 5))
    check_s = _best(lambda: policy.check(cfg), repeat)
    return {"endpoint_table_whole_s": whole_s, "endpoint_table_filtered_s": filtered_s,
            "table_ratio": filtered_s / whole_s,
            "setup_config_build_s": config_s, "setup_policy_check_s": check_s,
            "check_over_config": check_s / config_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    out = {"decode": bench_decode(args.repeat), "policy": bench_policy(args.repeat),
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
