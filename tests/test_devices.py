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
