"""The walk of one dispatch, decided one step at a time.

``next_step(walk, observation, policy=...) -> (walk, step)`` is the only place
that decides what an ``eps execute`` does next.  The shell has one loop for
every lane: it carries out the step, observes what happened, and asks again.
It never decides: which rung, whether to wait, withdraw, hold, move on or stop
all come from here, and here they come from ``plan()`` (the route and the
parking decision, P7-P10), :func:`~eps.core.outcome.absorb` (what a failure
teaches) and :func:`~eps.core.outcome.stops_dispatch` (when a failure ends it).

The steps (a closed set the shell ``match``es):

- :class:`Start`: carry out ``rung`` (create the machine, submit the job);
- :class:`Wait`: the job is parked on a queue rung; poll again within ``seconds``;
- :class:`Withdraw`: cancel or delete what the rung holds (a park timeout, a lane
  that stopped answering, or a create that failed but may have made something);
- :class:`Hold`: a pinned job is queued: its pending handle is the answer (P10);
- :class:`Landed`: the rung started: its handle is the answer;
- :class:`Stop`: nothing more to do: a terminal plan or a failure that ends the dispatch.

The observations the shell reports back: :class:`Begin`, :class:`Failed`,
:class:`Running`, :class:`Queued`, :class:`PollFailed`, :class:`Withdrawn`,
:class:`WithdrawFailed`.  Pure: time arrives as ``elapsed_s``.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import NamedTuple

from eps.core.model import (
    CapacitySnapshot,
    Job,
    LaneKind,
    ParkAction,
    ParkDecision,
    ParkState,
    Policy,
    QosGrants,
    RoutePlan,
    Rung,
    Terminal,
    evolve,
)
from eps.core.outcome import AttemptRecord, FailureKind, Handle, LaneFailure, absorb, misconfigured_fix, stops_dispatch
from eps.core.router import plan
from eps.core.states import LEFT_ATTEMPT_STATES, RETRYABLE_OUTCOMES, AttemptState, HandleState, Outcome
from eps.core.tables import DEFAULT_POLICY
from eps.core.usable import terminal_text

#: Lanes whose create may have made a machine even when its answer was lost.
_MAY_LEAVE_MACHINES = frozenset({LaneKind.GCP, LaneKind.RUNPOD})


class WithdrawWhy(StrEnum):
    PARK_TIMEOUT = "park_timeout"  # the core said ADVANCE (P8, or a pending reason that never clears)
    LANE_LOST = "lane_lost"  # polls of the parked job kept failing
    MAYBE_MADE = "maybe_made"  # a create failed transiently and may have made the machine anyway


class Walk(NamedTuple):
    """What the walk of one dispatch knows: the job, the capacity learned so far (with
    every rung already tried in ``attempted``) and the grants.  ``unsettled`` is a
    failure to learn from once the rung's resource has been withdrawn."""

    job: Job
    snapshot: CapacitySnapshot
    grants: QosGrants
    unsettled: tuple[Rung, LaneFailure, WithdrawWhy] | None = None
    failures: tuple[LaneFailure, ...] = ()  # every failure learned from, in order


# --- observations ------------------------------------------------------------------------------


class Begin(NamedTuple):
    """Nothing has been tried yet (or a resumed walk starts over from its ledger)."""


class Failed(NamedTuple):
    """``rung`` did not start."""

    rung: Rung
    failure: LaneFailure


class Running(NamedTuple):
    """What ``rung`` made has started (or already run)."""

    handle: Handle


class Queued(NamedTuple):
    """The job of a queue rung is PENDING, parked for ``elapsed_s`` with ``pending_reason``."""

    rung: Rung
    handle: Handle
    elapsed_s: int
    pending_reason: str | None = None


class PollFailed(NamedTuple):
    """The parked job could not be read for longer than the shell tolerates."""

    rung: Rung
    handle: Handle
    failure: LaneFailure


class Withdrawn(NamedTuple):
    """What :class:`Withdraw` asked is done: nothing of ``rung`` is live any more.
    ``pending_reason``: the parked job's last pending reason (a park timeout)."""

    rung: Rung
    pending_reason: str | None = None


class WithdrawFailed(NamedTuple):
    """The withdrawal could not be confirmed: something of ``rung`` may still be live."""

    rung: Rung
    failure: LaneFailure


Observation = Begin | Failed | Running | Queued | PollFailed | Withdrawn | WithdrawFailed


# --- steps -------------------------------------------------------------------------------------


class Start(NamedTuple):
    rung: Rung
    plan: RoutePlan


class Wait(NamedTuple):
    """Keep the job parked; poll again after at most ``seconds`` (what is left of the cap)."""

    rung: Rung
    handle: Handle
    seconds: int
    cap_s: int
    decision: ParkDecision
    next_rung: Rung | None


class Withdraw(NamedTuple):
    """Release what ``rung`` holds.  ``pending_only``: only while it is still queued (a
    job that started meanwhile is kept and reported :class:`Running`).  ``handle`` is
    ``None`` when only the attempt's deterministic name is known."""

    rung: Rung
    handle: Handle | None
    why: WithdrawWhy
    reason: str
    pending_only: bool


class Hold(NamedTuple):
    handle: Handle
    decision: ParkDecision


class Landed(NamedTuple):
    handle: Handle


class Stop(NamedTuple):
    """The walk is over without a start: ``terminal`` (no rung left) or ``failure``."""

    message: str
    terminal: Terminal | None = None
    failure: LaneFailure | None = None
    plan: RoutePlan | None = None


Step = Start | Wait | Withdraw | Hold | Landed | Stop


def next_step(walk: Walk, seen: Observation, *, policy: Policy = DEFAULT_POLICY) -> tuple[Walk, Step]:
    """What to do after ``seen``.  Raises :class:`~eps.core.model.JobError` only for a job
    that cannot be planned at all (the shell checks that before anything runs)."""
    match seen:
        case Begin():
            return _replan(walk, policy)
        case Running(handle):
            return walk, Landed(handle)
        case Failed(rung, failure):
            if stops_dispatch(failure, fall_through=walk.job.fall_through):
                if failure.kind is FailureKind.MISCONFIGURED:
                    said = misconfigured_text(rung, failure)
                    return _learn(walk, rung, failure), Stop(said, terminal=Terminal.MISCONFIGURED, failure=failure)
                return walk, Stop(failure.message, failure=failure)
            if failure.kind is FailureKind.TRANSIENT and rung.kind in _MAY_LEAVE_MACHINES:
                why = "the create failed but may have made it; release it by name before moving on"
                unsettled = (rung, failure, WithdrawWhy.MAYBE_MADE)
                return walk._replace(unsettled=unsettled), Withdraw(rung, None, WithdrawWhy.MAYBE_MADE, why, False)
            return _replan(_learn(walk, rung, failure), policy)
        case Queued(rung, handle, elapsed_s, reason):
            return walk, _parked(walk, rung, handle, elapsed_s, reason, policy)
        case PollFailed(rung, handle, failure):
            why = f"{rung.lane} stopped answering ({failure.message}); withdraw the job"
            unsettled = (rung, failure, WithdrawWhy.LANE_LOST)
            return walk._replace(unsettled=unsettled), Withdraw(rung, handle, WithdrawWhy.LANE_LOST, why, False)
        case Withdrawn(rung, reason):
            if walk.unsettled is not None and walk.unsettled[0].key == rung.key:
                _, failure, _ = walk.unsettled
                return _replan(_learn(walk._replace(unsettled=None), rung, failure), policy)
            timeout = LaneFailure(FailureKind.PARK_TIMEOUT, f"parked out on {rung.key}", code=reason)
            return _replan(_learn(walk, rung, timeout), policy)
        case WithdrawFailed(rung, failure):
            pending = walk.unsettled
            if pending is not None and pending[0].key == rung.key and pending[2] is WithdrawWhy.MAYBE_MADE:
                # The attempt stays on record with its name; reconcile releases it later.
                return _replan(_learn(walk._replace(unsettled=None), rung, pending[1]), policy)
            # A queued job that will not leave: stop rather than risk two live jobs of one dispatch.
            return walk._replace(unsettled=None), Stop(failure.message, failure=failure)
    raise TypeError(f"not an observation: {seen!r}")  # pragma: no cover - Observation is closed


def misconfigured_text(rung: Rung, failure: LaneFailure) -> str:
    """The one line a dispatch stopped by a misconfigured free cluster ends with: what the
    cluster said, the fix, and the way on (P6: never a silent fall to a paid lane)."""
    fix = misconfigured_fix(rung.lane, failure.code)
    return (
        f"{rung.lane} says {rung.qos or 'its queue'} is set up wrong ({failure.message}); fix: {fix}; "
        "nothing was started on a paid lane (--fall-through skips the cluster instead)"
    )


def _learn(walk: Walk, rung: Rung, failure: LaneFailure) -> Walk:
    snap = absorb(walk.snapshot, rung, failure, restartable=walk.job.restartable)
    return walk._replace(snapshot=snap, failures=(*walk.failures, failure))


def _replan(walk: Walk, policy: Policy) -> tuple[Walk, Step]:
    p = plan(walk.job, walk.snapshot, walk.grants, None, policy=policy)
    if p.terminal is None and p.rungs[0].fault is not None:
        # The cluster said this tier is set up wrong (a fault known before the walk): stop
        # here rather than fall to a paid lane (the job did not ask to fall through).
        said = f"{p.rungs[0].fault}; nothing was started on a paid lane (--fall-through skips the cluster instead)"
        return walk, Stop(said, terminal=Terminal.MISCONFIGURED, plan=p)
    if p.terminal is None:
        return walk, Start(p.rungs[0], p)
    message = terminal_text(p)
    fs = walk.failures
    if fs and all(f.kind is FailureKind.INVALID_REQUEST and f.code == "400" for f in fs):
        # RunPod's document: "if every candidate returns 400, read the last detail as a
        # problem with the request" rather than as capacity.
        message = f"every candidate answered 400; likely a request problem: {fs[-1].message}"
    return walk, Stop(message, terminal=p.terminal, plan=p)


def _parked(walk: Walk, rung: Rung, handle: Handle, elapsed_s: int, reason: str | None, policy: Policy) -> Step:
    park = ParkState(rung.lane, rung.qos, elapsed_s, reason)
    p = plan(walk.job, walk.snapshot, walk.grants, park, policy=policy)
    decision = p.park
    if decision is None:  # pragma: no cover - plan() always decides about a parked job
        raise AssertionError(f"plan() gave no park decision for {rung.key}")
    match decision.action:
        case ParkAction.WAIT:
            here = p.rungs[0]
            nxt = p.rungs[1] if len(p.rungs) > 1 else None
            return Wait(here, handle, decision.remaining_s, here.park_cap_s or 0, decision, nxt)
        case ParkAction.HOLD:
            return Hold(handle, decision)
        case ParkAction.ADVANCE:
            return Withdraw(rung, handle, WithdrawWhy.PARK_TIMEOUT, decision.reason, True)
    raise AssertionError(decision.action)  # pragma: no cover


# --- resume ------------------------------------------------------------------------------------


class ResumeFrom(NamedTuple):
    """Where a resumed walk picks up: ``running`` (the newest live attempt runs: adopt it),
    ``parked`` (a queued job to park on again instead of submitting anew), or neither."""

    walk: Walk
    running: AttemptRecord | None = None
    parked: AttemptRecord | None = None


def resume(
    job: Job,
    snapshot: CapacitySnapshot,
    grants: QosGrants,
    attempts: Sequence[AttemptRecord],
    *,
    forget_before: float = 0.0,
) -> ResumeFrom:
    """The walk of a dispatch whose walker died, rebuilt from its attempts.

    Rungs the dead walk left (failed, parked out, released, gone) are not tried
    again, except an attempt that was never submitted, or whose machine never got its
    job (released by reconcile): a dead walk must not
    demote a job past a tier it never reached (P7).  A preempted spot VM teaches
    what a live preemption teaches (P11: no spot again unless restartable).

    ``forget_before``: a dispatch that waited for capacity plans again from the top: the
    rungs it left before then (found exhausted, parked out) may be tried again.  A SLURM
    run the cluster preempted (or whose node failed) does not rule its tier out."""
    left = [
        a.rung.key
        for a in attempts
        if a.state in LEFT_ATTEMPT_STATES
        and a.outcome not in RETRYABLE_OUTCOMES
        and a.started_at >= forget_before
        and not _cluster_took_it(a)
    ]
    snap = evolve(snapshot, attempted=tuple(dict.fromkeys((*snapshot.attempted, *left))))
    for a in attempts:
        if a.outcome == Outcome.PREEMPTED and not _cluster_took_it(a):
            gone = LaneFailure(FailureKind.PREEMPTED, "preempted")
            snap = absorb(snap, a.rung, gone, restartable=job.restartable)
    walk = Walk(job, snap, grants)
    live = [a for a in attempts if a.state in (AttemptState.RUNNING, AttemptState.PENDING, AttemptState.SUBMITTED)]
    if not live:
        return ResumeFrom(walk)
    newest = live[-1]
    if newest.state is AttemptState.RUNNING:
        return ResumeFrom(walk, running=newest)
    if newest.rung.kind is LaneKind.SLURM and newest.handle:
        return ResumeFrom(walk, parked=newest)
    return ResumeFrom(walk)


def _cluster_took_it(a: AttemptRecord) -> bool:
    """A SLURM run the cluster ended (preempted, its node lost) teaches nothing about its
    tier: a relaunch walks the ladder from the top again (P7)."""
    return a.rung.kind is LaneKind.SLURM and a.outcome == Outcome.PREEMPTED


def queued(handle: Handle) -> bool:
    """Whether ``handle`` is still waiting in a queue rather than started."""
    return handle.state is HandleState.PENDING
