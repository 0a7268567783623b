"""Shared parts of the FedGCN Table 2 scripts (reproduce_fedgcn.py, ablation_one_hop.py).

Both run FedGCN in the paper's Appendix E.2 setting (10 clients, ``--rounds`` rounds, 3 local
steps, SGD lr 0.5, Dirichlet β, seeds 0 … ``--seeds`` − 1, the paper's metric: final-round test
accuracy pooled over the clients' local test nodes), cache every finished cell in one JSON file
(``--resume`` continues from it) and write OUT/<stem>.json and OUT/<stem>.md. This module holds
the paper's values, the run call, the cell cache, the machine record, the common command-line
options and the output writer; each script keeps its own cells and table layout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BETAS = (1.0, 100.0, 10000.0)

# Paper Table 2, mean test accuracy for β = 1 / 100 / 10000.
PAPER = {
    "cora": {"centralized": (0.8069, 0.8069, 0.8069), "0-hop": (0.6502, 0.5958, 0.5992),
             "1-hop": (0.8100, 0.8009, 0.8009), "2-hop": (0.8064, 0.8084, 0.8087)},
    "citeseer": {"centralized": (0.6914, 0.6914, 0.6914), "0-hop": (0.617, 0.5841, 0.5841),
                 "1-hop": (0.7006, 0.6891, 0.6930), "2-hop": (0.6933, 0.6953, 0.6948)},
}


def paper_value(dataset: str, method: str, beta: float) -> float | None:
    """The paper's Table 2 mean for (dataset, method, β); None for a β the paper has not."""
    return dict(zip(BETAS, PAPER[dataset][method], strict=True)).get(beta)


def run_table2(dataset: str, beta: float, args: argparse.Namespace, **config: Any) -> Any:
    """``fedgl.run`` in the Appendix E.2 setting with ``args.seeds`` repeats (seeds 0, 1, …);
    ``config`` adds the algorithm and its options (e.g. ``algorithm="fedgcn", hops=2``)."""
    import fedgl

    return fedgl.run(dataset=dataset, clients=10, rounds=args.rounds, local_steps=3, lr=0.5,
                     beta=beta, repeats=args.seeds, seed=0, progress=False, oracle_eval=False,
                     threads=args.threads, **config)


class CellCache:
    """Finished cells by key, saved to ``path`` after each new one (read back with resume)."""

    def __init__(self, path: Path, resume: bool) -> None:
        self.path = path
        self.cells: dict[str, dict] = (json.loads(path.read_text())
                                       if resume and path.is_file() else {})

    def get(self, key: str, compute: Callable[[], dict]) -> dict:
        """The cell ``key``, computed (and saved, and reported on stderr) if not cached."""
        if key not in self.cells:
            self.cells[key] = compute()
            self.path.write_text(json.dumps(self.cells, indent=1) + "\n")
            c = self.cells[key]
            print(f"{key}: {c['mean']:.4f} ± {c['std']:.4f} ({c['seconds']:.0f} s)",
                  file=sys.stderr, flush=True)
        return self.cells[key]


def run_config(args: argparse.Namespace, **extra: Any) -> dict:
    """The ``config`` record of a result: the fixed setting plus ``extra``."""
    return {"seeds": args.seeds, "rounds": args.rounds, "clients": 10, "local_steps": 3,
            "lr": 0.5, "datasets": args.datasets, **extra}


def machine(threads: int) -> dict:
    """The ``machine`` record of a result (``threads`` 0: torch's own thread count)."""
    import torch

    return {"cpu_count": os.cpu_count(), "torch_threads": threads or torch.get_num_threads(),
            "platform": platform.platform(), "torch": torch.__version__}


def parser(doc: str, datasets: list[str]) -> argparse.ArgumentParser:
    """The options both scripts take: seeds, datasets, rounds, out, resume, threads."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3, help="repeats per cell (paper: 10)")
    p.add_argument("--datasets", nargs="+", default=datasets, choices=sorted(PAPER),
                   help="datasets to run")
    p.add_argument("--rounds", type=int, default=300, help="communication rounds T")
    p.add_argument("--out", type=Path, default=Path("benchmarks/out"), help="output folder")
    p.add_argument("--resume", action="store_true", help="reuse cells already cached in OUT")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads inside each run (fedgl's default 1; 0: torch's)")
    return p


def write_outputs(result: dict, out: Path, stem: str, markdown: Callable[[dict], str],
                  t0: float) -> int:
    """Add the elapsed seconds, write OUT/<stem>.json and .md, print the JSON; exit code 0."""
    result["seconds"] = time.perf_counter() - t0
    text = json.dumps(result, indent=2)
    (out / f"{stem}.json").write_text(text + "\n")
    (out / f"{stem}.md").write_text(markdown(result))
    print(text)
    return 0
