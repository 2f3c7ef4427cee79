"""Progress of a walk: one JSON object per line for agents (``--json``), else a line per
event on stderr, as a rich live view when stderr is a terminal."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any


class Reporter:
    """Where progress goes.  ``--json``: one JSON object per line on stdout; otherwise
    a line per event on stderr (rich's live view when stderr is a terminal)."""

    def __init__(
        self,
        *,
        json_lines: bool,
        out: Any = None,
        err: Any = None,
        hook: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.json_lines = json_lines
        self.hook = hook
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self._lock = threading.Lock()
        self._live: Any = None
        self._trace: list[str] = []

    def emit(self, event: str, **fields: Any) -> None:
        record = {"event": event, "ts": round(time.time(), 3), **fields}
        if self.hook is not None:
            self.hook(record)
        with self._lock:
            if self.json_lines:
                self.out.write(json.dumps(record) + "\n")
                self.out.flush()
                return
            line = _human(record)
            if line is None:
                return
            if self._live is not None:
                self._trace.append(line)
                self._live.update(self._render(line))
            else:
                self.err.write(line + "\n")
                self.err.flush()

    def start_live(self) -> None:
        if self.json_lines or not getattr(self.err, "isatty", lambda: False)():
            return
        from rich.console import Console
        from rich.live import Live

        self._live = Live(console=Console(file=self.err), refresh_per_second=4, transient=False)
        self._live.start()

    def stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _render(self, current: str) -> Any:
        from rich.text import Text

        lines = [*self._trace[-8:-1], f"> {current}"]
        return Text("\n".join(lines))


def _human(r: dict[str, Any]) -> str | None:
    d = r.get("dispatch", "")
    e = r["event"]
    if e == "dispatch":
        return f"[{d}] {r['intent']}: {r['rungs']} rung(s) planned, worst-case queue wait {r['worst_case_wait_s']} s"
    if e == "attempt":
        return f"[{d}] try {r['rung']} ({r['reason']})"
    if e == "submitted":
        return f"[{d}] submitted {r['rung']} as job {r['id']}"
    if e == "parked":
        cap = r.get("cap_s")
        nxt = f"; next: {r['next']}" if r.get("next") else ""
        return f"[{d}] parked on {r['rung']}: {r['elapsed_s']:.0f}/{cap} s ({r.get('pending_reason')}){nxt}"
    if e == "advanced":
        return f"[{d}] cancelled {r['rung']} after {r['elapsed_s']:.0f} s: {r['reason']}"
    if e == "withdrawn":
        return f"[{d}] withdrew {r['rung']}: {r['reason']}"
    if e == "failed":
        return f"[{d}] {r['rung']} failed: {r['kind']}: {r['message']}"
    if e in ("started", "held"):
        h = r["handle"]
        where = h.get("qos") or h.get("zone") or ""
        return f"[{d}] {e}: {h['lane']} {where} {h.get('machine') or ''} id={h['id']}".replace("  ", " ")
    if e == "terminal":
        why = "; ".join(r.get("skipped", [])[:6])
        return f"[{d}] nothing left to try: {r['terminal']} (skipped: {why})"
    if e == "stopped":
        return f"[{d}] stopped: {r['message']}"
    return None
