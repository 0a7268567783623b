"""``fedgl server --predict`` for a model split among the parties (GLASU).

The coordinator holds no part of a deployed GLASU model: at the end of training each party kept
its own under its ``--out``. Scoring loads each party's kept part into its role
(``party.load_part``), runs the paper's joint inference over the parties' current shards, and
each keeps its part again; the label holder writes the scores of its common entities. They equal
the scores of the training run's final joint inference over the same shards, and the local
``fedgl predict`` of the whole model.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from fedgl.federation.protocol import ProtocolViolation
from tests.flower_helpers import (
    InProcessFlower,
    needs_flwr,
    set_up_parties,
    write_deployment_files,
)
from tests.test_model_handover import PartyRuntime

RUN = {"algorithm": "glasu", "dataset": "cora", "clients": 3, "layers": 2, "hidden": 16,
       "agg_layers": "2", "stale_steps": 2, "rounds": 2, "progress": False,
       "batch_clients": False, "secure_sum": "none"}


class Deployed:
    """A deployment's one runtime, in process: the parties' own messages (``party.*``) to the
    parties, every other to their roles (as the relay splits them)."""

    def __init__(self, parties: list) -> None:
        self.roles = InProcessFlower({p.client_id: p.endpoint.role for p in parties})
        self.parties = PartyRuntime(parties)

    def call(self, method: str, args, *, phase: str, clients=None):
        target = self.parties if method.startswith("party.") else self.roles
        return target.call(method, args, phase=phase, clients=clients)

    def __getattr__(self, name: str):
        return getattr(self.roles, name)


def _parties(root: Path, outs: list[Path], cfg) -> list:
    from fedgl.deployment.party import Party
    from fedgl.privacy.policy import ClientPolicy

    parties = [Party(root / "shards" / f"client-{k}.json", root / "keys" / f"client-{k}.key",
                     root / "keys" / "roster.json", ClientPolicy(secure_sum="none"),
                     out=outs[k]) for k in range(3)]
    set_up_parties(parties, cfg, "vertical")
    return parties


def _whole_model(outs: list[Path], folder: Path) -> Path:
    """The parties' kept parts put together in one model folder (what no party holds; for the
    experimenter's local reference)."""
    from fedgl.trained import read_model, write_model

    parts = {}
    for out in outs:
        parts.update(read_model(out / "model")[0])
    card = json.loads((outs[0] / "model" / "model.json").read_text())
    write_model(folder, {"parts": parts, "best_parts": None},
                {k: v for k, v in card.items() if k not in ("files", "sha256", "received")})
    return folder


def _scores(path: Path) -> dict[str, dict]:
    return {r["id"]: r for r in csv.DictReader(path.open())}


@needs_flwr
def test_parties_score_with_the_parts_they_kept(tmp_path, data_root):
    import fedgl
    from fedgl.api import as_config
    from fedgl.deployment.model_release import keep_parts, predict_config, score_deployed
    from fedgl.deployment.server_app import run_deployed
    from fedgl.errors import RunAborted

    root = write_deployment_files(tmp_path / "files", 3, ("--algorithm", "glasu"))
    cfg = as_config(**RUN)
    outs = [tmp_path / f"org-{k}" for k in range(3)]
    parties = _parties(root, outs, cfg)
    result = run_deployed(InProcessFlower({p.client_id: p.endpoint.role for p in parties}),
                          cfg, cfg.seed, {})
    trained = keep_parts(PartyRuntime(parties), result, lambda _: None)
    holders = [k for k, p in enumerate(parties) if p.endpoint.role.model.classifier is not None]
    at_training = {k: _scores(outs[k] / "scores.csv") for k in holders}

    # the next day: new party processes over the same shards, the same --out folders; the
    # coordinator has only a card (any party's model/ folder names the run's configuration)
    card_dir = outs[1] / "model"
    pcfg = predict_config(card_dir, {"out": str(tmp_path / "scored")})
    again = _parties(root, outs, pcfg)
    log: list[str] = []
    summary = score_deployed(Deployed(again), pcfg, pcfg.seed, card_dir, log.append)
    assert summary["loaded"] == {str(k): d for k, d in trained.items()}
    assert {k: o["sha256"] for k, o in summary["organisations"].items()} == \
        {str(k): d for k, d in trained.items()}   # each keeps the same part again
    scored = {k: _scores(outs[k] / "scores.csv") for k in holders}
    for k in holders:   # every label holder, from its own classifier
        assert scored[k].keys() == at_training[k].keys()
        for i, row in scored[k].items():
            assert row["prediction"] == at_training[k][i]["prediction"]
            for c, v in row.items():
                if c.startswith("p_"):
                    assert float(v) == pytest.approx(float(at_training[k][i][c]), abs=1e-6)
    assert summary["metrics"]["test_acc"] == pytest.approx(
        result.repeats[0].history[-1]["test_acc"], abs=1e-6)

    # the local fedgl predict of the whole model (the parts put together) agrees
    local = fedgl.predict(_whole_model(outs, tmp_path / "whole"), data_root=str(data_root))
    assert sorted(int(o.name.removeprefix("client-")) for o in local.organisations) == holders
    for org in local.organisations:
        mine = scored[int(org.name.removeprefix("client-"))]
        probs = torch.tensor([[float(mine[str(int(i))][f"p_{c}"]) for c in range(7)]
                              for i in org.positions])
        torch.testing.assert_close(probs, org.probs.float(), atol=1e-6, rtol=1e-5)

    # a party that kept no part (another --out) is named, and nothing is scored
    lost = _parties(root, [outs[0], tmp_path / "elsewhere", outs[2]], pcfg)
    with pytest.raises(RunAborted, match=r"parties \[1\] could not load their part"):
        score_deployed(Deployed(lost), pcfg, pcfg.seed, card_dir, log.append)
    assert any("client 1 did not load its kept part" in line and "--out folder of the "
               "training run" in line for line in log)


@needs_flwr
def test_a_party_loads_only_its_own_part(tmp_path, data_root):
    from fedgl.api import as_config
    from fedgl.deployment.party import LOAD_PART, SETUP_PHASE
    from fedgl.federation.codec import encode

    root = write_deployment_files(tmp_path / "files", 3, ("--algorithm", "glasu"))
    cfg = as_config(**RUN)
    parties = _parties(root, [tmp_path / f"org-{k}" for k in range(3)], cfg)
    party = parties[0]
    (tmp_path / "org-0").mkdir()
    # another party's kept part in its folder: refused in one line, its role unchanged
    from fedgl.trained import write_model

    other = {k: v.clone() for k, v in parties[1].endpoint.role.model.state_dict().items()}
    write_model(tmp_path / "org-0" / "model", {"parts": {"party-1": other}, "best_parts": None},
                {"algorithm": "glasu"})
    head, _ = party.answer({"op": "message", "phase": SETUP_PHASE, "node_id": 1, "run_id": 1},
                           encode(LOAD_PART, {}).to_bytes())
    assert "not this party's party-0" in head["refused"], head
    with pytest.raises(ProtocolViolation):
        PartyRuntime([party]).call(LOAD_PART, {}, phase=SETUP_PHASE)


@pytest.mark.slow   # two loopback federations (train, score): about 80 s on 2 shared cores
@needs_flwr
def test_fedgl_server_predict_scores_a_deployed_glasu_model(tmp_path):
    """Over a loopback Flower federation: three parties train GLASU and keep their parts;
    ``fedgl server --predict`` with one party's card, the parties' ``fedgl client`` started
    with the same ``--out`` folders: each label holder's scores equal its scores at the end
    of training, and the coordinator writes no score."""
    from tests.flower_helpers import PLAINTEXT, deployed_predict, deployed_run

    root = write_deployment_files(tmp_path, 3, ("--algorithm", "glasu", "--label-holders",
                                                "one"))
    keys = {"algorithm": "glasu", "dataset": "cora", "clients": 3, "rounds": 2, "layers": 2,
            "hidden": 8, "label_holders": "one", "progress": False}
    deployed_run(root, "train", keys, PLAINTEXT)
    outs = root / "fed-train"
    at_training = _scores(outs / "client-0-out" / "scores.csv")
    summary = deployed_predict(outs, root / "shards", root / "keys",
                               outs / "client-2-out" / "model", tmp_path / "scored", PLAINTEXT)
    assert sorted(summary["loaded"]) == ["0", "1", "2"]
    assert summary["loaded"] == {k: o["sha256"] for k, o in summary["organisations"].items()}
    scored = _scores(outs / "client-0-out" / "scores.csv")
    assert scored.keys() == at_training.keys() and len(scored) == 2708
    for i, row in scored.items():
        assert row["prediction"] == at_training[i]["prediction"], i
    assert not (outs / "client-1-out" / "scores.csv").exists()
    assert [p.name for p in (tmp_path / "scored").iterdir() if p.suffix == ".csv"] == []


@needs_flwr
def test_new_common_entities_are_scored_with_the_kept_parts(tmp_path):
    """Vertical parties whose tables gain common entities the next day: each re-ingests (the
    same secret), the PSI steps run again by files and each places its shard; scoring with the
    parts kept from training scores every common entity, the new ones too, at the label holder
    by its own raw ids, equal to the local ``fedgl predict`` over the next day's ingest
    folders with the parts put together."""
    import shutil

    import fedgl
    from fedgl.api import as_config
    from fedgl.cli import main
    from fedgl.deployment.model_release import keep_parts, predict_config, score_deployed
    from fedgl.deployment.server_app import run_deployed
    from fedgl.privacy.identity import write_keys
    from tests.test_own_vertical import write_parties
    from tests.test_psi_files import psi_by_files

    tomorrow, today = tmp_path / "tomorrow", tmp_path / "today"
    tomorrow.mkdir()
    truth = write_parties(tomorrow)
    common = sorted(set(truth["held"][0]) & set(truth["held"][1]) & set(truth["held"][2]))
    new = set(common[:6])   # party 0 has not seen these yet
    today.mkdir()
    for k in range(3):
        shutil.copy(tomorrow / f"edges{k}.csv", today / f"edges{k}.csv")
        lines = (tomorrow / f"nodes{k}.csv").read_text().splitlines()
        keep = [ln for ln in lines if k != 0 or ln.split(",")[0] not in new]
        (today / f"nodes{k}.csv").write_text("\n".join(keep) + "\n")
    assert main(["secret", "--out", str(tmp_path / "secret")]) == 0
    write_keys(tmp_path / "keys", 3)

    def ingest(root: Path) -> list[Path]:
        dirs = []
        for k in range(3):
            labels = ["--label-column", "label", "--split-column", "split"] if k == 0 else []
            assert main(["ingest", "--vertical", "--nodes", str(root / f"nodes{k}.csv"),
                         "--edges", str(root / f"edges{k}.csv"), "--client-id", str(k),
                         *labels, "--name", "telco", "--secret", str(tmp_path / "secret"),
                         "--out", str(root / f"party{k}")]) == 0
            dirs.append(root / f"party{k}")
        psi_by_files(root, dirs)
        (root / "keys").symlink_to(tmp_path / "keys")
        return dirs

    ingest(today)
    later = ingest(tomorrow)
    cfg = as_config(algorithm="glasu", dataset="own:telco", clients=3, label_holders="one",
                    rounds=3, layers=2, hidden=8, progress=False, batch_clients=False,
                    secure_sum="none")
    outs = [tmp_path / f"org-{k}" for k in range(3)]
    parties = _parties(today, outs, cfg)
    result = run_deployed(InProcessFlower({p.client_id: p.endpoint.role for p in parties}),
                          cfg, cfg.seed, {})
    assert len(keep_parts(PartyRuntime(parties), result, lambda _: None)) == 3

    pcfg = predict_config(outs[0] / "model", {"out": str(tmp_path / "scored")})
    summary = score_deployed(Deployed(_parties(tomorrow, outs, pcfg)), pcfg, pcfg.seed,
                             outs[0] / "model", lambda _: None)
    assert sorted(summary["loaded"]) == ["0", "1", "2"]
    scored = _scores(outs[0] / "scores.csv")     # the label holder, by its own raw ids
    assert set(scored) == set(common) and new <= set(scored)
    assert not (outs[1] / "scores.csv").exists() and not (outs[2] / "scores.csv").exists()

    local = fedgl.predict(_whole_model(outs, tmp_path / "whole"), shards=later)
    (org,) = local.organisations
    assert set(org.ids) == set(common)
    for node, probs in zip(org.ids, org.probs, strict=True):
        row = scored[node]
        got = torch.tensor([float(row[c]) for c in row if c.startswith("p_")])
        torch.testing.assert_close(got, probs.float(), atol=1e-6, rtol=1e-5)
