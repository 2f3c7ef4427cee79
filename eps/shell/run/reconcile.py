"""Reconcile the ledger with what the providers report; ``eps cancel`` and ``eps status``.

The shell gathers (the ledger rows, every usable lane's inventory under eps's
names, once per command) and carries out; what to keep, adopt, release or mark
is decided by the pure :func:`eps.core.settle.settle`.  Resources whose
dispatch the ledger does not know are reported, never touched (they may be
another ledger's).

Races with other eps processes: the rows are read *before* the inventory is
taken, each dispatch is settled only under its lock (a live walker holds it),
and a dispatch whose rows changed after the inventory was taken is left to the
next reconcile: what an inventory taken too early does not show is never judged
gone.  Dispatches are settled in parallel (a ``cancel --all`` of thousands of
machines takes seconds, not hours), each by one thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from functools import partial
from typing import TYPE_CHECKING, Any

from eps.core.ends import result_word
from eps.core.model import JobError, evolve
from eps.core.outcome import AttemptRecord
from eps.core.settle import (
    RELEASE_ONLY,
    DispatchView,
    JobSeen,
    LiveItem,
    Settlement,
    Verdict,
    attempt_for,
    needs_history,
    preempted_attempts,
    settle,
    to_probe,
    vanished,
)
from eps.core.states import (
    SETTLED_DISPATCH_STATES,
    AttemptState,
    DispatchState,
    Outcome,
)
from eps.shell.lanes import Lanes
from eps.shell.run.ownership import SUPERVISED
from eps.shell.state.events import Events
from eps.shell.state.ledger import AttemptRow, DispatchRow, Ledger, QuarantinedRow
from eps.shell.util.parallel import each
from eps.shell.util.polling import poll_until

if TYPE_CHECKING:
    from eps.core.jobscript import JobProgress
    from eps.shell.lanes.base import Lane
    from eps.shell.run.finish import Finisher

#: Dispatches that may hold something and are not settled yet.
ACTIVE_STATES: tuple[DispatchState, ...] = (
    DispatchState.WALKING,
    DispatchState.STARTED,
    DispatchState.HELD,
    DispatchState.INTERRUPTED,
    DispatchState.PREEMPTED,
    DispatchState.WAITING,
)
_REPORT_KEYS = ("adopted", "released", "foreign", "interrupted", "ended", "preempted", "errors", "skipped")


def view_of(row: DispatchRow, ledger: Ledger, attempts: list[AttemptRow] | None = None) -> DispatchView:
    """``row`` as settle sees it, with its attempts (``attempts``: read already)."""
    records = tuple(a.record() for a in (ledger.attempts(row.id) if attempts is None else attempts))
    return DispatchView(row.id, row.state, row.job.pin is not None, row.handle, records,
                        job_ended=row.exit_code is not None)  # fmt: skip


def _last_change(row: DispatchRow, attempts: list[AttemptRow]) -> float:
    return max([row.updated_at, *(a.updated_at for a in attempts)])


class Reconciler:
    """Compare the ledger with what the providers report; adopt or clean up (see settle)."""

    def __init__(
        self,
        ledger: Ledger,
        lanes: Lanes,
        reporter: Events,
        *,
        workers: int = 16,
        wall: Callable[[], float] = time.time,
        answer_within_s: float | None = None,
        wake: bool = False,
        used_lanes_only: bool = False,
    ) -> None:
        self.used_lanes_only = used_lanes_only  # status: ask only the lanes of what it settles (_lanes_used)
        self.wake = wake  # a stopped machine whose outputs wait is started again to pull them (minutes)
        self.answer_within_s = answer_within_s  # how long each provider's listing may take (None: as long as it takes)
        self.ledger = ledger
        self.lanes = lanes
        self.reporter = reporter
        self.workers = max(1, workers)
        self.wall = wall
        self.unchecked: dict[str, str] = {}  # lane -> why its inventory could not be read
        self.down: dict[str, str] = {}  # lane -> why it cannot be used here (so it was not asked)

    def inventory(self, on: Collection[str] | None = None) -> list[LiveItem]:
        """Everything under eps's names, one listing per usable lane (of ``on`` only, when
        given); a lane that cannot be listed is noted in :attr:`unchecked` and the others are
        still read."""
        found: list[LiveItem] = []
        names = [n for n in self.lanes.names() if on is None or n in on]
        # A lane that cannot be used here (no credentials, not configured) is not asked, and
        # what it may hold is not judged gone: settle treats it as blind.
        for name in names:
            down = self.lanes.down(name)
            if down is not None:
                self.down[name] = down.reason
                self.unchecked[name] = f"not checked: {down.reason}"
        lanes = [self.lanes.get(n) for n in names if n not in self.down]
        if not lanes:
            return found
        from returns.result import Failure, Success  # only where a lane is asked: a status of none skips it

        answers: dict[str, Any] = {}
        if self.answer_within_s is None:
            for lane in lanes:
                answers[lane.name] = lane.inventory(None)
        else:
            # Every provider asked at once, each within the time given; one that does not answer in time is
            # noted and judged next time (daemon threads: a hung call never holds the command open).
            def ask(lane: Lane) -> None:
                try:
                    answers[lane.name] = lane.inventory(None)
                except Exception as exc:  # e.g. a late call meeting its lane closed after the command
                    answers[lane.name] = f"could not be listed ({type(exc).__name__}); shown as the ledger has it"

            threads = [threading.Thread(target=ask, args=(lane,), daemon=True) for lane in lanes]
            for t in threads:
                t.start()
            deadline = time.monotonic() + self.answer_within_s
            for t in threads:
                t.join(max(0.0, deadline - time.monotonic()))
        for lane in lanes:
            match answers.get(lane.name):
                case Success(items):
                    found.extend(items)
                case Failure(f):
                    self.unchecked[lane.name] = f.message
                case str(broke):  # it raised: not shown, its text may hold a URL
                    self.unchecked[lane.name] = broke
                case None:
                    late = f"no answer within {self.answer_within_s:g} s; shown as the ledger has it"
                    self.unchecked[lane.name] = late
        return found

    def release(self, item: LiveItem) -> str | None:
        """Release ``item``; an error message, or ``None`` once it is gone."""
        from returns.result import Failure

        match self.lanes.get(item.handle.lane).release(item.handle):
            case Failure(f):
                return str(f.message)
        return None

    def reconcile(
        self,
        only: Collection[str] | None = None,
        *,
        owners: bool = False,
        resuming: bool = False,
        leave: Collection[str] = (),
    ) -> dict[str, Any]:
        """Settle every active dispatch and every dispatch that owns something live (or only
        those in ``only``, and with ``owners`` every owner of something live as well), but
        those in ``leave`` (a resume settles its own dispatch, under its lock).
        Returns the report: adopted, released, foreign, interrupted, ended, preempted,
        skipped (busy or changed meanwhile), errors and unchecked lanes."""
        rows = self.ledger.dispatches(states=ACTIVE_STATES) if only is None else None
        ids = {r.id for r in rows} if rows is not None else set(only or ())
        ids -= set(leave)
        restrict, narrow = only is not None and not owners, self.used_lanes_only and not owners
        # status: a dispatch its walker holds is skipped (as _settle_one would), its lanes not asked
        ids -= (busy := {d for d in ids if self.ledger.is_owned_elsewhere(d)} if narrow else set())
        on = self._lanes_used(ids, rows and [r for r in rows if r.id in ids]) if narrow else None
        taken_at = self.wall()  # rows first, then the inventory: see the module docstring
        by_dispatch: dict[str, list[LiveItem]] = {}
        for item in self.inventory(on):
            by_dispatch.setdefault(item.dispatch, []).append(item)
        report: dict[str, Any] = {k: [] for k in _REPORT_KEYS}
        report["unchecked"] = self.unchecked
        report["skipped"].extend(f"{d}: being walked by another eps process" for d in sorted(busy))
        read = {r.id for r in rows} if rows is not None else set()  # the active rows, just read: not read again
        found = [] if restrict else [d for d in by_dispatch if d not in ids and d not in leave]
        known = _known(self.ledger, found)  # one query for the others found, not one each
        for d, items in by_dispatch.items():
            if (restrict and d not in ids) or d in leave or d in read:
                continue
            if (d in ids or d in known) and self.ledger.dispatch(d) is not None:
                ids.add(d)
            elif d in self.ledger.quarantined:
                report["errors"].append(f"dispatch {d}: its ledger row cannot be read; its machines are left alone")
            else:
                report["foreign"].extend(f"{i.handle.lane}:{i.handle.id}" for i in items)
        work = partial(self._settle_one, by_dispatch=by_dispatch, taken_at=taken_at, resuming=resuming)
        parts = each(work, sorted(ids), self.workers)
        for part in parts:
            for k, v in part.items():
                report[k].extend(v)
        return report

    def _lanes_used(self, ids: set[str], rows: list[DispatchRow] | None) -> set[str] | None:
        """The lanes dispatches ``ids`` (``rows``: read already) may hold something on, their
        handles' and attempts' (an attempt is recorded before its machine or job is asked for);
        no other lane is built or imported.  ``None`` (every lane): one of them cannot be read."""
        if not ids:
            return set()
        if rows is None:
            rows = [r for d in sorted(ids) if (r := self.ledger.dispatch(d)) is not None]
        if len(rows) < len(ids):  # a row that cannot be read (quarantined): judged on every lane
            return None
        attempts = self.ledger.attempts_of(sorted(ids))  # one query
        if len(attempts) < len(ids):  # an attempt that cannot be read: likewise
            return None
        return {r.handle.lane for r in rows if r.handle is not None} | {
            a.lane for found in attempts.values() for a in found
        }

    def _settle_one(
        self, dispatch: str, *, by_dispatch: dict[str, list[LiveItem]], taken_at: float, resuming: bool
    ) -> dict[str, list[str]]:
        part: dict[str, list[str]] = {k: [] for k in _REPORT_KEYS}
        with self.ledger.owning(dispatch) as owned:
            if not owned:
                part["skipped"].append(f"{dispatch}: being walked by another eps process")
                return part
            row = self.ledger.dispatch(dispatch)
            if row is None:
                return part
            if (host := _leased_elsewhere(self.ledger, dispatch)) is not None:
                part["skipped"].append(f"{dispatch}: host {host}'s supervisor holds it")
                return part
            if row.state in SUPERVISED and self._supervised_elsewhere():
                # a live supervisor takes every unsettled dispatch on: not a dead walk, only not taken yet
                part["skipped"].append(f"{dispatch}: its supervisor is taking it on")
                return part
            children = self.ledger.children(dispatch)
            if children:  # a --count parent: it has ended when every copy has
                self._settle_parent(row, children, part)
                return part
            try:
                attempts = self.ledger.attempts(dispatch)  # read once: the change check's and settle's
                if row.state not in RELEASE_ONLY and _last_change(row, attempts) >= taken_at:
                    part["skipped"].append(f"{dispatch}: changed while the providers were read; settled next time")
                    return part
                self._settle(row, by_dispatch.get(dispatch, []), part, resuming=resuming, attempts=attempts)
            except QuarantinedRow as exc:
                part["errors"].append(str(exc))
        return part

    def _supervised_elsewhere(self) -> bool:
        from eps.shell.run.ownership import alive_elsewhere

        return alive_elsewhere(self.ledger.state_dir)

    def _settle_parent(self, row: DispatchRow, children: list[DispatchRow], report: dict[str, list[str]]) -> None:
        if row.state not in (DispatchState.STARTED, DispatchState.FAILED) or any(
            c.state not in SETTLED_DISPATCH_STATES for c in children
        ):
            return
        ok = sum(1 for c in children if result_word(c.state, c.job_status, c.exit_code) == "succeeded")
        if row.state is DispatchState.STARTED:
            self.ledger.set_dispatch(row.id, DispatchState.ENDED, message=f"{ok}/{len(children)} copies succeeded")
            report["ended"].append(row.id)
        _drop_env_values(self.ledger.state_dir, row.id)

    def _probed(self, view: DispatchView, row: DispatchRow, items: list[LiveItem], *, resuming: bool) -> list[LiveItem]:
        """``items`` with what their job record says, for those :func:`to_probe` names."""
        asked = {i.handle.id for i in to_probe(view, items, resuming=resuming)}
        finisher = _finisher(self.ledger, self.lanes)

        def seen(item: LiveItem) -> LiveItem:
            progress = finisher.progress(evolve(row, handle=item.handle)).value_or(None)
            return item._replace(job=_seen(progress))

        return [seen(i) if i.handle.id in asked else i for i in items]

    def _settle(self, row: DispatchRow, items: list[LiveItem], report: dict[str, list[str]], *, resuming: bool,
                attempts: list[AttemptRow]) -> None:  # fmt: skip
        view = view_of(row, self.ledger, attempts)
        items = self._probed(view, row, items, resuming=resuming)
        s = settle(view, items, blind=frozenset(self.unchecked), resuming=resuming)
        for item, owner in s.not_launched:  # no job on it, and nobody will launch one
            err = self.release(item)
            if err is not None:
                report["errors"].append(f"{row.id}: {err}")
                continue
            if owner is not None:
                self.ledger.update_attempt(
                    owner.id, AttemptState.CANCELLED, handle=item.handle.id, outcome=Outcome.NOT_LAUNCHED,
                    reason="the machine came up, but eps stopped before the job was launched on it; released",
                )  # fmt: skip
            report["released"].append(f"{row.id}:{item.handle.lane}:{item.handle.id}")
        for lane in s.blind:
            report["errors"].append(f"{row.id}: cannot check {lane}: {self.unchecked[lane]}")
        match s.verdict:
            case Verdict.BLIND | Verdict.NOTHING:
                pass
            case Verdict.RELEASE:
                self._release_all(view, s.release, report)
            case Verdict.FINISHED:
                # Outputs and log first, then the machine: nothing is lost before it is pulled.
                handle = s.release[0].handle if s.release else row.handle
                finisher = _finisher(self.ledger, self.lanes)
                got = finisher.collect(evolve(row, handle=handle), wake=self.wake)
                if got.kept:  # a pull that failed keeps the machine for the next eps pull
                    finisher.hang_up(evolve(row, handle=handle))
                    self._ended(view, f"{got.note}; its machine is kept: eps pull {row.id}", Outcome.KEPT)
                else:
                    self._ended(view, got.note)  # the job's story is "ended"; releasing its machine is upkeep
                    self._release_all(view, s.release, report, mark=False)
                report["ended"].append(row.id)
            case Verdict.PREEMPTED:
                self._release_all(view, s.release, report)
                for a in preempted_attempts(view):
                    self.ledger.update_attempt(
                        a.id, AttemptState.GONE, outcome=Outcome.PREEMPTED, reason="spot VM taken back"
                    )
                self.ledger.set_dispatch(row.id, DispatchState.PREEMPTED, message=s.message)
                report["preempted"].append(row.id)
            case Verdict.KEEP:
                self._release_all(view, s.release, report)
                self._adopt(row, s, report)
            case Verdict.WALK_DIED:
                if self._ran_unrecorded(row, s.vanished, report):
                    return
                for a in s.vanished:
                    outcome, why = self._vanished(row.id, a)
                    self.ledger.update_attempt(a.id, AttemptState.GONE, outcome=outcome, reason=why)
                if s.dispatch_state is not None:
                    self.ledger.set_dispatch(row.id, s.dispatch_state, message=s.message)
                    report["interrupted"].append(row.id)
            case Verdict.ENDED:
                self._gone(row, view, report)

    def _gone(self, row: DispatchRow, view: DispatchView, report: dict[str, list[str]]) -> None:
        """A started job that is no longer at its provider: pull what can be, then it has
        ended, unless the cluster ended its run (a SLURM preemption or lost node)."""
        finisher = _finisher(self.ledger, self.lanes)
        got = finisher.collect(row)
        if (why := finisher.interruption(row)) is not None:
            finisher.interrupted(row, got, why)
            report["preempted"].append(row.id)
            return
        note = got.note
        if not got.pulled and row.handle is not None:
            how = self.lanes.get(row.handle.lane).how_it_ended(row.handle, row.id)
            note = f"the machine was gone before its outputs were pulled ({how or 'no longer at the provider'})"
        self._ended(view, note)
        report["ended"].append(row.id)

    def _adopt(self, row: DispatchRow, s: Settlement, report: dict[str, list[str]]) -> None:
        keep, owner, state = s.keep, s.keep_attempt, s.keep_state
        if keep is None or state is None:  # pragma: no cover - settle sets them for KEEP
            return
        handle = keep.handle
        if owner is not None:
            handle = evolve(handle, rung=owner.rung.key)  # a handle names its rung by the rung's own key
            recorded = attempt_for(keep, (owner,)) is not None
            outcome = (owner.outcome if recorded else None) or Outcome.ADOPTED
            self.ledger.update_attempt(owner.id, state, handle=handle.id, outcome=outcome)
        report["adopted"].append(f"{row.id}:{handle.lane}:{handle.id}")
        if s.dispatch_state is DispatchState.STARTED:
            self.ledger.set_dispatch(row.id, DispatchState.STARTED, handle=handle)
        elif s.dispatch_state is not None:
            self.ledger.set_dispatch(row.id, s.dispatch_state, message=s.message)
            report["interrupted"].append(row.id)

    def _ended(self, view: DispatchView, note: str, outcome: Outcome = Outcome.ENDED) -> None:
        for a in view.attempts:
            if a.state in (AttemptState.RUNNING, AttemptState.PENDING):
                self.ledger.update_attempt(a.id, AttemptState.ENDED, outcome=outcome, reason=note)
        self.ledger.set_dispatch(view.id, DispatchState.ENDED, message=note)
        _drop_env_values(self.ledger.state_dir, view.id)

    def _ran_unrecorded(
        self, row: DispatchRow, vanished: tuple[AttemptRecord, ...], report: dict[str, list[str]]
    ) -> bool:
        """A walk killed right after its sbatch, whose job (a sweep's task ``J_i``: its
        array, named ``eps-D``) ran and already left the queue: that job adopted as the
        dispatch's start (its outputs are in its root), never submitted again.  Whether it was."""
        from eps.shell.lanes.slurm.lane import SlurmLane

        newest = vanished[-1] if vanished else None
        if newest is None or not needs_history(newest):
            return False
        lane = self.lanes.get(newest.rung.lane)
        if not isinstance(lane, SlurmLane):
            return False
        found = lane.ran_unrecorded(row.id, newest).value_or(None)
        if found is None:
            return False
        for a in vanished[:-1]:
            outcome, why = self._vanished(row.id, a)
            self.ledger.update_attempt(a.id, AttemptState.GONE, outcome=outcome, reason=why)
        self.ledger.update_attempt(newest.id, AttemptState.RUNNING, handle=found.id, outcome=Outcome.ADOPTED)
        self.ledger.set_dispatch(row.id, DispatchState.STARTED, handle=found)
        report["adopted"].append(f"{row.id}:{found.lane}:{found.id}")
        return True

    def _vanished(self, dispatch: str, a: AttemptRecord) -> tuple[Outcome, str]:
        from returns.result import Failure, Success

        if not needs_history(a):
            return vanished(a, None)
        match self.lanes.get(a.rung.lane).was_submitted(dispatch, a):
            case Success(seen):
                return vanished(a, seen)
            case Failure(f):
                return vanished(a, None, f.message)
        raise AssertionError("unreachable")  # pragma: no cover

    def _release_all(
        self, view: DispatchView, items: tuple[LiveItem, ...], report: dict[str, list[str]], *, mark: bool = True
    ) -> None:
        for item in items:
            err = self.release(item)
            if err is not None:
                report["errors"].append(f"{view.id}: {err}")
                continue
            a = attempt_for(item, view.attempts) if mark else None
            if a is not None and a.state is not AttemptState.CANCELLED:
                self.ledger.update_attempt(
                    a.id, AttemptState.CANCELLED, handle=item.handle.id, outcome=Outcome.RELEASED
                )
            report["released"].append(f"{view.id}:{item.handle.lane}:{item.handle.id}")


def _known(ledger: Ledger, dispatches: list[str]) -> set[str]:
    """Which of ``dispatches`` the ledger has a row for (readable or not), one query per 500."""
    known: set[str] = set()
    for i in range(0, len(dispatches), 500):
        marks = ",".join("?" * len(part := dispatches[i : i + 500]))
        known.update(str(r[0]) for r in ledger.rows(f"SELECT id FROM dispatches WHERE id IN ({marks})", tuple(part)))  # noqa: S608
    return known


def _leased_elsewhere(ledger: Ledger, dispatch: str) -> str | None:
    """The other host whose lease holds ``dispatch`` on a shared ledger (``None``: none)."""
    if not ledger.shared:
        return None
    from eps.shell.state.team import held_elsewhere

    return held_elsewhere(ledger, dispatch)


def _seen(progress: JobProgress | None) -> JobSeen:
    if progress is None:
        return JobSeen.UNKNOWN
    return JobSeen.ENDED if progress.ended else JobSeen.RUNNING if progress.launched else JobSeen.NONE


SETTLE_FIRST_S = 20.0  # a cancel leaves a job that ended (or is unreadable) to its supervisor this long


def _settled_or_unowned(ledger: Ledger, dispatch: str) -> bool | None:
    row = ledger.dispatch(dispatch)
    settled = row is None or row.state in (DispatchState.ENDED, DispatchState.FAILED, DispatchState.CANCELLED)
    return True if settled or not ledger.is_owned_elsewhere(dispatch) else None


def _unowned(ledger: Ledger, dispatch: str) -> bool | None:
    return True if not ledger.is_owned_elsewhere(dispatch) else None


def cancel(
    ledger: Ledger,
    lanes: Lanes,
    reporter: Events,
    dispatches: Collection[str] | None,
    *,
    wait_s: float = 60.0,
    workers: int = 16,
) -> dict[str, Any]:
    """Cancel ``dispatches`` (and their copies), or every active one (``None``: ``--all``), wait
    for live walkers to stop, and release what they hold with one inventory per lane.

    A dispatch that already ended (or failed) is not rewritten: it says so, and anything it
    still holds is released all the same."""
    if dispatches is None:
        roots = [r for r in ledger.dispatches(states=ACTIVE_STATES) if r.parent is None]
    else:
        roots = []
        for d in dispatches:
            row = ledger.dispatch(d)
            if row is None:
                raise JobError("unknown_dispatch", f"no dispatch {d!r} in the ledger", None)
            roots.append(row)
    targets = {r.id: r for root in roots for r in (root, *ledger.children(root.id))}
    report: dict[str, Any] = {"cancelled": [], "finished": [], "errors": []}
    finisher = _finisher(ledger, lanes)
    started = []
    for r in targets.values():
        if r.state in (DispatchState.ENDED, DispatchState.FAILED):
            report["finished"].append(f"{r.id}: already {r.state.value}; nothing to cancel")
            continue
        if r.state is DispatchState.STARTED and r.handle is not None:
            started.append(r)
            continue
        ledger.set_dispatch(r.id, DispatchState.CANCELLED, message="cancelled by eps cancel")
        report["cancelled"].append(r.id)
    # started jobs are stopped and pulled side by side (each may take its kill grace)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(started) or 1))) as pool:
        list(pool.map(partial(_stop_started, ledger, finisher, report=report), started))
    for d in targets:  # a live walker sees the mark at its next step and stops
        poll_until(partial(_unowned, ledger, d), timeout_s=wait_s, interval_s=0.2)
    from eps.shell.run.sweep_cancel import cancel_arrays

    report["errors"].extend(cancel_arrays(ledger, lanes, targets.values()))  # a sweep: one scancel per array
    rec = Reconciler(ledger, lanes, reporter, workers=workers)
    part = rec.reconcile(set(targets), owners=dispatches is None)  # --all: and whatever else is live
    for d in report["cancelled"]:
        _drop_env_values(ledger.state_dir, d)
    report["errors"].extend(part["errors"])
    report.update({k: part[k] for k in ("released", "skipped", "unchecked")})
    return report


def _stop_started(ledger: Ledger, finisher: Finisher, row: DispatchRow, *, report: dict[str, Any]) -> None:
    """Cancel a started job: nothing it wrote is lost.  One that had already ended (its end
    written, not yet pulled) is finished instead (pulled, then released; its own code stays);
    a running one is stopped (TERM, KILL after the grace) and its partial outputs and log are
    pulled before reconcile releases its machine; a pull that failed keeps the machine.

    A dispatch its supervisor follows is first marked cancelled, so the supervisor lets it
    go (it follows only started dispatches); then it is stopped and pulled here."""
    if ledger.is_owned_elsewhere(row.id):
        from eps.shell.run.finish import STOP_WAIT_S

        # A cancel is final: marked first, a job that had already ended would lose its own result, so
        # only a job seen running is marked at once; an ended (or unreadable) one is left to its supervisor.
        latest = ledger.dispatch(row.id) or row
        early = finisher.progress(latest).value_or(None)
        if latest.exit_code is not None or early is None or early.ended or not early.exists:
            poll_until(partial(_settled_or_unowned, ledger, row.id), timeout_s=SETTLE_FIRST_S, interval_s=0.1)
            now = ledger.dispatch(row.id)
            if now is not None and now.state in (DispatchState.ENDED, DispatchState.FAILED):
                report["finished"].append(f"{row.id}: had already ended; not cancelled: {now.message}")
                return
        if ledger.is_owned_elsewhere(row.id):
            ledger.set_dispatch(row.id, DispatchState.CANCELLED, message="cancelled by eps cancel; stopping its job")
            poll_until(partial(_unowned, ledger, row.id), timeout_s=STOP_WAIT_S, interval_s=0.1)
    with ledger.owning(row.id) as owned:
        fresh = ledger.dispatch(row.id) if owned else None
        if fresh is not None and fresh.state is DispatchState.CANCELLED and fresh.handle is not None:
            fresh = evolve(fresh, state=DispatchState.STARTED)  # marked above: its job still runs
        if fresh is None or fresh.state is not DispatchState.STARTED:
            report["finished"].append(f"{row.id}: being finished by another eps process; nothing to cancel")
            return
        seen = finisher.progress(fresh).value_or(None)
        if (seen is not None and seen.ended) or (seen is None and fresh.exit_code is not None):
            note = finisher.finish(fresh)
            report["finished"].append(f"{row.id}: had already ended; not cancelled: {note}")
            if "its machine is kept" in note:
                report["errors"].append(f"{row.id}: {note}")
            return
        if seen is not None and seen.exists:
            finisher.stop(fresh)
        ledger.set_dispatch(row.id, DispatchState.CANCELLED, message="cancelled by eps cancel")
        report["cancelled"].append(row.id)
        if seen is None or not seen.exists:
            return  # nothing readable there: reconcile releases what is live
        got = finisher.collect(fresh)
        message = f"cancelled by eps cancel; {got.note}"
        if got.kept:
            message += f"; its machine is kept: eps pull {row.id} brings them back, then releases it"
            finisher.hang_up(fresh)
            for a in ledger.attempts(row.id):
                if a.state in (AttemptState.RUNNING, AttemptState.PENDING):
                    ledger.update_attempt(a.id, AttemptState.ENDED, outcome=Outcome.KEPT, reason=message)
            report["errors"].append(f"{row.id}: {message}")
        ledger.set_dispatch(row.id, DispatchState.CANCELLED, message=message)


def _finisher(ledger: Ledger, lanes: Lanes) -> Finisher:
    """The :class:`~eps.shell.run.finish.Finisher`, imported when something is to be settled (ssh, rsync)."""
    from eps.shell.run.finish import Finisher

    return Finisher(ledger, lanes)


def _drop_env_values(state_dir: str, dispatch: str) -> None:
    """:func:`eps.shell.lanes.jobs.drop_env_values`, imported when a dispatch settles (ssh, rsync)."""
    from eps.shell.lanes.jobs import drop_env_values

    drop_env_values(state_dir, dispatch)
