"""``fedgl sweep``: a grid of runs from one YAML file, resumable, optionally in parallel.

A sweep file::

    out: runs/my-sweep          # results folder (``--out`` overrides)
    parallel: 2                 # cells run at once, each in its own process (default 1)
    base:                       # config keys every cell shares
      dataset: cora
      rounds: 100
    grid:                       # every combination of these values is one cell
      algorithm: [fedgcn, bns-gcn, fedsage-plus]
      beta: [1, 10000]
      seed: [0, 1, 2]
      hops: [0, 1, 2]           # an algorithm's own key varies only that algorithm's cells

A cell's config is ``base`` plus its grid values, minus the keys the cell does not read: options
of *other* algorithms, common keys its algorithm ignores, and partition keys its partition ignores
(so ``hops`` multiplies only the FedGCN cells and ``beta`` only the Dirichlet ones; cells that
become identical run once). A key that no cell reads is an error, as is an ``--only`` filter
that names a key no cell sets or matches no cell. Cell ``c``
writes ``OUT/cells/<name>/result.json``; a cell whose ``result.json`` exists is finished and is
skipped on the next invocation (so an interrupted sweep resumes where it stopped). A failed cell
leaves ``error.txt`` and the sweep goes on. At the end ``OUT/sweep.csv`` has one row per cell:
its grid values, status, folder and the mean and std of every summary metric.
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import io
import itertools
import json
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedgl.errors import ConfigError
from fedgl.results import SUMMARY_METRICS, RunResult, _atomic_write

SWEEP_KEYS = ("out", "parallel", "base", "grid")


@dataclass(frozen=True)
class Cell:
    """One grid point: its grid values (what varies) and its full config."""

    name: str
    values: dict[str, Any]
    config: dict[str, Any]


def load_sweep(path: str | Path) -> dict[str, Any]:
    """Read and check a sweep file (see module docstring)."""
    p = Path(path)
    try:
        spec = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read sweep file {p}: {exc.strerror}; check the path") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"sweep file {p} is not valid YAML ({exc.__class__.__name__}); "
                          "fix its syntax") from exc
    if not isinstance(spec, dict):
        raise ConfigError(f"sweep file {p} must be a mapping with 'base' and 'grid'")
    unknown = set(spec) - set(SWEEP_KEYS)
    if unknown:
        raise ConfigError(f"unknown sweep keys {sorted(unknown)} in {p}; use {', '.join(SWEEP_KEYS)}")
    grid = spec.get("grid") or {}
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise ConfigError(f"'grid' in {p} must map config keys to non-empty lists of values")
    if not isinstance(spec.get("base") or {}, dict):
        raise ConfigError(f"'base' in {p} must be a mapping of config keys")
    return spec


def expand(spec: dict[str, Any]) -> list[Cell]:
    """Every cell of the grid, each config validated (a bad key fails before anything runs).

    A cell drops the keys it does not read: another algorithm's options, common keys its
    algorithm ignores (e.g. ``beta`` for a vertical algorithm) and partition keys its partition
    ignores (``beta`` is read by ``dirichlet`` only). A ``base`` or ``grid`` key that no cell
    reads is an error naming who would read it."""
    from fedgl.config import Config

    base, grid = dict(spec.get("base") or {}), dict(spec.get("grid") or {})
    from fedgl.config.registry import get_spec

    for algorithm in {*grid.get("algorithm", []), base.get("algorithm", "fedgcn")}:
        get_spec(str(algorithm))  # registers a plugin algorithm, so its options are known
    cells: dict[str, Cell] = {}
    read: set[str] = set()
    for combo in itertools.product(*grid.values()):
        values = dict(zip(grid, combo, strict=True))
        merged = {**base, **values}
        unread = _unread_by(merged)
        read |= set(merged) - unread
        values = {k: v for k, v in values.items() if k not in unread}
        config = {k: v for k, v in merged.items() if k not in unread}
        config.update(progress=False)
        Config.from_dict(config, source="sweep cell")
        name = cell_name(values)
        cells.setdefault(name, Cell(name, values, config))
    for where, keys in (("grid", grid), ("base", base)):
        for key in keys:
            if key not in read:
                raise ConfigError(_unread_message(key, where, grid, base))
    return list(cells.values())


def _unread_by(config: dict[str, Any]) -> set[str]:
    """The keys of one cell's ``config`` that its algorithm and partition do not read."""
    from fedgl.config.registry import get_spec, load_all
    from fedgl.config.sections import PARTITION_KEYS

    spec = get_spec(str(config.get("algorithm", "fedgcn")))
    own = set(spec.option_names())
    options = {name for s in load_all() for name in s.option_names()}
    unread = {k for k in config if k in options and k not in own}
    unread |= set(config) & set(spec.unread_keys())
    if spec.setting == "horizontal":
        method = config.get("partition", "dirichlet")
        unread |= {k for k, readers in PARTITION_KEYS.items()
                   if k in config and method not in readers}
    return unread


def _unread_message(key: str, where: str, grid: dict[str, Any], base: dict[str, Any]) -> str:
    """Why no cell reads ``key``, and the fix."""
    from fedgl.config.registry import readers_of
    from fedgl.config.sections import PARTITION_KEYS

    algorithms = sorted({str(a) for a in grid.get("algorithm", [base.get("algorithm", "fedgcn")])})
    readers = readers_of(key)
    if readers:
        who = (f"only {readers[0]} reads it; add {readers[0]} to the grid's algorithms"
               if len(readers) == 1 else
               f"only {', '.join(readers)} read it; add one of them to the grid's algorithms")
    elif key in PARTITION_KEYS:
        who = (f"it is read by the {' and '.join(PARTITION_KEYS[key])} partition only; add "
               f"partition: {PARTITION_KEYS[key][0]}")
    else:
        who = "the grid's algorithms ignore it"
    return (f"sweep {where} key '{key}' is read by no cell (algorithm "
            f"{', '.join(algorithms)}): {who}, or drop '{key}'")


def cell_name(values: dict[str, Any]) -> str:
    """A readable, filesystem-safe folder name, unique per set of grid values."""
    text = ",".join(f"{k}={v}" for k, v in values.items())
    safe = "".join(ch if ch.isalnum() or ch in "=.,-_" else "_" for ch in text)[:100]
    return f"{safe or 'cell'}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def run_cell(config: dict[str, Any], folder: str) -> str:
    """Run one cell into ``folder`` (in a worker process or inline); 'done' or 'failed'."""
    from fedgl.api import run

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    try:
        # an unfinished cell's folder (no result.json) is replaced
        run({**config, "out": str(out)}, overwrite=True)
        (out / "error.txt").unlink(missing_ok=True)
        return "done"
    except Exception:  # noqa: BLE001 - recorded per cell; the sweep goes on
        (out / "error.txt").write_text(traceback.format_exc())
        return "failed"


def parse_only(text: str | None) -> dict[str, str]:
    """``'algorithm=fedgcn,seed=0|1'`` -> ``{'algorithm': 'fedgcn', 'seed': '0|1'}`` (``|``: any
    of these values)."""
    if not text:
        return {}
    pairs = [item.split("=", 1) for item in text.split(",")]
    if not all(len(p) == 2 and p[0].strip() for p in pairs):
        raise ConfigError(f"--only {text!r}: use KEY=VALUE pairs separated by commas, "
                          "e.g. algorithm=fedgcn,hops=2")
    return {k.strip(): v.strip() for k, v in pairs}


def matches(cell: Cell, only: dict[str, str]) -> bool:
    """Whether ``cell``'s config has, for every ``only`` key, one of its ``|``-separated values
    (numbers compared as numbers: 1 == 1.0)."""
    def same(a: Any, b: str) -> bool:
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return str(a) == b
    return all(k in cell.config and any(same(cell.config[k], alt) for alt in v.split("|"))
               for k, v in only.items())


def select(cells: list[Cell], only: dict[str, str]) -> list[Cell]:
    """The cells matching ``only``; a key that no cell sets (with a did-you-mean) or a filter
    that matches no cell of the grid is a :class:`ConfigError`."""
    keys = sorted({k for c in cells for k in c.config} - {"progress"})
    for key in only:
        if key not in keys:
            close = difflib.get_close_matches(key, keys, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"--only key '{key}' is not set by any cell of the sweep{hint}; "
                              f"use one of {', '.join(keys)}")
    chosen = [c for c in cells if matches(c, only)]
    if not chosen:
        seen = {k: sorted({str(c.config[k]) for c in cells if k in c.config}) for k in only}
        values = "; ".join(f"{k}: {', '.join(v)}" for k, v in seen.items())
        raise ConfigError(f"--only {','.join(f'{k}={v}' for k, v in only.items())} matches no "
                          f"cell of the sweep (the cells have {values}); fix the filter")
    return chosen


def sweep(spec: dict[str, Any], *, out: str | Path | None = None, parallel: int | None = None,
          log: Any = None, only: dict[str, str] | None = None) -> Path:
    """Run the unfinished cells of ``spec`` (those matching ``only``, if given: a part of the
    grid, e.g. the cells that need a lock) and write ``OUT/sweep.csv`` for the whole grid;
    returns OUT."""
    root = Path(out or spec.get("out") or "runs/sweep")
    workers = int(parallel if parallel is not None else spec.get("parallel", 1))
    if workers < 1:
        raise ConfigError(f"parallel must be >= 1 (got {workers})")
    cells = expand(spec)
    chosen = {c.name for c in select(cells, only)} if only else None
    root.mkdir(parents=True, exist_ok=True)
    _atomic_write(root / "sweep.yaml", yaml.safe_dump(spec, sort_keys=False))
    _atomic_write(root / "cells.json", json.dumps({c.name: c.values for c in cells}, indent=1))
    todo = [c for c in cells if not (root / "cells" / c.name / "result.json").is_file()]
    say = log or (lambda msg: None)
    say(f"{len(cells)} cells, {len(cells) - len(todo)} finished, {len(todo)} to run")
    if chosen is not None:
        todo = [c for c in todo if c.name in chosen]
        say(f"--only {only}: {len(chosen)} cells match, {len(todo)} of them to run")
    if workers == 1:
        for c in todo:
            say(f"{c.name}: {run_cell(c.config, str(root / 'cells' / c.name))}")
    else:
        import multiprocessing as mp

        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            futures = {c.name: pool.submit(run_cell, c.config, str(root / "cells" / c.name))
                       for c in todo}
            for name, fut in futures.items():
                say(f"{name}: {fut.result()}")
    write_csv(root, cells)
    return root


def write_csv(root: Path, cells: list[Cell]) -> Path:
    """``sweep.csv``: grid values, status, folder, mean and std of every summary metric."""
    keys = list(dict.fromkeys(k for c in cells for k in c.values))
    metrics = list(SUMMARY_METRICS)
    header = [*keys, "status", "folder", "repeats",
              *[f"{m}_{s}" for m in metrics for s in ("mean", "std")]]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for c in cells:
        folder = root / "cells" / c.name
        row: list[Any] = [c.values.get(k, "") for k in keys]
        if (folder / "result.json").is_file():
            res = RunResult.load(folder)
            row += ["done", f"cells/{c.name}", len(res.repeats)]
            for m in metrics:
                s = res.summary.get(m)
                row += [s["mean"], s["std"]] if s else ["", ""]
        else:
            row += ["failed" if (folder / "error.txt").is_file() else "missing",
                    f"cells/{c.name}", 0] + [""] * (2 * len(metrics))
        w.writerow(row)
    _atomic_write(root / "sweep.csv", buf.getvalue())
    return root / "sweep.csv"

