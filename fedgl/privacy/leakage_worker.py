"""The leakage report in a process of its own: ``python -m fedgl.privacy.leakage_worker IN OUT``.

:mod:`fedgl.privacy.leakage_job` starts this beside a repeat's training where a CPU is idle:
a separate process runs on that CPU without taking the run's GIL (the decoder's many short
array operations hold it, so a thread beside training slows training). ``IN`` holds what the
report reads, as NumPy arrays, pickled by the parent (a private temporary file): the
features, the edges, the number of nodes, the owners, the number of clients and the
configuration as a dict (:func:`inputs`); the report is pickled to ``OUT`` (written to a
temporary name, then renamed). The process loads NumPy, SciPy and the report's modules, not
PyTorch (a second of start-up). Any failure exits non-zero with one line on stderr; the parent
then computes the report itself. The report is the same as
:func:`fedgl.privacy.leakage.leakage_report`'s in the parent (``tests/test_leakage_in_run.py``).
"""

from __future__ import annotations

import os
import pickle
import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GraphArrays:
    """What the report reads of a graph: ``x`` [nodes, features] and ``edge_index`` [2,
    edges] as arrays."""

    x: Any
    edge_index: Any
    num_nodes: int


@dataclass(frozen=True)
class Owners:
    """What the report reads of a partition."""

    owner: Any
    num_clients: int


def inputs(graph: Any, part: Any, config: dict[str, Any]) -> tuple:
    """The worker's input, from the run's graph, partition and configuration dict."""
    import numpy as np

    from fedgl.privacy.leakage import _array

    return (_array(graph.x), _array(graph.edge_index), int(graph.num_nodes),
            np.asarray(part.owner), int(part.num_clients), config)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m fedgl.privacy.leakage_worker IN OUT", file=sys.stderr)
        return 2
    source, target = argv
    try:
        from fedgl.config import Config
        from fedgl.privacy.leakage import leakage_report

        with open(source, "rb") as f:
            x, edges, nodes, owner, clients, config = pickle.load(f)  # noqa: S301 - the parent's file, in its 0700 folder
        report = leakage_report(GraphArrays(x, edges, nodes), Owners(owner, clients),
                                Config.from_dict(config), workers=1)
        with open(target + ".part", "wb") as f:
            pickle.dump(report, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(target + ".part", target)
    except Exception as exc:  # noqa: BLE001 - one line; the parent computes it itself
        print(f"fedgl leakage worker: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
