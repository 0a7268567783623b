"""What the wire protocol costs: encoding + decoding a message (fedgl.federation.codec) against
the deep copy the in-process runtime made before messages were encoded, and the encoded bytes
against the values the papers' formulas count, for typical messages and for whole runs.

    python benchmarks/bench_protocol.py [--dataset cora] [--rounds 50] [--repeat 20]

Prints one JSON object: per message kind, the seconds of each path and their ratio, values and
wire bytes and their ratio; per run, the ledger's values and wire bytes, wall seconds and peak
RSS (MB).
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch

import fedgl
from fedgl.federation.codec import roundtrip
from fedgl.federation.messages import SparseRows, copy_payload, payload_nbytes


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
    block = (torch.rand(8192, 1433, generator=g) < 0.013).float()
    return {
        "fit (Cora GCN weights)": {"weights": gcn, "local_steps": 3, "round": 1},
        "fit reply": {"weights": gcn, "num_train": 14, "loss": 1.9},
        "stream block, dense 8192x1433": {"sums": block},
        "stream block, sparse 8192x1433": {"sums": SparseRows.from_dense(block)},
        "evaluate reply (counts)": {"correct": [10, 40, 90], "total": [14, 50, 100]},
    }


def bench_messages(repeat: int) -> dict:
    out = {}
    for name, payload in _messages().items():
        copy_s = _best(lambda p=payload: copy_payload(p), repeat)
        wire_s = _best(lambda p=payload: roundtrip("bench.msg", p), repeat)
        values, wire = payload_nbytes(payload), roundtrip("bench.msg", payload)[1]
        out[name] = {"copy_s": copy_s, "encode_decode_s": wire_s,
                     "time_ratio": wire_s / copy_s if copy_s else None,
                     "value_bytes": values, "wire_bytes": wire,
                     "wire_over_values": wire / values if values else None}
    return out


def bench_runs(dataset: str, rounds: int) -> dict:
    out = {}
    for name, cfg in {"fedgcn 2-hop": {"hops": 2}, "fedgcn 2-hop robust": {
            "hops": 2, "secure_sum": "robust"}}.items():
        t0 = time.perf_counter()
        res = fedgl.run(dataset=dataset, clients=10, rounds=rounds, local_steps=3, lr=0.5,
                        seed=0, progress=False, **cfg)
        rep = res.repeats[0]
        led = rep.ledger
        out[name] = {"seconds": time.perf_counter() - t0, "test_acc": rep.final["test_acc"],
                     "value_bytes": led["total_bytes"], "wire_bytes": led["total_wire_bytes"],
                     "wire_over_values": led["total_wire_bytes"] / led["total_bytes"],
                     "messages": sum(v for p in led["messages"].values() for v in p.values())}
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(json.dumps({"messages": bench_messages(args.repeat),
                      "runs": bench_runs(args.dataset, args.rounds)}, indent=2))


if __name__ == "__main__":
    main()
