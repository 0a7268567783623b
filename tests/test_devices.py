"""``--device cuda`` where no GPU can be used: one clear ConfigError line, not a torch traceback."""

from __future__ import annotations

import pytest
import torch

import fedgl
from fedgl.cli import main
from fedgl.errors import ConfigError
from fedgl.resources import check_device

NO_GPU = not torch.cuda.is_available()


def test_cpu_passes():
    check_device("cpu")


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
@pytest.mark.parametrize("name", ["cuda", "cuda:0"])
def test_cuda_without_gpu_is_one_config_error(name):
    with pytest.raises(ConfigError, match="--device cpu") as err:
        check_device(name)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="--device cpu"):
        fedgl.run(dataset="sbm", sbm_nodes=200, clients=2, rounds=1, device=name, progress=False)


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
def test_cli_cuda_without_gpu(capsys, tmp_path):
    code = main(["run", "--dataset", "sbm", "--sbm-nodes", "200", "--clients", "2", "--rounds", "1",
                 "--device", "cuda", "--no-progress", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "cuda" in err[0] and "--device cpu" in err[0]
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(NO_GPU, reason="needs a GPU")
def test_cuda_runs_end_to_end_on_a_gpu():
    result = fedgl.run(dataset="sbm", sbm_nodes=300, clients=3, rounds=3, device="cuda",
                       progress=False)
    assert 0.0 <= result.mean("test_acc") <= 1.0


def _history_and_bytes(device: str, **kw) -> tuple[list[dict], dict, dict]:
    r = fedgl.run(algorithm="fedgcn", hops=2, dataset="sbm", sbm_nodes=400, clients=4, rounds=4,
                  device=device, progress=False, leakage_report=False, **kw)
    rep = r.repeats[0]
    ledger = {k: v for k, v in rep.ledger.items() if k != "seconds"}   # bytes and messages
    return rep.history, ledger, r.environment


@pytest.mark.skipif(NO_GPU, reason="needs a GPU")
@pytest.mark.parametrize("kw", [{}, {"batch_size": 32, "num_neighbors": "3,5"}],
                            ids=["full-batch", "mini-batch"])
def test_gpu_history_and_ledger_equal_the_cpu(kw):
    """The same bytes and message counts cross the federation boundary on either device, and
    the histories agree within float tolerance; the run records the GPU and its peak memory."""
    cpu_hist, cpu_bytes, cpu_env = _history_and_bytes("cpu", **kw)
    gpu_hist, gpu_bytes, gpu_env = _history_and_bytes("cuda", **kw)
    assert gpu_bytes == cpu_bytes
    assert [h["round"] for h in gpu_hist] == [h["round"] for h in cpu_hist]
    for a, b in zip(cpu_hist, gpu_hist, strict=True):
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4, abs=1e-5)
        if "test_acc" in a:
            assert b["test_acc"] == pytest.approx(a["test_acc"], abs=0.02)
    assert gpu_env["device_name"] and gpu_env["gpu_peak_allocated_mb"] > 0
    assert "device_name" not in cpu_env


def test_cpu_run_records_no_gpu_memory():
    _, _, env = _history_and_bytes("cpu")
    assert env["device"] == "cpu" and "gpu_peak_allocated_mb" not in env
