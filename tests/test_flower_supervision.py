"""``fedgl server`` and ``fedgl client`` on a loopback federation when something around the run
goes wrong: a run that never starts (the SuperLink's SuperExec died against a certificate that
does not cover 127.0.0.1), SIGTERM while it is still pending, Ctrl-C on a client, a SuperLink
killed and restarted during a run. Every process a test starts is stopped in a ``finally``."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.flower_helpers import needs_flwr

pytestmark = needs_flwr


def _dns_only_certificates(folder: Path, name: str = "localhost") -> dict[str, Path]:
    """A CA and a SuperLink certificate covering the DNS name ``name`` only, not the address
    127.0.0.1 (what ``fedgl certs`` no longer makes): clients reach the SuperLink by ``name``,
    while Flower's SuperExec inside it connects to 127.0.0.1 and fails verification."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP384R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    paths = {"ca": folder / "ca.pem", "cert": folder / "superlink.pem",
             "key": folder / "superlink.key"}
    paths["ca"].write_bytes(ca.public_bytes(pem))
    paths["cert"].write_bytes(cert.public_bytes(pem))
    paths["key"].write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    paths["key"].chmod(0o600)
    return paths


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group (it leads its own session) and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


@contextmanager
def _superlink_without_superexec(folder: Path) -> Iterator[tuple[str, Path, Path]]:
    """A SuperLink on 127.0.0.1 whose certificate covers ``localhost`` only: its SuperExec
    dies, so a submitted run stays pending. Yields ``(address by name, ca.pem, flwr home)``."""
    from fedgl.deployment.commands import _die_with_parent, _flower_bin, _flower_env, free_port

    certs = _dns_only_certificates(folder / "certs")
    port = free_port()
    home = folder / "superlink-home"
    home.mkdir(parents=True)
    log = open(folder / "superlink.log", "w")  # noqa: SIM115 - closed once the process started
    link = subprocess.Popen([_flower_bin("flower-superlink"), "--ssl-ca-certfile",
                             str(certs["ca"]), "--ssl-certfile", str(certs["cert"]),
                             "--ssl-keyfile", str(certs["key"]), "--host", "127.0.0.1",
                             "--port", str(port), "--disable-runtime-dependency-installation"],
                            env=_flower_env(home, task_poll=False), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=_die_with_parent)
    log.close()
    control = folder / "control-home"
    control.mkdir()
    (control / "config.toml").write_text(
        f'[superlink]\ndefault = "fedgl"\n\n[superlink.fedgl]\naddress = "localhost:{port}"\n'
        f'root-certificates = "{certs["ca"]}"\n')
    try:
        import socket

        deadline = time.monotonic() + 60
        while True:
            assert link.poll() is None, (folder / "superlink.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the SuperLink did not listen"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        yield f"localhost:{port}", certs["ca"], control
    finally:
        _kill(link)


def _runs(control: Path) -> dict[str, str]:
    """``flwr ls``: each run's id and status on the SuperLink ``control`` names."""
    from fedgl.deployment.commands import _flower_bin, _flower_env

    done = subprocess.run([_flower_bin("flwr"), "ls", "fedgl", "--format", "json"],
                          env=_flower_env(control), capture_output=True, text=True, timeout=60,
                          check=False)
    return {str(r["run-id"]): str(r["status"]) for r in json.loads(done.stdout)["runs"]}


def _server(address: str, ca: Path, root: Path, *flags: str) -> list[str]:
    from fedgl.privacy.identity import write_keys

    if not (root / "keys" / "roster.json").is_file():
        write_keys(root / "keys", 3)
    return [sys.executable, "-m", "fedgl.cli", "server", "--superlink", address,
            "--root-certificates", str(ca), "--roster", str(root / "keys" / "roster.json"),
            "--clients", "3", "--rounds", "2", "--no-progress", "--out", str(root / "out"),
            *flags]


def test_a_run_that_never_starts_is_one_line_within_the_start_timeout(tmp_path: Path) -> None:
    """The SuperLink's SuperExec died (its certificate does not cover 127.0.0.1): ``fedgl server
    --start-timeout 5`` ends with one line naming the pending run and the usual cause (exit 1),
    and the run is stopped on the SuperLink rather than left for its next start."""
    with _superlink_without_superexec(tmp_path / "fed") as (address, ca, control):
        begun = time.monotonic()
        proc = subprocess.run(_server(address, ca, tmp_path, "--start-timeout", "5"),
                              capture_output=True, text=True, timeout=180, check=False)
        took = time.monotonic() - begun
        runs = _runs(control)
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert len(runs) == 1, runs
    (run_id, status), = runs.items()
    assert lines[0].startswith(f"fedgl: run aborted: run {run_id} is still pending after"), lines
    assert "127.0.0.1" in lines[0] and "fedgl certs" in lines[0]
    assert status == "finished:stopped", runs
    assert took < 60, took
    assert not (tmp_path / "out" / "result.json").exists()


def test_sigterm_on_a_server_whose_run_is_pending_stops_that_run(tmp_path: Path) -> None:
    """SIGTERM to ``fedgl server`` while its run is still pending (no ServerApp started, so it
    never wrote its run id): the run ``flwr run`` submitted is stopped on the SuperLink, and the
    one line says so with its id (exit 130); no pending run is left for the SuperLink's next
    start."""
    with _superlink_without_superexec(tmp_path / "fed") as (address, ca, control):
        server = subprocess.Popen(_server(address, ca, tmp_path, "--start-timeout", "600"),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while not _runs(control):   # submitted
                assert server.poll() is None, server.communicate()[1][-2000:]
                assert time.monotonic() < deadline, "no run was submitted"
                time.sleep(0.5)
            assert set(_runs(control).values()) == {"pending"}
            server.send_signal(signal.SIGTERM)
            _, err = server.communicate(timeout=120)
        finally:
            _kill(server)
        runs = _runs(control)
    assert server.returncode == 130, err[-2000:]
    lines = err.strip().splitlines()
    (run_id, status), = runs.items()
    assert len(lines) == 1 and f"run {run_id} was stopped on the SuperLink" in lines[0], lines
    assert status == "finished:stopped", runs


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, data_root: Path) -> Path:
    from tests.flower_helpers import write_deployment_files

    return write_deployment_files(tmp_path_factory.mktemp("supervision"))


def test_ctrl_c_on_a_client_is_one_line_and_exit_130(files: Path) -> None:
    """Ctrl-C on ``fedgl client`` (SIGINT to its terminal's process group) while it serves:
    one line on its terminal, exit 130 as docs/deployment.md says of Ctrl-C, no traceback, and
    the SuperNode and relay runner it started end with it."""
    from fedgl.deployment.loopback import Loopback
    from tests.flower_helpers import PLAINTEXT

    with Loopback(files / "fed-ctrl-c", files / "shards", files / "keys", 1, PLAINTEXT) as fed:
        client, said, members = _joined(fed)
        assert members, "fedgl client started no SuperNode"   # and its relay runner
        os.killpg(client.pid, signal.SIGINT)
        code = client.wait(timeout=60)
        terminal = said.read_text()
        left = [pid for pid in members if _alive(pid)]
    assert code == 130, terminal[-2000:]
    assert "Traceback" not in terminal and "KeyboardInterrupt" not in terminal, terminal[-2000:]
    lines = terminal.strip().splitlines()
    assert lines[-1].startswith("client 0: stopped (Ctrl-C)"), lines
    assert [ln for ln in lines if "stopped" in ln] == lines[-1:], lines
    assert left == [], left


def _joined(fed) -> tuple[subprocess.Popen, Path, list[int]]:
    """Client 0 of ``fed`` once it is joining and its SuperNode and relay runner are up (a few
    seconds after): its process, its terminal's file and the processes it started."""
    client = fed.procs["client-0"]
    said = fed.folder / "client-0.log"
    deadline = time.monotonic() + 120
    while "joining" not in said.read_text():
        assert client.poll() is None, said.read_text()[-2000:]
        assert time.monotonic() < deadline, said.read_text()[-2000:]
        time.sleep(0.2)
    time.sleep(3)
    return client, said, _descendants(client.pid)


def _descendants(pid: int) -> list[int]:
    """The living processes ``pid`` started, and theirs."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_a_superlink_restarted_during_a_run_is_said_and_the_run_resumes(files: Path) -> None:
    """The SuperLink (``--database``) killed after the run's first checkpoint and started again
    5 s later: ``fedgl server`` says in one line that it does not answer, and in one that it is
    back where it still follows the run then. The run does not survive it (Flower's SuperExec
    ends with its SuperLink, and with it the run's ServerApp, at once or once the restarted
    SuperLink refuses its token): one line (exit 1) with the ``--resume`` to run; the run is
    finished on the SuperLink then (no busy federation), and that ``--resume`` finishes it."""
    from fedgl.deployment.loopback import Loopback
    from fedgl.deployment.run_watch import busy_runs
    from tests.flower_helpers import PLAINTEXT, RUN, server_cmd, wait_for

    out = files / "out-restart"
    keys = {**RUN, "rounds": 20, "checkpoint_every": 1}
    with Loopback(files / "fed-restart", files / "shards", files / "keys", 3, PLAINTEXT,
                  database=True) as fed:
        server = subprocess.Popen(server_cmd(files, fed, out, keys, message_timeout=120),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        try:
            wait_for(lambda: (out / "checkpoint.pt").is_file(), server, timeout=300)
            fed.restart_superlink(down=5)
            time.sleep(3)   # fedgl server checks the SuperLink every 2 s
            following = server.poll() is None   # still following the run: it saw it back
            _, err = server.communicate(timeout=600)
        finally:
            _kill(server)
        busy = busy_runs(fed.flwr("ls", "fedgl", "--format", "json").stdout)
        resumed = subprocess.run([sys.executable, "-m", "fedgl.cli", "server", "--resume",
                                  str(out), "--superlink", fed.address, "--roster",
                                  str(files / "keys" / "roster.json"), *fed.tls_flags,
                                  "--join-timeout", "120", "--message-timeout", "120"],
                                 capture_output=True, text=True, timeout=600, check=False)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    print(f"following when the SuperLink was back: {following}", *lines, sep="\n")
    away = [ln for ln in lines if "does not answer" in ln]
    back = [ln for ln in lines if "is back after" in ln]
    assert len(away) == 1 and fed.address in away[0], lines
    assert len(back) == (1 if following else len(back)) <= 1, lines
    if back:
        assert fed.address in back[0] and lines.index(away[0]) < lines.index(back[0]), lines
    assert server.returncode == 1, lines
    assert lines[-1].startswith(f"fedgl: run aborted: the SuperLink at {fed.address} went away "
                                "during the run"), lines
    assert f"fedgl server --resume {out}" in lines[-1] and "Traceback" not in err, err[-2000:]
    assert busy == [], busy
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    result = json.loads((out / "result.json").read_text())
    assert result["repeats"][0]["final"]["rounds"] == keys["rounds"]


def test_a_client_whose_supernode_gave_up_stops_with_one_line(files: Path) -> None:
    """The SuperLink goes away for good: with ``--reconnect-for 4`` the SuperNode gives up
    reconnecting after about 4 s, and ``fedgl client`` says so in one line and exits 1 instead
    of living on with a SuperNode that answers nothing; no traceback, nothing it started left."""
    from fedgl.deployment.client_log import gave_up_line
    from fedgl.deployment.loopback import Loopback
    from tests.flower_helpers import PLAINTEXT

    with Loopback(files / "fed-gave-up", files / "shards", files / "keys", 1,
                  [*PLAINTEXT, "--reconnect-for", "4"]) as fed:
        client, said, members = _joined(fed)
        fed.kill_superlink()
        gone = time.monotonic()
        code = client.wait(timeout=120)
        waited = time.monotonic() - gone
        terminal = said.read_text()
        left = [pid for pid in members if _alive(pid)]
    assert code == 1, terminal[-2000:]
    assert "Traceback" not in terminal, terminal[-2000:]
    expected = gave_up_line(0, fed.folder / "client-0.client.log")
    assert terminal.strip().splitlines()[-1] == expected, terminal[-2000:]
    assert "Giving up reconnection" in (fed.folder / "client-0.client.log").read_text()
    assert waited >= 3.5, waited   # it kept trying for the time it was given
    assert left == [], left


@pytest.mark.slow
def test_a_client_whose_superlink_came_back_under_another_ca_exits_with_one_line(
        files: Path) -> None:
    """The SuperLink comes back with another CA (as after a new ``fedgl certs`` that did not
    keep the CA), and no ``--reconnect-for``: the client's SuperNode gives up reconnecting on
    its own, and ``fedgl client`` ends at once with exit 1 and the one line of
    :func:`~fedgl.deployment.client_log.gave_up_line`, no traceback, and the SuperNode and relay
    runner it started end with it."""
    from fedgl.deployment.client_log import gave_up_line
    from fedgl.deployment.loopback import Loopback
    from tests.flower_helpers import PLAINTEXT

    folder = files / "fed-new-ca"
    with Loopback(folder, files / "shards", files / "keys", 1, PLAINTEXT, tls=True) as fed:
        client, said, members = _joined(fed)
        assert members, "fedgl client started no SuperNode"
        assert client.poll() is None, said.read_text()[-2000:]
        # down long enough for a failed try, then back under a CA the client does not trust
        fed.restart_superlink(down=12, certs=folder / "certs-new-ca")
        try:
            code = client.wait(timeout=180)
        except subprocess.TimeoutExpired:
            pytest.fail("fedgl client kept running after its SuperNode gave up: "
                        + (folder / "client-0.client.log").read_text()[-2000:])
        terminal = said.read_text()
        left = [pid for pid in members if _alive(pid)]
    assert code == 1, terminal[-2000:]
    assert "Traceback" not in terminal, terminal[-2000:]
    lines = terminal.strip().splitlines()
    assert lines[-1] == gave_up_line(0, folder / "client-0.client.log"), lines[-5:]
    assert sum("gave up" in ln for ln in lines) == 1, lines
    assert left == [], left
