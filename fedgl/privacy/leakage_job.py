"""The leakage report beside the repeat: computed on a thread while the parties train.

The report (:func:`fedgl.privacy.leakage.leakage_report`) reads only the graph, the partition
and the configuration, never the trained model or a message, so it can start as soon as the
partition exists. Its kernels (NumPy, SciPy, LAPACK on one thread) release the GIL, so on a
thread it mostly uses the core time that training leaves idle, and the run's wall time grows by
far less than the report's own. A thread, not a forked process: a process that already runs
threads must not fork. The report is the experimenter's analysis outside the federation: no
party sees it, and its result is the same wherever it runs (``tests/test_leakage_in_run.py``).

It runs beside training only where a core is spare: more CPUs than PyTorch's intra-op threads
and a load average below the difference (:func:`spare_core`). Where training's threads already
fill every core, a third busy thread stalls them (PyTorch's OpenMP workers wait on each other at
every operation, and the GIL changes hands): on the 2-core development machine the run with the
report beside it took longer than with the report after it (docs/performance.md), so there it
runs after the repeat. On a graph of more than :data:`OVERLAP_MAX_NODES` nodes it also runs
after the repeat, once the parties are gone, so that its memory does not add to theirs.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from fedgl.config import Config
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition
from fedgl.privacy import leakage

#: graphs up to this many nodes get their report beside training (Cora, CiteSeer, PubMed);
#: larger ones after it (its dense blocks and decoded cells then do not add to the parties')
OVERLAP_MAX_NODES = 100_000


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
            self._thread = threading.Thread(target=self._run, name="fedgl-leakage-report",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._out = leakage.leakage_report(*self._args)
        except BaseException as err:  # re-raised by result(), in the run's thread
            self._error = err

    def result(self) -> dict[str, Any]:
        """The report (waits for the thread, or computes it now when it was deferred)."""
        if self._thread is None:
            return leakage.leakage_report(*self._args)
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._out is not None
        return self._out

    def close(self) -> None:
        """Wait for the thread, if one runs (a failed repeat does not leave it behind)."""
        if self._thread is not None:
            self._thread.join()


def spare_core() -> bool:
    """True when a CPU is left over by PyTorch's intra-op threads and by the load average."""
    import torch

    spare = (os.cpu_count() or 1) - torch.get_num_threads()
    return spare >= 1 and os.getloadavg()[0] <= spare - 1 + 0.5


def start_leakage_report(graph: GraphData, part: Partition, cfg: Config) -> PendingReport | None:
    """The report a FedGCN repeat records as ``extra["leakage"]``, started now; None for other
    algorithms or with ``leakage_report`` off (``--no-leakage-report``)."""
    if cfg.algorithm != "fedgcn" or not getattr(cfg, "leakage_report", True):
        return None
    return PendingReport(graph, part, cfg)
