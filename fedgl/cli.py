"""The ``fedgl`` command: ``run``, ``partition``, ``datasets``.

Every bad input ends in one line on stderr (``fedgl: error: ...``) and exit code 2, with nothing
written to the output folder.
"""

from __future__ import annotations

import os
import signal
import sys


def _exit_at_once(*_: object) -> None:
    """Ctrl-C while modules load (nothing written yet): one line, exit 130. An interrupt inside
    an import would leave a half-imported module behind and fail later with a traceback."""
    sys.stderr.write("fedgl: interrupted\n")
    sys.stderr.flush()
    os._exit(130)


if __name__ == "__main__" or os.path.basename(sys.argv[0]) == "fedgl":
    signal.signal(signal.SIGINT, _exit_at_once)

import argparse
import functools
import threading
import time
from dataclasses import fields
from pathlib import Path
from typing import Any, NoReturn

from fedgl._optional import check_config, require
from fedgl.config import SECTIONS, Config, PrivacyConfig, RuntimeConfig
from fedgl.config.fields import field_kind
from fedgl.config.registry import (
    algorithm_names,
    canonical_name,
    get_spec,
    load_all,
    plugin_names,
)
from fedgl.config.schema import KEY_ALIASES, RENAMED_KEYS
from fedgl.errors import ConfigError, DataError, FedglError, RunAborted
from fedgl.version import __version__

#: the own-data commands (fedgl.deployment.own_commands)
OWN_COMMANDS = ("secret", "ingest", "index", "place", "key", "roster", "psi")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message} (see `{self.prog} --help`)")


def _add_field_flag(group: Any, f: Any, seen: set[str], spec: Any = None) -> None:
    """One ``--flag`` for a config field; unset flags stay absent so YAML values are kept.
    With ``spec``, the default and help are that algorithm's (its recipe, its meaning)."""
    if f.name in seen:
        return
    seen.add(f.name)
    flag = "--" + f.name.replace("_", "-")
    kind = field_kind(f)
    value = spec.defaults.get(f.name, f.default) if spec is not None else f.default
    default = "unset" if value is None else ("empty" if value == "" else value)
    text = spec.key_help.get(f.name, f.metadata["help"]) if spec is not None else f.metadata["help"]
    help_text = f"{text} (default: {default})"
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
                      algorithm: str | None = None, plugin: str | None = None) -> None:
    """Flags grouped by config section, then each algorithm's options under its name (only
    ``algorithm``'s when it is given). Plugins are imported only when chosen (``algorithm`` or
    ``plugin``, the ``--algorithm`` of a command line); the others are listed by name."""
    seen: set[str] = set()
    if only is None or "algorithm" in only:
        parser.add_argument("--algorithm", dest="algorithm", default=argparse.SUPPRESS,
                            metavar="NAME", help="algorithm: one of "
                            f"{', '.join(algorithm_names())} (default: fedgcn). Each algorithm "
                            "has its own defaults (its paper's recipe): `fedgl run --algorithm "
                            "X --help` shows them and the keys X reads")
    chosen = get_spec(algorithm) if algorithm and only is None else None
    skip = _unread_flags(chosen) if chosen is not None else set()
    for name, cls in SECTIONS.items():
        group = parser.add_argument_group(f"{cls.title} ({name})", cls.__doc__.splitlines()[0])
        for f in fields(cls):
            if (only is None or f.name in only) and f.name not in skip:
                _add_field_flag(group, f, seen, chosen)
    if only is not None:
        return
    for old in RENAMED_KEYS:   # refused with the fix by the config (not listed in --help)
        parser.add_argument(f"--{old.replace('_', '-')}", dest=old, default=argparse.SUPPRESS,
                            help=argparse.SUPPRESS)
    specs = [chosen] if chosen is not None else load_all()
    if chosen is None:
        _add_plugin_list(parser, plugin)
        if plugin in plugin_names():
            specs.append(get_spec(plugin))
    for spec in specs:
        if spec.options is None:
            continue
        group = parser.add_argument_group(f"{spec.name} options", spec.summary)
        for f in fields(spec.options):
            _add_field_flag(group, f, seen)


def _add_plugin_list(parser: argparse.ArgumentParser, chosen: str | None) -> None:
    """The installed plugins by name (from package metadata; none is imported for this)."""
    from fedgl.config.plugins import discover

    found = discover()
    if not found:
        return
    lines = [f"{name} (package {p.package} {p.version})" for name, p in found.items()
             if name in plugin_names() and name != chosen]
    clashing = [f"{name} from {p.package} (ignored: a built-in name; rename it)"
                for name, p in found.items() if name not in plugin_names()]
    parser.add_argument_group("plugin algorithms", "; ".join(lines + clashing) + ". Their "
                              "options: fedgl run --algorithm NAME --help; check them all: "
                              "fedgl plugins")


def _unread_flags(spec: Any) -> set[str]:
    """Common keys ``spec``'s algorithm does not read: left out of its ``--help``."""
    skip = set(spec.unread_keys())
    skip |= {f.name for f in fields(PrivacyConfig) if f.metadata["feature"] not in spec.privacy}
    if "ray" not in spec.runtimes:
        skip |= {f.name for f in fields(RuntimeConfig) if f.name.startswith(("ray_", "client_"))}
        skip |= {"runtime", "on_client_failure", "max_client_restarts"}
    if not spec.checkpoints:
        skip.add("checkpoint_every")
    return skip


def _algorithm_in(argv: list[str]) -> str | None:
    """The ``--algorithm`` given on a command line (to show only its options in --help)."""
    for i, arg in enumerate(argv):
        if arg == "--algorithm" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--algorithm="):
            return arg.split("=", 1)[1]
    return None


def build_parser(algorithm: str | None = None, plugin: str | None = None, *,
                 run_flags: bool = True, run_only: bool = False) -> argparse.ArgumentParser:
    """The whole command line; ``run_flags=False`` leaves out the flags of ``fedgl run``
    (every algorithm's options) when another command (or ``--help``/``--version``) is given;
    ``run_only``: ``fedgl run`` alone (the other commands' parsers, and the deployment modules
    they import, cost a run 15 to 20 ms)."""
    parser = _Parser(prog="fedgl", description="Federated graph learning (FedGCN and friends).")
    parser.add_argument("--version", action="version", version=f"fedgl {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    run = sub.add_parser("run", help="train an algorithm and write result.json / history.csv",
                         description="Run an algorithm. Settings come from CONFIG (YAML), then "
                                     "flags; defaults: FedGCN 2-hop on a Cora-sized SBM graph.")
    run.add_argument("config_file", nargs="?", metavar="CONFIG", help="YAML file of config keys")
    run.add_argument("--resume", metavar="DIR", help="continue the checkpointed run in DIR")
    run.add_argument("--overwrite", action="store_true",
                     help="replace the results already in --out (refused without it)")
    run.add_argument("--shards", nargs="+", metavar="DIR", default=None,
                     help="run over the organisations' `fedgl ingest` folders (a local trial "
                          "of their own data, docs/own-data.md)")
    if run_flags:
        _add_config_flags(run, algorithm=algorithm, plugin=plugin)
    if run_only:
        return parser

    part = sub.add_parser("partition", help="show (and plot) how a dataset splits across clients")
    _add_config_flags(part, ("dataset", "data_root", "clients", "partition", "beta", "mcmahan_p",
                             "metis_max_degree",
                             "min_client_size", "seed", "sbm_nodes", "sbm_classes", "sbm_alpha",
                             "sbm_mu", "sbm_features", "sbm_noise"))
    part.add_argument("--plot", metavar="PNG", help="write a per-client label histogram here")

    comm = sub.add_parser("analyze-comm", help="FedGCN pre-training communication: appendix F's "
                          "prediction beside the measured ledger bytes",
                          description="Predicted (appendix F; SBM expectation for --dataset sbm) "
                                      "and measured pre-training bytes of FedGCN 0/1/2-hop on "
                                      "one graph and partition (see fedgl.comm_analysis).")
    _add_config_flags(comm, ("dataset", "data_root", "clients", "partition", "beta", "mcmahan_p",
                             "metis_max_degree",
                             "min_client_size", "seed", "sbm_nodes", "sbm_classes", "sbm_alpha",
                             "sbm_mu", "sbm_features", "sbm_noise"))
    comm.add_argument("--out", metavar="JSON", default=None, help="also write the analysis here")

    sw = sub.add_parser("sweep", help="run a grid of configs from a YAML file (resumable)",
                        description="Run every cell of a sweep file (see fedgl.sweep); finished "
                                    "cells are skipped, so re-running resumes.")
    sw.add_argument("sweep_file", metavar="SWEEP.yaml")
    sw.add_argument("--out", default=None, help="results folder (default: the file's 'out')")
    sw.add_argument("--parallel", type=int, default=None, help="cells run at once (processes)")
    sw.add_argument("--only", default=None, metavar="KEY=VALUE,...",
                    help="run only the unfinished cells whose config has these values (e.g. "
                         "algorithm=fedgcn,seed=0|1; | separates alternatives); the table still "
                         "lists every cell. A key no cell sets, or a filter matching no cell, "
                         "is an error")

    rep = sub.add_parser("report", help="tables (markdown) and plots (PNG) of a run or sweep")
    rep.add_argument("folder", metavar="DIR", nargs="+",
                     help="a run folder (result.json) or sweep folder; several: one report "
                          "over all of them (needs --out)")
    rep.add_argument("--out", default=None, help="where to write (default: DIR/report)")
    rep.add_argument("--target-acc", type=float, default=None,
                     help="also show the rounds until the test accuracy first reaches this "
                          "(default: 99%% of each run's best only)")

    pred = sub.add_parser(
        "predict", help="score each organisation's own nodes with a saved model (one CSV each)",
        description="Score every organisation's own nodes with the model a run wrote "
                    "(<out>/model): the federation is set up again as in training (the same "
                    "exchange, the same privacy), then each organisation scores its own nodes. "
                    "Writes <name>.csv per organisation (id, prediction, one probability column "
                    "per class) and prediction.json (docs/using-the-model.md).")
    pred.add_argument("--model", required=True, metavar="DIR", help="the model folder a run wrote")
    pred.add_argument("--shards", nargs="+", metavar="DIR", default=None,
                      help="the organisations' `fedgl ingest` folders (a model trained on own "
                           "data)")
    pred.add_argument("--dataset", default=None,
                      help="the built-in data set (default: the one the model was trained on)")
    pred.add_argument("--data-root", dest="data_root", default=None)
    pred.add_argument("--best", action="store_true",
                      help="use the best-validation round's weights (default: the final round's)")
    pred.add_argument("--state-dir", dest="state_dir", default=None, metavar="DIR",
                      help="the simulated clients' state folder (default: the run's "
                           "--state-dir): where each kept its last exchange, so that only "
                           "the rows that changed are exchanged again")
    pred.add_argument("--out", required=True, metavar="DIR", help="where the CSVs go")
    pred.add_argument("--overwrite", action="store_true",
                      help="replace the predictions already in --out")

    ds = sub.add_parser("datasets", help="list datasets and whether their files are available")
    ds.add_argument("--data-root", dest="data_root", default=None)
    ds.add_argument("--check", action="store_true",
                    help="load and validate every available dataset's files")

    sub.add_parser("plugins", help="list the installed plugin algorithms and check that each "
                   "one loads (see docs/extending.md)")

    keys = sub.add_parser("keys", help="make client identity keys and the federation roster",
                          description="Write roster.json (public Ed25519 keys, for every "
                                      "client) and client-<k>.key (private; copy each to its "
                                      "client only, never to the server).")
    keys.add_argument("--clients", type=int, required=True)
    keys.add_argument("--out", required=True, metavar="DIR")
    from fedgl.deployment.commands import add_certs_parser, add_parsers

    # a chosen plugin's options are flags of `fedgl server` too (it deploys like a built-in)
    add_parsers(sub, functools.partial(_add_config_flags, plugin=plugin), algorithm)
    add_certs_parser(sub)
    from fedgl.deployment.fleet_gate import add_gate_parser

    add_gate_parser(sub)
    from fedgl.deployment import own_commands

    own_commands.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``fedgl`` command on ``argv`` (default ``sys.argv[1:]``); returns the exit code.

    Called without ``argv`` (the ``fedgl`` script, ``python -m fedgl.cli``), a finished
    ``fedgl run`` or ``fedgl client`` exits at once (:func:`_exit_now`) instead of returning."""
    args = sys.argv[1:] if argv is None else list(argv)
    if argv is None:
        _PROGRAM.append(True)
    code = _main(args)
    if argv is None and _command_of(args) in _ENDS_AT_ONCE and "torch" in sys.modules:
        _exit_now(code)
    return code


#: the commands whose process ends at once once they return: ``run`` (the teardown's 0.35 to
#: 0.6 s) and ``client``, whose last line (why it stopped) must stay its last: the
#: interpreter's teardown once printed "Exception ignored in: <module 'threading'>" after it
#: (a signal or an exception inside ``threading._shutdown``, seen once on a loaded machine)
_ENDS_AT_ONCE = ("run", "client")


#: non-empty when this process is the ``fedgl`` program (not a caller of :func:`main`)
_PROGRAM: list[bool] = []


def _command_of(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def _exit_now(code: int) -> NoReturn:
    """End the process with ``code`` after its exit handlers, skipping the interpreter's
    teardown: with torch loaded, freeing every module's objects one by one took 0.35 to 0.6 s
    after the run's last line (docs/performance.md, "The default Cora run, profiled before
    and after"). Where a thread other than the main one is still running, or a profiler or
    tracer watches (``python -m cProfile``, coverage: they write their results after the
    program), the ordinary exit."""
    import atexit

    if sys.getprofile() is not None or sys.gettrace() is not None or any(
            t.is_alive() and not t.daemon for t in threading.enumerate()
            if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _main(argv: list[str]) -> int:
    command = None
    try:
        chosen = _algorithm_in(argv)
        helping = "-h" in argv or "--help" in argv
        command = _command_of(argv)
        parser = build_parser(canonical_name(chosen) if chosen and helping else None,
                              plugin=None if helping else chosen, run_flags=command == "run",
                              run_only=command == "run" and not helping)
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            where = f"fedgl {args.command}" if getattr(args, "command", None) else "fedgl"
            raise ConfigError(f"unrecognized arguments: {' '.join(unknown)} (see `{where} --help`)")
        if args.command == "analyze-comm":
            _preload()
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "partition":
            return _cmd_partition(args)
        if args.command == "datasets":
            return _cmd_datasets(args)
        if args.command == "predict":
            from fedgl.inference.commands import cmd_predict

            return cmd_predict(args)
        if args.command == "analyze-comm":
            return _cmd_analyze_comm(args)
        if args.command == "keys":
            return _cmd_keys(args)
        if args.command == "plugins":
            return _cmd_plugins()
        if args.command in OWN_COMMANDS:
            from fedgl.deployment import own_commands

            return own_commands.main(args)
        if args.command in ("shard", "client", "server", "certs", "gate"):
            return _cmd_deployment(args)
        if args.command == "sweep":
            from fedgl.sweep import load_sweep, parse_only, sweep

            root = sweep(load_sweep(args.sweep_file), out=args.out, parallel=args.parallel,
                         log=print, only=parse_only(args.only))
            print(f"sweep table written to {root / 'sweep.csv'}")
            return 0
        if args.command == "report":
            require("matplotlib", feature="fedgl report (its figures)")
            from fedgl.report import write_report

            dest = write_report(list(args.folder), args.out, target=args.target_acc)
            print(f"report written to {dest / 'report.md'}")
            return 0
        parser.print_help()
        return 0
    except FedglError as exc:
        print(f"fedgl: error: {exc}", file=sys.stderr)
        return 2
    except RunAborted as exc:
        print(f"fedgl: run aborted: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        resume = "fedgl server --resume DIR" if command == "server" else "fedgl run --resume DIR"
        said = getattr(exc, "superlink", "")   # fedgl server: what became of its run
        stopped = f"; {said}" if said else ""
        print(f"fedgl: interrupted; no results were written (a run with --checkpoint-every "
              f"continues with `{resume}`){stopped}", file=sys.stderr)
        return 130


def _preload() -> None:
    """Import the heavy modules while Ctrl-C still exits at once, then let it raise
    KeyboardInterrupt so the run cleans up what it started."""
    import gc

    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        previous = signal.signal(signal.SIGINT, _exit_at_once)
    # the cyclic collector paused while modules load: they make hundreds of thousands of
    # objects and no garbage, and its ~400 passes over them cost 0.2 s of the imports' 1.3 s
    collecting = gc.isenabled()
    gc.disable()
    try:
        # (not SciPy: a run that needs it imports it there; a Planetoid FedGCN run does not)
        import fedgl.api  # noqa: F401 - torch, numpy, the data and run machinery
    finally:
        if collecting:
            if _PROGRAM:   # the loaded modules stay for the process's life: never scanned again
                gc.freeze()
            gc.enable()
        if main_thread:
            signal.signal(signal.SIGINT, signal.default_int_handler
                          if previous is _exit_at_once else previous)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    names = set(Config.field_names()) | {"algorithm"} | set(RENAMED_KEYS)
    return {k: v for k, v in vars(args).items() if k in names}


def _cmd_keys(args: argparse.Namespace) -> int:
    from fedgl.privacy.identity import write_keys

    if args.clients < 1:
        raise ConfigError(f"--clients must be >= 1 (got {args.clients})")
    out = Path(args.out)
    _check_writable_folder(out, "--out")
    if (out / "roster.json").exists():
        raise ConfigError(f"'{out / 'roster.json'}' exists; choose an empty --out folder (keys "
                          "are never overwritten)")
    print(f"roster written to {write_keys(out, args.clients)}; give client-<k>.key to client k "
          "only")
    return 0


def _cmd_deployment(args: argparse.Namespace) -> int:
    """``fedgl shard`` / ``client`` / ``server`` (docs/deployment.md)."""
    from fedgl.deployment import commands

    if signal.getsignal(signal.SIGINT) is _exit_at_once:
        # modules are loaded: from here Ctrl-C raises KeyboardInterrupt, so the client stops its
        # SuperNode and removes its private folder, and the server stops its run on the SuperLink
        signal.signal(signal.SIGINT, signal.default_int_handler)

    if args.command == "client":
        return commands.cmd_client(args)
    if args.command == "gate":
        from fedgl.deployment.fleet_gate import cmd_gate

        return cmd_gate(args)
    if args.command == "certs":
        _check_writable_folder(Path(args.certs_out), "--out")
        paths = commands.cmd_certs(args)
        from fedgl.deployment.tls import covered_hosts

        covers = ", ".join(covered_hosts(paths["cert"]))
        if "reused" in paths:
            print(f"new SuperLink certificate in {paths['cert'].parent} covering {covers}, "
                  "signed by the CA kept there: the organisations keep their ca.pem; restart "
                  "the SuperLink with the new superlink.pem and superlink.key")
        else:
            print(f"certificates written to {paths['ca'].parent} covering {covers}: give "
                  "ca.pem to every organisation; superlink.pem and superlink.key stay with the "
                  "SuperLink; ca.key (private) signs later certificates (`fedgl certs --host "
                  "X` again with this --out)")
        return 0
    from fedgl.api import as_config

    overrides = _overrides(args)
    if args.command == "server" and args.resume:
        cfg = commands.resumed_config(args, overrides)
    elif args.command == "server" and getattr(args, "predict", None):
        from fedgl.deployment.model_release import predict_config

        cfg = predict_config(args.predict, overrides)
    else:
        cfg = (as_config(args.config_file, **overrides) if args.config_file
               else as_config(**overrides))
    if args.command == "shard":
        out = Path(args.shard_out)
        _check_writable_folder(out, "--out")
        paths = commands.cmd_shard(cfg, out)
        print(f"{len(paths)} shards written to {out}; give client-<k>.json and client-<k>.npz "
              "to client k only")
        return 0
    if not cfg.out:
        raise ConfigError("fedgl server needs --out DIR (the results folder)")
    done = commands.cmd_server(cfg, args)
    if getattr(args, "predict", None):
        print(f"deployed scoring finished; each organisation's scores are in its own folder; "
              f"the summary in {done['out']}/prediction.json")
        return 0
    print(f"deployed run finished; results in {done['out']}")
    return 0


# ---------------------------------------------------------------------- run
def _cmd_run(args: argparse.Namespace) -> int:
    overrides = _overrides(args)
    if args.config_file and args.config_file.lower() in ("true", "false", "yes", "no", "on", "off"):
        raise ConfigError(f"'{args.config_file}' is not a config file: yes/no flags take no value; "
                          "use e.g. --oracle-eval or --no-oracle-eval")
    if overrides.get("out") is not None and not str(overrides["out"]).strip():
        raise ConfigError("--out is empty; give a folder, or leave --out out for "
                          "runs/<algorithm>-<dataset>-<time>")
    if args.resume:
        if args.shards:
            raise ConfigError("--resume continues a run from its checkpoint; drop --shards")
        if args.overwrite:
            raise ConfigError("--resume continues a run in its folder; drop --overwrite")
        _say_where_resumed(args.resume)
        _preload()
        from fedgl.api import run

        result = run(args.config_file, resume=args.resume, **overrides)
        _print_summary(result, Path(args.resume))
        return 0
    # the configuration is checked before torch and the models load: bad input fails at once
    cfg = (Config.from_yaml(args.config_file, overrides) if args.config_file
           else Config.from_dict(overrides))
    check_config(cfg)
    from fedgl.deployment.client_policy import plaintext_exchange, plaintext_notice

    if plaintext_exchange(cfg):
        print(plaintext_notice("fedgl run"), flush=True)
    _preload()
    from fedgl.api import run, run_shards

    if not cfg.out:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        what = "shards" if args.shards else _slug(cfg.dataset)
        cfg = cfg.replace(out=str(Path("runs") / f"{cfg.algorithm}-{what}-{stamp}"))
    out = Path(cfg.out)
    try:
        result = (run_shards(args.shards, cfg, overwrite=args.overwrite) if args.shards
                  else run(cfg, overwrite=args.overwrite))
    except OSError as exc:
        if exc.filename is None or not _related(Path(exc.filename), out):
            raise
        raise ConfigError(f"--out '{out}' could not be written ({exc.strerror}); "
                          "choose a writable folder") from None
    _print_summary(result, out)
    return 0


def _say_where_resumed(folder: str) -> None:
    """One line on stdout, with the results: the round a resumed run continues from (a
    checkpoint that does not load says nothing here: the run reports it, as the one line on
    stderr)."""
    from fedgl.checkpoint import load_checkpoint

    try:
        ckpt = load_checkpoint(folder)
    except (FedglError, OSError):
        return
    repeats = ckpt.config.get("repeats", 1)
    if ckpt.progress is not None:
        p = ckpt.progress
        where = (f"resuming at round {p.round} of repeat {p.repeat + 1}/{repeats}: continuing "
                 f"with round {p.round + 1}")
    else:
        where = f"resuming after {len(ckpt.completed)} finished repeat(s) of {repeats}"
    print(f"fedgl: {where}", flush=True)


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


def _probe_writable(path: Path) -> None:
    """Fail before any work if a file cannot be created next to ``path``."""
    import tempfile

    folder = path.absolute().parent
    try:
        if folder.is_dir():
            with tempfile.TemporaryFile(dir=folder):
                pass
    except OSError as exc:
        raise ConfigError(f"--plot '{path}' could not be written ({exc.strerror}); choose a "
                          "writable path") from None


def _related(a: Path, b: Path) -> bool:
    a, b = a.absolute(), b.absolute()
    return a == b or a in b.parents or b in a.parents


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in Path(text.replace("npz:", "")).stem)


def _vertical_summary(cfg: dict, split: dict) -> str:
    """The vertical split in words: clients, feature columns each, edge share, edges covered."""
    if split.get("clients") == 1:
        return ", one party (all feature columns and edges)"
    cols = "/".join(str(c) for c in split.get("columns", []))
    share = cfg.get("edge_share")
    edges = "all edges each" if cfg["algorithm"] == "glasu-simulated" or share is None else (
        f"{float(share):.0%} of the edges each")
    return (f", {split.get('clients')} vertical clients ({cfg.get('feature_split', 'random')} "
            f"feature split {cols} columns, {edges}, union covers "
            f"{split.get('union_edge_coverage', 0.0):.0%})")


def _print_summary(result: Any, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from fedgl.results import SUMMARY_METRICS

    cfg = result.config
    split = result.repeats[0].partition if result.repeats else {}
    if split.get("setting") == "vertical":
        parties = _vertical_summary(cfg, split)
    else:
        split_name = cfg.get("partition", "dirichlet")
        knob = ("the organisations' own split" if str(cfg["dataset"]).startswith("own:")
                else f"β={cfg['beta']:g}" if split_name == "dirichlet"
                else f"{split_name} split")
        parties = ("" if cfg["algorithm"].startswith("centralized")
                   else f", {cfg['clients']} clients, {knob}")
    title = (f"{cfg['algorithm']}"
             + (f" {cfg['hops']}-hop" if cfg["algorithm"] == "fedgcn" else "")
             + f" on {cfg['dataset']}{parties}, "
               f"{cfg['rounds']} rounds, {len(result.repeats)} repeat(s)")
    table = Table(title=title)
    table.add_column("metric")
    one = len(result.repeats) == 1
    table.add_column("value" if one else "mean ± std (population)", justify="right")

    def fmt(mean: float, std: float, unit: str, digits: int) -> str:
        return f"{mean:.{digits}f}{unit}" + ("" if one else f" ± {std:.{digits}f}")

    for key, label in SUMMARY_METRICS.items():
        if key not in result.summary or key.endswith("_seconds"):
            continue
        s = result.summary[key]
        if key.endswith("_acc"):
            table.add_row(label, fmt(s["mean"], s["std"], "", 4))
        elif key.endswith("_bytes"):
            table.add_row(label, fmt(s["mean"] / 1e6, s["std"] / 1e6, " MB", 3))
    for phase, label in (("setup", "setup"), ("pretrain", "pre-training"), ("train", "training"),
                         ("eval", "evaluation"), ("oracle", "oracle scoring"), ("total", "total")):
        values = [r.seconds[phase] for r in result.repeats if phase in r.seconds]
        if values:
            mean = sum(values) / len(values)
            std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
            table.add_row(f"time: {label}", fmt(mean, std, " s", 2))
    for phase, label in (("pretrain", "pre-training"), ("train", "training"),
                         ("eval", "evaluation")):
        values = [r.ledger["simulated_seconds"][phase] for r in result.repeats
                  if phase in r.ledger.get("simulated_seconds", {})]
        if values:   # --bandwidth / --latency: the network model's time of each phase
            mean = sum(values) / len(values)
            std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
            table.add_row(f"simulated time: {label}", fmt(mean, std, " s", 2))
    if "diverged" in result.summary:
        table.add_row("[bold red]DIVERGED repeats[/]",
                      "[bold red]" + ", ".join(map(str, result.summary["diverged"]["values"])) + "[/]")
    console = Console()
    console.print(table)
    for rep in result.repeats:
        if "diverged" in rep.extra:
            d = rep.extra["diverged"]
            print(f"fedgl: warning: repeat {rep.repeat} DIVERGED at round {d['round']} (non-finite "
                  f"{d['what']}); it stopped there (--allow-divergence)", file=sys.stderr)
    model = f" and the model to {out}/model" if (Path(out) / "model").is_dir() else ""
    console.print(f"results written to {out}/result.json and {out}/history.csv{model}")


# ---------------------------------------------------------------------- partition
def _cmd_partition(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    cfg = Config.from_dict(_overrides(args))  # checked before torch loads
    check_config(cfg)
    if args.plot and (args.plot.endswith(("/", os.sep)) or Path(args.plot).is_dir()):
        name = args.plot.rstrip("/" + os.sep) or "labels"
        hint = name if Path(name).suffix.lower() in (".png", ".pdf", ".svg") else (
            str(Path(name) / "labels.png"))
        raise ConfigError(f"--plot '{args.plot}' is a folder path; give a file name, e.g. "
                          f"--plot {hint}")
    if args.plot:
        require("matplotlib", feature="--plot")
    if args.plot and Path(args.plot).suffix.lower() not in (".png", ".pdf", ".svg"):
        raise ConfigError(f"--plot '{args.plot}' must end in .png, .pdf or .svg")
    if args.plot:
        _check_writable_folder(Path(args.plot).absolute().parent, "--plot folder")
        _probe_writable(Path(args.plot))
    _preload()
    from fedgl.api import load_graph
    from fedgl.data.shards import make_partition
    from fedgl.progress import reporting

    with reporting(True):   # synthetic generation, METIS, Louvain: progress on stderr
        graph = load_graph(cfg)
        part = make_partition(graph, cfg, cfg.seed)
    stats = part.stats(graph)
    knob = {"dirichlet": f" β={cfg.beta:g}", "p-split": f" p={cfg.mcmahan_p:g}"}.get(cfg.partition, "")
    table = Table(title=f"{graph.name}: {graph.num_nodes} nodes, {graph.num_edges} edges, "
                        f"{cfg.clients} clients, {cfg.partition}{knob}, seed {cfg.seed}")
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


# ---------------------------------------------------------------------- analyze-comm
def _cmd_analyze_comm(args: argparse.Namespace) -> int:
    import json

    from fedgl.comm_analysis import analyze, format_text

    out = Path(args.out) if args.out else None
    if out is not None:
        if out.suffix.lower() != ".json":
            raise ConfigError(f"--out '{args.out}' must end in .json")
        _check_writable_folder(out.absolute().parent, "--out folder")
    result = analyze(**_overrides(args))
    print(format_text(result))
    if out is not None:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(result, indent=2) + "\n")
        except OSError as exc:
            raise ConfigError(f"--out '{args.out}' could not be written ({exc.strerror}); "
                              "choose a writable path") from None
        print(f"analysis written to {out}")
    return 0


# ---------------------------------------------------------------------- plugins
def _cmd_plugins() -> int:
    """Every installed plugin: loaded and checked, one line each; exit 2 if any is broken."""
    from fedgl.config.plugins import discover

    found = discover()
    if not found:
        print("no plugin algorithms installed (entry point group fedgl.algorithms; see "
              "docs/extending.md)")
        return 0
    broken = 0
    for name, plugin in found.items():
        try:
            spec = get_spec(name) if name in plugin_names() else None
            if spec is None:
                from fedgl.config.plugins import clash_error

                raise clash_error(plugin)
            print(f"  {name:<18} ok     {plugin.package} {plugin.version}: {spec.summary}")
        except FedglError as exc:
            broken += 1
            print(f"fedgl: error: {exc}", file=sys.stderr)
    return 2 if broken else 0


# ---------------------------------------------------------------------- datasets
def _cmd_datasets(args: argparse.Namespace) -> int:
    from fedgl.data.catalog import available_datasets, dataset_problems, resolve_data_root

    root = resolve_data_root(args.data_root)   # listing imports no torch (fedgl.data.catalog)
    print(f"data root: {root}")
    if args.check:
        from fedgl.data.datasets import check_datasets

        checked = check_datasets(args.data_root)
        shown = {"generated": "generated on first use (no files to check)"}
        for name, state in checked.items():
            print(f"  {name:<9} {shown.get(state, state)}")
        bad = [n for n, state in checked.items() if state not in ("ok", "missing", "generated")]
        if bad:
            raise DataError(f"{len(bad)} dataset(s) failed the check ({', '.join(bad)}); "
                            "replace their files")
        return 0
    damaged = dataset_problems(args.data_root)  # cheap checks: sizes and headers
    for name, ok in available_datasets(args.data_root).items():
        if name in damaged:
            state = f"damaged: {damaged[name]} (replace the file; --check tells more)"
        elif ok:
            state = ("generated on first use, then cached" if name.startswith("synthetic:")
                     else "available (files present; --check validates them)")
        elif name in ("cora", "citeseer", "pubmed"):
            state = "missing (downloaded on first use when online)"
        else:
            state = "missing (put its files under the data root; see docs/scale.md)"
        print(f"  {name:<18} {state}")
    print(f"  {'npz:PATH':<18} any gnn-benchmark .npz file")
    return 0


if __name__ == "__main__":  # pragma: no cover
    _code = main()
    if _code == 130:
        # Under `python -m`, CPython turns an interrupt that main() handled into death by
        # SIGINT at exit; exit with the code main() chose (the run's resources are closed).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_code)
    sys.exit(_code)
