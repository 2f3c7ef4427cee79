"""Machine lives: what the ledger remembers of the machines eps made lately, the view the
core's boot-loop rule decides from (:func:`eps.core.healing.boot_looped`, read into
``CapacitySnapshot.lives``).

A *lost* machine is an attempt on a lane where eps makes machines (GCP, RunPod) that
reconcile judged ``gone`` with outcome ``preempted`` (a spot VM taken back, or one that
vanished) or ``gone`` (not found at the provider), or that its supervisor released as
``wedged`` (the provider said running, ssh did not answer for ``wedge_s``).  Its life is
measured from the attempt's ``started_at`` (recorded just before the create call) to its ``updated_at``
(when it was judged lost): the create and boot time count as life, so a death counts as
early only when create, boot and life together were within ``early_death_s``; a death is
never made to look earlier than it was.  A SLURM job is no machine of eps's (its rung is
a queue): it has no life here.

One query, on the ``attempts_by_state`` index, over the lost attempts of the last
``boot_loop_window_s``: cheap enough for every ``eps plan``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from eps.core.model import CapacitySnapshot, LaneKind, MachineLife, evolve
from eps.core.tables import HEALING

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: The lost attempts of machines eps made, lost at or after ``?``.
SQL = (
    "SELECT rung, started_at, updated_at FROM attempts WHERE state = ? AND outcome IN (?, ?, ?) AND kind IN (?, ?)"
    " AND updated_at >= ? ORDER BY updated_at"
)


def args(now: float) -> tuple[Any, ...]:
    """The values of :data:`SQL`'s marks for the window that ends at ``now``."""
    from eps.core.states import AttemptState, Outcome  # with a ledger only

    return (
        AttemptState.GONE.value, Outcome.PREEMPTED.value, Outcome.GONE.value, Outcome.WEDGED.value,
        LaneKind.GCP.value, LaneKind.RUNPOD.value, now - HEALING.boot_loop_window_s,
    )  # fmt: skip


def lives_of(rows: Sequence[Any]) -> tuple[MachineLife, ...]:
    """The rows of :data:`SQL` as machine lives."""
    return tuple(MachineLife(str(r[0]), float(r[1]), float(r[2])) for r in rows)


def remembered(snapshot: CapacitySnapshot, lives: tuple[MachineLife, ...], now: float) -> CapacitySnapshot:
    """``snapshot`` with the lives the ledger remembers (after any it already held), read at ``now``."""
    return evolve(snapshot, lives=(*snapshot.lives, *lives), lives_at=now)


def remembered_here(snapshot: CapacitySnapshot, state_dir: str, url: str | None = None) -> CapacitySnapshot:
    """``snapshot`` with the lives in the ledger of ``state_dir`` now (:func:`read_only`):
    ``eps plan`` and ``eps.plan()`` plan as ``eps execute`` would.  A ledger in PostgreSQL
    (``url``) is not read here: the plan path loads no driver (``eps execute`` reads it)."""
    if url:
        return snapshot
    now = time.time()
    return remembered(snapshot, read_only(state_dir, now), now)


def _uri(path: str) -> str:
    """``path`` as an SQLite ``file:`` URI (what ``pathlib`` would make, without importing it
    and ``urllib`` on the plan path): ``%``, ``?`` and ``#`` escaped."""
    text = os.path.abspath(path)
    for c, code in (("%", "%25"), ("?", "%3f"), ("#", "%23")):
        text = text.replace(c, code)
    return "file:" + text


def read_only(state_dir: str, now: float) -> tuple[MachineLife, ...]:
    """The lives in the ledger of ``state_dir``, for ``eps plan``: one query, nothing written;
    nothing when there is no ledger (none is made) or it cannot be read (a plan is advice;
    ``eps execute`` reports an unusable ledger)."""
    path = os.path.join(state_dir, "ledger.sqlite3")
    if not os.path.exists(path):
        return ()
    import contextlib
    import sqlite3  # only with a ledger: the plan path of a machine without one stays light

    try:
        # rw, never create: a read-only connection to a WAL ledger leaves its -wal and -shm behind
        db = sqlite3.connect(_uri(path) + "?mode=rw", uri=True, timeout=5.0)
    except sqlite3.Error:
        return ()
    try:
        return lives_of(db.execute(SQL, args(now)).fetchall())
    except sqlite3.Error:
        return ()
    finally:
        with contextlib.suppress(sqlite3.Error):
            db.close()
