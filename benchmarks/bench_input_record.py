"""Cost of the input record (``fedgl/privacy/inputs.py``): naming each input by content, the
one-aggregate check before every masked upload or share, the DP noise kept per input, and the
durable (fsync'ed) record in a state folder.

    FEDGL_DATA=../shared/data python benchmarks/bench_input_record.py [--dataset cora]
        [--rounds 3] [--repeats 3]

FedGCN 2-hop, 10 clients, Dirichlet β = 1, seed 0, one torch thread. For each privacy setting
(``mask``; ``robust`` with ``--secure-models``; DP ε = 8 in plaintext; ``he``, whose signed
uploads enter the record too; ``--settings`` picks some) two variants, side by
side in one process: the record in memory (the default) and in a state folder (each line
fsync'ed). Per variant: the ledger's pre-training and training seconds (median of
``--repeats``), the bytes (both directions, every phase), the seconds spent inside the record's
own work (naming inputs, aggregate ids, commits, noise draws: timed around those calls; also
per call site) and its share of the run's federated seconds, the record's size on disk, and the process's peak
RSS after the variant (cumulative). The checks add no message: the bytes of the two variants
are equal, and equal to the code before the record (tested: ``tests/test_privacy_inputs.py``).
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path

import torch

torch.set_num_threads(1)

SETTINGS = {
    "mask": {"secure_sum": "mask"},
    "robust_secure_models": {"secure_sum": "robust", "secure_models": True},
    "dp_eps8": {"dp_epsilon": 8.0},
    "he": {"secure_sum": "he"},
}


class _Timer:
    """Seconds spent inside the wrapped functions (outermost calls only)."""

    def __init__(self) -> None:
        self.seconds, self._depth = 0.0, 0
        self.by_name: dict[str, float] = {}

    def reset(self) -> None:
        self.seconds, self.by_name = 0.0, {}

    def wrap(self, fn, name: str):
        def timed(*args, **kwargs):
            self._depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    dt = time.perf_counter() - t0
                    self.seconds += dt
                    self.by_name[name] = self.by_name.get(name, 0.0) + dt
        return timed


def _instrument(timer: _Timer) -> None:
    """Time the record's work where the protocol calls it."""
    import fedgl.algorithms.fedgcn.client as fc
    import fedgl.privacy.secagg as sa
    import fedgl.privacy.secure_models as sm
    from fedgl.privacy.inputs import InputRecord

    for module, names in ((sa, ("aggregate_id", "digest", "values_hash")),
                          (sm, ("digest", "data_digest")),
                          (fc, ("digest", "feature_digest"))):
        for name in names:
            setattr(module, name, timer.wrap(getattr(module, name), name))
    for name in ("commit", "noise", "aggregate_of"):
        setattr(InputRecord, name, timer.wrap(getattr(InputRecord, name), f"record.{name}"))


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--settings", default=",".join(SETTINGS),
                    help=f"comma-separated, of {', '.join(SETTINGS)}")
    args = ap.parse_args()
    chosen = [n for n in args.settings.split(",") if n]
    if not chosen or set(chosen) - set(SETTINGS):
        raise SystemExit(f"--settings takes some of {', '.join(SETTINGS)}")

    import fedgl

    timer = _Timer()
    _instrument(timer)
    base = dict(dataset=args.dataset, clients=10, hops=2, beta=1.0, seed=0, rounds=args.rounds,
                progress=False, oracle_eval=False, leakage_report=False)
    out: dict = {"dataset": args.dataset, "rounds": args.rounds, "repeats": args.repeats,
                 "settings": {}}
    for name in chosen:
        keys = SETTINGS[name]
        rows = {}
        for variant in ("memory", "state_dir"):
            pre, train, own, parts, total_bytes, disk = [], [], [], [], None, 0
            for _ in range(args.repeats):
                with tempfile.TemporaryDirectory() as folder:
                    extra = {"state_dir": folder} if variant == "state_dir" else {}
                    timer.reset()
                    rep = fedgl.run(**base, **keys, **extra).repeats[0]
                    own.append(timer.seconds)
                    parts.append(dict(timer.by_name))
                    pre.append(rep.final["pretrain_seconds"])
                    train.append(rep.final["train_seconds"])
                    total_bytes = rep.final["pretrain_bytes"] + rep.final["train_bytes"]
                    disk = sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
            fed = statistics.median(pre) + statistics.median(train)
            rows[variant] = {"pretrain_s": round(statistics.median(pre), 4),
                             "train_s": round(statistics.median(train), 4),
                             "record_s": round(statistics.median(own), 4),
                             "record_share_of_federated_s": round(statistics.median(own) / fed, 4),
                             "record_s_by_call": {k: round(statistics.median(
                                 p.get(k, 0.0) for p in parts), 4)
                                 for k in sorted({k for p in parts for k in p})},
                             "bytes": total_bytes, "record_bytes_on_disk": disk,
                             "peak_rss_mb": round(_peak_rss_mb(), 1)}
        mem, disk_row = rows["memory"], rows["state_dir"]
        rows["state_dir_over_memory"] = {
            "federated_s": round((disk_row["pretrain_s"] + disk_row["train_s"])
                                 / (mem["pretrain_s"] + mem["train_s"]), 3),
            "bytes": disk_row["bytes"] / mem["bytes"]}
        out["settings"][name] = rows
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
