"""deploy/systemd's units, exercised as systemd would run them.

The units are read as systemd reads them: ``%`` specifiers resolved (``%E``, ``%S``, ``%L`` point
into a temporary folder, ``%i`` is the instance), the environment files and ``Environment=``
lines applied, and each ``ExecStart=`` split into words with ``${VAR}`` (one word) and ``$VAR``
(split at whitespace) expanded. The one thing changed is the install location: the units name
``/opt/fedgl/venv``, the tests this Python's environment. The fast tests parse every command
line with the command's own parser (a renamed flag fails here) and, where ``systemd-analyze`` is
installed, check the files with ``systemd-analyze --user verify``; the slow one lays out
``trial-setup.sh``'s files and runs exactly the units' commands, a coordinator and three
organisations on 127.0.0.1, through a FedGCN run under the trial's policy, then stops every
service as systemd does and checks that nothing it started is left."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.flower_helpers import needs_flwr

UNITS = Path(__file__).resolve().parents[1] / "deploy" / "systemd"
PREFIX = "/opt/fedgl/venv"          # where the units expect fedgl's environment
SERVICES = [("fedgl-superlink.service", ""), ("fedgl-gate.service", ""),
            ("fedgl-server@.service", "trial"), ("fedgl-client@.service", "0")]


def read_unit(path: Path, prefix: str = PREFIX) -> dict[str, list[tuple[str, str]]]:
    """A unit file's sections as ``(key, value)`` pairs in order (continuation lines joined,
    comments dropped), with the install prefix replaced by ``prefix``."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    pending = ""
    for raw in path.read_text().replace(PREFIX, prefix).splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        key, _, value = line.partition("=")
        assert current is not None, f"{path.name}: '{line}' outside a section"
        current.append((key.strip(), value.strip()))
    return sections


def read_env_file(path: Path, prefix: str = PREFIX) -> dict[str, str]:
    """``KEY=value`` lines (systemd's EnvironmentFile=: comments and blank lines skipped)."""
    env = {}
    for raw in path.read_text().replace(PREFIX, prefix).splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: '{line}' is not KEY=value"
        env[key.strip()] = value.strip().strip('"')
    return env


def specifiers(text: str, dirs: dict[str, Path], instance: str) -> str:
    """systemd's ``%`` specifiers used by the units (a user manager's meaning)."""
    table = {"i": instance, "I": instance, "E": str(dirs["config"]), "S": str(dirs["state"]),
             "L": str(dirs["logs"]), "h": str(dirs["home"]), "%": "%"}

    def one(m: re.Match) -> str:
        assert m.group(1) in table, f"specifier %{m.group(1)} is not handled here"
        return table[m.group(1)]

    return re.sub(r"%(.)", one, text)


def expand_command(line: str, env: dict[str, str]) -> list[str]:
    """An ``ExecStart=`` line (specifiers resolved) as systemd runs it: words split as a shell
    would, ``${VAR}`` replaced in place (one word), a word ``$VAR`` split at whitespace."""
    argv: list[str] = []
    for word in shlex.split(line):
        whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if whole:
            argv += env.get(whole.group(1), "").split()
            continue
        word = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), word)
        assert "$" not in word, f"'{word}': only ${{VAR}} in a word or $VAR as a word expand"
        argv.append(word)
    assert argv and Path(argv[0]).is_absolute(), f"'{line}': the program must be an absolute path"
    return argv


@dataclass
class Service:
    """One unit instance, resolved: its command, environment and folders."""
    name: str
    argv: list[str]
    env: dict[str, str]
    keys: dict[str, list[str]] = field(default_factory=dict)

    def get(self, key: str, default: str = "") -> str:
        values = self.keys.get(key)
        return values[-1] if values else default


def resolve(unit: str, instance: str, dirs: dict[str, Path], prefix: str = PREFIX,
            base_env: dict[str, str] | None = None) -> Service:
    """``unit`` (a file of deploy/systemd) for ``instance`` as systemd would start it, with
    ``dirs`` as ``%E`` (config), ``%S`` (state), ``%L`` (logs) and ``%h`` (home)."""
    service = read_unit(UNITS / unit, prefix)["Service"]
    keys: dict[str, list[str]] = {}
    for key, value in service:
        keys.setdefault(key, []).append(specifiers(value, dirs, instance))
    env = dict(base_env or {})
    for path in keys.get("EnvironmentFile", []):
        optional = path.startswith("-")
        file = Path(path.lstrip("-"))
        if optional and not file.is_file():
            continue
        env.update(read_env_file(file, prefix))
    for assignments in keys.get("Environment", []):
        for item in shlex.split(assignments):
            k, _, v = item.partition("=")
            env[k] = v
    assert len(keys.get("ExecStart", [])) == 1, f"{unit}: one ExecStart= line"
    name = unit.replace("@.", f"@{instance}.") if instance else unit
    return Service(name, expand_command(keys["ExecStart"][0], env), env, keys)


def shipped_dirs(root: Path) -> dict[str, Path]:
    dirs = {name: root / name for name in ("config", "state", "logs", "home")}
    (dirs["config"] / "fedgl").mkdir(parents=True, exist_ok=True)
    shutil.copy(UNITS / "fedgl.env", dirs["config"] / "fedgl" / "fedgl.env")
    return dirs


# ----------------------------------------------------------------------------- fast checks
def test_every_unit_command_parses_with_its_own_parser(tmp_path: Path) -> None:
    """Each unit's command line, with the shipped fedgl.env, is accepted by the parser of the
    command it runs (``fedgl``'s own, Flower's for ``flower-superlink``): no unknown flag, every
    value where the parser expects one, and every variable the units use is defined."""
    from fedgl.cli import build_parser

    dirs = shipped_dirs(tmp_path)
    env_vars = set(read_env_file(UNITS / "fedgl.env"))
    seen = set()
    for unit, instance in SERVICES:
        text = (UNITS / unit).read_text()
        used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text))
        assert used <= env_vars, (unit, used - env_vars)
        svc = resolve(unit, instance, dirs)
        program = Path(svc.argv[0]).name
        assert svc.argv[0].startswith(PREFIX + "/bin/"), svc.argv[0]
        seen.add(program if program != "fedgl" else f"fedgl {svc.argv[1]}")
        if program == "fedgl":
            args, unknown = build_parser(run_flags=False).parse_known_args(svc.argv[1:])
            assert unknown == [], (unit, unknown)
            assert args.command == svc.argv[1]
            if args.command in ("client", "server"):   # TLS, never --insecure, in the units
                assert args.root_certificates and not args.insecure
        else:
            assert program == "flower-superlink"
            pytest.importorskip("flwr")
            from flwr.superlink.cli.flower_superlink import _parse_args_run_superlink

            args, unknown = _parse_args_run_superlink().parse_known_args(svc.argv[1:])
            assert unknown == [], (unit, unknown)
            assert args.ssl_certfile and not args.insecure and args.database
    assert seen == {"flower-superlink", "fedgl gate", "fedgl server", "fedgl client"}


def test_the_client_flags_variable_splits_into_flags(tmp_path: Path) -> None:
    """``$FEDGL_CLIENT_FLAGS`` (a word of its own) adds its flags one by one, and nothing when
    empty; the server's run comes from its instance's file and goes to its own folder."""
    from fedgl.cli import build_parser

    dirs = shipped_dirs(tmp_path)
    plain = resolve("fedgl-client@.service", "2", dirs)
    env = dirs["config"] / "fedgl" / "client-2.env"
    env.write_text("FEDGL_CLIENT_FLAGS=--auth-key /etc/fedgl/node-2 --verbose\n")
    more = resolve("fedgl-client@.service", "2", dirs)
    assert more.argv == [*plain.argv, "--auth-key", "/etc/fedgl/node-2", "--verbose"]
    args, unknown = build_parser(run_flags=False).parse_known_args(more.argv[1:])
    assert unknown == [] and args.auth_key == "/etc/fedgl/node-2" and args.verbose
    assert args.data == str(dirs["config"] / "fedgl" / "client-2" / "client-2.json")
    assert args.state_dir == str(dirs["state"] / "fedgl" / "client-2" / "state")
    server = resolve("fedgl-server@.service", "weekly", dirs)
    args, _ = build_parser(run_flags=False).parse_known_args(server.argv[1:])
    assert args.config_file == str(dirs["config"] / "fedgl" / "coordinator" / "runs" / "weekly.yaml")
    assert args.out == str(dirs["state"] / "fedgl" / "coordinator" / "results" / "weekly")


def test_units_are_hardened_and_write_only_their_own_folders(tmp_path: Path) -> None:
    """Every unit keeps the system and home read-only, with no new privileges, and writes only
    the state and log folders it declares; the coordinator's scratch folder (each run's job
    file) is the same for the SuperLink and the run."""
    dirs = shipped_dirs(tmp_path)
    x = str(tmp_path)
    for unit, instance in SERVICES:
        svc = resolve(unit, instance, dirs)
        for key, value in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                           ("ProtectHome", "read-only"), ("PrivateTmp", "yes"),
                           ("UMask", "0077")):
            assert svc.get(key) == value, (unit, key)
        writable = " ".join(svc.keys.get("ReadWritePaths", [])).split()
        assert all(p.startswith((f"{x}/state/fedgl/", f"{x}/logs/fedgl")) for p in writable), unit
    link = resolve("fedgl-superlink.service", "", dirs)
    run = resolve("fedgl-server@.service", "trial", dirs)
    assert link.env["TMPDIR"] == run.env["TMPDIR"] == f"{x}/state/fedgl/coordinator/tmp"
    assert "--host" in link.argv and link.argv[link.argv.index("--host") + 1] == "127.0.0.1"


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """``systemd-analyze --user verify`` finds nothing to say (unknown keys, bad specifiers, a
    program that is not there) about the units, with the install prefix this environment's."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    folder = tmp_path / "units"
    folder.mkdir()
    for unit in UNITS.glob("*.service"):
        (folder / unit.name).write_text(unit.read_text().replace(PREFIX, sys.prefix))
    for unit, instance in SERVICES:   # instances verify as their template
        if instance:
            shutil.copy(folder / unit, folder / unit.replace("@.", f"@{instance}."))
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    names = [f"./{u.replace('@.', f'@{i}.') if i else u}" for u, i in SERVICES]
    done = subprocess.run([analyze, "--user", "verify", *names], cwd=folder, capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)})
    said = (done.stdout + done.stderr).strip()
    if "Failed to initialize manager" in said:
        pytest.skip(f"systemd-analyze cannot start a test manager here: {said[-200:]}")
    assert done.returncode == 0 and said == "", said[-2000:]


# ----------------------------------------------------------------------- the trial, run
class Started:
    """The services of a trial started as systemd would start them: each one's processes carry
    a marker in their environment (as a cgroup would hold them), so whatever they start, and
    whatever is left after a stop, can be found."""

    def __init__(self, dirs: dict[str, Path], base_env: dict[str, str]) -> None:
        self.dirs = dirs
        self.base_env = base_env
        self.tag = uuid.uuid4().hex
        self.procs: dict[str, tuple[Service, subprocess.Popen]] = {}

    def start(self, unit: str, instance: str = "") -> Service:
        svc = resolve(unit, instance, self.dirs, sys.prefix, self.base_env)
        for key, root in (("StateDirectory", "state"), ("LogsDirectory", "logs")):
            for value in svc.keys.get(key, []):
                for rel in value.split():   # created by systemd before the service starts
                    (self.dirs[root] / rel).mkdir(parents=True, exist_ok=True, mode=0o700)
        env = dict(svc.env)
        if svc.get("PrivateTmp") == "yes" and "TMPDIR" not in env:   # a /tmp of its own
            env["TMPDIR"] = str(self.dirs["tmp"] / svc.name)
            Path(env["TMPDIR"]).mkdir(parents=True)
        env["FEDGL_TEST_UNIT"] = f"{self.tag}:{svc.name}"
        log = open(self.dirs["journal"] / f"{svc.name}.log", "w")  # noqa: SIM115 - the journal
        proc = subprocess.Popen(svc.argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, umask=int(svc.get("UMask", "0022"), 8))
        log.close()
        self.procs[svc.name] = (svc, proc)
        return svc

    def members(self, name: str) -> list[int]:
        """The live processes of service ``name`` (zombies excluded)."""
        marker = f"FEDGL_TEST_UNIT={self.tag}:{name}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if marker not in (entry / "environ").read_bytes().split(b"\0"):
                    continue
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                found.append(int(entry.name))
        return found

    def stop(self, name: str) -> list[int]:
        """``systemctl stop``: SIGTERM to the main process (``KillMode=mixed``) or to every
        process of the service (the default), ``TimeoutStopSec`` for them to end; the processes
        still there then (which systemd would SIGKILL, and this kills too)."""
        svc, proc = self.procs[name]
        targets = [proc.pid] if svc.get("KillMode") == "mixed" else self.members(name)
        for pid in targets:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + float(svc.get("TimeoutStopSec", "90"))
        while time.monotonic() < deadline and (proc.poll() is None or self.members(name)):
            time.sleep(0.2)
        left = self.members(name)
        self.kill(name)
        return left

    def kill(self, name: str) -> None:
        _, proc = self.procs[name]
        for pid in self.members(name):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    def journal(self, name: str) -> str:
        return (self.dirs["journal"] / f"{name}.log").read_text()


def wait_port(address: str, started: Started, name: str, timeout: float = 120) -> None:
    import socket

    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            _, proc = started.procs[name]
            assert proc.poll() is None, started.journal(name)[-2000:]
            assert time.monotonic() < deadline, f"{name} did not listen on {address}"
            time.sleep(0.3)


@needs_flwr
@pytest.mark.slow   # a robust secure-sum run of three organisations: minutes on two cores
def test_the_units_run_a_trial_federation(tmp_path: Path, data_root: Path) -> None:
    """trial-setup.sh's files, then exactly the units' commands: the SuperLink, the gate, three
    organisations' clients and the trial run (its rounds cut to 2), all on 127.0.0.1 with
    TLS; the run finishes, every organisation says so in its log file and keeps the model, and
    stopping each service leaves none of its processes and none of its private folders."""
    from fedgl.deployment.commands import free_port

    dirs = {name: tmp_path / name for name in ("config", "logs", "home", "tmp", "journal")}
    for folder in dirs.values():
        folder.mkdir()
    # a user manager of systemd 252 (Debian 12): %S is %E (~/.config), %L is ~/.config/log
    dirs["state"] = dirs["config"]
    conf = dirs["config"] / "fedgl"
    tools = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
             f"{os.environ.get('PATH', '')}", "FEDGL_DATA": str(data_root)}
    done = subprocess.run(["sh", str(UNITS / "trial-setup.sh"), str(conf)], env=tools,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    # the trial's values for this machine: free ports, two rounds
    link_port, gate_port = free_port(), free_port()
    env_file = conf / "fedgl.env"
    text = env_file.read_text()
    for key, value in (("FEDGL_SUPERLINK_PORT", str(link_port)),
                       ("FEDGL_GATE_LISTEN", f"127.0.0.1:{gate_port}"),
                       ("FEDGL_COORDINATOR", f"127.0.0.1:{gate_port}")):
        text, n = re.subn(rf"^{key}=.*$", f"{key}={value}", text, flags=re.M)
        assert n == 1, key
    env_file.write_text(text)
    run_file = conf / "coordinator" / "runs" / "trial.yaml"
    run_text, n = re.subn(r"^rounds: \d+", "rounds: 2", run_file.read_text(), flags=re.M)
    assert n == 1
    run_file.write_text(run_text)

    # what a user manager passes on (the venv's fedgl is this checkout through PYTHONPATH)
    base = {k: v for k, v in os.environ.items() if k in ("HOME", "USER", "LANG", "PYTHONPATH",
                                                         "FEDGL_OFFLINE")}
    base["HOME"] = str(dirs["home"])
    started = Started(dirs, base)
    leftovers: dict[str, list[int]] = {}
    try:
        started.start("fedgl-superlink.service")
        wait_port(f"127.0.0.1:{link_port}", started, "fedgl-superlink.service")
        started.start("fedgl-gate.service")
        wait_port(f"127.0.0.1:{gate_port}", started, "fedgl-gate.service")
        for k in range(3):
            started.start("fedgl-client@.service", str(k))
        server = started.start("fedgl-server@.service", "trial")
        _, proc = started.procs[server.name]
        try:
            proc.wait(timeout=1200)
        except subprocess.TimeoutExpired:
            pytest.fail("the run did not end within 20 minutes: "
                        + started.journal(server.name)[-2000:])
        said = started.journal(server.name)
        assert proc.returncode == 0, said[-3000:]
        assert "finished in" in said, said[-2000:]
        leftovers[server.name] = started.stop(server.name)   # it has ended: nothing of it left
        for k in range(3):
            name = f"fedgl-client@{k}.service"
            leftovers[name] = started.stop(name)
        for name in ("fedgl-gate.service", "fedgl-superlink.service"):
            leftovers[name] = started.stop(name)
    finally:
        for name in list(started.procs):
            started.kill(name)
    assert all(not pids for pids in leftovers.values()), leftovers

    state = dirs["state"] / "fedgl"
    out = state / "coordinator" / "results" / "trial"
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["rounds"] == 2 and result["config"]["secure_sum"] == "robust"
    assert len(result["repeats"][0]["history"]) == 2
    assert (out / "server.log").is_file() and (state / "coordinator" / "superlink.db").is_file()
    digest = json.loads((out / "model" / "model.json").read_text())["sha256"]
    for k in range(3):
        # the journal has the organisation's few lines; its log file every line, Flower's too
        said = started.journal(f"fedgl-client@{k}.service")
        assert "finished after round 2; files in" in said, said[-1500:]
        assert "Starting Flower SuperNode" not in said
        log = (dirs["logs"] / "fedgl" / f"client-{k}.log").read_text()
        assert "Starting Flower SuperNode" in log and "'query.party__finished'" in log, log[-1500:]
        own = state / f"client-{k}" / "received" / "model" / "model.json"
        assert json.loads(own.read_text())["sha256"] == digest
        # the party's private folder (its socket) went with it
        assert list((dirs["tmp"] / f"fedgl-client@{k}.service").glob("fedgl-*")) == []
    assert list((state / "coordinator" / "tmp").glob("fedgl-*")) == []   # the run's scratch
