"""What the ledger and its migrations know of a database: :class:`Store`, the one door both
backends are behind (:mod:`eps.shell.state.store`: SQLite; :mod:`eps.shell.state.pg_store`:
PostgreSQL), and the rows it gives."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias

#: One column's value as the driver reads it: ``str``, ``int``, ``float`` or ``None`` (what
#: ``sqlite3.Row`` gives too; the ledger's rows decode them, :mod:`eps.shell.state.ledger`).
Cell: TypeAlias = Any


class Row(Protocol):
    """A row of either backend: by position (``row[0]``) or by column name (``row["id"]``)."""

    def __getitem__(self, key: int | str, /) -> Cell: ...
    def keys(self) -> list[str]: ...


class Cursor(Protocol):
    def fetchone(self) -> Row: ...  # None past the last row (the ledger checks where it may be)
    def fetchall(self) -> list[Row]: ...


class Store(Protocol):
    """A connection to the ledger's database, shared by one process's threads (the ledger
    serializes them).  Rows read as ``row[0]`` and ``row["name"]``."""

    #: How messages name the database (a path, or the URL without its password).
    name: str
    #: The driver's errors: any of them is the ledger's one-line error.
    errors: tuple[type[Exception], ...]
    #: A unique constraint refused an insert.
    integrity: type[Exception]

    def execute(self, sql: str, args: Sequence[object] = ()) -> Cursor: ...
    def transaction(self) -> contextlib.AbstractContextManager[None]: ...
    def version(self) -> int: ...
    def set_version(self, version: int) -> None: ...
    def tables(self) -> list[str]: ...
    def indexed_by(self, index: str) -> str: ...
    def why(self, exc: Exception) -> str: ...
    def lost(self, exc: Exception) -> bool: ...  # the database cannot be reached (a server down, a cut connection)
    def close(self) -> None: ...
