"""``fedgl shard``, ``fedgl client`` and ``fedgl server``: a deployment, command by command
(docs/deployment.md)."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fedgl.config import Config
from fedgl.deployment.client_policy import add_policy_flags
from fedgl.deployment.scratch import scratch_folder, terminate_as_interrupt
from fedgl.deployment.tls import check_transport, trial_certificates
from fedgl.errors import ConfigError, RunAborted, ServerInterrupted

APP_NAME = "fedgl-deployment"
#: seconds between the SuperNode's checks for a ClientApp task (Flower's default is 1 s)
TASK_POLL_INTERVAL = "0.1"
#: ``FEDGL_SUPERNODE``: how ``fedgl client`` answers messages (``relay``, the default: inside
#: its paced SuperNode; the others are earlier layouts the benchmarks compare it with)
SUPERNODE_LAYOUTS = ("relay", "runner", "flower")


def _flower_bin(name: str) -> str:
    """A Flower executable from this Python's environment (or PATH)."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.is_file() else shutil.which(name)
    if not found:
        raise ConfigError(f"'{name}' is not installed; install the extra: pip install "
                          "'fedgl[flower]'")
    return found


def _flower_env(flwr_home: Path, *, task_poll: bool = True) -> dict[str, str]:
    """The environment of a Flower command; with ``task_poll``, its SuperExec checks for tasks
    every :data:`TASK_POLL_INTERVAL` s (a SuperNode's, which answers messages), without it
    every 1 s, Flower's default (a SuperLink's, which only starts a run's ServerApp)."""
    env = dict(os.environ)
    env["FLWR_HOME"] = str(flwr_home)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    if task_poll:
        env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", TASK_POLL_INTERVAL)
    env.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    return env


def check_address(address: str, flag: str = "--superlink") -> str:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{flag} '{address}' must look like HOST:PORT, e.g. 127.0.0.1:9093")
    return address


def check_reachable(address: str, timeout: float = 10.0) -> None:
    """A TCP connection to the SuperLink within ``timeout`` (Flower would retry for ever)."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ConfigError(f"the SuperLink at {address} is unreachable ({reason}); start "
                          "`flower-superlink` there first or fix --superlink") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tls_flags(insecure: bool, root_certificates: str | None) -> list[str]:
    if insecure == bool(root_certificates):
        raise ConfigError("give either --root-certificates CA.pem (TLS) or --insecure (a trial "
                          "on one machine)")
    if root_certificates and not Path(root_certificates).is_file():
        raise ConfigError(f"--root-certificates '{root_certificates}' does not exist")
    return ["--insecure"] if insecure else ["--root-certificates", str(root_certificates)]


# ---------------------------------------------------------------------- shard
def cmd_shard(cfg: Config, out: Path) -> list[Path]:
    """Write one shard per client of ``cfg``'s dataset and partition into ``out``."""
    import numpy as np

    from fedgl.data.client_data import split_graph
    from fedgl.data.datasets import load_graph
    from fedgl.data.provenance import settings_sha256, shard_settings
    from fedgl.data.shard_format import write_shard
    from fedgl.data.shards import make_partition

    if cfg.spec.setting not in ("horizontal", "vertical"):
        raise ConfigError(f"fedgl shard writes horizontal or vertical shards; '{cfg.algorithm}' "
                          f"is {cfg.spec.setting}")
    if out.exists() and any(out.glob("client-*.json")):
        raise ConfigError(f"'{out}' already holds shards; choose an empty --out folder")
    graph = load_graph(cfg)
    if cfg.spec.setting == "vertical":
        from fedgl.config.registry import load_path

        cfg.spec.deployment()   # a vertical algorithm that does not run deployed: why, in one line
        return load_path(cfg.spec.shards)(graph, cfg, out)
    if cfg.clients > graph.num_nodes:
        raise ConfigError(f"clients ({cfg.clients}) exceeds the graph's {graph.num_nodes} nodes")
    part = make_partition(graph, cfg, cfg.seed)
    source = {"dataset": cfg.dataset, "partition": cfg.partition, "beta": cfg.beta,
              "clients": cfg.clients, "seed": cfg.seed,
              "normalize_features": cfg.normalize_features}
    settings = shard_settings(cfg)
    paths = [write_shard(d, out, {**source, "settings": settings,
                                  "settings_sha256": settings_sha256(settings)})
             for d in split_graph(graph, part)]
    (out / "federation.json").write_text(json.dumps(
        {**source, "num_features": graph.num_features, "num_classes": graph.num_classes,
         "nodes_per_client": [int(n) for n in np.bincount(part.owner, minlength=cfg.clients)]},
        indent=2) + "\n")
    return paths


# ---------------------------------------------------------------------- client
def cmd_client(args: Any) -> int:
    """Start this organisation's party, its Flower SuperNode and fedgl's relay runner; run until
    the SuperNode ends (or Ctrl-C / SIGTERM), then stop all three.

    The SuperNode runs with ``--isolation process``: it starts no ClientApp of its own, and the
    only task runner on its Runtime API is :mod:`fedgl.federation.flower.relay_runner`, which
    answers every message with fedgl's relay and never loads a run's app. The runner gets the
    party's socket and a fresh token (through a pipe) and no path of the key or the shard."""
    from fedgl.deployment.client_policy import policy_from_args
    from fedgl.deployment.party import Party

    superlink = check_address(args.superlink)
    tls = _tls_flags(args.insecure, args.root_certificates)
    _flower_bin("flower-supernode")
    state_dir = _state_dir(args.state_dir)
    if not 0 < args.max_message_mb < 1 << 24:   # NaN fails too
        raise ConfigError(f"--max-message-mb {args.max_message_mb:g} must be a positive size "
                          "in MiB below 2^24, e.g. 1024")
    party = Party(args.data, args.key, args.roster,
                  policy_from_args(args),
                  device=args.device, threads=args.threads, state_dir=state_dir,
                  max_message_bytes=int(args.max_message_mb * (1 << 20)), out=args.out)
    if args.auth_key and not Path(args.auth_key).is_file():
        raise ConfigError(f"--auth-key '{args.auth_key}' does not exist")
    layout = os.environ.get("FEDGL_SUPERNODE", "relay")
    if layout not in SUPERNODE_LAYOUTS:
        raise ConfigError(f"FEDGL_SUPERNODE='{layout}' is not a SuperNode layout; unset it (or "
                          f"use one of {', '.join(SUPERNODE_LAYOUTS)})")
    check_reachable(superlink)
    check_transport(superlink, None if args.insecure else args.root_certificates)
    with scratch_folder("fedgl-party-") as private:   # removed on every way out
        return _serve_client(args, party, superlink, tls, layout, private)


def _serve_client(args: Any, party: Any, superlink: str, tls: list[str], layout: str,
                  private: Path) -> int:
    """:func:`cmd_client` once its input is checked: ``private`` is its scratch folder."""
    from fedgl.deployment.party import warm_up

    sock_path = private / "party.sock"
    flwr_home = Path(args.flwr_home) if args.flwr_home else private / "flwr"
    flwr_home.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    relay_token = secrets.token_hex(32)
    server = threading.Thread(target=party.serve, args=(sock_path, stop, relay_token),
                              daemon=True)
    server.start()
    threading.Thread(target=warm_up, daemon=True).start()   # while the SuperNode starts
    runtime = f"127.0.0.1:{args.runtime_port or free_port()}"
    flower_args = [*tls, "--superlink", superlink, "--isolation", "process", "--host",
                   "127.0.0.1", "--port", runtime.rpartition(":")[2]]
    if args.auth_key:
        flower_args += ["--auth-supernode-private-key", str(args.auth_key)]
    if args.reconnect_for is not None:
        flower_args += ["--max-wait-time", f"{args.reconnect_for:g}"]
    from fedgl.deployment.client_log import (
        GAVE_UP,
        NOT_ACTIVATED,
        SupernodeLines,
        gave_up_line,
        not_activated_line,
        open_log,
    )

    log_path = client_log_path(args, party)
    log_file = open_log(log_path)
    shown_log = log_path if log_file is not None else None
    party.log_path = shown_log   # named in the party's "finished" line
    print(f"client {party.client_id}: shard {party.manifest['_path']} "
          f"({party.manifest['num_nodes']} nodes), joining {superlink}"
          f"{f'; log in {log_path}' if shown_log else ''}", flush=True)
    if party.safety.plaintext:
        from fedgl.deployment.client_policy import plaintext_notice

        print(plaintext_notice(f"client {party.client_id}"), flush=True)
    env = {**_flower_env(flwr_home), "PYTHONUNBUFFERED": "1"}
    proc, runner = _start_supernode(layout, flower_args, runtime, sock_path, relay_token, env,
                                    piped=True)

    stopped = threading.Event()   # set when fedgl client itself stops the SuperNode
    gave_up = threading.Event()   # set when the SuperNode stopped reconnecting

    def _event(event: str) -> None:
        if event == GAVE_UP and not stopped.is_set():
            print(gave_up_line(party.client_id, shown_log), file=sys.stderr, flush=True)
            gave_up.set()
            _stop()

    def _stop(*_: object) -> None:  # no waiting here: the main thread is in proc.wait()
        stopped.set()
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    def _watch_runner() -> None:   # without its relay the SuperNode would answer nothing
        if runner is None:
            return
        runner.wait()
        if proc.poll() is None and not stop.is_set():
            print(f"client {party.client_id}: the relay runner stopped (exit "
                  f"{runner.returncode}); stopping the SuperNode", flush=True)
            _stop()

    threading.Thread(target=_watch_runner, daemon=True).start()
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    lines = SupernodeLines(log_file, bool(args.verbose), on_event=_event)
    pump = lines.start(proc.stdout) if proc.stdout is not None else None
    try:
        code = proc.wait()
        if pump is not None:
            pump.join(timeout=2)   # the SuperNode's last lines, which may name why it ended
        if gave_up.is_set():
            code = 1
        elif not stopped.is_set():
            if NOT_ACTIVATED in lines.events:
                print(not_activated_line(party.client_id, shown_log), file=sys.stderr,
                      flush=True)
            else:
                where = f"see {shown_log}" if shown_log else "see the SuperNode's lines above"
                print(f"fedgl: client {party.client_id}: the SuperNode ended by itself (exit "
                      f"{code}): the SuperLink refused or forgot this node (a SuperLink "
                      "restarted without --database forgets every node; one with "
                      "--enable-supernode-auth refuses an unregistered key); "
                      f"{where}, then restart `fedgl client`", file=sys.stderr, flush=True)
            code = code or 1
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C: no traceback
        print(f"client {party.client_id}: stopped (Ctrl-C)"
              f"{f'; log in {shown_log}' if shown_log else ''}", flush=True)
        code = 130
    finally:
        stop.set()
        if runner is not None:
            _kill_group(runner)
        _kill_group(proc)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.join(timeout=5)
        if log_file is not None:
            log_file.close()
    if code == 130:   # Ctrl-C: 130, as every fedgl command (SIGTERM, a service's stop: 0)
        return 130
    return 0 if code in (0, -signal.SIGTERM) else 1


def _positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds above zero."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def client_log_path(args: Any, party: Any) -> Path:
    """``fedgl client``'s log file: ``--log``, else ``client-<k>.log`` in ``--state-dir``, else
    beside the shard's manifest (the organisation's own folder)."""
    if getattr(args, "client_log", None):
        return Path(args.client_log)
    name = f"client-{party.client_id}.log"
    if getattr(args, "state_dir", None):
        return Path(args.state_dir) / name
    return Path(party.manifest["_path"]).parent / name


def _start_supernode(layout: str, flower_args: list[str], runtime: str, sock_path: Path,
                     token: str, env: dict[str, str], piped: bool = False
                     ) -> tuple[subprocess.Popen, subprocess.Popen | None]:
    """The SuperNode (its own process group) and, where the layout has one, the relay runner.

    ``relay`` (the default): fedgl's paced SuperNode answering each message with the relay in
    its own process (:mod:`fedgl.federation.flower.supernode`; the token through a pipe).
    ``runner``: the paced SuperNode beside the relay runner, two wake-up pipes between them
    (the SuperNode announces each stored message, the runner each pushed reply). ``flower``:
    Flower's own SuperNode beside a runner polling every 0.1 s (the layout before; the
    benchmarks compare them, ``FEDGL_SUPERNODE``)."""
    paced = [sys.executable, "-m", "fedgl.federation.flower.supernode"]
    # ``piped``: the SuperNode's output (stdout and stderr, as text lines) comes to fedgl client
    out: dict[str, Any] = ({"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True,
                            "bufsize": 1} if piped else {})
    if layout == "relay":
        read, write = os.pipe()
        try:
            proc = subprocess.Popen([*paced, "--party", str(sock_path), "--token-fd", str(read),
                                     *flower_args], env=env, pass_fds=(read,),
                                    start_new_session=True, preexec_fn=_die_with_parent, **out)
        finally:
            os.close(read)
        with os.fdopen(write, "w") as pipe:
            pipe.write(token)
        return proc, None
    if layout == "flower":
        proc = subprocess.Popen([_flower_bin("flower-supernode"), *flower_args], env=env,
                                start_new_session=True, preexec_fn=_die_with_parent, **out)
        return proc, _start_relay_runner(runtime, sock_path, token, env)
    task_read, task_write = os.pipe()
    reply_read, reply_write = os.pipe()
    try:
        proc = subprocess.Popen([*paced, "--task-fd", str(task_write), "--reply-fd",
                                 str(reply_read), *flower_args], env=env,
                                pass_fds=(task_write, reply_read), start_new_session=True,
                                preexec_fn=_die_with_parent, **out)
        runner = _start_relay_runner(runtime, sock_path, token, env,
                                     wake=(task_read, reply_write))
    finally:
        for fd in (task_read, task_write, reply_read, reply_write):
            os.close(fd)
    return proc, runner


def _start_relay_runner(runtime: str, sock_path: Path, token: str, env: dict[str, str],
                        wake: tuple[int, int] | None = None) -> subprocess.Popen:
    """The relay runner (its own process group, stopped with ``fedgl client``); its token goes
    through a pipe, not its command line or environment. ``wake``: the read end of the
    SuperNode's task pipe and the write end of the reply pipe, inherited by the runner."""
    read, write = os.pipe()
    wake_args = ["--task-fd", str(wake[0]), "--reply-fd", str(wake[1])] if wake else []
    try:
        runner = subprocess.Popen(
            [sys.executable, "-m", "fedgl.federation.flower.relay_runner", "--runtime-api",
             runtime, "--party", str(sock_path), "--token-fd", str(read), *wake_args],
            env=env, pass_fds=(read, *(wake or ())), start_new_session=True,
            preexec_fn=_die_with_parent)
    finally:
        os.close(read)
    with os.fdopen(write, "w") as pipe:
        pipe.write(token)
    return runner


def _state_dir(path: str | None) -> Path | None:
    """The party's own records folder (``--state-dir``), created private (0700) if absent."""
    if path is None:
        return None
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--state-dir '{path}' exists and is not a folder; choose another path")
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        probe = folder / ".fedgl-write-check"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"--state-dir '{path}' is not writable ({exc.strerror or exc}); "
                          "choose a folder this client can write") from None
    return folder


def _die_with_parent() -> None:
    """In the SuperNode's process (Linux): be stopped when ``fedgl client`` dies, even by
    SIGKILL, so no SuperNode outlives its party."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    """Stop the SuperNode and what it started (its process group): SIGTERM, then SIGKILL for
    whatever is left in the group after 10 s or once the leader is gone (a ClientApp process
    that ignores SIGTERM would otherwise outlive its SuperNode)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


# ---------------------------------------------------------------------- server
APP_TOML = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "1.0.0"
description = "fedgl's deployment: {serverapp} and the ClientApp relay"
license = "MIT"
dependencies = []

[tool.flwr.app]
publisher = "fedgl"

[tool.flwr.app.components]
serverapp = "{serverapp}"
clientapp = "fedgl.federation.flower.client_app:app"

[tool.flwr.app.config]
{config_key} = ""
"""


def write_app(folder: Path, serverapp: str = "fedgl.deployment.server_app:app",
              config_key: str = "fedgl-job", name: str = APP_NAME) -> Path:
    """The Flower app folder ``flwr run`` submits: only its pyproject.toml (the components are
    fedgl's, installed on every machine; a benchmark may name its own ServerApp, a module in
    ``folder``, and the run-config key that points it at its job file)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(APP_TOML.format(name=name, serverapp=serverapp,
                                                           config_key=config_key))
    return folder


def cmd_server(cfg: Config, args: Any) -> dict[str, Any]:
    """Submit the run to the SuperLink with ``flwr run`` and wait for it; the job's status."""
    from fedgl.deployment.party import read_roster

    superlink = check_address(args.superlink)
    tls = _tls_flags(args.insecure, args.root_certificates)
    cfg.spec.deployment()
    roster = read_roster(args.roster)
    if cfg.clients != len(roster.ids):
        raise ConfigError(f"the config has {cfg.clients} clients but the roster "
                          f"'{args.roster}' has {len(roster.ids)}; set --clients "
                          f"{len(roster.ids)}")
    if cfg.repeats != 1:
        raise ConfigError("a deployed run is one repeat; set --repeats 1")
    start_timeout = getattr(args, "start_timeout", 30.0)
    if not 1 <= start_timeout <= 3600:   # NaN fails too
        raise ConfigError(f"--start-timeout {start_timeout:g} must be between 1 and 3600 "
                          "seconds")
    if str(cfg.dataset).startswith("own:") and not getattr(args, "resume", None) \
            and not getattr(args, "predict", None):
        from fedgl.data.provenance import refuse_own_keys

        refuse_own_keys(cfg)
    out = Path(cfg.out).absolute()
    resume = bool(getattr(args, "resume", None))
    held = [n for n in ("result.json", "prediction.json") if (out / n).exists()]
    if held and not args.overwrite:
        raise ConfigError(f"'{out}' already holds results ({held[0]}); choose another --out or "
                          "pass --overwrite")
    if not resume and (out / "checkpoint.pt").is_file():
        raise ConfigError(f"'{out}' holds a checkpoint of an unfinished run; continue it with "
                          f"`fedgl server --resume {out}` or choose another --out")
    _flower_bin("flwr")
    check_reachable(superlink)
    from fedgl.deployment.client_policy import plaintext_exchange, plaintext_notice

    if plaintext_exchange(cfg):
        print(plaintext_notice("fedgl server"), flush=True)
    check_transport(superlink, None if args.insecure else args.root_certificates)
    from fedgl.deployment.run_watch import hold_server_lock

    lock = hold_server_lock(out)   # before anything is submitted; released as this ends
    try:
        with scratch_folder("fedgl-server-") as work, terminate_as_interrupt():
            return _serve_run(args, cfg, superlink, tls, out, resume, work)
    finally:
        os.close(lock)


def _serve_run(args: Any, cfg: Config, superlink: str, tls: list[str], out: Path, resume: bool,
               work: Path) -> dict:
    """:func:`cmd_server` once its input is checked: ``work`` is its scratch folder (removed
    by the caller however this ends; SIGTERM and SIGHUP end it as Ctrl-C does, which also stops
    the run on the SuperLink)."""
    app = write_app(work / "app")
    home = work / "flwr"
    home.mkdir()
    conn = {"address": superlink}
    conn.update({"insecure": True} if tls == ["--insecure"] else
                {"root-certificates": str(Path(tls[1]).absolute())})
    lines = ["[superlink]", 'default = "fedgl"', "", "[superlink.fedgl]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in conn.items()]
    (home / "config.toml").write_text("\n".join(lines) + "\n")
    from fedgl.deployment.run_watch import StartWatch, busy_line, busy_runs, flwr_json

    flwr, env = _flower_bin("flwr"), _flower_env(home)
    busy = busy_runs(flwr_json(flwr, env, "ls"))
    if busy and not getattr(args, "take_over", False):
        raise ConfigError(busy_line(superlink, busy))
    for run_id, state in busy:   # --take-over: the other run stops; its fedgl server says so
        subprocess.run([flwr, "stop", run_id, "fedgl"], env=env, capture_output=True,
                       timeout=30, check=False)
        print(f"fedgl server: taking the federation over: run {run_id} ({state}) stopped on "
              "the SuperLink", flush=True)
    status = work / "status.json"
    job = {"config": cfg.replace(out=str(out)).to_dict(), "roster": str(Path(args.roster)
                                                                         .absolute()),
           "out": str(out), "overwrite": bool(args.overwrite), "status": str(status),
           "resume": resume, "run_id_file": str(work / "run_id"),
           "log": str(work / "server.log"),
           "timeout": args.message_timeout, "join_timeout": args.join_timeout}
    if getattr(args, "predict", None):
        job["predict"] = str(Path(args.predict).absolute())
    (work / "job.json").write_text(json.dumps(job))
    cmd = [_flower_bin("flwr"), "run", str(app), "fedgl", "--stream",
           "--run-config", f'fedgl-job="{work / "job.json"}"']
    log = work / "flwr-run.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env=_flower_env(home), stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
        let_go = threading.Event()   # the ServerApp is not followed past flwr run
        shown = _show_log(work / "server.log", lambda: proc.poll() is None or (
            not let_go.is_set() and _serverapp_alive(work, status)), bool(cfg.progress))

        def _abort() -> None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

        watch = StartWatch(log, (work / "run_id").exists,
                           lambda rid: flwr_json(flwr, env, "ls", "--run-id", str(rid)),
                           lambda rid: subprocess.run([flwr, "stop", str(rid), "fedgl"],
                                                      env=env, capture_output=True, timeout=30,
                                                      check=False),
                           _abort, timeout=float(getattr(args, "start_timeout", 30.0)))
        watcher = watch.start()
        from fedgl.deployment.run_watch import LinkWatch, tcp_reachable

        link = LinkWatch(superlink, lambda: tcp_reachable(superlink), lambda line: print(
            f"fedgl: {time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True))
        link.start()
        try:
            proc.wait()
            from fedgl.deployment.run_watch import run_status

            if _serverapp_alive(work, status) and str(run_status(
                    work / "run_id", lambda rid: flwr_json(flwr, env, "ls", "--run-id", str(rid))
                    )).startswith("finished"):
                let_go.set()   # the run is over on the SuperLink: its ServerApp is told so
                _end_serverapp(work, status)
            if not let_go.is_set() and _serverapp_alive(work, status):   # flwr run lost the
                # SuperLink; the run goes on
                print(f"fedgl: {time.strftime('%H:%M:%S')} flwr run ended before the run's "
                      "ServerApp (it lost the SuperLink?); following the ServerApp until it "
                      "ends", file=sys.stderr, flush=True)
                while _serverapp_alive(work, status):
                    time.sleep(0.5)
        except KeyboardInterrupt:
            let_go.set()
            said = _stop_run(work, home, proc)
            _end_serverapp(work, status)
            raise ServerInterrupted(said) from None
        finally:
            watch.done.set()
            link.done.set()
            watcher.join(timeout=40)
            shown.join()
            _keep_log(work / "server.log", out)
    if watch.problem is not None:
        raise RunAborted(watch.problem)
    if not status.is_file():
        from fedgl.deployment.run_watch import stopped_line

        stopped = stopped_line(work / "run_id", out, lambda rid: flwr_json(
            flwr, env, "ls", "--run-id", str(rid)))
        if stopped is not None:
            raise RunAborted(stopped)
        if link.was_away:
            from fedgl.deployment.run_watch import how_to_go_on, run_status, tcp_reachable

            run_id = _submitted_run(work)
            if run_id is not None and tcp_reachable(superlink) and not str(run_status(
                    work / "run_id", lambda rid: flwr_json(flwr, env, "ls", "--run-id",
                                                           str(rid)))).startswith("finished"):
                # its ServerApp is gone, but the SuperLink back from a restart may still list
                # the run as running, and the federation as busy to the --resume below
                subprocess.run([flwr, "stop", str(run_id), "fedgl"], env=env,
                               capture_output=True, timeout=30, check=False)
            raise RunAborted(f"the SuperLink at {superlink} went away during the run and the run "
                             f"ended with it; {how_to_go_on(out, 'once it is back')}")
        tail = log.read_text()[-600:].strip().splitlines()
        raise RunAborted(f"the ServerApp did not finish (flwr run exit {proc.returncode}): "
                         f"{tail[-1] if tail else 'no output'}")
    result = json.loads(status.read_text())
    if not result.get("ok"):
        if result.get("kind") in ("ConfigError", "DataError", "FedglError", "OutputError"):
            raise ConfigError(result.get("error", "the server refused the run"))
        raise RunAborted(result.get("error", "the deployed run failed"))
    return {"out": str(out)}


def _serverapp_alive(work: Path, status: Path) -> bool:
    """Whether the run's ServerApp (its process id in ``work``) still runs without having
    written its ``status``."""
    from fedgl.deployment.run_watch import SERVERAPP_PID

    if status.is_file():
        return False
    try:
        os.kill(int((work / SERVERAPP_PID).read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def _end_serverapp(work: Path, status: Path) -> None:
    """Ctrl-C while following a ServerApp that ``flwr run`` lost: end it (SIGTERM)."""
    from fedgl.deployment.run_watch import SERVERAPP_PID

    if _serverapp_alive(work, status):
        try:
            os.kill(int((work / SERVERAPP_PID).read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            pass


def _show_log(path: Path, running: Any, show: bool) -> threading.Thread:
    """Print the ServerApp's log lines (:mod:`fedgl.deployment.server_log`) as they appear,
    while ``running()`` (``flwr run``, or the ServerApp it lost); nothing with ``show`` False
    (``--no-progress``)."""
    from fedgl.deployment.server_log import Tail

    tail = Tail(path)

    def follow() -> None:
        while True:
            done = not running()
            for line in tail.new_lines():
                if show:
                    print(f"fedgl: {line}", file=sys.stderr, flush=True)
            if done:
                return
            time.sleep(0.2)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    return thread


def _keep_log(path: Path, out: Path) -> None:
    """The ServerApp's log goes to ``--out/server.log`` (appended to on a resumed run) when the
    run wrote its folder."""
    if path.is_file() and out.is_dir():
        with open(out / "server.log", "ab") as f:
            f.write(path.read_bytes())


def _stop_run(work: Path, flwr_home: Path, proc: subprocess.Popen) -> str:
    """Ctrl-C on ``fedgl server``: stop the run on the SuperLink too (``flwr stop``; the
    ServerApp it started would otherwise go on, orphaned, and a run still pending would start
    with the next SuperLink), then ``flwr run`` itself. The SuperLink ends the run's ServerApp
    and tells the SuperNodes, which end its ClientApps. The run is the one whose id the
    ServerApp wrote as it started (``work/run_id``), else the one ``flwr run`` printed on
    submission (a run still pending); returns what became of it (:func:`stop_clause`)."""
    run_id = _submitted_run(work)
    for _ in range(100):   # flwr run may be submitting right now: wait up to 10 s for its id
        if run_id is not None or proc.poll() is not None:
            break
        time.sleep(0.1)
        run_id = _submitted_run(work)
    if run_id is None:
        run_id = _submitted_run(work)   # printed as flwr run ended
    why = "no run id"
    if run_id is not None:
        try:
            done = subprocess.run([_flower_bin("flwr"), "stop", str(run_id), "fedgl"],
                                  env=_flower_env(flwr_home), capture_output=True, text=True,
                                  timeout=30, check=False)
            said = [ln.strip() for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
            why = "" if done.returncode == 0 else (said[-1][:200] if said else
                                                    f"exit {done.returncode}")
        except (subprocess.TimeoutExpired, OSError, ConfigError) as exc:
            why = f"{type(exc).__name__}"
    _kill_group(proc)
    return stop_clause(run_id, why)


def _submitted_run(work: Path) -> int | None:
    """The id of the run ``fedgl server`` submitted: the ServerApp's (``run_id``, once it
    started), else the one ``flwr run`` printed (``flwr-run.log``); None before either."""
    from fedgl.deployment.run_watch import run_id_from

    try:
        return int((work / "run_id").read_text())
    except (OSError, ValueError):
        pass
    try:
        return run_id_from((work / "flwr-run.log").read_text(errors="replace"))
    except OSError:
        return None


def stop_clause(run_id: int | None, why: str) -> str:
    """What the interrupted ``fedgl server``'s line says of its run on the SuperLink: stopped
    only where ``flwr stop`` said so (``why`` empty), else how to stop it."""
    if run_id is None:
        return ("flwr run had reported no run id, so fedgl server stopped no run (`flwr ls` "
                "lists the SuperLink's runs)")
    if not why:
        return f"run {run_id} was stopped on the SuperLink"
    return (f"run {run_id} may still be on the SuperLink (flwr stop failed: {why}): stop it "
            f"with `flwr stop {run_id}` against the SuperLink")


def resumed_config(args: Any, overrides: dict[str, Any]) -> Config:
    """``fedgl server --resume DIR``: the checkpoint's config, checked against the flags given
    (as ``fedgl run --resume``: a key that would change the result is refused, naming it);
    ``out`` is DIR."""
    from fedgl.api import as_config
    from fedgl.checkpoint import load_checkpoint, resume_config
    from fedgl.config.schema import migrate_stored

    if args.overwrite:
        raise ConfigError("--resume continues a run in its folder; drop --overwrite")
    given = (as_config(args.config_file, **overrides).to_dict() if args.config_file
             else overrides)
    ckpt = load_checkpoint(args.resume)
    return Config.from_dict(resume_config(migrate_stored(ckpt.config), given,
                                          Path(args.resume)))


# ---------------------------------------------------------------------- parsers
SHARD_KEYS = ("algorithm", "dataset", "data_root", "normalize_features", "clients", "partition",
              "beta", "mcmahan_p",
              "metis_max_degree", "min_client_size", "seed", "sbm_nodes", "sbm_classes",
              "sbm_alpha", "sbm_mu", "sbm_features", "sbm_noise", "feature_split", "edge_share")


def add_parsers(sub: Any, add_config_flags: Any, algorithm: str | None = None) -> None:
    """The ``shard``, ``client`` and ``server`` sub-commands (cli.py calls this)."""
    shard = sub.add_parser("shard", help="write one data shard per client (a deployment's "
                           "organisations each get their own)",
                           description="Partition a dataset and write client-<k>.json/.npz "
                                       "per client (docs/deployment.md). Horizontal algorithms "
                                       "(the default): each client's own nodes with their "
                                       "features, labels and incident edges. --algorithm glasu "
                                       "(vertical): each client's own feature columns of every "
                                       "node and its own edge set (--feature-split, "
                                       "--edge-share), labels per --label-holders; the same "
                                       "split a local GLASU run makes for that seed.")
    shard.add_argument("config_file", nargs="?", metavar="CONFIG", help="YAML file of config keys")
    shard.add_argument("--out", dest="shard_out", required=True, metavar="DIR")
    add_config_flags(shard, SHARD_KEYS)
    shard.add_argument("--label-holders", dest="label_holders", choices=("all", "one"),
                       default=argparse.SUPPRESS,
                       help="vertical (glasu): labels and masks at every client (all, the "
                            "default) or at client 0 only (one)")

    client = sub.add_parser("client", help="run one organisation's client: its party and a "
                            "Flower SuperNode", description="Join a Flower SuperLink with this "
                            "organisation's own shard, identity key and roster.")
    client.add_argument("--superlink", required=True, metavar="HOST:PORT")
    client.add_argument("--data", required=True, metavar="SHARD",
                        help="the client's shard manifest (client-<k>.json from fedgl shard)")
    client.add_argument("--key", required=True, metavar="KEY", help="client-<k>.key (fedgl keys)")
    client.add_argument("--roster", required=True, metavar="ROSTER", help="roster.json")
    _add_tls(client)
    client.add_argument("--auth-key", metavar="NODE_KEY", default=None,
                        help="SuperNode authentication private key: an EC key in OpenSSH "
                             "format (`ssh-keygen -t ecdsa -b 384 -N \"\" -f node-a`; the "
                             "coordinator registers node-a.pub), passed to Flower's "
                             "--auth-supernode-private-key")
    add_policy_flags(client)
    client.add_argument("--log", dest="client_log", default=None, metavar="FILE",
                        help="this client's log file, every line of its SuperNode included "
                             "(default: client-<k>.log in --state-dir, else beside the shard)")
    client.add_argument("--verbose", action="store_true",
                        help="also show Flower's own lines (always in the log file)")
    client.add_argument("--reconnect-for", type=_positive_seconds, default=None,
                        metavar="SECONDS",
                        help="how long the SuperNode keeps trying to reach a SuperLink it "
                             "lost before this client stops with one line (exit 1; a service "
                             "manager then restarts it); default: keep trying")
    client.add_argument("--state-dir", default=None, metavar="DIR",
                        help="this organisation's own records (its input record: the one "
                             "secure sum each input entered, its DP noise, the ε spent; its DP "
                             "release log; a GLASU party's model checkpoints), kept across "
                             "restarts; needed for DP and GLASU runs that checkpoint")
    client.add_argument("--out", default=None, metavar="DIR",
                        help="where this organisation keeps what it receives at the end of a "
                             "run: the model (model/), the scores of its own nodes (scores.csv) "
                             "and its metrics (default: ./fedgl-client-<k>)")
    client.add_argument("--no-model", action="store_true",
                        help="do not take the trained model at the end of a run (policy "
                             "key receive_model: false; the run itself is not affected)")
    client.add_argument("--device", default=None)
    client.add_argument("--threads", type=int, default=None)
    client.add_argument("--flwr-home", default=None, metavar="DIR",
                        help="Flower's folder for this SuperNode (default: a private temp folder)")
    client.add_argument("--runtime-port", type=int, default=0, metavar="PORT",
                        help="local port of the SuperNode's runtime API (default: a free one)")
    client.add_argument("--max-message-mb", type=float, default=1024.0, metavar="MB",
                        help="the largest message body the party reads once a run is set up; "
                             "a larger one is refused unread (default: 1024)")

    server = sub.add_parser("server", help="run the deployed server: a Flower ServerApp on the "
                            "SuperLink", description="Run CONFIG's algorithm over the clients "
                            "connected to the SuperLink; writes --out as `fedgl run` does.")
    server.add_argument("config_file", nargs="?", metavar="CONFIG", help="YAML file of config keys")
    server.add_argument("--superlink", required=True, metavar="HOST:PORT",
                        help="the SuperLink's address (its --port)")
    server.add_argument("--roster", required=True, metavar="ROSTER")
    _add_tls(server)
    server.add_argument("--overwrite", action="store_true")
    server.add_argument("--resume", metavar="DIR", default=None,
                        help="continue the checkpointed deployed run in DIR (as fedgl run "
                             "--resume); the clients rejoin as for a new run")
    server.add_argument("--predict", metavar="MODEL_DIR", default=None,
                        help="score instead of train: the model a run wrote (<out>/model) goes "
                             "to every organisation after the run's set-up exchange, and each "
                             "scores its own nodes in its own folder (docs/using-the-model.md); "
                             "the run's settings come from the model's card")
    server.add_argument("--join-timeout", type=float, default=300.0, metavar="S",
                        help="seconds to wait for every roster client's SuperNode")
    server.add_argument("--message-timeout", type=float, default=600.0, metavar="S",
                        help="seconds to wait for a client's reply to one message")
    server.add_argument("--take-over", action="store_true",
                        help="where the federation is busy with another run, stop that run on "
                             "the SuperLink and start this one (its fedgl server says so in one "
                             "line; a run that checkpoints continues later with --resume); "
                             "without it a busy federation is refused")
    server.add_argument("--start-timeout", type=float, default=30.0, metavar="S",
                        help="seconds the submitted run may stay pending on the SuperLink "
                             "before it is stopped and reported (its SuperExec is not "
                             "starting it)")
    add_config_flags(server, algorithm=algorithm)


def add_certs_parser(sub: Any) -> None:
    """``fedgl certs``: trial TLS certificates for the SuperLink's addresses."""
    certs = sub.add_parser("certs", help="write trial TLS certificates for the SuperLink (a CA "
                           "and a server certificate covering its addresses)",
                           description="Write ca.pem (public: give it to every organisation), "
                                       "ca.key (the CA's private key, mode 0600: keep it on the "
                                       "coordinator, off the SuperLink if you can), "
                                       "superlink.pem and superlink.key (the server's) into "
                                       "--out. The certificate covers every --host (a DNS name "
                                       "or an IP address, as the clients will reach the server) "
                                       "and always 127.0.0.1 and localhost, which the "
                                       "SuperLink's own SuperExec uses. Run again with the same "
                                       "--out to add a host: the CA is reused (the organisations "
                                       "keep their ca.pem) and a new server certificate covers "
                                       "the old hosts and the new. For a trial; production uses "
                                       "the organisations' PKI.")
    certs.add_argument("--host", action="append", required=True, metavar="NAME_OR_IP",
                       help="an address the SuperLink is reached by (repeat for several)")
    certs.add_argument("--out", dest="certs_out", required=True, metavar="DIR")
    certs.add_argument("--days", type=int, default=30,
                       help="validity of the server certificate (default: 30; the CA lasts "
                            "a year, or --days if longer)")


def cmd_certs(args: Any) -> dict[str, Path]:
    """Write the SuperLink certificate for ``--host`` into ``--out``, signed by the CA kept
    there (made first when the folder has none)."""
    import ipaddress

    hosts = tuple(dict.fromkeys(h.strip().strip("[]") for h in args.host))
    for h in hosts:
        try:
            ipaddress.ip_address(h)
        except ValueError:
            if not h or len(h) > 253 or not all(
                    part and len(part) <= 63 and part.replace("-", "").isalnum()
                    for part in h.split(".")):
                raise ConfigError(f"--host '{h}' is neither an IP address nor a DNS name; give "
                                  "the address clients reach the SuperLink by") from None
    if not 1 <= args.days <= 3650:
        raise ConfigError(f"--days must be between 1 and 3650 (got {args.days})")
    out = Path(args.certs_out)
    if not (out / "ca.pem").exists() and not (out / "ca.key").exists():
        stray = [n for n in ("superlink.pem", "superlink.key") if (out / n).exists()]
        if stray:
            raise ConfigError(f"'{out / stray[0]}' exists without the CA that signed it; choose "
                              "an empty --out folder")
    return trial_certificates(out, hosts, days=args.days)


def _add_tls(parser: Any) -> None:
    parser.add_argument("--root-certificates", default=None, metavar="CA.pem",
                        help="CA certificate that signed the SuperLink's TLS certificate")
    parser.add_argument("--insecure", action="store_true",
                        help="no TLS (a trial on one machine only)")
