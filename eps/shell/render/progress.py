"""Progress of a walk: one JSON object per line for agents (``--json``), else a line per
state change on stderr, as a live view with a spinner and the elapsed time when stderr
is a terminal.

While a job is parked the walk polls every few seconds; a poll that changes nothing
(same rung, same pending reason) is a line at most once a minute (:data:`PARKED_EVERY_S`),
so a 20-minute worst-case park is about 20 lines, not 240.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, assert_never

from eps.core.events import Event

if TYPE_CHECKING:
    from typing import TextIO

    from rich.console import RenderableType

#: While parked and nothing changes, at most one line (or JSON event) this often.
PARKED_EVERY_S = 60.0


class Reporter:
    """Where progress goes.  ``--json``: one JSON object per line on stdout; otherwise
    a line per state change on stderr (a live view with a spinner on a terminal).
    ``hook`` sees every event, throttled or not."""

    def __init__(
        self,
        *,
        json_lines: bool,
        out: TextIO | None = None,
        err: TextIO | None = None,
        hook: Callable[[dict[str, Any]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.json_lines = json_lines
        self.hook = hook
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.clock = clock
        self._lock = threading.Lock()
        self._live: Any = None
        self._view: _LiveView | None = None
        self._parked: dict[str, tuple[str, Any, float]] = {}  # dispatch -> (rung, reason, when shown)

    def emit(self, event: Event, **fields: Any) -> None:
        from eps.shell.state.events import record

        self.show(record(event, **fields))

    def show(self, record: dict[str, Any]) -> None:
        """Render one event object (made here, or read back from a dispatch's event log)."""
        if self.hook is not None:
            self.hook(record)
        with self._lock:
            if not self._news(record):
                return
            if self.json_lines:
                self.out.write(json.dumps(record) + "\n")
                self.out.flush()
                return
            line = human_line(record)
            if line is None:
                return
            if self._view is not None:
                self._view.show(line)
            else:
                self.err.write(line + "\n")
                self.err.flush()

    def _news(self, r: dict[str, Any]) -> bool:
        """Whether this event is worth a line: every event but a parked poll that changes
        nothing within :data:`PARKED_EVERY_S`."""
        d = str(r.get("dispatch", ""))
        if r["event"] != "parked":
            self._parked.pop(d, None)
            return True
        now = self.clock()
        state = (str(r.get("rung")), r.get("pending_reason"))
        last = self._parked.get(d)
        if last is not None and (last[0], last[1]) == state and now - last[2] < PARKED_EVERY_S:
            return False
        self._parked[d] = (state[0], state[1], now)
        return True

    def start_live(self) -> None:
        if self.json_lines or not getattr(self.err, "isatty", lambda: False)():
            return
        from rich.console import Console
        from rich.live import Live

        self._view = _LiveView(self.clock)
        self._live = Live(self._view, console=Console(file=self.err), refresh_per_second=8, transient=False)
        self._live.start()

    def stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
            self._view = None


class _LiveView:
    """What the live view shows: the last lines, then a spinner with the current state and
    how long it has lasted (rendered anew on every refresh)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        from rich.spinner import Spinner

        self.clock = clock
        self.trace: list[str] = []
        self.since = clock()
        self.spinner = Spinner("dots")

    def show(self, line: str) -> None:
        self.trace.append(line)
        self.since = self.clock()

    def __rich__(self) -> RenderableType:
        from rich.console import Group
        from rich.text import Text

        from eps.core.durations import human

        if not self.trace:
            self.spinner.update(text=Text(f"starting ({human(int(self.clock() - self.since))})"))
            return self.spinner
        *done, current = self.trace[-8:]
        self.spinner.update(text=Text(f"{current}  ({human(int(self.clock() - self.since))})"))
        return Group(Text("\n".join(done)), self.spinner) if done else self.spinner


def _label(key: object) -> str:
    from eps.shell.render.views import key_label

    return key_label(str(key))


def _why(r: dict[str, Any]) -> str:
    reason = r.get("reason")
    return str(reason.get("text")) if isinstance(reason, dict) else str(reason or "")


def human_line(r: dict[str, Any]) -> str | None:
    """One event as a line for people (``None``: not worth one, or a kind this eps does not know)."""
    d = r.get("dispatch", "")
    try:
        e = Event(r["event"])
    except ValueError:
        return None
    match e:
        case Event.DISPATCH:
            wait = r["worst_case_wait_s"]
            return f"[{d}] {r['intent']}: {r['rungs']} rung(s) planned, worst-case queue wait {wait} s"
        case Event.INPUTS:
            from eps.core.room import size_text

            return "\n".join(f"[{d}] input {i['url']} -> {i['dest']}: {i['objects']} object(s), "
                             f"{size_text(i['bytes'])}" for i in r["inputs"])  # fmt: skip
        case Event.ATTEMPT:
            return f"[{d}] try {_label(r['rung'])}: {_why(r)}"
        case Event.SUBMITTED:
            return f"[{d}] submitted {_label(r['rung'])} as job {r['id']}"
        case Event.PARKED:
            cap = r.get("cap_s")
            nxt = f"; next: {_label(r['next'])}" if r.get("next") else ""
            why = r.get("pending_reason")
            # SLURM's reason for a job it has not looked at yet is the word "None"
            said = f"SLURM: {why}" if why and why != "None" else "queued, no reason given yet"
            return f"[{d}] parked on {_label(r['rung'])}: {r['elapsed_s']:.0f}/{cap} s ({said}){nxt}"
        case Event.ADVANCED:
            return f"[{d}] cancelled {_label(r['rung'])} after {r['elapsed_s']:.0f} s: {_why(r)}"
        case Event.WITHDRAWN:
            return f"[{d}] withdrew {_label(r['rung'])}: {_why(r)}"
        case Event.FAILED:
            return f"[{d}] {_label(r['rung'])} failed: {r['kind']}: {r['message']}"
        case Event.STARTED | Event.HELD:
            h = r["handle"]
            where = h.get("qos") or h.get("zone") or ""
            return f"[{d}] {e}: {h['lane']} {where} {h.get('machine') or ''} id={h['id']}".replace("  ", " ")
        case Event.TERMINAL:
            return f"[{d}] {r.get('message') or r['terminal']}"
        case Event.STOPPED:
            return f"[{d}] stopped: {r['message']}"
        case Event.ENDED:
            return f"[{d}] ended: {r.get('message')}"
        case Event.RELAUNCHED:
            return f"[{d}] relaunching (restart {r.get('restart')}): {r.get('message')}"
        case Event.SYNC_FAILED | Event.WEDGED | Event.STALLED | Event.STALL_OVER | Event.INTERRUPTED:
            return f"[{d}] {r.get('message')}"
        case Event.WAITING:
            at = time.strftime("%H:%M:%S", time.localtime(float(r["next_try_at"])))
            return f"[{d}] waiting for capacity until {at}: {r.get('message')}"
        case Event.TRYING_AGAIN:
            return f"[{d}] planning again (capacity round {r.get('round')})"
        case Event.FANOUT | Event.SUPERVISED | Event.STILL_RUNNING:
            return None
    assert_never(e)
