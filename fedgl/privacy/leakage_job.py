"""The leakage report beside the repeat: computed on a thread while the parties train.

The report (:func:`fedgl.privacy.leakage.leakage_report`) reads only the graph, the partition
and the configuration, never the trained model or a message, so it can start as soon as the
partition exists. Its kernels (NumPy, SciPy, LAPACK on one thread) release the GIL, so on a
thread it mostly uses the core time that training leaves idle, and the run's wall time grows by
far less than the report's own. A thread, not a forked process: a process that already runs
threads must not fork. Beside training, the report's own analysis threads
(:func:`fedgl.privacy.leakage.leakage_report`'s ``workers``) are as many as the spare CPUs;
after the repeat, one and one per idle CPU. The report is the experimenter's analysis
outside the federation: no party sees it, and its result is the same wherever it runs
(``tests/test_leakage_in_run.py``).

It runs beside training only where a core is spare: more CPUs than PyTorch's intra-op threads
and a load average below the difference (:func:`spare_core`). Where training's threads already
fill every core, a third busy thread stalls them (PyTorch's OpenMP workers wait on each other at
every operation, and the GIL changes hands): on the 2-core development machine the run with the
report beside it took longer than with the report after it (docs/performance.md), so there it
runs after the repeat. On a graph of more than :data:`OVERLAP_MAX_NODES` nodes it also runs
after the repeat, once the parties are gone, so that its memory does not add to theirs.

Repeats and sweep cells of one graph and partition share one report: the process keeps the last
:data:`CACHE_SIZE` reports of small graphs, keyed by :func:`report_digest` (the features, the
edges, the owners, every setting the report reads, and the report function itself).
"""

from __future__ import annotations

import copy
import hashlib
import os
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from fedgl.config import Config
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition
from fedgl.privacy import leakage

#: graphs up to this many nodes get their report beside training (Cora, CiteSeer, PubMed);
#: larger ones after it (its dense blocks and decoded cells then do not add to the parties')
OVERLAP_MAX_NODES = 100_000


#: reports kept per process (small graphs only: the digest reads the whole feature matrix)
CACHE_SIZE = 4
_CACHE: OrderedDict[str, dict[str, Any]] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def report_digest(graph: GraphData, part: Partition, cfg: Config) -> str:
    """What :func:`fedgl.privacy.leakage.leakage_report` depends on, hashed: the settings it
    reads (hops, which rows clients receive, ``min_contributors``, the secure-sum mode, DP on or
    off), the graph's features and edges, the owners, and the report function's identity."""
    fn = leakage.leakage_report
    h = hashlib.blake2b(digest_size=20)
    h.update(repr((cfg.hops, leakage.neighbour_rows(cfg), cfg.min_contributors, cfg.secure_sum,
                   cfg.dp_epsilon is not None, graph.num_nodes, tuple(graph.x.shape),
                   str(graph.x.dtype), part.num_clients, fn.__module__, fn.__qualname__,
                   id(fn))).encode())
    for tensor in (graph.edge_index, graph.x):
        h.update(np.ascontiguousarray(tensor.detach().cpu().numpy()).tobytes())
    h.update(np.ascontiguousarray(part.owner, dtype=np.int64).tobytes())
    return h.hexdigest()


def cached_report(graph: GraphData, part: Partition, cfg: Config,
                  workers: int | None = None) -> dict[str, Any]:
    """The report, from this process's cache when the same inputs were reported before (a copy:
    the caller may change it); computed with ``workers`` decoding threads (None: the
    report's default; the report does not depend on them)."""
    args = (graph, part, cfg) if workers is None else (graph, part, cfg, workers)
    if graph.num_nodes > OVERLAP_MAX_NODES:
        return leakage.leakage_report(*args)
    key = report_digest(graph, part, cfg)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return copy.deepcopy(hit)
    out = leakage.leakage_report(*args)
    with _CACHE_LOCK:
        _CACHE[key] = copy.deepcopy(out)
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return out


class PendingReport:
    """The leakage report of one repeat: started on a thread (small graph, spare core) or
    deferred to :meth:`result`.
    :meth:`result` returns it (or raises what the report raised); :meth:`close` waits for the
    thread, so that none outlives the repeat."""

    def __init__(self, graph: GraphData, part: Partition, cfg: Config) -> None:
        self._args = (graph, part, cfg)
        self._out: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if graph.num_nodes <= OVERLAP_MAX_NODES and spare_core():
            # beside training: the report's decoding threads on the spare CPUs only
            self._args = (graph, part, cfg, max(1, spare_cpus()))
            self._thread = threading.Thread(target=self._run, name="fedgl-leakage-report",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._out = cached_report(*self._args)
        except BaseException as err:  # re-raised by result(), in the run's thread
            self._error = err

    def result(self) -> dict[str, Any]:
        """The report (waits for the thread, or computes it now when it was deferred)."""
        if self._thread is None:
            return cached_report(*self._args)
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._out is not None
        return self._out

    def close(self) -> None:
        """Wait for the thread, if one runs (a failed repeat does not leave it behind)."""
        if self._thread is not None:
            self._thread.join()


def spare_cpus() -> int:
    """The CPUs PyTorch's intra-op threads leave over (may be 0 or less)."""
    import torch

    return (os.cpu_count() or 1) - torch.get_num_threads()


def spare_core() -> bool:
    """True when a CPU is left over by PyTorch's intra-op threads and by the load average."""
    spare = spare_cpus()
    return spare >= 1 and os.getloadavg()[0] <= spare - 1 + 0.5


def start_leakage_report(graph: GraphData, part: Partition, cfg: Config) -> PendingReport | None:
    """The report a FedGCN repeat records as ``extra["leakage"]``, started now; None for other
    algorithms or with ``leakage_report`` off (``--no-leakage-report``)."""
    if cfg.algorithm != "fedgcn" or not getattr(cfg, "leakage_report", True):
        return None
    return PendingReport(graph, part, cfg)
