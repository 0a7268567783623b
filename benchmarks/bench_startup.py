"""CLI start-up: wall time of light commands and the time to the first round of `fedgl run`.

    python benchmarks/bench_startup.py --tree /path/to/old/checkout --tree . --repeats 7

Every command runs ``--repeats`` times per source tree (``PYTHONPATH=<tree>``, this Python),
the trees alternating run by run so that machine load hits both alike. "first_round" is
``fedgl run --rounds 1 --no-progress`` (the default job) in a wrapper that exits in the
``on_round`` callback of round 1: imports, data, partition, pre-training and one round;
"first_round_cora" the same for ``fedgl run --algorithm fedgcn --dataset cora`` (Cora from
``$FEDGL_DATA``). Prints
JSON: per tree and command, the sorted wall times, their median and minimum (seconds).
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

FIRST_ROUND = """
import os, sys
import fedgl.api as api
_run = api.run
def run(*args, **kwargs):
    def first(repeat, t, server):
        os._exit(0)
    return _run(*args, on_round=first, **kwargs)
api.run = run
from fedgl.cli import main
sys.exit(main(sys.argv[1:]))
"""

COMMANDS = {
    "help": ["-m", "fedgl.cli", "--help"],
    "version": ["-m", "fedgl.cli", "--version"],
    "run_help": ["-m", "fedgl.cli", "run", "--help"],
    "datasets": ["-m", "fedgl.cli", "datasets"],
    "bad_input": ["-m", "fedgl.cli", "run", "--clients", "0"],
    "first_round": ["-c", FIRST_ROUND, "run", "--rounds", "1", "--no-progress"],
    "first_round_cora": ["-c", FIRST_ROUND, "run", "--algorithm", "fedgcn", "--dataset", "cora",
                         "--rounds", "1", "--no-progress"],
}


def wall(tree: str, args: list[str], cwd: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "FEDGL_OFFLINE": "1"}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True,
                        help="a fedgl source tree (repeat to compare)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--only", default=",".join(COMMANDS),
                        help=f"comma-separated subset of {','.join(COMMANDS)}")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    times: dict[str, dict[str, list[float]]] = {t: {n: [] for n in names} for t in args.tree}
    with tempfile.TemporaryDirectory() as cwd:   # runs/ of the run commands lands here
        for _ in range(args.repeats):
            for name in names:
                for tree in args.tree:
                    times[tree][name].append(wall(tree, COMMANDS[name], cwd))
    out = {"python": sys.executable, "load_average": os.getloadavg(), "repeats": args.repeats,
           "trees": {tree: {name: {"median": statistics.median(v), "min": min(v),
                                   "seconds": sorted(v)} for name, v in per.items()}
                     for tree, per in times.items()}}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
