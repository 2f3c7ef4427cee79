"""``eps execute``: the one loop that walks a dispatch, for every lane.

The loop asks the core what to do (:func:`eps.core.walk.next_step`), carries
the step out through the rung's lane, records it in the ledger (every attempt
*before* its provider call), reports progress, and feeds what it observed back.
It never decides: which rung, whether to wait, withdraw, hold, move on or stop
all come from the core; what a provider answer means comes from the lane's own
classification.  ``--count N`` CPU jobs walk N independent copies at once.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from attrs import frozen
from returns.result import Failure, Success

from eps.core.events import Event
from eps.core.inputs import INPUTS_LOST, may_reuse_stage
from eps.core.model import (
    CapacitySnapshot,
    Job,
    JobError,
    LaneKind,
    Policy,
    QosGrants,
    RoutePlan,
    Rung,
    Terminal,
    TierFault,
    evolve,
)
from eps.core.names import BadName, check_dispatch_id, copy_id
from eps.core.outcome import FailureKind, Handle
from eps.core.router import plan
from eps.core.sbatch import FORBIDDEN_ENV
from eps.core.states import AttemptState, DispatchState, HandleState, Outcome
from eps.core.walk import (
    Begin,
    Failed,
    Hold,
    Landed,
    Observation,
    PollFailed,
    Queued,
    ResumeFrom,
    Running,
    Start,
    Step,
    Stop,
    Wait,
    Walk,
    Withdraw,
    WithdrawFailed,
    Withdrawn,
    WithdrawWhy,
    next_step,
    resume,
)
from eps.shell.config.settings import Settings
from eps.shell.lanes import Lanes
from eps.shell.lanes.jobs import JobFiles
from eps.shell.run.reconcile import Reconciler
from eps.shell.run.stored_workdir import files_of
from eps.shell.state.events import Events
from eps.shell.state.ledger import AttemptRow, Ledger


class Cancelled(Exception):
    """The dispatch was cancelled (``eps cancel``) while it was being walked."""


class _InputsLost(Exception):
    """A host lacking the job's inputs reached a rung it cannot launch on (its one line)."""


@frozen
class WalkResult:
    dispatch: str
    handle: Handle | None
    failure: str | None = None
    terminal: Terminal | None = None
    walk: Walk | None = None


@frozen
class _Flight:
    """The attempt in flight: its ledger row, and when (monotonic) it was started or submitted."""

    attempt: AttemptRow
    since: float


class Walker:
    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        lanes: Lanes,
        reporter: Events,
        *,
        grants: QosGrants,
        snapshot: CapacitySnapshot,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        wall: Callable[[], float] = time.time,
        files: JobFiles | None = None,
        keep_locks: frozenset[str] = frozenset(),
        supervised: bool = False,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        self.settings = settings
        # The supervisor's "let go now" (it stops, or lost the dispatch's lease): a sweep's
        # pool of K then starts no more tasks.  Given only by the supervisor (it also syncs).
        self.stop = stop
        self.supervised = supervised  # a supervisor walks: a dispatch may wait for capacity (it plans again)
        self.keep_locks = keep_locks  # dispatches whose lock the caller holds (and keeps) around the walk
        self.files = files or JobFiles()  # the workdir's file list and the --env values
        self._selected = files is not None
        self._selecting = threading.Lock()
        self.ledger = ledger
        self.lanes = lanes
        self.reporter = reporter
        self.grants = grants
        self.snapshot = snapshot
        self.clock = clock
        self.sleep = sleep
        self.wall = wall
        self.poll_interval_s = lanes.options.slurm_poll_interval_s
        self.poll_failures_allowed = lanes.options.slurm_poll_failures_allowed

    @staticmethod
    def new_dispatch_id() -> str:
        return "e" + secrets.token_hex(5)

    # --- entry points ---------------------------------------------------------------------

    @staticmethod
    def check(
        job: Job, dispatch: str | None, snapshot: CapacitySnapshot, grants: QosGrants, policy: Policy
    ) -> RoutePlan:
        """The job's first plan, or :class:`JobError` (one line) when it cannot be walked."""
        first = plan(job, snapshot, grants, None, policy=policy)
        if not job.command:
            raise JobError("no_command", "no command to run: eps execute INTENT [options] -- COMMAND...", job)
        if first.count > 1 and job.retry is not None and "no-capacity" in job.retry:
            raise JobError("usage", "--retry no-capacity is for one job, not a --count fan-out (its copies "
                           "that found no capacity end as they do today)", job)  # fmt: skip
        slurm = [r.lane for r in first.rungs if r.kind is LaneKind.SLURM]
        if slurm and (said := set(job.env_names) & FORBIDDEN_ENV):
            raise JobError("bad_env", f"--env {', '.join(sorted(said))}: SLURM sets it for the job's own GPUs "
                           f"and {slurm[0]} forbids setting it; drop it (or --pin a paid lane)", job)  # fmt: skip
        if dispatch is not None:
            try:
                check_dispatch_id(dispatch, user_given=True)
            except BadName as exc:
                raise JobError("bad_dispatch_id", str(exc), job) from None
        return first

    def record(self, job: Job, dispatch: str) -> list[str]:
        """Validate and record ``job`` as ``dispatch`` (a CPU ``--count N``: and its N copies,
        copy i with EPS_TASK_INDEX=i-1, EPS_TASK_COUNT=N, the same workdir, P5); nothing
        is walked yet.  Returns the ids to walk."""
        first = self.check(job, dispatch, self.snapshot, self.grants, self.settings.policy)  # nothing done yet
        self.ledger.new_dispatch(dispatch, job)
        n = job.sweep if job.sweep > 1 else first.count
        if n <= 1:
            return [dispatch]
        children = [copy_id(dispatch, i) for i in range(1, n + 1)]
        if job.sweep > 1:  # task i of a sweep: one job of the intent's size (a GPU --count stays its size, P5);
            # it keeps the sweep's K: at most K run side by side (the shared VM's fit, P2)
            copies = [evolve(job, sweep=1, task_index=i, task_count=n) for i in range(n)]
        else:
            copies = [evolve(job, count=1, task_index=i, task_count=n) for i in range(n)]
        for child, copy in zip(children, copies, strict=True):
            self.ledger.new_dispatch(child, copy, parent=dispatch)
        return children

    def execute(self, job: Job, dispatch: str | None = None) -> list[WalkResult]:
        """Validate, record and walk ``job`` in this process; N independent dispatches for a
        CPU --count N."""
        parent = dispatch or self.new_dispatch_id()
        ids = self.record(job, parent)
        self.ledger.acquire(parent)
        if ids == [parent]:
            return [self._guarded(parent, job, ResumeFrom(Walk(job, self._estimated(job, parent), self.grants)))]
        self.reporter.emit(Event.FANOUT, dispatch=parent, children=ids)
        return self.walk_copies(parent, ids)

    def walk_copies(self, parent: str, children: list[str]) -> list[WalkResult]:
        """Walk the recorded copies of ``parent`` at once (``[fanout] concurrency``; the tasks
        of a sweep whose first rung is a SLURM tier: one array), then say how many started.
        A sweep with ``--sweep-parallel K``: at most K tasks at once, each followed to its end
        before the next one starts (:func:`eps.shell.run.at_once.walk_at_most`)."""
        from eps.shell.run.sweeps import submit_array

        arrayed, children = submit_array(self, parent, children)  # a sweep's array; then the rest, one by one
        results = [WalkResult(d, handle) for d, handle in arrayed]
        top = self.ledger.dispatch(parent)
        k = top.job.sweep_parallel if top is not None and top.job.sweep > 1 else None
        if k is not None and children:
            from eps.shell.run.at_once import walk_at_most

            results += walk_at_most(self, parent, children, k)
            if self.stop is not None and self.stop():
                self._let_go(parent)  # tasks not walked yet stay walking: the next owner walks them
                return results
        else:
            workers = max(1, min(len(children), self.settings.fanout_concurrency))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                results += list(pool.map(self.walk_recorded, children))
        rows = [r for r in (self.ledger.dispatch(c) for c in self.ledger_children(parent)) if r is not None]
        started = sum(r.handle is not None for r in rows)
        state = DispatchState.STARTED if started == len(rows) else DispatchState.FAILED
        self.ledger.set_dispatch(parent, state, message=f"{started}/{len(rows)} started")
        self._let_go(parent)
        return results

    def ledger_children(self, parent: str) -> list[str]:
        return [c.id for c in self.ledger.children(parent)]

    def walk_recorded(self, dispatch: str) -> WalkResult:
        """Walk a recorded dispatch: from its start when no attempt was made yet, else as a
        resume (what a dead walk left is settled first)."""
        row = self.ledger.dispatch(dispatch)
        if row is None:
            raise JobError("unknown_dispatch", f"no dispatch {dispatch!r} in the ledger", None)
        if row.state is not DispatchState.WALKING or self.ledger.attempts(dispatch):
            return self.resume(dispatch)
        job = row.job
        if (unshippable := self.select_files(dispatch, row.parent, job)) is not None:
            return unshippable
        return self._guarded(dispatch, job, ResumeFrom(Walk(job, self._estimated(job, dispatch), self.grants)))

    def select_files(self, dispatch: str, parent: str | None, job: Job) -> WalkResult | None:
        """List the job's files once, when the caller did not; ``None`` when they are listed,
        else the dispatch has failed (recorded and told) and this is its result."""
        with self._selecting:
            if not self._selected:
                match files_of(self.ledger, dispatch, parent, job, self.lanes.settings.storage, self.lanes.env):
                    case Success(files) if files.elsewhere is not None:  # nothing was staged anywhere yet
                        return self._inputs_lost(dispatch, files.elsewhere.lost())
                    case Success(files):
                        self.files, self._selected = files, True
                    case Failure(f):
                        message = f"cannot ship the job's files: {f.message}"
                        self.ledger.set_dispatch(dispatch, DispatchState.FAILED, message=message)
                        self.reporter.emit(Event.STOPPED, dispatch=dispatch, message=message,
                                           reason={"code": "workdir", "text": message})  # fmt: skip
                        return WalkResult(dispatch, None, failure=message)
        return None

    def _inputs_lost(self, dispatch: str, message: str) -> WalkResult:
        """A takeover that must launch lacks the job's inputs and has no stage to launch from."""
        self.ledger.set_dispatch(dispatch, DispatchState.FAILED, message=message)
        self.reporter.emit(Event.STOPPED, dispatch=dispatch, message=message,
                           reason={"code": INPUTS_LOST, "text": message})  # fmt: skip
        self._let_go(dispatch)
        return WalkResult(dispatch, None, failure=message)

    def _estimated(self, job: Job, dispatch: str) -> CapacitySnapshot:
        """The snapshot with the clusters' own start estimates for ``job``, when two or more
        clusters follow each other in the lane order (a hint that ranks them)."""
        from eps.shell.lanes.slurm.estimates import estimated

        return estimated(self.lanes, self.settings.policy, job, dispatch, self.snapshot, self.grants)

    def resume(self, dispatch: str) -> WalkResult:
        row = self.ledger.dispatch(dispatch)
        if row is None:
            raise JobError("unknown_dispatch", f"no dispatch {dispatch!r} in the ledger", None)
        self.ledger.acquire(dispatch)
        row = self.ledger.dispatch(dispatch) or row  # re-read under the lock: a walker may have just finished
        if row.state in (DispatchState.STARTED, DispatchState.HELD) and row.handle is not None:
            # Reconcile (at the start of this command) adopted what the dead walk had started.
            self._let_go(dispatch)
            self._announce_landed(dispatch, row.handle, held=row.state is DispatchState.HELD)
            return WalkResult(dispatch, row.handle)
        if row.state in (DispatchState.STARTED, DispatchState.HELD, DispatchState.CANCELLED, DispatchState.ENDED):
            self._let_go(dispatch)
            return WalkResult(dispatch, None, failure=f"dispatch {dispatch} is {row.state}; nothing to resume")
        job = row.job
        match files_of(self.ledger, dispatch, row.parent, job, self.lanes.settings.storage, self.lanes.env):
            case Success(files):
                self.files = files
                if job.restart:  # a relaunch: the outputs synced so far go back into the new run's
                    synced = os.path.join(self.ledger.state_dir, "outputs", dispatch)
                    self.files = evolve(files, outputs=synced)
            case Failure(f):
                self._let_go(dispatch)
                return WalkResult(dispatch, None, failure=f"cannot ship the job's files again: {f.message}")
        Reconciler(self.ledger, self.lanes, self.reporter).reconcile({dispatch}, resuming=True)
        attempts = self.ledger.attempts(dispatch)
        records = [a.record() for a in attempts]
        start = resume(job, self.snapshot, self.grants, records, forget_before=row.next_try_at or 0.0)
        if start.running is not None:
            handle = next(a for a in attempts if a.id == start.running.id).as_handle(HandleState.RUNNING)
            lane = self.lanes.get(handle.lane)
            # The dead walk may have made the machine but never launched the job on it.
            launched = lane.launch_on(handle, job, dispatch, self.files)
            if isinstance(launched, Failure):
                why = launched.failure().message
                released = lane.release(handle)
                if launched.failure().code == INPUTS_LOST:  # another host's inputs: no resume here helps
                    self.ledger.update_attempt(start.running.id, AttemptState.CANCELLED, handle=handle.id,
                                               outcome=Outcome.NOT_LAUNCHED, reason=why)  # fmt: skip
                    return self._inputs_lost(dispatch, why)
                gone = "released" if isinstance(released, Success) else "NOT released yet (eps reconcile releases it)"
                self.ledger.update_attempt(
                    start.running.id, AttemptState.CANCELLED, handle=handle.id, outcome=Outcome.NOT_LAUNCHED,
                    reason=f"the job could not be launched on it: {why}",
                )  # fmt: skip
                message = f"the job could not be launched on {handle.id} ({why}); {gone}; eps execute --resume again"
                self.ledger.set_dispatch(dispatch, DispatchState.INTERRUPTED, message=message)
                self._let_go(dispatch)
                return WalkResult(dispatch, None, failure=message)
            self.ledger.set_dispatch(dispatch, DispatchState.STARTED, handle=handle)
            self._let_go(dispatch)
            self._announce_landed(dispatch, handle, held=False)
            return WalkResult(dispatch, handle)
        self.ledger.set_dispatch(dispatch, DispatchState.WALKING)
        return self._guarded(dispatch, job, start)

    # --- the loop -------------------------------------------------------------------------

    def _let_go(self, dispatch: str) -> None:
        """Drop the lock of ``dispatch`` unless the caller holds it around the walk."""
        if dispatch not in self.keep_locks:
            self.ledger.release(dispatch)

    def _guarded(self, dispatch: str, job: Job, start: ResumeFrom) -> WalkResult:
        self.ledger.acquire(dispatch)
        try:
            return self.walk_from(dispatch, job, start)
        except _InputsLost as lost:
            return self._inputs_lost(dispatch, str(lost))
        except Cancelled:
            self.reporter.emit(
                Event.STOPPED, dispatch=dispatch, message="cancelled", reason={"code": "cancelled", "text": "cancelled"}
            )
            return WalkResult(dispatch, None, failure="cancelled")
        finally:
            self._let_go(dispatch)

    def walk_from(self, dispatch: str, job: Job, start: ResumeFrom) -> WalkResult:
        """Walk ``dispatch`` from ``start`` until something started, is held, or nothing is left."""
        walk = start.walk
        policy = self.settings.policy
        announced = plan(job, walk.snapshot, walk.grants, None, policy=policy)
        self.reporter.emit(
            Event.DISPATCH,
            dispatch=dispatch,
            intent=job.intent,
            resolved_intent=announced.resolved_intent,
            rungs=len(announced.rungs),
            worst_case_wait_s=announced.worst_case_wait_s,
            plan=[r.key for r in announced.rungs],
        )
        flight: _Flight | None = None
        seen: Observation = Begin()
        if start.parked is not None:  # a resumed walk parks on the job the dead walk submitted
            row = next(a for a in self.ledger.attempts(dispatch) if a.id == start.parked.id)
            flight = _Flight(row, self.clock() - max(0.0, self.wall() - row.started_at))
            seen = self._poll(row.as_rung(), row.as_handle(HandleState.PENDING), flight)
        while True:
            self._check_cancel(dispatch)
            walk, step = next_step(walk, seen, policy=policy)
            match step:
                case Start(rung):
                    flight, seen = self._start(dispatch, job, rung)
                case Wait():
                    seen = self._wait(dispatch, step, _in(flight, step))
                case Withdraw():
                    seen = self._withdraw(dispatch, step, _in(flight, step))
                case Hold(handle):
                    return self._land(dispatch, handle, flight, walk, held=True)
                case Landed(handle):
                    return self._land(dispatch, handle, flight, walk, held=False)
                case Stop():
                    return self._stop(dispatch, step, walk)

    def _start(self, dispatch: str, job: Job, rung: Rung) -> tuple[_Flight, Observation]:
        lane = self.lanes.for_rung(rung)
        if self.files.elsewhere is not None and not may_reuse_stage(rung.kind):  # nothing made, nothing asked
            raise _InputsLost(self.files.elsewhere.lost())
        name = lane.name_for(dispatch, rung, self.ledger.next_seq(dispatch))
        attempt = self.ledger.begin_attempt(dispatch, rung, name)
        flight = _Flight(attempt, self.clock())
        self.reporter.emit(
            Event.ATTEMPT, dispatch=dispatch, rung=rung.key, qos=rung.qos,
            reason={"code": rung.why.value if rung.why else None, "text": rung.reason},
            price_per_hour=rung.price_per_hour,
        )  # fmt: skip
        match lane.start(job, rung, dispatch, name, self.files):
            case Failure(failure):
                # A create whose fate is unknown may still make its machine: the attempt stays
                # on record under its name, where reconcile finds and releases it.
                unknown = failure.kind is FailureKind.UNKNOWN_FATE
                self.ledger.update_attempt(
                    attempt.id,
                    AttemptState.SUBMITTED if unknown else AttemptState.FAILED,
                    handle=name if unknown else None,
                    outcome=failure.kind,
                    reason=failure.message,
                )
                self.reporter.emit(
                    Event.FAILED, dispatch=dispatch, rung=rung.key, kind=failure.kind.value, code=failure.code,
                    message=failure.message, reason={"code": failure.kind.value, "text": failure.message},
                )  # fmt: skip
                if failure.kind is FailureKind.MISCONFIGURED:  # eps plan marks the tier from now on
                    from eps.core.outcome import misconfigured_fix
                    from eps.shell.run import cluster_faults
                    fault = TierFault(rung.lane, rung.qos, failure.message, misconfigured_fix(rung.lane, failure.code))
                    cluster_faults.record(self.ledger.state_dir, self.settings.policy, fault)
                return flight, Failed(rung, failure)
            case Success(handle) if handle.state is HandleState.PENDING:
                # the park is measured from the submission: shipping the job's files and waiting
                # for the cluster's turn (one sbatch at a time, paced) are not time in its queue
                flight = _Flight(attempt, self.clock())
                self.ledger.update_attempt(attempt.id, AttemptState.PENDING, handle=handle.id)
                self.reporter.emit(Event.SUBMITTED, dispatch=dispatch, rung=rung.key, qos=rung.qos, id=handle.id)
                return flight, self._poll(rung, handle, flight)
            case Success(handle):
                self.ledger.update_attempt(
                    attempt.id, AttemptState.RUNNING, handle=handle.id, outcome=Outcome.STARTED
                )
                self._release_if_cancelled(dispatch, handle, attempt)
                return flight, Running(handle)
        raise AssertionError("unreachable")  # pragma: no cover

    def _poll(self, rung: Rung, handle: Handle, parked: _Flight) -> Observation:
        """Read the parked job, tolerating a few unreadable polls (the lane's retries)."""
        failures = 0
        lane = self.lanes.for_rung(rung)
        while True:
            match lane.poll(handle):
                case Success(now) if now.state is HandleState.PENDING:
                    return Queued(rung, now, int(self.clock() - parked.since), now.reason)
                case Success(now):
                    self.ledger.update_attempt(
                        parked.attempt.id, AttemptState.RUNNING, handle=now.id, outcome=Outcome.STARTED
                    )
                    return Running(now)
                case Failure(failure):
                    failures += 1
                    if failures > self.poll_failures_allowed:
                        return PollFailed(rung, handle, failure)
                    self.sleep(self.poll_interval_s)

    def _wait(self, dispatch: str, step: Wait, parked: _Flight) -> Observation:
        elapsed = self.clock() - parked.since
        self.reporter.emit(
            Event.PARKED, dispatch=dispatch, rung=step.rung.key, qos=step.rung.qos, id=step.handle.id,
            elapsed_s=elapsed, cap_s=step.cap_s, pending_reason=step.handle.reason,
            next=step.next_rung.key if step.next_rung is not None else None,
            reason={"code": step.decision.action.value, "text": step.decision.reason},
        )  # fmt: skip
        self._check_cancel(dispatch)
        # poll again after the interval, or right when the cap runs out if sooner
        cap_ends = parked.since + int(elapsed) + step.seconds
        self.sleep(max(0.05, min(self.poll_interval_s, cap_ends - self.clock())))
        return self._poll(step.rung, step.handle, parked)

    def _withdraw_by_name(self, step: Withdraw, parked: _Flight) -> Observation:
        """A create that failed may have made the machine anyway: release it by its name."""
        name = parked.attempt.name
        match self.lanes.for_rung(step.rung).withdraw(name, step.rung):
            case Failure(failure):  # it may live on: reconcile finds it by this name
                self.ledger.update_attempt(parked.attempt.id, AttemptState.SUBMITTED, handle=name)
                return WithdrawFailed(step.rung, failure)
        return Withdrawn(step.rung)

    def _withdraw(self, dispatch: str, step: Withdraw, parked: _Flight) -> Observation:
        handle = step.handle
        if handle is None:
            return self._withdraw_by_name(step, parked)
        match self.lanes.for_rung(step.rung).release(handle, pending_only=step.pending_only):
            case Failure(failure):
                return WithdrawFailed(step.rung, failure)
            case Success(after) if after.state is not HandleState.RELEASED:
                # It started before the cancel reached it: keep it; it is the answer.
                self.ledger.update_attempt(
                    parked.attempt.id, AttemptState.RUNNING, handle=after.id, outcome=Outcome.STARTED
                )
                return Running(after)
        elapsed = self.clock() - parked.since
        if step.why is not WithdrawWhy.PARK_TIMEOUT:  # the lane stopped answering: released, moving on
            self.ledger.update_attempt(
                parked.attempt.id, AttemptState.CANCELLED, outcome=Outcome.RELEASED, reason=step.reason
            )
            self.reporter.emit(
                Event.WITHDRAWN, dispatch=dispatch, rung=step.rung.key, id=handle.id,
                reason={"code": step.why.value, "text": step.reason},
            )
            return Withdrawn(step.rung)
        self.ledger.update_attempt(
            parked.attempt.id, AttemptState.ADVANCED, outcome=Outcome.PARK_TIMEOUT, reason=step.reason
        )
        self.reporter.emit(
            Event.ADVANCED, dispatch=dispatch, rung=step.rung.key, qos=step.rung.qos, id=handle.id,
            elapsed_s=elapsed, pending_reason=handle.reason, reason={"code": step.why.value, "text": step.reason},
        )  # fmt: skip
        return Withdrawn(step.rung, handle.reason)

    def _land(self, dispatch: str, handle: Handle, parked: _Flight | None, walk: Walk, *, held: bool) -> WalkResult:
        if parked is not None:
            if held:
                self.ledger.update_attempt(
                    parked.attempt.id, AttemptState.PENDING, handle=handle.id, outcome=Outcome.HELD
                )
            self._release_if_cancelled(dispatch, handle, parked.attempt)
        state = DispatchState.HELD if held else DispatchState.STARTED
        self.ledger.set_dispatch(dispatch, state, handle=handle)
        self._announce_landed(dispatch, handle, held=held)
        return WalkResult(dispatch, handle, walk=walk)

    def _stop(self, dispatch: str, step: Stop, walk: Walk) -> WalkResult:
        if step.terminal is not None:
            p = step.plan
            skipped = [f"{s.lane} {s.target or ''}: {s.detail}".replace(" :", ":") for s in (p.skipped if p else ())]
            if (waiting := self._wait_for_capacity(dispatch, step, skipped)) is not None:
                return waiting
            self.ledger.set_dispatch(dispatch, DispatchState.FAILED, terminal=step.terminal, message=step.message)
            self.reporter.emit(
                Event.TERMINAL, dispatch=dispatch, terminal=step.terminal.value, skipped=skipped, message=step.message,
                reason={"code": step.terminal.value, "text": step.message},
            )
            return WalkResult(dispatch, None, failure=step.message, terminal=step.terminal, walk=walk)
        self.ledger.set_dispatch(dispatch, DispatchState.FAILED, message=step.message)
        code = step.failure.kind.value if step.failure is not None else "stopped"
        code = INPUTS_LOST if step.failure is not None and step.failure.code == INPUTS_LOST else code
        self.reporter.emit(Event.STOPPED, dispatch=dispatch, message=step.message,
                           reason={"code": code, "text": step.message})  # fmt: skip
        return WalkResult(dispatch, None, failure=step.message, walk=walk)

    def _wait_for_capacity(self, dispatch: str, step: Stop, skipped: list[str]) -> WalkResult | None:
        """Every rung ended exhausted and the job retries ``no-capacity`` (under a supervisor,
        which plans again at the next try): the dispatch waits.  ``None``: it does not."""
        from eps.core.healing import WaitThenPlan, after_no_capacity, no_capacity

        row = self.ledger.dispatch(dispatch)
        if row is None or step.terminal is None or not self.supervised:
            return None
        since = row.next_try_at or 0.0  # this round's attempts: what the last wait forgot is not evidence
        if not no_capacity(step.terminal, (a.outcome for a in self.ledger.attempts(dispatch) if a.started_at >= since)):
            return None
        got = after_no_capacity(row.job, waits=row.capacity_waits, elapsed_s=self.wall() - row.created_at,
                                table=self.lanes.settings.jobs.healing())  # fmt: skip
        if not isinstance(got, WaitThenPlan):
            return None
        at = self.wall() + got.seconds
        message = f"{step.message}; {got.reason}"
        if self.ledger.wait_for_capacity(dispatch, at, message) is None:
            raise Cancelled(dispatch)
        self.reporter.emit(
            Event.WAITING, dispatch=dispatch, terminal=step.terminal.value, next_try_at=at, seconds=got.seconds,
            skipped=skipped, message=message, reason={"code": step.terminal.value, "text": message},
        )  # fmt: skip
        return WalkResult(dispatch, None, failure=message, terminal=step.terminal, walk=None)

    def _announce_landed(self, dispatch: str, handle: Handle, *, held: bool) -> None:
        from eps.shell.state.codec import to_data

        self.reporter.emit(Event.HELD if held else Event.STARTED, dispatch=dispatch, handle=to_data(handle))

    # --- cancel -----------------------------------------------------------------------------

    def _check_cancel(self, dispatch: str) -> None:
        if self.ledger.guard is not None:  # a shared ledger: this host may still act on it (its lease)
            self.ledger.guard(dispatch)
        row = self.ledger.dispatch(dispatch)
        if row is not None and row.state is DispatchState.CANCELLED:
            raise Cancelled(dispatch)

    def _release_if_cancelled(self, dispatch: str, handle: Handle, attempt: AttemptRow) -> None:
        """``eps cancel`` arrived while the create was in flight: release what it made, stop."""
        row = self.ledger.dispatch(dispatch)
        if row is None or row.state is not DispatchState.CANCELLED:
            return
        released = self.lanes.get(handle.lane).release(handle)
        if isinstance(released, Success):
            self.ledger.update_attempt(
                attempt.id, AttemptState.CANCELLED, outcome=Outcome.RELEASED, reason="cancelled while starting"
            )
        raise Cancelled(dispatch)



def _in(flight: _Flight | None, step: Step) -> _Flight:
    """The attempt a Wait or Withdraw is about: one is always in flight by then."""
    if flight is None:  # pragma: no cover - the core never waits or withdraws before a start
        raise AssertionError(f"{type(step).__name__} with no attempt in flight")
    return flight
