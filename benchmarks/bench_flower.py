"""The Flower deployment against the local runtime: wall time of a FedGCN run on Cora, and the
bytes per round the deployment carried (Flower's serialised messages) beside the ledger's
(fedgl's encoded messages and their payload values), with the deployed/local ratio of the wall
times, the peak RSS of every process and the machine's load average. Prints one JSON object.

    FEDGL_DATA=../shared/data python benchmarks/bench_flower.py --clients 3 --rounds 5
    FEDGL_DATA=../shared/data python benchmarks/bench_flower.py --rounds 5 --supernode flower  # before
    FEDGL_DATA=../shared/data python benchmarks/bench_flower.py --algorithm swift-fedgnn --rounds 6
    FEDGL_DATA=../shared/data python benchmarks/bench_flower.py --algorithm glasu --rounds 4
    FEDGL_DATA=../shared/data python benchmarks/bench_flower.py --policy --rounds 5   # safety

``--policy``: FedGCN under the documented safety policy (the clients' default: the robust secure
sum with secure models, the edge check, two contributors, a feature bound; the run adds DP
with ε = 1): the local plaintext run is timed too, so the deployed time splits into the
computation (local plaintext), what the policy adds in one process (its cryptography and its
extra protocol steps: local policy run minus local plaintext) and what the deployment adds
(Flower's round trips: deployed minus local policy run), with the messages per client and
phase that carry it.

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

#: the documented safety policy's run keys (what the clients' default requires, and DP)
POLICY = {"secure_sum": "robust", "secure_models": True, "adjacency_check": "edge",
          "min_contributors": 2, "feature_bound": 1.0, "dp_epsilon": 1.0, "dp_budget": 4.0}


def vm_hwm_mb(pid: int) -> float | None:
    """Peak resident memory of a live process (Linux /proc), MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


#: a process's role in a loopback run, by what its command line holds (the first that matches)
ROLES = (("flwr-serverapp", "serverapp"), ("flower-superexec", "superexec"),
         ("flower-superlink", "superlink"), ("flwr run", "flwr_run"),
         ("fedgl.cli server", "fedgl_server"), ("flower.supernode", "client_supernodes"),
         ("flower-supernode", "client_supernodes"), ("fedgl.cli client", "client_parties"))


def role_of(cmdline: list[str]) -> str:
    line = " ".join(cmdline)
    return next((role for key, role in ROLES if key in line), "other")


class CpuWatch:
    """CPU seconds (user + system) of process trees, sampled every ``every`` s on a thread and
    kept per process at its last sample, so that processes which exit before the end (the
    ServerApp) are counted too (to within one sample). ``by_role()``: seconds per role, a
    process's role read from its command line when first seen (an exiting process's command
    line reads empty)."""

    def __init__(self, every: float = 0.25) -> None:
        import threading

        self.roots: list[int] = []
        self.last: dict[tuple[int, float], tuple[str, float]] = {}
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        import psutil

        for root in list(self.roots):
            with contextlib.suppress(psutil.NoSuchProcess):
                top = psutil.Process(root)
                for p in [top, *top.children(recursive=True)]:
                    with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                        t = p.cpu_times()
                        key = (p.pid, p.create_time())
                        role = self.last[key][0] if key in self.last else role_of(p.cmdline())
                        self.last[key] = (role, t.user + t.system)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.sample()
        self._stop.set()
        self._thread.join()

    def by_role(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for role, seconds in self.last.values():
            out[role] = out.get(role, 0.0) + seconds
        return {k: round(v, 2) for k, v in sorted(out.items())}


def count_requests(folder: Path) -> dict[str, dict[str, int]]:
    """The request counts of benchmarks/flower_requests, summed by role and method."""
    out: dict[str, dict[str, int]] = {}
    for path in folder.glob("*.json"):
        got = json.loads(path.read_text())
        role = role_of(got["argv"])
        for method, n in got["requests"].items():
            mine = out.setdefault(role, {})
            name = method.rsplit("/", 1)[-1]
            mine[name] = mine.get(name, 0) + n
    return {role: dict(sorted(m.items(), key=lambda kv: -kv[1])) for role, m in sorted(out.items())}


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
    ap.add_argument("--policy", action="store_true",
                    help="FedGCN under the documented safety policy (see the docstring)")
    ap.add_argument("--supernode", choices=("relay", "runner", "flower"), default="relay",
                    help="the clients' SuperNode layout: relay (fedgl client's), runner (the "
                         "paced SuperNode beside the relay runner), flower (Flower's own beside "
                         "a runner polling every 0.1 s, the layout before)")
    ap.add_argument("--count-requests", action="store_true",
                    help="count every Flower process's HTTP requests by method "
                         "(benchmarks/flower_requests; costs a little CPU itself)")
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
    plain_wall = None
    if args.policy:
        if args.algorithm != "fedgcn":
            raise SystemExit("--policy is FedGCN's (the one algorithm with a secure sum)")
        t0 = time.perf_counter()
        run(**keys)   # the computation alone, plaintext, in one process
        plain_wall = time.perf_counter() - t0
        keys.update(POLICY)

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
        # named: a client's default is the protective policy, which these runs need not match
        client_args = ["--secure-sum", args.secure_sum if args.algorithm == "fedgcn" else "none"]
        if args.policy:
            client_args = []   # the clients' default policy, which the run meets
        elif client_args[1] != "none":   # the mode alone: these runs ask for nothing else
            client_args += ["--adjacency-check", "node", "--min-contributors", "1",
                            "--feature-bound", "none", "--no-secure-models"]
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in keys.items()
                 if not isinstance(v, bool)]
        flags += [f"--{'' if v else 'no-'}{k.replace('_', '-')}" for k, v in keys.items()
                  if isinstance(v, bool)]
        os.environ["FEDGL_SUPERNODE"] = args.supernode   # read by each `fedgl client`
        if args.count_requests:   # every process started from here on counts its requests
            counter = Path(__file__).resolve().parent / "flower_requests"
            os.environ["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(counter), os.environ.get("PYTHONPATH", "")) if p)
            os.environ["FEDGL_REQUEST_COUNTS"] = str(root / "requests")
            (root / "requests").mkdir()
        with Loopback(root / "fed", root / "shards", root / "keys", args.clients,
                      client_args) as fed:
            watch = CpuWatch()
            watch.roots = [p.pid for p in fed.procs.values()]
            t0 = time.perf_counter()
            server = subprocess.Popen([sys.executable, "-m", "fedgl.cli", "server",
                                       "--superlink", fed.address, "--roster",
                                       str(root / "keys" / "roster.json"), "--insecure",
                                       "--out", str(root / "out"), *flags],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            watch.roots.append(server.pid)
            watch.sample()   # every process's CPU before the run (imports, shards, start-up)
            before = watch.by_role()
            watch.start()
            _, stderr = server.communicate()
            deployed_wall = time.perf_counter() - t0
            watch.stop()
            proc = subprocess.CompletedProcess(server.args, server.returncode, "", stderr)
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
        requests = count_requests(root / "requests") if args.count_requests else None
        rep = json.loads((root / "out" / "result.json").read_text())["repeats"][0]

    flower = rep["extra"]["flower"]
    answered = sum(m["down"] for m in rep["ledger"]["messages"].values()) / args.clients
    run_total = rep["seconds"]["total"]
    columns = ("round", "train_loss", "train_acc", "val_acc", "test_acc", "val_loss")
    out = {
        "setting": keys,
        "same_history": [{c: h.get(c) for c in columns} for h in rep["history"]] ==
                        [{c: h.get(c) for c in columns} for h in local.history],
        # every phase but the set-up (a local run asks 'setup.facts'; a deployment's hello and
        # set-up round trips carry the facts), as the loopback equality tests compare them
        **{f"same_ledger_{key}": {p: v for p, v in rep["ledger"][key].items() if p != "setup"}
           == {p: v for p, v in local.ledger[key].items() if p != "setup"}
           for key in ("bytes", "wire_bytes", "messages")},
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
        # every process's CPU seconds during the `fedgl server` command, by role (all clients
        # together), and in all per exchange: on one machine the run is as fast as its CPU
        "cpu_seconds_during_run": (during := {k: round(v - before.get(k, 0.0), 2)
                                              for k, v in watch.by_role().items()}),
        "cpu_seconds_per_exchange": round(sum(during.values()) / max(flower.get("calls") or 1, 1),
                                          3),
        "cpus": os.cpu_count(),
        # HTTP requests to the SuperLink by role and method (all clients' SuperNodes together)
        **({"requests": requests,
            "requests_per_exchange": round(sum(sum(r.values()) for r in requests.values())
                                           / max(flower.get("calls") or 1, 1), 1)}
           if requests is not None else {}),
        **({"policy_split_seconds": {
            "computation_local_plaintext": round(plain_wall, 2),
            "policy_in_one_process": round(local_wall - plain_wall, 2),
            "deployment": round(run_total - local_wall, 2)},
            "local_policy_seconds": {p: round(local.seconds[p], 2)
                                     for p in ("pretrain", "train", "eval")
                                     if p in local.seconds},
            "messages_per_client_by_phase": {
                p: v["down"] / args.clients for p, v in rep["ledger"]["messages"].items()}}
           if plain_wall is not None else {}),
        "load_average": {"start": [round(x, 2) for x in load_start],
                         "end": [round(x, 2) for x in os.getloadavg()]},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
