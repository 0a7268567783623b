"""No Python or Ray warning reaches a CLI user: the torch warning of the streamed FedGCN
exchange (a tensor made from a read-only array, as Ray delivers them) is avoided at its cause,
and Ray's token-authentication notice is filtered."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
import torch

from fedgl.algorithms.fedgcn.stream import ServerBlocks
from fedgl.federation.messages import SparseRows
from tests._cli_helpers import run_subprocess


def _read_only(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.setflags(write=False)
    return a


def test_block_replies_from_read_only_uploads_warn_nothing():
    """What the Ray runtime delivers: sparse uploads whose arrays are read-only."""
    announced = {k: {"ids": torch.tensor([0, 1, 2, 3]), "num_requested": torch.tensor(4)}
                 for k in (0, 1)}
    blocks = ServerBlocks(announced, 10)
    dense = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0], [3.0, 0.0]])
    up = SparseRows.from_dense(dense)
    up = SparseRows(_read_only(up.indptr), _read_only(up.indices), _read_only(up.values),
                    up.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        replies = blocks.replies(0, {0: up, 1: up})
    got = replies[0]["sums"]
    got = got.to_dense() if isinstance(got, SparseRows) else torch.as_tensor(got)
    assert torch.equal(got, 2 * dense)


def test_ray_token_notice_is_filtered_and_other_warnings_are_not(caplog):
    from fedgl.federation.ray_quiet import TOKEN_LOGGER, quiet_ray_notices

    quiet_ray_notices()
    quiet_ray_notices()  # idempotent
    logger = logging.getLogger(TOKEN_LOGGER)
    with caplog.at_level(logging.WARNING, logger=TOKEN_LOGGER):
        logger.warning("Token authentication is enabled for this Ray cluster. Set "
                       "RAY_AUTH_MODE=disabled to opt out.")
        logger.warning("Token authentication is disabled")
    assert [r.getMessage() for r in caplog.records] == ["Token authentication is disabled"]


def test_cli_run_stderr_has_no_warning(tmp_path):
    res = run_subprocess("run", "--sbm-nodes", "120", "--clients", "3", "--rounds", "2",
                         "--partition", "iid", "--min-client-size", "1", "--out", tmp_path / "o",
                         env={"PYTHONWARNINGS": ""})  # the filters a user has by default
    assert res.code == 0, res.err
    assert "warning" not in res.err.lower(), res.err


def test_cli_ray_run_stderr_has_no_warning(tmp_path):
    pytest.importorskip("ray")
    res = run_subprocess("run", "--runtime", "ray", "--sbm-nodes", "120", "--clients", "3",
                         "--rounds", "1", "--hops", "2", "--partition", "iid",
                         "--min-client-size", "1", "--no-progress", "--out", tmp_path / "o",
                         env={"RAY_USAGE_STATS_ENABLED": "0", "PYTHONWARNINGS": ""}, timeout=300)
    assert res.code == 0, res.err
    assert "warning" not in res.err.lower(), res.err
