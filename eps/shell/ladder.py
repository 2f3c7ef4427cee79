"""The ladder walk on one SLURM lane: submit, park, cancel, resubmit (P7, P8, P10).

The walk carries out what the core decides; it never decides.  On every poll of
a PENDING job it asks ``plan(job, snapshot, grants, park=ParkState(...))`` and
follows ``RoutePlan.park``:

- WAIT: sleep (at most the poll interval, at most what is left of the cap) and poll again;
- HOLD (a pin): return the live PENDING handle;
- ADVANCE: ``scancel --state=PENDING``, confirm the job has left every live
  state (never two live jobs of one dispatch), add the rung to
  ``snapshot.attempted``, re-plan, and go on with the next rung when it is a
  SLURM rung of the same cluster.  A job that started between the last poll and
  the cancel is kept and returned.

A job seen in any other state has started: its handle is returned.  Every
sbatch is announced first (``SUBMITTING``) so the ledger can record the attempt
before it exists; a walk resumed after a crash parks the job reconcile found
instead of submitting again.  A submit
refusal (QoS not granted, invalid) is absorbed into the snapshot and the walk
re-plans at once.  When the next rung is not on this cluster (or nothing is
left) the walk hands control back to the caller (the generic executor) with the
updated snapshot and the plan it made.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum

from attrs import frozen
from returns.result import Failure, Result, Success

from eps.core.model import (
    CapacitySnapshot,
    Job,
    LaneKind,
    ParkAction,
    ParkState,
    Policy,
    QosGrants,
    QueueState,
    RoutePlan,
    Rung,
    evolve,
)
from eps.core.outcome import Handle, LaneFailure, absorb
from eps.core.router import plan
from eps.core.sbatch import render_sbatch
from eps.core.tables import DEFAULT_POLICY
from eps.shell.slurm import GONE, JobStatus, SlurmClient


class EventKind(StrEnum):
    SUBMITTING = "submitting"  # about to run sbatch (the ledger records the attempt first)
    SUBMITTED = "submitted"
    REFUSED = "refused"  # sbatch refused the rung; it is skipped
    PARKED = "parked"  # one poll of a PENDING job the core says to keep waiting on
    ADVANCED = "advanced"  # cancelled and confirmed gone; the walk moves on
    STARTED = "started"  # the job left PENDING (running, or already finished)
    HELD = "held"  # pinned: the pending handle is the answer
    HANDOVER = "handover"  # the next rung is not on this cluster


@frozen
class LadderEvent:
    """One step of the walk, for progress display and the attempt ledger."""

    kind: EventKind
    dispatch_id: str
    rung: str
    job_id: str | None = None
    qos: str | None = None
    state: str | None = None
    pending_reason: str | None = None
    elapsed_s: float = 0.0
    detail: str = ""


@frozen
class Landed:
    """The walk ended with a job on the cluster: running (or finished), or pending under a pin."""

    handle: Handle
    snapshot: CapacitySnapshot


@frozen
class HandOver:
    """The ladder is spent on this cluster: carry on with ``plan.rungs`` (maybe empty: terminal)."""

    plan: RoutePlan
    snapshot: CapacitySnapshot


LadderOutcome = Landed | HandOver


class CancelNotConfirmed(RuntimeError):
    """A job the walk cancelled is still live after the timeout: the walk stops rather
    than risk two live jobs of one dispatch.  Carries the job id."""

    def __init__(self, job_id: str, rung: str, timeout_s: float) -> None:
        super().__init__(f"job {job_id} on {rung} still live {timeout_s:g} s after scancel")
        self.job_id = job_id
        self.rung = rung


def _ignore(_event: LadderEvent) -> None:
    return None


def walk_ladder(
    job: Job,
    *,
    dispatch_id: str,
    rung: Rung,
    snapshot: CapacitySnapshot,
    grants: QosGrants,
    client: SlurmClient,
    policy: Policy = DEFAULT_POLICY,
    output: str | None = None,
    poll_interval_s: float = 2.0,
    cancel_timeout_s: float = 60.0,
    poll_failures_allowed: int = 3,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_event: Callable[[LadderEvent], None] = _ignore,
    resume_job_id: str | None = None,
    resume_elapsed_s: float = 0.0,
) -> LadderOutcome:
    """Walk ``rung`` (the plan's current SLURM rung) and the rungs of the same cluster after it.

    ``resume_job_id``: a job of this dispatch already submitted under ``rung`` (found
    by reconcile after a crash) that has been parked ``resume_elapsed_s``; the walk
    parks it on instead of submitting again.

    Raises :class:`CancelNotConfirmed` when a cancelled job will not leave the queue.
    """
    cluster = policy.cluster(rung.lane)
    if rung.kind is not LaneKind.SLURM or cluster is None:
        raise ValueError(f"rung {rung.key} is not a SLURM rung of a configured cluster")

    current: Rung | None = rung
    while current is not None:
        resumed = resume_job_id is not None
        if resume_job_id is not None:
            submitted: Result[str, LaneFailure] = Success(resume_job_id)
            parked_s, resume_job_id = resume_elapsed_s, None
        else:
            script = render_sbatch(job, cluster, current, dispatch_id=dispatch_id, output=output)
            on_event(LadderEvent(EventKind.SUBMITTING, dispatch_id, current.key, qos=current.qos))
            submitted, parked_s = client.submit(script), 0.0
        match submitted:
            case Failure(failure):
                on_event(
                    LadderEvent(EventKind.REFUSED, dispatch_id, current.key, qos=current.qos, detail=failure.message)
                )
                snapshot = absorb(snapshot, current, failure)
            case Success(job_id):
                if not resumed:
                    on_event(LadderEvent(EventKind.SUBMITTED, dispatch_id, current.key, job_id=job_id, qos=current.qos))
                landed, snapshot = _park(
                    job, dispatch_id, current, job_id, parked_s, snapshot, grants, client, policy,
                    poll_interval_s, cancel_timeout_s, poll_failures_allowed, clock, sleep, on_event,
                )  # fmt: skip
                if landed is not None:
                    return Landed(landed, snapshot)
        next_plan = plan(job, snapshot, grants, None, policy=policy)
        current = _next_on_cluster(next_plan, cluster.name)
        if current is None:
            on_event(LadderEvent(EventKind.HANDOVER, dispatch_id, next_plan.rungs[0].key if next_plan.rungs else "-"))
            return HandOver(next_plan, snapshot)
    raise AssertionError("unreachable")  # pragma: no cover


def _next_on_cluster(p: RoutePlan, cluster: str) -> Rung | None:
    if p.rungs and p.rungs[0].kind is LaneKind.SLURM and p.rungs[0].lane == cluster:
        return p.rungs[0]
    return None


def _park(
    job: Job,
    dispatch_id: str,
    rung: Rung,
    job_id: str,
    parked_s: float,
    snapshot: CapacitySnapshot,
    grants: QosGrants,
    client: SlurmClient,
    policy: Policy,
    poll_interval_s: float,
    cancel_timeout_s: float,
    poll_failures_allowed: int,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    on_event: Callable[[LadderEvent], None],
) -> tuple[Handle | None, CapacitySnapshot]:
    """Poll one submitted job until it starts, is held (pin), or the core says advance.

    ``parked_s`` is how long it has already been parked (a resumed walk).  Returns the
    handle (``None`` after an advance) and the snapshot as it now is."""
    started = clock() - parked_s
    failures = 0
    while True:
        status: JobStatus
        match client.poll(job_id):
            case Success(status):
                failures = 0
            case Failure(failure):
                failures += 1
                if failures <= poll_failures_allowed:
                    sleep(poll_interval_s)
                    continue
                # The lane stopped answering: withdraw the job (best effort) and let the core
                # learn from the failure; the executor decides what follows.
                client.cancel(job_id)
                if not client.wait_gone(job_id, cancel_timeout_s, clock=clock, sleep=sleep):
                    raise CancelNotConfirmed(job_id, rung.key, cancel_timeout_s)
                return None, absorb(snapshot, rung, failure)
        elapsed = clock() - started
        if status.state != "PENDING":
            handle = _handle(rung, job_id, status.state.lower())
            on_event(
                LadderEvent(EventKind.STARTED, dispatch_id, rung.key, job_id, rung.qos, status.state, None, elapsed)
            )
            return handle, snapshot

        park = ParkState(rung.lane, rung.qos, int(elapsed), status.reason)
        decision = plan(job, snapshot, grants, park, policy=policy).park
        if decision is None:  # plan() always decides about a parked job; defend anyway
            raise AssertionError(f"plan() gave no park decision for {rung.key}")
        event = LadderEvent(
            EventKind.PARKED, dispatch_id, rung.key, job_id, rung.qos, status.state, status.reason, elapsed,
            decision.reason,
        )  # fmt: skip
        match decision.action:
            case ParkAction.WAIT:
                on_event(event)
                # poll again after the interval, or right when the cap runs out if sooner
                cap_ends = started + park.elapsed_s + decision.remaining_s
                sleep(max(0.05, min(poll_interval_s, cap_ends - clock())))
            case ParkAction.HOLD:
                on_event(evolve(event, kind=EventKind.HELD))
                return _handle(rung, job_id, "pending"), snapshot
            case ParkAction.ADVANCE:
                # Cancel it only while it is still pending: a job that started between the
                # last poll and the scancel is kept, and is the answer.
                client.cancel(job_id, pending_only=True)
                late = _confirm_cancelled(client, job_id, rung, cancel_timeout_s, clock, sleep)
                if late is not None:
                    on_event(
                        LadderEvent(
                            EventKind.STARTED, dispatch_id, rung.key, job_id, rung.qos, late.state, None,
                            clock() - started, "started before the cancel reached it",
                        )
                    )  # fmt: skip
                    return _handle(rung, job_id, late.state.lower()), snapshot
                on_event(evolve(event, kind=EventKind.ADVANCED, elapsed_s=clock() - started))
                learned = QueueState(rung.lane, rung.qos or "", pending_reason=status.reason)
                attempted = snapshot.attempted if rung.key in snapshot.attempted else (*snapshot.attempted, rung.key)
                return None, evolve(snapshot, queues=(*snapshot.queues, learned), attempted=attempted)


def _confirm_cancelled(
    client: SlurmClient,
    job_id: str,
    rung: Rung,
    timeout_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> JobStatus | None:
    """After a pending-only scancel: ``None`` once the job is cancelled (or gone), or its
    status when it had started before the cancel (running, or already ended).  Raises
    :class:`CancelNotConfirmed` when it is still pending (or unreadable) at the timeout."""
    deadline = clock() + timeout_s
    while True:
        status = client.poll(job_id).value_or(None)  # an unreadable poll: try again
        if status is not None:
            if status.state in ("CANCELLED", GONE):
                return None
            if status.state != "PENDING":
                return status  # running, or even already finished: it started
        if clock() >= deadline:
            raise CancelNotConfirmed(job_id, rung.key, timeout_s)
        sleep(0.1)


def _handle(rung: Rung, job_id: str, state: str) -> Handle:
    return Handle(rung.lane, LaneKind.SLURM, job_id, rung.key, qos=rung.qos, machine=rung.machine, state=state)
