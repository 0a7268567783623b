"""PSI for vertical alignment: time, bytes and peak RSS of fedgl's K-party X25519 protocol
(:mod:`fedgl.privacy.psi`) beside OpenMined's two-party ``openmined-psi`` (when installed), for
two parties of ``n`` ids each, half of them common.

    python benchmarks/bench_psi.py --sizes 10000 100000 [--threads 1 2]

Each cell runs in a fresh process (its own peak RSS). fedgl's bytes are the ledger's (values
and wire, every message of both parties); OpenMined's are its three serialised messages (setup,
request, response). Prints one JSON object: the cells and, per size, the time ratio
openmined / fedgl (fedgl with one thread) and, with several ``--threads``, fedgl's time with
one thread over its time with each other count (each party blinds with that many threads).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import time


def ids(n: int, start: int) -> list[str]:
    return [f"ACC-{i:012d}" for i in range(start, start + n)]


def fedgl_cell(n: int, threads: int = 1) -> dict:
    from fedgl.data.own.secret import pseudonyms
    from fedgl.federation.ledger import Ledger
    from fedgl.federation.runtime import LocalRuntime
    from fedgl.privacy.psi import PsiParty, run_psi

    secret = bytes(range(32))
    a, b = ids(n, 0), ids(n, n // 2)
    t0 = time.perf_counter()
    roles = {j: PsiParty(j, pseudonyms(secret, s), 2, threads=threads)
             for j, s in enumerate((a, b))}
    runtime = LocalRuntime(roles, Ledger())
    out = run_psi(runtime, [0, 1])
    seconds = time.perf_counter() - t0
    led = runtime.ledger
    return {"protocol": "fedgl x25519", "n": n, "threads": threads, "common": out["common"],
            "seconds": seconds,
            "bytes": led.bytes("setup"), "wire_bytes": led.wire_bytes("setup"),
            "messages": led.messages("setup")}


def openmined_cell(n: int, threads: int = 1) -> dict:
    import private_set_intersection.python as psi

    a, b = ids(n, 0), ids(n, n // 2)
    t0 = time.perf_counter()
    client = psi.client.CreateWithNewKey(True)
    server = psi.server.CreateWithNewKey(True)
    setup = server.CreateSetupMessage(0.0, len(a), b, psi.DataStructure.RAW)
    request = client.CreateRequest(a)
    response = server.ProcessRequest(request)
    common = len(client.GetIntersection(setup, response))
    seconds = time.perf_counter() - t0
    nbytes = sum(len(m.SerializeToString()) for m in (setup, request, response))
    return {"protocol": "openmined-psi (2-party)", "n": n, "common": common, "seconds": seconds,
            "bytes": nbytes, "messages": 3}


def _child(fn: str, n: int, threads: int, q: mp.Queue) -> None:
    cell = globals()[fn](n, threads)
    cell["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    q.put(cell)


def run_cell(fn: str, n: int, threads: int = 1) -> dict:
    q: mp.Queue = mp.get_context("spawn").Queue()
    p = mp.get_context("spawn").Process(target=_child, args=(fn, n, threads, q))
    p.start()
    cell = q.get()
    p.join()
    return cell


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--no-openmined", action="store_true")
    ap.add_argument("--threads", type=int, nargs="+", default=[1],
                    help="fedgl's blinding threads per party, one cell per count")
    args = ap.parse_args()
    import importlib.util

    have_om = importlib.util.find_spec("private_set_intersection") is not None
    cells = []
    for n in args.sizes:
        runs = [("fedgl_cell", t) for t in args.threads]
        if have_om and not args.no_openmined:
            runs.append(("openmined_cell", 1))
        for fn, threads in runs:
            cells.append(run_cell(fn, n, threads))
            print(json.dumps(cells[-1]), flush=True)
    ratios, speedups = {}, {}
    for n in args.sizes:
        fedgl = {c["threads"]: c["seconds"] for c in cells
                 if c["n"] == n and c["protocol"] == "fedgl x25519"}
        om = [c["seconds"] for c in cells if c["n"] == n and c["protocol"].startswith("openmined")]
        if om and 1 in fedgl:
            ratios[str(n)] = om[0] / fedgl[1]
        if 1 in fedgl and len(fedgl) > 1:
            speedups[str(n)] = {str(t): fedgl[1] / s for t, s in fedgl.items() if t != 1}
    print(json.dumps({"parties": 2, "overlap": 0.5, "cells": cells,
                      "time_ratio_openmined_over_fedgl": ratios,
                      "time_ratio_1_thread_over_n_threads": speedups}, indent=2))


if __name__ == "__main__":
    main()
