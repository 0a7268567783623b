"""``fedgl gate``: the organisations reach the SuperLink's Fleet API and nothing else (Flower 1.42
serves its Control API, ``flwr run`` included, on the same port)."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from fedgl.deployment.fleet_gate import allowed, contexts, refusal_line
from fedgl.errors import ConfigError
from tests.flower_helpers import PLAINTEXT, RUN, needs_flwr, server_cmd, write_deployment_files


@pytest.mark.parametrize("method,target,ok", [
    (b"POST", b"/v1/fleet/pull-messages", True),
    (b"POST", b"/v1/fleet/push-object?x=1", True),
    (b"POST", b"/v1/control/start-run", False),        # flwr run
    (b"POST", b"/v1/control/list-runs", False),        # flwr ls
    (b"POST", b"/v1/runtime/pull-app-inputs", False),  # the ServerApps' API
    (b"GET", b"/v1/fleet/pull-messages", False),
    (b"POST", b"/v1/fleet/../control/start-run", False),
    (b"GET", b"/health", False),
])
def test_only_the_fleet_api_goes_through(method: bytes, target: bytes, ok: bool) -> None:
    assert allowed(method, target) is ok
    line = refusal_line("10.0.0.5:4242", method, target)
    assert "\n" not in line and "10.0.0.5:4242" in line


def test_the_gate_needs_its_certificates_or_insecure(tmp_path: Path) -> None:
    def args(**kw):
        base = {"insecure": False, "root_certificates": None, "ssl_certfile": None,
                "ssl_keyfile": None}
        return argparse.Namespace(**{**base, **kw})

    with pytest.raises(ConfigError, match="--root-certificates, --ssl-certfile, --ssl-keyfile"):
        contexts(args())
    with pytest.raises(ConfigError, match="drop the certificate flags"):
        contexts(args(insecure=True, ssl_certfile="x.pem"))
    with pytest.raises(ConfigError, match="does not exist"):
        contexts(args(root_certificates=str(tmp_path / "ca.pem"), ssl_certfile="a",
                      ssl_keyfile="b"))
    assert contexts(args(insecure=True)) == (None, None)


@needs_flwr
def test_organisations_run_through_the_gate_and_cannot_submit(tmp_path: Path,
                                                              data_root: Path) -> None:
    """A SuperLink on 127.0.0.1 behind ``fedgl gate`` (TLS both ways): the clients' SuperNodes
    join and serve a run through the gate; ``flwr ls`` (and so ``flwr run``) through the gate
    is refused with one line at the gate, while on the coordinator's machine it works."""
    from fedgl.deployment.loopback import Loopback

    root = write_deployment_files(tmp_path)
    out = root / "out-gate"
    keys = {**RUN, "rounds": 1}
    with Loopback(root / "fed-gate", root / "shards", root / "keys", 3, PLAINTEXT, tls=True,
                  gate=True) as fed:
        assert fed.client_address != fed.address
        outside = fed.flwr("ls", "fedgl", address=fed.client_address)
        inside = fed.flwr("ls", "fedgl")
        proc = subprocess.run(server_cmd(root, fed, out, keys), capture_output=True,
                              text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "result.json").is_file()
    assert outside.returncode != 0 and inside.returncode == 0, (outside.stdout[-500:],
                                                                inside.stdout[-500:])
    gate_log = (root / "fed-gate" / "gate.log").read_text()
    assert "fedgl gate: refused POST /v1/control/list-runs" in gate_log, gate_log[-1000:]
    assert "/v1/fleet/" not in gate_log   # the SuperNodes' requests went through, unlogged
    said = (root / "fed-gate" / "client-0.log").read_text()
    assert "finished after round 1" in said, said[-1000:]
