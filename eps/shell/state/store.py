"""The one door the ledger goes through to its database: :class:`Store`, with two
backends, SQLite in the state directory (:class:`eps.shell.state.sqlite_store.SqliteStore`, the embedded default) and
PostgreSQL (:class:`eps.shell.state.pg_store.PgStore`, ``[state] url``).

The ledger's SQL and its migrations are written once, in SQLite's dialect with ``?``
marks; a backend runs them as its database needs (PostgreSQL: ``%s`` marks, ``DOUBLE
PRECISION`` for ``REAL``, an identity column for ``AUTOINCREMENT``).  What differs besides
the words is here too: how a write transaction excludes every other writer
(:meth:`Store.transaction`), where the schema version is kept, which errors mean what.

The guarantee both give (what the ledger's compare-and-set moves rely on): a write
transaction runs alone.  Every read inside it sees every write committed before it began,
and no other write transaction commits until it ends; so a state read and the update that
follows it in one transaction never race another eps process (two walkers never both move
a dispatch, a seq is never taken twice).  SQLite: ``BEGIN IMMEDIATE`` takes the database's
one write lock.  PostgreSQL: see :mod:`eps.shell.state.pg_store`."""

from __future__ import annotations

import os

from eps.shell.state.db import Cell, Cursor, Row, Store
from eps.shell.state.errors import LedgerError, StateUnreachable

__all__ = ["Cell", "Cursor", "LedgerError", "Row", "StateUnreachable", "Store", "open_store"]


def open_store(state_dir: str, url: str | None) -> Store:
    """The ledger's database: PostgreSQL at ``url`` when one is set, else ``ledger.sqlite3``
    in ``state_dir`` (made whole if there is none).  :class:`LedgerError` (one line) if unusable."""
    if url:
        from eps.shell.state.pg_store import PgStore  # the driver loads only with a URL

        return PgStore(url)
    from eps.shell.state.sqlite_store import SqliteStore  # sqlite3 loads only without one

    return SqliteStore.open(os.path.join(state_dir, "ledger.sqlite3"))
