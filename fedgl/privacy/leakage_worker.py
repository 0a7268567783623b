"""The leakage report in a process of its own: ``python -m fedgl.privacy.leakage_worker IN OUT``.

:mod:`fedgl.privacy.leakage_job` starts this beside a repeat's training where a CPU is idle:
a separate process runs on that CPU without taking the run's GIL (the decoder's many short
array operations hold it, so a thread beside training slows training). ``IN`` holds the
pickled ``(graph, partition, configuration as a dict)`` the parent wrote (a private temporary
file); the report is pickled to ``OUT`` (written to a temporary name, then renamed). Any
failure exits non-zero with one line on stderr; the parent then computes the report itself.
The report is the same as :func:`fedgl.privacy.leakage.leakage_report`'s in the parent
(``tests/test_leakage_in_run.py``).
"""

from __future__ import annotations

import os
import pickle
import sys


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m fedgl.privacy.leakage_worker IN OUT", file=sys.stderr)
        return 2
    source, target = argv
    try:
        import torch

        torch.set_num_threads(1)
        from fedgl.config import Config
        from fedgl.privacy.leakage import leakage_report

        with open(source, "rb") as f:
            graph, part, config = pickle.load(f)  # noqa: S301 - the parent's file, in its 0700 folder
        report = leakage_report(graph, part, Config.from_dict(config), workers=1)
        with open(target + ".part", "wb") as f:
            pickle.dump(report, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(target + ".part", target)
    except Exception as exc:  # noqa: BLE001 - one line; the parent computes it itself
        print(f"fedgl leakage worker: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
