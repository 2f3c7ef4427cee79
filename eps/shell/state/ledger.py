"""The attempt ledger: SQLite in the state directory (the default) or PostgreSQL (``[state]
url``), safe under several eps processes.

One row per dispatch and one row per attempt (the attempt marker).  An attempt
is written *before* its provider call, with the deterministic name or request
id the call will use, so a crash between the call and its record can be
recovered by asking the provider for that name (``eps reconcile``).  Every state
change goes through the move tables of :mod:`eps.core.states`: a move the
tables do not allow raises :class:`~eps.core.states.IllegalMove`; a move out of
``cancelled`` is a lost race with ``eps cancel`` and is dropped.

Concurrency: short write transactions that each run alone (SQLite: ``BEGIN IMMEDIATE``;
PostgreSQL: an advisory lock, :mod:`eps.shell.state.pg_store`), so a state read and its
update never race another process; a dispatch being walked is owned through an exclusive ``flock``
on ``locks/<dispatch>.lock``, so a second executor on the same dispatch is
refused and reconcile can tell a live walk from a dead one.  On a ledger hosts share, a
supervisor also holds a lease on each dispatch it walks (:mod:`eps.shell.state.team`), and
:attr:`Ledger.guard` refuses its writes of a dispatch whose lease it may no longer act on.

The database is behind one small door (:class:`eps.shell.state.store.Store`): the SQL here
and the migrations (:mod:`eps.shell.state.migrations`) are the same for both backends.
An older ledger is upgraded, never refused.

Nothing secret is ever stored: rows hold lanes, targets, handles and reasons.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from attrs import frozen

from eps.core.model import CapacitySnapshot, Job, LaneKind, Provisioning, Rung, Terminal, terminal_of
from eps.core.outcome import AttemptOutcome, AttemptRecord, Handle, outcome_of
from eps.core.states import LIVE_ATTEMPT_STATES, AttemptState, DispatchState, HandleState, move_attempt, move_dispatch
from eps.shell.state import codec
from eps.shell.state.db import Row, Store
from eps.shell.state.errors import LedgerError, StateUnreachable
from eps.shell.state.migrations import FAILED_RETRYING, FAILED_RETRYING_INDEX, migrate
from eps.shell.state.store import open_store

if TYPE_CHECKING:
    from eps.shell.state.phases import PhaseRecord

__all__ = ["AttemptRow", "DispatchBusy", "DispatchRow", "Ledger", "LedgerError", "QuarantinedRow",
           "StateUnreachable"]  # fmt: skip


class DispatchBusy(RuntimeError):
    """Another eps process owns this dispatch right now."""


class QuarantinedRow(LedgerError):
    """A dispatch whose rows cannot be read: it is left alone and reported."""

    def __init__(self, dispatch: str, why: str) -> None:
        super().__init__(f"dispatch {dispatch}: its ledger rows cannot be read ({why}); it is left as it is")
        self.dispatch = dispatch


def _private_dir(path: str) -> None:
    """Make the state directory mode 0700, or tighten one of ours that others could read
    (an older eps made it 0755)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid == os.geteuid() and st.st_mode & 0o077:
        os.chmod(path, 0o700)


@frozen
class DispatchRow:
    id: str
    parent: str | None
    intent: str
    job: Job
    state: DispatchState
    terminal: Terminal | None
    message: str | None
    handle: Handle | None
    created_at: float
    updated_at: float
    exit_code: int | None = None  # the job's own exit code, as its wrapper recorded it
    job_status: str | None = None  # how it ended (eps.core.ends.JobEnd)
    ended_at: float | None = None
    pulled_at: float | None = None  # when its outputs and log were copied back
    started_at: float | None = None  # when eps first saw it started (running, or a held job queued)
    next_try_at: float | None = None  # waiting for capacity: when it plans again (then: since when it did)
    capacity_waits: int = 0  # rounds it has waited for capacity
    stored_at: float | None = None  # when its machine confirmed its outputs in storage (--storage)


@frozen
class AttemptRow:
    id: int
    dispatch: str
    seq: int
    rung: str
    lane: str
    kind: LaneKind
    target: str | None
    qos: str | None
    zone: str | None
    provisioning: Provisioning
    name: str
    handle: str | None
    state: AttemptState
    outcome: AttemptOutcome | None
    reason: str | None
    started_at: float
    updated_at: float

    def as_rung(self) -> Rung:
        """The rung this attempt tried, as far as the key is concerned (lane, target, zone, provisioning)."""
        return Rung(self.lane, self.kind, self.provisioning, "", qos=self.qos, machine=self.target, zone=self.zone)

    def record(self) -> AttemptRecord:
        return AttemptRecord(
            self.seq, self.as_rung(), self.state, self.outcome, self.handle, self.started_at, self.id, self.name
        )

    def as_handle(self, state: HandleState) -> Handle:
        return Handle(
            self.lane, self.kind, self.handle or "", self.rung, zone=self.zone, qos=self.qos, machine=self.target,
            state=state,
        )  # fmt: skip


class Ledger:
    """The ledger: ``<state_dir>/ledger.sqlite3``, or the PostgreSQL database at ``url``
    (the state directory then keeps the logs and the locks).  Methods are short transactions."""

    def __init__(self, state_dir: str, *, url: str | None = None, clock: Callable[[], float] = time.time,
                 host: str | None = None) -> None:  # fmt: skip
        self.state_dir = state_dir
        #: Whether other hosts may share this ledger (a database at ``url``): a host's supervisor
        #: then walks a dispatch only under its lease (:mod:`eps.shell.state.team`).
        self.shared = url is not None
        #: This host's name in the team's database (``[state] host``, else its hostname and a tag
        #: of the state directory); ``None`` on SQLite.
        self.host = (host or _default_host(state_dir)) if self.shared else None
        #: Called with a dispatch's id before each write of its rows (a supervisor's lease check,
        #: :meth:`eps.shell.state.team.Team.check`: it raises when this host may no longer act on it).
        self.guard: Callable[[str], None] | None = None
        self.logs = os.path.join(state_dir, "logs")
        self._clock = clock
        self._lock = threading.RLock()
        self.quarantined: dict[str, str] = {}  # dispatch id -> why its rows cannot be read
        self._locks: dict[str, IO[str]] = {}
        try:
            _private_dir(state_dir)  # the ledger, logs, env values and VM-lane runs are the user's alone
            os.makedirs(os.path.join(state_dir, "locks"), mode=0o700, exist_ok=True)
            os.makedirs(self.logs, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise LedgerError(f"state directory {state_dir}: {exc.strerror or exc}") from None
        try:
            # One connection shared by the fan-out's threads, serialized by self._lock.
            self._db: Store = open_store(state_dir, url)
        except OSError as exc:
            raise LedgerError(f"state directory {state_dir}: {exc.strerror or exc}") from None
        #: How messages name the ledger: its file, or its database's URL without a password.
        self.path = self._db.name
        try:
            migrate(self._db)
            # a non-ledger file fails here; on a server, count(*) would read every attempt: one row
            probe = "SELECT 1 FROM attempts LIMIT 1" if self.shared else "SELECT count(*) FROM attempts"
            self._db.execute(probe).fetchone()
        except self._db.errors as exc:
            self._db.close()
            raise self._failed(exc) from None
        except LedgerError:
            self._db.close()
            raise
        if not self.shared:  # an older eps's pipeline records, files then: moved into the ledger once
            from eps.shell.state.phases import import_files

            import_files(self)

    def _failed(self, exc: Exception) -> LedgerError:
        """The one-line error of a database error: :class:`StateUnreachable` when it is out of reach."""
        line = f"{self.path}: {self._db.why(exc)}"
        return StateUnreachable(line) if self._db.lost(exc) else LedgerError(line)

    def close(self) -> None:
        for fh in self._locks.values():
            fh.close()
        self._locks.clear()
        self._db.close()

    @contextmanager
    def _tx(self, dispatch: str | None = None) -> Iterator[Store]:
        with self._lock:
            if dispatch is not None and self.guard is not None:  # under the lock: checked after any wait for it
                self.guard(dispatch)
            try:
                with self._db.transaction():
                    yield self._db
            except self._db.errors as exc:
                raise self._failed(exc) from None

    # --- ownership --------------------------------------------------------------------------

    def _lock_path(self, dispatch: str) -> str:
        return os.path.join(self.state_dir, "locks", f"{dispatch}.lock")

    def acquire(self, dispatch: str) -> None:
        """Own ``dispatch`` until :meth:`release` or process exit; DispatchBusy if owned elsewhere."""
        if dispatch in self._locks:
            return
        path = self._lock_path(dispatch)
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

    @contextmanager
    def owning(self, dispatch: str) -> Iterator[bool]:
        """Own ``dispatch`` for the block if no other process does: yields whether it is owned
        (by this block, or already by this process).  A lock taken here is dropped after."""
        if dispatch in self._locks:
            yield True
            return
        try:
            self.acquire(dispatch)
        except DispatchBusy:
            yield False
            return
        try:
            yield True
        finally:
            self.release(dispatch)

    def release(self, dispatch: str) -> None:
        fh = self._locks.pop(dispatch, None)
        if fh is not None:
            fh.close()

    def is_owned_elsewhere(self, dispatch: str) -> bool:
        """True when another live process holds the dispatch's lock."""
        from eps.shell.util.flocks import held_elsewhere

        return dispatch not in self._locks and held_elsewhere(self._lock_path(dispatch))

    # --- dispatches ---------------------------------------------------------------------------

    def new_dispatch(self, dispatch: str, job: Job, parent: str | None = None) -> None:
        with self._tx() as db:
            self._insert(db, dispatch, job, parent)

    def new_pipeline(self, dispatch: str, job: Job, children: Sequence[tuple[str, Job]],
                     phases: Sequence[PhaseRecord]) -> None:  # fmt: skip
        """Pipeline ``dispatch``, a row per phase (``children``) and its record, in one transaction."""
        from eps.shell.state.phases import insert

        with self._tx() as db:
            self._insert(db, dispatch, job, None)
            for child, child_job in children:
                self._insert(db, child, child_job, dispatch)
            insert(db, dispatch, phases)

    def _insert(self, db: Store, dispatch: str, job: Job, parent: str | None) -> None:
        now = self._clock()
        try:
            db.execute(
                "INSERT INTO dispatches (id, parent, intent, job, state, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (dispatch, parent, job.intent, codec.job_to_json(job), DispatchState.WALKING.value, now, now),
            )
        except db.integrity:
            raise LedgerError(f"dispatch {dispatch} already exists") from None

    def relaunch(self, dispatch: str, job: Job, message: str) -> DispatchState | None:
        """Walk ``dispatch`` again as ``job`` (its restart count raised): back to walking, its
        end and handle cleared; ``None`` when it was cancelled meanwhile."""
        with self._tx(dispatch) as db:
            if _move(db, dispatch, DispatchState.WALKING) is None:
                return None
            db.execute(
                "UPDATE dispatches SET state=?, job=?, message=?, handle=NULL, exit_code=NULL, job_status=NULL,"
                " ended_at=NULL, pulled_at=NULL, stored_at=NULL, updated_at=? WHERE id=?",
                (DispatchState.WALKING.value, codec.job_to_json(job), message, self._clock(), dispatch),
            )
            return DispatchState.WALKING

    def wait_for_capacity(self, dispatch: str, next_try_at: float, message: str) -> DispatchState | None:
        """No capacity: ``dispatch`` waits until ``next_try_at``; ``None`` if cancelled meanwhile."""
        with self._tx(dispatch) as db:
            if _move(db, dispatch, DispatchState.WAITING) is None:
                return None
            db.execute(
                "UPDATE dispatches SET state=?, message=?, next_try_at=?, capacity_waits=capacity_waits+1,"
                " updated_at=? WHERE id=?",
                (DispatchState.WAITING.value, message, next_try_at, self._clock(), dispatch),
            )
            return DispatchState.WAITING

    def set_dispatch(
        self,
        dispatch: str,
        state: DispatchState,
        *,
        terminal: Terminal | None = None,
        message: str | None = None,
        handle: Handle | None = None,
    ) -> DispatchState | None:
        """Move ``dispatch`` to ``state``; the state now in force, or ``None`` when the move
        was dropped (the dispatch was cancelled meanwhile: cancel is final)."""
        state = DispatchState(state)
        with self._tx(dispatch) as db:
            applied = _move(db, dispatch, state)
            if applied is None:
                return None
            now = self._clock()
            started = now if applied is DispatchState.STARTED else None
            db.execute(
                "UPDATE dispatches SET state=?, terminal=coalesce(?, terminal), message=coalesce(?, message),"
                " handle=coalesce(?, handle), started_at=coalesce(started_at, ?), updated_at=? WHERE id=?",
                (
                    applied.value, terminal, message, codec.handle_to_json(handle) if handle else None,
                    started, now, dispatch,
                ),
            )  # fmt: skip
            return applied

    def record_end(self, dispatch: str, exit_code: int | None, job_status: str | None, ended_at: float) -> None:
        """What the job's wrapper recorded when it ended (first record wins: it is the truth)."""
        with self._tx(dispatch) as db:
            db.execute(
                "UPDATE dispatches SET exit_code=coalesce(exit_code, ?), job_status=coalesce(job_status, ?),"
                " ended_at=coalesce(ended_at, ?), updated_at=? WHERE id=?",
                (exit_code, job_status, ended_at, self._clock(), dispatch),
            )

    def mark_pulled(self, dispatch: str, *, stored: bool = False) -> None:
        """Its outputs came back (or, ``stored``, are confirmed in storage by its machine)."""
        with self._tx(dispatch) as db:
            sql = "UPDATE dispatches SET stored_at=?, updated_at=? WHERE id=?" if stored else (
                "UPDATE dispatches SET pulled_at=?, updated_at=? WHERE id=?")  # fmt: skip
            db.execute(sql, (self._clock(),) * 2 + (dispatch,))

    def dispatch(self, dispatch: str) -> DispatchRow | None:
        """The row of ``dispatch``; ``None`` when there is none or it cannot be read (then it
        is in :attr:`quarantined`, with the reason, and every other row keeps working)."""
        found = self._rows(self._query("SELECT * FROM dispatches WHERE id=?", (dispatch,)))
        return found[0] if found else None

    def _rows(self, rows: list[Row]) -> list[DispatchRow]:
        found = []
        for r in rows:
            try:
                found.append(_dispatch_row(r))
            except (codec.CodecError, ValueError) as exc:
                self.quarantined[str(r["id"])] = str(exc)
        return found

    def dispatches(self, *, states: tuple[DispatchState, ...] | None = None) -> list[DispatchRow]:
        if states:
            marks = ",".join("?" * len(states))
            rows = self._query(
                f"SELECT * FROM dispatches WHERE state IN ({marks}) ORDER BY created_at",  # noqa: S608
                tuple(s.value for s in states),
            )
        else:
            rows = self._query("SELECT * FROM dispatches ORDER BY created_at", ())
        return self._rows(rows)

    def recent(self, states: tuple[DispatchState, ...], limit: int | None) -> list[DispatchRow]:
        """Dispatches in ``states`` and the ``limit`` newest others (every one: ``None``), oldest
        first.  Indexed: answers in milliseconds for a ledger of 100,000 dispatches."""
        if limit is None:
            return self.dispatches()
        marks = ",".join("?" * len(states))
        values = tuple(s.value for s in states)
        rows = self._query(
            f"SELECT * FROM dispatches WHERE state IN ({marks}) UNION"  # noqa: S608
            " SELECT * FROM (SELECT * FROM dispatches ORDER BY created_at DESC LIMIT ?) AS newest ORDER BY created_at",
            (*values, limit),
        )
        return sorted(self._rows(rows), key=lambda r: r.created_at)

    def select(
        self,
        *,
        states: tuple[DispatchState, ...] | None = None,
        since: float | None = None,
        intent: str | None = None,
        limit: int | None = None,
        failed_retrying: bool = False,
        owner_host: str | None = None,
    ) -> list[DispatchRow]:
        """The newest ``limit`` dispatches (all: ``None``) in ``states``, submitted at or after
        ``since``, of ``intent``, (``failed_retrying``) whose job failed and retries errors,
        (``owner_host``) whose root that host owns now, picked by the server; oldest first."""
        where: list[str] = [FAILED_RETRYING] if failed_retrying else []
        args: list[Any] = []
        if owner_host is not None:  # a copy's owner is its root's (one level: a root has no parent)
            where.append(
                "(CASE WHEN parent IS NULL THEN owner_host"
                " ELSE (SELECT root.owner_host FROM dispatches AS root WHERE root.id = dispatches.parent) END) = ?"
            )
            args.append(owner_host)
        if states:
            where.append(f"state IN ({','.join('?' * len(states))})")
            args.extend(s.value for s in states)
        if since is not None:
            where.append("created_at >= ?")
            args.append(since)
        if intent is not None:
            where.append("intent = ?")
            args.append(intent)
        table = "dispatches" + (self._db.indexed_by(FAILED_RETRYING_INDEX) if failed_retrying else "")
        sql = f"SELECT * FROM {table}" + (" WHERE " + " AND ".join(where) if where else "")  # noqa: S608 (fixed clauses)
        sql += " ORDER BY created_at DESC" + (" LIMIT ?" if limit is not None else "")
        rows = self._query(sql, (*args, *(() if limit is None else (limit,))))
        return sorted(self._rows(rows), key=lambda r: r.created_at)

    def children(self, parent: str) -> list[DispatchRow]:
        return self._rows(self._query("SELECT * FROM dispatches WHERE parent=? ORDER BY id", (parent,)))

    # --- attempts -----------------------------------------------------------------------------

    def begin_attempt(self, dispatch: str, rung: Rung, name: str) -> AttemptRow:
        """Record an attempt *before* its provider call, with the name/request id it will use."""
        now = self._clock()
        with self._tx(dispatch) as db:
            query = "SELECT coalesce(max(seq), 0) + 1 FROM attempts WHERE dispatch=?"
            seq = db.execute(query, (dispatch,)).fetchone()[0]
            cur = db.execute(
                "INSERT INTO attempts (dispatch, seq, rung, lane, kind, target, qos, zone, provisioning, name,"
                " state, started_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id",
                (
                    dispatch, seq, rung.key, rung.lane, rung.kind.value, rung.machine, rung.qos,
                    rung.zone, rung.provisioning.value, name, AttemptState.INTENT.value, now, now,
                ),
            )  # fmt: skip
            attempt_id = cur.fetchone()[0]
        row = self.attempt(int(attempt_id))
        if row is None:  # pragma: no cover - just inserted
            raise LedgerError("attempt vanished")
        return row

    def next_seq(self, dispatch: str) -> int:
        rows = self._query("SELECT coalesce(max(seq), 0) + 1 FROM attempts WHERE dispatch=?", (dispatch,))
        return int(rows[0][0])

    def update_attempt(
        self,
        attempt_id: int,
        state: AttemptState,
        *,
        handle: str | None = None,
        outcome: AttemptOutcome | None = None,
        reason: str | None = None,
    ) -> None:
        state = AttemptState(state)
        with self._tx() as db:
            row = db.execute("SELECT state, dispatch, seq FROM attempts WHERE id=?", (attempt_id,)).fetchone()
            if row is None:
                raise LedgerError(f"no attempt {attempt_id} in the ledger")
            if self.guard is not None:
                self.guard(str(row[1]))
            applied = move_attempt(f"{row[1]}#{row[2]}", AttemptState(row[0]), state)
            db.execute(
                "UPDATE attempts SET state=?, handle=coalesce(?, handle), outcome=coalesce(?, outcome),"
                " reason=coalesce(?, reason), updated_at=? WHERE id=?",
                (applied.value, handle, outcome, reason, self._clock(), attempt_id),
            )

    def attempt(self, attempt_id: int) -> AttemptRow | None:
        rows = self._query("SELECT * FROM attempts WHERE id=?", (attempt_id,))
        return _attempt_row(rows[0]) if rows else None

    def attempts(self, dispatch: str) -> list[AttemptRow]:
        """The attempts of ``dispatch`` in order.  One that cannot be read quarantines the whole
        dispatch (:class:`LedgerError`): judging a dispatch on part of its story could release
        what it still needs."""
        rows = self._query("SELECT * FROM attempts WHERE dispatch=? ORDER BY seq", (dispatch,))
        try:
            return [_attempt_row(r) for r in rows]
        except (ValueError, TypeError) as exc:
            self.quarantined[dispatch] = f"an attempt row cannot be read: {exc}"
            raise QuarantinedRow(dispatch, self.quarantined[dispatch]) from None

    def attempts_of(self, dispatches: list[str]) -> dict[str, list[AttemptRow]]:
        """The attempts of each of ``dispatches``, in order, read in one query (per 500): what
        :meth:`attempts` gives each, without a round trip per dispatch.  A dispatch with an
        attempt that cannot be read is quarantined (as there) and left out."""
        found: dict[str, list[AttemptRow]] = {d: [] for d in dispatches}
        wanted = list(found)
        for i in range(0, len(wanted), 500):
            part = wanted[i : i + 500]
            sql = f"SELECT * FROM attempts WHERE dispatch IN ({','.join('?' * len(part))}) ORDER BY dispatch, seq"  # noqa: S608
            for r in self._query(sql, tuple(part)):
                d = str(r["dispatch"])
                if d not in found:
                    continue  # quarantined above
                try:
                    found[d].append(_attempt_row(r))
                except (ValueError, TypeError) as exc:
                    self.quarantined[d] = f"an attempt row cannot be read: {exc}"
                    del found[d]
        return found

    def live_attempts(self) -> list[AttemptRow]:
        marks = ",".join("?" * len(LIVE_ATTEMPT_STATES))
        states = tuple(s.value for s in LIVE_ATTEMPT_STATES)
        rows = self._query(f"SELECT * FROM attempts WHERE state IN ({marks}) ORDER BY id", states)  # noqa: S608
        return [_attempt_row(r) for r in rows]

    def remember(self, snapshot: CapacitySnapshot) -> CapacitySnapshot:
        """``snapshot`` with the machines eps made and lost lately, read now (boot loops:
        :mod:`eps.shell.state.lives`)."""
        from eps.shell.state import lives

        now = self._clock()
        return lives.remembered(snapshot, lives.lives_of(self._query(lives.SQL, lives.args(now))), now)

    def rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]:
        """A read of a table another module keeps here (notify's: eps.shell.notify.book)."""
        return self._query(sql, args)

    def write(self, sql: str, args: tuple[Any, ...] = ()) -> None:
        """One write to such a table, in its own short transaction."""
        with self._tx() as db:
            db.execute(sql, args)

    def transaction(self) -> contextlib.AbstractContextManager[Store]:
        """A write transaction of another module's (the team's leases: eps.shell.state.team)."""
        return self._tx()

    def _query(self, sql: str, args: tuple[Any, ...]) -> list[Row]:
        with self._lock:
            try:
                return list(self._db.execute(sql, args).fetchall())
            except self._db.errors as exc:
                raise self._failed(exc) from None


def _default_host(state_dir: str) -> str:
    """This host's name in a team unless ``[state] host`` says: its hostname and a tag of its
    state directory (two state directories of one machine, two users' or a test's, are two
    hosts: each holds its own leases)."""
    import socket
    import zlib

    tag = zlib.crc32(os.path.realpath(state_dir).encode()) & 0xFFFF_FFFF
    return f"{socket.gethostname()[:55]}.{tag:08x}"


def _move(db: Store, dispatch: str, to: DispatchState) -> DispatchState | None:
    """The state ``dispatch`` may move to from the one it is in (:func:`move_dispatch`), read
    inside the caller's transaction; ``None`` when the move is dropped (cancel is final)."""
    row = db.execute("SELECT state FROM dispatches WHERE id=?", (dispatch,)).fetchone()
    if row is None:
        raise LedgerError(f"no dispatch {dispatch!r} in the ledger")
    return move_dispatch(dispatch, DispatchState(row[0]), to)


def _dispatch_row(r: Row) -> DispatchRow:
    return DispatchRow(
        id=r["id"],
        parent=r["parent"],
        intent=r["intent"],
        job=codec.job_from_json(r["job"]),
        state=DispatchState(r["state"]),
        terminal=terminal_of(r["terminal"]),
        message=r["message"],
        handle=codec.handle_from_json(r["handle"]) if r["handle"] else None,
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        exit_code=r["exit_code"],
        job_status=r["job_status"],
        ended_at=r["ended_at"],
        pulled_at=r["pulled_at"],
        started_at=r["started_at"],
        next_try_at=r["next_try_at"],
        capacity_waits=r["capacity_waits"],
        stored_at=r["stored_at"],
    )


def _attempt_row(r: Row) -> AttemptRow:
    fields = {k: r[k] for k in r.keys()}  # noqa: SIM118
    fields.update(kind=LaneKind(fields["kind"]), provisioning=Provisioning(fields["provisioning"]),
                  state=AttemptState(fields["state"]), outcome=outcome_of(fields["outcome"]))  # fmt: skip
    return AttemptRow(**fields)
