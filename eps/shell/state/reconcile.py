"""Reconcile the ledger with what the providers report; ``eps cancel`` and ``eps status``.

The shell gathers (the ledger rows, every usable lane's inventory under eps's
names) and carries out; what to keep, adopt, release or mark is decided by the
pure :func:`eps.core.settle.settle`.  Resources whose dispatch the ledger does
not know are reported, never touched (they may be another ledger's).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from returns.result import Failure, Success

from eps.core.model import JobError, evolve
from eps.core.settle import (
    DispatchView,
    LiveItem,
    Settlement,
    Verdict,
    attempt_for,
    needs_history,
    preempted_attempts,
    settle,
    vanished,
)
from eps.core.states import AttemptState, DispatchState, Outcome
from eps.core.walk import AttemptRecord
from eps.shell.cli.progress import Reporter
from eps.shell.lanes import Lanes
from eps.shell.polling import poll_until
from eps.shell.state import codec
from eps.shell.state.ledger import DispatchRow, Ledger


def view_of(row: DispatchRow, ledger: Ledger) -> DispatchView:
    attempts = tuple(a.record() for a in ledger.attempts(row.id))
    return DispatchView(row.id, row.state, row.job.pin is not None, row.handle, attempts)


class Reconciler:
    """Compare the ledger with what the providers report; adopt or clean up (see settle)."""

    def __init__(self, ledger: Ledger, lanes: Lanes, reporter: Reporter) -> None:
        self.ledger = ledger
        self.lanes = lanes
        self.reporter = reporter
        self.errors: list[str] = []
        self.unchecked: dict[str, str] = {}  # lane -> why its inventory could not be read

    def inventory(self, dispatch: str | None = None) -> list[LiveItem]:
        found: list[LiveItem] = []
        for lane in self.lanes.usable():
            match lane.inventory(dispatch):
                case Success(items):
                    found.extend(items)
                case Failure(f):
                    self.unchecked[lane.name] = f.message
        return found

    def release(self, item: LiveItem) -> str | None:
        """Release ``item``; an error message, or ``None`` once it is gone."""
        match self.lanes.get(item.handle.lane).release(item.handle):
            case Failure(f):
                return str(f.message)
        return None

    def _new_report(self) -> dict[str, Any]:
        keys = ("adopted", "released", "foreign", "interrupted")
        return {**{k: [] for k in keys}, "errors": self.errors, "unchecked": self.unchecked}

    def reconcile(self, dispatch: str | None = None) -> dict[str, Any]:
        live = self.inventory(dispatch)
        by_dispatch: dict[str, list[LiveItem]] = {}
        for item in live:
            by_dispatch.setdefault(item.dispatch, []).append(item)
        report = self._new_report()
        rows = [self.ledger.dispatch(dispatch)] if dispatch else self.ledger.dispatches()
        known = {r.id for r in rows if r is not None}
        for row in rows:
            if row is None or self.ledger.is_owned_elsewhere(row.id):
                continue
            self._settle(row, by_dispatch.get(row.id, []), report, resuming=False)
        for d, items in by_dispatch.items():
            if d not in known and (dispatch is None or d == dispatch) and self.ledger.dispatch(d) is None:
                report["foreign"].extend(f"{i.handle.lane}:{i.handle.id}" for i in items)
        return report

    def reconcile_dispatch(self, row: DispatchRow, *, resuming: bool) -> dict[str, Any]:
        report = self._new_report()
        self._settle(row, self.inventory(row.id), report, resuming=resuming)
        return report

    def _settle(self, row: DispatchRow, items: list[LiveItem], report: dict[str, Any], *, resuming: bool) -> None:
        view = view_of(row, self.ledger)
        s = settle(view, items, blind=frozenset(self.unchecked), resuming=resuming)
        match s.verdict:
            case Verdict.BLIND:
                for lane in s.blind:
                    report["errors"].append(f"{row.id}: cannot check {lane}: {self.unchecked[lane]}")
            case Verdict.RELEASE:
                self._release_all(view, s.release, report)
            case Verdict.FINISHED:
                note = s.message or ""
                for item in s.release:
                    adapter = self.lanes.get(item.handle.lane)
                    note = adapter.keep_output(item.handle, row.id, self.ledger.logs) or note
                self._ended(view, note)  # the job's story is "ended"; releasing its machine is upkeep
                self._release_all(view, s.release, report, mark=False)
                report.setdefault("ended", []).append(row.id)
            case Verdict.PREEMPTED:
                self._release_all(view, s.release, report)
                for a in preempted_attempts(view):
                    self.ledger.update_attempt(
                        a.id, AttemptState.GONE, outcome=Outcome.PREEMPTED.value, reason="spot VM taken back"
                    )
                self.ledger.set_dispatch(row.id, DispatchState.PREEMPTED, message=s.message)
                report.setdefault("preempted", []).append(row.id)
            case Verdict.KEEP:
                self._release_all(view, s.release, report)
                self._adopt(row, s, report)
            case Verdict.WALK_DIED:
                for a in s.vanished:
                    outcome, why = self._vanished(row.id, a)
                    self.ledger.update_attempt(a.id, AttemptState.GONE, outcome=outcome.value, reason=why)
                if s.dispatch_state is not None:
                    self.ledger.set_dispatch(row.id, s.dispatch_state, message=s.message)
                    report["interrupted"].append(row.id)
            case Verdict.ENDED:
                how = None
                if row.handle is not None:
                    how = self.lanes.get(row.handle.lane).how_it_ended(row.handle, row.id)
                self._ended(view, how or "no longer at the provider")
            case Verdict.NOTHING:
                pass

    def _adopt(self, row: DispatchRow, s: Settlement, report: dict[str, Any]) -> None:
        keep, owner, state = s.keep, s.keep_attempt, s.keep_state
        if keep is None or state is None:  # pragma: no cover - settle sets them for KEEP
            return
        handle = keep.handle
        if owner is not None:
            handle = evolve(handle, rung=owner.rung.key)  # a handle names its rung by the rung's own key
            recorded = attempt_for(keep, (owner,)) is not None
            outcome = (owner.outcome if recorded else None) or Outcome.ADOPTED.value
            self.ledger.update_attempt(owner.id, state, handle=handle.id, outcome=outcome)
        report["adopted"].append(f"{row.id}:{handle.lane}:{handle.id}")
        if s.dispatch_state is DispatchState.STARTED:
            self.ledger.set_dispatch(row.id, DispatchState.STARTED, handle=handle)
        elif s.dispatch_state is not None:
            self.ledger.set_dispatch(row.id, s.dispatch_state, message=s.message)
            report["interrupted"].append(row.id)

    def _ended(self, view: DispatchView, note: str) -> None:
        for a in view.attempts:
            if a.state in (AttemptState.RUNNING, AttemptState.PENDING):
                self.ledger.update_attempt(a.id, AttemptState.ENDED, outcome=Outcome.ENDED.value, reason=note)
        self.ledger.set_dispatch(view.id, DispatchState.ENDED, message=note)

    def _vanished(self, dispatch: str, a: AttemptRecord) -> tuple[Outcome, str]:
        if not needs_history(a):
            return vanished(a, None)
        match self.lanes.get(a.rung.lane).was_submitted(dispatch, a):
            case Success(seen):
                return vanished(a, seen)
            case Failure(f):
                return vanished(a, None, f.message)
        raise AssertionError("unreachable")  # pragma: no cover

    def _release_all(
        self, view: DispatchView, items: tuple[LiveItem, ...], report: dict[str, Any], *, mark: bool = True
    ) -> None:
        for item in items:
            err = self.release(item)
            if err is not None:
                report["errors"].append(f"{view.id}: {err}")
                continue
            a = attempt_for(item, view.attempts) if mark else None
            if a is not None:
                self.ledger.update_attempt(
                    a.id, AttemptState.CANCELLED, handle=item.handle.id, outcome=Outcome.RELEASED.value
                )
            report["released"].append(f"{view.id}:{item.handle.lane}:{item.handle.id}")


def cancel(ledger: Ledger, lanes: Lanes, reporter: Reporter, dispatch: str, *, wait_s: float = 60.0) -> dict[str, Any]:
    """Mark the dispatch (and its children) cancelled, wait for a live walker to stop, release everything."""
    row = ledger.dispatch(dispatch)
    if row is None:
        raise JobError("unknown_dispatch", f"no dispatch {dispatch!r} in the ledger", None)
    targets = [row, *ledger.children(dispatch)]
    for r in targets:
        ledger.set_dispatch(r.id, DispatchState.CANCELLED, message="cancelled by eps cancel")
    for r in targets:  # a live walker sees the mark at its next step and stops
        poll_until(partial(_walker_gone, ledger, r.id), timeout_s=wait_s, interval_s=0.2)
    rec = Reconciler(ledger, lanes, reporter)
    report: dict[str, Any] = {"cancelled": [r.id for r in targets], "released": [], "errors": []}
    for r in targets:
        fresh = ledger.dispatch(r.id)
        if fresh is None:
            continue
        part = rec.reconcile_dispatch(fresh, resuming=False)
        report["released"].extend(part["released"])
        report["errors"].extend(part["errors"])
    return report


def _walker_gone(ledger: Ledger, dispatch: str) -> bool | None:
    return True if not ledger.is_owned_elsewhere(dispatch) else None


def status(ledger: Ledger, dispatch: str | None) -> list[dict[str, Any]]:
    rows = [ledger.dispatch(dispatch)] if dispatch else ledger.dispatches()
    out = []
    for r in rows:
        if r is None:
            raise JobError("unknown_dispatch", f"no dispatch {dispatch!r} in the ledger", None)
        attempts = ledger.attempts(r.id)
        out.append(
            {
                "dispatch": r.id,
                "parent": r.parent,
                "intent": r.intent,
                "state": r.state.value,
                "terminal": r.terminal,
                "message": r.message,
                "handle": codec.to_data(r.handle) if r.handle else None,
                "created_at": r.created_at,
                "attempts": [
                    {
                        "seq": a.seq,
                        "rung": a.rung,
                        "state": a.state.value,
                        "handle": a.handle,
                        "outcome": a.outcome,
                        "reason": a.reason,
                    }
                    for a in attempts
                ],
            }
        )
    return out
