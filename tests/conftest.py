"""Shared fixtures. Tests never download: FEDGL_OFFLINE is set for the whole session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("FEDGL_OFFLINE", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# input-record stamps (fedgl.privacy.inputs) go to a folder of this session, not the home folder
os.environ.setdefault("FEDGL_STAMP_DIR", __import__("tempfile").mkdtemp(prefix="fedgl-stamps-"))
# leakage reports are computed, not read from the user's disk store (tests/test_leakage_store.py
# turns the store on in a temporary folder)
os.environ.setdefault("FEDGL_LEAKAGE_CACHE", "off")
# The README's command gives a relative data root (FEDGL_DATA=../shared/data); some tests change
# into a temporary folder, and subprocesses and Ray actors start elsewhere, so resolve it once,
# against the folder pytest started in, before any test runs.
if os.environ.get("FEDGL_DATA"):
    os.environ["FEDGL_DATA"] = str(Path(os.environ["FEDGL_DATA"]).expanduser().absolute())

# Tiny graphs: one thread is as fast and avoids oversubscribing CI's two cores.
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]


def shared_data_root() -> Path:
    """$FEDGL_DATA (made absolute at session start), else ../shared/data beside the checkout."""
    env = os.environ.get("FEDGL_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The real-data root (../shared/data or $FEDGL_DATA); skips when Cora is absent."""
    root = shared_data_root()
    if not (root / "Cora" / "raw" / "ind.cora.x").is_file():
        pytest.skip(f"real datasets not found under {root} (set FEDGL_DATA to ../shared/data)")
    return root


@pytest.fixture(scope="module")
def local_ray():
    """A Ray instance on 127.0.0.1 for one test module; fedgl runs join it (and leave it up)."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(_node_ip_address="127.0.0.1", num_cpus=2, include_dashboard=False,
             log_to_driver=False)
    yield ray
    ray.shutdown()
