"""The ``fedgl`` command: ``run``, ``partition``, ``datasets``.

Every bad input ends in one line on stderr (``fedgl: error: ...``) and exit code 2, with nothing
written to the output folder.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any, NoReturn

from fedgl.config import SECTIONS, Config
from fedgl.config.fields import field_kind
from fedgl.config.registry import algorithm_names, canonical_name, get_spec, load_all
from fedgl.config.schema import KEY_ALIASES
from fedgl.errors import ConfigError, FedglError, RunAborted


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message} (see `{self.prog} --help`)")


def _add_field_flag(group: Any, f: Any, seen: set[str]) -> None:
    """One ``--flag`` for a config field; unset flags stay absent so YAML values are kept."""
    if f.name in seen:
        return
    seen.add(f.name)
    flag = "--" + f.name.replace("_", "-")
    kind = field_kind(f)
    default = "unset" if f.default is None else ("empty" if f.default == "" else f.default)
    help_text = f"{f.metadata['help']} (default: {default})"
    if kind == "bool":
        group.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction,
                           default=argparse.SUPPRESS, help=help_text)
        return
    typ = {"int": int, "float": float}.get(kind, str)
    names = [flag] + [f"--{alias.replace('_', '-')}" for alias, target in KEY_ALIASES.items()
                      if target == f.name]
    group.add_argument(*names, dest=f.name, type=typ, default=argparse.SUPPRESS,
                       metavar=f.name.upper(), help=help_text)


def _add_config_flags(parser: argparse.ArgumentParser, only: tuple[str, ...] | None = None,
                      algorithm: str | None = None) -> None:
    """Flags grouped by config section, then each algorithm's options under its name (only
    ``algorithm``'s when it is given)."""
    seen: set[str] = set()
    if only is None:
        parser.add_argument("--algorithm", dest="algorithm", default=argparse.SUPPRESS,
                            metavar="NAME", help="algorithm: one of "
                            f"{', '.join(algorithm_names())} (default: fedgcn)")
    for name, cls in SECTIONS.items():
        group = parser.add_argument_group(f"{cls.title} ({name})", cls.__doc__.splitlines()[0])
        for f in fields(cls):
            if only is None or f.name in only:
                _add_field_flag(group, f, seen)
    if only is not None:
        return
    specs = [get_spec(algorithm)] if algorithm else load_all()
    for spec in specs:
        if spec.options is None:
            continue
        group = parser.add_argument_group(f"{spec.name} options", spec.summary)
        for f in fields(spec.options):
            _add_field_flag(group, f, seen)


def _algorithm_in(argv: list[str]) -> str | None:
    """The ``--algorithm`` given on a command line (to show only its options in --help)."""
    for i, arg in enumerate(argv):
        if arg == "--algorithm" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--algorithm="):
            return arg.split("=", 1)[1]
    return None


def build_parser(algorithm: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="fedgl", description="Federated graph learning (FedGCN and friends).")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    run = sub.add_parser("run", help="train an algorithm and write result.json / history.csv",
                         description="Run an algorithm. Settings come from CONFIG (YAML), then "
                                     "flags; defaults: FedGCN 2-hop on a Cora-sized SBM graph.")
    run.add_argument("config_file", nargs="?", metavar="CONFIG", help="YAML file of config keys")
    run.add_argument("--resume", metavar="DIR", help="continue the checkpointed run in DIR")
    _add_config_flags(run, algorithm=algorithm)

    part = sub.add_parser("partition", help="show (and plot) how a dataset splits across clients")
    _add_config_flags(part, ("dataset", "data_root", "clients", "partition", "beta",
                             "min_client_size", "seed", "sbm_nodes", "sbm_classes", "sbm_alpha",
                             "sbm_mu", "sbm_features", "sbm_noise"))
    part.add_argument("--plot", metavar="PNG", help="write a per-client label histogram here")

    ds = sub.add_parser("datasets", help="list datasets and whether their files are available")
    ds.add_argument("--data-root", dest="data_root", default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        chosen = _algorithm_in(argv) if "-h" in argv or "--help" in argv else None
        parser = build_parser(canonical_name(chosen) if chosen else None)
        args = parser.parse_args(argv)
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "partition":
            return _cmd_partition(args)
        if args.command == "datasets":
            return _cmd_datasets(args)
        parser.print_help()
        return 0
    except FedglError as exc:
        print(f"fedgl: error: {exc}", file=sys.stderr)
        return 2
    except RunAborted as exc:
        print(f"fedgl: run aborted: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fedgl: interrupted; no results were written (a run with --checkpoint-every "
              "continues with `fedgl run --resume DIR`)", file=sys.stderr)
        return 130


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    names = set(Config.field_names()) | {"algorithm"}
    return {k: v for k, v in vars(args).items() if k in names}


# ---------------------------------------------------------------------- run
def _cmd_run(args: argparse.Namespace) -> int:
    from fedgl.api import as_config, run

    overrides = _overrides(args)
    if args.resume:
        if args.config_file or set(overrides) - {"progress"}:
            raise ConfigError("--resume continues a run with its stored config; drop the config "
                              "file and the other flags")
        result = run(resume=args.resume, **overrides)
        _print_summary(result, Path(args.resume))
        return 0
    cfg = as_config(args.config_file, **overrides) if args.config_file else as_config(**overrides)
    if not cfg.out:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        cfg = cfg.replace(out=str(Path("runs") / f"{cfg.algorithm}-{_slug(cfg.dataset)}-{stamp}"))
    out = Path(cfg.out)
    _check_writable_folder(out, "--out")
    try:
        result = run(cfg)
    except OSError as exc:
        if exc.filename is None or not _related(Path(exc.filename), out):
            raise
        raise ConfigError(f"--out '{out}' could not be written ({exc.strerror}); "
                          "choose a writable folder") from None
    _print_summary(result, out)
    return 0


def _check_writable_folder(path: Path, flag: str) -> None:
    """Fail before any work if ``path`` cannot become a folder (a file is in the way)."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} '{path}' exists and is not a folder; choose another path")
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{flag} '{path}' lies under '{parent}', which is a file, not a "
                          "folder; choose another path")


def _related(a: Path, b: Path) -> bool:
    a, b = a.absolute(), b.absolute()
    return a == b or a in b.parents or b in a.parents


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in Path(text.replace("npz:", "")).stem)


def _print_summary(result: Any, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from fedgl.results import SUMMARY_METRICS

    cfg = result.config
    parties = ("" if cfg["algorithm"].startswith("centralized")
               else f", {cfg['clients']} clients, β={cfg['beta']:g}")
    title = (f"{cfg['algorithm']}"
             + (f" {cfg['hops']}-hop" if cfg["algorithm"] == "fedgcn" else "")
             + f" on {cfg['dataset']}{parties}, "
               f"{cfg['rounds']} rounds, {len(result.repeats)} repeat(s)")
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("mean ± std", justify="right")
    for key, label in SUMMARY_METRICS.items():
        if key not in result.summary:
            continue
        s = result.summary[key]
        if key.endswith("_acc"):
            value = f"{s['mean']:.4f} ± {s['std']:.4f}"
        elif key.endswith("_bytes"):
            value = f"{s['mean'] / 1e6:.3f} MB ± {s['std'] / 1e6:.3f}"
        else:
            value = f"{s['mean']:.2f} s ± {s['std']:.2f}"
        table.add_row(label, value)
    console = Console()
    console.print(table)
    console.print(f"results written to {out}/result.json and {out}/history.csv")


# ---------------------------------------------------------------------- partition
def _cmd_partition(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from fedgl.api import as_config, load_graph
    from fedgl.data.partition import partition

    cfg = as_config(**_overrides(args))
    if args.plot and Path(args.plot).suffix.lower() not in (".png", ".pdf", ".svg"):
        raise ConfigError(f"--plot '{args.plot}' must end in .png, .pdf or .svg")
    if args.plot:
        _check_writable_folder(Path(args.plot).absolute().parent, "--plot folder")
    graph = load_graph(cfg)
    part = partition(graph, cfg.clients, method=cfg.partition, beta=cfg.beta, seed=cfg.seed,
                     min_size=cfg.min_client_size)
    stats = part.stats(graph)
    table = Table(title=f"{graph.name}: {graph.num_nodes} nodes, {graph.num_edges} edges, "
                        f"{cfg.clients} clients, {cfg.partition} β={cfg.beta:g}, seed {cfg.seed}")
    for col in ("client", "nodes", "train", "test", "labels per class"):
        table.add_column(col, justify="right" if col != "labels per class" else "left")
    for k in range(cfg.clients):
        table.add_row(str(k), str(stats["nodes"][k]), str(stats["train_nodes"][k]),
                      str(stats["test_nodes"][k]), " ".join(map(str, stats["labels"][k])))
    console = Console()
    console.print(table)
    cut = stats["cross_client_edges"]
    share = cut / stats["edges"] if stats["edges"] else 0.0
    console.print(f"cross-client edges: {cut} of {stats['edges']} ({share:.1%})")
    if args.plot:
        from fedgl.report import plot_label_histogram

        try:
            plot_label_histogram(stats["labels"], args.plot,
                                 title=f"{graph.name}, {cfg.partition} β={cfg.beta:g}")
        except OSError as exc:
            raise ConfigError(f"--plot '{args.plot}' could not be written ({exc.strerror}); "
                              "choose a writable path") from None
        console.print(f"plot written to {args.plot}")
    return 0


# ---------------------------------------------------------------------- datasets
def _cmd_datasets(args: argparse.Namespace) -> int:
    from fedgl.data.datasets import available_datasets, resolve_data_root

    root = resolve_data_root(args.data_root)
    print(f"data root: {root}")
    for name, ok in available_datasets(args.data_root).items():
        if ok:
            state = "generated on first use, then cached" if name.startswith("synthetic:") \
                else "available"
        elif name in ("cora", "citeseer", "pubmed"):
            state = "missing (downloaded on first use when online)"
        else:
            state = "missing (put its files under the data root; see docs/scale.md)"
        print(f"  {name:<18} {state}")
    print(f"  {'npz:PATH':<18} any gnn-benchmark .npz file")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
