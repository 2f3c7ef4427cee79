"""Progress when piped: one line per state change, and while parked with nothing changing at
most one line a minute (issue 15: a 20-minute park was about 240 lines)."""

from __future__ import annotations

import io
import json

from eps.shell.render.progress import PARKED_EVERY_S, Reporter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _park(r: Reporter, clock: Clock, seconds: float, reason: str = "Priority", step: float = 5.0) -> None:
    end = clock.now + seconds
    while clock.now < end:
        r.emit("parked", dispatch="e1", rung="fellows/high-eur/-/queue", qos="high-eur", id="7",
               elapsed_s=clock.now, cap_s=600, pending_reason=reason, next=None,
               reason={"code": "wait", "text": "P8"})  # fmt: skip
        clock.now += step


def test_piped_lines_while_parked_are_at_most_one_a_minute() -> None:
    err, clock, seen = io.StringIO(), Clock(), []
    r = Reporter(json_lines=False, err=err, clock=clock, hook=seen.append)
    r.emit("submitted", dispatch="e1", rung="fellows/high-eur/-/queue", qos="high-eur", id="7")
    _park(r, clock, 1200)  # the default worst case, polled every 5 s
    lines = err.getvalue().splitlines()
    assert len(seen) == 241  # the hook sees every event
    assert len(lines) == 1 + 1200 / PARKED_EVERY_S
    assert lines[0] == "[e1] submitted fellows high-eur (queue) as job 7"  # no internal rung keys
    assert "fellows/high-eur/-/queue" not in err.getvalue()
    assert all(x == x.rstrip() for x in lines)


def test_a_changed_pending_reason_is_a_line_at_once_and_json_is_throttled_too() -> None:
    out, clock = io.StringIO(), Clock()
    r = Reporter(json_lines=True, out=out, clock=clock)
    _park(r, clock, 30)
    _park(r, clock, 30, reason="QOSMaxGRESPerUser")
    events = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [e["pending_reason"] for e in events] == ["Priority", "QOSMaxGRESPerUser"]
    assert all(e["schema_version"] == 1 and e["reason"] == {"code": "wait", "text": "P8"} for e in events)


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_spinner_shows_the_current_state_and_its_elapsed_time() -> None:
    import time as real_time

    err, clock = Tty(), Clock()
    r = Reporter(json_lines=False, err=err, clock=clock)
    r.start_live()
    r.emit("attempt", dispatch="e1", rung="gcp/e2-standard-4/us-central1-a/spot",
           reason={"code": "gcp_cpu", "text": "P3"})  # fmt: skip
    clock.now = 75.0
    real_time.sleep(0.4)  # a few refreshes
    r.stop_live()
    shown = err.getvalue()
    assert "try gcp e2-standard-4 @ us-central1-a (spot): P3" in shown
    assert "(1m15s)" in shown  # the elapsed time of the current state
    assert any(frame in shown for frame in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")  # rich's "dots" spinner


def test_import_eps_stays_light() -> None:
    import subprocess
    import sys

    code = ("import sys, eps; heavy = [m for m in sys.modules if m.split('.')[0] in "
            "('rich', 'attrs', 'cattrs', 'httpx', 'google', 'returns') or m == 'eps.api']; print(heavy)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_parked_line_says_slurms_reason_or_that_none_was_given() -> None:
    from eps.shell.render.progress import human_line

    base = {"dispatch": "e1", "event": "parked", "rung": "fellows/high-eur/-/queue", "elapsed_s": 12.0,
            "cap_s": 600, "next": None}  # fmt: skip
    assert human_line({**base, "pending_reason": "Priority"}).endswith("12/600 s (SLURM: Priority)")  # type: ignore[union-attr]
    for nothing in ("None", None, ""):
        line = human_line({**base, "pending_reason": nothing})
        assert line is not None and line.endswith("12/600 s (queued, no reason given yet)"), line
