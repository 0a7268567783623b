"""The FedGCN paper's sweep figures, as data first and plots second.

Each figure is computed by a *series* function from the report's groups (settings whose seeds
are pooled, see :func:`fedgl.report.group_entries`) and only then drawn, so the numbers a plot
shows are exactly the numbers ``report.json`` stores under ``figures`` (and a test compares them
with the result files).

* :func:`clients_series` — test accuracy vs number of clients K (paper Figure 5): one panel per
  data split (e.g. Dirichlet β = 1, iid), one line per method (e.g. FedGCN 0/1/2-hop); a point is
  ``[K, mean, std, repeats]`` of the final-round test accuracy.
* :func:`control_series` — convergence time and communication vs the i.i.d. control (appendix
  Figure 1): x = McMahan's ``p`` (p-split) or Dirichlet β; left, rounds until the test accuracy
  first reaches the target, ``[x, mean, std, reached, repeats]`` over the repeats that reached it
  (target ``None``: 99 % of the run's own best, the report's convergence round); right, the
  pre-training bytes ``[x, mean, std]`` (FedGCN's one communication round; per-round methods
  have 0 there and their cost in the training bytes).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from fedgl._optional import require

#: keys that name the data split (panels), never a method
SPLIT_KEYS = ("dataset", "partition", "beta", "mcmahan_p")
#: i.i.d. controls, in order of preference when several vary
CONTROL_KEYS = ("mcmahan_p", "beta")


def method_keys() -> set[str]:
    """``algorithm`` and every algorithm's own option (``hops``, ``boundary_rate`` ...)."""
    from fedgl.config.registry import load_all

    return {"algorithm"} | {name for s in load_all() for name in s.option_names()}


#: how plots name algorithms (the CLI name otherwise)
DISPLAY_NAMES = {"fedgcn": "FedGCN", "bns-gcn": "BNS-GCN (BDS-GCN)", "fedsage-plus": "FedSage+",
                 "distributed-gcn": "Distributed GCN"}


def method_label(values: dict[str, Any]) -> str:
    """'FedGCN 2-hop' for fedgcn cells, else the algorithm's name plus its other varying
    options (and any other key given)."""
    algo = str(values.get("algorithm", "fedgcn"))
    rest = {k: v for k, v in values.items() if k not in ("algorithm", "hops", "one_hop_variant")}
    head = (f"FedGCN {values['hops']}-hop" if algo == "fedgcn" and "hops" in values
            else DISPLAY_NAMES.get(algo, algo))
    if "one_hop_variant" in values:
        head += f" ({values['one_hop_variant']})"
    return ", ".join([head, *[f"{k}={v}" for k, v in rest.items()]])


def split_label(values: dict[str, Any], config: dict[str, Any]) -> str:
    """The data split in words: 'cora, Dirichlet β=1', 'cora, iid', 'p-split p=0.2'."""
    part = values.get("partition", config.get("partition"))
    if part == "dirichlet":
        words = f"Dirichlet β={values.get('beta', config.get('beta')):g}"
    elif part == "p-split":
        words = f"p-split p={values.get('mcmahan_p', config.get('mcmahan_p')):g}"
    else:
        words = str(part)
    dataset = values.get("dataset", config.get("dataset"))
    return f"{dataset}, {words}" if dataset else words


def _stats(vals: list[float]) -> tuple[float, float]:
    return statistics.fmean(vals), (statistics.pstdev(vals) if len(vals) > 1 else 0.0)


def clients_series(groups: list[dict[str, Any]]) -> dict[str, dict[str, list[list[float]]]]:
    """{split label: {method label: [[K, mean acc, std, repeats], ...] sorted by K}}; empty when
    the groups do not vary the number of clients."""
    if len({g["values"].get("clients") for g in groups}) < 2:
        return {}
    mkeys = method_keys()
    out: dict[str, dict[str, list[list[float]]]] = {}
    for g in groups:
        acc = g["metrics"].get("test_acc")
        if "clients" not in g["values"] or acc is None:
            continue
        split = {k: v for k, v in g["values"].items() if k not in mkeys and k != "clients"}
        method = {k: v for k, v in g["values"].items() if k in mkeys}
        line = out.setdefault(split_label(split, g["config"]), {}).setdefault(
            method_label(method), [])
        line.append([int(g["values"]["clients"]), acc["mean"], acc["std"], len(acc["values"])])
    for lines in out.values():
        for pts in lines.values():
            pts.sort()
    return out


def control_key(groups: list[dict[str, Any]]) -> str | None:
    """The i.i.d. control that varies across the groups (``mcmahan_p`` first), or None."""
    for key in CONTROL_KEYS:
        if len({g["values"].get(key) for g in groups if key in g["values"]}) > 1:
            return key
    return None


def control_series(groups: list[dict[str, Any]], target: float | None) -> dict[str, Any]:
    """{'control': key, 'target': target, 'rounds': {line: [[x, mean, std, reached, n]]},
    'pretrain_mb': {line: [[x, mean, std]]}}; empty when no i.i.d. control varies."""
    key = control_key(groups)
    if key is None:
        return {}
    rounds: dict[str, list[list[float]]] = {}
    comm: dict[str, list[list[float]]] = {}
    for g in groups:
        if key not in g["values"]:
            continue
        x = float(g["values"][key])
        rest = {k: v for k, v in g["values"].items() if k != key}
        label = method_label(rest) if "algorithm" in rest or "hops" in rest else \
            ", ".join(f"{k}={v}" for k, v in rest.items()) or "run"
        per = g["per_repeat"]
        reached = [p["rounds_to_target"] for p in per if p["rounds_to_target"] is not None]
        if reached:
            rounds.setdefault(label, []).append([x, *_stats(reached), len(reached), len(per)])
        else:
            rounds.setdefault(label, []).append([x, float("nan"), float("nan"), 0, len(per)])
        comm.setdefault(label, []).append([x, *_stats([p["pretrain_bytes"] / 1e6 for p in per])])
    for series in (rounds, comm):
        for pts in series.values():
            pts.sort()
    return {"control": key, "target": target, "rounds": rounds, "pretrain_mb": comm}


def _pyplot() -> Any:
    matplotlib = require("matplotlib", feature="plots (fedgl report, fedgl partition --plot)")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_accuracy_vs_clients(series: dict[str, dict[str, list[list[float]]]],
                             path: Path) -> Path | None:
    """Paper Figure 5 style: one panel per split, accuracy ± std vs K on a log axis."""
    if not series:
        return None
    from fedgl.report import _save

    plt = _pyplot()
    fig, axes = plt.subplots(1, len(series), figsize=(4.6 * len(series) + 1.6, 3.8),
                             sharey=True, squeeze=False)
    ks = sorted({p[0] for lines in series.values() for pts in lines.values() for p in pts})
    for ax, (split, lines) in zip(axes[0], series.items(), strict=True):
        for label, pts in lines.items():
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                        marker="o", ms=4, capsize=3, label=label)
        ax.set_xscale("log")
        ax.set_xticks(ks)
        ax.set_xticklabels([str(int(k)) for k in ks])
        ax.set_xlim(ks[0] / 1.25, ks[-1] * 1.25)
        ax.minorticks_off()
        ax.set_xlabel("number of clients K (log scale)")
        ax.set_title(split, fontsize="medium")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("test accuracy (final round)")
    axes[0][-1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0),
                       borderaxespad=0)
    fig.tight_layout()
    return _save(fig, path, dpi=100)


def plot_rounds_vs_control(series: dict[str, Any], path: Path) -> Path | None:
    """Appendix Figure 1 style: rounds to the target (left) and pre-training MB (right) vs the
    i.i.d. control; β on a log axis, p on a linear one."""
    if not series:
        return None
    from fedgl.report import _save

    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 3.8))
    for label, pts in series["rounds"].items():
        ok = [p for p in pts if p[3] > 0]
        missed = [f"{p[0]:g}" for p in pts if p[3] < p[4]]
        note = f" (not reached by every repeat at {', '.join(missed)})" if missed else ""
        left.errorbar([p[0] for p in ok], [p[1] for p in ok], yerr=[p[2] for p in ok],
                      marker="o", ms=4, capsize=3, label=label + note)
    for label, pts in series["pretrain_mb"].items():
        right.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                       marker="o", ms=4, capsize=3, label=label)
    key, target = series["control"], series["target"]
    xlabel = ("McMahan's i.i.d. control p (0: one class per client, 1: i.i.d.)"
              if key == "mcmahan_p" else "Dirichlet β (log scale; large: i.i.d.)")
    for ax in (left, right):
        ax.set_xlabel(xlabel, fontsize="small")
        ax.grid(True, alpha=0.3)
        if key == "beta":
            ax.set_xscale("log")
    left.set_ylabel("rounds" if target is None else "rounds (repeats that reached it)")
    left.set_title("rounds to 99 % of the run's best test acc" if target is None
                   else f"rounds until test accuracy ≥ {target:g}", fontsize="medium")
    right.set_ylabel("MB")
    right.set_title("pre-training communication", fontsize="medium")
    left.legend(fontsize="x-small", loc="best")
    right.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.tight_layout()
    return _save(fig, path, dpi=100)
