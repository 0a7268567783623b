"""RayRuntime: every client is a Ray actor that loads its own shard where it runs.

The same client classes as :class:`~fedgl.federation.runtime.LocalRuntime`, the same calls, the
same ledger. Arguments and results are serialised by Ray (so no party aliases another's
tensors); the ledger counts the protocol payloads only, not Ray's own control traffic.

Failure handling (``on_client_failure``): when an actor dies during a call, ``restart`` starts a
new actor (which reloads its shard), lets the server restore the client's protocol state through
``on_client_restart`` (e.g. FedGCN re-runs its pre-training exchange for that client), and
re-sends the call; ``drop`` continues with the surviving clients; ``abort`` stops the run. Every
event is recorded in :attr:`RayRuntime.events`.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from fedgl._optional import require
from fedgl.config import Config
from fedgl.data.shards import ShardSpec, load_shard
from fedgl.errors import FedglError, RunAborted
from fedgl.federation.codec import Encoded, decode, encode
from fedgl.federation.ledger import Ledger
from fedgl.federation.messages import payload_nbytes
from fedgl.federation.protocol import Endpoint
from fedgl.federation.ray_quiet import quiet_ray_notices
from fedgl.federation.runtime import _per_client_args

_DROPPED = object()


class ClientActor:
    """Hosts one client inside a Ray worker process (wrapped by ``ray.remote`` at start-up)."""

    def __init__(self, client_cls_path: str, spec: ShardSpec,
                 driver_env: dict[str, str] | None = None) -> None:
        import torch

        for key, value in (driver_env or {}).items():   # the node's own setting wins
            os.environ.setdefault(key, value)
        cfg = Config.from_dict(spec.config)
        cpus = max(1, int(float(os.environ.get("OMP_NUM_THREADS", "1"))))
        torch.set_num_threads(cfg.threads or cpus)
        module, name = client_cls_path.rsplit(":", 1)
        cls = getattr(importlib.import_module(module), name)
        shard = load_shard(spec)
        # a client class built from protocol parameters (e.g. GLASU's) offers ``from_shard``
        self.client = (cls.from_shard(shard, spec.client_params, spec.seed)
                       if spec.client_params is not None else cls(shard, cfg, spec.seed))
        if spec.identity is not None:  # provisioned by the experimenter, not by the server
            self.client.provision(spec.identity)
        self.endpoint = Endpoint(self.client, f"client {spec.client_id}")

    def handle(self, message: bytes, phase: str) -> tuple[bytes, float]:
        """The encoded reply to one encoded message and its compute seconds (for the simulated
        network). Only the message types the client's role declares are accepted."""
        t0 = time.perf_counter()
        reply = self.endpoint.handle(Encoded.from_bytes(message), phase)
        return reply.to_bytes(), time.perf_counter() - t0

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def pid(self) -> int:
        return os.getpid()

    def feature_row_digests(self, width: int) -> list[str]:
        """Audit hook: SHA-256 of every row of every ``width``-column tensor alive in this
        process (a walk of the garbage collector's objects), so a test can check that the
        process holds no other client's feature row. Digests only: no values leave."""
        import gc
        import hashlib

        import torch

        out = set()
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor) and obj.dim() == 2 and obj.size(1) == width:
                rows = obj.detach().float().contiguous().numpy()
                out.update(hashlib.sha256(r.tobytes()).hexdigest() for r in rows)
        return sorted(out)

    def peak_rss_mb(self) -> float:
        """This client process's peak resident memory (``ru_maxrss``, MB)."""
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


#: driver environment variables an actor takes when its node does not set them
DRIVER_ENV = ("FEDGL_DATA", "FEDGL_OFFLINE")
#: seconds to reach a --ray-address, for its GCS to answer, and for every client actor to start
CONNECT_TIMEOUT_S = 10.0
ANSWER_TIMEOUT_S = 5.0
START_TIMEOUT_S = float(os.environ.get("FEDGL_RAY_START_TIMEOUT", "300"))
#: Ray's switch for multi-node clusters; "0" also keeps a node on 127.0.0.1 (see start_ray)
CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

# The HTTP/2 client preface and an empty SETTINGS frame: a Ray GCS (a gRPC server) answers
# with a SETTINGS frame (type 0x4) of its own.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S,
                    answer_timeout: float = ANSWER_TIMEOUT_S) -> None:
    """Check that ``host:port`` is a live Ray GCS before ``ray.init`` (which retries a dead,
    silent or foreign address for many minutes): a TCP connection within ``timeout`` and a gRPC
    (HTTP/2) answer within ``answer_timeout`` (not probed when ``RAY_USE_TLS`` is on). Each
    failure is one line naming the fix."""
    import socket

    host, _, port = address.rpartition(":")
    if address.startswith(("ray://", "http://", "https://")):
        return   # a Ray client / job address: ray.init reports its own errors
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise FedglError(f"--ray-address '{address}' must look like HOST:PORT, e.g. "
                         "127.0.0.1:6379")
    fix = (f"start the head there (`ray start --head --port={port}`, see docs/cluster.md) or "
           "fix --ray-address")
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except OSError as exc:
        if isinstance(exc, ConnectionRefusedError):
            raise FedglError(f"nothing listens at {address} (connection refused): the Ray head "
                             f"is stopped or the port is wrong; {fix}") from None
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise FedglError(f"Ray at {address} is unreachable ({reason} within {timeout:g} s); "
                         f"{fix}") from None
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        conn.close()   # a TLS GCS expects a TLS handshake first: ray.init checks the rest
        return
    with conn:
        try:
            conn.settimeout(answer_timeout)
            conn.sendall(_H2_PREFACE)
            head = _read_exactly(conn, 9)
        except TimeoutError:
            raise FedglError(f"Ray at {address} accepts connections but does not answer within "
                             f"{answer_timeout:g} s: its GCS is stopped, stuck or overloaded; "
                             "restart the head (`ray stop` there, then `ray start --head`) or "
                             "fix --ray-address") from None
        except OSError:
            head = b""
    if len(head) < 9 or head[3] != 4:   # closed, or not an HTTP/2 SETTINGS frame
        raise FedglError(f"{address} answers but is not a Ray cluster (no Ray GCS there); give "
                         "--ray-address the head's GCS port (`ray start --head --port=PORT`, 6379 "
                         "by default)")


def precheck_address(cfg: Config) -> None:
    """Check ``cfg.ray_address`` (see :func:`check_reachable`) before a run loads its data, so a
    wrong cluster fails in seconds however big the dataset. Nothing to check without an address
    or when this process is already connected to Ray."""
    import sys

    ray = sys.modules.get("ray")
    if cfg.runtime != "ray" or not cfg.ray_address or (ray is not None and ray.is_initialized()):
        return
    check_reachable(cfg.ray_address)


def _read_exactly(conn: Any, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


@contextlib.contextmanager
def _addresses_as_given(local: bool) -> Iterator[None]:
    """Keep Ray from replacing 127.0.0.1 by this machine's network address during ``ray.init``.

    On Linux Ray (2.60) resolves a loopback host, in ``address`` and in ``_node_ip_address``,
    to the address this machine routes to the internet from, unless ``RAY_ENABLE_WINDOWS_OR_OSX_
    CLUSTER=0`` was set before ``import ray``. A joined head bound to 127.0.0.1 is then dialled
    on the wrong address for minutes, and a "local" instance listens on every interface. The
    switch is read once, at import, so it is turned off here for the call; for a local instance
    its processes also get the variable (they start during the call). It is never left set:
    ``ray start --address`` refuses to join a cluster while it is "0"."""
    from ray._private import ray_constants

    saved_const = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    saved_env = os.environ.get(CLUSTER_SWITCH)
    if saved_const is not None:
        ray_constants.ENABLE_RAY_CLUSTER = False
    if local:
        os.environ[CLUSTER_SWITCH] = "0"
    try:
        yield
    finally:
        if saved_const is not None:
            ray_constants.ENABLE_RAY_CLUSTER = saved_const
        if local:
            if saved_env is None:
                os.environ.pop(CLUSTER_SWITCH, None)
            else:
                os.environ[CLUSTER_SWITCH] = saved_env


def start_ray(cfg: Config) -> bool:
    """Join ``cfg.ray_address`` or start a fresh local Ray bound to 127.0.0.1 (never a cluster
    that ``RAY_ADDRESS`` or a stale ``ray_current_cluster`` file names). Returns whether this
    call started Ray (and so should shut it down)."""
    ray = require("ray", feature="--runtime ray")

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    common = {"include_dashboard": False, "log_to_driver": False, "logging_level": "warning"}
    quiet_ray_notices()
    if cfg.ray_address:
        check_reachable(cfg.ray_address)
    try:
        with _addresses_as_given(local=not cfg.ray_address):
            if cfg.ray_address:
                ray.init(address=cfg.ray_address, **common)
            else:
                ray.init(address="local", _node_ip_address="127.0.0.1",
                         num_cpus=os.cpu_count(), **common)
    except Exception as exc:  # noqa: BLE001 - any start-up failure is one line
        raise FedglError(_start_error(cfg.ray_address, exc)) from None
    return True


def _start_error(address: str | None, exc: BaseException) -> str:
    text = _root_message(exc)
    if type(exc).__name__ == "AuthenticationError" or "authenticat" in text.lower():
        return (f"Ray at {address or 'the local instance'} refused this driver: token "
                "authentication failed; give the driver the cluster's token (RAY_AUTH_TOKEN or "
                "~/.ray/auth_token, see docs/cluster.md)")
    where = address or "a local instance"
    return (f"could not start or join Ray at {where} ({text[:200]}); check --ray-address and "
            "that `ray start --head` is running there")


def check_cluster_resources(cfg: Config, clients: int, cluster: Mapping[str, float],
                            nodes: list[Mapping[str, float]]) -> None:
    """Refuse actor requests the cluster can never grant (Ray would wait for ever)."""
    for key, per in (("CPU", cfg.client_cpus), ("GPU", cfg.client_gpus)):
        if not per:
            continue
        flag = f"--client-{key.lower()}s"
        largest = max((n.get(key, 0.0) for n in nodes), default=0.0)
        total = cluster.get(key, 0.0)
        if per > largest:
            raise FedglError(f"{flag} {per:g} exceeds every node of the Ray cluster (largest "
                             f"has {largest:g} {key}s); lower {flag}")
        if per * clients > total:
            raise FedglError(f"{clients} clients x {flag} {per:g} = {per * clients:g} {key}s, but "
                             f"the Ray cluster has {total:g}; lower {flag} or --clients")


class RayRuntime:
    """Clients as Ray actors, one per client, spread across the cluster's nodes."""

    def __init__(self, specs: Mapping[int, ShardSpec], client_cls: type, cfg: Config,
                 ledger: Ledger | None = None) -> None:
        ray = require("ray", feature="--runtime ray")

        self._ray = ray
        self.ledger = ledger if ledger is not None else Ledger()
        self.events: list[dict[str, Any]] = []
        self.on_client_restart: Callable[[int], None] | None = None
        self._cfg = cfg
        self._specs = dict(specs)
        self._cls_path = f"{client_cls.__module__}:{client_cls.__qualname__}"
        self._owns_ray = start_ray(cfg)
        cluster = ray.cluster_resources()
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        try:
            check_cluster_resources(cfg, len(specs), cluster, nodes)
        except BaseException:
            self.close_ray()
            raise
        total = cluster.get("CPU", 1.0)
        self._driver_env = {k: os.environ[k] for k in DRIVER_ENV if os.environ.get(k)}
        self._cpus = cfg.client_cpus or max(0.01, min(1.0, total / max(1, len(specs))))
        self._remote = ray.remote(ClientActor)
        self._restarts: dict[int, int] = defaultdict(int)
        self._dropped: set[int] = set()
        self._actors: dict[int, Any] = {}
        try:
            self._actors = {k: self._start(k) for k in self._specs}
            for k in self._specs:
                self._wait_ready(k)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ actors
    def _start(self, k: int) -> Any:
        return self._remote.options(num_cpus=self._cpus, num_gpus=self._cfg.client_gpus,
                                    max_restarts=0, scheduling_strategy="SPREAD",
                                    name=None).remote(self._cls_path, self._specs[k],
                                                      self._driver_env)

    def _wait_ready(self, k: int) -> None:
        """Wait for client ``k``'s actor; one that dies while starting is restarted under the
        failure policy, unless its own code refused its input (a FedglError: exit 2)."""
        while True:
            try:
                self._ray.get(self._actors[k].pid.remote(), timeout=START_TIMEOUT_S)
                return
            except self._ray.exceptions.GetTimeoutError:
                raise FedglError(f"client {k} did not start within {START_TIMEOUT_S:g} s (the "
                                 "cluster lacks free resources or the node is stuck); lower "
                                 "--client-cpus/--client-gpus or set FEDGL_RAY_START_TIMEOUT"
                                 ) from None
            except self._ray.exceptions.RayActorError as exc:
                message = _root_message(exc)
                if any(name in str(exc) for name in ("ConfigError", "DataError", "FedglError")):
                    raise FedglError(f"client {k} could not start: {message}") from None
                if (self._cfg.on_client_failure != "restart"
                        or self._restarts[k] >= self._cfg.max_client_restarts):
                    raise RunAborted(f"client {k} died while starting ({message[:300]}); "
                                     f"{self._restarts[k]} restart(s) used") from None
                self._restarts[k] += 1
                self.events.append({"client": k, "method": "start", "phase": "setup",
                                    "time": time.time(), "error": message[:300],
                                    "action": "restarted"})
                self._actors[k] = self._start(k)

    @property
    def client_ids(self) -> list[int]:
        return sorted(k for k in self._actors if k not in self._dropped)

    def placement(self) -> dict[int, str]:
        """Ray node id of every live client actor."""
        ids = self.client_ids
        nodes = self._ray.get([self._actors[k].node_id.remote() for k in ids])
        return dict(zip(ids, nodes, strict=True))

    def feature_row_digests(self, k: int, width: int) -> list[str]:
        """Client k's process audit (see :meth:`ClientActor.feature_row_digests`)."""
        return self._ray.get(self._actors[k].feature_row_digests.remote(width))

    def peak_rss_mb(self) -> dict[int, float]:
        """Peak resident memory of every live client process (MB): one party's footprint,
        which the driver's own peak (the server's) does not include."""
        ids = self.client_ids
        peaks = self._ray.get([self._actors[k].peak_rss_mb.remote() for k in ids])
        return dict(zip(ids, peaks, strict=True))

    def kill_client(self, k: int) -> None:
        """Kill a client's actor (for failure drills and tests)."""
        self._ray.kill(self._actors[k], no_restart=True)

    # ------------------------------------------------------------------ calls
    def call(self, method: str, args: Mapping[int, dict[str, Any]] | dict[str, Any] | None = None,
             *, phase: str, clients: list[int] | None = None) -> dict[int, Any]:
        targets = [k for k in (self.client_ids if clients is None else clients)
                   if k not in self._dropped]
        per_client = _per_client_args(args, targets)
        # A broadcast is encoded and put into the object store once and fetched by every
        # actor; the ledger still counts one message per recipient, as a real transport would.
        shared = (encode(method, args).to_bytes()
                  if targets and per_client[targets[0]] is args else None)
        shared_ref = self._ray.put(shared) if shared is not None else None
        refs, sent = {}, {}
        down, up, compute = {}, {}, {}
        wall = time.perf_counter()
        for k in targets:
            down[k] = payload_nbytes(per_client[k])
            sent[k] = shared if shared is not None else encode(method, per_client[k]).to_bytes()
            self.ledger.record(phase, "down", k, down[k], wire=len(sent[k]))
            refs[k] = self._actors[k].handle.remote(
                shared_ref if shared is not None else sent[k], phase)
        results = {}
        for k in targets:
            got = self._result(k, refs[k], method, sent[k], phase, down[k])
            if got is not _DROPPED:
                reply, compute[k] = got
                out = decode(Encoded.from_bytes(reply))[1]
                up[k] = payload_nbytes(out)
                self.ledger.record(phase, "up", k, up[k], wire=len(reply))
                results[k] = out
        self.ledger.record_call(phase, down, up, compute, time.perf_counter() - wall)
        return results

    def _result(self, k: int, ref: Any, method: str, message: bytes, phase: str,
                nbytes: int) -> Any:
        policy = self._cfg.on_client_failure
        while True:
            try:
                return self._ray.get(ref)
            except self._ray.exceptions.RayTaskError as exc:
                cause = getattr(exc, "cause", None)
                if isinstance(cause, FedglError | RunAborted):  # a refusal or abort: one line
                    raise cause from None
                raise
            except self._ray.exceptions.RayActorError as exc:
                event = {"client": k, "method": method, "phase": phase, "time": time.time(),
                         "error": _root_message(exc)[:300]}
                if policy == "drop":
                    self._dropped.add(k)
                    self.events.append({**event, "action": "dropped"})
                    return _DROPPED
                if policy == "abort" or self._restarts[k] >= self._cfg.max_client_restarts:
                    self.events.append({**event, "action": "aborted"})
                    raise RunAborted(f"client {k} failed during '{method}' "
                                     f"({event['error']}); policy {policy}, "
                                     f"{self._restarts[k]} restart(s) used") from None
                self._restarts[k] += 1
                self._actors[k] = self._start(k)
                self._wait_ready(k)
                self.events.append({**event, "action": "restarted"})
                if self.on_client_restart is not None:
                    self.on_client_restart(k)
                self.ledger.record(phase, "down", k, nbytes, wire=len(message))
                ref = self._actors[k].handle.remote(message, phase)

    def close(self) -> None:
        for actor in self._actors.values():
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead is fine
                pass
        self._actors = {}
        self.close_ray()

    def close_ray(self) -> None:
        if self._owns_ray:
            self._ray.shutdown()
            self._owns_ray = False


def _root_message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__
