"""An algorithm's spec says how it deploys (client role, server driver, or why it stays
simulation-only), so ``fedgl/deployment/`` names no algorithm."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedgl.config.registry import (
    _ALIASES,
    AlgorithmSpec,
    algorithm_names,
    deployable_names,
    get_spec,
    load_all,
    load_path,
)
from fedgl.errors import ConfigError

DEPLOYMENT = Path(__file__).resolve().parents[1] / "fedgl" / "deployment"


def test_the_deployment_names_no_algorithm() -> None:
    load_all()
    names = set(algorithm_names()) | set(_ALIASES)
    found = []
    for path in sorted(DEPLOYMENT.glob("*.py")):
        text = path.read_text()
        for name in names:
            if re.search(rf"""["']{re.escape(name)}["']""", text):
                found.append(f"{path.name}: {name!r}")
    assert len(names) > 15   # every built-in and alias was looked for
    assert not found, found


def test_every_builtin_says_how_it_deploys_or_why_not() -> None:
    for spec in load_all():
        if spec.deployable:
            client, driver, server = spec.deployment()
            assert callable(load_path(client))
            assert callable(load_path(server if driver in ("fedavg", "minibatch") else driver))
        else:
            with pytest.raises(ConfigError, match="is simulation-only: ") as err:
                spec.deployment()
            assert "\n" not in str(err.value) and "--runtime local or ray" in str(err.value)
    assert set(deployable_names()) == {"fedgcn", "fedgat", "distgat", "swift-fedgnn", "fedgnn-g",
                                       "local-only", "llcg", "fedgnn-pns", "fedsage-plus",
                                       "glasu"}
    assert get_spec("glasu").shards


def test_a_spec_without_a_deployment_says_so_in_one_line() -> None:
    spec = AlgorithmSpec(name="mine", setting="horizontal", entry="m:f")
    with pytest.raises(ConfigError, match="'mine' does not run deployed on Flower"):
        spec.deployment()


@pytest.mark.parametrize("fields, needle", [
    ({"client": "m:C"}, "both its client and its driver"),
    ({"driver": "fedavg"}, "both its client and its driver"),
    ({"client": "m:C", "driver": "fedavg"}, "needs a server"),
    ({"client": "m:C", "driver": "elsewhere"}, "'module:function'"),
    ({"client": "m:C", "driver": "m:run", "simulation_only": "why"}, "not simulation-only"),
    ({"setting": "vertical", "client": "m:C", "driver": "m:run"}, "shards' writer"),
])
def test_a_spec_that_deploys_halfway_is_refused(fields: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)):
        AlgorithmSpec(**{"name": "mine", "setting": "horizontal", "entry": "m:f", **fields})
