"""Where one Flower message exchange of the deployment spends its time. Prints one JSON object.

    FEDGL_DATA=../shared/data python benchmarks/flower_latency.py --clients 3 --exchanges 8

A loopback deployment (:class:`fedgl.deployment.loopback.Loopback`: one SuperLink, one
``fedgl client`` per client) runs a probe ServerApp that sends every client a ``party.hello``
(the cheapest message: the party signs a challenge, or refuses a second hello of the run in one
line; either way the message goes SuperLink -> SuperNode -> fedgl's relay runner, one long-lived
process, :mod:`fedgl.federation.flower.relay_runner` -> the party and back). Each exchange is
timed on the server, waiting for the replies either with Flower's ``Grid.send_and_receive``
(``flower``) or with fedgl's :func:`~fedgl.federation.flower.runtime.exchange`, the message's
fedgl bytes either in an array record beside the header's record (``flower`` and ``tree``: the
layout before, six Flower objects a message) or inline in the one record
(:func:`~fedgl.federation.flower.client_app.fedgl_content`, ``fedgl``: three objects; the relay
answers in the layout it was asked in), one way after the other (each way's exchanges in one
block, so that the clients' CPU during each block can be read; a way named twice in ``--ways``
runs twice, in turn with the others, against drifting load: psutil samples every 0.05 s).
For each reply, the time until the relay created it (Flower's ``created_at``) splits the
exchange into the way out (SuperNode's poll, the runner's claim, the relay) and the way back
(the SuperNode pushing the reply, the server's wait before it checks). The SuperNodes run with Flower's
``FLWR_LOG_LEVEL=DEBUG`` (its log lines then carry times), from which every message's steps on
the client machine are read: the SuperNode receiving it, the relay runner claiming the task
(its poll of the SuperNode's Runtime API), the relay's run (pulling the task, the party's answer,
pushing the reply), the SuperNode noticing and pushing the reply, and its idle time until it
receives the next message. Beside it: the start of a bare ``flwr-clientapp`` process with the
relay imported (what Flower's own layout, one ClientApp process per message, costs each message;
``fedgl client`` starts none), and one relay round trip to a party over its Unix socket, both
measured here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PROBE = '''"""fedgl's latency probe ServerApp (written by benchmarks/flower_latency.py)."""
import json
import os
import time
from pathlib import Path

from flwr.app import Context, Message
from flwr.serverapp import Grid, ServerApp

from fedgl.federation.codec import encode
from fedgl.federation.flower.client_app import fedgl_content, flower_type
from fedgl.federation.flower.local_link import HELLO, SETUP_PHASE

app = ServerApp()


def _hello(node: int, inline: bool) -> Message:
    body = encode(HELLO, {"challenge": os.urandom(32)}).to_bytes()
    return Message(fedgl_content({"phase": SETUP_PHASE}, body, inline=inline),
                   dst_node_id=node, message_type=flower_type(HELLO, SETUP_PHASE))


@app.main()
def main(grid: Grid, context: Context) -> None:
    job = json.loads(Path(context.run_config["probe-job"]).read_text())
    deadline = time.monotonic() + 120
    while len(nodes := sorted(int(n) for n in grid.get_node_ids())) < job["clients"]:
        if time.monotonic() > deadline:
            raise RuntimeError("the SuperNodes did not join")
        time.sleep(0.2)
    rows = []
    for way in job["ways"]:
        for i in range(job["exchanges"]):
            # "fedgl": the message's fedgl bytes inline in its one record; "tree" and
            # "flower": as an array record beside the header's record (the layout before)
            messages = [_hello(n, inline=way == "fedgl") for n in nodes]
            t0 = time.time()
            if way == "flower":
                replies = list(grid.send_and_receive(messages, timeout=120))
            else:
                from fedgl.federation.flower.runtime import exchange

                replies = exchange(grid, messages, 120)
            t1 = time.time()
            rows.append({"way": way, "exchange": i, "seconds": t1 - t0, "replies": len(replies),
                         "t0": t0, "t1": t1,
                         "out": [r.metadata.created_at - t0 for r in replies],
                         "back": [t1 - r.metadata.created_at for r in replies]})
    # what one check for replies costs the ServerApp (exchange makes up to 5 a second)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(50):
        grid.pull_messages([])
    rows.append({"way": "pull", "seconds": (time.perf_counter() - wall) / 50,
                 "cpu": (time.process_time() - cpu) / 50})
    Path(job["out"]).write_text(json.dumps(rows))
'''


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"mean": round(statistics.fmean(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


#: the SuperNode's log lines (with FLWR_LOG_LEVEL=DEBUG) that mark a message's steps
STEPS = {"receiving": ("Receiving: ",), "received": ("Received successfully",),
         "clientapp_started": ("Start `flwr-clientapp` process", "fedgl relay: started task"),
         "finished": ("Finished task",), "sending": ("Sending: ",),
         "sent": ("Sent successfully",)}
STAMP = re.compile(r"^[A-Z]+ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}):")


def message_steps(log: Path) -> list[dict[str, float]]:
    """Each message's step times (epoch seconds) from one SuperNode's log, in order."""
    from datetime import datetime

    out: list[dict[str, float]] = []
    for line in re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace")).splitlines():
        m = STAMP.match(line)
        if not m:
            continue
        when = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone().timestamp()
        for step, markers in STEPS.items():
            if any(marker in line for marker in markers):
                if step == "receiving":
                    out.append({})
                if out and step not in out[-1]:
                    out[-1][step] = when
    return [r for r in out if len(r) == len(STEPS)]


def client_breakdown(logs: list[Path], ways: list[str], exchanges: int) -> dict[str, dict]:
    """Per way: seconds of each client-side step, over every client and exchange (the idle time
    after a message goes with that message's exchange: the server's wait in it decides when the
    next message is there)."""
    parts: dict[str, dict[str, list[float]]] = {}
    for log in logs:
        steps = message_steps(log)
        for i, r in enumerate(steps):
            way = ways[min(i // exchanges, len(ways) - 1)]   # the probe runs the ways in turn
            mine = parts.setdefault(way, {})
            for name, (a, b) in {"supernode_receive": ("receiving", "received"),
                                 "relay_claims_task": ("received", "clientapp_started"),
                                 "relay_runs": ("clientapp_started", "finished"),
                                 "supernode_notices_reply": ("finished", "sending"),
                                 "supernode_push_reply": ("sending", "sent")}.items():
                mine.setdefault(name, []).append(r[b] - r[a])
            if i + 1 < len(steps):
                mine.setdefault("supernode_idle_until_next", []).append(
                    steps[i + 1]["receiving"] - r["sent"])
    return {way: {k: _stats(v) for k, v in p.items()} for way, p in parts.items()}


def clientapp_start(repeats: int) -> list[float]:
    """Seconds for a fresh ``flwr-clientapp`` process with the relay imported (what every
    message costs before the relay runs): its imports, then exit."""
    from fedgl.deployment.commands import _flower_bin

    code = ("import flwr.supernode.cli.flwr_clientapp, flwr.supernode.runtime.run_clientapp, "
            "fedgl.federation.flower.client_app")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - t0)
    _flower_bin("flwr-clientapp")   # the entry point the SuperExec starts exists
    return times


def client_cpu(procs: list[subprocess.Popen]) -> list[float]:
    """CPU seconds (user + system) each ``fedgl client`` and the processes it started (its
    SuperNode, its relay runner) have used so far."""
    import psutil

    used = []
    for proc in procs:
        root = psutil.Process(proc.pid)
        total = 0.0
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                t = p.cpu_times()
                total += t.user + t.system
        used.append(total)
    return used


def settle(procs: list[subprocess.Popen], rate: float = 0.1, most: float = 120.0) -> None:
    """Wait until every client uses under ``rate`` CPU seconds a second (its start-up, the
    imports of its SuperNode and relay runner, is over; the start-up takes about one), or
    ``most`` seconds."""
    end = time.monotonic() + most
    last = client_cpu(procs)
    while time.monotonic() < end:
        time.sleep(2.0)
        now = client_cpu(procs)
        if all((b - a) / 2.0 < rate for a, b in zip(last, now, strict=True)):
            return
        last = now


def cpu_between(samples: list[tuple[float, list[float]]], t0: float, t1: float) -> list[float]:
    """Each client's CPU seconds between epoch times ``t0`` and ``t1``, from the samples
    taken every 0.05 s (the ones just outside the window: at most 0.05 s of idling more)."""
    first = max((s for s in samples if s[0] <= t0), default=samples[0], key=lambda s: s[0])
    last = min((s for s in samples if s[0] >= t1), default=samples[-1], key=lambda s: s[0])
    return [b - a for a, b in zip(first[1], last[1], strict=True)]


def block_cpu(samples: list[tuple[float, list[float]]], rows: list[dict], way: str
              ) -> list[float]:
    """Each client's CPU seconds over the blocks of exchanges of ``way`` (a way named twice
    in ``--ways`` runs in two blocks; the blocks of other ways between them do not count)."""
    total: list[float] | None = None
    block: list[dict] = []
    for r in [*rows, {"way": None}]:
        if (r["way"] == way and "t0" in r
                and (not block or r["exchange"] == block[-1]["exchange"] + 1)):
            block.append(r)
            continue
        if block:
            used = cpu_between(samples, block[0]["t0"], block[-1]["t1"])
            total = used if total is None else [a + b for a, b in zip(total, used, strict=True)]
            block = []
        if r["way"] == way and "t0" in r:
            block.append(r)
    return total or []


def relay_round_trip(shards: Path, keys: Path, repeats: int) -> list[float]:
    """Seconds for one relay request (``types``) to a party over its Unix socket."""
    from fedgl.deployment.party import Party
    from fedgl.federation.flower.local_link import ask

    party = Party(shards / "client-0.json", keys / "client-0.key", keys / "roster.json")
    with tempfile.TemporaryDirectory(prefix="fedgl-relay-") as tmp:
        path = Path(tmp) / "party.sock"
        stop = threading.Event()
        server = threading.Thread(target=party.serve, args=(path, stop), daemon=True)
        server.start()
        while not path.exists():
            time.sleep(0.01)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            ask(str(path), {"op": "types"})
            times.append(time.perf_counter() - t0)
        stop.set()
        server.join(timeout=5)
    return times


def probe(root: Path, app: Path, layout: str, args: argparse.Namespace,
          ways: list[str]) -> dict:
    """One loopback deployment whose clients use SuperNode ``layout`` (``relay``, ``runner``,
    ``flower``: ``fedgl.deployment.commands._start_supernode``), probed."""
    from fedgl.deployment.commands import _flower_bin, _flower_env
    from fedgl.deployment.loopback import Loopback

    folder = root / layout
    folder.mkdir()
    job = folder / "job.json"
    job.write_text(json.dumps({"clients": args.clients, "exchanges": args.exchanges,
                               "ways": ways, "out": str(folder / "rows.json")}))
    os.environ["FEDGL_SUPERNODE"] = layout   # read by each `fedgl client` the Loopback starts
    load = round(os.getloadavg()[0], 2)
    with Loopback(folder / "fed", root / "shards", root / "keys", args.clients) as fed:
        clients = [fed.procs[f"client-{k}"] for k in range(args.clients)]
        settle(clients)
        idle = client_cpu(clients)
        time.sleep(args.idle)
        before = client_cpu(clients)
        idle = [(b - a) / args.idle for a, b in zip(idle, before, strict=True)]
        samples: list[tuple[float, list[float]]] = []
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.wait(0.05):
                samples.append((time.time(), client_cpu(clients)))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        home = folder / "control-home"
        home.mkdir()
        (home / "config.toml").write_text(f'[superlink]\ndefault = "fedgl"\n\n'
                                          f'[superlink.fedgl]\naddress = "{fed.address}"\n'
                                          "insecure = true\n")
        t0 = time.perf_counter()
        done = subprocess.run([_flower_bin("flwr"), "run", str(app), "fedgl", "--stream",
                               "--run-config", f'probe-job="{job}"'],
                              env=_flower_env(home), capture_output=True, text=True,
                              check=False)
        run_seconds = time.perf_counter() - t0
        sampling.set()
        sampler.join()
    os.environ.pop("FEDGL_SUPERNODE")
    if not (folder / "rows.json").is_file():
        raise SystemExit(f"the probe did not finish: {done.stdout[-1500:]}{done.stderr[-500:]}")
    rows = json.loads((folder / "rows.json").read_text())
    client_side = client_breakdown(sorted((folder / "fed").glob("client-*.log")), ways,
                                   args.exchanges)
    if args.logs:
        import shutil

        Path(args.logs, layout).mkdir(parents=True, exist_ok=True)
        for log in (folder / "fed").glob("*.log"):
            shutil.copy(log, Path(args.logs, layout))
    out: dict = {"flwr_run_command_seconds": round(run_seconds, 2),
                 "load_average_1min": {"start": load, "end": round(os.getloadavg()[0], 2)},
                 "client_cpu_seconds_per_idle_second": [round(x, 4) for x in idle],
                 "per_way": {}}
    for way in ways:
        mine = [r for r in rows if r["way"] == way]
        out["per_way"][way] = {
            "exchange_seconds_median": round(statistics.median(r["seconds"] for r in mine), 3),
            "exchange_seconds": _stats([r["seconds"] for r in mine]),
            "client_cpu_seconds_per_message": [
                round(c / len(mine), 4) for c in block_cpu(samples, rows, way)],
            "replies_missing": sum(args.clients - r["replies"] for r in mine),
            "out_seconds": _stats([x for r in mine for x in r["out"]]),
            "back_seconds": _stats([x for r in mine for x in r["back"]]),
            "exchanges": [round(r["seconds"], 2) for r in mine],
            "client_side_seconds": client_side.get(way, {})}
    pull = [r for r in rows if r["way"] == "pull"]
    if pull:
        out["one_pull_messages_call"] = {"wall_seconds": round(pull[0]["seconds"], 4),
                                         "serverapp_cpu_seconds": round(pull[0]["cpu"], 4)}
    return out


def main() -> None:
    from fedgl.cli import main as fedgl_main
    from fedgl.deployment.commands import write_app
    from fedgl.privacy.identity import write_keys

    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--exchanges", type=int, default=8)
    ap.add_argument("--ways", default="flower,tree,fedgl",
                    help="comma-separated, one block each in turn: flower (Grid."
                         "send_and_receive, the fedgl bytes in an array record beside the "
                         "header's record), tree (fedgl's exchange, that record tree: the "
                         "layout before), fedgl (exchange, the fedgl bytes inline in the one "
                         "record: now)")
    ap.add_argument("--supernodes", default="flower,runner,relay",
                    help="comma-separated SuperNode layouts of the clients, one deployment each "
                         "in turn: relay (fedgl client's: the paced SuperNode answering with "
                         "the relay in its own process), runner (the paced SuperNode beside the "
                         "relay runner), flower (Flower's own SuperNode beside a runner polling "
                         "every 0.1 s: the layout before)")
    ap.add_argument("--idle", type=float, default=10.0,
                    help="seconds the clients' idle CPU is measured before the probe runs")
    ap.add_argument("--logs", default=None, metavar="DIR",
                    help="copy the SuperLink's and clients' logs here (a folder per layout)")
    args = ap.parse_args()
    ways = [w for w in args.ways.split(",") if w]
    if not ways or set(ways) - {"flower", "tree", "fedgl"}:
        raise SystemExit("--ways takes flower, tree and fedgl, e.g. --ways tree,fedgl")
    layouts = [w for w in args.supernodes.split(",") if w]
    if not layouts or set(layouts) - {"flower", "runner", "relay"}:
        raise SystemExit("--supernodes takes flower, runner and relay, e.g. --supernodes "
                         "flower,relay")

    out: dict = {"clients": args.clients, "exchanges_per_way": args.exchanges}
    with tempfile.TemporaryDirectory(prefix="fedgl-latency-") as tmp:
        root = Path(tmp)
        write_keys(root / "keys", args.clients)
        with contextlib.redirect_stdout(sys.stderr):   # stdout is the JSON only
            assert fedgl_main(["shard", "--dataset", "cora", "--clients", str(args.clients),
                               "--out", str(root / "shards")]) == 0
        app = write_app(root / "app", serverapp="latency_probe:app", config_key="probe-job",
                        name="fedgl-latency-probe")
        (app / "latency_probe.py").write_text(PROBE)
        os.environ["FLWR_LOG_LEVEL"] = "DEBUG"   # Flower's log lines with times
        out["supernodes"] = {layout: probe(root, app, layout, args, ways)
                             for layout in layouts}
        relay = relay_round_trip(root / "shards", root / "keys", 20)
    out["clientapp_process_start_seconds"] = _stats(clientapp_start(3))
    out["relay_round_trip_seconds"] = _stats(relay)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
