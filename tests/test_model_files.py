"""The model a run leaves: its files, loading them, and scoring each organisation's nodes.

The exact checks: the saved model's predictions are the run's own evaluation (the test accuracy
counted from ``fedgl predict``'s CSVs equals ``result.json``'s, on Cora, for every algorithm that
scores nodes), and the weights load into PyG's own ``GCNConv`` layers, whose accuracy on the whole
graph is the run's oracle score.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest
import torch

import fedgl
from fedgl.errors import FedglError
from fedgl.trained import ModelFileError, ModelTracker, read_model
from tests._cli_helpers import assert_user_error, cli_fixture  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

FAST = {"rounds": 4, "progress": False}


def _csv_test_accuracy(out: Path, graph) -> tuple[float, int]:
    """Test accuracy counted from the CSVs alone: ``id`` is the node index, ``prediction`` the
    class name (Cora's classes are named by their index)."""
    hit = total = rows = 0
    for path in sorted(out.glob("*.csv")):
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                rows += 1
                i = int(row["id"])
                probs = [float(row[f"p_{c}"]) for c in range(graph.num_classes)]
                assert math.isclose(sum(probs), 1.0, rel_tol=1e-4)
                assert probs[int(row["prediction"])] == max(probs)   # the most probable class
                if bool(graph.test_mask[i]):
                    total += 1
                    hit += int(row["prediction"]) == int(graph.y[i])
    return hit / total, rows


@pytest.mark.parametrize("algorithm,extra", [
    ("fedgcn", {"hops": 2}),
    ("fedgcn", {"hops": 1, "secure_sum": "mask"}),
    ("centralized", {}),
    ("fedgat", {}),
    ("distgat", {}),
    ("centralized-gat", {}),
    ("bns-gcn", {}),
    ("distributed-gcn", {}),
    ("fedsage-plus", {"gen_epochs": 1}),
    ("swift-fedgnn", {"rounds": 40, "eval_every": 20}),
    ("fedgnn-g", {"rounds": 6}),
    ("llcg", {"rounds": 6}),
    ("fedgnn-pns", {"rounds": 6}),
    ("local-only", {"rounds": 20, "eval_mode": "local"}),
], ids=lambda v: v if isinstance(v, str) else "-".join(f"{k}={x}" for k, x in v.items()))
def test_predictions_equal_the_runs_evaluation_on_cora(algorithm, extra, data_root, tmp_path, cli):
    out = tmp_path / "run"
    result = fedgl.run(algorithm=algorithm, dataset="cora", data_root=str(data_root),
                       out=str(out), **{**FAST, **extra})
    res = cli("predict", "--model", out / "model", "--out", tmp_path / "scores",
              "--data-root", data_root)
    assert res.code == 0, res.err
    graph = fedgl.load_graph(fedgl.as_config(dataset="cora", data_root=str(data_root)))
    acc, rows = _csv_test_accuracy(tmp_path / "scores", graph)
    assert rows == graph.num_nodes      # every node scored once, by its own organisation
    assert acc == pytest.approx(result.mean("test_acc"), abs=1e-12)
    summary = json.loads((tmp_path / "scores" / "prediction.json").read_text())
    card = json.loads((out / "model" / "model.json").read_text())
    assert summary["model_sha256"] == card["sha256"]
    assert card["algorithm"] == algorithm and card["metrics"]["final"]["test_acc"] == \
        pytest.approx(result.mean("test_acc"))


def test_the_card_says_what_the_model_is(data_root, tmp_path):
    out = tmp_path / "run"
    fedgl.run(algorithm="fedgcn", dataset="cora", data_root=str(data_root), out=str(out),
              rounds=12, hops=2, secure_sum="mask", progress=False)
    card = json.loads((out / "model" / "model.json").read_text())
    assert card["architecture"] == {"model": "gcn", "hidden": 16, "layers": 2, "dropout": 0.5,
                                    "hops": 2, "normalize_features": False, "in_channels": 1433,
                                    "out_channels": 7}
    assert card["classes"] == [str(c) for c in range(7)]
    assert card["trained_on"]["dataset"] == "cora"
    assert card["privacy"]["secure_sum"] == "mask" and card["privacy"]["dp"] is None
    assert card["versions"]["torch"] == torch.__version__
    assert card["rounds"]["final"] == 12
    history = json.loads((out / "result.json").read_text())["repeats"][0]["history"]
    best = max((h for h in history if "val_acc" in h), key=lambda h: (h["val_acc"], -h["round"]))
    assert card["rounds"]["best_validation"] == best["round"]
    # the digest is the file's SHA-256, which anyone can recompute
    import hashlib

    data = (out / "model" / "global.safetensors").read_bytes()
    assert card["sha256"] == hashlib.sha256(data).hexdigest()
    assert (out / "model" / "best").is_dir() == (best["round"] != 12)


def test_best_round_weights_are_the_best_rounds(data_root, tmp_path):
    out = tmp_path / "run"
    fedgl.run(algorithm="fedgcn", dataset="cora", data_root=str(data_root), out=str(out),
              rounds=15, progress=False)
    card = json.loads((out / "model" / "model.json").read_text())
    if card.get("best_files") is None:
        pytest.skip("the final round was the best-validation round in this run")
    final, _ = read_model(out / "model")
    best, _ = read_model(out / "model", best=True)
    assert any(not torch.equal(final["global"][k], best["global"][k]) for k in final["global"])
    p_final = fedgl.predict(out / "model", data_root=str(data_root))
    p_best = fedgl.predict(out / "model", data_root=str(data_root), best=True)
    graph = fedgl.load_graph(fedgl.as_config(dataset="cora", data_root=str(data_root)))

    def test_acc(p) -> float:
        hit = tot = 0
        for org in p.organisations:
            m = graph.test_mask[org.positions]
            hit += int((org.predicted()[m] == graph.y[org.positions][m]).sum())
            tot += int(m.sum())
        return hit / tot

    assert test_acc(p_best) == pytest.approx(card["metrics"]["best_validation"]["test_acc"])
    assert test_acc(p_final) == pytest.approx(card["metrics"]["final"]["test_acc"])


def test_weights_load_into_pygs_own_gcnconv(data_root, tmp_path):
    """docs/using-the-model.md: a fedgl GCN's weights are PyG GCNConv's (``lin.weight``,
    ``bias``); on the whole graph the PyG model's accuracy is the run's oracle score."""
    from safetensors.torch import load_file
    from torch_geometric.nn import GCNConv

    out = tmp_path / "run"
    result = fedgl.run(algorithm="fedgcn", dataset="cora", data_root=str(data_root),
                       out=str(out), rounds=10, progress=False)
    state = load_file(out / "model" / "global.safetensors")
    convs = torch.nn.ModuleList([GCNConv(1433, 16), GCNConv(16, 7)])
    convs.load_state_dict({k.removeprefix("convs."): v for k, v in state.items()})
    graph = fedgl.load_graph(fedgl.as_config(dataset="cora", data_root=str(data_root)))
    with torch.no_grad():
        h = torch.relu(convs[0](graph.x, graph.edge_index))
        pred = convs[1](h, graph.edge_index).argmax(-1)
    acc = float((pred[graph.test_mask] == graph.y[graph.test_mask]).float().mean())
    assert acc == pytest.approx(result.mean("oracle_test_acc"), abs=1e-6)
    module, card = fedgl.load_model(out / "model")
    assert type(module).__name__ == "GCN" and not module.training
    assert card["sha256"] == json.loads((out / "model" / "model.json").read_text())["sha256"]


# ----------------------------------------------------------------------------- bad model files
def _small_model(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    fedgl.run(algorithm="fedgcn", dataset="sbm", sbm_nodes=200, clients=3, rounds=2,
              out=str(out), progress=False)
    return out / "model"


def test_a_crafted_weights_file_runs_nothing_and_is_refused(tmp_path):
    """A pickle in place of the weights (its card's digest updated to match, as an attacker
    who controls the folder would) is refused in one line; the pickle's code never runs."""
    import hashlib
    import pickle

    model = _small_model(tmp_path)
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    data = pickle.dumps(Payload())
    (model / "global.safetensors").write_bytes(data)
    card = json.loads((model / "model.json").read_text())
    card["files"]["global"]["sha256"] = card["sha256"] = hashlib.sha256(data).hexdigest()
    (model / "model.json").write_text(json.dumps(card))
    with pytest.raises(ModelFileError, match="not a safetensors file"):
        fedgl.load_model(model)
    assert not marker.exists()


@pytest.mark.parametrize("damage,match", [
    (lambda m: (m / "global.safetensors").write_bytes(
        (m / "global.safetensors").read_bytes()[:-4] + b"\0\0\0\0"), "SHA-256"),
    (lambda m: (m / "model.json").write_text("{not json"), "not a JSON model card"),
    (lambda m: (m / "model.json").write_text('{"format": "other"}'), "not a fedgl model card"),
    (lambda m: (m / "global.safetensors").unlink(), "is missing"),
    (lambda m: shutil.rmtree(m), "does not exist"),
])
def test_a_damaged_model_folder_is_one_line(tmp_path, damage, match):
    model = _small_model(tmp_path)
    damage(model)
    with pytest.raises(ModelFileError, match=match) as err:
        fedgl.load_model(model)
    assert "\n" not in str(err.value)


def test_weights_for_another_architecture_are_refused(tmp_path):
    """Tensors that do not fit the card's architecture (a card edited to 32 hidden units) stop
    in one line before any use."""
    model = _small_model(tmp_path)
    card = json.loads((model / "model.json").read_text())
    card["architecture"]["hidden"] = 32
    (model / "model.json").write_text(json.dumps(card))
    with pytest.raises(ModelFileError, match="do not fit the architecture"):
        fedgl.load_model(model)


def test_predict_cli_bad_input_is_one_line(tmp_path, cli):
    model = _small_model(tmp_path)
    res = cli("predict", "--model", tmp_path / "nowhere", "--out", tmp_path / "s")
    assert_user_error(res, "does not exist", out=tmp_path / "s")
    res = cli("predict", "--model", model, "--dataset", "cora", "--out", tmp_path / "s")
    assert_user_error(res, "trained on 'sbm'", out=tmp_path / "s")
    assert cli("predict", "--model", model, "--out", tmp_path / "s").code == 0
    res = cli("predict", "--model", model, "--out", tmp_path / "s")
    assert_user_error(res, "--overwrite")


# ----------------------------------------------------------------------------- the tracker
def test_the_tracker_keeps_the_earliest_best_validation_round():
    t = ModelTracker()
    w = {r: {"w": torch.full((2,), float(r))} for r in range(1, 6)}
    for r, val in zip(range(1, 6), [0.1, 0.5, 0.5, 0.3, 0.2], strict=True):
        t.observe(r, w[r], {"test_acc": 0.0, "val_acc": val})
    rec = t.record()
    assert rec["round"] == 5 and rec["best_round"] == 2
    assert torch.equal(rec["best_parts"]["global"]["w"], w[2]["w"])
    assert torch.equal(rec["parts"]["global"]["w"], w[5]["w"])


def test_an_encrypted_model_is_not_recorded():
    t = ModelTracker()
    t.observe(1, b"ciphertext", {"test_acc": 0.5, "val_acc": 0.5})
    assert t.record() is None


def test_model_file_error_is_a_fedgl_error():
    assert issubclass(ModelFileError, FedglError)


@pytest.mark.parametrize("algorithm", ["glasu", "glasu-simulated", "glasu-centralized"])
def test_vertical_predictions_equal_the_runs_evaluation_on_cora(algorithm, data_root, tmp_path,
                                                                 cli):
    """GLASU's split model: one file per party, and only label holders score (every node; the
    run's metric is the mean of the holders' accuracies)."""
    out = tmp_path / "run"
    result = fedgl.run(algorithm=algorithm, dataset="cora", data_root=str(data_root),
                       out=str(out), rounds=6, progress=False)
    card = json.loads((out / "model" / "model.json").read_text())
    clients = 1 if algorithm == "glasu-centralized" else result.config["clients"]
    assert sorted(card["files"]) == [f"party-{m}" for m in range(clients)]
    res = cli("predict", "--model", out / "model", "--out", tmp_path / "scores",
              "--data-root", data_root)
    assert res.code == 0, res.err
    graph = fedgl.load_graph(fedgl.as_config(dataset="cora", data_root=str(data_root)))
    accs = []
    for path in sorted((tmp_path / "scores").glob("*.csv")):
        one = tmp_path / "one"
        one.mkdir(exist_ok=True)
        shutil.copy(path, one / path.name)
        acc, rows = _csv_test_accuracy(one, graph)
        shutil.rmtree(one)
        assert rows == graph.num_nodes
        accs.append(acc)
    holders = clients if algorithm != "glasu" or result.config.get("label_holders") == "all" \
        else 1
    assert len(accs) == holders
    assert sum(accs) / len(accs) == pytest.approx(result.mean("test_acc"), abs=1e-6)
    module, _ = fedgl.load_model(out / "model")
    assert sorted(module.keys()) == sorted(card["files"])


# ----------------------------------------------------------------------------- own tables
def test_own_tables_scores_carry_each_banks_own_ids_and_class_names(tmp_path, cli):
    """Three banks' own tables: `fedgl run --shards` writes the model with the banks' class
    names; `fedgl predict --shards` writes one CSV per bank, named after its folder, keyed by
    the bank's own account ids, whose test accuracy equals the run's."""
    from tests.own_data_helpers import BANKS, ingest_banks, write_banks

    truth = write_banks(tmp_path)
    assert cli("secret", "--out", tmp_path / "secret").code == 0
    folders = ingest_banks(tmp_path, tmp_path / "secret")
    out = tmp_path / "run"
    result = fedgl.run_shards(folders, algorithm="fedgcn", hops=2, rounds=6, out=str(out),
                              progress=False, secure_sum="none")
    card = json.loads((out / "model" / "model.json").read_text())
    assert card["classes"] == ["fraud", "ok"]
    assert card["trained_on"]["dataset"] == "own:banks" and "shards" in card["trained_on"]
    res = cli("predict", "--model", out / "model", "--shards", *folders,
              "--out", tmp_path / "scores")
    assert res.code == 0, res.err
    label = dict(zip(truth["ids"], truth["label"], strict=True))
    split = dict(zip(truth["ids"], truth["split"], strict=True))
    hit = total = 0
    for k, name in enumerate(BANKS):
        # the ingest folders are <bank>/ingest: each file is named after its bank's folder
        with (tmp_path / "scores" / f"{name}-ingest.csv").open() as f:
            rows = list(csv.DictReader(f))
        assert rows and all(r["id"] in label for r in rows)
        own = {i for i, b in zip(truth["ids"], truth["bank"], strict=True) if b == k}
        assert {r["id"] for r in rows} <= own
        for r in rows:
            assert r["prediction"] in ("fraud", "ok") and set(r) >= {"p_fraud", "p_ok"}
            if split[r["id"]] == "test":
                total += 1
                hit += r["prediction"] == label[r["id"]]
    assert hit / total == pytest.approx(result.mean("test_acc"), abs=1e-12)


def test_vertical_own_tables_the_label_holder_scores_by_its_own_ids(tmp_path):
    """Three vertical parties' own tables (examples/own_data_vertical.py): the PSI aligns them
    again in `fedgl predict`, and only the bank (the label holder) gets a file, keyed by its
    own customer ids; its test accuracy is the run's."""
    import runpy

    example = Path(__file__).resolve().parents[1] / "examples" / "own_data_vertical.py"
    run_parties = runpy.run_path(str(example))["run_parties"]
    result = run_parties(tmp_path, rounds=8)
    files = sorted((tmp_path / "scores").glob("*.csv"))
    assert [f.name for f in files] == ["bank-vertical.csv"]
    with (tmp_path / "orgs" / "bank" / "customers.csv").open() as f:
        truth = {r["customer"]: r for r in csv.DictReader(f)}
    rows = list(csv.DictReader(files[0].open()))
    assert rows and all(r["id"] in truth for r in rows)
    test = [r for r in rows if truth[r["id"]]["split"] == "test"]
    acc = sum(r["prediction"] == truth[r["id"]]["default"] for r in test) / len(test)
    assert acc == pytest.approx(result.mean("test_acc"), abs=1e-6)
    card = json.loads((tmp_path / "run" / "model" / "model.json").read_text())
    assert card["classes"] == ["0", "1"] and sorted(card["files"]) == [
        "party-0", "party-1", "party-2"]
