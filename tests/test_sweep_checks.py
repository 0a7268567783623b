"""fedgl sweep refuses what would run silently wrong: a key no cell reads, and an --only filter
that names a key no cell sets or matches no cell."""

from __future__ import annotations

import pytest
import yaml

from fedgl.errors import ConfigError
from fedgl.sweep import expand, parse_only, select
from tests._cli_helpers import cli_fixture  # noqa: F401 - the `cli` fixture

BASE = {"dataset": "sbm", "sbm_nodes": 60, "sbm_features": 8, "rounds": 1, "clients": 2,
        "min_client_size": 1, "oracle_eval": False}


def test_a_grid_key_no_algorithm_of_the_grid_reads_is_refused():
    spec = {"base": BASE, "grid": {"algorithm": ["fedgcn", "glasu"], "degree": [4, 8]}}
    with pytest.raises(ConfigError, match="grid key 'degree' is read by no cell.*only fedgat "
                                          "reads it; add fedgat"):
        expand(spec)


def test_a_base_key_no_algorithm_reads_is_refused():
    spec = {"base": {"dataset": "sbm", "rounds": 1, "hops": 1}, "grid": {"algorithm": ["glasu"]}}
    with pytest.raises(ConfigError, match="base key 'hops' is read by no cell.*only fedgcn"):
        expand(spec)
    # a common key the (vertical) algorithm ignores
    spec = {"base": {"dataset": "sbm", "min_client_size": 1}, "grid": {"algorithm": ["glasu"]}}
    with pytest.raises(ConfigError, match="base key 'min_client_size' is read by no cell"):
        expand(spec)


def test_a_partition_key_no_cells_partition_reads_is_refused():
    spec = {"base": {**BASE, "partition": "iid"}, "grid": {"beta": [1, 100]}}
    with pytest.raises(ConfigError, match="'beta' is read by no cell.*dirichlet partition only"):
        expand(spec)


def test_a_key_read_by_some_cells_multiplies_only_those():
    spec = {"base": BASE, "grid": {"partition": ["dirichlet", "iid"], "beta": [1, 100]}}
    cells = expand(spec)
    assert sorted(str(c.values) for c in cells) == sorted(
        [str({"partition": "dirichlet", "beta": 1}), str({"partition": "dirichlet", "beta": 100}),
         str({"partition": "iid"})])
    assert all("beta" not in c.config for c in cells if c.config["partition"] == "iid")


@pytest.mark.parametrize("only,message", [
    ("algoritm=fedgcn", "--only key 'algoritm' is not set by any cell of the sweep \\(did you "
                        "mean 'algorithm'\\?\\)"),
    ("lr=0.1", "--only key 'lr' is not set by any cell"),
    ("algorithm=fedgnc", "matches no cell of the sweep \\(the cells have algorithm: bns-gcn, "
                         "fedgcn\\)"),
    ("hops=1", "matches no cell.*hops: 0, 2"),
])
def test_only_filters_that_select_nothing_are_refused(only, message):
    cells = expand({"base": BASE, "grid": {"algorithm": ["fedgcn", "bns-gcn"], "hops": [0, 2]}})
    with pytest.raises(ConfigError, match=message):
        select(cells, parse_only(only))


def test_only_selects_the_matching_cells():
    cells = expand({"base": BASE, "grid": {"algorithm": ["fedgcn", "bns-gcn"], "hops": [0, 2]}})
    chosen = select(cells, parse_only("algorithm=fedgcn,hops=2|0"))
    assert sorted(c.config["hops"] for c in chosen) == [0, 2]
    assert {c.config["algorithm"] for c in chosen} == {"fedgcn"}


@pytest.mark.parametrize("grid,only,message", [
    ({"algorithm": ["fedgcn", "glasu"], "degree": [4, 8]}, None, "grid key 'degree'"),
    ({"algorithm": ["fedgcn"], "seed": [0]}, "algoritm=fedgcn", "did you mean 'algorithm'"),
])
def test_cli_one_line_error_and_nothing_run(cli, tmp_path, grid, only, message):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base": BASE, "grid": grid}))
    out = tmp_path / "out"
    args = ["sweep", path, "--out", out] + (["--only", only] if only else [])
    res = cli(*args)
    assert res.code == 2
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedgl: error: ") and message in lines[0]
    assert "Traceback" not in res.err
    assert not out.exists()
