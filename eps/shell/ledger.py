"""The attempt ledger: SQLite in the state directory, safe under several eps processes.

One row per dispatch and one row per attempt (the attempt marker).  An attempt
is written *before* its provider call, with the deterministic name or request
id the call will use, so a crash between the call and its record can be
recovered by asking the provider for that name (``eps reconcile``).

Concurrency: WAL journal, a busy timeout, and short ``BEGIN IMMEDIATE``
transactions; a dispatch being walked is owned through an exclusive ``flock``
on ``locks/<dispatch>.lock``, so a second executor on the same dispatch is
refused and reconcile can tell a live walk from a dead one.

Nothing secret is ever stored: rows hold lanes, targets, handles and reasons.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from attrs import frozen

from eps.core.model import Job, Rung

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS dispatches (
    id TEXT PRIMARY KEY,
    parent TEXT,
    intent TEXT NOT NULL,
    job TEXT NOT NULL,
    state TEXT NOT NULL,
    terminal TEXT,
    message TEXT,
    handle TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dispatch TEXT NOT NULL REFERENCES dispatches(id),
    seq INTEGER NOT NULL,
    rung TEXT NOT NULL,
    lane TEXT NOT NULL,
    kind TEXT NOT NULL,
    target TEXT,
    qos TEXT,
    zone TEXT,
    provisioning TEXT NOT NULL,
    name TEXT NOT NULL,
    handle TEXT,
    state TEXT NOT NULL,
    outcome TEXT,
    reason TEXT,
    started_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    UNIQUE (dispatch, seq)
);
CREATE INDEX IF NOT EXISTS attempts_by_dispatch ON attempts(dispatch);
"""

#: Dispatch states.  ``walking``: an executor is (or was, if it died) walking the plan.
WALKING = "walking"
STARTED = "started"  # something runs (or, for a pin, is queued: HELD)
HELD = "held"
FAILED = "failed"
CANCELLED = "cancelled"  # final: nothing of it may stay alive
INTERRUPTED = "interrupted"  # the walk died; `eps execute --resume` continues it
ENDED = "ended"  # what started has finished
PREEMPTED = "preempted"  # a spot VM was taken back; `--resume` plans again
#: Attempt states.  ``intent``: written, provider call not yet known to have happened.
A_INTENT, A_SUBMITTED, A_RUNNING, A_PENDING, A_FAILED, A_ADVANCED, A_CANCELLED, A_GONE, A_ENDED = (
    "intent",
    "submitted",
    "running",
    "pending",
    "failed",
    "advanced",
    "cancelled",
    "gone",
    "ended",
)
LIVE_ATTEMPT_STATES = (A_INTENT, A_SUBMITTED, A_RUNNING, A_PENDING)


class LedgerError(RuntimeError):
    """The state directory or ledger cannot be used (read-only, full, corrupt).  One line."""


class DispatchBusy(RuntimeError):
    """Another eps process owns this dispatch right now."""


@frozen
class DispatchRow:
    id: str
    parent: str | None
    intent: str
    job: dict[str, Any]
    state: str
    terminal: str | None
    message: str | None
    handle: dict[str, Any] | None
    created_at: float
    updated_at: float


@frozen
class AttemptRow:
    id: int
    dispatch: str
    seq: int
    rung: str
    lane: str
    kind: str
    target: str | None
    qos: str | None
    zone: str | None
    provisioning: str
    name: str
    handle: str | None
    state: str
    outcome: str | None
    reason: str | None
    started_at: float
    updated_at: float


def job_to_json(job: Job) -> str:
    from eps.shell.views import job_dict

    return json.dumps(job_dict(job), sort_keys=True)


def job_from_dict(d: dict[str, Any]) -> Job:
    return Job(
        intent=d["intent"],
        duration_s=int(d["duration_s"]),
        restartable=bool(d["restartable"]),
        footprint_gb=float(d["footprint_gb"]),
        gradient_fit=bool(d["gradient_fit"]),
        count=int(d["count"]),
        pin=d["pin"],
        command=tuple(d["command"]),
    )


class Ledger:
    """The ledger at ``<state_dir>/ledger.sqlite3``.  Methods are short transactions."""

    def __init__(self, state_dir: str, *, clock: Any = time.time) -> None:
        self.state_dir = state_dir
        self.path = os.path.join(state_dir, "ledger.sqlite3")
        self._clock = clock
        self._lock = threading.RLock()
        try:
            os.makedirs(os.path.join(state_dir, "locks"), exist_ok=True)
            os.makedirs(os.path.join(state_dir, "logs"), exist_ok=True)
            # One connection shared by the fan-out's threads, serialized by self._lock.
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA busy_timeout = 30000")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.execute("PRAGMA foreign_keys = ON")
            self._db.executescript(_SCHEMA)  # idempotent; executescript commits by itself
            row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) != SCHEMA_VERSION:
                raise LedgerError(f"{self.path}: ledger schema {row[0]}, this eps reads {SCHEMA_VERSION}")
            self._db.execute("SELECT count(*) FROM attempts").fetchone()
        except sqlite3.DatabaseError as exc:
            if "unable to open" in str(exc) and not os.access(state_dir, os.W_OK):  # e.g. a read-only mount
                raise LedgerError(f"{self.path}: {_why(sqlite3.OperationalError('readonly'))}") from None
            raise LedgerError(f"{self.path}: {_why(exc)}") from None
        except OSError as exc:
            raise LedgerError(f"state directory {state_dir}: {exc.strerror or exc}") from None
        self._locks: dict[str, IO[str]] = {}

    def close(self) -> None:
        for fh in self._locks.values():
            fh.close()
        self._locks.clear()
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                raise LedgerError(f"{self.path}: {_why(exc)}") from None

    # --- ownership --------------------------------------------------------------------------

    def acquire(self, dispatch: str) -> None:
        """Own ``dispatch`` until :meth:`release` or process exit; DispatchBusy if owned elsewhere."""
        if dispatch in self._locks:
            return
        path = os.path.join(self.state_dir, "locks", f"{dispatch}.lock")
        try:
            fh = open(path, "a+")  # noqa: SIM115  (held open as the lock)
        except OSError as exc:
            raise LedgerError(f"{path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise DispatchBusy(f"dispatch {dispatch} is being walked by another eps process") from None
        self._locks[dispatch] = fh

    def release(self, dispatch: str) -> None:
        fh = self._locks.pop(dispatch, None)
        if fh is not None:
            fh.close()

    def is_owned_elsewhere(self, dispatch: str) -> bool:
        """True when another live process holds the dispatch's lock."""
        if dispatch in self._locks:
            return False
        path = os.path.join(self.state_dir, "locks", f"{dispatch}.lock")
        if not os.path.exists(path):
            return False
        with open(path, "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh, fcntl.LOCK_UN)
        return False

    # --- dispatches ---------------------------------------------------------------------------

    def new_dispatch(self, dispatch: str, job: Job, parent: str | None = None) -> None:
        now = self._clock()
        with self._tx() as db:
            try:
                db.execute(
                    "INSERT INTO dispatches (id, parent, intent, job, state, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (dispatch, parent, job.intent, job_to_json(job), WALKING, now, now),
                )
            except sqlite3.IntegrityError:
                raise LedgerError(f"dispatch {dispatch} already exists") from None

    def set_dispatch(
        self,
        dispatch: str,
        state: str,
        *,
        terminal: str | None = None,
        message: str | None = None,
        handle: dict[str, Any] | None = None,
    ) -> None:
        # ``cancelled`` is final: a walker that finishes a create after ``eps cancel`` must not
        # turn the dispatch back into ``started`` (cancel would then keep what it made).
        with self._tx() as db:
            db.execute(
                "UPDATE dispatches SET state=?, terminal=coalesce(?, terminal), message=coalesce(?, message),"
                " handle=coalesce(?, handle), updated_at=? WHERE id=? AND (state != ? OR ? = ?)",
                (
                    state, terminal, message, json.dumps(handle) if handle else None, self._clock(), dispatch,
                    CANCELLED, state, CANCELLED,
                ),
            )  # fmt: skip

    def dispatch(self, dispatch: str) -> DispatchRow | None:
        row = self._query("SELECT * FROM dispatches WHERE id=?", (dispatch,))
        return _dispatch_row(row[0]) if row else None

    def dispatches(self, *, states: tuple[str, ...] | None = None) -> list[DispatchRow]:
        if states:
            marks = ",".join("?" * len(states))
            rows = self._query(f"SELECT * FROM dispatches WHERE state IN ({marks}) ORDER BY created_at", states)  # noqa: S608
        else:
            rows = self._query("SELECT * FROM dispatches ORDER BY created_at", ())
        return [_dispatch_row(r) for r in rows]

    def children(self, parent: str) -> list[DispatchRow]:
        return [_dispatch_row(r) for r in self._query("SELECT * FROM dispatches WHERE parent=? ORDER BY id", (parent,))]

    # --- attempts -----------------------------------------------------------------------------

    def begin_attempt(self, dispatch: str, rung: Rung, name: str) -> AttemptRow:
        """Record an attempt *before* its provider call, with the name/request id it will use."""
        now = self._clock()
        with self._tx() as db:
            seq = db.execute("SELECT coalesce(max(seq), 0) + 1 FROM attempts WHERE dispatch=?", (dispatch,)).fetchone()[
                0
            ]
            cur = db.execute(
                "INSERT INTO attempts (dispatch, seq, rung, lane, kind, target, qos, zone, provisioning, name,"
                " state, started_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    dispatch,
                    seq,
                    rung.key,
                    rung.lane,
                    rung.kind.value,
                    rung.machine,
                    rung.qos,
                    rung.zone,
                    rung.provisioning.value,
                    name,
                    A_INTENT,
                    now,
                    now,
                ),
            )
            attempt_id = cur.lastrowid
        row = self.attempt(int(attempt_id or 0))
        if row is None:  # pragma: no cover - just inserted
            raise LedgerError("attempt vanished")
        return row

    def update_attempt(
        self,
        attempt_id: int,
        state: str,
        *,
        handle: str | None = None,
        outcome: str | None = None,
        reason: str | None = None,
    ) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE attempts SET state=?, handle=coalesce(?, handle), outcome=coalesce(?, outcome),"
                " reason=coalesce(?, reason), updated_at=? WHERE id=?",
                (state, handle, outcome, reason, self._clock(), attempt_id),
            )

    def attempt(self, attempt_id: int) -> AttemptRow | None:
        rows = self._query("SELECT * FROM attempts WHERE id=?", (attempt_id,))
        return _attempt_row(rows[0]) if rows else None

    def attempts(self, dispatch: str) -> list[AttemptRow]:
        return [
            _attempt_row(r) for r in self._query("SELECT * FROM attempts WHERE dispatch=? ORDER BY seq", (dispatch,))
        ]

    def live_attempts(self) -> list[AttemptRow]:
        marks = ",".join("?" * len(LIVE_ATTEMPT_STATES))
        rows = self._query(f"SELECT * FROM attempts WHERE state IN ({marks}) ORDER BY id", LIVE_ATTEMPT_STATES)  # noqa: S608
        return [_attempt_row(r) for r in rows]

    def _query(self, sql: str, args: tuple[Any, ...]) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return list(self._db.execute(sql, args).fetchall())
            except sqlite3.DatabaseError as exc:
                raise LedgerError(f"{self.path}: {_why(exc)}") from None


def _why(exc: sqlite3.DatabaseError) -> str:
    text = str(exc)
    if "readonly" in text or "read-only" in text:
        return "the state directory is read-only (set EPS_STATE_DIR to a writable directory)"
    if "disk is full" in text or "database or disk is full" in text:
        return "the disk holding the state directory is full"
    if "not a database" in text or "malformed" in text:
        return "the ledger file is corrupt (move it aside; `eps reconcile` rebuilds nothing it cannot see)"
    return text


def _dispatch_row(r: sqlite3.Row) -> DispatchRow:
    return DispatchRow(
        id=r["id"],
        parent=r["parent"],
        intent=r["intent"],
        job=json.loads(r["job"]),
        state=r["state"],
        terminal=r["terminal"],
        message=r["message"],
        handle=json.loads(r["handle"]) if r["handle"] else None,
        created_at=r["created_at"],
        updated_at=r["updated_at"],
    )


def _attempt_row(r: sqlite3.Row) -> AttemptRow:
    return AttemptRow(**{k: r[k] for k in r.keys()})  # noqa: SIM118
