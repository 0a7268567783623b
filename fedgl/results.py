"""Results are data: :class:`RunResult` and its JSON/CSV writers.

``result.json`` holds the config, the environment, every repeat (partition statistics, final
metrics, ledger, wall times, peak memory, full per-round history) and a summary of mean ± std over
repeats. ``history.csv`` holds one row per (repeat, evaluated round).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import platform
import statistics
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HISTORY_COLUMNS = ("repeat", "seed", "round", "train_loss", "train_acc", "val_acc", "test_acc",
                   "oracle_train_acc", "oracle_val_acc", "oracle_test_acc", "train_bytes",
                   "sim_seconds")

# Metrics summarised over repeats, in display order, with a human label.
SUMMARY_METRICS = {
    "test_acc": "test acc (paper metric, final)",
    "selected_test_acc": "test acc at best val round",
    "oracle_test_acc": "oracle: global model test acc",
    "pretrain_bytes": "pre-training bytes",
    "train_bytes": "training bytes",
    "pretrain_seconds": "pre-training seconds",
    "train_seconds": "training seconds",
    "sim_seconds": "simulated training seconds (network model)",
}


@dataclass
class RepeatResult:
    """One independent run (one seed)."""

    repeat: int
    seed: int
    partition: dict[str, Any]
    history: list[dict[str, float]]
    final: dict[str, Any]
    ledger: dict[str, Any]
    seconds: dict[str, float]
    peak_rss_mb: float
    extra: dict[str, Any] = field(default_factory=dict)
    #: the model the repeat left (:meth:`fedgl.trained.ModelTracker.record`): plain tensors,
    #: written to ``<out>/model/`` and kept in checkpoints, never in ``result.json``
    model: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The repeat as ``result.json`` records it (without the model's tensors)."""
        model, self.model = self.model, None
        try:
            out = asdict(self)
        finally:
            self.model = model
        out.pop("model")
        return out


@dataclass
class RunResult:
    """Everything a run produced. ``summary[metric]`` has ``mean``, ``std`` and ``values``; the
    std is the population standard deviation over repeats (``statistics.pstdev``, 0 for one
    repeat). ``summary["diverged"]``, present only if a repeat diverged under
    ``allow_divergence``, has the share of such repeats and their indices."""

    config: dict[str, Any]
    environment: dict[str, Any]
    repeats: list[RepeatResult]
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.summary:
            self.summary = summarize(self.repeats)

    @property
    def model(self) -> dict[str, Any] | None:
        """The model of the first repeat that left one (see :attr:`RepeatResult.model`)."""
        return next((r.model for r in self.repeats if r.model is not None), None)

    # ------------------------------------------------------------------ accessors
    def mean(self, metric: str) -> float:
        return self.summary[metric]["mean"]

    def std(self, metric: str) -> float:
        return self.summary[metric]["std"]

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config, "environment": self.environment,
                "summary": self.summary, "repeats": [r.to_dict() for r in self.repeats]}

    def history_rows(self) -> list[dict[str, Any]]:
        rows = []
        for rep in self.repeats:
            for h in rep.history:
                rows.append({"repeat": rep.repeat, "seed": rep.seed,
                             **{c: h.get(c, "") for c in HISTORY_COLUMNS[2:]}})
        return rows

    # ------------------------------------------------------------------ writers
    def save(self, out_dir: str | Path) -> Path:
        """Write ``result.json`` and ``history.csv``; each file appears whole or not at all."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=HISTORY_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.history_rows())
        _atomic_write(out / "history.csv", buf.getvalue())
        _atomic_write(out / "result.json", json.dumps(_json_safe(self.to_dict()), indent=2) + "\n")
        return out

    @classmethod
    def load(cls, path: str | Path) -> RunResult:
        p = Path(path)
        data = json.loads((p / "result.json" if p.is_dir() else p).read_text())
        reps = [RepeatResult(**r) for r in data["repeats"]]
        return cls(data["config"], data["environment"], reps, data["summary"])


def summarize(repeats: list[RepeatResult]) -> dict[str, dict[str, Any]]:
    out = {}
    for metric in SUMMARY_METRICS:
        values = [r.final[metric] for r in repeats if metric in r.final]
        values = [v for v in values if v is not None and not _isnan(v)]
        if not values:
            continue
        out[metric] = {"mean": statistics.fmean(values),
                       "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
                       "values": values}
    diverged = [r.repeat for r in repeats if r.final.get("diverged_round") is not None]
    if diverged:   # --allow-divergence: which repeats stopped on a non-finite loss or model
        out["diverged"] = {"mean": len(diverged) / len(repeats), "std": 0.0, "values": diverged}
    return out


def environment(seed: int, device: str) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    import numpy
    import torch

    from fedgl.version import __version__

    try:   # from the package metadata: importing PyG costs seconds a GCN run does not need
        pyg = version("torch_geometric")
    except PackageNotFoundError:  # pragma: no cover - a core dependency
        pyg = "not installed"
    return {"fedgl": __version__, "python": platform.python_version(),
            "torch": torch.__version__, "torch_geometric": pyg,
            "numpy": numpy.__version__, "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "device": device, "seed": seed, **device_facts(device)}


def device_facts(device: str) -> dict[str, Any]:
    """The accelerator a run used: on ``cuda`` its name and the peak GPU memory this process
    allocated (``torch.cuda.max_memory_allocated``) and reserved (the caching allocator's
    pool), in MiB; nothing on the CPU (and nothing when CUDA is not initialised)."""
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return {}
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    mib = 2.0 ** 20
    return {"device_name": torch.cuda.get_device_name(index),
            "gpu_peak_allocated_mb": round(torch.cuda.max_memory_allocated(index) / mib, 1),
            "gpu_peak_reserved_mb": round(torch.cuda.max_memory_reserved(index) / mib, 1)}


def _isnan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    return obj


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp creates 0600; results get the umask's mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
