"""A malicious ServerApp against a loopback Flower federation of ``fedgl client`` processes (slow).

Three organisations start ``fedgl client`` with their own policy files (clients 0 and 1:
``secure_sum: mask``; client 2: ``secure_sum: he``) and ``--max-message-mb 1``. The ServerApp
(written here, submitted with ``flwr run`` like any app) does the honest hello, then tries what
a server that wants one client's values would: a set-up weaker than the parties' policies, an
honest set-up followed by the plaintext pre-training steps, a secure upload plan listing a row
twice, replays of the hello and the set-up it sent, and a body over the parties' message cap.
Every reply to an attack is a one-line refusal that carries no fedgl body (no value of any
client); the honest steps are answered."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from fedgl.data.shard_format import write_shard
from fedgl.privacy.identity import write_keys
from tests.flower_helpers import needs_flwr, tiny_shard

MODES = ("mask", "mask", "he")

MALICIOUS = '''"""A malicious fedgl ServerApp (written by tests/test_flower_malicious.py)."""
import json
import os
import time
from pathlib import Path

import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from fedgl.config import Config
from fedgl.deployment.party import hello_message, read_roster
from fedgl.federation.codec import Encoded, decode, encode
from fedgl.federation.flower.client_app import body_record, flower_type, record_body
from fedgl.federation.flower.runtime import exchange_keyed, refusal

app = ServerApp()


def message(node, msg_type, phase, body):
    return Message(RecordDict({"fedgl-meta": ConfigRecord({"phase": phase}),
                              "fedgl": body_record(body)}),
                   dst_node_id=node, message_type=flower_type(msg_type, phase))


def send(grid, nodes, msg_type, phase, bodies):
    """Send each client its body; per client: the refusal line, or the decoded reply."""
    order = sorted(bodies)
    seen = exchange_keyed(grid, [message(nodes[k], msg_type, phase, bodies[k]) for k in order],
                          120)
    out = {}
    for k, mid in zip(order, seen.ids):
        reply = seen.replies.get(mid) if mid else None
        if reply is None:
            out[k] = {"silent": True}
            continue
        why = refusal(reply, k)
        carried = reply.has_content() and "fedgl" in reply.content.array_records
        row = {"refused": why, "body": carried}
        if why is None and carried:
            row["reply"] = decode(Encoded.from_bytes(record_body(reply.content)))[1]
        out[k] = row
    return out


def config(job, mode):
    return Config.from_dict({**job["run"], "secure_sum": mode}).to_dict()


@app.main()
def main(grid: Grid, context: Context) -> None:
    job = json.loads(Path(context.run_config["attack-job"]).read_text())
    roster = read_roster(job["roster"])
    clients = len(job["modes"])
    deadline = time.monotonic() + 120
    while len(node_ids := sorted(int(n) for n in grid.get_node_ids())) < clients:
        assert time.monotonic() < deadline, "the SuperNodes did not join"
        time.sleep(0.2)
    report = {}
    # the honest hello: each node proves its roster id
    challenges = {n: os.urandom(32) for n in node_ids}
    hellos = {n: encode("party.hello", {"challenge": challenges[n]}).to_bytes()
              for n in node_ids}
    got = send(grid, {n: n for n in node_ids}, "party.hello", "setup", hellos)
    run_id, nodes = int(grid.run.run_id), {}
    for n, row in got.items():
        k = int(row["reply"]["client_id"])
        if roster.verify(k, hello_message(challenges[n], n, run_id, roster),
                         bytes(row["reply"]["signature"])):
            nodes[k] = n
    report["proved"] = sorted(nodes)
    ks = sorted(nodes)

    def each(make):
        return {k: make(k) for k in ks}

    def step(name, msg_type, phase, bodies):
        rows = send(grid, nodes, msg_type, phase, bodies)
        report[name] = {str(k): {f: v for f, v in r.items() if f != "reply"}
                        for k, r in rows.items()}
        return rows

    # (a) a set-up weaker than every party's policy: no secure sum
    weak = {"config": config(job, "none"), "seed": 0, "run_tag": "attack", "resumed": False}
    step("weaker_setup", "party.setup", "setup",
         each(lambda k: encode("party.setup", weak).to_bytes()))
    # (b) the honest set-up (each party's own mode), then the attacks
    setups = each(lambda k: encode("party.setup", {
        "config": config(job, job["modes"][k]), "seed": 0, "run_tag": "attack",
        "resumed": False}).to_bytes())
    rows = step("honest_setup", "party.setup", "setup", setups)
    report["honest_setup_replies"] = {str(k): r.get("reply") for k, r in rows.items()}
    for name in ("fedgcn.partial_sums", "fedgcn.announce_rows", "fedgcn.block_sums"):
        step(name, name, "pretrain", each(lambda k, name=name: encode(name, {}).to_bytes()))
    session = os.urandom(16)
    rows = step("privacy_hello", "fedgcn.privacy_hello", "pretrain", each(
        lambda k: encode("fedgcn.privacy_hello", {"session": session,
                                                  "announce": True}).to_bytes()))
    report["privacy_hello_fields"] = {str(k): sorted(r.get("reply") or {})
                                      for k, r in rows.items()}

    def crafted(k):
        want = int(rows[k]["reply"]["num_requested"])
        other = next(j for j in ks if j != k)
        plan = {"block_ids": torch.tensor([0]), "block_sizes": torch.tensor([2]),
                "rows": torch.tensor([0, 0]), "use_own": torch.zeros(want, dtype=torch.bool),
                "peers": torch.tensor([other]), "peer_counts": torch.tensor([1]),
                "receive": torch.tensor([True])}
        return encode("fedgcn.secure_upload", {"session": session, "plan": plan}).to_bytes()

    step("row_twice_plan", "fedgcn.secure_upload", "pretrain", each(crafted))
    step("replayed_hello", "party.hello", "setup", each(lambda k: hellos[nodes[k]]))
    step("replayed_setup", "party.setup", "setup", setups)
    big = torch.zeros((1 << 17, 2), dtype=torch.float64)  # 2 MiB of values, over --max-message-mb 1
    step("over_cap", "fedgcn.secure_receive", "pretrain", each(
        lambda k: encode("fedgcn.secure_receive", {"session": session, "sums": big}).to_bytes()))
    Path(job["out"]).write_text(json.dumps(report))
'''

ATTACKS = {  # step -> what every party's one-line refusal names
    "weaker_setup": "the run asks for secure_sum 'none'",
    "fedgcn.partial_sums": "its policy does not take 'plaintext-sums' steps",
    "fedgcn.announce_rows": "its policy does not take 'plaintext-sums' steps",
    "fedgcn.block_sums": "its policy does not take 'plaintext-sums' steps",
    "row_twice_plan": "the secure upload plan lists a row more than once",
    "replayed_hello": "already said hello",
    "replayed_setup": "'party.setup' is out of order (state set-up)",
    "over_cap": "(this client's --max-message-mb); refused unread",
}


@pytest.mark.slow
@needs_flwr
def test_a_malicious_serverapp_gets_one_line_refusals_and_no_values(tmp_path: Path) -> None:
    from fedgl.deployment.commands import _flower_bin, _flower_env, write_app
    from fedgl.deployment.loopback import Loopback
    from tests.flower_helpers import RUN

    clients = len(MODES)
    write_keys(tmp_path / "keys", clients)
    for k, mode in enumerate(MODES):
        write_shard(tiny_shard(k), tmp_path / "shards")
        (tmp_path / f"policy-{k}.yaml").write_text(   # the mode alone, nothing else required
            f"secure_sum: {mode}\nadjacency_check: node\nmin_contributors: 1\n"
            "feature_bound: none\nsecure_models: false\n")
    app = write_app(tmp_path / "app", serverapp="malicious_server:app",
                    config_key="attack-job", name="fedgl-malicious")
    (app / "malicious_server.py").write_text(MALICIOUS)
    report = tmp_path / "report.json"
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"roster": str(tmp_path / "keys" / "roster.json"),
                               "modes": list(MODES), "out": str(report),
                               "run": {**RUN, "clients": clients}}))
    with Loopback(tmp_path / "fed", tmp_path / "shards", tmp_path / "keys", clients,
                  ["--policy", str(tmp_path / "policy-{k}.yaml"), "--max-message-mb", "1"]
                  ) as fed:
        home = tmp_path / "control-home"
        home.mkdir()
        (home / "config.toml").write_text(f'[superlink]\ndefault = "fedgl"\n\n'
                                          f'[superlink.fedgl]\naddress = "{fed.address}"\n'
                                          "insecure = true\n")
        done = subprocess.run([_flower_bin("flwr"), "run", str(app), "fedgl", "--stream",
                               "--run-config", f'attack-job="{job}"'], env=_flower_env(home),
                              capture_output=True, text=True, timeout=400, check=False)
        logs = {k: (fed.folder / f"client-{k}.log").read_text() for k in range(clients)}
    assert report.is_file(), (done.stdout[-2000:], done.stderr[-1000:])
    got = json.loads(report.read_text())
    ids = [str(k) for k in range(clients)]
    assert got["proved"] == list(range(clients))
    # the honest steps are answered: the set-up (no DP release logged), the session's keys and
    # row announcement (ids, counts, degrees: no feature value)
    for k in ids:
        assert got["honest_setup"][k] == {"refused": None, "body": True}
        reply = got["honest_setup_replies"][k]
        # ... with the role's public facts (sizes and widths, no value)
        assert {**reply, "facts": None} == {"ok": True, "dp_releases": [], "facts": None}
        assert sorted(reply["facts"]) == ["num_classes", "num_features", "num_nodes", "setting"]
        assert reply["facts"] == {"setting": "horizontal", "num_nodes": 3, "num_features": 4,
                                  "num_classes": 2}   # tests.flower_helpers.tiny_shard's
        assert got["privacy_hello"][k]["refused"] is None
        assert got["privacy_hello_fields"][k] == ["adv", "degrees", "ids", "num_requested"]
    # every attack: each party refuses in one line, and the reply carries no fedgl body
    for name, needle in ATTACKS.items():
        for k in ids:
            row = got[name][k]
            assert row["body"] is False and not row.get("silent"), (name, k, row)
            line = row["refused"]
            assert line and "\n" not in line and needle in line, (name, k, line)
            assert line.startswith(f"client {k}"), (name, line)
    # the weaker set-up names the party's own mode; the party logged every refusal
    assert f"this client runs {MODES[2]!r}" in got["weaker_setup"]["2"]["refused"]
    for k in range(clients):
        lines = logs[k].splitlines()
        assert sum(line.startswith("refused: ") for line in lines) == len(ATTACKS), \
            logs[k][-3000:]
        # and the relay's line for each message it answered names the refusal too
        assert sum(line.startswith("fedgl relay: ") and "; refused: " in line
                   for line in lines) == len(ATTACKS), logs[k][-3000:]
