"""docs/deployment.md's commands are the commands' own: every ``fedgl ...`` and
``flower-superlink ...`` line of its shell blocks parses with that command's parser (a renamed
or removed flag fails here), and its run configuration is a valid one."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "deployment.md"


def shell_commands(text: str) -> list[list[str]]:
    """The commands of the ```bash blocks: continuation lines joined, comments, a trailing
    ``&`` and optional ``[...]`` brackets dropped, ``&&`` chains and ``for ...; do`` split."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"\[(--[^\]]+)\]", r"\1", line)
            for part in re.split(r"&&|;", line):
                words = shlex.split(part, comments=True)
                if words and words[-1] == "&":
                    words = words[:-1]
                if words and words[0] in ("fedgl", "flower-superlink"):
                    commands.append(words)
    return commands


def test_every_fedgl_command_of_the_page_parses() -> None:
    from fedgl.cli import build_parser

    commands = shell_commands(DOC.read_text())
    seen = set()
    for words in commands:
        if words[0] == "flower-superlink":
            pytest.importorskip("flwr")
            from flwr.superlink.cli.flower_superlink import _parse_args_run_superlink

            _, unknown = _parse_args_run_superlink().parse_known_args(words[1:])
        else:
            args, unknown = build_parser(run_flags=words[1] == "run").parse_known_args(words[1:])
            assert args.command == words[1], words
        assert unknown == [], (words, unknown)
        seen.add(" ".join(words[:2]))
    # the walk-through's steps, each at least once
    assert {"fedgl key", "fedgl roster", "fedgl shard", "fedgl certs", "flower-superlink --ssl-ca-certfile",
            "fedgl gate", "fedgl client", "fedgl server", "fedgl keys"} <= seen, seen


def test_the_run_configuration_of_the_page_meets_the_default_and_the_example_policy() -> None:
    """Step 7's run.yaml validates, and neither a client with no policy flags (the protective
    defaults) nor one with deploy/systemd/policy.yaml (the page's example policy) refuses it;
    nor the systemd trial's run."""
    import yaml

    from fedgl.api import as_config
    from fedgl.cli import build_parser
    from fedgl.deployment.client_policy import policy_from_args

    block = re.search(r"```yaml\n(algorithm: fedgcn.*?)```", DOC.read_text(), flags=re.S)
    assert block is not None
    trial = DOC.parents[1] / "deploy" / "systemd"
    runs = [as_config(**yaml.safe_load(block.group(1))),
            as_config(**yaml.safe_load((trial / "trial.yaml").read_text()))]
    base = ["client", "--superlink", "127.0.0.1:9092", "--data", "d.json", "--key", "k",
            "--roster", "r.json", "--insecure"]
    for extra in ([], ["--policy", str(trial / "policy.yaml")]):
        args = build_parser(run_flags=False).parse_args(base + extra)
        policy = policy_from_args(args)
        assert policy.secure_sum == "robust" and policy.adjacency_check == "edge"
        for cfg in runs:
            assert policy.weaker(cfg) is None, (extra, policy.weaker(cfg))
