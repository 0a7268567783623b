"""Bad privacy options: one-line ConfigErrors naming the fix, exit code 2 through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedgl.config import Config
from fedgl.errors import ConfigError
from tests import _cli_helpers
from tests._cli_helpers import TINY, assert_user_error

cli_fixture = _cli_helpers.cli_fixture  # the `cli` fixture

BAD = [
    ({"secure_sum": "foo"}, ["secure_sum", "mask", "he"]),
    ({"secure_sum": "Mask"}, ["secure_sum", "did you mean"]),
    ({"dp_epsilon": 0}, ["dp_epsilon", "> 0"]),
    ({"dp_epsilon": -1.0}, ["dp_epsilon", "> 0"]),
    ({"dp_epsilon": 1.0, "dp_delta": 0}, ["dp_delta", "(0, 1)"]),
    ({"dp_epsilon": 1.0, "dp_delta": 1.5}, ["dp_delta", "(0, 1)"]),
    ({"dp_epsilon": 1.0, "dp_clip": 0}, ["dp_clip", "> 0"]),
    ({"min_contributors": 0}, ["min_contributors", ">= 1"]),
    ({"secure_sum": "he", "he_poly_degree": 3000}, ["he_poly_degree", "power of two"]),
    ({"secure_sum": "he", "he_poly_degree": 1024}, ["he_poly_degree", "2048"]),
    ({"secure_sum": "he", "he_poly_degree": 2048}, ["128-bit", "--he-poly-degree 4096"]),
    ({"secure_sum": "he", "he_coeff_bits": "60,60"}, ["109", "--he-poly-degree 8192"]),
    ({"secure_sum": "he", "he_coeff_bits": "60,x"}, ["he_coeff_bits", "60,49"]),
    ({"secure_sum": "he", "he_coeff_bits": "60"}, ["two primes"]),
    ({"secure_sum": "he", "he_coeff_bits": "70,30"}, ["14..60"]),
    ({"secure_sum": "he", "he_scale_bits": 55}, ["he_scale_bits"]),
    ({"secure_sum": "he", "he_pack": 5}, ["he_pack", "1..4"]),
    ({"secure_sum": "he", "he_coeff_bits": "40,40"}, ["he_scale_bits", "--he-scale-bits 20"]),
    ({"secure_sum": "he", "he_pack": 4, "he_coeff_bits": "40,40", "he_scale_bits": 20},
     ["he_pack", "smaller"]),
    ({"secure_sum": "he", "he_key_holder": 10}, ["he_key_holder", "clients"]),
    ({"secure_sum": "he", "hops": 0}, ["--hops 1 or 2"]),
    ({"dp_epsilon": 1.0, "hops": 0}, ["dp_epsilon", "--hops"]),
    ({"min_contributors": 2, "algorithm": "centralized"}, ["fedgcn"]),
    ({"encrypt_models": True}, ["--no-oracle-eval"]),
    ({"encrypt_models": True, "oracle_eval": False, "checkpoint_every": 5}, ["checkpoint"]),
]


@pytest.mark.parametrize(("values", "keywords"),
                         [pytest.param(v, k, id=str(v)) for v, k in BAD])
def test_bad_privacy_config(values, keywords):
    with pytest.raises(ConfigError) as err:
        Config.from_dict(values)
    message = str(err.value)
    assert "\n" not in message
    for word in keywords:
        assert word.lower() in message.lower(), message


def test_good_privacy_configs():
    Config.from_dict({"secure_sum": "he", "he_pack": 3, "min_contributors": 2,
                      "dp_epsilon": 0.5, "encrypt_models": True, "oracle_eval": False})
    Config.from_dict({"secure_sum": "mask", "hops": 1})
    Config.from_dict({"secure_sum": "he", "he_poly_degree": 8192, "he_coeff_bits": "60,40,60"})
    Config.from_dict({"encrypt_models": True, "oracle_eval": False, "hops": 0})


@pytest.mark.parametrize(("args", "keywords"), [
    (["--secure-sum", "foo"], ["secure_sum"]),
    (["--dp-epsilon", "0"], ["dp_epsilon"]),
    (["--min-contributors", "0"], ["min_contributors"]),
    (["--secure-sum", "he", "--he-poly-degree", "1000"], ["power of two"]),
    (["--encrypt-models"], ["--no-oracle-eval"]),
])
def test_cli_rejects_bad_privacy_flags(cli, tmp_path: Path, args, keywords):
    out = tmp_path / "out"
    assert_user_error(cli("run", *TINY, *args, "--out", out), *keywords, out=out)


def test_cli_runs_with_privacy_flags(cli, tmp_path: Path):
    out = tmp_path / "out"
    res = cli("run", *TINY, "--secure-sum", "mask", "--min-contributors", "2",
              "--dp-epsilon", "2", "--out", out)
    assert res.code == 0, res.err
    assert (out / "result.json").is_file()
    assert '"leakage"' in (out / "result.json").read_text()
