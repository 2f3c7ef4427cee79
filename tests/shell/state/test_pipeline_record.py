"""A pipeline's record in the ledger (:mod:`eps.shell.state.phases`, migration 12), on both
backends: written with its rows in one transaction, read back in its order, read for many
pipelines in one query; an older eps's ``<state>/pipelines/D.json`` moved in on open."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eps.core.model import Job
from eps.shell.state import phases
from eps.shell.state.ledger import Ledger, LedgerError
from eps.shell.state.phases import PhaseRecord

RECORD = (PhaseRecord("prep", "pa-1", ()), PhaseRecord("train", "pa-2", ("prep",)),
          PhaseRecord("report", "pa-3", ("train", "prep")))  # fmt: skip


def test_a_pipeline_is_recorded_with_its_rows_and_read_back_in_order(tmp_path: Path, ledger_url: str | None) -> None:
    ledger = Ledger(str(tmp_path), url=ledger_url)
    try:
        job = Job("cpu-small", 60, command=("true",))
        ledger.new_pipeline("pa", job, [(p.id, job) for p in RECORD], RECORD)
        ledger.new_pipeline("pb", job, [("pb-1", job)], [PhaseRecord("pa", "pa", (), after=True),
                                                         PhaseRecord("job", "pb-1", ("pa",))])  # fmt: skip
        ledger.new_dispatch("plain", job)
        assert phases.read(ledger, "pa") == RECORD
        assert phases.read(ledger, "plain") is None
        assert [r.id for r in ledger.children("pa")] == ["pa-1", "pa-2", "pa-3"]
        many = phases.read_many(ledger, ["plain", "pb", "pa", "nosuch"])
        assert many == {"pa": RECORD, "pb": (PhaseRecord("pa", "pa", (), True), PhaseRecord("job", "pb-1", ("pa",)))}
        # one transaction: a child id already taken leaves no parent row and no record
        with pytest.raises(LedgerError, match="already exists"):
            ledger.new_pipeline("pc", job, [("pc-1", job), ("plain", job)], [PhaseRecord("x", "pc-1", ())])
        assert ledger.dispatch("pc") is None and ledger.dispatch("pc-1") is None
        assert phases.read(ledger, "pc") is None
    finally:
        ledger.close()


def test_an_older_state_dirs_pipeline_files_are_moved_into_the_ledger(tmp_path: Path) -> None:
    state = tmp_path / "state"
    ledger = Ledger(str(state))
    job = Job("cpu-small", 60, command=("true",))
    ledger.new_dispatch("old", job)
    for p in RECORD:
        ledger.new_dispatch(p.id, job, parent="old")
    ledger.close()
    folder = state / "pipelines"
    (folder / "old" / "train" / ".eps-inputs").mkdir(parents=True)  # a staged workdir stays where it is
    doc = {"phases": [{"name": p.name, "id": p.id, "needs": list(p.needs)} for p in RECORD]}
    (folder / "old.json").write_text(json.dumps(doc))
    (folder / "torn.json").write_text('{"phases": [')  # cut short: left as it is, never half read
    ledger = Ledger(str(state))
    try:
        assert phases.read(ledger, "old") == RECORD
        assert phases.read(ledger, "torn") is None
    finally:
        ledger.close()
    assert sorted(p.name for p in folder.iterdir()) == ["old", "torn.json"]
    assert (folder / "old" / "train" / ".eps-inputs").is_dir()
    ledger = Ledger(str(state))  # opened again: nothing twice
    try:
        assert phases.read(ledger, "old") == RECORD
    finally:
        ledger.close()
