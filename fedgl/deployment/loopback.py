"""A whole deployment on one machine (127.0.0.1 only), for trials, tests and benchmarks: one
SuperLink and one ``fedgl client`` process (party, SuperNode and relay runner) per client, each
given only its own shard and key. Every process is stopped on exit, even when the body fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from fedgl.deployment.commands import _die_with_parent, _flower_bin, _flower_env, free_port


def node_key(path: str | Path) -> tuple[Path, Path]:
    """A Flower SuperNode authentication key pair (EC P-384, OpenSSH format, as ``ssh-keygen -t
    ecdsa -b 384`` writes): ``(private, public)`` at ``path`` and ``path.pub``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private = Path(path)
    private.parent.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    private.touch(mode=0o600)
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()))
    public = private.with_name(private.name + ".pub")
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                     serialization.PublicFormat.OpenSSH))
    return private, public


class Loopback:
    """``with Loopback(folder, shards, keys, clients, extra_client_args) as fed: fed.address``
    (``{k}`` in an extra client argument is the client's id, e.g. its own ``--state-dir``);
    ``tls=True``: the SuperLink serves TLS with trial certificates (:mod:`.tls`) and the clients
    verify it (``fed.tls_flags`` are the flags ``fedgl server`` needs); ``supernode_auth=True``
    (with TLS, as Flower requires): the SuperLink admits only registered SuperNodes
    (``--enable-supernode-auth``), and every client's node key is made and registered with
    ``flwr supernode register`` before it starts; ``gate=True``: the clients reach the SuperLink
    through ``fedgl gate`` (:mod:`.fleet_gate`, the Fleet API only) at ``fed.client_address``,
    as docs/deployment.md sets up a coordinator, while ``fed.address`` (``fedgl server``,
    ``flwr``) is the SuperLink's own; ``database=True``: the SuperLink keeps its state in
    ``superlink.db`` in the folder (``--database``), so :meth:`restart_superlink` brings it back
    with its runs and nodes."""

    def __init__(self, folder: str | Path, shards: str | Path, keys: str | Path, clients: int,
                 client_args: list[str] | None = None, start_timeout: float = 60.0, *,
                 tls: bool = False, supernode_auth: bool = False, gate: bool = False,
                 database: bool = False) -> None:
        if supernode_auth and not tls:
            raise ValueError("Flower's SuperNode authentication needs TLS (tls=True)")
        self.folder = Path(folder)
        self.shards = Path(shards)
        self.keys = Path(keys)
        self.clients = clients
        self.client_args = list(client_args or [])
        self.start_timeout = start_timeout
        self.procs: dict[str, subprocess.Popen] = {}
        self.address = ""
        self.client_address = ""
        self.gate = gate
        self.tls = tls
        self.tls_flags = ["--insecure"]
        self.supernode_auth = supernode_auth
        self.ca: Path | None = None
        self.database = database
        self._link_cmd: list[str] = []
        self._killed_groups: list[int] = []

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_die_with_parent)
        log.close()
        self.procs[name] = proc
        return proc

    def __enter__(self) -> Loopback:
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            port = free_port()
            self.address = f"127.0.0.1:{port}"
            home = self.folder / "superlink-home"
            home.mkdir(exist_ok=True)
            link_tls = ["--insecure"]
            if self.tls:
                from fedgl.deployment.tls import trial_certificates

                certs = trial_certificates(self.folder / "certs")
                link_tls = ["--ssl-ca-certfile", str(certs["ca"]), "--ssl-certfile",
                            str(certs["cert"]), "--ssl-keyfile", str(certs["key"])]
                self.tls_flags = ["--root-certificates", str(certs["ca"])]
                self.ca = certs["ca"]
            if self.supernode_auth:
                link_tls.append("--enable-supernode-auth")
            if self.database:
                link_tls += ["--database", str(self.folder / "superlink.db")]
            self._link_cmd = [_flower_bin("flower-superlink"), *link_tls, "--host", "127.0.0.1",
                              "--port", str(port), "--disable-runtime-dependency-installation"]
            self._spawn("superlink", self._link_cmd,
                        _flower_env(home, task_poll=False))   # as docs/deployment.md starts it
            self._wait_port(port)
            self.client_address = self.address
            if self.gate:
                self._start_gate(link_tls)
            for k in range(self.clients):
                auth: list[str] = []
                if self.supernode_auth:
                    private, public = node_key(self.folder / "node-keys" / f"node-{k}")
                    self.register(public)
                    auth = ["--auth-key", str(private)]
                self.start_client(k, f"client-{k}", auth)
        except BaseException:
            self.close()
            raise
        return self

    def _start_gate(self, link_tls: list[str]) -> None:
        """``fedgl gate`` in front of the SuperLink (its certificate and key, if TLS)."""
        gate_port = free_port()
        tls = ["--insecure"]
        if self.tls:
            value = dict(zip(link_tls[::2], link_tls[1::2], strict=False))
            tls = ["--root-certificates", value["--ssl-ca-certfile"], "--ssl-certfile",
                   value["--ssl-certfile"], "--ssl-keyfile", value["--ssl-keyfile"]]
        self._spawn("gate", [sys.executable, "-m", "fedgl.cli", "gate", "--listen",
                             f"127.0.0.1:{gate_port}", "--superlink", self.address, *tls],
                    dict(os.environ))
        self._wait_port(gate_port, "gate")
        self.client_address = f"127.0.0.1:{gate_port}"

    def start_client(self, k: int, name: str, extra: list[str] | None = None
                     ) -> subprocess.Popen:
        """Start ``fedgl client`` for client k's shard and key (its terminal ``<name>.log``,
        its own log file ``<name>.client.log``; what it receives at the end of a run in
        ``<name>-out`` unless the client arguments say)."""
        given = [a.replace("{k}", str(k)) for a in self.client_args]
        out = [] if "--out" in given else ["--out", str(self.folder / f"{name}-out")]
        return self._spawn(name, [
            sys.executable, "-m", "fedgl.cli", "client", "--superlink", self.client_address,
            "--data", str(self.shards / f"client-{k}.json"),
            "--key", str(self.keys / f"client-{k}.key"),
            "--roster", str(self.keys / "roster.json"), *self.tls_flags,
            "--flwr-home", str(self.folder / f"node-{name}"),
            "--log", str(self.folder / f"{name}.client.log"),
            *given, *out, *(extra or [])],
            dict(os.environ))

    def flwr(self, *args: str, address: str | None = None) -> subprocess.CompletedProcess:
        """``flwr ARGS`` against this SuperLink's Control API (the connection ``fedgl``), or
        against ``address``."""
        home = self.folder / "control-home"
        home.mkdir(exist_ok=True)
        conn = (f'root-certificates = "{self.ca}"' if self.ca is not None else "insecure = true")
        (home / "config.toml").write_text(f'[superlink]\ndefault = "fedgl"\n\n'
                                          f'[superlink.fedgl]\naddress = "{address or self.address}"\n'
                                          f"{conn}\n")
        return subprocess.run([_flower_bin("flwr"), *args], env=_flower_env(home),
                              capture_output=True, text=True, timeout=120, check=False)

    def register(self, public: Path) -> None:
        """Register a SuperNode's public key (``flwr supernode register``)."""
        done = self.flwr("supernode", "register", str(public), "fedgl")
        if done.returncode != 0:
            raise RuntimeError(f"flwr supernode register failed: {done.stdout[-300:]} "
                               f"{done.stderr[-300:]}")

    def _wait_port(self, port: int, name: str = "superlink") -> None:
        import socket

        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                raise RuntimeError(f"the {name} exited; see {self.folder / f'{name}.log'}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"the {name} did not listen on {port} within "
                           f"{self.start_timeout:g} s")

    def restart_superlink(self, down: float, certs: str | Path | None = None) -> None:
        """Kill the SuperLink process at once (SIGKILL, as a crash would; what it started
        notices its parent gone), wait ``down`` seconds, start it again on the same address
        (its log appended to); with ``database=True`` it comes back with its state. ``certs``
        (with ``tls=True``): a folder of trial certificates under another CA (made there if
        it has none) that the SuperLink comes back with, as one restarted after a new
        ``fedgl certs`` would; the clients still hold the first CA."""
        if certs is not None:
            if not self.tls:
                raise ValueError("restart_superlink(certs=...) needs tls=True")
            from fedgl.deployment.tls import trial_certificates

            new = trial_certificates(certs)
            flags = {"--ssl-ca-certfile": new["ca"], "--ssl-certfile": new["cert"],
                     "--ssl-keyfile": new["key"]}
            cmd = list(self._link_cmd)
            for i, arg in enumerate(cmd[:-1]):
                if arg in flags:
                    cmd[i + 1] = str(flags[arg])
            self._link_cmd = cmd
        self.kill_superlink()
        time.sleep(down)
        log = open(self.folder / "superlink.log", "a")  # noqa: SIM115 - closed with the process
        self.procs["superlink"] = subprocess.Popen(
            self._link_cmd, env=_flower_env(self.folder / "superlink-home", task_poll=False),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_die_with_parent)
        log.close()
        self._wait_port(int(self.address.rpartition(":")[2]))

    def kill_superlink(self) -> None:
        """Kill the SuperLink process at once (SIGKILL, as a crash would); what it started
        there is ended in :meth:`close`."""
        proc = self.procs["superlink"]
        proc.kill()
        proc.wait()
        self._killed_groups.append(proc.pid)

    def kill_client(self, k: int) -> None:
        """Kill client k's process (party, SuperNode and relay runner) at once, as a crash would."""
        proc = self.procs[f"client-{k}"]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def close(self) -> None:
        """Stop the clients (each stops its SuperNode), then the SuperLink; SIGKILL stragglers."""
        order = sorted(self.procs, key=lambda n: (n == "superlink", n == "gate"))
        for name in order:
            proc = self.procs[name]
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 20
        for name in order:
            proc = self.procs[name]
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        self.procs.clear()
        for group in self._killed_groups:   # a killed SuperLink's children, if any are left
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._killed_groups.clear()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
