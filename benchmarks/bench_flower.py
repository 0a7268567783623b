"""The Flower deployment against the local runtime: wall time of a FedGCN run on Cora, and the
bytes per round the deployment carried (Flower's serialised messages) beside the ledger's
(fedgl's encoded messages and their payload values), with the deployed/local ratio of the wall
times, the peak RSS of every process and the machine's load average. Prints one JSON object.

    FEDGL_DATA=../shared/data python benchmarks/bench_flower.py --clients 3 --rounds 5
    FEDGL_DATA=../shared/data python benchmarks/bench_flower.py --rounds 5 --supernode flower  # before
    FEDGL_DATA=../shared/data python benchmarks/bench_flower.py --algorithm swift-fedgnn --rounds 6
    FEDGL_DATA=../shared/data python benchmarks/bench_flower.py --algorithm glasu --rounds 4

``--algorithm``: FedGCN (``--hops``, ``--secure-sum``), Swift-FedGNN (its mini-batch steps and
every ``period``-th cross-client step; shards with its recipe, METIS and normalised features)
or GLASU (vertical shards: each client's feature columns and edge set), each with the settings
of its deployed equality test.

Needs ``fedgl[flower]``. Everything runs on 127.0.0.1: one SuperLink and one ``fedgl client``
process per client (party + SuperNode). Peak RSS: the local run's process, the deployed
ServerApp's process (from its result) and every client process (VmHWM)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def vm_hwm_mb(pid: int) -> float | None:
    """Peak resident memory of a live process (Linux /proc), MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of a live process and every process it started."""
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = p.cpu_times()
            total += t.user + t.system
    return total


#: each algorithm's settings beside dataset, clients and rounds (its deployed equality test's)
SETTINGS: dict[str, dict] = {
    "fedgcn": {},
    "swift-fedgnn": {"eval_every": 3, "period": 3, "cross_clients": 2, "oracle_eval": False},
    "glasu": {"layers": 2, "hidden": 16, "agg_layers": "2", "stale_steps": 2, "eval_every": 2},
}


def main() -> None:
    from fedgl.api import run
    from fedgl.cli import main as fedgl_main
    from fedgl.deployment.loopback import Loopback
    from fedgl.privacy.identity import write_keys

    ap = argparse.ArgumentParser()
    ap.add_argument("--algorithm", choices=tuple(SETTINGS), default="fedgcn")
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--hops", type=int, default=2)
    ap.add_argument("--secure-sum", default="none")
    ap.add_argument("--supernode", choices=("relay", "runner", "flower"), default="relay",
                    help="the clients' SuperNode layout: relay (fedgl client's), runner (the "
                         "paced SuperNode beside the relay runner), flower (Flower's own beside "
                         "a runner polling every 0.1 s, the layout before)")
    ap.add_argument("--logs", default=None, metavar="DIR",
                    help="copy the SuperLink's and clients' logs here (with FLWR_LOG_LEVEL=DEBUG "
                         "set, Flower's lines carry times)")
    args = ap.parse_args()
    keys = {"algorithm": args.algorithm, "dataset": "cora", "clients": args.clients,
            "rounds": args.rounds, **SETTINGS[args.algorithm], "progress": False,
            "batch_clients": False}
    if args.algorithm == "fedgcn":
        keys.update(hops=args.hops, secure_sum=args.secure_sum, oracle_eval=False)
    elif args.secure_sum != "none":
        raise SystemExit("--secure-sum is FedGCN's; drop it or use --algorithm fedgcn")

    load_start = os.getloadavg()
    t0 = time.perf_counter()
    local = run(**keys).repeats[0]
    local_wall = time.perf_counter() - t0
    local_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    with tempfile.TemporaryDirectory(prefix="bench-flower-") as tmp:
        root = Path(tmp)
        write_keys(root / "keys", args.clients)
        (root / "run.yaml").write_text(json.dumps(keys))   # its shards' recipe (Swift's)
        with contextlib.redirect_stdout(sys.stderr):   # stdout is the JSON only
            assert fedgl_main(["shard", str(root / "run.yaml"), "--out",
                               str(root / "shards")]) == 0
        client_args = ["--secure-sum", args.secure_sum] if args.algorithm == "fedgcn" else []
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in keys.items()
                 if not isinstance(v, bool)]
        flags += [f"--{'' if v else 'no-'}{k.replace('_', '-')}" for k, v in keys.items()
                  if isinstance(v, bool)]
        os.environ["FEDGL_SUPERNODE"] = args.supernode   # read by each `fedgl client`
        with Loopback(root / "fed", root / "shards", root / "keys", args.clients,
                      client_args) as fed:
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "fedgl.cli", "server", "--superlink",
                                   fed.address, "--roster", str(root / "keys" / "roster.json"),
                                   "--insecure", "--out", str(root / "out"), *flags],
                                  capture_output=True, text=True, check=False)
            deployed_wall = time.perf_counter() - t0
            client_rss = {name: vm_hwm_mb(p.pid) for name, p in fed.procs.items()
                          if name.startswith("client-")}
            client_cpu = {name: cpu_seconds(p.pid) for name, p in fed.procs.items()
                          if name.startswith("client-")}
        if args.logs:
            import shutil

            Path(args.logs).mkdir(parents=True, exist_ok=True)
            for log in (root / "fed").glob("*.log"):
                shutil.copy(log, args.logs)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-2000:])
        rep = json.loads((root / "out" / "result.json").read_text())["repeats"][0]

    flower = rep["extra"]["flower"]
    answered = sum(m["down"] for m in rep["ledger"]["messages"].values()) / args.clients
    run_total = rep["seconds"]["total"]
    columns = ("round", "train_loss", "train_acc", "val_acc", "test_acc", "val_loss")
    out = {
        "setting": keys,
        "same_history": [{c: h.get(c) for c in columns} for h in rep["history"]] ==
                        [{c: h.get(c) for c in columns} for h in local.history],
        # the local run's phases (a deployment adds its set-up messages, phase "setup")
        **{f"same_ledger_{key}": {p: rep["ledger"][key][p] for p in local.ledger[key]} ==
           local.ledger[key] for key in ("bytes", "wire_bytes", "messages")},
        "final_test_acc": {"local": local.final["test_acc"], "flower": rep["final"]["test_acc"]},
        "wall_seconds": {"local_run": round(local_wall, 2),
                         "flower_server_command": round(deployed_wall, 2),
                         "flower_run_total": round(run_total, 2),
                         **{f"flower_{p}": round(rep["seconds"][p], 2)
                            for p in ("pretrain", "train", "eval") if p in rep["seconds"]}},
        # deployed / local: inside the ServerApp, and the whole `fedgl server` command
        "ratio_to_local": {"flower_run_total": round(run_total / local_wall, 1),
                           "flower_server_command": round(deployed_wall / local_wall, 1)},
        "pretrain_bytes": {"ledger_values": sum(rep["ledger"]["bytes"]["pretrain"].values()),
                           "ledger_wire": sum(rep["ledger"]["wire_bytes"]["pretrain"].values()),
                           "flower": sum(flower.get("bytes", {}).get("pretrain", {}).values())},
        "per_round": flower.get("per_round"),
        "flower_calls": flower.get("calls"),
        "peak_rss_mb": {"local_process": round(local_rss, 1),
                        "flower_serverapp": round(rep["peak_rss_mb"], 1),
                        "flower_clients": {k: (round(v, 1) if v else None)
                                           for k, v in client_rss.items()}},
        "supernode": args.supernode,
        # CPU seconds of each client's processes (party, SuperNode, relay runner) from its
        # start (imports, shard loading) to the run's end, and per message it answered
        "client_cpu_seconds": {k: round(v, 2) for k, v in client_cpu.items()},
        "messages_per_client": answered,
        "client_cpu_seconds_per_message": {k: round(v / answered, 4)
                                           for k, v in client_cpu.items()},
        "load_average": {"start": [round(x, 2) for x in load_start],
                         "end": [round(x, 2) for x in os.getloadavg()]},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
