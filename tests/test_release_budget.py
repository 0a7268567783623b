"""An organisation's count of pre-training releases (``pretrain_releases``): scoring nodes that
arrive after training needs the neighbour sums exchanged again over the changed data, which is
a new release of the organisation's features; its own policy caps how many it makes.

Releases are counted by content in the party's input record: the same data again (a re-run, a
restarted exchange, scoring with unchanged tables) is the same release and free; changed data is
one more, refused before any value leaves where it would exceed the cap.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import fedgl
from fedgl.privacy.inputs import InputRecord, ReleasesExceeded

RUN = {"algorithm": "fedgcn", "dataset": "cora", "clients": 3, "hops": 2, "rounds": 1,
       "local_steps": 1, "progress": False, "secure_sum": "none", "leakage_report": False,
       "oracle_eval": False}


def test_the_record_counts_releases_by_content(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FEDGL_STAMP_DIR", str(tmp_path / "stamps"))
    record = InputRecord(tmp_path / "client-0")
    assert record.pretrain_release("a", "own:banks", 2, "client 0") == 1
    assert record.pretrain_release("a", "own:banks", 2, "client 0") == 1   # the same again
    assert record.pretrain_release("b", "own:banks", 2, "client 0") == 2   # changed data
    with pytest.raises(ReleasesExceeded, match="release 3 for 'own:banks', above its "
                                               "pretrain_releases 2; nothing was released"):
        record.pretrain_release("c", "own:banks", 2, "client 0")
    assert record.pretrain_release("x", "own:other", 2, "client 0") == 1   # per data set
    # kept across restarts of the party (its --state-dir)
    again = InputRecord(tmp_path / "client-0")
    assert again.pretrain_release("b", "own:banks", 2, "client 0") == 2
    with pytest.raises(ReleasesExceeded):
        again.pretrain_release("c", "own:banks", 2, "client 0")
    assert again.pretrain_release("c", "own:banks", None, "client 0") == 3   # no cap: counted


def test_a_run_over_changed_data_beyond_the_cap_stops_before_any_value_leaves(
        data_root: Path, tmp_path: Path, monkeypatch) -> None:
    """Simulated clients keep their record under ``state_dir``: training is release 1; the same
    data again is free; a run whose clients' data changed (here: another partition) is release
    2, refused with pretrain_releases 1 and taken with 2."""
    from fedgl.cli import main

    monkeypatch.setenv("FEDGL_STAMP_DIR", str(tmp_path / "stamps"))
    keys = {**RUN, "data_root": str(data_root), "state_dir": str(tmp_path / "state"),
            "pretrain_releases": 1}
    first = fedgl.run(**keys)
    assert fedgl.run(**keys).mean("test_acc") == first.mean("test_acc")   # same data: free
    with pytest.raises(ReleasesExceeded, match="above its pretrain_releases 1"):
        fedgl.run(**{**keys, "partition": "iid"})
    # from the command line: one line, exit 1, nothing written
    code = main(["run", "--algorithm", "fedgcn", "--dataset", "cora", "--data-root",
                 str(data_root), "--clients", "3", "--rounds", "1", "--partition", "iid",
                 "--secure-sum", "none", "--no-leakage-report", "--no-progress",
                 "--state-dir", str(tmp_path / "state"), "--pretrain-releases", "1",
                 "--out", str(tmp_path / "refused")])
    assert code == 1 and not (tmp_path / "refused" / "result.json").exists()
    # an organisation that allows one more release takes part once more, then no more
    fedgl.run(**{**keys, "partition": "iid", "pretrain_releases": 2})
    with pytest.raises(ReleasesExceeded, match="release 3"):
        fedgl.run(**{**keys, "pretrain_releases": 2, "beta": 10000.0})
