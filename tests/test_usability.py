"""Small promises to a new user: --version, from_pyg, the graph's name recorded, the threads
actually used recorded, a compact GraphData repr, a summary table with the time breakdown."""

from __future__ import annotations

import torch

import fedgl
from fedgl.cli import main


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert capsys.readouterr().out.strip() == f"fedgl {fedgl.__version__}"


def test_from_pyg_with_and_without_masks():
    from torch_geometric.data import Data

    g = fedgl.load_dataset("sbm", nodes=120, features=4, classes=3)
    data = Data(x=g.x, y=g.y.view(-1, 1), edge_index=g.edge_index)
    drawn = fedgl.from_pyg(data, "mine")
    assert drawn.name == "mine" and drawn.num_classes == 3 and int(drawn.train_mask.sum()) > 0
    assert torch.equal(drawn.edge_index, g.edge_index)
    data.train_mask, data.val_mask, data.test_mask = g.train_mask, g.val_mask, g.test_mask
    kept = fedgl.from_pyg(data)
    assert torch.equal(kept.test_mask, g.test_mask) and kept.name == "custom"


def test_passed_graph_name_and_threads_are_recorded():
    g = fedgl.load_dataset("sbm", nodes=80, features=4, classes=3)
    g.name = "my-graph"
    before = torch.get_num_threads()
    res = fedgl.run(graph=g, clients=2, rounds=1, threads=1, progress=False)
    assert res.config["dataset"] == "my-graph"
    assert res.environment["torch_threads"] == 1
    assert torch.get_num_threads() == before


def test_graphdata_repr_is_compact():
    g = fedgl.load_dataset("sbm", nodes=80, features=4, classes=3)
    text = repr(g)
    assert text.startswith("GraphData(name='sbm', x=[80, 4], y=[80], edge_index=[2, ")
    assert len(text) < 200


def test_summary_table_time_breakdown_and_no_std_for_one_repeat(tmp_path, capsys):
    assert main(["run", "--sbm-nodes", "80", "--sbm-features", "4", "--clients", "2",
                 "--rounds", "2", "--no-progress", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "±" not in out
    for label in ("setup", "pre-training", "training", "evaluation", "oracle", "total"):
        assert f"time: {label}" in out
    assert main(["run", "--sbm-nodes", "80", "--sbm-features", "4", "--clients", "2",
                 "--rounds", "2", "--repeats", "2", "--no-progress",
                 "--out", str(tmp_path / "two")]) == 0
    assert "±" in capsys.readouterr().out
