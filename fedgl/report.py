"""Tables and plots made from results (never from printed output)."""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from fedgl._optional import require
from fedgl.report_figures import method_label, split_label


def plot_label_histogram(label_counts: list[list[int]], path: str | Path, *,
                         title: str = "") -> Path:
    """Stacked bar chart of each client's label counts (FedGCN paper, Figure 3 style)."""
    matplotlib = require("matplotlib", feature="plots (fedgl report, fedgl partition --plot)")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    counts = np.asarray(label_counts)
    clients, classes = counts.shape
    fig, ax = plt.subplots(figsize=(min(12.0, max(4.0, 0.5 * clients + 2)), 3.5))
    bottom = np.zeros(clients)
    cmap = plt.get_cmap("tab10" if classes <= 10 else "tab20")
    for c in range(classes):
        ax.bar(np.arange(clients), counts[:, c], bottom=bottom, color=cmap(c % cmap.N),
               label=f"class {c}")
        bottom += counts[:, c]
    ax.set_xlabel("client")
    ax.set_ylabel("nodes")
    ax.set_xticks(np.arange(0, clients, max(1, clients // 20)))
    ax.set_title(title, fontsize="medium")
    if classes <= 20:  # more classes make a legend taller than the plot; colours still differ
        ax.legend(fontsize="small", ncol=1 if classes <= 10 else 2, bbox_to_anchor=(1.02, 1),
                  loc="upper left")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    return _save(fig, out, dpi=120)


# ---------------------------------------------------------------------------- run / sweep reports
#: metrics of a report table: (key, header, formatter of mean ± std)
REPORT_METRICS = (
    ("test_acc", "test acc (final)", "{:.4f} ± {:.4f}"),
    ("selected_test_acc", "test acc (best val)", "{:.4f} ± {:.4f}"),
    ("convergence_round", "rounds to 99% of best", "{:.1f} ± {:.1f}"),
    ("bytes_to_convergence", "MB to convergence", "MB"),
    ("pretrain_bytes", "MB pre-training", "MB"),
    ("total_bytes", "MB total", "MB"),
)


PARTITION_KEYS = ("dataset", "partition", "beta", "mcmahan_p", "clients", "min_client_size")


def bytes_to_convergence(history: list[dict], final: dict) -> tuple[int, float]:
    """(round, bytes) at the first evaluated round whose test accuracy reaches 99 % of the run's
    best. Bytes = pre-training bytes + round x the mean training bytes per round (exact for a
    constant per-round cost)."""
    evaluated = [h for h in history if h.get("test_acc") is not None]
    if not evaluated:
        return 0, float(final.get("pretrain_bytes") or 0)
    best = max(h["test_acc"] for h in evaluated)
    first = next(h for h in evaluated if h["test_acc"] >= 0.99 * best)
    per_round = (final.get("train_bytes") or 0) / max(1, final.get("rounds") or 1)
    return int(first["round"]), float(final.get("pretrain_bytes") or 0) + per_round * first["round"]


def rounds_to_target(history: list[dict], target: float | None) -> int | None:
    """The first evaluated round whose test accuracy is >= ``target`` (None if none is);
    ``target`` None: 99 % of the run's best (the convergence round of :func:`bytes_to_convergence`)."""
    evaluated = [h for h in history if h.get("test_acc") is not None]
    if not evaluated:
        return None
    bar = 0.99 * max(h["test_acc"] for h in evaluated) if target is None else target
    return next((int(h["round"]) for h in evaluated if h["test_acc"] >= bar), None)


def repeat_metrics(rep: dict, target: float | None = None) -> dict[str, Any]:
    """The report's per-repeat numbers, from one repeat of a result file."""
    final = rep["final"]
    rnd, nbytes = bytes_to_convergence(rep["history"], final)
    return {"test_acc": final.get("test_acc"), "selected_test_acc": final.get("selected_test_acc"),
            "convergence_round": float(rnd), "bytes_to_convergence": nbytes,
            "pretrain_bytes": float(final.get("pretrain_bytes") or 0),
            "total_bytes": float((final.get("pretrain_bytes") or 0)
                                 + (final.get("train_bytes") or 0)),
            "rounds_to_target": rounds_to_target(rep["history"], target)}


def load_entries(path: str | Path) -> list[tuple[dict[str, Any], dict]]:
    """(grid values, result.json dict) for a run folder or every finished cell of a sweep."""
    import json

    root = Path(path)
    if (root / "result.json").is_file():
        data = json.loads((root / "result.json").read_text())
        return [({"algorithm": data["config"].get("algorithm", "run")}, data)]
    if (root / "cells.json").is_file():
        out = []
        for name, values in json.loads((root / "cells.json").read_text()).items():
            f = root / "cells" / name / "result.json"
            if f.is_file():
                out.append((values, json.loads(f.read_text())))
        return out
    from fedgl.errors import ConfigError

    raise ConfigError(f"{root} holds neither result.json nor cells.json; pass a run folder "
                      "(fedgl run --out) or a sweep folder (fedgl sweep)")


def group_entries(entries: list[tuple[dict[str, Any], dict]],
                  target: float | None = None) -> list[dict[str, Any]]:
    """Pool the repeats of cells that differ only in ``seed``; one group per setting, with its
    label, grid values, first config, repeats, per-repeat metrics and their mean ± std."""
    groups: dict[str, dict[str, Any]] = {}
    varying = [k for k in dict.fromkeys(k for v, _ in entries for k in v)
               if k != "seed" and len({str(v.get(k)) for v, _ in entries}) > 1]
    for values, data in entries:
        key_values = {k: values.get(k) for k in values if k != "seed"}
        label = ", ".join(f"{k}={key_values[k]}" for k in key_values if k in varying) or \
            str(values.get("algorithm", "run"))
        shown = {k: key_values[k] for k in key_values if k in varying}
        g = groups.setdefault(label, {"label": label, "values": key_values, "repeats": [],
                                      "config": data["config"],
                                      "display": method_label(shown) if shown else label})
        g["repeats"] += data["repeats"]
    for g in groups.values():
        per = g["per_repeat"] = [repeat_metrics(r, target) for r in g["repeats"]]
        g["metrics"] = {}
        for key, _, _ in REPORT_METRICS:
            vals = [p[key] for p in per if p[key] is not None and p[key] == p[key]]
            if vals:
                g["metrics"][key] = {"mean": statistics.fmean(vals),
                                     "std": statistics.pstdev(vals) if len(vals) > 1 else 0.0,
                                     "values": vals}
    return list(groups.values())


def _cell(stat: dict | None, fmt: str) -> str:
    if stat is None:
        return "—"
    if fmt == "MB":
        return f"{stat['mean'] / 1e6:.3f} ± {stat['std'] / 1e6:.3f}"
    return fmt.format(stat["mean"], stat["std"])


def _reached(g: dict[str, Any]) -> str:
    vals = [p["rounds_to_target"] for p in g["per_repeat"] if p["rounds_to_target"] is not None]
    n = len(g["per_repeat"])
    if not vals:
        return f"— (0/{n})"
    sd = statistics.pstdev(vals) if len(vals) > 1 else 0.0
    return f"{statistics.fmean(vals):.1f} ± {sd:.1f} ({len(vals)}/{n})"


def markdown_table(groups: list[dict[str, Any]], target: float | None = None) -> str:
    """One row per setting: mean ± std of :data:`REPORT_METRICS`, plus (with a ``target``) the
    rounds until the test accuracy first reaches it, over the repeats that did (k/n)."""
    head = ["setting", "repeats", *[h for _, h, _ in REPORT_METRICS]]
    if target is not None:
        head.append(f"rounds to test acc ≥ {target:g} (reached)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in groups:
        row = [g["label"], str(len(g["repeats"])),
               *[_cell(g["metrics"].get(k), f) for k, _, f in REPORT_METRICS]]
        if target is not None:
            row.append(_reached(g))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _save(fig: Any, path: Path, dpi: int = 100) -> Path:
    """Write ``fig`` to ``path`` atomically (a temporary file renamed into place) and close it."""
    import matplotlib.pyplot as plt

    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=path.suffix)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=dpi)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would make the plot private
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)
    return path


#: more settings than this make an unreadable accuracy-vs-rounds plot; it is left out
MAX_ROUND_LINES = 12


def plot_accuracy_vs_rounds(groups: list[dict[str, Any]], path: Path) -> Path | None:
    """Mean test accuracy over repeats at every evaluated round, one line per setting (None when
    there are more than :data:`MAX_ROUND_LINES` settings)."""
    matplotlib = require("matplotlib", feature="plots (fedgl report, fedgl partition --plot)")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    if len(groups) > MAX_ROUND_LINES:
        return None
    fig, ax = plt.subplots(figsize=(9.5, 4.2))
    for g in groups:
        by_round: dict[int, list[float]] = {}
        for rep in g["repeats"]:
            for h in rep["history"]:
                if h.get("test_acc") is not None:
                    by_round.setdefault(int(h["round"]), []).append(h["test_acc"])
        rounds = sorted(by_round)
        ax.plot(rounds, [np.mean(by_round[r]) for r in rounds], label=g["display"])
    return _finish(fig, ax, path, "round", "test accuracy (mean over repeats)",
                   "Test accuracy vs rounds" + _common_split(groups))


def _finish(fig, ax, path: Path, xlabel: str, ylabel: str, title: str) -> Path:
    """Label, grid and legend one single-panel plot, then save it."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    _legend_outside(ax)
    fig.tight_layout()
    return _save(fig, path)


def _common_split(groups: list[dict[str, Any]]) -> str:
    """' (cora, Dirichlet β=1, 10 clients)' when every group has that split; else ''."""
    keys = ("dataset", "partition", "beta", "mcmahan_p", "clients")
    splits = {tuple(str(g["config"].get(k)) for k in keys) for g in groups}
    if len(splits) != 1 or not groups:
        return ""
    cfg = groups[0]["config"]
    return f" ({split_label({'dataset': cfg['dataset']}, cfg)}, {cfg['clients']} clients)"


def _legend_outside(ax: Any) -> None:
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)


def plot_accuracy_vs_bytes(groups: list[dict[str, Any]], path: Path) -> Path | None:
    """Final test accuracy vs bytes communicated until convergence (FedGCN paper, Figure 4);
    None when there are more than twice :data:`MAX_ROUND_LINES` settings (an unreadable
    legend) or no setting communicated at all.

    A setting that sent no bytes (a centralised run) has no place on the log axis: it is drawn
    as a dashed horizontal line at its accuracy, and its legend entry says so."""
    if len(groups) > 2 * MAX_ROUND_LINES:
        return None
    points = [(g, g["metrics"].get("test_acc"), g["metrics"].get("bytes_to_convergence"))
              for g in groups]
    points = [(g, acc, nb) for g, acc, nb in points if acc is not None and nb is not None]
    if not any(nb["mean"] > 0 for _, _, nb in points):
        return None
    matplotlib = require("matplotlib", feature="plots (fedgl report, fedgl partition --plot)")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.5, 4.2))
    for g, acc, nb in points:
        if nb["mean"] > 0:
            ax.errorbar([nb["mean"]], [acc["mean"]], yerr=[acc["std"]], fmt="o", ms=7,
                        capsize=3, label=g["display"])
        else:
            ax.axhline(acc["mean"], ls="--", lw=1, color="grey",
                       label=f"{g['display']} (0 bytes: not on the log axis; its accuracy)")
    ax.set_xscale("log")
    return _finish(fig, ax, path, "bytes communicated until convergence (log scale)",
                   "test accuracy", "Accuracy vs communication" + _common_split(groups))


def label_plot_name(config: dict[str, Any], taken: set[str]) -> str:
    """A file name that says what a label histogram shows, e.g.
    ``labels_per_client_cora_dirichlet_beta1_10clients.png`` (``_2``, ... when taken)."""
    method = str(config.get("partition", "dirichlet"))
    knob = {"dirichlet": f"_beta{config.get('beta', 1):g}",
            "p-split": f"_p{config.get('mcmahan_p', 0.5):g}"}.get(method, "")
    text = (f"labels_per_client_{config.get('dataset', 'data')}_{method}{knob}_"
            f"{config.get('clients', 0)}clients")
    stem = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)
    name, k = f"{stem}.png", 2
    while name in taken:
        name, k = f"{stem}_{k}.png", k + 1
    taken.add(name)
    return name


def write_report(path: str | Path | list[str | Path], out: str | Path | None = None, *,
                 target: float | None = None) -> Path:
    """Tables (report.md, report.json), the figures' numbers (figures.json) and plots (PNG) for
    a run or sweep folder, or several together (then ``out`` is required). ``target``: the test
    accuracy whose first reaching round the table and the i.i.d.-control figure show (None:
    99 % of each run's best)."""
    import json

    from fedgl import report_figures as rf

    paths = [Path(p) for p in (path if isinstance(path, list) else [path])]
    if len(paths) > 1 and out is None:
        from fedgl.errors import ConfigError

        raise ConfigError("a report of several folders needs --out (where to write it)")
    entries = [e for p in paths for e in load_entries(p)]
    path = ", ".join(str(p) for p in paths)
    dest = Path(out) if out is not None else paths[0] / "report"
    dest.mkdir(parents=True, exist_ok=True)
    groups = group_entries(entries, target)
    figures = {"accuracy_vs_clients": rf.clients_series(groups),
               "rounds_vs_control": rf.control_series(groups, target)}
    plots = [plot_accuracy_vs_rounds(groups, dest / "accuracy_vs_rounds.png"),
             plot_accuracy_vs_bytes(groups, dest / "accuracy_vs_bytes.png"),
             rf.plot_accuracy_vs_clients(figures["accuracy_vs_clients"],
                                         dest / "accuracy_vs_clients.png"),
             rf.plot_rounds_vs_control(figures["rounds_vs_control"],
                                       dest / "rounds_vs_control.png")]
    seen: set[str] = set()
    names: set[str] = set()
    for g in groups:
        labels = g["repeats"][0]["partition"].get("labels") if g["repeats"] else None
        # one client (a centralised run) has no split to show
        if labels and len(labels) > 1 and json.dumps(labels) not in seen and len(seen) < 6:
            seen.add(json.dumps(labels))
            split = ", ".join(f"{k}={v}" for k, v in g["values"].items() if k in PARTITION_KEYS)
            plots.append(plot_label_histogram(labels, dest / label_plot_name(g["config"], names),
                                              title=f"labels per client\n{split}"))
    made = [p for p in plots if p is not None]
    md = ["# fedgl report", "", f"Source: `{path}` ({len(entries)} result files; repeats of "
          "cells that differ only in seed are pooled; mean ± population std).", "",
          markdown_table(groups, target), "", *[f"![{p.stem}]({p.name})" for p in made], ""]
    (dest / "report.md").write_text("\n".join(md))
    (dest / "report.json").write_text(json.dumps(
        [{"label": g["label"], "values": g["values"], "repeats": len(g["repeats"]),
          "metrics": g["metrics"]} for g in groups], indent=1, default=str))
    (dest / "figures.json").write_text(json.dumps(figures, indent=1, default=str))
    return dest
