"""The leakage report beside the repeat: computed in a process or on a thread while the parties
train.

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

Where a CPU is idle (a CPU more than PyTorch's intra-op threads, and the load average leaving
at least half a CPU) and the graph has at least :data:`PROCESS_MIN_CELLS` feature cells (Cora
has 3.9 million), the report is computed by a process of its own
(:mod:`fedgl.privacy.leakage_worker`, started with the graph, the partition and the
configuration in a private temporary folder): it runs on the idle CPU without the run's GIL,
so the run's wall time grows by the process's hand-over only (on the 2-core development
machine, Cora's default run: 0.09 to 0.27 s for a report of about 0.9 s, docs/performance.md).
A process that fails leaves the report to the run itself, the same report.

Otherwise it runs on a thread beside training only where a core is spare: more CPUs than
PyTorch's intra-op threads and a load average below the difference (:func:`spare_core`). Where
training's threads already fill every core, a third busy thread stalls them (PyTorch's OpenMP
workers wait on each other at every operation, and the GIL changes hands): on the 2-core
development machine the run with the report beside it took longer than with the report after it
(docs/performance.md), so there it runs after the repeat. On a graph of more than
:data:`OVERLAP_MAX_NODES` nodes it also runs after the repeat, once the parties are gone, so
that its memory does not add to theirs.

Repeats and sweep cells of one graph and partition share one report: the process keeps the last
:data:`CACHE_SIZE` reports of small graphs, keyed by :func:`report_digest` (the features, the
edges, the owners, every setting the report reads, and the report function itself), and every
report of a small graph is also stored on disk (:mod:`fedgl.privacy.leakage_store`, keyed by
the same inputs and the report's code), so that a later run of the same inputs reads it and
starts no process.
"""

from __future__ import annotations

import copy
import hashlib
import os
import threading
from collections import OrderedDict
from typing import Any, NamedTuple

import numpy as np

from fedgl.config import Config
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition
from fedgl.privacy import leakage, leakage_store

#: graphs up to this many nodes get their report beside training (Cora, CiteSeer, PubMed);
#: larger ones after it (its dense blocks and decoded cells then do not add to the parties')
OVERLAP_MAX_NODES = 100_000


#: reports kept per process (small graphs only: the digest reads the whole feature matrix)
CACHE_SIZE = 4
_CACHE: OrderedDict[str, dict[str, Any]] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def inputs_digest(graph: GraphData, part: Partition, cfg: Config) -> str:
    """What :func:`fedgl.privacy.leakage.leakage_report` reads, hashed: the settings it reads
    (hops, which rows clients receive, ``min_contributors``, ``min_partial_nodes``, the
    secure-sum mode, DP on or off),
    the graph's features and edges, and the owners."""
    h = hashlib.blake2b(digest_size=20)
    h.update(repr((cfg.hops, leakage.neighbour_rows(cfg), cfg.min_contributors,
                   int(getattr(cfg, "min_partial_nodes", 1)), cfg.secure_sum,
                   cfg.dp_epsilon is not None, graph.num_nodes, tuple(graph.x.shape),
                   str(graph.x.dtype), part.num_clients)).encode())
    # hashed where the arrays lie (no copy)
    h.update(np.ascontiguousarray(graph.edge_index.detach().cpu().numpy()).reshape(-1)
             .view(np.uint8))
    _update_with_matrix(h, graph.x)
    h.update(np.ascontiguousarray(part.owner, dtype=np.int64).reshape(-1).view(np.uint8))
    return h.hexdigest()


def _update_with_matrix(h: Any, x: Any) -> None:
    """Hash a feature matrix's bits: where at most a tenth of them are non-zero (Cora's
    features: 1.3 %), their positions and bit patterns, a fortieth of the bytes (Cora's
    matrix: 11 against 2.5 ms, torch finding the non-zeros); else every value. Either way the
    exact bits (``-0.0`` is not ``0.0``), and which form was hashed."""
    import torch

    flat = x.detach().cpu().contiguous().reshape(-1)
    ints = flat.view({1: torch.uint8, 2: torch.int16, 4: torch.int32,
                      8: torch.int64}[flat.element_size()])
    if int(torch.count_nonzero(ints)) * 10 <= ints.numel():
        where = torch.nonzero(ints).reshape(-1)
        h.update(b"sparse")
        h.update(where.numpy().view(np.uint8))
        h.update(ints[where].numpy().view(np.uint8))
    else:
        h.update(b"dense")
        h.update(ints.numpy().view(np.uint8))


def report_digest(graph: GraphData, part: Partition, cfg: Config) -> str:
    """:func:`inputs_digest` with the report function's identity (this process's key)."""
    return _memory_key(inputs_digest(graph, part, cfg))


def _memory_key(inputs: str) -> str:
    fn = leakage.leakage_report
    return hashlib.blake2b(repr((inputs, fn.__module__, fn.__qualname__, id(fn))).encode(),
                           digest_size=20).hexdigest()


#: the report function this module was loaded with: only its reports go to the disk store
_REPORT_FN = leakage.leakage_report


class ReportKey(NamedTuple):
    """A report's names: in this process's cache, and in the disk store
    (:mod:`fedgl.privacy.leakage_store`; None where the report function was replaced)."""

    memory: str
    stored: str | None


def cache_key(graph: GraphData, part: Partition, cfg: Config) -> ReportKey | None:
    """The names of these inputs' report (None: a graph too large to cache, whose feature
    matrix is not hashed)."""
    if graph.num_nodes > OVERLAP_MAX_NODES:
        return None
    inputs = inputs_digest(graph, part, cfg)
    stored = leakage_store.stored_key(inputs) if leakage.leakage_report is _REPORT_FN else None
    return ReportKey(_memory_key(inputs), stored)


def remember(key: ReportKey | None, report: dict[str, Any]) -> None:
    """Keep (a copy of) ``report`` as the report of the inputs ``key`` names, in this process
    and on disk."""
    if key is None:
        return
    with _CACHE_LOCK:
        _CACHE[key.memory] = copy.deepcopy(report)
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    if key.stored is not None:
        leakage_store.save(key.stored, report)


def known_report(key: ReportKey | None) -> dict[str, Any] | None:
    """The report ``key`` names, from this process's cache or the disk store (a copy: the
    caller may change it), or None."""
    if key is None:
        return None
    with _CACHE_LOCK:
        hit = _CACHE.get(key.memory)
        if hit is not None:
            _CACHE.move_to_end(key.memory)
            return copy.deepcopy(hit)
    stored = leakage_store.load(key.stored) if key.stored is not None else None
    if stored is not None:
        with _CACHE_LOCK:
            _CACHE[key.memory] = copy.deepcopy(stored)
            while len(_CACHE) > CACHE_SIZE:
                _CACHE.popitem(last=False)
    return stored


def cached_report(graph: GraphData, part: Partition, cfg: Config,
                  workers: int | None = None, *, key: ReportKey | None = None
                  ) -> dict[str, Any]:
    """The report, from this process's cache or the disk store when the same inputs were
    reported before (a copy: the caller may change it); computed with ``workers`` decoding
    threads (None: the report's default; the report does not depend on them). ``key``: the
    inputs' :func:`cache_key` where the caller has it already."""
    args = (graph, part, cfg) if workers is None else (graph, part, cfg, workers)
    if key is None:
        key = cache_key(graph, part, cfg)
    if key is None:
        return leakage.leakage_report(*args)
    hit = known_report(key)
    if hit is not None:
        return hit
    out = leakage.leakage_report(*args)
    remember(key, out)
    return out


class PendingReport:
    """The leakage report of one repeat: from the cache; started in a process of its own
    (a graph large enough that the report costs more than the process's start, a CPU idle);
    on a thread (small graph, spare core); or deferred to :meth:`result`.
    :meth:`result` returns it (or raises what the report raised); :meth:`close` waits for the
    thread or stops the process, so that none outlives the repeat."""

    def __init__(self, graph: GraphData, part: Partition, cfg: Config) -> None:
        self._args: tuple = (graph, part, cfg)
        self._out: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._process: ReportProcess | None = None
        self._key = cache_key(graph, part, cfg)   # hashed once: its features may be large
        self._out = known_report(self._key)       # reported before: nothing to start
        small = self._key is not None and self._out is None
        if small and graph.num_nodes * graph.x.shape[1] >= PROCESS_MIN_CELLS and idle_cpu():
            self._process = ReportProcess.start(graph, part, cfg)
        if self._process is None and small and spare_core():
            # beside training: the report's decoding threads on the spare CPUs only
            self._args = (graph, part, cfg, max(1, spare_cpus()))
            self._thread = threading.Thread(target=self._run, name="fedgl-leakage-report",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._out = cached_report(*self._args, key=self._key)
        except BaseException as err:  # re-raised by result(), in the run's thread
            self._error = err

    def result(self) -> dict[str, Any]:
        """The report (known already, or waits for the thread or the process, or computes it
        now when it was deferred or its process failed)."""
        if self._thread is None and self._process is None and self._out is not None:
            return self._out
        if self._process is not None:
            out, self._process = self._process.result(), None
            if out is not None:
                remember(self._key, out)
                return out
        if self._thread is None:
            return cached_report(*self._args, key=self._key)
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._out is not None
        return self._out

    def close(self) -> None:
        """Wait for the thread or stop the process, if one runs (a failed repeat leaves
        neither behind)."""
        if self._thread is not None:
            self._thread.join()
        if self._process is not None:
            self._process.stop()
            self._process = None


#: a graph gets its report in a process of its own from this many feature cells (nodes x
#: columns; Cora 3.9 million): below it the report costs less than the process's start
PROCESS_MIN_CELLS = 1_000_000


class ReportProcess:
    """The report computed by ``python -m fedgl.privacy.leakage_worker`` beside the run: its
    inputs pickled to a private temporary folder, its answer read back from it."""

    def __init__(self, folder: str, proc: Any) -> None:
        self.folder, self.proc = folder, proc

    @classmethod
    def start(cls, graph: GraphData, part: Partition, cfg: Config) -> ReportProcess | None:
        """The process started, or None where it could not be (the caller computes the
        report itself)."""
        import pickle
        import subprocess
        import sys
        import tempfile

        folder = tempfile.mkdtemp(prefix="fedgl-leakage-")   # mode 0700
        try:
            from fedgl.privacy.leakage_worker import inputs

            with open(os.path.join(folder, "in.pkl"), "wb") as f:
                pickle.dump(inputs(graph, part, cfg.to_dict()), f,
                            protocol=pickle.HIGHEST_PROTOCOL)
            proc = subprocess.Popen(
                [sys.executable, "-m", "fedgl.privacy.leakage_worker",
                 os.path.join(folder, "in.pkl"), os.path.join(folder, "out.pkl")],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                env={**os.environ, "OMP_NUM_THREADS": "1"})
        except (OSError, pickle.PicklingError, TypeError, AttributeError):
            _remove(folder)
            return None
        return cls(folder, proc)

    def result(self) -> dict[str, Any] | None:
        """The report, or None where the process failed (its line is dropped: the caller
        computes the report itself, the same report)."""
        import pickle

        try:
            self.proc.communicate()
            if self.proc.returncode != 0:
                return None
            with open(os.path.join(self.folder, "out.pkl"), "rb") as f:
                return pickle.load(f)  # noqa: S301 - our worker's, in our 0700 folder
        except (OSError, EOFError, pickle.UnpicklingError):
            return None
        finally:
            _remove(self.folder)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()
        _remove(self.folder)


def _remove(folder: str) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def idle_cpu() -> bool:
    """True when a CPU is left over by PyTorch's intra-op threads and the load average leaves
    at least half a CPU idle."""
    spare = spare_cpus()
    return spare >= 1 and os.getloadavg()[0] <= (os.cpu_count() or 1) - 0.5


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
