"""The default FedGCN command end to end, and its leakage report, against a baseline checkout.

Runs, alternating (baseline, this checkout, baseline, ...; never in parallel), in fresh
interpreters with ``PYTHONPATH`` set to each checkout:

(a) the whole process of ``fedgl run --algorithm fedgcn --hops 2 --dataset D --clients 10
    --beta 10000 --rounds 100 --local-steps 3 --lr 0.5 --seed 0`` under ``/usr/bin/time -v``
    (wall seconds, peak RSS), the same with ``--no-leakage-report``, and the run's own seconds
    from ``result.json`` (pre-training, training, evaluation, oracle) and its final accuracy;
(b) the leakage report alone (``leakage_report`` on the same graph and partition, with its
    default threads): wall and CPU seconds (all threads), the CPU seconds inside the
    value-level decoder (``fedgl.privacy.value_decoding.decode_all``, or ``decode`` where a
    checkout has no ``decode_all``; summed over threads), and whether both checkouts give the
    same report.

Every figure carries the load average (``os.getloadavg()``) read just before it, and each
figure of this checkout is printed beside the baseline's as a ratio; per dataset, the report's
share of the whole run, ``(with - without) / with``, for both checkouts. Output: JSON.

    FEDGL_DATA=../shared/data python benchmarks/perf_speed.py --baseline ../main [--pairs 2]

FedGraph (the reference the issue compares against) is not rebuilt here; its figures measured
on this machine (126.4 s and 117.2 s for the whole run, 202.8 MB of pre-training traffic) are
in docs/performance.md, and every whole-run figure prints its ratio to them. ``--runs-only``
skips (b); ``--no-report-runs`` skips the whole runs with the leakage report; ``--report-only``
runs (b) alone.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

COMMAND = ["run", "--algorithm", "fedgcn", "--hops", "2", "--clients", "10", "--beta", "10000",
           "--rounds", "100", "--local-steps", "3", "--lr", "0.5", "--seed", "0",
           "--no-progress"]

REPORT = """
import json, os, time, torch
import fedgl
assert fedgl.__file__.startswith(os.environ["PYTHONPATH"]), fedgl.__file__
torch.set_num_threads(1)
from fedgl.api import as_config
from fedgl.data.datasets import load_graph
from fedgl.data.shards import make_partition
from fedgl.privacy.leakage import leakage_report
import fedgl.privacy.value_decoding as vd
decode_cpu = []
# the value-level decoder's share (called by the report): CPU seconds of the calling thread
# inside it, summed over threads (the report may analyse systems on several threads); where
# it yields its results (one stack at a time), inside each step of the iteration
name = "decode_all" if hasattr(vd, "decode_all") else "decode"
real = getattr(vd, name)
def stepped(it):
    while True:
        t = time.thread_time()
        try:
            x = next(it)
        except StopIteration:
            decode_cpu.append(time.thread_time() - t)
            return
        decode_cpu.append(time.thread_time() - t)   # (append: safe from several threads)
        yield x
def timed(*args, **kw):
    t = time.thread_time()
    out = real(*args, **kw)
    decode_cpu.append(time.thread_time() - t)
    return stepped(iter(out)) if hasattr(out, "__next__") else out
setattr(vd, name, timed)
cfg = as_config(None, algorithm="fedgcn", hops=2, dataset={ds!r}, clients=10, beta=10000.0,
                seed=0)
graph = load_graph(cfg)
part = make_partition(graph, cfg, 0)
load = os.getloadavg()[0]
wall, cpu = time.perf_counter(), time.process_time()
rep = leakage_report(graph, part, cfg)
print(json.dumps({{"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                  "decode_cpu_s": sum(decode_cpu), "load": load, "report": rep}}))
"""


def _env(checkout: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(checkout), "RAY_USAGE_STATS_ENABLED": "0",
            "FEDGL_OFFLINE": "1", "MPLBACKEND": "Agg"}


def whole_run(checkout: Path, dataset: str, leakage: bool) -> dict:
    """(a): one fresh process under /usr/bin/time -v."""
    with tempfile.TemporaryDirectory() as out:
        cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "fedgl.cli", *COMMAND,
               "--dataset", dataset, "--out", out] + ([] if leakage else ["--no-leakage-report"])
        load = os.getloadavg()[0]
        proc = subprocess.run(cmd, env=_env(checkout), capture_output=True, text=True,
                              check=True, cwd=out)   # not the checkout: sys.path[0] is the cwd
        wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", proc.stderr)
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
        parts = [float(p) for p in wall.group(1).split(":")]
        seconds = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
        result = json.loads((Path(out) / "result.json").read_text())
    rep = result["repeats"][0]
    return {"wall_s": seconds, "peak_rss_mb": int(rss.group(1)) / 1024, "load": load,
            "seconds": {k: round(v, 3) for k, v in rep["seconds"].items()},
            "test_acc": rep["final"].get("test_acc"),
            "history": [(h.get("train_loss"), h.get("val_acc"), h.get("test_acc"),
                         h.get("oracle_test_acc")) for h in rep["history"]],
            "pretrain_bytes": rep["ledger"]["bytes"]["pretrain"],
            "pretrain_wire_bytes": rep["ledger"]["wire_bytes"]["pretrain"]}


def report_alone(checkout: Path, dataset: str) -> dict:
    """(b): the leakage report in a fresh process (graph and partition loaded first)."""
    with tempfile.TemporaryDirectory() as cwd:   # sys.path[0] is the cwd: not a checkout
        proc = subprocess.run([sys.executable, "-c", REPORT.format(ds=dataset)],
                              env=_env(checkout), capture_output=True, text=True, check=True,
                              cwd=cwd)
    return json.loads(proc.stdout.strip().splitlines()[-1])


FEDGRAPH = {"wall_s": (126.4, 117.2), "pretrain_bytes": 202.8e6}


def _against_fedgraph(run: dict) -> dict:
    """This run's pre-training bytes and wall time as ratios to FedGraph's."""
    total = run["pretrain_bytes"]["up"] + run["pretrain_bytes"]["down"]
    return {"pretrain_bytes_total": total,
            "fewer_bytes_than_fedgraph": round(FEDGRAPH["pretrain_bytes"] / total, 1),
            "faster_than_fedgraph": [round(f / run["wall_s"], 1) for f in FEDGRAPH["wall_s"]]}


KEYS = ("wall_s", "cpu_s", "decode_cpu_s", "load")


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="checkout to compare against")
    ap.add_argument("--datasets", nargs="+", default=["cora", "citeseer"])
    ap.add_argument("--pairs", type=int, default=1, help="alternating pairs per figure")
    ap.add_argument("--runs-only", action="store_true", help="skip the report-alone figures")
    ap.add_argument("--no-report-runs", action="store_true",
                    help="only whole runs with --no-leakage-report")
    ap.add_argument("--report-only", action="store_true",
                    help="only the report-alone figures (no whole runs)")
    args = ap.parse_args()
    here = Path(__file__).resolve().parents[1]
    out: dict = {"baseline": str(args.baseline.resolve()), "this": str(here), "figures": []}
    for ds in args.datasets:
        for _ in range(args.pairs):
            before = len(out["figures"])
            if not args.runs_only:
                base, mine = report_alone(args.baseline, ds), report_alone(here, ds)
                out["figures"].append({
                    "figure": f"leakage report, {ds}",
                    "same_report": base["report"] == mine["report"],
                    "baseline": {k: round(base[k], 3) for k in KEYS},
                    "this": {k: round(mine[k], 3) for k in KEYS},
                    "speed-up (cpu)": _ratio(base["cpu_s"], mine["cpu_s"]),
                    "decoder speed-up (cpu)": _ratio(base["decode_cpu_s"],
                                                     mine["decode_cpu_s"])})
            for leakage in (() if args.report_only else
                            (False,) if args.no_report_runs else (True, False)):
                base, mine = whole_run(args.baseline, ds, leakage), \
                    whole_run(here, ds, leakage)
                same = base.pop("history") == mine.pop("history")
                fig = {"figure": f"whole run, {ds}" + ("" if leakage else ", --no-leakage-report"),
                       "same_history": same, "baseline": base, "this": mine,
                       "speed-up (wall)": _ratio(base["wall_s"], mine["wall_s"])}
                if ds == "cora":
                    fig["baseline_vs_fedgraph"] = _against_fedgraph(base)
                    fig["this_vs_fedgraph"] = _against_fedgraph(mine)
                out["figures"].append(fig)
            if not args.no_report_runs and not args.report_only:
                out["figures"].append(_report_share(ds, out["figures"][-2], out["figures"][-1]))
            print(json.dumps(out["figures"][before:], indent=1), file=sys.stderr, flush=True)
    out["fedgraph"] = FEDGRAPH_NOTE
    print(json.dumps(out, indent=1))


FEDGRAPH_NOTE = ("FedGraph 0.2.5's figures (126.4 s and 117.2 s whole run, 202.8 MB pre-training) "
                 "are an earlier measurement on this machine (issue, load 3 to 4), not rerun here")


def _report_share(ds: str, with_report: dict, without: dict) -> dict:
    """The report's share of the whole run, per checkout: (with - without) / with, from the
    two runs just made (each at its own load, printed beside it)."""
    def share(key: str) -> dict:
        a, b = with_report[key], without[key]
        return {"with_s": a["wall_s"], "without_s": b["wall_s"],
                "loads": [a["load"], b["load"]],
                "report_share": round((a["wall_s"] - b["wall_s"]) / a["wall_s"], 3)}
    return {"figure": f"report share of the whole run, {ds}", "baseline": share("baseline"),
            "this": share("this")}


if __name__ == "__main__":
    main()
