"""The ledger's schema, as ordered migrations.  ``MIGRATIONS[n]`` takes a ledger at
version ``n - 1`` to version ``n`` inside one transaction (:func:`migrate`); the version is
``PRAGMA user_version`` in SQLite, the ``eps_schema`` table in PostgreSQL.  The same
migrations make both backends' schema (:mod:`eps.shell.state.store` translates the words).
Version 1 is the first release's schema (which kept its version in a ``meta`` table
instead); a ledger is upgraded, never refused."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eps.shell.state.db import Store

_V1 = """
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

#: The first release stored each lane's own word for a handle's state; version 2 uses
#: one vocabulary (eps.core.states.HandleState).
_HANDLE_WORDS = {
    "running": "running",
    "pending": "pending",
    "starting": "starting",
    "provisioning": "starting",
    "configuring": "starting",
    "completing": "running",
    "stopping": "stopping",
    "repairing": "running",
    "preempted": "preempted",
    "gone": "gone",
    "deleted": "released",
    "unreleased": "unreleased",
}


def _v1(db: Store) -> None:
    for statement in _V1.strip().split(";"):
        if statement.strip():
            db.execute(statement)


def _v2(db: Store) -> None:
    """Indexes for status and reconcile at scale; one vocabulary for handle states."""
    db.execute("CREATE INDEX IF NOT EXISTS dispatches_by_state ON dispatches(state)")
    db.execute("CREATE INDEX IF NOT EXISTS dispatches_by_created ON dispatches(created_at)")
    db.execute("CREATE INDEX IF NOT EXISTS dispatches_by_parent ON dispatches(parent)")
    db.execute("CREATE INDEX IF NOT EXISTS attempts_by_state ON attempts(state)")
    for row in db.execute("SELECT id, handle FROM dispatches WHERE handle IS NOT NULL").fetchall():
        row_id, text = row[0], row[1]
        handle = json.loads(text)
        word = str(handle.get("state") or "running")
        handle["state"] = _HANDLE_WORDS.get(word, "finished")
        handle.setdefault("reason", None)
        db.execute("UPDATE dispatches SET handle=? WHERE id=?", (json.dumps(handle), row_id))
    db.execute("DROP TABLE IF EXISTS meta")


def _v3(db: Store) -> None:
    """What the job itself did, as its wrapper recorded it, and when its outputs came back."""
    for column in ("exit_code INTEGER", "job_status TEXT", "ended_at REAL", "pulled_at REAL"):
        db.execute(f"ALTER TABLE dispatches ADD COLUMN {column}")


def _v4(db: Store) -> None:
    """When the dispatch's job started (``eps status``'s started and runtime columns), and an
    index for ``eps status --intent``."""
    db.execute("ALTER TABLE dispatches ADD COLUMN started_at REAL")
    db.execute("CREATE INDEX IF NOT EXISTS dispatches_by_intent ON dispatches(intent)")


def _v5(db: Store) -> None:
    """A dispatch waiting for capacity (``--retry no-capacity``): when its supervisor plans
    again, and how many rounds it has waited."""
    db.execute("ALTER TABLE dispatches ADD COLUMN next_try_at REAL")
    db.execute("ALTER TABLE dispatches ADD COLUMN capacity_waits INTEGER NOT NULL DEFAULT 0")


#: A job that ended non-zero (or with its code unknown) and may retry ``error`` (its policy decides):
#: the rows a revival reads on every ``eps status``, so they have an index of their own (:func:`_v6`).
FAILED_RETRYING = (
    "job_status IS NOT NULL AND job_status != 'cancelled' AND coalesce(exit_code, 1) != 0 AND job LIKE '%\"error\"%'"
)
FAILED_RETRYING_INDEX = "dispatches_failed_retrying"


def _v6(db: Store) -> None:
    """A partial index of the failed dispatches that may retry errors: a revival reads them
    without scanning every ended dispatch (100,000 rows: 24 ms, now well under 1 ms)."""
    db.execute(f"CREATE INDEX IF NOT EXISTS {FAILED_RETRYING_INDEX} ON dispatches(created_at) WHERE {FAILED_RETRYING}")


def _v7(db: Store) -> None:
    """Notifications (:mod:`eps.shell.notify`): the dispatches that may still owe one
    (``open``: an index of their own, so a revival asks in well under a millisecond), and per
    dispatch and target (named by its scheme and host, never its URL) how far into the
    dispatch's event log the target has been told, and for which end its outputs-waiting
    notice is done.  No URL, token or message is stored."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS notify_watch (dispatch TEXT PRIMARY KEY, open INTEGER NOT NULL DEFAULT 1,"
        " since REAL NOT NULL)"
    )
    db.execute("CREATE INDEX IF NOT EXISTS notify_watch_open ON notify_watch(dispatch) WHERE open = 1")
    db.execute(
        "CREATE TABLE IF NOT EXISTS notify_cursors (dispatch TEXT NOT NULL, target TEXT NOT NULL,"
        ' "offset" INTEGER NOT NULL DEFAULT 0, pull_done REAL NOT NULL DEFAULT 0, updated_at REAL NOT NULL,'
        " PRIMARY KEY (dispatch, target))"
    )


def _v8(db: Store) -> None:
    """Object storage (:mod:`eps.core.storage`): when a job's machine confirmed its outputs
    there (its outputs are home without a pull to this machine)."""
    db.execute("ALTER TABLE dispatches ADD COLUMN stored_at REAL")


def _v9(db: Store) -> None:
    """A team on one database (:mod:`eps.shell.state.team`): the hosts that share it (name,
    user, eps's public key there, when last seen), and per dispatch its owner host and user,
    when that host's lease on it ends (the database's clock), and what a takeover walks it
    with (its inputs: snapshot, grants and settings, no secret).  Unused on SQLite."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS hosts (name TEXT PRIMARY KEY, user_name TEXT NOT NULL, public_key TEXT,"
        " seen_at REAL NOT NULL)"
    )
    for column in ("owner_host TEXT", "owner_user TEXT", "lease_until REAL", "inputs TEXT"):
        db.execute(f"ALTER TABLE dispatches ADD COLUMN {column}")


def _v10(db: Store) -> None:
    """A team's cancels: who cancelled a dispatch, from which host (JSON: ``user``, ``host``;
    ``eps cancel`` on a ledger hosts share).  Unused on SQLite."""
    db.execute("ALTER TABLE dispatches ADD COLUMN cancelled_by TEXT")


def _v11(db: Store) -> None:
    """A team's dispatches: who started each one, from which host (``eps status``'s
    ``started_by``), recorded once when the dispatch is first shared and never changed by a
    takeover (``owner_host``/``owner_user`` name the lease's holder).  Rows from before: null.
    Unused on SQLite."""
    for column in ("started_host TEXT", "started_user TEXT"):
        db.execute(f"ALTER TABLE dispatches ADD COLUMN {column}")


def _v12(db: Store) -> None:
    """A pipeline's own record (:mod:`eps.shell.state.phases`): per pipeline D and phase, in the
    file's order (``seq``), its name, its child row, what it needs (JSON list), and ``waits``
    (1: not a phase but the dispatch ``--after`` waits for).  Kept before in
    ``<state>/pipelines/D.json`` on the executing host; a SQLite ledger's files are moved in
    when it is opened."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS pipeline_phases (dispatch TEXT NOT NULL, seq INTEGER NOT NULL,"
        " name TEXT NOT NULL, child TEXT NOT NULL, needs TEXT NOT NULL, waits INTEGER NOT NULL DEFAULT 0,"
        " PRIMARY KEY (dispatch, seq))"
    )


MIGRATIONS: Mapping[int, Callable[[Store], None]] = {
    1: _v1, 2: _v2, 3: _v3, 4: _v4, 5: _v5, 6: _v6, 7: _v7, 8: _v8, 9: _v9, 10: _v10, 11: _v11, 12: _v12
}  # fmt: skip
SCHEMA_VERSION = max(MIGRATIONS)


#: The tables of an eps ledger: a version-0 database holding others is not one (refused).
OWN_TABLES = ("meta", "dispatches", "attempts", "notify_watch", "notify_cursors", "hosts", "pipeline_phases")


def migrate(db: Store) -> None:
    """Bring the schema to :data:`SCHEMA_VERSION`, one migration at a time, each in its own
    write transaction (a crash mid-way leaves the ledger at the last finished version; two
    processes migrating at once: the second finds the work done)."""
    from eps.shell.state.errors import LedgerError

    version = db.version()
    if version > SCHEMA_VERSION:
        raise LedgerError(f"{db.name}: ledger schema {version} is newer than this eps ({SCHEMA_VERSION})")
    if version == 0 and (foreign := [t for t in db.tables() if t not in OWN_TABLES]):
        raise LedgerError(f"{db.name}: not an eps ledger (it holds tables {', '.join(foreign[:3])})")
    for target in range(version + 1, SCHEMA_VERSION + 1):
        with db.transaction():
            if db.version() < target:  # another process raced us
                MIGRATIONS[target](db)
                db.set_version(target)
