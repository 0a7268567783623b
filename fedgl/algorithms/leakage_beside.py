"""The leakage report of a FedGCN repeat, the experimenter's analysis beside the federation.

The report (:func:`fedgl.privacy.leakage.leakage_report`) reads the graph and the partition; it
does not need the trained model. It is computed after the repeat, once the parties are gone, so
its memory does not add to theirs.

Computing it in a forked process during training was tried and taken out: in a test process a
forked report hung (its child waited for ever, most likely on a lock another thread of the
parent held at the fork), and a fork in a process with threads cannot be made safe in general.
"""

from __future__ import annotations

from fedgl.config import Config
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition
from fedgl.privacy.leakage import leakage_report


class LeakageReport:
    """Made with the repeat (``wanted`` when the algorithm is FedGCN and the report is on);
    :meth:`result` computes the report."""

    def __init__(self, graph: GraphData, part: Partition, cfg: Config) -> None:
        self.wanted = cfg.algorithm == "fedgcn" and bool(getattr(cfg, "leakage_report", True))
        self._args = (graph, part, cfg)

    def result(self) -> dict | None:
        """The report; None when not wanted."""
        return leakage_report(*self._args) if self.wanted else None

    def close(self) -> None:
        """Nothing is held (kept so that the runner's clean-up reads the same)."""
