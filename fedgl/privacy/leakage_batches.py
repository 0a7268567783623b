"""The leakage report's systems analysed in batches, on threads.

A party reads a system of rows, each the sum over its pairs ``(i, j)`` of nodes: the report
asks which nodes the system determines (linear algebra, then the value-level attack). Each
system's answer depends on that system alone, so systems can be analysed together: a batch's
linear algebra runs on the block-diagonal union of its systems (one sparse pass over all of
them, per connected block as alone) and its value-level attack decodes them as one stacked
system (:mod:`fedgl.privacy.stacked_decoding`); batching only cuts the per-call work, which
dominates on small graphs.

With ``workers`` > 1 a batch is dealt into that many shares of about equal pairs (largest
first, each to the smallest share), the first analysed on the calling thread and each other on
a thread of its own: the work is NumPy, SciPy and LAPACK kernels, which release the GIL, so on
a machine with idle cores the report's wall time falls; by default (:func:`available_workers`)
only idle CPUs get a thread. The answers do not depend on the split.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: systems are solved and attacked together until their pairs exceed this many (a batch holds
#: their pairs, solutions and released rows at once; a larger system is a batch of its own)
BATCH_ENTRIES = 2_000_000
#: threads :func:`available_workers` offers at most
MAX_WORKERS = 4


class Batches:
    """Systems ``(r, c)`` analysed a batch at a time: ``solve(systems)`` gives each system's
    ``(col_ids, found, undecided)``, ``attack(systems)`` (None: no value-level attack) each
    ``(r, c, col_ids, found, undecided)``'s ``(exact, unresolved)``. :meth:`add` takes a system
    and the function that receives its answer ``(col_ids, found, undecided, (exact,
    unresolved) or None)``; a batch runs once its pairs exceed :data:`BATCH_ENTRIES`, and
    :meth:`run` runs what is left."""

    def __init__(self, solve: Callable, attack: Callable | None, workers: int = 1) -> None:
        self.solve, self.attack, self.workers = solve, attack, max(1, workers)
        self.pending: list = []
        self.entries = 0

    def add(self, r: Any, c: Any, done: Callable) -> None:
        self.pending.append((r, c, done))
        self.entries += r.size
        if self.entries > BATCH_ENTRIES:
            self.run()

    def run(self) -> None:
        batch, self.pending, self.entries = self.pending, [], 0
        if not batch:
            return
        parts = shares([r.size for r, _, _ in batch], self.workers)
        if len(parts) > 1:      # the first share on this thread, the others on new ones
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(len(parts) - 1, thread_name_prefix="fedgl-leakage") as pool:
                others = [pool.submit(self._analyse, [batch[s] for s in part])
                          for part in parts[1:]]
                answers = [self._analyse([batch[s] for s in parts[0]])]
                answers += [future.result() for future in others]
        else:
            answers = [self._analyse(batch)]
        for part, answer in zip(parts, answers, strict=True):
            for s, (solved, attacked) in zip(part, answer, strict=True):
                batch[s][2](*solved, attacked)

    def _analyse(self, batch: list) -> list:
        solved = self.solve([(r, c) for r, c, _ in batch])
        attacked = [None] * len(batch) if self.attack is None else self.attack(
            [(r, c, *sol) for (r, c, _), sol in zip(batch, solved, strict=True)])
        return list(zip(solved, attacked, strict=True))


def shares(sizes: list[int], workers: int) -> list[list[int]]:
    """Indices dealt into at most ``workers`` shares of about equal total size (largest
    first, each to the smallest share), each share ascending; no empty share."""
    loads = [0] * min(workers, len(sizes))
    out: list[list[int]] = [[] for _ in loads]
    for s in sorted(range(len(sizes)), key=lambda s: -sizes[s]):
        k = loads.index(min(loads))
        out[k].append(s)
        loads[k] += sizes[s]
    return [sorted(share) for share in out if share]


def available_workers() -> int:
    """Threads for the report's analyses: one, and one more for each CPU this process may run
    on that the load average leaves idle, at most :data:`MAX_WORKERS` (on a busy machine extra
    threads only contend for the same cores)."""
    import os

    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:     # not on Linux
        cpus = os.cpu_count() or 1
    try:
        idle = int(cpus - os.getloadavg()[0])
    except OSError:            # no load average
        idle = 0
    return max(1, min(MAX_WORKERS, cpus, 1 + idle))
