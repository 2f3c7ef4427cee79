"""The ledger's schema migrations and its typed rows, on both backends (``ledger_url``:
SQLite in the state directory, and PostgreSQL, tests/pg_support.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from eps.core.model import Job, LaneKind, Provisioning, Rung
from eps.core.outcome import Handle
from eps.core.states import AttemptState, DispatchState, HandleState, IllegalMove
from eps.shell.state.ledger import Ledger
from eps.shell.state.migrations import _V1, SCHEMA_VERSION
from eps.shell.state.store import Store, open_store

OLD_JOB = {
    "intent": "cpu-small", "duration_s": 1800, "restartable": False, "footprint_gb": 0.0, "gradient_fit": False,
    "count": 1, "pin": None, "command": ["python3", "a.py"],
}  # fmt: skip


def _raw(state: Path, url: str | None) -> Store | sqlite3.Connection:
    """The database itself, as no eps made it: nothing migrated, nothing checked."""
    if url is None:
        return sqlite3.connect(state / "ledger.sqlite3", isolation_level=None)
    from eps.shell.state.pg_store import PgStore

    return PgStore(url)


def _first_release_ledger(state: Path, url: str | None) -> None:
    """A ledger as the first release wrote it: version in a meta table, lanes' own state words."""
    state.mkdir()
    db = _raw(state, url)
    for statement in _V1.split(";"):
        if statement.strip():
            db.execute(statement)
    db.execute("INSERT INTO meta VALUES ('schema', '1')")
    handle = {"lane": "gcp", "kind": "gcp", "id": "eps-x-1", "rung": "gcp/e2-standard-4/us-central1-a/spot",
              "zone": "us-central1-a", "qos": None, "machine": "e2-standard-4", "state": "stopped"}  # fmt: skip
    db.execute(
        "INSERT INTO dispatches VALUES ('eold000001', NULL, 'cpu-small', ?, 'started', NULL, NULL, ?, 1.0, 2.0)",
        (json.dumps(OLD_JOB), json.dumps(handle)),
    )
    db.execute(
        "INSERT INTO attempts (dispatch, seq, rung, lane, kind, target, qos, zone, provisioning, name, handle, state,"
        " started_at, updated_at) VALUES ('eold000001', 1, 'gcp/e2-standard-4/us-central1-a/spot', 'gcp', 'gcp',"
        " 'e2-standard-4', NULL, 'us-central1-a', 'spot', 'eps-x-1', 'eps-x-1', 'running', 1.0, 2.0)"
    )
    db.close()


def _version_and_indexes(state: Path, url: str | None) -> tuple[int, set[str]]:
    db = open_store(str(state), url)
    try:
        sql = ("SELECT name FROM sqlite_master WHERE type='index'" if url is None
               else "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")  # fmt: skip
        return db.version(), {str(r[0]) for r in db.execute(sql).fetchall()}
    finally:
        db.close()


def test_a_first_release_ledger_is_upgraded_not_refused(tmp_path: Path, ledger_url: str | None) -> None:
    state = tmp_path / "state"
    _first_release_ledger(state, ledger_url)
    ledger = Ledger(str(state), url=ledger_url)
    row = ledger.dispatch("eold000001")
    assert row is not None and row.state is DispatchState.STARTED
    assert row.job == Job("cpu-small", 1800, command=("python3", "a.py"))
    assert row.handle is not None and row.handle.state is HandleState.FINISHED  # "stopped" in the old words
    (a,) = ledger.attempts("eold000001")
    assert (a.state, a.provisioning, a.kind) == (AttemptState.RUNNING, Provisioning.SPOT, LaneKind.GCP)
    assert a.record().rung.key == a.rung
    ledger.close()
    version, indexes = _version_and_indexes(state, ledger_url)
    assert version == SCHEMA_VERSION
    assert {"dispatches_by_state", "attempts_by_state"} <= indexes


def test_a_new_ledger_is_at_the_current_version_and_reopens(tmp_path: Path, ledger_url: str | None) -> None:
    Ledger(str(tmp_path), url=ledger_url).close()
    Ledger(str(tmp_path), url=ledger_url).close()
    assert _version_and_indexes(tmp_path, ledger_url)[0] == SCHEMA_VERSION


def test_rows_are_typed_and_moves_follow_the_tables(tmp_path: Path, ledger_url: str | None) -> None:
    ledger = Ledger(str(tmp_path), url=ledger_url)
    job = Job("gpu-1", 600, command=("train",))
    ledger.new_dispatch("ed00000001", job)
    rung = Rung("fellows", LaneKind.SLURM, Provisioning.QUEUE, "", qos="high-eur")
    a = ledger.begin_attempt("ed00000001", rung, "eps-ed00000001")
    ledger.update_attempt(a.id, AttemptState.PENDING, handle="7")
    handle = Handle("fellows", LaneKind.SLURM, "7", rung.key, qos="high-eur", state=HandleState.RUNNING)
    assert ledger.set_dispatch("ed00000001", DispatchState.STARTED, handle=handle) is DispatchState.STARTED
    row = ledger.dispatch("ed00000001")
    assert row is not None and row.handle == handle and row.job == job
    with pytest.raises(IllegalMove, match="started -> walking"):
        ledger.set_dispatch("ed00000001", DispatchState.WALKING)
    assert ledger.set_dispatch("ed00000001", DispatchState.CANCELLED) is DispatchState.CANCELLED
    assert ledger.set_dispatch("ed00000001", DispatchState.STARTED) is None  # cancel is final: a lost race
    assert ledger.dispatch("ed00000001").state is DispatchState.CANCELLED  # type: ignore[union-attr]
    ledger.close()


def test_an_empty_or_foreign_ledger_file_is_refused_not_replaced(tmp_path: Path) -> None:
    from eps.shell.state.ledger import LedgerError

    (tmp_path / "ledger.sqlite3").write_bytes(b"")
    with pytest.raises(LedgerError, match="empty"):
        Ledger(str(tmp_path))
    assert (tmp_path / "ledger.sqlite3").read_bytes() == b""  # nothing written over it
    other = tmp_path / "other"
    other.mkdir()
    db = sqlite3.connect(other / "ledger.sqlite3")
    db.execute("CREATE TABLE photos (id INTEGER)")
    db.commit()
    db.close()
    with pytest.raises(LedgerError, match="not an eps ledger"):
        Ledger(str(other))


def test_a_new_ledger_appears_whole(tmp_path: Path) -> None:
    Ledger(str(tmp_path)).close()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ledger")) in (
        ["ledger.sqlite3"],
        ["ledger.sqlite3", "ledger.sqlite3-shm", "ledger.sqlite3-wal"],
    )


def test_a_row_that_cannot_be_read_is_quarantined_and_the_others_work(tmp_path: Path, ledger_url: str | None) -> None:
    from eps.shell.state.ledger import QuarantinedRow

    ledger = Ledger(str(tmp_path), url=ledger_url)
    job = Job("cpu-small", 60, command=("true",))
    for d in ("egood00001", "ebad000001", "egood00002"):
        ledger.new_dispatch(d, job)
    rung = Rung("gcp", LaneKind.GCP, Provisioning.SPOT, "", machine="e2-standard-4", zone="us-central1-a")
    ledger.begin_attempt("egood00002", rung, "eps-x")
    with ledger._tx() as db:
        db.execute("UPDATE dispatches SET job='{not json' WHERE id='ebad000001'")
        db.execute("UPDATE attempts SET state='exploded' WHERE dispatch='egood00002'")
    assert [r.id for r in ledger.dispatches()] == ["egood00001", "egood00002"]
    assert "ebad000001" in ledger.quarantined
    with pytest.raises(QuarantinedRow, match="egood00002"):
        ledger.attempts("egood00002")
    assert ledger.attempts_of(["egood00001", "egood00002"]) == {"egood00001": []}  # read together: left out
    ledger.close()


def test_the_attempts_of_many_dispatches_are_read_together_as_each_alone(tmp_path: Path,
                                                                        ledger_url: str | None) -> None:  # fmt: skip
    ledger = Ledger(str(tmp_path), url=ledger_url)
    job = Job("cpu-small", 60, command=("true",))
    rung = Rung("gcp", LaneKind.GCP, Provisioning.SPOT, "", machine="e2-standard-4", zone="us-central1-a")
    ids = [f"emany{i:05d}" for i in range(3)]
    for i, d in enumerate(ids):
        ledger.new_dispatch(d, job)
        for n in range(i):
            ledger.update_attempt(ledger.begin_attempt(d, rung, f"eps-{d}-{n}").id, AttemptState.FAILED, reason="x")
    together = ledger.attempts_of([*reversed(ids), "enone00000"])
    assert together == {**{d: ledger.attempts(d) for d in ids}, "enone00000": []}
    assert [len(together[d]) for d in ids] == [0, 1, 2] and [a.seq for a in together[ids[2]]] == [1, 2]
    many = [f"eabsent{i:04d}" for i in range(1200)] + [ids[2]]  # more than one query's worth
    assert ledger.attempts_of(many)[ids[2]] == ledger.attempts(ids[2])
    ledger.close()


def test_failed_dispatches_that_retry_errors_are_read_by_their_own_index(
    tmp_path: Path, ledger_url: str | None
) -> None:
    """What a revival reads on every ``eps status``: the ended dispatches whose job failed and
    whose policy retries errors, through a partial index, never a scan of every ended row
    (the plan is SQLite's; PostgreSQL's planner picks its partial index itself)."""
    ledger = Ledger(str(tmp_path), url=ledger_url)
    retrying = Job("cpu-small", 60, command=("false",), retry=("error",))
    plain = Job("cpu-small", 60, command=("false",), retry=())
    cases = {
        "d-failed-retrying": (retrying, 1, "exited"),
        "d-unknown-retrying": (retrying, None, "gone"),
        "d-succeeded": (retrying, 0, "exited"),
        "d-cancelled": (retrying, 130, "cancelled"),
        "d-no-retry": (plain, 1, "exited"),
    }
    for name, (job, code, status) in cases.items():
        ledger.new_dispatch(name, job)
        ledger.set_dispatch(name, DispatchState.WALKING)
        ledger.set_dispatch(name, DispatchState.ENDED)
        ledger.record_end(name, code, status, 1.0)
    found = ledger.select(states=(DispatchState.ENDED,), failed_retrying=True)
    assert sorted(r.id for r in found) == ["d-failed-retrying", "d-unknown-retrying"]
    ledger.close()
    if ledger_url is not None:
        return
    from eps.shell.state.migrations import FAILED_RETRYING, FAILED_RETRYING_INDEX

    db = sqlite3.connect(tmp_path / "ledger.sqlite3")
    sql = f"SELECT * FROM dispatches INDEXED BY {FAILED_RETRYING_INDEX} WHERE {FAILED_RETRYING} AND state IN (?)"  # noqa: S608
    plan = " ".join(str(row[-1]) for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", ("ended",)))
    assert plan == f"SCAN dispatches USING INDEX {FAILED_RETRYING_INDEX}"  # the partial index only


def test_a_database_holding_other_tables_is_refused_not_used(pg_url: str, tmp_path: Path) -> None:
    from eps.shell.state.ledger import LedgerError

    db = _raw(tmp_path, pg_url)
    db.execute("CREATE TABLE photos (id INTEGER)")
    db.close()
    with pytest.raises(LedgerError, match=r"not an eps ledger .*photos"):
        Ledger(str(tmp_path), url=pg_url)
