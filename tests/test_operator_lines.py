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
