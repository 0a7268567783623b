"""Only fedgl's code runs on an organisation's machine: the party's socket takes requests only
from the relay ``fedgl client`` started (its token) and refuses, from the frame's header alone, a
body beyond what the message may carry (crafted frames, no Flower needed); a foreign app submitted
to a loopback federation runs on no SuperNode and reads nothing (slow)."""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fedgl.data.shard_format import write_shard
from fedgl.federation.codec import encode
from fedgl.federation.flower.local_link import TOKEN_KEY, ask, recv_frame
from fedgl.privacy.identity import write_keys
from tests.flower_helpers import needs_flwr, tiny_shard
from tests.test_flower_operations import make_party, send, setup_payload

TOKEN = "ab" * 32


class Serving:
    """``with Serving(party, folder) as path``: the party answers on the Unix socket ``path``
    with the relay token :data:`TOKEN`."""

    def __init__(self, party: Any, folder: Path) -> None:
        self.party, self.path, self.stop = party, folder / "party.sock", threading.Event()
        self.thread = threading.Thread(target=party.serve, args=(self.path, self.stop, TOKEN),
                                       daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.path.exists():
            assert time.monotonic() < deadline, "the party did not listen"
            time.sleep(0.01)
        return str(self.path)

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def declare(path: str, header: dict[str, Any], length: int) -> dict[str, Any]:
    """Send a frame's header declaring a ``length``-byte body and no body at all; the reply
    header (it can only come from a party that did not wait for the body)."""
    head = json.dumps(header).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(struct.pack("<I", len(head)) + head + struct.pack("<Q", length))
        reply, body = recv_frame(sock)
    assert body == b""
    return reply


def message_header(msg_type: str, phase: str = "setup", **extra: Any) -> dict[str, Any]:
    return {"op": "message", "type": msg_type, "phase": phase, "node_id": 2, "run_id": 7,
            TOKEN_KEY: TOKEN, **extra}


@needs_flwr
def test_a_body_beyond_the_set_up_limit_is_refused_unread(tmp_path: Path) -> None:
    from fedgl.deployment.party import SETUP_MAX_BODY

    party = make_party(tmp_path)
    with Serving(party, tmp_path) as path:
        # 16 GiB declared, nothing sent: the refusal comes back at once
        reply = declare(path, message_header("party.hello"), 16 << 30)
        assert reply["refused"] == (f"client 1: a {16 << 30}-byte body for 'party.hello' is over "
                                    f"{SETUP_MAX_BODY} bytes (the set-up messages' limit); "
                                    "refused unread")
        # before set-up every type has the set-up limit, whatever the header names
        reply = declare(path, message_header("fedgcn.partial_sums", "pretrain"),
                        SETUP_MAX_BODY + 1)
        assert "over 1048576 bytes (the set-up messages' limit)" in reply["refused"]
        reply = declare(path, message_header(["not", "a", "name"]), 16 << 30)
        assert "body for None is over 1048576 bytes" in reply["refused"]
        # the relay's ask sends the body: the party stops reading and its refusal still arrives
        head, body = ask(path, message_header("party.hello"), b"\0" * (SETUP_MAX_BODY + 1))
        assert "refused unread" in head["refused"] and body == b""
        # an honest hello over the same socket is answered
        head, body = ask(path, message_header("party.hello"),
                         encode("party.hello", {"challenge": b"\1" * 32}).to_bytes())
        assert "refused" not in head and body
    assert len(party.refused) == 4 and all("\n" not in line for line in party.refused)
    assert party.protocol_state == "greeted"


@needs_flwr
def test_after_set_up_the_organisations_cap_bounds_every_message(tmp_path: Path) -> None:
    party = make_party(tmp_path, max_message_bytes=4096)
    send(party, "party.hello", {"challenge": b"\2" * 32})
    send(party, "party.setup", setup_payload())
    assert party.protocol_state == "set-up"
    with Serving(party, tmp_path) as path:
        reply = declare(path, message_header("fedgcn.announce_rows", "pretrain"), 4097)
        assert reply["refused"] == ("client 1: a 4097-byte body for 'fedgcn.announce_rows' is "
                                    "over 4096 bytes (this client's --max-message-mb); refused "
                                    "unread")
        # the set-up messages keep their own limit after set-up
        reply = declare(path, message_header("party.hello"), (1 << 20) + 1)
        assert "(the set-up messages' limit)" in reply["refused"]
        head, body = ask(path, message_header("fedgcn.announce_rows", "pretrain"),
                         encode("fedgcn.announce_rows", {}).to_bytes())
        assert "refused" not in head and body
    assert len(party.refused) == 2


@needs_flwr
def test_only_the_relay_with_the_token_is_answered(tmp_path: Path) -> None:
    party = make_party(tmp_path)
    with Serving(party, tmp_path) as path:
        for header in ({"op": "types"}, {"op": "types", TOKEN_KEY: "cd" * 32},
                       {"op": "types", TOKEN_KEY: "\u00e9"}, {"op": "types", TOKEN_KEY: 5}):
            head, _ = ask(path, header)
            assert head == {"refused": "client 1: a request without this party's relay token "
                                       "(only the relay that `fedgl client` started may ask)"}
        # refused from the header: a declared body is never read
        assert "relay token" in declare(path, message_header("party.hello", relay_token="x"),
                                        16 << 30)["refused"]
        head, _ = ask(path, {"op": "types", TOKEN_KEY: TOKEN})
        # before a set-up the party serves only the word that a run did not admit it
        assert head == {"types": {"party.not_admitted": ["setup"]}}
    assert party.protocol_state == "new" and len(party.refused) == 5


@needs_flwr
def test_an_unreadable_or_oversized_header_is_refused_in_one_line(tmp_path: Path) -> None:
    party = make_party(tmp_path)
    with Serving(party, tmp_path) as path:
        for head in (b"[" * 200_000 + b"]" * 200_000, b"\xff\xfe", b"[1, 2]"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(10)
                sock.connect(path)
                sock.sendall(struct.pack("<I", len(head)) + head + struct.pack("<Q", 16 << 30))
                reply, _ = recv_frame(sock)
            assert reply["refused"] in ("client 1: unreadable frame header",
                                        "client 1: frame header is not a record"), reply
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:   # 4 GiB declared
            sock.settimeout(10)
            sock.connect(path)
            sock.sendall(struct.pack("<I", (1 << 32) - 1))
            reply, _ = recv_frame(sock)
        assert reply["refused"] == "client 1: the frame header is 4294967295 bytes, over 1048576"
    assert len(party.refused) == 4


@needs_flwr
def test_the_body_must_be_the_type_flower_carried(tmp_path: Path) -> None:
    party = make_party(tmp_path)
    body = encode("party.hello", {"challenge": b"\3" * 32}).to_bytes()
    head, _ = party.answer(message_header("fedgcn.announce_rows"), body)
    assert head["refused"].endswith("refused a message: 'party.hello' came as Flower message "
                                    "type 'fedgcn.announce_rows'")
    assert party.protocol_state == "new"


@needs_flwr
def test_another_flower_version_gets_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    from fedgl.federation.flower.relay_runner import flwr_version_line

    for installed, line in (("1.42.0", None), ("1.42.7", None), (
            "1.43.0", "fedgl's relay runner was tested with flwr >=1.42,<1.43; flwr 1.43.0 is "
                      "installed: its task API may differ (pip install 'flwr>=1.42,<1.43')"),
            ("1.41.2", "flwr 1.41.2 is installed")):
        monkeypatch.setattr(importlib.metadata, "version", lambda _name, v=installed: v)
        got = flwr_version_line()
        assert got == line if line is None or installed == "1.43.0" else line in got


# ---------------------------------------------------------------------- a foreign app
FOREIGN_APP = '''"""A foreign Flower app (written by tests/test_flower_relay.py): its ClientApp
looks for `fedgl client` processes, reads the files named by their --key and --data flags and
sends what it read back; its ServerApp asks every SuperNode and writes the replies down."""
import json
import os
import time
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

app = ServerApp()
client = ClientApp()


def loot() -> dict:
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            argv = [a.decode(errors="replace")
                    for a in (proc / "cmdline").read_bytes().split(b"\\0")]
        except OSError:
            continue
        for flag in ("--key", "--data"):
            if flag in argv[:-1]:
                path = argv[argv.index(flag) + 1]
                try:
                    found[path] = Path(path).read_text()[:400]
                except OSError as exc:
                    found[path] = f"unreadable: {exc}"
    return found


@client.query()
def steal(message: Message, context: Context) -> Message:
    folder = Path(context.run_config["marker"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"ran-{os.getpid()}").write_text(json.dumps(loot()))
    return Message(RecordDict({"loot": ConfigRecord({"found": json.dumps(loot())})}),
                   reply_to=message)


@app.main()
def main(grid: Grid, context: Context) -> None:
    want = int(context.run_config["nodes"])
    deadline = time.time() + 120
    nodes = []
    while len(nodes) < want and time.time() < deadline:
        nodes = list(grid.get_node_ids())
        time.sleep(0.5)
    asks = [Message(RecordDict({"ask": ConfigRecord({"x": 1})}), dst_node_id=n,
                    message_type="query") for n in nodes]
    replies = list(grid.send_and_receive(asks, timeout=120))
    report = {"nodes": len(nodes), "replies": [
        {"error": r.error.reason if r.has_error() else None,
         "found": (r.content.config_records["loot"]["found"]
                   if r.has_content() and "loot" in r.content.config_records else None)}
        for r in replies]}
    Path(context.run_config["report"]).write_text(json.dumps(report))
'''

FOREIGN_TOML = '''[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "foreign"
version = "1.0.0"
description = "not fedgl"
license = "MIT"
dependencies = []

[tool.flwr.app]
publisher = "mallory"

[tool.flwr.app.components]
serverapp = "foreign_app:app"
clientapp = "foreign_app:client"

[tool.flwr.app.config]
marker = ""
report = ""
nodes = 0
'''


@pytest.mark.slow
@needs_flwr
def test_a_foreign_clientapp_runs_on_no_supernode_and_reads_nothing(tmp_path: Path) -> None:
    """Anyone with the SuperLink's address and CA submits their own app with ``flwr run`` to a
    federation of ``fedgl client`` processes (TLS, SuperNode authentication): its ClientApp
    never runs; each SuperNode answers with fedgl's relay, which has no handler for it."""
    from fedgl.deployment.loopback import Loopback

    clients = 2
    write_keys(tmp_path / "keys", clients)
    for k in range(clients):
        write_shard(tiny_shard(k), tmp_path / "shards")
    app = tmp_path / "foreign"
    app.mkdir()
    (app / "pyproject.toml").write_text(FOREIGN_TOML)
    (app / "foreign_app.py").write_text(FOREIGN_APP)
    marker, report = tmp_path / "marker", tmp_path / "report.json"
    with Loopback(tmp_path / "fed", tmp_path / "shards", tmp_path / "keys", clients, tls=True,
                  supernode_auth=True) as fed:
        done = fed.flwr("run", str(app), "fedgl", "--stream", "--run-config",
                        f'marker="{marker}" report="{report}" nodes={clients}')
        logs = {k: (fed.folder / f"client-{k}.log").read_text() for k in range(clients)}
    assert report.is_file(), (done.stdout[-1500:], done.stderr[-1500:])
    result = json.loads(report.read_text())
    assert not marker.exists()   # the foreign ClientApp ran nowhere
    assert result["nodes"] == clients and len(result["replies"]) == clients
    for reply in result["replies"]:   # fedgl's relay answered: no handler for the foreign type
        assert reply["found"] is None
        assert "No query function registered with name 'default'" in reply["error"]
    for log in logs.values():   # each client's relay answered the foreign run's message
        assert re.search(r"fedgl relay: run \d+: 'query' 0 bytes in, 0 bytes out, [\d.]+ s; "
                         r"fedgl's relay: ValueError: No query function registered", log), \
            log[-2000:]


@needs_flwr
@pytest.mark.parametrize("size", ["0", "-3", "nan", "inf"])
def test_a_bad_message_cap_is_refused_in_one_line(size: str,
                                                  capsys: pytest.CaptureFixture) -> None:
    from fedgl.cli import main

    assert main(["client", "--superlink", "127.0.0.1:9", "--data", "x", "--key", "y",
                 "--roster", "z", "--insecure", "--max-message-mb", size]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"fedgl: error: --max-message-mb {float(size):g} must be a positive size in "
                   "MiB below 2^24, e.g. 1024")


def test_the_party_socket_appears_only_once_it_listens(tmp_path: Path) -> None:
    """The socket is bound under a temporary name and renamed when it listens: whoever waits
    for the file can connect at once (mode 0600, nothing left under the temporary name)."""
    import os
    import stat

    from fedgl.deployment.party import _listening_socket

    path = str(tmp_path / "party.sock")
    server = _listening_socket(path)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert not os.path.exists(path + "~")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(path)
    finally:
        server.close()
