"""The ledger's SQLite backend: ``ledger.sqlite3`` in the state directory, the embedded
default (:func:`eps.shell.state.store.open_store` opens it when no ``[state] url`` is set,
so a ledger on PostgreSQL does not load ``sqlite3``)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from eps.shell.state.errors import LedgerError

#: The first bytes of every SQLite file.
_SQLITE_MAGIC = b"SQLite format 3\x00"


class SqliteStore:
    """``ledger.sqlite3``: WAL journal, a busy timeout, ``BEGIN IMMEDIATE`` write transactions,
    the version in ``PRAGMA user_version``."""

    errors: tuple[type[Exception], ...] = (sqlite3.DatabaseError,)
    integrity: type[Exception] = sqlite3.IntegrityError

    def __init__(self, path: str, db: sqlite3.Connection) -> None:
        self.name = path
        self._db = db

    @classmethod
    def open(cls, path: str) -> SqliteStore:
        _check_file(path)
        try:
            if not os.path.exists(path):
                _create(path)
            return cls(path, _connect(path))
        except sqlite3.DatabaseError as exc:
            if "unable to open" in str(exc) and not os.access(os.path.dirname(path), os.W_OK):  # a read-only mount
                exc = sqlite3.OperationalError("readonly")
            raise LedgerError(f"{path}: {_why(exc)}") from None

    def execute(self, sql: str, args: Sequence[object] = ()) -> sqlite3.Cursor:
        return self._db.execute(sql, tuple(args))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def set_version(self, version: int) -> None:
        self._db.execute(f"PRAGMA user_version = {int(version)}")

    def tables(self) -> list[str]:
        names = [str(r[0]) for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return [n for n in names if n != "sqlite_sequence"]

    def indexed_by(self, index: str) -> str:
        return f" INDEXED BY {index}"

    def why(self, exc: Exception) -> str:
        return _why(exc)

    def lost(self, exc: Exception) -> bool:
        return False  # a file: there when it is

    def close(self) -> None:
        self._db.close()


def _why(exc: Exception) -> str:
    text = str(exc)
    if "readonly" in text or "read-only" in text:
        return "the state directory is read-only (set EPS_STATE_DIR to a writable directory)"
    if "disk is full" in text or "database or disk is full" in text:
        return "the disk holding the state directory is full"
    if "not a database" in text or "malformed" in text:
        return "the ledger file is corrupt (move it aside; `eps reconcile` rebuilds nothing it cannot see)"
    return text


def _connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA busy_timeout = 30000")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("PRAGMA foreign_keys = ON")
    return db


def _check_file(path: str) -> None:
    """An existing ledger file must be SQLite: an empty (truncated) or foreign file is refused,
    never silently replaced by an empty ledger that would forget what runs where."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        return
    if not head:
        raise LedgerError(f"{path}: the ledger file is empty (truncated?); restore it or move it aside")
    if head != _SQLITE_MAGIC:
        raise LedgerError(f"{path}: the ledger file is corrupt or not an eps ledger (move it aside)")


def _create(path: str) -> None:
    """A new ledger appears whole or not at all: it is made aside, brought to the current
    schema and linked into place, so an empty ledger file always means one that was cut
    short, never a new one."""
    from eps.shell.state.migrations import migrate

    tmp = f"{path}.new-{os.getpid()}-{threading.get_ident()}"
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))  # SQLite keeps the mode (and its -wal)
    db = _connect(tmp)
    try:
        migrate(SqliteStore(tmp, db))
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another eps process made it first
    finally:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp + suffix)
