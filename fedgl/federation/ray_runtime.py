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

import importlib
import os
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from fedgl.config import Config
from fedgl.data.shards import ShardSpec, load_shard
from fedgl.errors import FedglError, RunAborted
from fedgl.federation.ledger import Ledger
from fedgl.federation.messages import payload_nbytes
from fedgl.federation.runtime import _per_client_args

_DROPPED = object()


class ClientActor:
    """Hosts one client inside a Ray worker process (wrapped by ``ray.remote`` at start-up)."""

    def __init__(self, client_cls_path: str, spec: ShardSpec) -> None:
        import torch

        cfg = Config.from_dict(spec.config)
        cpus = max(1, int(float(os.environ.get("OMP_NUM_THREADS", "1"))))
        torch.set_num_threads(cfg.threads or cpus)
        module, name = client_cls_path.rsplit(":", 1)
        cls = getattr(importlib.import_module(module), name)
        shard = load_shard(spec)
        # a client class built from protocol parameters (e.g. GLASU's) offers ``from_shard``
        self.client = (cls.from_shard(shard, spec.client_params, spec.seed)
                       if spec.client_params is not None else cls(shard, cfg, spec.seed))

    def call(self, method: str, kwargs: dict[str, Any]) -> Any:
        return getattr(self.client, method)(**kwargs)

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def pid(self) -> int:
        return os.getpid()

    def peak_rss_mb(self) -> float:
        """This client process's peak resident memory (``ru_maxrss``, MB)."""
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def start_ray(cfg: Config) -> bool:
    """Connect to ``cfg.ray_address`` or start a local Ray bound to 127.0.0.1. Returns whether
    this call started Ray (and so should shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    common = {"include_dashboard": False, "log_to_driver": False, "logging_level": "warning"}
    try:
        if cfg.ray_address:
            ray.init(address=cfg.ray_address, **common)
        else:
            ray.init(_node_ip_address="127.0.0.1", num_cpus=os.cpu_count(), **common)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        where = cfg.ray_address or "a local instance"
        raise FedglError(f"could not start or join Ray at {where} ({exc}); check --ray-address "
                         "and that `ray start --head` is running there") from None
    return True


class RayRuntime:
    """Clients as Ray actors, one per client, spread across the cluster's nodes."""

    def __init__(self, specs: Mapping[int, ShardSpec], client_cls: type, cfg: Config,
                 ledger: Ledger | None = None) -> None:
        import ray

        self._ray = ray
        self.ledger = ledger if ledger is not None else Ledger()
        self.events: list[dict[str, Any]] = []
        self.on_client_restart: Callable[[int], None] | None = None
        self._cfg = cfg
        self._specs = dict(specs)
        self._cls_path = f"{client_cls.__module__}:{client_cls.__qualname__}"
        self._owns_ray = start_ray(cfg)
        total = ray.cluster_resources().get("CPU", 1.0)
        self._cpus = cfg.client_cpus or max(0.01, min(1.0, total / max(1, len(specs))))
        self._remote = ray.remote(ClientActor)
        self._restarts: dict[int, int] = defaultdict(int)
        self._dropped: set[int] = set()
        self._actors = {k: self._start(k) for k in self._specs}
        for k in self._specs:
            self._wait_ready(k)

    # ------------------------------------------------------------------ actors
    def _start(self, k: int) -> Any:
        return self._remote.options(num_cpus=self._cpus, num_gpus=self._cfg.client_gpus,
                                    max_restarts=0, scheduling_strategy="SPREAD",
                                    name=None).remote(self._cls_path, self._specs[k])

    def _wait_ready(self, k: int) -> None:
        try:
            self._ray.get(self._actors[k].pid.remote())
        except self._ray.exceptions.RayActorError as exc:
            raise FedglError(f"client {k} could not start: {_root_message(exc)}") from None

    @property
    def client_ids(self) -> list[int]:
        return sorted(k for k in self._actors if k not in self._dropped)

    def placement(self) -> dict[int, str]:
        """Ray node id of every live client actor."""
        ids = self.client_ids
        nodes = self._ray.get([self._actors[k].node_id.remote() for k in ids])
        return dict(zip(ids, nodes, strict=True))

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
        # A broadcast is serialised into the object store once and fetched by every actor; the
        # ledger still counts one message per recipient, as a real transport would send.
        shared = self._ray.put(args) if targets and per_client[targets[0]] is args else None
        refs = {}
        for k in targets:
            self.ledger.record(phase, "down", k, payload_nbytes(per_client[k]))
            payload = shared if shared is not None else per_client[k]
            refs[k] = self._actors[k].call.remote(method, payload)
        results = {}
        for k in targets:
            out = self._result(k, refs[k], method, per_client[k], phase)
            if out is not _DROPPED:
                self.ledger.record(phase, "up", k, payload_nbytes(out))
                results[k] = out
        return results

    def _result(self, k: int, ref: Any, method: str, kwargs: dict, phase: str) -> Any:
        policy = self._cfg.on_client_failure
        while True:
            try:
                return self._ray.get(ref)
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
                self.ledger.record(phase, "down", k, payload_nbytes(kwargs))
                ref = self._actors[k].call.remote(method, kwargs)

    def close(self) -> None:
        for actor in self._actors.values():
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead is fine
                pass
        self._actors = {}
        if self._owns_ray:
            self._ray.shutdown()


def _root_message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__
