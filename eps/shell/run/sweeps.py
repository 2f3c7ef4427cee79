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

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from returns.result import Failure

from eps.core.array_move import clock_runs, cluster_reason, moved_at_once, task_index
from eps.core.events import Event
from eps.core.model import CapacitySnapshot, Job, LaneKind, QosGrants, Rung, evolve
from eps.core.outcome import Handle
from eps.core.states import AttemptState, DispatchState, HandleState, Outcome
from eps.core.walk import Begin, Hold, Queued, Start, Wait, Walk, Withdraw, Withdrawn, next_step

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
    sleep: Callable[[float], None]
    poll_interval_s: float
    poll_failures_allowed: int

    def select_files(self, dispatch: str, parent: str | None, job: Job) -> object | None: ...


def submit_array(walker: Walking, parent: str, children: list[str]) -> tuple[list[tuple[str, Handle]], list[str]]:
    """The tasks the sweep's arrays took (each with its handle ``J_i``: started, or held
    where it is), and the ids left for the caller to walk one by one."""
    ledger = walker.ledger
    top = ledger.dispatch(parent)
    rows = [r for r in (ledger.dispatch(c) for c in children) if r is not None]
    fresh = [r for r in rows if r.state is DispatchState.WALKING and not ledger.attempts(r.id)]
    if top is None or top.job.sweep <= 1 or not fresh:
        return [], children
    first = fresh[0]
    if walker.select_files(first.id, parent, first.job) is not None:
        return [], children  # each task fails the same way, on its own
    walk, step = next_step(Walk(first.job, walker.snapshot, walker.grants), Begin(), policy=walker.settings.policy)
    if not isinstance(step, Start) or step.rung.kind is not LaneKind.SLURM:
        return [], children
    for r in fresh:  # walked here: another eps process's reconcile leaves them alone
        ledger.acquire(r.id)
    try:
        taken = _Ladder(walker, parent, top.job).walk(walk, step.rung, {r.job.task_index: r for r in fresh})
    finally:
        for r in fresh:
            if r.id not in walker.keep_locks:
                ledger.release(r.id)
    ids = {d for d, _ in taken}
    return taken, [c for c in children if c not in ids]


def cancel_arrays(ledger: Ledger, lanes: Lanes, rows: Iterable[DispatchRow]) -> list[str]:
    """``eps cancel`` of a sweep: ``scancel J`` once for each array of it that still has a
    live task (each task attempt's handle ``J_i`` names its array), not once per task; then
    each task is settled as any job is.  Returns what could not be confirmed (one line each)."""
    arrays: dict[tuple[str, str, str], None] = {}
    for r in rows:
        if r.parent is None:
            continue
        for a in ledger.attempts(r.id):
            live = a.state in (AttemptState.PENDING, AttemptState.RUNNING, AttemptState.SUBMITTED)
            rung = a.as_rung()
            if live and rung.kind is LaneKind.SLURM and a.handle and (m := _ARRAY_TASK.fullmatch(a.handle)):
                arrays[(rung.lane, r.parent, m.group(1))] = None
    errors = []
    for lane_name, sweep, array in arrays:
        lane: SlurmLane = lanes.get(lane_name)  # type: ignore[assignment]
        done = lane.cancel_array(sweep, array)
        if isinstance(done, Failure):
            errors.append(f"{sweep}: {done.failure().message}")
    return errors


_ARRAY_TASK = re.compile(r"([0-9]+)_[0-9]+")


class _Ladder:
    """The walk of one sweep's pending tasks down the SLURM tiers, one array per tier."""

    def __init__(self, walker: Walking, parent: str, job: Job) -> None:
        self.w = walker
        self.ledger = walker.ledger
        self.parent = parent
        self.job = job
        self.taken: list[tuple[str, Handle]] = []
        self.parked_s = 0.0  # how long the last array's park clock ran

    def walk(self, walk: Walk, rung: Rung, pending: dict[int, DispatchRow]) -> list[tuple[str, Handle]]:
        at_once = self.job.sweep_parallel
        policy = self.w.settings.policy
        while pending:
            lane: SlurmLane = self.w.lanes.for_rung(rung)  # type: ignore[assignment]
            submitted = self._submit(lane, rung, pending, at_once)
            if submitted is None:
                return self.taken  # refused: each task moves on from its failed attempt, on its own
            array, attempts = submitted
            parked = self._park(lane, walk, rung, array, pending, attempts)
            if parked is None:
                return self.taken
            walk, withdraw = parked
            moved = self._move(lane, rung, array, pending, attempts, withdraw)
            if moved is None:
                return self.taken
            pending = {i: pending[i] for i in moved}
            walk, step = next_step(walk, Withdrawn(rung, withdraw.handle.reason if withdraw.handle else None),
                                   policy=policy)  # fmt: skip
            if not pending or not isinstance(step, Start) or step.rung.kind is not LaneKind.SLURM:
                return self.taken  # the ladder is spent: the rest go to the paid lanes task by task
            running = sum(j.state != "PENDING" for j in lane.sweep_jobs(self.parent).value_or(()))
            at_once = moved_at_once(self.job.sweep_parallel, running)
            rung = step.rung
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
        attempts: dict[int, AttemptRow],
    ) -> tuple[Walk, Withdraw] | None:  # fmt: skip
        """Park on the array until every task started (``None``), the core holds the pending
        ones (``None``), the sweep is cancelled (``None``) or the tier's cap has passed (the
        walk and the core's Withdraw).  The clock runs only while a task waits for the cluster."""
        clock = self.w.clock
        last, ran, failures = clock(), 0.0, 0
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
            for i in [i for i in pending if i not in states or states[i].state != "PENDING"]:
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

    def _cancelled(self, pending: dict[int, DispatchRow]) -> bool:
        rows = [self.ledger.dispatch(d) for d in (self.parent, *(r.id for r in pending.values()))]
        return any(r is None or r.state is DispatchState.CANCELLED for r in rows)

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
