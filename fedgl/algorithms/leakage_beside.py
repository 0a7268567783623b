"""The leakage report of a FedGCN repeat, computed beside the federation.

The report (:func:`fedgl.privacy.leakage.leakage_report`) is the experimenter's analysis of the
graph and the partition; it does not need the trained model. On a small graph it runs in a
forked process while the repeat trains (the other core of the machine), and the repeat collects
it at the end: the same function on the same inputs, so the same report. Where forking is not
safe or would cost memory it runs after the repeat, as before:

- a graph of more than :data:`BESIDE_CELLS` feature cells (the report's arrays scale with it;
  a products-sized 2-hop run keeps the report after the parties are gone);
- more than one torch thread (a forked child must not enter the parent's thread pool);
- a runtime other than ``local`` (Ray and Flower run their own processes and threads), or gRPC
  loaded in this process (a Ray or Flower session earlier in it: gRPC's fork handlers may wait
  on its threads);
- no ``fork`` on the platform.

The child sends the report (or its error) through a pipe and exits; a failed child's report is
recomputed in the repeat's process, so the error, if any, is raised there.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import traceback
from typing import Any

import torch

from fedgl.config import Config
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition
from fedgl.privacy.leakage import leakage_report

#: nodes x features up to which the report runs beside the repeat (Cora 3.9M, CiteSeer 12.3M)
BESIDE_CELLS = 20_000_000


def _child(send: Any, graph: GraphData, part: Partition, cfg: Config) -> None:
    try:
        send.send(("ok", leakage_report(graph, part, cfg)))
    except BaseException:  # noqa: BLE001 - reported to the parent, which recomputes
        send.send(("error", traceback.format_exc()))
    finally:
        send.close()
        os._exit(0)


class LeakageReport:
    """Started with the repeat (``wanted`` when the algorithm is FedGCN and the report is on);
    :meth:`result` returns the report, :meth:`close` stops a child that is no longer needed."""

    def __init__(self, graph: GraphData, part: Partition, cfg: Config) -> None:
        self.wanted = cfg.algorithm == "fedgcn" and bool(getattr(cfg, "leakage_report", True))
        self._args = (graph, part, cfg)
        self._proc: Any = None
        self._recv: Any = None
        if self.wanted and self.beside(graph, cfg):
            ctx = multiprocessing.get_context("fork")
            self._recv, send = ctx.Pipe(duplex=False)
            self._proc = ctx.Process(target=_child, args=(send, graph, part, cfg),
                                     name="fedgl-leakage-report", daemon=True)
            self._proc.start()
            send.close()

    @staticmethod
    def beside(graph: GraphData, cfg: Config) -> bool:
        """Whether the report runs in a forked process beside the repeat (module docstring)."""
        return (graph.num_nodes * graph.num_features <= BESIDE_CELLS
                and torch.get_num_threads() == 1 and getattr(cfg, "runtime", "local") == "local"
                and "grpc" not in sys.modules
                and "fork" in multiprocessing.get_all_start_methods())

    def result(self) -> dict | None:
        """The report; None when not wanted."""
        if not self.wanted:
            return None
        if self._proc is not None:
            try:
                status, payload = self._recv.recv()
            except EOFError:
                status, payload = "error", "the report's process ended without a result"
            self.close()
            if status == "ok":
                return payload
        return leakage_report(*self._args)

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join()
            self._recv.close()
            self._proc = None
