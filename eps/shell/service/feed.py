"""The next events of many dispatches in one bounded call (the MCP tool ``next_events``,
:meth:`eps.shell.service.operations.Service.next_events`): an agent that launched several dispatches
hears what happened to any of them without polling each one.

**The cursor** is a byte offset per event log (``{dispatch: offset}``, the reader's offset of
an append-only log, as ``logs``' ``next_offset`` is): the call reads each log from its offset
with :func:`eps.shell.state.events.read_placed` (whole lines only: a line still being written is
read next time) and returns ``next_cursor``, each log's offset after the last event it
returned.  An event written while a call is in progress is after that offset, so the next
call returns it: none is lost, none is given twice (a timestamp could not say this: events'
``ts`` are rounded to the millisecond).  A ``--count`` fan-out's copies write to their
parent's log: their events come under the parent's key.

**Which dispatches**: those named (each a dispatch of the ledger, else ``unknown_dispatch``),
or every dispatch of the state directory that has an event log (one that starts while a call
waits is read from its first event).  A log the cursor does not name is read from its start.

**Bounded**: at most ``max_events`` events (the oldest first, by their ``ts`` across logs,
each log in its own order; ``more`` says some were left for the next call), and when none is
there yet it waits at most ``timeout_s`` for one (the supervisor writes them).
"""

from __future__ import annotations

import heapq
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from eps.core.contract import NEXT_DEFAULT_EVENTS, NEXT_DEFAULT_S, NEXT_MAX_EVENTS, NEXT_MAX_S
from eps.core.model import JobError
from eps.shell.state.events import SCHEMA_VERSION, events_dir, log_path, read_placed

if TYPE_CHECKING:
    from eps.shell.state.ledger import Ledger

__all__ = ["NEXT_DEFAULT_EVENTS", "NEXT_DEFAULT_S", "NEXT_MAX_EVENTS", "NEXT_MAX_S", "next_events"]
#: How often a waiting call looks at the logs' sizes.
LOOK_S = 0.1


def checked_cursor(cursor: object) -> dict[str, int]:
    """The caller's cursor, or :class:`JobError` ``next_events`` naming what is wrong."""
    if cursor is None:
        return {}
    if not isinstance(cursor, Mapping):
        raise JobError("next_events", f"cursor must be the next_cursor of an earlier call (an object), got {cursor!r}")
    out: dict[str, int] = {}
    for key, value in cursor.items():
        if not isinstance(key, str) or not key or os.sep in key or key.startswith("."):
            raise JobError("next_events", f"cursor: {key!r} is not a dispatch id")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise JobError("next_events", f"cursor[{key!r}] must be a byte offset >= 0, got {value!r}")
        out[key] = value
    return out


def logs_of(ledger: Ledger, dispatches: Sequence[str] | None) -> list[str]:
    """The event logs (by their dispatch) the call reads: the named dispatches' (a copy's is its
    parent's), or every one of the state directory."""
    if dispatches is None:
        try:
            names = os.listdir(events_dir(ledger.state_dir))
        except FileNotFoundError:
            return []
        return sorted(n.removesuffix(".jsonl") for n in names if n.endswith(".jsonl"))
    out: list[str] = []
    for d in dispatches:
        row = ledger.dispatch(d) if isinstance(d, str) and d else None
        if row is None:
            raise JobError("unknown_dispatch", f"no dispatch {d!r} in the ledger")
        root = row.parent or row.id
        if root not in out:
            out.append(root)
    return out


def _sizes(state_dir: str, logs: Sequence[str]) -> dict[str, int]:
    out = {}
    for d in logs:
        try:
            out[d] = os.path.getsize(log_path(state_dir, d))
        except OSError:
            out[d] = 0
    return out


def next_events(
    ledger: Ledger,
    dispatches: Sequence[str] | None = None,
    cursor: Mapping[str, int] | None = None,
    *,
    timeout_s: float | None = None,
    max_events: int | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """The ``next_events`` document: ``events`` after ``cursor`` (at most ``max_events``),
    ``next_cursor`` to pass back, ``more`` (events were left), ``waited_s`` and ``timeout_s``
    (capped at :data:`NEXT_MAX_S`).  ``None``: the defaults (30 s, 100 events).  Bad input:
    :class:`JobError` before any wait."""
    timeout_s = NEXT_DEFAULT_S if timeout_s is None else timeout_s
    max_events = NEXT_DEFAULT_EVENTS if max_events is None else max_events
    if isinstance(max_events, bool) or not isinstance(max_events, int) or not 1 <= max_events <= NEXT_MAX_EVENTS:
        raise JobError("next_events", f"max_events must be 1..{NEXT_MAX_EVENTS}, got {max_events!r}")
    bound = min(max(0.0, float(timeout_s)), NEXT_MAX_S)
    at = checked_cursor(cursor)
    state_dir = str(ledger.state_dir)
    logs = logs_of(ledger, dispatches)
    start = clock()
    while True:
        sizes = _sizes(state_dir, logs)
        if any(size > at.get(d, 0) for d, size in sizes.items()):
            events, moved, more = _read(state_dir, [d for d in logs if sizes[d] > at.get(d, 0)], at, max_events)
            if events or clock() - start >= bound:
                return _doc(events, {**at, **moved}, logs, more, clock() - start, bound)
        if clock() - start >= bound:
            return _doc([], at, logs, False, clock() - start, bound)
        time.sleep(max(0.0, min(LOOK_S, bound - (clock() - start))))
        if dispatches is None:
            logs = logs_of(ledger, None)  # a dispatch that started meanwhile is read too


def _read(state_dir: str, logs: Sequence[str], at: Mapping[str, int],
          max_events: int) -> tuple[list[dict[str, Any]], dict[str, int], bool]:  # fmt: skip
    """The first ``max_events`` whole events after ``at`` across ``logs`` (merged by ``ts``, each
    log kept in its own order, so what is returned of a log is always a prefix of what is
    there), each log's offset after its last one returned, and whether any was left."""
    streams = [[(float(rec.get("ts") or 0.0), d, end, rec) for _s, end, rec in read_placed(log_path(state_dir, d),
                at.get(d, 0))] for d in logs]  # fmt: skip
    events: list[dict[str, Any]] = []
    moved: dict[str, int] = {}
    more = False
    for _ts, d, end, rec in heapq.merge(*streams, key=lambda e: e[0]):
        if len(events) == max_events:
            more = True
            break
        events.append(rec)
        moved[d] = end
    return events, moved, more


def _doc(events: list[dict[str, Any]], cursor: Mapping[str, int], logs: Sequence[str], more: bool, waited: float,
         bound: float) -> dict[str, Any]:  # fmt: skip
    """The document; ``next_cursor`` names every log read (its offset now, or where it was)."""
    nxt = {d: int(cursor.get(d, 0)) for d in logs} | {d: int(o) for d, o in cursor.items()}
    return {"schema_version": SCHEMA_VERSION, "events": events, "next_cursor": dict(sorted(nxt.items())),
            "more": more, "dispatches": list(logs), "waited_s": round(waited, 3), "timeout_s": bound}  # fmt: skip
