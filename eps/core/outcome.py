"""What happened when the shell carried out a rung, and how that becomes knowledge.

Lane adapters in ``eps/shell/`` return ``Result[Handle, LaneFailure]`` at their
boundary; the executor feeds each failure back through :func:`absorb`, which
turns it into capacity facts (pure), and plans again.  The adapters classify
provider errors into :class:`FailureKind`; they never decide what comes next.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from attrs import frozen

from eps.core.model import (
    Capacity,
    CapacitySnapshot,
    ClusterState,
    DownCode,
    GcpState,
    LaneDown,
    LaneKind,
    Provisioning,
    QueueState,
    Rung,
    RunpodState,
    Stock,
    TierFault,
    evolve,
)
from eps.core.runpod_supply import lost_pod
from eps.core.states import AttemptState, HandleState, Outcome


class FailureKind(StrEnum):
    """A closed set: every provider error maps to exactly one of these."""

    ZONE_EXHAUSTED = "zone_exhausted"  # GCP ZONE_RESOURCE_POOL_EXHAUSTED*, stockout texts, a VM left PENDING
    RATE_LIMITED = "rate_limited"  # GCP RESOURCE_OPERATION_RATE_EXCEEDED; RunPod 429 after bounded waits
    QUOTA_REGION = "quota_region"  # GCP QUOTA_EXCEEDED for a regional metric
    QUOTA_GLOBAL = "quota_global"  # GCP GPUS_ALL_REGIONS: no zone anywhere will do
    NO_CAPACITY = "no_capacity"  # RunPod 400 "no longer any instances available"
    FORBIDDEN = "forbidden"  # RunPod 403: no access to this pool; skip the candidate
    REFUSED = "refused"  # SLURM refused at submit (invalid / not granted QoS)
    MISCONFIGURED = "misconfigured"  # SLURM: the tier's partition or account is wrong (a config fix, not capacity)
    INSUFFICIENT_BALANCE = "insufficient_balance"  # RunPod 402: the provider's own spending limit
    AUTH = "auth"  # credentials missing or rejected: stop, nothing else on this lane will work
    INVALID_REQUEST = "invalid_request"  # 422 / 400 contract errors: a bug in eps, never retried
    TRANSIENT = "transient"  # transport errors and 5xx, after bounded retries
    UNREACHABLE = "unreachable"  # SLURM login node / CLI not reachable
    PREEMPTED = "preempted"  # a started spot VM was taken back
    PARK_TIMEOUT = "park_timeout"  # a queued job parked out its cap and was withdrawn (P8); code: pending reason
    UNKNOWN_FATE = "unknown_fate"  # a create whose answer never came: the machine may exist or yet appear


#: How an attempt turned out, as the ledger keeps it: an :class:`~eps.core.states.Outcome`, or
#: the kind of the failure that ended it (``preempted`` and ``park_timeout`` are both: the
#: outcome is read first).
AttemptOutcome = Outcome | FailureKind


class AttemptRecord(NamedTuple):
    """What the core needs of one ledger attempt: its rung, state, outcome, the provider's
    handle id and the deterministic name the attempt was recorded with."""

    seq: int
    rung: Rung
    state: AttemptState
    outcome: AttemptOutcome | None = None
    handle: str | None = None
    started_at: float = 0.0
    id: int = 0
    name: str = ""


def outcome_of(text: str | None) -> AttemptOutcome | None:
    """An attempt's outcome read back from its stored text (``None``: it has none yet)."""
    if text is None:
        return None
    try:
        return Outcome(text)
    except ValueError:
        return FailureKind(text)


#: What to change when a cluster says a setting of a tier is wrong, by the setting
#: (``LaneFailure.code`` of a MISCONFIGURED failure).  ``{c}`` is the cluster.
MISCONFIGURED_FIXES: dict[str, str] = {
    "partition": (
        "set the tier's partition in the config ([[clusters]] name = \"{c}\": partition, or "
        "tier_partition for one tier); `sinfo -s` on the cluster lists its partitions"
    ),
    "account": (
        "fix or remove the account in the config ([[clusters]] name = \"{c}\": account / tier_account; "
        "without one the user's default account applies); `sacctmgr show assoc user=$USER` lists yours"
    ),
    "qos": (
        "fix the QoS names in the config ([[clusters]] name = \"{c}\": qos_ladder); "
        "`sacctmgr show qos` lists the cluster's"
    ),
}


def misconfigured_fix(cluster: str, setting: str | None) -> str:
    """The fix of a MISCONFIGURED failure on ``cluster`` whose ``setting`` is wrong."""
    other = 'fix [[clusters]] name = "{c}" in the config (`eps check` tests it)'
    text = MISCONFIGURED_FIXES.get(setting or "", other)
    return text.format(c=cluster)


#: Failures after which no other rung of the same lane can succeed.
LANE_FATAL: frozenset[FailureKind] = frozenset(
    {FailureKind.AUTH, FailureKind.INSUFFICIENT_BALANCE, FailureKind.UNREACHABLE}
)


def stops_dispatch(failure: LaneFailure, *, fall_through: bool = False) -> bool:
    """Whether ``failure`` ends the dispatch instead of moving on to its next rung.

    One rule for every walker (the executor, the RunPod fan-out).  Stop on rejected
    credentials (AUTH), the provider's own spending limit (INSUFFICIENT_BALANCE: eps
    has no dollar caps, RunPod does) and requests eps built wrong (INVALID_REQUEST),
    except a plain 400, which RunPod's API document answers with "try the next
    candidate".  Everything else (capacity, quota, 403, rate limits, 5xx after
    retries) moves on: the failure is absorbed and the core plans the next rung.

    A create whose fate is unknown (its answer never came, after waiting it out) also
    stops: moving on could leave two machines of one dispatch; reconcile releases the
    first one if it ever appears.

    A free cluster that says a tier is set up wrong (its partition or account:
    MISCONFIGURED) stops too, so that a configuration error is never a silent cost on a
    paid lane, unless the job asked to ``fall_through``."""
    if failure.kind in (FailureKind.AUTH, FailureKind.INSUFFICIENT_BALANCE, FailureKind.UNKNOWN_FATE):
        return True
    if failure.kind is FailureKind.MISCONFIGURED:  # a free cluster set up wrong: never fall to a paid lane
        return not fall_through
    return failure.kind is FailureKind.INVALID_REQUEST and failure.code != "400"


@frozen
class LaneFailure:
    """A rung did not start.  ``message`` is safe to show (never carries secrets)."""

    kind: FailureKind
    message: str
    code: str | None = None  # the provider's own code, e.g. ZONE_RESOURCE_POOL_EXHAUSTED
    retry_after_s: float | None = None
    #: Where a machine was made that did not come up and is gone again (a RunPod pod's data
    #: centre): the place is learned, not the whole rung (:mod:`eps.core.runpod_supply`).
    made_in: str | None = None


@frozen
class Handle:
    """What started (or, for a pin, what is queued): enough to find it again."""

    lane: str
    kind: LaneKind
    id: str  # SLURM job id, GCP instance name, RunPod pod id, VM pid
    rung: str  # always a Rung.key
    zone: str | None = None
    qos: str | None = None
    machine: str | None = None
    state: HandleState = HandleState.RUNNING
    reason: str | None = None  # a queued job's pending reason (SLURM), or the provider's own word


def _region(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def absorb(
    snapshot: CapacitySnapshot, rung: Rung, failure: LaneFailure, *, restartable: bool = False
) -> CapacitySnapshot:
    """Return the snapshot with what ``failure`` taught us about ``rung``.

    The rung's key always joins ``attempted`` so it is never tried twice in one
    dispatch; lane-level facts (quota, unreachable cluster) widen the lesson.  A
    preempted spot VM rules out spot for this machine type everywhere unless the
    job is restartable (then only that zone): a job that cannot restart should not
    be preempted twice (P11).
    """
    attempted = snapshot.attempted if rung.key in snapshot.attempted else (*snapshot.attempted, rung.key)
    snap = evolve(snapshot, attempted=attempted)
    kind = failure.kind
    if rung.kind is LaneKind.GCP and rung.machine is not None and rung.zone is not None:
        if kind is FailureKind.ZONE_EXHAUSTED:
            fact = GcpState(rung.machine, rung.zone, Capacity.EXHAUSTED, rung.provisioning)
            return evolve(snap, gcp=(*snap.gcp, fact))
        if kind is FailureKind.QUOTA_REGION:
            fact = GcpState(rung.machine, _region(rung.zone) + "-*", Capacity.QUOTA_EXCEEDED, rung.provisioning)
            return evolve(snap, gcp=(*snap.gcp, fact))
        if kind is FailureKind.PREEMPTED and rung.provisioning is Provisioning.SPOT:
            where = rung.zone if restartable else "*"
            fact = GcpState(rung.machine, where, Capacity.EXHAUSTED, Provisioning.SPOT)
            return evolve(snap, gcp=(*snap.gcp, fact))
        if kind is FailureKind.QUOTA_GLOBAL:
            fact = GcpState(rung.machine, "*", Capacity.QUOTA_EXCEEDED, None)
            return evolve(snap, gcp=(*snap.gcp, fact))
    if rung.kind is LaneKind.RUNPOD and rung.machine and rung.gpus > 0 and failure.made_in is not None:
        return evolve(snap, runpod=(*snap.runpod, lost_pod(rung.machine, failure.made_in)))
    if rung.kind is LaneKind.RUNPOD and rung.machine is not None and kind is FailureKind.NO_CAPACITY:
        if rung.gpus > 0:  # none in this cloud / data centre: the next place of the type is tried
            return snap
        return evolve(snap, runpod=(*snap.runpod, RunpodState(rung.machine, Stock.NONE)))
    if rung.kind is LaneKind.SLURM and kind is FailureKind.PARK_TIMEOUT:
        # What the queue taught: jobs pend there (with this reason).  P8
        learned = QueueState(rung.lane, rung.qos or "", pending_reason=failure.code)
        return evolve(snap, queues=(*snap.queues, learned))
    if rung.kind is LaneKind.SLURM and kind is FailureKind.MISCONFIGURED:
        fault = TierFault(rung.lane, rung.qos, failure.message, misconfigured_fix(rung.lane, failure.code))
        return evolve(snap, faults=(*snap.faults, fault))
    if rung.kind is LaneKind.SLURM and kind is FailureKind.UNREACHABLE:
        return evolve(snap, clusters=(*snap.clusters, ClusterState(rung.lane, reachable=False)))
    if kind in LANE_FATAL and not any(d.lane == rung.lane for d in snap.unavailable):
        # Nothing else on this lane can work either (its machines never let eps in, the
        # key is refused, the account is out of money): its other rungs are not tried.
        down = LaneDown(rung.lane, f"{rung.lane}: {failure.message}", DownCode.LANE_DOWN)
        return evolve(snap, unavailable=(*snap.unavailable, down))
    return snap
