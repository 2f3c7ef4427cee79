"""What a dispatch's event log says a person should hear: a pure fold of the log's events
into :class:`Notice` records (no I/O, no clock, no apprise), replayed from the start of the
log every time, so a supervisor that starts again knows exactly what an earlier one did
(the event history is the state; each target's cursor in the ledger says how far it was told).

The rules (the names are :data:`~eps.shell.config.notify.NOTIFY_EVENTS`):

- ``started``: a ``started`` event on a paid lane (gcp, runpod), or after a ``parked`` one
  in the same run (a run begins at ``dispatch``, ``trying_again`` or ``relaunched``);
- ``parked``: the first ``advanced`` of a run (its first park cap passed);
- ``preempted``: an ``interrupted``, or a ``wedged`` that released the machine; once per run
  (a supervisor revived after a preemption may say it again);
- ``relaunched``, ``stalled``: their events;
- ``ended`` / ``failed``: an ``ended`` with exit code 0 / any other (its code, lane and
  outputs as the supervisor wrote them in the event); ``failed`` too for a ``terminal`` (nothing
  could run it) or a ``stopped`` that was not a cancel; a job its stall watch stopped
  (``job_status`` ``stalled``) is ``ended``, "stopped by its stall watch (exit 125)", never ``failed``;
- ``unpulled``: an ``ended`` whose outputs did not come back is due :data:`linger` seconds
  later, and sent then only if they still have not (the pump asks the ledger).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from eps.core.records import NamedTuple

#: The lanes a machine is paid for.
PAID_LANES = ("gcp", "runpod")


class Notice(NamedTuple):
    """One notification: sent to a target whose cursor is before ``end`` (the byte offset
    after its event's line), then the cursor moves to ``end``."""

    end: int
    event: str  # one of NOTIFY_EVENTS' names
    dispatch: str
    title: str
    body: str


class PullDue(NamedTuple):
    """An end whose outputs did not come back: ``unpulled`` is due at ``ts + linger`` unless
    ``dispatch`` (a copy, or the dispatch) has been pulled by then.  ``ts`` keys it."""

    ts: float
    dispatch: str
    outputs: str | None
    lane: str | None


class _Run:
    """What the fold remembers of the run so far."""

    def __init__(self) -> None:
        self.parked = False
        self.advanced = False
        self.interrupted: set[str] = set()


Placed = Iterable[tuple[int, int, dict[str, Any]]]


def fold(placed: Placed, wanted: frozenset[str]) -> tuple[list[Notice], list[PullDue]]:
    """Every notice the events call for (those of ``wanted`` events), in order, and every end
    whose outputs did not come back."""
    run = _Run()
    notices: list[Notice] = []
    pulls: list[PullDue] = []
    for _start, end, rec in placed:
        event = str(rec.get("event"))
        d = str(rec.get("dispatch") or "")
        got: tuple[str, str, str] | None = None
        if event in ("dispatch", "trying_again"):
            run.parked = run.advanced = False
        elif event == "relaunched":
            run = _Run()
            got = "relaunched", "relaunched", _lines(rec.get("message"), f"restart {rec.get('restart')}",
                                                      _next(f"eps attach {d}"))  # fmt: skip
        elif event == "parked":
            run.parked = True
        elif event == "advanced" and not run.advanced:
            run.advanced = run.parked = True
            cap = f"parked {_secs(rec.get('elapsed_s'))} on {rec.get('rung')} past its first cap; moving on"
            got = (
                "parked",
                f"parked past its cap on {rec.get('rung')}",
                _lines(cap, _reason(rec), f"lane: {_lane_of_rung(rec.get('rung'))}", _next(f"eps status {d}")),
            )
        elif event == "started":
            lane = str((rec.get("handle") or {}).get("lane") or "")
            run.interrupted.discard(d)
            if lane in PAID_LANES or run.parked:
                why = "after a park" if run.parked else "on a paid lane"
                handle = rec.get("handle") or {}
                got = "started", f"started on {lane}", _lines(
                    f"started {why}: {handle.get('rung') or lane} ({handle.get('id')})", f"lane: {lane}",
                    _next(f"eps logs -f {d}", f"eps cancel {d}"),
                )  # fmt: skip
        elif (event == "interrupted" or (event == "wedged" and rec.get("handle"))) and d not in run.interrupted:
            run.interrupted.add(d)
            got = "preempted", "preempted", _lines(rec.get("message"), _lane_line(rec),
                                                   _next(f"eps attach {d}", f"eps execute --resume {d}"))  # fmt: skip
        elif event == "stalled":
            got = "stalled", "stalled", _lines(rec.get("message"), _lane_line(rec),
                                               _next(f"eps logs {d} --tail 50", f"eps cancel {d}"))  # fmt: skip
        elif event == "ended":
            got = _ended(rec, d)
            if rec.get("pulled") is False:
                pulls.append(PullDue(float(rec.get("ts") or 0.0), d, rec.get("outputs"), rec.get("lane")))
        elif event == "terminal" or (event == "stopped" and _reason(rec) != "cancelled"):
            got = (
                "failed",
                "nothing could run it" if event == "terminal" else "stopped",
                _lines(rec.get("message"), _next(f"eps status {d}", "eps check")),
            )
        if got is not None and got[0] in wanted:
            kind, what, body = got
            notices.append(Notice(end, kind, d, f"eps {d}: {what}", body))
    return notices, pulls


def unpulled(due: PullDue, linger_s: float) -> Notice:
    """The ``unpulled`` notice of ``due`` (its ``end`` is unused: the pull cursor is its ts)."""
    d = due.dispatch
    body = _lines(
        f"its outputs have waited {_secs(linger_s)} for a pull: its machine is stopped (or kept), its disk billed",
        f"lane: {due.lane or '?'}", _next(f"eps pull {d}"),
    )  # fmt: skip
    return Notice(0, "unpulled", d, f"eps {d}: outputs waiting for eps pull", body)


def test_notice(target: str) -> Notice:
    """What ``eps notify test`` sends."""
    return Notice(0, "test", "", "eps: test notification", f"eps can reach {target}; nothing to do.")


def _ended(rec: dict[str, Any], d: str) -> tuple[str, str, str] | None:
    """``ended`` (code 0) or ``failed``; ``None`` for a job ``eps cancel`` stopped (its
    person knows).  ``exit_code`` is what ``eps wait`` leaves with (the supervisor wrote it)."""
    code = rec.get("exit_code")
    if rec.get("job_status") == "cancelled":
        return None
    if rec.get("job_status") == "stalled":  # on_stall = stop: its own watch ended it, not a failure
        return "ended", f"stopped by its stall watch (exit {code})", _lines(
            rec.get("message"), f"exit code: {code}", _lane_line(rec),
            f"outputs in {rec['outputs']}" if rec.get("pulled") else f"outputs not pulled yet: eps pull {d}",
            _next(f"eps logs {d} --tail 50", f"eps status {d}"),
        )  # fmt: skip
    where = f"outputs in {rec['outputs']}" if rec.get("pulled") else f"outputs not pulled yet: eps pull {d}"
    ok = code == 0
    lines = _lines(rec.get("message"), f"exit code: {'unknown' if code is None else code}", _lane_line(rec), where,
                   _next(f"eps status {d}") if ok else _next(f"eps logs {d} --tail 50"))  # fmt: skip
    if ok:
        return "ended", "ended 0", lines
    return "failed", f"failed (exit {'unknown' if code is None else code})", lines


def _lines(*parts: object) -> str:
    return "\n".join(str(p) for p in parts if p)


def _next(*commands: str) -> str:
    return "next: " + "; ".join(commands)


def _reason(rec: dict[str, Any]) -> str:
    reason = rec.get("reason")
    return str(reason.get("text") or reason.get("code") or "") if isinstance(reason, dict) else ""


def _lane_line(rec: dict[str, Any]) -> str:
    lane = rec.get("lane") or (rec.get("handle") or {}).get("lane")
    return f"lane: {lane}" if lane else ""


def _lane_of_rung(rung: object) -> str:
    return str(rung or "?").split(":", 1)[0]


def _secs(value: object) -> str:
    try:
        s = int(float(str(value)))
    except ValueError:
        return "?"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
