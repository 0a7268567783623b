"""Cost of signed HE contributions (a client decrypts only a sum it can check), before and after,
side by side in one run: FedGCN 2-hop pre-training under ``--secure-sum he`` (unpacked, and
``--he-pack 2``) and one FedAvg round with ``--encrypt-models``.

    FEDGL_DATA=../shared/data python benchmarks/bench_he_signed.py [--baseline REF]
        [--dataset cora] [--clients 10] [--repeats 3]

"before" is the tree at git ref ``--baseline`` (default ``6cb01de``: the commit before signed
contributions, where the server added the ciphertexts), extracted with ``git archive`` into a
temporary folder; "after" is the tree this script lives in. Every measurement runs in its own
subprocess with one torch thread, so ``peak_rss_mb`` is that measurement's own high-water mark
(the process's, data loading included). Times are the ledger's phase seconds (median over
``--repeats``; in-process clients, so client and server work both count), ``receive_seconds``
the wall time of the step whose work moved (``fedgcn.secure_receive``: the server's addition
before, the receivers' checks and additions after; ``fedavg.fit`` with encrypted models), and
the ``*cpu_seconds`` the process CPU time of the same spans (one thread, so the work itself,
less disturbed by a loaded machine than wall time). Bytes are the ledger's value bytes and wire
bytes (encoded messages). Encrypted models: round 2's ``fedavg.fit`` (round 1 still broadcasts
the plaintext initial model) and the evaluation after it. Prints one JSON document with the
after/before ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "pretrain_he": {"secure_sum": "he"},
    "pretrain_he_pack2": {"secure_sum": "he", "he_pack": 2},
    "round_encrypt_models": {"encrypt_models": True, "hops": 0},
}


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Timed:
    """The server's runtime, timing one message type's calls."""

    def __init__(self, runtime, method: str) -> None:
        self.rt, self.method, self.seconds, self.cpu_seconds = runtime, method, 0.0, 0.0

    def __getattr__(self, name):
        return getattr(self.rt, name)

    @property
    def client_ids(self):
        return self.rt.client_ids

    def call(self, method, args=None, *, phase, clients=None):
        t, c = time.perf_counter(), time.process_time()
        out = self.rt.call(method, args, phase=phase, clients=clients)
        if method == self.method:
            self.seconds += time.perf_counter() - t
            self.cpu_seconds += time.process_time() - c
        return out


def worker(spec: dict) -> dict:
    """One measurement in this process (run with the tree under test first on the path)."""
    import torch

    torch.set_num_threads(1)
    import fedgl
    from fedgl.algorithms.fedgcn import FedGCNClient, FedGCNServer
    from fedgl.algorithms.runner import build_federation
    from fedgl.api import load_graph
    from fedgl.config import Config
    from fedgl.data.shards import make_partition

    cfg = Config.from_dict({"dataset": spec["dataset"], "clients": spec["clients"], "hops": 2,
                            "beta": 1.0, "seed": 0, "progress": False, "oracle_eval": False,
                            "rounds": 2, "eval_every": 2,
                            "data_root": os.environ.get("FEDGL_DATA"), **spec["options"]})
    graph = load_graph(cfg)
    part = make_partition(graph, cfg, cfg.seed)
    rows = []
    for _ in range(spec["repeats"]):
        server = build_federation(graph, part, cfg, cfg.seed, FedGCNClient, FedGCNServer)
        timed = "fedavg.fit" if cfg.encrypt_models else "fedgcn.secure_receive"
        server.runtime = _Timed(server.runtime, timed)
        led = server.runtime.ledger
        cpu = time.process_time()
        server.pretrain()
        if not cfg.encrypt_models:
            rows.append({"seconds": led.seconds("pretrain"),
                         "cpu_seconds": time.process_time() - cpu,
                         "receive_seconds": server.runtime.seconds,
                         "receive_cpu_seconds": server.runtime.cpu_seconds,
                         "bytes_up": led.bytes("pretrain", "up"),
                         "bytes_down": led.bytes("pretrain", "down"),
                         "wire_bytes_down": led.wire_bytes("pretrain", "down"),
                         "messages": led.messages("pretrain")})
            continue
        marks = []
        for _ in server.rounds():
            marks.append((led.seconds("train"), led.bytes("train", "up"),
                          led.bytes("train", "down"), led.wire_bytes("train", "down"),
                          server.runtime.seconds, server.runtime.cpu_seconds))
        (s1, u1, d1, w1, f1, c1), (s2, u2, d2, w2, f2, c2) = marks
        rows.append({"seconds": s2 - s1, "fit_seconds": f2 - f1, "fit_cpu_seconds": c2 - c1,
                     "bytes_up": u2 - u1,
                     "bytes_down": d2 - d1, "wire_bytes_down": w2 - w1,
                     "eval_seconds": led.seconds("eval"), "eval_bytes_down": led.bytes("eval",
                                                                                     "down")})
    out = {k: rows[-1][k] for k in rows[-1]}
    for k in ("seconds", "cpu_seconds", "receive_seconds", "receive_cpu_seconds", "fit_seconds",
              "fit_cpu_seconds", "eval_seconds"):
        if k in out:
            out[k] = statistics.median(r[k] for r in rows)
            out[k + "_all"] = [r[k] for r in rows]
    out["peak_rss_mb"] = _peak_rss_mb()
    out["fedgl"] = str(Path(fedgl.__file__).parent.parent)
    return out


def _run(tree: Path, spec: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker",
                           json.dumps(spec)], env=env, cwd=tree, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise SystemExit(f"measurement {spec} in {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="6cb01de", help="git ref of the 'before' tree")
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    report: dict = {"settings": {"dataset": args.dataset, "clients": args.clients, "hops": 2,
                                 "beta": 1.0, "seed": 0, "repeats": args.repeats,
                                 "baseline": args.baseline, "torch_threads": 1},
                    "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                                "loadavg_start": os.getloadavg()},
                    "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
        for name, options in CASES.items():
            spec = {"dataset": args.dataset, "clients": args.clients, "repeats": args.repeats,
                    "options": options}
            row = {"before": _run(before, spec), "after": _run(ROOT, spec)}
            row["ratio_after_over_before"] = {
                k: row["after"][k] / row["before"][k] for k in row["after"]
                if isinstance(row["after"][k], int | float) and row["before"].get(k)}
            report["cases"][name] = row
    report["machine"]["loadavg_end"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
