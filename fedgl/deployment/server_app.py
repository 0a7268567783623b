"""The deployment's server: a Flower ServerApp running fedgl's server side of an algorithm.

``fedgl server`` (or ``flwr run`` with the app ``fedgl server`` writes) starts it on the
SuperLink with a *job file* (run config key ``fedgl-job``): the fedgl configuration, the roster
path, the results folder. The ServerApp then

1. waits until a SuperNode per roster client has joined;
2. sends every node a fresh challenge (protocol message ``party.hello``, phase ``setup``); a
   node is mapped to the client id whose roster key signed (challenge, node id, run id, roster
   digest). A node that proves no roster identity, or claims an id another node proved, is
   refused and gets no further message;
3. sends every client the run's configuration (``party.setup``); each party checks it against
   its own safety settings, builds its role from its own shard, and answers, in the same round
   trip, its role's public facts (``setup.facts``, :mod:`fedgl.federation.facts`), which the
   server-side set-up of the algorithm's driver then uses as a local run's uses its own
   ``setup.facts`` exchange;
4. runs the algorithm's server unchanged over :class:`~fedgl.federation.flower.runtime.FlowerRuntime`
   and writes ``result.json`` and ``history.csv`` as a local run does (the ledger's bytes, the
   set-up messages in phase ``setup``, and what Flower carried beside them, in
   ``extra.flower``).

With ``checkpoint_every`` the server writes ``checkpoint.pt`` into the results folder exactly as
a local run does; a job with ``resume`` continues it: the clients rebuild their state as the
local resume does (pre-training or the structure exchange re-run on a scratch ledger) and the
server restores its model, history, ledger and events.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flwr.app import Context, Message
from flwr.serverapp import Grid, ServerApp

from fedgl.algorithms.continuation import Continuation
from fedgl.api import save_with_model
from fedgl.checkpoint import Checkpointer, load_checkpoint, set_rng_state
from fedgl.config import Config
from fedgl.config.registry import load_path
from fedgl.deployment.party import hello_message, read_roster
from fedgl.deployment.run_watch import SERVERAPP_PID
from fedgl.deployment.server_log import WAIT_LINE_EVERY, ServerLog
from fedgl.errors import ConfigError, FedglError, RunAborted
from fedgl.federation.codec import Encoded, WireError, decode, encode
from fedgl.federation.facts import FACTS
from fedgl.federation.flower.client_app import (
    HELLO,
    SETUP,
    SETUP_PHASE,
    fedgl_content,
    flower_type,
    record_body,
)
from fedgl.federation.flower.runtime import FlowerRuntime, exchange, flower_nbytes, refusal
from fedgl.federation.messages import payload_nbytes
from fedgl.federation.protocol import (
    Any_,
    Bool,
    Bytes,
    Int,
    ProtocolViolation,
    Seq,
    Str,
    check_fields,
)
from fedgl.output import OutputFolder
from fedgl.privacy.identity import Roster
from fedgl.results import RunResult, environment

JOB_KEY = "fedgl-job"


def wait_for_nodes(grid: Grid, wanted: int, timeout: float,
                   log: Callable[[str], None] | None = None) -> list[int]:
    """The connected SuperNodes once at least ``wanted`` have joined (ConfigError on timeout);
    ``log`` gets a line every :data:`~fedgl.deployment.server_log.WAIT_LINE_EVERY` s."""
    start = time.monotonic()
    deadline = start + timeout
    next_line = start + WAIT_LINE_EVERY
    while True:
        ids = sorted(int(n) for n in grid.get_node_ids())
        if len(ids) >= wanted:
            return ids
        if log is not None and time.monotonic() >= next_line:
            log(f"waiting for SuperNodes: {len(ids)}/{wanted} joined "
                f"({time.monotonic() - start:.0f} s)")
            next_line += WAIT_LINE_EVERY
        if time.monotonic() > deadline:
            raise ConfigError(f"only {len(ids)} of {wanted} SuperNodes joined within "
                              f"{timeout:g} s; start every client with `fedgl client`")
        time.sleep(0.5)


#: what a party's ``party.hello`` reply must be (checked before anything in it is used)
HELLO_REPLY = {"client_id": Int(0, 1 << 31), "signature": Bytes(max_len=256)}
#: what a party's ``party.setup`` reply must be: the DP releases it logged for the run, and its
#: role's ``setup.facts`` reply (checked by :func:`fedgl.federation.facts.agree`)
SETUP_REPLY = {"ok": Bool(), "dp_releases": Seq(Str(max_len=4096), max_len=1 << 20),
               "facts": Any_(), "data": Any_()}
#: fields a set-up reply may leave out: ``data``, what the result records of the shard
SETUP_OPTIONAL = ("data",)
#: where the deployment keeps the run's tag (the name the parties file their records under)
RUN_FILE = "deployment-run.json"


def handshake(grid: Grid, roster: Roster, node_ids: list[int], timeout: float,
              duplicates: list[int] | None = None
              ) -> tuple[dict[int, int], list[str], list[tuple]]:
    """Map Flower nodes to roster client ids by signed challenges: ``({client: node}, [one line
    per refused node], [the hello traffic of the mapped clients, for the ledger])``; the nodes
    that proved an identity another node proved first go into ``duplicates``."""
    run_id = int(grid.run.run_id)
    challenges = {n: os.urandom(32) for n in node_ids}
    sent = {n: encode(HELLO, {"challenge": challenges[n]}) for n in node_ids}
    messages = [Message(fedgl_content({"phase": SETUP_PHASE}, sent[n].to_bytes()),
                        dst_node_id=n, message_type=flower_type(HELLO, SETUP_PHASE))
                for n in node_ids]
    down_flower = {int(m.metadata.dst_node_id): flower_nbytes(m) or 0 for m in messages}
    nodes: dict[int, int] = {}
    refused: list[str] = []
    traffic: list[tuple] = []
    for reply in exchange(grid, messages, timeout):
        n = int(reply.metadata.src_node_id)
        why = refusal(reply, -1)
        if why is not None or n not in challenges:
            refused.append(f"node {n}: {why or 'unexpected reply'}")
            continue
        try:
            raw = record_body(reply.content)
            msg_type, meta = decode(Encoded.from_bytes(raw))
        except (KeyError, WireError) as exc:
            refused.append(f"node {n}: unreadable hello reply ({exc})")
            continue
        bad = (f"type {msg_type!r}" if msg_type != HELLO + ".reply" else
               "not a record" if not isinstance(meta, dict) else
               check_fields(meta, HELLO_REPLY, (), {}))
        if bad:
            refused.append(f"node {n}: malformed hello reply ({bad})")
            continue
        k = int(meta["client_id"])
        if not roster.verify(k, hello_message(challenges[n], n, run_id, roster),
                             bytes(meta["signature"])):
            refused.append(f"node {n}: cannot prove client {k}'s roster key (refused)")
            continue
        if k in nodes:
            refused.append(f"node {n}: client {k} is already node {nodes[k]} (refused)")
            if duplicates is not None:
                duplicates.append(n)
            continue
        nodes[k] = n
        traffic.append((k, payload_nbytes({"challenge": challenges[n]}), sent[n].nbytes,
                        payload_nbytes(meta), len(raw), down_flower[n],
                        flower_nbytes(reply) or 0))
    return nodes, refused, traffic


def record_hello(runtime: FlowerRuntime, traffic: list[tuple]) -> None:
    """Count the mapped clients' hello messages in the ledger (phase ``setup``)."""
    for k, down, down_wire, up, up_wire, fl_down, fl_up in traffic:
        runtime.ledger.record(SETUP_PHASE, "down", k, down, wire=down_wire)
        runtime.ledger.record(SETUP_PHASE, "up", k, up, wire=up_wire)
        runtime.flower_bytes[SETUP_PHASE]["down"] += fl_down
        runtime.flower_bytes[SETUP_PHASE]["up"] += fl_up


def setup_clients(runtime: FlowerRuntime, cfg: Config, seed: int, run_tag: str,
                  resumed: bool) -> dict[str, list[str]]:
    """Send every client the run's configuration (``party.setup``); any refusal or silence
    stops the run (one line). A refusal is the party's verdict on the configuration (settings
    its shard was not made with, a weaker policy than its own): a :class:`ConfigError`, exit
    2 as for any bad input; silence is :class:`RunAborted`. Returns the DP releases each client
    has logged for the run; the replies' ``setup.facts`` answers go to ``runtime.answered`` (the
    driver's set-up takes them from there instead of asking again)."""
    policy, runtime.on_client_failure = runtime.on_client_failure, "abort"
    try:
        replies = runtime.call(SETUP, {"config": cfg.to_dict(), "seed": int(seed),
                                       "run_tag": run_tag, "resumed": bool(resumed)},
                               phase=SETUP_PHASE)
    except ProtocolViolation as exc:
        raise ConfigError(f"a client refused the run: {exc}") from None
    finally:
        runtime.on_client_failure = policy
    logged: dict[str, list[str]] = {}
    facts: dict[int, Any] = {}
    shards: dict[int, dict[str, Any]] = {}
    for k, reply in replies.items():
        bad = "not a record" if not isinstance(reply, dict) else \
            check_fields(reply, SETUP_REPLY, SETUP_OPTIONAL, {})
        if bad:
            raise RunAborted(f"client {k} answered the run set-up with a malformed reply ({bad})")
        if reply["dp_releases"]:
            logged[str(k)] = list(reply["dp_releases"])
        facts[k] = reply["facts"]
        if isinstance(reply.get("data"), dict):
            shards[k] = {**reply["data"], "client_id": int(k)}
    runtime.answered = {FACTS: facts}
    runtime.data = ({"dataset": cfg.dataset, "partition": "the organisations' own"
                     if str(cfg.dataset).startswith("own:") else cfg.partition,
                     "shards": [shards[k] for k in sorted(shards)]} if shards else None)
    return logged


def run_deployed(runtime: FlowerRuntime, cfg: Config, seed: int,
                 extra: dict[str, Any]) -> RunResult:
    """One repeat of ``cfg.algorithm``'s server over the deployed clients: the driver its spec
    names (a generic kind of :mod:`fedgl.deployment.drivers_horizontal`, with the spec's
    server, or the algorithm's own ``driver(runtime, cfg, seed, t0)``); each learns the
    clients' facts in its own server-side set-up."""
    t0 = time.perf_counter()
    _, driver, server = cfg.spec.deployment()
    from fedgl.deployment.drivers_horizontal import GENERIC

    if driver in GENERIC:
        rep = GENERIC[driver](runtime, cfg, seed, t0, server)
    else:
        rep = load_path(driver)(runtime, cfg, seed, t0)
    rep.extra["runtime"] = "flower"
    rep.extra.setdefault("failures", list(runtime.events))
    rep.extra["flower"] = {**extra, "bytes": {p: dict(v) for p, v in runtime.flower_bytes.items()},
                           "calls": runtime.calls, **rep.extra.get("flower", {})}
    recorded = cfg.to_dict()
    recorded["runtime"] = "flower"
    env = environment(seed, cfg.device)
    facts = getattr(runtime, "facts", None)
    if facts is not None:   # what the model was trained on: the clients' reported widths
        widths = list(facts.features.values())   # vertical: each party's own columns
        env["graph"] = {"num_nodes": int(sum(facts.nodes.values()) if facts.setting ==
                                         "horizontal" else next(iter(facts.nodes.values()))),
                        "num_features": int(widths[0] if facts.setting == "horizontal"
                                            else sum(widths)),
                        "num_classes": int(facts.num_classes)}
    if getattr(runtime, "data", None):   # the shards' own record of what they hold
        env["data"] = runtime.data
    return RunResult(recorded, env, [rep])


def serve(grid: Grid, job: dict[str, Any]) -> RunResult | None:
    """The whole server side of one deployed run (see the module docstring)."""
    cfg = Config.from_dict(job["config"])
    if cfg.repeats != 1:
        raise ConfigError("a deployed run is one repeat (each seed is a different partition, "
                          "so different shards); set repeats: 1")
    roster = read_roster(job["roster"])
    if cfg.clients != len(roster.ids):
        raise ConfigError(f"the config has {cfg.clients} clients, the roster {len(roster.ids)}")
    timeout = float(job.get("timeout", 600))
    resume = bool(job.get("resume"))
    folder = OutputFolder(job["out"], overwrite=bool(job.get("overwrite")), resume=resume,
                          flag="--resume" if resume else "--out").open()
    log = ServerLog(job.get("log"))
    try:
        cont, run_tag = _checkpointing(cfg, Path(job["out"]), resume, folder)
        log(f"{cfg.algorithm}: waiting for {len(roster.ids)} organisations' SuperNodes")
        node_ids = wait_for_nodes(grid, len(roster.ids), float(job.get("join_timeout", 300)),
                                  log)
        duplicates: list[int] = []
        nodes, refused, traffic = handshake(grid, roster, node_ids, timeout, duplicates)
        for line in refused:
            log(f"refused {line}")
        tell_not_admitted(grid, duplicates)
        missing = sorted(set(roster.ids) - set(nodes))
        if missing:
            raise RunAborted(f"roster clients {missing} did not prove their identity "
                             f"({'; '.join(refused) or 'no reply'})")
        log(f"{len(nodes)} organisations joined and proved their roster keys: clients "
            f"{', '.join(map(str, sorted(nodes)))}")
        runtime = FlowerRuntime(grid, nodes, timeout=timeout,
                                on_client_failure="drop" if cfg.on_client_failure == "drop"
                                else "abort")
        runtime.log = log
        runtime.server_log = log
        record_hello(runtime, traffic)
        cont.logged = setup_clients(runtime, cfg, cfg.seed, run_tag, resume)
        runtime.continuation = cont
        if job.get("predict"):   # score with a saved model instead of training
            from fedgl.deployment.model_release import score_deployed

            summary = score_deployed(runtime, cfg, cfg.seed, Path(job["predict"]), log)
            folder.commit(lambda staging: (staging / "prediction.json").write_text(
                json.dumps(summary, indent=2) + "\n"))
            tell_finished(runtime, 0, log)
            log(f"finished in {log.elapsed():.0f} s; the summary in {job['out']}")
            return None
        result = run_deployed(runtime, cfg, cfg.seed,
                              {"nodes": {str(k): n for k, n in nodes.items()},
                               "refused_nodes": refused, "run_tag": run_tag})
        folder.commit(lambda staging: save_with_model(result, staging))
        from fedgl.deployment.model_release import keep_parts, release_encrypted, release_model

        if cfg.spec.setting == "vertical":
            keep_parts(runtime, result, log)
        elif getattr(runtime, "encrypted_model", None) is not None:
            release_encrypted(runtime, result, log)
        else:
            release_model(runtime, Path(job["out"]) / "model", log)
        tell_finished(runtime, int(cfg.rounds or 0), log)
        log(f"finished in {log.elapsed():.0f} s; results in {job['out']}")
        return result
    except Exception as exc:
        log(f"stopped: {exc}")
        raise
    finally:
        log.close()
        folder.close()


def tell_not_admitted(grid: Grid, duplicates: list[int], timeout: float = 10.0) -> None:
    """Tell each node that proved an identity another node proved first that it is not admitted
    (``party.not_admitted``): its ``fedgl client`` says so in one line instead of waiting in
    silence. Their replies change nothing."""
    from fedgl.deployment.party import NOT_ADMITTED

    if not duplicates:
        return
    body = encode(NOT_ADMITTED, {"reason": "duplicate"}).to_bytes()
    exchange(grid, [Message(fedgl_content({"phase": SETUP_PHASE}, body), dst_node_id=n,
                            message_type=flower_type(NOT_ADMITTED, SETUP_PHASE))
                    for n in duplicates], timeout)


def tell_finished(runtime: FlowerRuntime, last_round: int, log: ServerLog) -> None:
    """The run's last message (``party.finished``, once its results are written): every
    organisation's ``fedgl client`` says in one line that the run finished and where its files
    are. A client that does not answer changes nothing of the run; the server says so."""
    from fedgl.deployment.party import FINISHED

    try:
        runtime.call(FINISHED, {"round": max(0, last_round)}, phase=SETUP_PHASE)
    except (FedglError, RunAborted) as exc:
        log(f"the organisations were not all told that the run finished ({exc}); the "
            "results are written")


def _checkpointing(cfg: Config, out: Path, resume: bool, folder: OutputFolder
                   ) -> tuple[Continuation, str]:
    """The run's :class:`Continuation` and its tag (kept beside the checkpoint, so a resumed
    run's parties find their records of the earlier attempts)."""
    cont = Continuation()
    tag = ""
    if resume:
        ckpt = load_checkpoint(out)
        if ckpt.progress is None or ckpt.progress.repeat != 0:
            raise ConfigError(f"the checkpoint in '{out}' holds no round of a deployed run to "
                              "continue; start a new run")
        set_rng_state(ckpt.rng)
        cont.progress = ckpt.progress
        try:
            tag = str(json.loads((out / RUN_FILE).read_text())["run_tag"])
        except (OSError, ValueError, KeyError, TypeError):
            tag = ""   # a local run's checkpoint: the parties have no earlier records
    if not tag.isalnum() or len(tag) > 64:
        tag = os.urandom(8).hex()
    if cfg.checkpoint_every:
        folder.prepare_checkpoints()
        cont.checkpointer = Checkpointer(out, cfg.to_dict(), cfg.checkpoint_every)
        (out / RUN_FILE).write_text(json.dumps({"run_tag": tag}) + "\n")
    return cont, tag


#: the component named in the deployment app's ``[tool.flwr.app.components] serverapp``
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    path = context.run_config.get(JOB_KEY)
    if not isinstance(path, str) or not Path(path).is_file():
        raise ConfigError(f"run config '{JOB_KEY}' names no job file; start the run with "
                          "`fedgl server`")
    job = json.loads(Path(path).read_text())
    status = Path(job["status"]) if job.get("status") else None
    if job.get("run_id_file"):  # lets `fedgl server` stop this run on the SuperLink (Ctrl-C)
        Path(job["run_id_file"]).write_text(str(int(grid.run.run_id)))
        # and follow this process where `flwr run` loses the SuperLink (a restart) before it ends
        Path(job["run_id_file"]).with_name(SERVERAPP_PID).write_text(str(os.getpid()))
    try:
        serve(grid, job)
    except Exception as exc:  # noqa: BLE001 - the job's status file gets the one line
        if status is not None:
            status.write_text(json.dumps({"ok": False, "error": f"{exc}",
                                          "kind": type(exc).__name__}) + "\n")
        raise
    if status is not None:
        status.write_text(json.dumps({"ok": True}) + "\n")
