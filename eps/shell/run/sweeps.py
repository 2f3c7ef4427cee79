"""A sweep's tasks on a SLURM rung: one ``sbatch --array``, and its ladder (docs/design/sweeps.md).

The walker records a sweep as a parent and N task rows (the ``--count`` shape).  When the
core's first step for a task is a SLURM tier, every task still to walk is submitted there
as one array (the cluster's rule 4: never sbatch in a loop), ``%K`` from
``--sweep-parallel``: each task's attempt is recorded before the sbatch, then gets its own
handle ``J_i``.  Then the array is parked on as one job is: each task that starts is
recorded started (the supervisor follows it to its end), and the tier's park clock runs
while some task is pending for a reason of the cluster (not for the array's own ``%K``,
:mod:`eps.core.array_move`).  When the core says the cap has passed, the pending tasks are
cancelled (``scancel --state=PENDING J``: the running ones stay), and those that left
unstarted go to the next granted tier as ONE array (``%`` = K minus the tasks still
running), each with its attempt there and its new handle ``J2_i``.  When the core holds
them (a pinned sweep, the ladder's last tier) they are held where they are; when the
ladder is spent (the next rung is a paid lane) or an array is refused, the tasks still to
start are walked task by task by the caller, from the attempts on record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from returns.result import Failure, Success

from eps.core.array_move import (
    after_poll,
    array_rung,
    clock_runs,
    cluster_reason,
    moved_at_once,
    not_yet_walked,
    running_tasks,
    sweep_cancelled,
    task_index,
    walk_owed,
)
from eps.core.events import Event
from eps.core.model import CapacitySnapshot, Job, QosGrants, Rung, evolve
from eps.core.outcome import Handle
from eps.core.states import AttemptState, DispatchState, HandleState, Outcome
from eps.core.walk import Begin, Hold, Queued, Wait, Walk, Withdraw, Withdrawn, WithdrawWhy, next_step

if TYPE_CHECKING:
    from eps.shell.config.settings import Settings
    from eps.shell.lanes import Lanes
    from eps.shell.lanes.jobs import JobFiles
    from eps.shell.lanes.slurm.lane import SlurmLane
    from eps.shell.state.events import Events
    from eps.shell.state.ledger import AttemptRow, DispatchRow, Ledger


class Walking(Protocol):
    """What of the walker an array submission uses."""

    settings: Settings
    ledger: Ledger
    lanes: Lanes
    reporter: Events
    grants: QosGrants
    snapshot: CapacitySnapshot
    files: JobFiles
    keep_locks: frozenset[str]
    clock: Callable[[], float]
    wall: Callable[[], float]
    sleep: Callable[[float], None]
    poll_interval_s: float
    poll_failures_allowed: int

    def select_files(self, dispatch: str, parent: str | None, job: Job) -> object | None: ...


def submit_array(walker: Walking, parent: str, children: list[str]) -> tuple[list[tuple[str, Handle]], list[str]]:
    """The tasks the sweep's arrays took (each with its handle ``J_i``: started, or held
    where it is), and the ids left for the caller to walk one by one.  A resumed sweep whose
    dead walk left tasks parked on an array parks on it again as one first."""
    ledger = walker.ledger
    top = ledger.dispatch(parent)
    if top is None or top.job.sweep <= 1:
        return [], children
    rows = [r for r in (ledger.dispatch(c) for c in children) if r is not None]
    taken = _resume_parked(walker, parent, top.job, rows)
    taken += _resume_moved(walker, parent, top.job, [r for r in rows if r.id not in {d for d, _ in taken}])
    by_index = {r.job.task_index: r for r in rows}
    tried = {i: (r.state, len(ledger.attempts(r.id))) for i, r in by_index.items()}
    fresh = [by_index[i] for i in not_yet_walked(tried)]
    if fresh and walker.select_files(fresh[0].id, parent, fresh[0].job) is None:  # else each fails on its own
        walk, step = next_step(Walk(fresh[0].job, walker.snapshot, walker.grants), Begin(),
                               policy=walker.settings.policy)  # fmt: skip
        if (rung := array_rung(step)) is not None:
            taken += _locked(walker, fresh, lambda: _Ladder(walker, parent, top.job).walk(
                walk, rung, {r.job.task_index: r for r in fresh}))  # fmt: skip
    ids = {d for d, _ in taken}
    return taken, [c for c in children if c not in ids]


def _locked(walker: Walking, rows: list[DispatchRow],
            go: Callable[[], list[tuple[str, Handle]]]) -> list[tuple[str, Handle]]:  # fmt: skip
    """``go()`` with each of ``rows`` locked (walked here: another eps process's reconcile
    leaves them alone)."""
    for r in rows:
        walker.ledger.acquire(r.id)
    try:
        return go()
    finally:
        for r in rows:
            if r.id not in walker.keep_locks:
                walker.ledger.release(r.id)


def _resume_parked(walker: Walking, parent: str, job: Job, rows: list[DispatchRow]) -> list[tuple[str, Handle]]:
    """The tasks a dead walk left parked on one array (:func:`eps.core.array_move.parked_array`)
    parked on again as one, the park's clock from the array's submission, and moved down the
    ladder as one array, as the dead walk would have (not each task on its own).  Those its
    move had already cancelled when it died (before the next tier's sbatch) go on to that
    tier as one array; those that started meanwhile stay (:func:`~eps.core.array_move.found_parked`)."""
    from eps.core.array_move import FoundParked, found_parked, parked_array
    from eps.core.walk import resume

    ledger = walker.ledger
    by_index = {r.job.task_index: r for r in rows}
    owed = {i: by_index[i] for i in walk_owed({i: r.state for i, r in by_index.items()})}
    tried = {i: ledger.attempts(r.id) for i, r in owed.items()}
    found = parked_array({i: [a.record() for a in tried[i]] for i in owed})
    if found is None:
        return []
    parked = {i: owed[i] for i in found.attempts}
    attempts = {i: next(a for a in tried[i] if a.id == aid) for i, aid in found.attempts.items()}
    first = min(parked)
    if walker.select_files(parked[first].id, parent, parked[first].job) is not None:
        return []
    start = resume(parked[first].job, walker.snapshot, walker.grants, [a.record() for a in tried[first]])
    one = attempts[first]
    array = evolve(one.as_handle(HandleState.PENDING), id=found.array_id)
    since = max(0.0, walker.wall() - min(a.started_at for a in attempts.values()))  # the park's clock is kept
    lane: SlurmLane = walker.lanes.for_rung(one.as_rung())  # type: ignore[assignment]
    match lane.task_states(parent, found.array_id, tuple(parked)):
        case Success(states):
            now = found_parked(parked, states)
        case _:  # unreadable: parked on again as they are on record (the park's polls tell)
            now = FoundParked(tuple(parked), (), ())

    def go() -> list[tuple[str, Handle]]:
        for r in parked.values():
            if r.state is DispatchState.INTERRUPTED:
                ledger.set_dispatch(r.id, DispatchState.WALKING)
        ladder = _Ladder(walker, parent, job)
        for i in now.started:
            ladder._started(array, parked[i], attempts[i])  # it ran meanwhile: it stays where it is
        if now.pending:
            ladder.walk(start.walk, one.as_rung(), {i: parked[i] for i in now.pending},
                        parked_on=(array, {i: attempts[i] for i in now.pending}, since))  # fmt: skip
        if now.moved:  # moved on to the next tier as one array by _resume_moved, next
            ladder.advance(one.as_rung(), array, {i: attempts[i] for i in now.moved}, since)
        return ladder.taken

    return _locked(walker, list(parked.values()), go)


def _resume_moved(walker: Walking, parent: str, job: Job, rows: list[DispatchRow]) -> list[tuple[str, Handle]]:
    """The tasks a dead walk had moved off an array and not yet submitted on the next tier
    (:func:`eps.core.array_move.moved_array`) submitted there as ONE array, not each on its
    own; when the ladder is spent they are left to the caller (each from its attempts).  The
    attempts it recorded on the next tier are settled first (reconcile: an sbatch that ran is
    adopted, one that did not is ``not_submitted``), under the tasks' locks."""
    from eps.core.array_move import moved_array
    from eps.core.walk import resume
    from eps.shell.run.reconcile import Reconciler

    ledger = walker.ledger
    by_index = {r.job.task_index: r for r in rows}
    owed = [by_index[i] for i in walk_owed({i: r.state for i, r in by_index.items()})]
    advanced = [r for r in owed if any(a.outcome == Outcome.PARK_TIMEOUT for a in ledger.attempts(r.id))]
    if not advanced:
        return []

    def go() -> list[tuple[str, Handle]]:
        Reconciler(ledger, walker.lanes, walker.reporter).reconcile({r.id for r in advanced}, resuming=True)
        now = {r.job.task_index: r for r in (ledger.dispatch(r.id) for r in advanced) if r is not None}
        owed_now = {i: now[i] for i in walk_owed({i: r.state for i, r in now.items()})}
        records = {i: [a.record() for a in ledger.attempts(r.id)] for i, r in owed_now.items()}
        moved = {i: owed_now[i] for i in moved_array(records)}
        if not moved or walker.select_files(moved[min(moved)].id, parent, moved[min(moved)].job) is not None:
            return []
        start = resume(moved[min(moved)].job, walker.snapshot, walker.grants, records[min(moved)])
        walk, step = next_step(start.walk, Begin(), policy=walker.settings.policy)
        if (rung := array_rung(step)) is None:
            return []  # the ladder is spent: each task is walked on its own (paid lanes)
        for r in moved.values():
            if r.state is DispatchState.INTERRUPTED:
                ledger.set_dispatch(r.id, DispatchState.WALKING)
        return _Ladder(walker, parent, job).walk(walk, rung, dict(moved))

    return _locked(walker, advanced, go)


class _Ladder:
    """The walk of one sweep's pending tasks down the SLURM tiers, one array per tier."""

    def __init__(self, walker: Walking, parent: str, job: Job) -> None:
        self.w = walker
        self.ledger = walker.ledger
        self.parent = parent
        self.job = job
        self.taken: list[tuple[str, Handle]] = []
        self.parked_s = 0.0  # how long the last array's park clock ran

    def walk(
        self, walk: Walk, rung: Rung, pending: dict[int, DispatchRow],
        parked_on: tuple[Handle, dict[int, AttemptRow], float] | None = None,
    ) -> list[tuple[str, Handle]]:  # fmt: skip
        """Submit ``pending`` on ``rung`` as one array (or, resumed, park on ``parked_on``:
        the array, each task's attempt there, how long it has been parked), then park and
        move down the ladder as one array."""
        at_once = self.job.sweep_parallel
        policy = self.w.settings.policy
        while pending:
            lane: SlurmLane = self.w.lanes.for_rung(rung)  # type: ignore[assignment]
            ran = 0.0
            if parked_on is not None:
                array, attempts, ran = parked_on
                parked_on = None
            else:
                submitted = self._submit(lane, rung, pending, at_once)
                if submitted is None:
                    return self.taken  # refused: each task moves on from its failed attempt, on its own
                array, attempts = submitted
            parked = self._park(lane, walk, rung, array, pending, attempts, ran)
            if parked is None:
                return self.taken
            walk, withdraw = parked
            moved = self._move(lane, rung, array, pending, attempts, withdraw)
            if moved is None:
                return self.taken
            pending = {i: pending[i] for i in moved}
            walk, step = next_step(walk, Withdrawn(rung, withdraw.handle.reason if withdraw.handle else None),
                                   policy=policy)  # fmt: skip
            next_rung = array_rung(step)
            if not pending or next_rung is None:
                return self.taken  # the ladder is spent: the rest go to the paid lanes task by task
            running = running_tasks(j.state for j in lane.sweep_jobs(self.parent).value_or(()))
            at_once = moved_at_once(self.job.sweep_parallel, running)
            rung = next_rung
        return self.taken

    def _submit(
        self, lane: SlurmLane, rung: Rung, pending: dict[int, DispatchRow], at_once: int | None
    ) -> tuple[Handle, dict[int, AttemptRow]] | None:
        """Record each task's attempt on ``rung``, then ONE sbatch for all of them."""
        name = lane.job_name(self.parent)
        attempts = {i: self.ledger.begin_attempt(r.id, rung, name) for i, r in pending.items()}  # before the sbatch
        self.w.reporter.emit(
            Event.ATTEMPT, dispatch=self.parent, rung=rung.key, qos=rung.qos,
            reason={"code": rung.why.value if rung.why else None, "text": rung.reason},
            price_per_hour=rung.price_per_hour,
        )  # fmt: skip
        tasks = tuple(sorted(pending))
        submitted = lane.start_array(self.job, rung, self.parent, tasks, self.w.files, at_once=at_once)
        if isinstance(submitted, Failure):
            failure = submitted.failure()
            for a in attempts.values():
                self.ledger.update_attempt(a.id, AttemptState.FAILED, outcome=failure.kind, reason=failure.message)
            self.w.reporter.emit(
                Event.FAILED, dispatch=self.parent, rung=rung.key, kind=failure.kind.value, code=failure.code,
                message=failure.message, reason={"code": failure.kind.value, "text": failure.message},
            )  # fmt: skip
            return None
        array = submitted.unwrap()
        for i, r in pending.items():
            handle = f"{array.id}_{i}"
            self.ledger.update_attempt(attempts[i].id, AttemptState.PENDING, handle=handle)
            self.w.reporter.emit(Event.SUBMITTED, dispatch=r.id, rung=rung.key, qos=rung.qos, id=handle)
        return array, attempts

    def _park(
        self, lane: SlurmLane, walk: Walk, rung: Rung, array: Handle, pending: dict[int, DispatchRow],
        attempts: dict[int, AttemptRow], ran: float = 0.0,
    ) -> tuple[Walk, Withdraw] | None:  # fmt: skip
        """Park on the array until every task started (``None``), the core holds the pending
        ones (``None``), the sweep is cancelled (``None``) or the tier's cap has passed (the
        walk and the core's Withdraw).  The clock runs only while a task waits for the cluster
        (from ``ran``: a resumed park goes on from the time already parked)."""
        clock = self.w.clock
        last, failures = clock(), 0
        while True:
            if self._cancelled(pending):
                return None  # eps cancel releases what is live
            polled = lane.sweep_jobs(self.parent)
            if isinstance(polled, Failure):
                failures += 1
                if failures > self.w.poll_failures_allowed:  # the lane stopped answering: hold them there
                    self._hold(array, pending, attempts)
                    return None
                self.w.sleep(self.w.poll_interval_s)
                continue
            failures = 0
            states = {i: j for j in polled.unwrap() if (i := task_index(j.job_id, array.id)) is not None}
            for i in after_poll(pending, {i: j.state for i, j in states.items()}).started:
                self._started(array, pending.pop(i), attempts[i])  # started (or already over): it stays here
            if not pending:
                return None
            reasons = [states[i].reason for i in pending]
            now = clock()
            if clock_runs(reasons):
                ran += now - last
            last, self.parked_s = now, ran
            reason = cluster_reason(reasons)
            seen = Queued(rung, evolve(array, reason=reason), int(ran), reason)
            walk, step = next_step(walk, seen, policy=self.w.settings.policy)
            match step:
                case Wait():
                    self.w.reporter.emit(
                        Event.PARKED, dispatch=self.parent, rung=step.rung.key, qos=step.rung.qos, id=array.id,
                        elapsed_s=ran, cap_s=step.cap_s, pending_reason=reason,
                        next=step.next_rung.key if step.next_rung is not None else None,
                        reason={"code": step.decision.action.value, "text": step.decision.reason},
                    )  # fmt: skip
                    left = step.seconds - (ran - int(ran)) if clock_runs(reasons) else self.w.poll_interval_s
                    self.w.sleep(max(0.05, min(self.w.poll_interval_s, left)))
                case Withdraw():
                    return walk, step
                case Hold():
                    self._hold(array, pending, attempts)
                    return None
                case _:  # pragma: no cover - a parked job is only waited on, withdrawn or held
                    self._hold(array, pending, attempts)
                    return None

    def _move(
        self, lane: SlurmLane, rung: Rung, array: Handle, pending: dict[int, DispatchRow],
        attempts: dict[int, AttemptRow], withdraw: Withdraw,
    ) -> tuple[int, ...] | None:  # fmt: skip
        """Cancel the array's pending tasks (the running ones stay) and confirm it: the tasks
        that left unstarted, each attempt advanced (park timeout); a task that started
        between the poll and the cancel stays where it is.  ``None``: not confirmed (the
        tasks are held where they are, and the sweep goes no further down the ladder)."""
        match lane.cancel_pending(self.parent, array.id, tuple(sorted(pending))):
            case Failure(failure):
                self.w.reporter.emit(
                    Event.FAILED, dispatch=self.parent, rung=rung.key, kind=failure.kind.value, code=failure.code,
                    message=failure.message, reason={"code": failure.kind.value, "text": failure.message},
                )  # fmt: skip
                self._hold(array, pending, attempts)
                return None
            case after:
                moved = after.unwrap()
        for i in moved.started:
            self._started(array, pending[i], attempts[i])
        for i in moved.moved:
            self.ledger.update_attempt(
                attempts[i].id, AttemptState.ADVANCED, outcome=Outcome.PARK_TIMEOUT, reason=withdraw.reason
            )
        reason = withdraw.handle.reason if withdraw.handle is not None else None
        self.w.reporter.emit(
            Event.ADVANCED, dispatch=self.parent, rung=rung.key, qos=rung.qos, id=array.id,
            elapsed_s=self.parked_s, pending_reason=reason,
            reason={"code": withdraw.why.value, "text": withdraw.reason},
        )  # fmt: skip
        return moved.moved

    def advance(self, rung: Rung, array: Handle, attempts: dict[int, AttemptRow], parked_s: float) -> None:
        """The attempts of tasks a dead walk's move cancelled on ``rung`` before it died (no
        next sbatch ran) advanced as the move would have (a park timeout), and said once."""
        why = "parked out; the walk that moved it died before the next tier's sbatch"
        for a in attempts.values():
            self.ledger.update_attempt(a.id, AttemptState.ADVANCED, outcome=Outcome.PARK_TIMEOUT, reason=why)
        self.w.reporter.emit(
            Event.ADVANCED, dispatch=self.parent, rung=rung.key, qos=rung.qos, id=array.id, elapsed_s=parked_s,
            pending_reason=None, reason={"code": WithdrawWhy.PARK_TIMEOUT.value, "text": why},
        )  # fmt: skip

    def _cancelled(self, pending: dict[int, DispatchRow]) -> bool:
        rows = [self.ledger.dispatch(d) for d in (self.parent, *(r.id for r in pending.values()))]
        return sweep_cancelled(None if r is None else r.state for r in rows)

    def _started(self, array: Handle, row: DispatchRow, attempt: AttemptRow) -> None:
        from eps.shell.state.codec import to_data

        handle = evolve(array, id=f"{array.id}_{row.job.task_index}", state=HandleState.RUNNING, reason=None)
        self.ledger.update_attempt(attempt.id, AttemptState.RUNNING, handle=handle.id, outcome=Outcome.STARTED)
        self.ledger.set_dispatch(row.id, DispatchState.STARTED, handle=handle)
        self.w.reporter.emit(Event.STARTED, dispatch=row.id, handle=to_data(handle))
        self.taken.append((row.id, handle))

    def _hold(self, array: Handle, pending: dict[int, DispatchRow], attempts: dict[int, AttemptRow]) -> None:
        """The pending tasks stay where they are (P10): each held on its handle, followed to its end."""
        from eps.shell.state.codec import to_data

        for i, row in pending.items():
            handle = evolve(array, id=f"{array.id}_{i}")
            self.ledger.update_attempt(attempts[i].id, AttemptState.PENDING, handle=handle.id, outcome=Outcome.HELD)
            self.ledger.set_dispatch(row.id, DispatchState.HELD, handle=handle)
            self.w.reporter.emit(Event.HELD, dispatch=row.id, handle=to_data(handle))
            self.taken.append((row.id, handle))
