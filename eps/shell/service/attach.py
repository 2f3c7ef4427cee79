"""The caller's side of a supervised dispatch: ``eps execute`` hands the dispatch to the
state directory's supervisor and follows its event log; ``eps attach`` and ``eps wait``
follow it again later, within an optional ``--timeout``.

Nothing here walks, pulls or releases: the supervisor does.  A caller that is stopped
(Ctrl-C, SIGTERM, SIGHUP, or SIGKILL without a word) only stops following; the dispatch
goes on, and ``eps attach`` picks it up again.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any

from eps.core.contract import Exit
from eps.core.events import ENDS, Event
from eps.core.states import DispatchState
from eps.shell.run.ownership import landed, settled

__all__ = ["LOOK_S", "Detached", "follow", "landed", "left_running", "settled", "stopped_code"]

if TYPE_CHECKING:
    from eps.shell.render.progress import Reporter
    from eps.shell.state.ledger import DispatchRow, Ledger

#: How often a caller reads the event log and the ledger.
LOOK_S = 0.1


class Detached(Exception):
    """The caller got SIGTERM or SIGHUP: it stops following; the dispatch goes on."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Stops:
    """The stop signals a follower got.  The handler only notes one; the loop acts on it
    where it is safe to, because an exception raised from a handler lands wherever the
    main thread happens to be, and a library's ``except Exception`` there (cattrs building
    a converter, say) swallows it: the caller then never leaves."""

    def __init__(self) -> None:
        self.got: int | None = None

    def note(self, signum: int, _frame: FrameType | None) -> None:
        if self.got is None:
            self.got = signum

    def check(self) -> None:
        if self.got == signal.SIGINT:
            raise KeyboardInterrupt
        if self.got is not None:
            raise Detached(self.got)


#: How long a follow waits, once the ledger says every job is done, for the events that tell
#: how (the supervisor writes them just after the ledger's change).
END_GRACE_S = 3.0


def follow(
    ledger: Ledger,
    reporter: Reporter,
    dispatch: str,
    env: Mapping[str, str],
    *,
    done: Callable[[DispatchRow], bool],
    history: bool,
    timeout_s: float | None = None,
    on_started: Callable[[DispatchRow], None] | None = None,
) -> list[DispatchRow] | None:
    """Show the dispatch's events (those so far when ``history``, then the new ones) until
    every job of it is ``done``: the rows then; ``None`` when ``timeout_s`` came first.
    Starts a supervisor again whenever the one there died with the dispatch unsettled.
    Raises :class:`Detached` / ``KeyboardInterrupt`` when the caller is stopped."""
    from eps.shell.run import ownership
    from eps.shell.run.follow import ids_of
    from eps.shell.state.events import log_path, read_from

    path = log_path(ledger.state_dir, dispatch)
    offset = 0
    told: set[str] = set()  # the rows whose end an event has told
    if not history:
        so_far, offset = read_from(path, 0)
        told.update(str(rec.get("dispatch")) for rec in so_far if rec.get("event") in ENDS)
        rows = [r for r in (ledger.dispatch(d) for d in ids_of(ledger, dispatch)) if r is not None]
        if rows and all(done(r) for r in rows):  # it was over before this wait: how it ended, not silence
            for rec in so_far:
                if rec.get("event") in ENDS:
                    reporter.show(rec)
    end = None if timeout_s is None else time.monotonic() + timeout_s
    checked = time.monotonic()
    started: set[str] = set()
    stops = _Stops()
    old = {s: signal.signal(s, stops.note) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    def show(records: list[dict[str, object]]) -> None:
        for rec in records:
            reporter.show(rec)
            if rec.get("event") in ENDS:
                told.add(str(rec.get("dispatch")))

    try:
        while True:
            stops.check()
            records, offset = read_from(path, offset)
            show(records)
            rows = [r for r in (ledger.dispatch(d) for d in ids_of(ledger, dispatch)) if r is not None]
            if on_started is not None:
                for r in rows:
                    if r.state is DispatchState.STARTED and r.handle is not None and r.id not in started:
                        started.add(r.id)
                        on_started(r)
            if all(done(r) for r in rows):
                # The supervisor records the end in the ledger, then writes the event that tells
                # it (with the ledger's facts): wait a moment for that line rather than end silent.
                grace = time.monotonic() + END_GRACE_S
                while True:
                    records, offset = read_from(path, offset)
                    show(records)
                    if {r.id for r in rows} <= told or time.monotonic() >= grace:
                        return rows
                    time.sleep(LOOK_S)
            if end is not None and time.monotonic() >= end:
                return None
            if time.monotonic() - checked >= 1.0:
                checked = time.monotonic()
                if not all(settled(r) for r in rows) and ownership.alive_pid(ledger.state_dir) is None:
                    ownership.ensure(ledger.state_dir, env)  # the supervisor died: revive
            stops.check()
            time.sleep(LOOK_S if end is None else max(0.0, min(LOOK_S, end - time.monotonic())))
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def left_running(dispatch: str, how: str, reporter: Reporter, rows: list[DispatchRow] | None = None) -> None:
    """Say that the caller stopped following and how to come back (the dispatch goes on)."""
    state = ",".join(sorted({r.state.value for r in rows})) if rows else None
    if reporter.json_lines:
        reporter.show(_doc(Event.STILL_RUNNING, dispatch=dispatch, state=state, why=how))
    else:
        what = f"is still {state}" if state else "goes on under its supervisor"
        sys.stderr.write(f"eps: {dispatch} {what} ({how}; not cancelled): eps attach {dispatch}, "
                         f"eps wait {dispatch} --timeout 5m; eps cancel {dispatch} stops it\n")  # fmt: skip


def _doc(event: Event, **fields: Any) -> dict[str, Any]:
    from eps.shell.state.events import record

    return record(event, **fields)


def stopped_code(exc: BaseException) -> int:
    """The exit code of a caller that was stopped while following (README's table)."""
    return Exit.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else Exit.STILL_RUNNING
