"""Notifications' rows in the ledger (schema: :func:`eps.shell.state.migrations._v7`): which
dispatches may still owe a notice (``notify_watch``), and per dispatch and target how far
into its event log the target was told (``notify_cursors``).  A target is keyed by its safe
name (``json://127.0.0.1:8080#0``), never its URL; no message is stored."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from eps.core.records import NamedTuple

if TYPE_CHECKING:
    from eps.shell.state.ledger import Ledger


class Cursor(NamedTuple):
    offset: int = 0  # the target was told every notice whose event ends at or before this byte
    pull_done: float = 0.0  # the ts of the last end whose ``unpulled`` notice was sent or found moot


def watch(ledger: Ledger, dispatch: str, now: float | None = None) -> None:
    """``dispatch`` may owe notices (again: a dispatch handed back is watched anew)."""
    ledger.write(
        "INSERT INTO notify_watch (dispatch, open, since) VALUES (?, 1, ?)"
        " ON CONFLICT(dispatch) DO UPDATE SET open = 1",
        (dispatch, time.time() if now is None else now),
    )


def close(ledger: Ledger, dispatch: str) -> None:
    ledger.write("UPDATE notify_watch SET open = 0 WHERE dispatch = ?", (dispatch,))


def watched(ledger: Ledger) -> list[tuple[str, float]]:
    """The dispatches that may owe notices, and since when they are watched."""
    rows = ledger.rows("SELECT dispatch, since FROM notify_watch WHERE open = 1 ORDER BY since")
    return [(str(r[0]), float(r[1])) for r in rows]


def owed(ledger: Ledger) -> bool:
    """Some dispatch may still owe a notice (indexed: a revival asks this on every status)."""
    return bool(ledger.rows("SELECT 1 FROM notify_watch WHERE open = 1 LIMIT 1"))


def cursors(ledger: Ledger, dispatch: str) -> dict[str, Cursor]:
    rows = ledger.rows('SELECT target, "offset", pull_done FROM notify_cursors WHERE dispatch = ?', (dispatch,))
    return {str(r[0]): Cursor(int(r[1]), float(r[2])) for r in rows}


def advance(
    ledger: Ledger, dispatch: str, target: str, *, offset: int | None = None, pull_done: float | None = None
) -> None:
    """Move a target's cursor forward (never back: two writers agree on the furthest)."""
    ledger.write(
        # SQL both backends read ("offset" is a keyword in PostgreSQL; SQLite's max(a, b) is its greatest)
        'INSERT INTO notify_cursors (dispatch, target, "offset", pull_done, updated_at) VALUES (?, ?, ?, ?, ?)'
        ' ON CONFLICT(dispatch, target) DO UPDATE SET "offset" = CASE WHEN excluded."offset" > notify_cursors."offset"'
        ' THEN excluded."offset" ELSE notify_cursors."offset" END, pull_done = CASE WHEN excluded.pull_done >'
        " notify_cursors.pull_done THEN excluded.pull_done ELSE notify_cursors.pull_done END,"
        " updated_at = excluded.updated_at",
        (dispatch, target, offset or 0, pull_done or 0.0, time.time()),
    )
