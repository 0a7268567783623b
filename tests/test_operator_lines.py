"""One clear line for an operator's mistakes: a policy file's YAML error names the line to fix,
the dropped-client message fits ``--on-client-failure``, ``fedgl client --help`` names the node
key's format as the docs do."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from fedgl.errors import ConfigError
from fedgl.privacy.policy import load_policy


@pytest.mark.parametrize("text,line", [
    ("secure_sum: robust\nmin_contributors 3\ndp_epsilon: 1\n", 2),    # a key without ':'
    ("secure_sum: 'robust\nmin_contributors: 3\n", 1),                  # an unclosed quote
    ("algorithms: [fedgcn, glasu\nmin_contributors: 3\n", 1),           # an unclosed bracket
    ("secure_sum: robust\n\tmin_contributors: 3\n", 2),                 # a tab
    ("secure_sum: robust: mask\nmin_contributors: 3\n", 1),             # a second ':'
])
def test_a_policy_yaml_error_names_the_line_to_fix(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_policy(path)
    message = str(err.value)
    assert "\n" not in message and f"not valid YAML at line {line} (" in message, message


def test_the_dropped_client_line_does_not_advise_drop_under_drop() -> None:
    from fedgl.federation.flower.runtime import NODE_UNAVAILABLE, _flower_failure

    reply = SimpleNamespace(error=SimpleNamespace(code=NODE_UNAVAILABLE))
    aborting = _flower_failure(reply, "", 12.0)
    dropping = _flower_failure(reply, "", 12.0, dropping=True)
    assert "--on-client-failure drop" in aborting
    assert "--on-client-failure drop" not in dropping and "goes on without it" in dropping


def test_client_help_says_the_auth_key_is_an_openssh_key(capsys: pytest.CaptureFixture) -> None:
    from fedgl.cli import main

    with pytest.raises(SystemExit):
        main(["client", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--auth-key NODE_KEY" in help_text and "OpenSSH" in help_text
    assert "PEM" not in help_text.split("--auth-key", 1)[1].split("--", 1)[0]


FLOWER_LINES = [
    "\x1b[92mINFO \x1b[0m:      Starting Flower SuperNode",
    "INFO:     Started server process [21692]",
    "\x1b[92mINFO \x1b[0m:      Receiving: query.party__hello message (ID: 9c00)",
    "\x1b[92mINFO \x1b[0m:      ",
]
RELAY = ("fedgl relay: run 1665: 'query.party__hello' 112 bytes in, 166 bytes out, 0.020 s")
TRACEBACK = ["Traceback (most recent call last):",
             '  File "x.py", line 1, in <module>',
             "    raise SystemExit(1)",
             "SystemExit: 1"]


def _sorted_lines(verbose: bool, lines: list[str]) -> tuple[list[str], list[str], list[str]]:
    import io

    from fedgl.deployment.client_log import SupernodeLines

    shown: list[str] = []
    events: list[str] = []
    log = io.StringIO()
    sorter = SupernodeLines(log, verbose, show=shown.append, on_event=events.append)
    sorter.pump(io.StringIO("".join(line + "\n" for line in lines)))
    return shown, log.getvalue().splitlines(), events


def test_the_client_shows_fedgl_lines_and_logs_everything() -> None:
    """Quiet by default: one line per exchange at the terminal, Flower's lines and a SuperNode's
    traceback (Ctrl-C) in the log file only; with --verbose, everything."""
    lines = [*FLOWER_LINES, RELAY, *TRACEBACK, "refused: 'x' is not accepted"]
    shown, logged, events = _sorted_lines(False, lines)
    assert shown == [RELAY, "refused: 'x' is not accepted"]
    assert logged == lines and events == []
    shown, _, _ = _sorted_lines(True, lines)
    assert shown == lines


def test_a_supernode_that_gives_up_or_is_not_activated_is_an_event() -> None:
    from fedgl.deployment.client_log import GAVE_UP, NOT_ACTIVATED, gave_up_line, not_activated_line

    gave_up = "\x1b[93mWARNING \x1b[0m:   Giving up reconnection after 601.33 seconds and 12 tries."
    refused = ["\x1b[91mERROR \x1b[0m:     Exit Code: 305",
               "Failed to initialize the connection to the SuperLink.",
               "[code: 2004] Failed to activate SuperNode.", "",
               "For more information, visit: <https://flower.ai/docs/framework/1.42/en/305.html>"]
    shown, _, events = _sorted_lines(False, [gave_up, gave_up, *refused, RELAY])
    assert shown == [RELAY] and events == [GAVE_UP, NOT_ACTIVATED]
    for line in (gave_up_line(2, Path("c.log")), not_activated_line(2, Path("c.log"))):
        assert "\n" not in line and "client 2" in line and "c.log" in line
    assert "same node key is already connected" in not_activated_line(2, None)


def test_the_client_log_file_sits_in_the_organisations_folder(tmp_path: Path) -> None:
    from fedgl.deployment.commands import client_log_path

    party = SimpleNamespace(client_id=3, manifest={"_path": str(tmp_path / "s" / "client-3.json")})
    args = SimpleNamespace(client_log=None, state_dir=None)
    assert client_log_path(args, party) == tmp_path / "s" / "client-3.log"
    args.state_dir = str(tmp_path / "state")
    assert client_log_path(args, party) == tmp_path / "state" / "client-3.log"
    args.client_log = str(tmp_path / "mine.log")
    assert client_log_path(args, party) == tmp_path / "mine.log"


def test_the_client_says_each_new_round_once(tmp_path: Path, capsys: pytest.CaptureFixture
                                             ) -> None:
    from tests.test_flower_operations import make_party

    party = make_party(tmp_path)
    party._rounds = 3
    for payload in ({"round": 1}, {"round": 1}, {"weights": {}}, {"round": 2}, [1], {"round": True}):
        party._progress(payload)
    assert capsys.readouterr().out.splitlines() == ["client 1: round 1/3", "client 1: round 2/3"]
