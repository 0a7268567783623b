"""A `fedgl run` end to end, by phase, against another checkout: wall, CPU, peak RSS.

    FEDGL_DATA=../shared/data python benchmarks/bench_run_profile.py --tree OLD --tree . \\
        [--pairs 3] [--only issue,default,one_round,datasets,torch]

Every command runs ``--pairs`` times per source tree (``PYTHONPATH=<tree>``, this Python, the
``fedgl`` program itself: ``python -c`` calling ``fedgl.cli.main()`` as the ``fedgl`` script
does), the trees alternating run by run so that machine load hits both alike. Per run:

- ``wall_s`` (spawn to exit, seen by this process), ``cpu_s`` (user + system of the run
  and every process it waited for, e.g. the leakage report's worker), ``peak_rss_mb`` (the
  largest of the run and the processes it waited for), the 1-minute load average just before;
- ``phases``: wall seconds inside the run, timed by wrapping fedgl's functions in the child:
  ``start`` (interpreter start to the wrapper's first line), ``imports`` (the CLI's
  ``_preload``: torch, numpy, scipy, the run machinery), ``data``, ``partition``, ``setup``,
  ``report_start``, the run's own ``result.json`` seconds (``pretrain``, ``train`` (the rounds,
  with the evaluation that rides on the next fit), ``eval``, ``oracle``), ``report_wait`` (the
  leakage report: waiting for its worker or computing it), ``write`` (result files, model),
  ``summary`` (the printed table), ``exit`` (the last exit handler to the process's end) and
  ``other`` (the rest of the wall time);
- for runs: whether ``history.csv``, ``result.json`` (timings, the environment and the output
  path left out) and the model file equal the first tree's first run of that command.

Commands: ``issue`` = issue 38's command (``--algorithm fedgcn --hops 2 --dataset cora
--clients 10 --beta 10000 --rounds 100 --local-steps 3 --lr 0.5 --seed 0``); ``default`` =
``run --dataset cora`` (the defaults: β = 1, 300 rounds); ``one_round`` = ``run --dataset cora
--rounds 1``; ``datasets``; ``torch`` = ``python -c "import torch"`` and ``torch_no_teardown``
the same ending in ``os._exit(0)`` (the floor under every run). Runs use ``--no-progress``. The
leakage report's disk store (``FEDGL_LEAKAGE_CACHE``) is a new empty folder for every run
(``--store cold``, the default) or one folder per tree kept across its runs (``--store warm``:
the first run of each command fills it); a tree without the store ignores it. Every tree's
``fedgl`` is byte-compiled first (:func:`compile_tree`), so that no tree pays compiling its
modules. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ISSUE = ["run", "--algorithm", "fedgcn", "--hops", "2", "--dataset", "cora", "--clients", "10",
         "--beta", "10000", "--rounds", "100", "--local-steps", "3", "--lr", "0.5", "--seed", "0"]
COMMANDS = {
    "issue": [*ISSUE, "--no-progress"],
    "default": ["run", "--dataset", "cora", "--no-progress"],
    "one_round": ["run", "--dataset", "cora", "--rounds", "1", "--no-progress"],
    "datasets": ["datasets"],
}
FLOORS = {"torch": "import torch", "torch_no_teardown": "import torch, os; os._exit(0)"}

#: the child: fedgl.cli.main() as the program runs it, with fedgl's phases timed
CHILD = r"""
import atexit, json, os, sys, time
T0 = time.time()
PH = {}
atexit.register(lambda: (PH.__setitem__("_last_handler", time.time()),
                         open(os.environ["BENCH_PHASES"], "w").write(json.dumps(PH))))
def timed(owner, name, label):
    real = getattr(owner, name)
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            PH[label] = PH.get(label, 0.0) + time.perf_counter() - t
    setattr(owner, name, wrapper)
import fedgl.cli as cli
real_preload = cli._preload
def preload():
    t = time.perf_counter()
    real_preload()
    PH["imports"] = PH.get("imports", 0.0) + time.perf_counter() - t
    import fedgl.algorithms.runner as runner, fedgl.api as api
    import fedgl.privacy.leakage_job as job
    for owner, name, label in [(api, "load_graph", "data"), (runner, "make_partition",
            "partition"), (runner, "build_federation", "setup"), (runner,
            "start_leakage_report", "report_start"), (job.PendingReport, "result",
            "report_wait"), (api, "save_with_model", "write"), (cli, "_print_summary",
            "summary")]:
        timed(owner, name, label)
cli._preload = preload
PH["_start"] = T0
sys.argv[0] = "fedgl"
cli.main()
"""


def _env(tree: str, store: str | None, phases: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "FEDGL_OFFLINE": "1",
           "BENCH_PHASES": phases}
    if store is not None:
        env["FEDGL_LEAKAGE_CACHE"] = store
    return env


def one(tree: str, name: str, store: str | None, cwd: str) -> dict:
    """One run of command ``name`` from ``tree`` (see the module docstring)."""
    out = Path(cwd) / f"out-{time.monotonic_ns()}"
    phases_file = Path(cwd) / "phases.json"
    phases_file.unlink(missing_ok=True)
    if name in FLOORS:
        args = ["-c", FLOORS[name]]
    else:
        args = ["-c", CHILD, *COMMANDS[name]] + (["--out", str(out)] if name != "datasets"
                                                 else [])
    load = os.getloadavg()[0]
    before = os.times()
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, *args], cwd=cwd, env=_env(tree, store,
                            str(phases_file)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)   # the child's usage, with its waited children
    t1 = time.time()
    after = os.times()
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{name} failed in {tree}:\n{err[-2000:]}")
    run = {"wall_s": round(t1 - t0, 3), "load": round(load, 2),
           "cpu_s": round((after.children_user - before.children_user)
                          + (after.children_system - before.children_system), 3),
           "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}
    if phases_file.is_file():
        ph = json.loads(phases_file.read_text())
        start, last = ph.pop("_start"), ph.pop("_last_handler")
        ph = {"start": start - t0, **ph, "exit": t1 - last}
        if out.is_dir():
            seconds = json.loads((out / "result.json").read_text())["repeats"][0]["seconds"]
            ph.update({k: seconds.get(k, 0.0) for k in ("pretrain", "train", "eval", "oracle")})
        ph["other"] = run["wall_s"] - sum(ph.values())
        run["phases"] = {k: round(v, 3) for k, v in ph.items()}
    if out.is_dir():
        run["out"] = str(out)
    return run


def _stripped(result: dict) -> dict:
    """result.json without what differs between identical runs (times, memory, where)."""
    def strip(o):
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if "seconds" not in k and "rss" not in k
                    and k not in ("out", "environment")}
        return [strip(v) for v in o] if isinstance(o, list) else o
    return strip(result)


def same_as(a: str, b: str) -> dict:
    """Whether run folder ``b`` recorded what ``a`` did."""
    pa, pb = Path(a), Path(b)
    ra, rb = (json.loads((p / "result.json").read_text()) for p in (pa, pb))
    model = "model/global.safetensors"
    return {"history_csv": (pa / "history.csv").read_bytes() == (pb / "history.csv").read_bytes(),
            "result_json": _stripped(ra) == _stripped(rb),
            "leakage_report": [r["extra"].get("leakage") for r in ra["repeats"]]
            == [r["extra"].get("leakage") for r in rb["repeats"]],
            "model": (pa / model).read_bytes() == (pb / model).read_bytes()}


def compile_tree(tree: str) -> None:
    """Byte-compile the tree's ``fedgl`` package, as installing it does: otherwise a tree
    without ``__pycache__`` (a ``git archive``), or any tree under ``PYTHONDONTWRITEBYTECODE``,
    compiles every module it imports in every run (0.2 s and more of a Cora run)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(tree) / "fedgl")],
                   check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True,
                        help="a fedgl source tree (repeat to compare)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--only", default="issue,default,one_round,datasets,torch,"
                        "torch_no_teardown")
    parser.add_argument("--store", choices=("cold", "warm"), default="cold")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    for tree in args.tree:
        compile_tree(tree)
    runs: dict[str, dict[str, list[dict]]] = {t: {n: [] for n in names} for t in args.tree}
    with tempfile.TemporaryDirectory() as cwd:
        stores = {t: str(Path(cwd) / f"store-{i}") for i, t in enumerate(args.tree)}
        for _ in range(args.pairs):
            for name in names:
                for tree in args.tree:
                    store = (stores[tree] if args.store == "warm" else
                             tempfile.mkdtemp(dir=cwd, prefix="store-"))
                    run = one(tree, name, store, cwd)
                    first = runs[args.tree[0]][name]
                    if "out" in run and first and "out" in first[0]:
                        run["same_as_first"] = same_as(first[0]["out"], run["out"])
                    runs[tree][name].append(run)
        for per in runs.values():
            for name in per:
                for run in per[name]:
                    run.pop("out", None)
    summary = {tree: {name: {key: statistics.median(r[key] for r in rs)
                             for key in ("wall_s", "cpu_s", "peak_rss_mb")}
                      for name, rs in per.items()} for tree, per in runs.items()}
    print(json.dumps({"python": sys.executable, "cpus": os.cpu_count(), "store": args.store,
                      "load_average_end": os.getloadavg(), "median": summary, "runs": runs},
                     indent=1))


if __name__ == "__main__":
    main()
