"""The end of a deployed run: each organisation receives the model, checks it, keeps its copy and
scores its own nodes. The parties are built from their shards and keys exactly as ``fedgl client``
builds them, and the messages reach them as the relay hands them over (encoded, through
``Party.answer``); the server's side is the deployed driver and its hand-over."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import pytest
import torch

from fedgl.federation.codec import Encoded, decode, encode
from fedgl.federation.protocol import ProtocolViolation
from tests.flower_helpers import InProcessFlower, needs_flwr, write_deployment_files

RUN = {"algorithm": "fedgcn", "dataset": "cora", "clients": 3, "hops": 2, "rounds": 3,
       "local_steps": 2, "progress": False, "oracle_eval": False, "batch_clients": False,
       "secure_sum": "none", "leakage_report": False}


class PartyRuntime:
    """Carries messages to the parties as the relay does (no Flower here); a refusal raises as
    the Flower runtime's does."""

    def __init__(self, parties: list) -> None:
        self.parties = {p.client_id: p for p in parties}

    @property
    def client_ids(self) -> list[int]:
        return sorted(self.parties)

    def call(self, method: str, args: dict, *, phase: str, clients: list[int] | None = None
             ) -> dict[int, dict]:
        out = {}
        for k in clients if clients is not None else self.client_ids:
            head, body = self.parties[k].answer(
                {"op": "message", "phase": phase, "node_id": 1, "run_id": 1, "type": method},
                encode(method, args).to_bytes())
            if "refused" in head:
                raise ProtocolViolation(head["refused"])
            out[k] = decode(Encoded.from_bytes(body))[1]
        return out


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, data_root: Path) -> Path:
    return write_deployment_files(tmp_path_factory.mktemp("handover"))


def _parties(files: Path, tmp_path: Path, receive: tuple[bool, ...] = (True, True, True),
             shards: Path | None = None, run: dict | None = None, policy: dict | None = None,
             state_dir: Path | None = None):
    """In-process parties built as ``fedgl client`` builds them, set up for one run; its
    configuration."""
    from fedgl.api import as_config
    from fedgl.deployment.party import HELLO, SETUP, SETUP_PHASE, Party
    from fedgl.privacy.policy import ClientPolicy

    cfg = as_config(**{**RUN, **(run or {})})
    # named: this run is a plaintext one; whether it takes the model is each one's policy
    shards = shards if shards is not None else files / "shards"
    parties = [Party(shards / f"client-{k}.json", files / "keys" / f"client-{k}.key",
                     files / "keys" / "roster.json",
                     ClientPolicy(secure_sum="none", receive_model=receive[k], **(policy or {})),
                     out=tmp_path / f"org-{k}", state_dir=state_dir) for k in range(3)]
    for party in parties:
        for msg_type, payload in ((HELLO, {"challenge": bytes(32)}),
                                  (SETUP, {"config": cfg.to_dict(), "seed": cfg.seed,
                                           "run_tag": "handover", "resumed": False})):
            head, _ = party.answer({"op": "message", "phase": SETUP_PHASE, "node_id": 1,
                                    "run_id": 1}, encode(msg_type, payload).to_bytes())
            assert "refused" not in head, head
    return parties, cfg


def _trained(files: Path, tmp_path: Path, receive: tuple[bool, ...] = (True, True, True),
             shards: Path | None = None, **kw):
    """A deployed run over in-process parties, its results and model in ``tmp_path/out``."""
    from fedgl.api import save_with_model
    from fedgl.deployment.server_app import run_deployed

    parties, cfg = _parties(files, tmp_path, receive, shards, **kw)
    result = run_deployed(InProcessFlower({p.client_id: p.endpoint.role for p in parties}),
                          cfg, cfg.seed, {})
    out = tmp_path / "out"
    out.mkdir()
    save_with_model(result, out)
    return parties, result, out


@needs_flwr
def test_every_organisation_gets_its_copy_and_its_scores(files, tmp_path):
    from fedgl.deployment.model_release import release_model

    parties, result, out = _trained(files, tmp_path)
    card = json.loads((out / "model" / "model.json").read_text())
    assert card["architecture"]["in_channels"] == 1433   # the widths the clients reported
    log: list[str] = []
    digests = release_model(PartyRuntime(parties), out / "model", log.append)
    assert digests == {0: card["sha256"], 1: card["sha256"], 2: card["sha256"]}
    assert "every copy's SHA-256" in log[-1]
    hit = total = 0
    for k in range(3):
        org = tmp_path / f"org-{k}"
        copy = (org / "model" / "global.safetensors").read_bytes()
        assert hashlib.sha256(copy).hexdigest() == card["sha256"]
        own = json.loads((org / "model" / "model.json").read_text())
        assert own["sha256"] == card["sha256"] and "best_files" not in own
        # its own nodes only, keyed by the shard's node ids
        rows = list(csv.DictReader((org / "scores.csv").open()))
        shard = parties[k].shard
        assert [int(r["id"]) for r in rows] == shard.node_ids.tolist()
        pred = torch.tensor([int(r["prediction"]) for r in rows])
        hits = int((pred[shard.test_mask] == shard.y[shard.test_mask]).sum())
        metrics = json.loads((org / "metrics.json").read_text())
        assert metrics["test_nodes"] == int(shard.test_mask.sum())
        assert metrics["test_acc"] == pytest.approx(hits / metrics["test_nodes"])
        hit, total = hit + hits, total + metrics["test_nodes"]
    # the organisations' own scores pool to the run's federated test accuracy
    assert hit / total == pytest.approx(result.mean("test_acc"), abs=1e-12)


@needs_flwr
def test_an_organisations_scores_name_its_own_raw_ids(files, tmp_path):
    """``fedgl place`` keeps each node's raw id beside the shard (``client-<k>.ids.csv``); the
    organisation's client names its scores by them, and the coordinator never reads them."""
    import shutil

    from fedgl.data.shard_format import ids_path, read_shard, write_ids
    from fedgl.deployment.model_release import release_model

    shards = tmp_path / "shards"
    shutil.copytree(files / "shards", shards)
    for k in range(3):
        nodes = read_shard(shards / f"client-{k}.json").node_ids.tolist()
        write_ids(ids_path(shards / f"client-{k}.json", k), nodes, [f"acct-{k}-{v}" for v in nodes])
    parties, _, out = _trained(files, tmp_path, shards=shards)
    release_model(PartyRuntime(parties), out / "model", lambda _: None)
    for k in range(3):
        rows = list(csv.DictReader((tmp_path / f"org-{k}" / "scores.csv").open()))
        assert [r["id"] for r in rows] == [f"acct-{k}-{v}" for v in
                                           parties[k].shard.node_ids.tolist()]
    assert not any(b"acct-" in p.read_bytes() for p in out.rglob("*") if p.is_file())


@needs_flwr
def test_scoring_changed_data_beyond_an_organisations_releases_is_refused(files, tmp_path,
                                                                          monkeypatch):
    """An organisation whose policy allows one pre-training release (``pretrain_releases: 1``)
    trains; the next day one organisation's data has changed and the coordinator asks to score
    it (``fedgl server --predict``): the exchange over the changed data would be a second
    release, and it is refused before any value leaves, in one line. Over unchanged data the
    same request is answered (the same release again)."""
    import shutil

    from fedgl.data.shard_format import read_manifest, read_shard, write_shard
    from fedgl.deployment.model_release import score_deployed
    from fedgl.privacy.inputs import ReleasesExceeded
    from tests.flower_helpers import InProcessFlower

    monkeypatch.setenv("FEDGL_STAMP_DIR", str(tmp_path / "stamps"))
    keys = {"run": {"pretrain_releases": 1}, "policy": {"pretrain_releases": 1},
            "state_dir": tmp_path / "state"}
    _, _, out = _trained(files, tmp_path, **keys)
    model = out / "model"

    def score(shards: Path) -> dict:
        parties, cfg = _parties(files, tmp_path / "again", shards=shards, **keys)
        runtime = InProcessFlower({p.client_id: p.endpoint.role for p in parties})
        return score_deployed(runtime, cfg, cfg.seed, model, lambda _: None)

    assert score(files / "shards")["model_sha256"]   # unchanged data: the same release
    changed = tmp_path / "changed"
    shutil.copytree(files / "shards", changed)
    shard = read_shard(changed / "client-1.json")
    shard.x[0, 0] += 1.0   # one of its customers' values changed since training
    write_shard(shard, changed, read_manifest(changed / "client-1.json")["source"])
    with pytest.raises(ReleasesExceeded) as err:
        score(changed)
    assert str(err.value).startswith("client 1: this exchange would release pre-training sums "
                                     "over changed data")
    assert "\n" not in str(err.value) and "pretrain_releases 1" in str(err.value)


@needs_flwr
def test_under_encrypted_models_each_organisation_decrypts_its_own_copy(files, tmp_path):
    """``--encrypt-models``: the coordinator never sees the model in the clear, writes no
    weights and keeps no copy; at the end each organisation receives the last round's
    encrypted model, checks and decrypts it itself, and keeps it with its own scores; every
    copy has the same digest, and the organisations' scores pool to the run's accuracy. A model
    in clear posing as the run's, and a lone encrypted model (a decryption oracle), are
    refused."""
    pytest.importorskip("tenseal", reason="tenseal is not installed (fedgl[he])")
    from fedgl.api import save_with_model
    from fedgl.deployment.model_release import MODEL, release_encrypted
    from fedgl.deployment.server_app import run_deployed
    from tests.flower_helpers import InProcessFlower

    parties, cfg = _parties(files, tmp_path, run={"encrypt_models": True},
                            policy={"encrypt_models": True})
    runtime = InProcessFlower({p.client_id: p.endpoint.role for p in parties})
    result = run_deployed(runtime, cfg, cfg.seed, {})
    out = tmp_path / "out"
    out.mkdir()
    save_with_model(result, out)
    assert not (out / "model").exists()   # never in the clear at the coordinator
    encrypted = runtime.encrypted_model
    party_runtime = PartyRuntime(parties)
    card = json.dumps({"algorithm": "fedgcn", "classes": [str(c) for c in range(7)]})
    with pytest.raises(ProtocolViolation, match="a model in clear is not the run's"):
        party_runtime.call(MODEL, {"weights": {"w": torch.zeros(2)}, "card": card},
                           phase="setup", clients=[0])
    with pytest.raises(ProtocolViolation, match="decryption-oracle|one encrypted model"):
        party_runtime.call(MODEL, {"weights": encrypted.parts[0], "card": card},
                           phase="setup", clients=[0])
    party_runtime.encrypted_model = encrypted
    log: list[str] = []
    digests = release_encrypted(party_runtime, result, log.append)
    assert sorted(digests) == [0, 1, 2] and len(set(digests.values())) == 1
    assert "every copy's SHA-256" in log[-1]
    hit = total = 0
    for k in range(3):
        org = tmp_path / f"org-{k}"
        copy = (org / "model" / "global.safetensors").read_bytes()
        assert hashlib.sha256(copy).hexdigest() == digests[k]
        metrics = json.loads((org / "metrics.json").read_text())
        hit += round(metrics["test_acc"] * metrics["test_nodes"])
        total += metrics["test_nodes"]
    assert hit / total == pytest.approx(result.mean("test_acc"), abs=1e-12)


@needs_flwr
def test_a_party_takes_one_model_per_run_and_only_when_it_wants_one(files, tmp_path):
    from fedgl.deployment.model_release import release_model

    parties, _, out = _trained(files, tmp_path, receive=(True, True, False))
    log: list[str] = []
    digests = release_model(PartyRuntime(parties), out / "model", log.append)
    assert sorted(digests) == [0, 1]
    assert any("client 2 did not take the model" in line and "receive_model: false" in line
               for line in log), log
    assert not (tmp_path / "org-2").exists()
    # a second hand-over in the same run is refused: the run is over for the party
    again: list[str] = []
    assert release_model(PartyRuntime(parties), out / "model", again.append) == {}
    assert all("did not take the model" in line for line in again[:2]), again


@needs_flwr
def test_a_model_that_is_not_the_cards_is_refused(files, tmp_path):
    """A malicious coordinator: weights other than the card's digest, or of another shape under
    a card made to match them, are refused in one line; nothing is written."""
    from fedgl.deployment.model_release import MODEL
    from fedgl.trained import encode_part

    parties, _, out = _trained(files, tmp_path)
    runtime = PartyRuntime(parties)
    card = json.loads((out / "model" / "model.json").read_text())
    from fedgl.trained import read_model

    weights = read_model(out / "model")[0]["global"]
    other = {k: v + 1.0 for k, v in weights.items()}
    with pytest.raises(ProtocolViolation, match="is not the card's"):
        runtime.call(MODEL, {"weights": other, "card": json.dumps(card)}, phase="setup",
                     clients=[0])
    small = {k: v[..., :1].contiguous() for k, v in weights.items()}
    digest = hashlib.sha256(encode_part(small, "global")).hexdigest()
    card["sha256"] = card["files"]["global"]["sha256"] = digest
    with pytest.raises(ProtocolViolation, match="do not fit this run's model"):
        runtime.call(MODEL, {"weights": small, "card": json.dumps(card)}, phase="setup",
                     clients=[1])
    assert not (tmp_path / "org-0" / "model").exists()
    assert not (tmp_path / "org-1" / "model").exists()


@needs_flwr
def test_deployed_scoring_equals_the_hand_over_and_the_local_prediction(files, tmp_path):
    """A loopback federation trains (each organisation gets its copy and its scores), then
    `fedgl server --predict MODEL_DIR` over the same shards: the set-up exchange again, the model
    to every organisation, the same scores in each one's folder, and the same as the local
    `fedgl predict` computes for that organisation."""
    import fedgl
    from tests.flower_helpers import deployed_predict, deployed_run

    keys = {**RUN, "rounds": 2}
    deployed_run(files, "score-train", keys, ["--secure-sum", "none"])
    model = files / "out-score-train" / "model"
    trained = {k: (files / "fed-score-train" / f"client-{k}-out" / "scores.csv").read_text()
               for k in range(3)}
    summary = deployed_predict(tmp_path / "fed", files / "shards", files / "keys", model,
                               tmp_path / "scored", ["--secure-sum", "none"])
    card = json.loads((model / "model.json").read_text())
    assert {k: v["sha256"] for k, v in summary["organisations"].items()} == \
        {str(k): card["sha256"] for k in range(3)}
    assert summary["exchange"]["bytes"]["pretrain"]["up"] > 0   # the set-up exchange ran
    local = fedgl.predict(model, data_root=None)
    for k in range(3):
        scored = (tmp_path / "fed" / f"client-{k}-out" / "scores.csv").read_text()
        assert scored == trained[k]
        org = local.organisations[k]
        rows = list(csv.DictReader(scored.splitlines()))
        assert [int(r["id"]) for r in rows] == org.positions.tolist()
        assert [r["prediction"] for r in rows] == [str(int(c)) for c in org.predicted()]


@needs_flwr
def test_vertical_parties_each_keep_only_their_own_part(tmp_path, data_root):
    """A deployed GLASU run: the model is split among the parties, so each keeps its own part
    (its sub-layers, and the classifier at the label holder) under its own folder, loadable on
    its own; nothing of another party's part reaches it. Only the label holder writes scores,
    those of the run's final joint inference."""
    import fedgl
    from fedgl.api import as_config
    from fedgl.deployment.model_release import keep_parts
    from fedgl.deployment.party import HELLO, SETUP, SETUP_PHASE, Party
    from fedgl.deployment.server_app import run_deployed
    from fedgl.privacy.policy import ClientPolicy

    root = write_deployment_files(tmp_path / "files", 3, ("--algorithm", "glasu"))
    cfg = as_config(algorithm="glasu", dataset="cora", clients=3, layers=2, hidden=16,
                    agg_layers="2", stale_steps=2, rounds=2, progress=False,
                    batch_clients=False, secure_sum="none")
    parties = [Party(root / "shards" / f"client-{k}.json", root / "keys" / f"client-{k}.key",
                     root / "keys" / "roster.json", ClientPolicy(secure_sum="none"),
                     out=tmp_path / f"org-{k}") for k in range(3)]
    for party in parties:
        for msg_type, payload in ((HELLO, {"challenge": bytes(32)}),
                                  (SETUP, {"config": cfg.to_dict(), "seed": cfg.seed,
                                           "run_tag": "vertical", "resumed": False})):
            head, _ = party.answer({"op": "message", "phase": SETUP_PHASE, "node_id": 1,
                                    "run_id": 1}, encode(msg_type, payload).to_bytes())
            assert "refused" not in head, head
    result = run_deployed(InProcessFlower({p.client_id: p.endpoint.role for p in parties}),
                          cfg, cfg.seed, {})
    assert result.environment["graph"]["num_features"] == 1433   # every party's columns
    log: list[str] = []
    digests = keep_parts(PartyRuntime(parties), result, log.append)
    assert sorted(digests) == [0, 1, 2] and "3 of 3 parties keep their own part" in log[-1]
    for k, party in enumerate(parties):
        folder = tmp_path / f"org-{k}" / "model"
        card = json.loads((folder / "model.json").read_text())
        assert sorted(card["files"]) == [f"party-{k}"] and card["sha256"] == digests[k]
        assert sorted(p.name for p in folder.glob("*.safetensors")) == [f"party-{k}.safetensors"]
        module, _ = fedgl.load_model(folder)
        mine = party.endpoint.role.model.state_dict()
        assert all(torch.equal(v, mine[n]) for n, v in module[f"party-{k}"].state_dict().items())
        holds_labels = party.endpoint.role.model.classifier is not None
        assert ("classifier.weight" in card["files"][f"party-{k}"]["tensors"]) == holds_labels
        # only a label holder scores its common entities, from the final joint inference
        scores = tmp_path / f"org-{k}" / "scores.csv"
        assert scores.exists() == holds_labels
        if holds_labels:
            rows = list(csv.DictReader(scores.open()))
            data = party.endpoint.role.data
            pred = torch.tensor([int(r["prediction"]) for r in rows])
            acc = float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())
            final = result.repeats[0].history[-1]["client_test_acc"][str(k)]
            assert acc == pytest.approx(final, abs=1e-6)
            metrics = json.loads((tmp_path / f"org-{k}" / "metrics.json").read_text())
            assert metrics["test_acc"] == pytest.approx(final, abs=1e-6)
