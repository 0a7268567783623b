"""Each organisation's own key and the roster they assemble; a party refuses a run made under
other settings than its shard's; the vertical alignment by PSI."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from fedgl.cli import main
from fedgl.config import Config
from fedgl.privacy.policy import ClientPolicy
from tests.flower_helpers import needs_flwr
from tests.own_data_helpers import ingest_banks, write_banks


def test_each_organisation_makes_its_key_and_they_check_the_roster(tmp_path: Path, capsys
                                                                   ) -> None:
    from fedgl.deployment.party import read_identity, read_roster

    for k in range(3):   # at each organisation, in its own folder
        assert main(["key", "--client-id", str(k), "--out", str(tmp_path / f"org{k}")]) == 0
        private = tmp_path / f"org{k}" / f"client-{k}.key"
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
        assert sorted(p.name for p in (tmp_path / f"org{k}").iterdir()) == \
            [f"client-{k}.key", f"client-{k}.pub.json"]
    pubs = [str(tmp_path / f"org{k}" / f"client-{k}.pub.json") for k in range(3)]
    assert main(["roster", *pubs, "--out", str(tmp_path / "roster.json")]) == 0
    roster = read_roster(tmp_path / "roster.json")
    for k in range(3):
        assert roster.to_dict()[str(k)] == read_identity(
            tmp_path / f"org{k}" / f"client-{k}.key").public.hex()
    assert main(["roster", "--check", str(tmp_path / "roster.json"), *pubs]) == 0
    # the roster holds no private key
    text = (tmp_path / "roster.json").read_text()
    for k in range(3):
        assert (tmp_path / f"org{k}" / f"client-{k}.key").read_text().strip() not in text
    # a roster with a key swapped (or a client missing) fails every organisation's check
    forged = json.loads(text)
    forged["1"] = forged["2"]
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    capsys.readouterr()
    assert main(["roster", "--check", str(tmp_path / "forged.json"), *pubs]) == 2
    assert "client 1 has another key" in capsys.readouterr().err
    assert main(["roster", "--check", str(tmp_path / "roster.json"), *pubs[:2]]) == 2
    assert "client 2 is not one handed over" in capsys.readouterr().err
    # keys are never overwritten; a duplicate client id is refused
    assert main(["key", "--client-id", "0", "--out", str(tmp_path / "org0")]) == 2
    assert main(["roster", pubs[0], pubs[0], "--out", str(tmp_path / "r2.json")]) == 2
    assert not (tmp_path / "r2.json").exists()


def test_fedgl_keys_for_tests_still_writes_every_key(tmp_path: Path) -> None:
    assert main(["keys", "--clients", "3", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        ["client-0.key", "client-1.key", "client-2.key", "roster.json"]


# ---------------------------------------------------------------------- settings
def test_shard_settings_digest_refuses_another_configuration(tmp_path: Path) -> None:
    from fedgl.data.provenance import mismatch, settings_sha256, shard_settings

    made = Config.from_dict({"dataset": "cora", "clients": 3, "partition": "dirichlet",
                             "beta": 10000.0})
    source = {"settings": shard_settings(made),
              "settings_sha256": settings_sha256(shard_settings(made))}
    assert mismatch(source, made) is None
    other = Config.from_dict({"dataset": "cora", "clients": 3, "partition": "metis",
                              "normalize_features": True})
    line = mismatch(source, other)
    assert "partition 'metis' (shard: 'dirichlet')" in line and "normalize_features" in line
    assert mismatch({"dataset": "tiny"}, other) is None   # a shard without settings: unchecked


@needs_flwr
def test_a_party_refuses_a_run_that_is_not_its_shards(tmp_path: Path) -> None:
    """A placed own-data shard under a Cora/METIS/normalised configuration: refused at set-up
    in one line; under its own settings: accepted."""
    from fedgl.deployment.party import Party
    from fedgl.privacy.identity import write_keys
    from tests.test_flower_operations import send, setup_payload

    write_banks(tmp_path)
    assert main(["secret", "--out", str(tmp_path / "secret")]) == 0
    dirs = ingest_banks(tmp_path, tmp_path / "secret")
    assert main(["index", *map(str, dirs), "--out", str(tmp_path / "setup")]) == 0
    assert main(["place", "--ingest", str(dirs[1]), "--positions",
                 str(tmp_path / "setup" / "positions-1.json"), "--out",
                 str(tmp_path / "shard")]) == 0
    roster = write_keys(tmp_path / "keys", 3)

    def party() -> Party:
        return Party(tmp_path / "shard" / "client-1.json", tmp_path / "keys" / "client-1.key",
                     roster, ClientPolicy(secure_sum="none"))

    p = party()
    send(p, "party.hello", {"challenge": b"\x01" * 32})
    head, _ = send(p, "party.setup", setup_payload(dataset="cora", partition="metis",
                                                   normalize_features=True))
    assert "dataset 'cora' (shard: 'own:banks')" in head["refused"]
    assert "normalize_features True (shard: False)" in head["refused"]
    assert "\n" not in head["refused"] and p.endpoint is None
    p = party()
    send(p, "party.hello", {"challenge": b"\x01" * 32})
    head, (_, reply) = send(p, "party.setup", setup_payload(dataset="own:banks"))
    assert "refused" not in head and reply["ok"] is True


def test_fedgl_shard_records_its_settings(tmp_path: Path, data_root: Path) -> None:
    from fedgl.data.provenance import settings_sha256

    assert main(["shard", "--dataset", "cora", "--clients", "3", "--beta", "10000", "--out",
                 str(tmp_path)]) == 0
    source = json.loads((tmp_path / "client-0.json").read_text())["source"]
    assert source["settings"]["beta"] == 10000.0 and source["settings"]["dataset"] == "cora"
    assert source["settings_sha256"] == settings_sha256(source["settings"])

