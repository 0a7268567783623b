"""docs/cluster.md's one-machine cluster, verbatim: ``ray start --head`` and a second node from
``ray start --address=127.0.0.1:PORT``, each a subprocess with its own temp dir and one CPU;
clients placed on both nodes, each holding only its own shard; ``fedgl run --ray-address`` as a
subprocess gives the local runtime's result; a wrong, foreign, silent or stopped cluster is one
line and exit code 2 (subprocess timeouts are hang guards only, nothing times a step).

Ray 2.60 on Linux registers a node that joins through 127.0.0.1 under the machine's own address
(see docs/cluster.md), so these two nodes listen on that address for the test's duration; the
cluster runs with token authentication under a random token that only the test's processes get.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedgl.federation.ray_runtime import CLUSTER_SWITCH
from tests._cli_helpers import REPO, assert_user_error, run_subprocess

pytest.importorskip("ray")
RAY = Path(sys.executable).with_name("ray")
RUN = ["run", "--sbm-nodes", "200", "--sbm-features", "8", "--clients", "4", "--rounds", "2",
       "--no-progress"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ours(marker: str) -> list[int]:
    """Processes whose command line names this test's temp dir (every Ray process the two
    nodes start carries its session path)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
    return pids


class CliCluster:
    """Two Ray nodes started with the ``ray`` command as docs/cluster.md says."""

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="fgray", dir="/tmp")   # short: Ray's socket paths
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items()
               if k != CLUSTER_SWITCH and not k.startswith("RAY_AUTH")}
        # the nodes' worker processes import this checkout's fedgl
        self.env = {**env, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
                    "RAY_AUTH_TOKEN": secrets.token_hex(32),
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                                env.get("PYTHONPATH")]))}
        self.procs: dict[str, subprocess.Popen] = {}

    def _start(self, name: str, *args: str) -> None:
        log = open(Path(self.root) / f"{name}.log", "wb")   # noqa: SIM115 - closed with the proc
        self.procs[name] = subprocess.Popen(
            [str(RAY), "start", *args, "--num-cpus=1", "--object-store-memory=80000000",
             f"--temp-dir={self.root}/{name}", "--disable-usage-stats", "--block"],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 180
        while b"Ray runtime started" not in (Path(self.root) / f"{name}.log").read_bytes():
            if self.procs[name].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"`ray start` ({name}) failed:\n" + self.log(name))
            time.sleep(0.5)

    def start(self) -> None:
        self._start("head", "--head", f"--port={self.port}", "--include-dashboard=false")
        self._start("node2", f"--address={self.address}")

    def log(self, name: str) -> str:
        return (Path(self.root) / f"{name}.log").read_text(errors="replace")[-3000:]

    def gcs_server_pid(self) -> int:
        head = self.procs["head"].pid
        for pid in _ours(self.root):
            with contextlib.suppress(OSError):
                if (os.getpgid(pid) == head
                        and Path(f"/proc/{pid}/comm").read_text().strip() == "gcs_server"):
                    return pid
        raise RuntimeError("the head's gcs_server process was not found")

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGCONT)
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    def close(self) -> None:
        for proc in self.procs.values():   # both drain at once
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)
                os.killpg(proc.pid, signal.SIGTERM)
        for name in list(self.procs):
            self.stop(name)
        deadline = time.monotonic() + 30
        while _ours(self.root) and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid in _ours(self.root):   # a straggler that left the process group
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[CliCluster]:
    # Ray 2.60's `ray start` rewrites 127.0.0.1 to the machine's address, so these two nodes
    # listen on every interface (behind a random token) while the test runs: never in the default
    # run or CI, only when asked for explicitly
    if os.environ.get("FEDGL_TEST_RAY_MULTINODE") != "1":
        pytest.skip("the two-node `ray start` cluster listens beyond loopback (Ray rewrites "
                    "127.0.0.1); set FEDGL_TEST_RAY_MULTINODE=1 to run it")
    c = CliCluster()
    try:
        c.start()
        yield c
    finally:
        c.close()


def _fedgl(cluster: CliCluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedgl.cli", *args], cwd=REPO, env=cluster.env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow   # starting the two nodes and a driver takes ~1 min on 2 shared cores
def test_clients_on_both_nodes_hold_only_their_shard(cluster):
    proc = subprocess.run([sys.executable, "-m", "tests.ray_cluster_audit", cluster.address],
                          cwd=REPO, env=cluster.env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(got["nodes"]) == 2, got["nodes"]
    assert set(got["placement"].values()) == set(got["nodes"]), got["placement"]
    for k, audit in got["audit"].items():
        assert audit == {"own_rows_held": True, "other_rows_held": 0}, (k, audit)
    assert got["disconnected"]


@pytest.mark.slow
def test_fedgl_run_on_the_cluster_equals_the_local_runtime(cluster, tmp_path):
    ray = _fedgl(cluster, *RUN, "--runtime", "ray", "--ray-address", cluster.address,
                 "--out", str(tmp_path / "ray"))
    assert ray.returncode == 0, ray.stderr[-3000:]
    local = _fedgl(cluster, *RUN, "--out", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr[-3000:]
    on_ray, on_local = (json.loads((tmp_path / d / "result.json").read_text())["repeats"][0]
                        for d in ("ray", "local"))
    assert len(set(on_ray["extra"]["placement"].values())) == 2, on_ray["extra"]["placement"]
    assert on_ray["final"]["test_acc"] == pytest.approx(on_local["final"]["test_acc"], abs=1e-6)
    assert on_ray["final"]["train_loss"] == pytest.approx(on_local["final"]["train_loss"],
                                                          rel=1e-5)
    assert on_ray["ledger"]["bytes"] == on_local["ledger"]["bytes"]


def _run_against(address: str, tmp_path: Path) -> str:
    out = tmp_path / "o"
    res = run_subprocess(*RUN, "--runtime", "ray", "--ray-address", address, "--out", out,
                         timeout=120)
    return assert_user_error(res, address, "--ray-address", out=out)


def test_wrong_port_is_one_line(tmp_path):
    line = _run_against(f"127.0.0.1:{_free_port()}", tmp_path)
    assert "nothing listens" in line and "ray start --head" in line


def test_the_cluster_is_checked_before_the_data_loads(monkeypatch):
    import fedgl
    import fedgl.api
    from fedgl.errors import FedglError

    def no_loading(cfg):
        raise AssertionError("the dataset was loaded before the cluster was checked")

    monkeypatch.setattr(fedgl.api, "load_graph", no_loading)
    with pytest.raises(FedglError, match="nothing listens"):
        fedgl.run(runtime="ray", ray_address=f"127.0.0.1:{_free_port()}", progress=False)


@contextlib.contextmanager
def _listener(reply: bytes | None) -> Iterator[str]:
    """A plain TCP server on 127.0.0.1: sends ``reply`` and closes, or (None) accepts and says
    nothing until the test ends."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held, stop = [], threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if reply is None:
                held.append(conn)
            else:
                with conn:
                    conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        srv.close()


@pytest.mark.parametrize("reply", [b"HTTP/1.1 400 Bad Request\r\n\r\n", b""],
                         ids=["http-server", "closes-at-once"])
def test_a_port_that_is_not_ray_is_one_line(tmp_path, reply):
    with _listener(reply) as address:
        line = _run_against(address, tmp_path)
    assert "is not a Ray cluster" in line


def test_under_tls_only_the_connection_is_checked(monkeypatch):
    """A TLS GCS answers a TLS handshake, not the plain HTTP/2 probe: with RAY_USE_TLS on, a
    listening port passes the pre-check (Ray's own start-up checks the rest)."""
    from fedgl.errors import FedglError
    from fedgl.federation.ray_runtime import check_reachable

    with _listener(b"") as address:
        with pytest.raises(FedglError, match="not a Ray cluster"):
            check_reachable(address)
        monkeypatch.setenv("RAY_USE_TLS", "1")
        check_reachable(address)


def test_a_silent_listener_is_one_line(tmp_path):
    with _listener(None) as address:
        line = _run_against(address, tmp_path)
    assert "does not answer" in line


@pytest.mark.slow
def test_a_stuck_gcs_is_one_line(cluster, tmp_path):
    gcs = cluster.gcs_server_pid()
    os.kill(gcs, signal.SIGSTOP)
    try:
        line = _run_against(cluster.address, tmp_path)
    finally:
        os.kill(gcs, signal.SIGCONT)
    assert "does not answer" in line


@pytest.mark.slow
def test_a_stopped_head_is_one_line(cluster, tmp_path):
    """Last in this module: stops the head (the second node stays up)."""
    cluster.stop("head")
    line = _run_against(cluster.address, tmp_path)
    assert "nothing listens" in line and "head is stopped" in line


_LOOPBACK_PROBE = """
import os, ray
from fedgl.config import Config
from fedgl.federation.ray_runtime import CLUSTER_SWITCH, start_ray
assert ray._private.ray_constants.ENABLE_RAY_CLUSTER   # the switch was not set at import
start_ray(Config(runtime="ray"))
node = ray._private.worker.global_worker.node
print(node.node_ip_address, node.gcs_address, os.environ.get(CLUSTER_SWITCH),
      ray._private.ray_constants.ENABLE_RAY_CLUSTER)
ray.shutdown()
"""


def test_local_instance_stays_on_loopback_without_the_cluster_switch():
    """Without RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER in the environment, Ray 2.60 would register a
    local instance under the machine's network address (and listen on every interface); fedgl's
    own instance stays on 127.0.0.1, and the switch is not left set (it would stop a later
    ``ray start --address`` from this environment)."""
    env = {k: v for k, v in os.environ.items() if k != CLUSTER_SWITCH}
    proc = subprocess.run([sys.executable, "-c", _LOOPBACK_PROBE], cwd=REPO, timeout=180,
                          env={**env, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"},
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    node_ip, gcs, switch, enabled = proc.stdout.split()[-4:]
    assert node_ip == "127.0.0.1" and gcs.startswith("127.0.0.1:")
    assert switch == "None" and enabled == "True"
