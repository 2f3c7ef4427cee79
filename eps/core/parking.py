"""Parking: what to do with a job PENDING on a SLURM rung, and the worst-case wait (P7, P8, P10)."""

from __future__ import annotations

from eps.core.indexes import PolicyIndex
from eps.core.model import (
    LaneKind,
    ParkAction,
    ParkDecision,
    ParkState,
    Provisioning,
    Rung,
    Skip,
    SkipCode,
)

#: Pending reasons that mean this job can never run under this QoS: waiting is pointless.
NEVER_RUNS_REASONS: frozenset[str] = frozenset(
    {
        "QOSMaxWallDurationPerJobLimit",
        "AssocMaxWallDurationPerJobLimit",
        "PartitionTimeLimit",
        "PartitionNodeLimit",
        "InvalidQOS",
        "QOSNotAllowed",
        "InvalidAccount",
        "QOSMaxGRESPerJob",
        "QOSMaxCpuPerJobLimit",
        "QOSMaxNodePerJobLimit",
        "BadConstraints",
    }
)

#: Pending reasons caused by the user's own running jobs under this QoS: the next
#: tier has headroom of its own.  Early advance on these is a setting, off by default.
SELF_CAP_REASONS: frozenset[str] = frozenset({"QOSMaxGRESPerUser", "QOSMaxCpuPerUserLimit", "QOSMaxNodePerUserLimit"})


def apply_park(
    park: ParkState, rungs: list[Rung], skipped: list[Skip], index: PolicyIndex
) -> tuple[ParkDecision, list[Rung]]:
    """Decide about a job parked on ``park.cluster``/``park.qos`` and return what remains."""
    at = next(
        (i for i, r in enumerate(rungs) if r.kind is LaneKind.SLURM and r.lane == park.cluster and r.qos == park.qos),
        None,
    )
    where = f"{park.cluster}/{park.qos or '-'}"
    if at is None:
        decision = ParkDecision(ParkAction.ADVANCE, where, 0, "the parked rung is not in the plan any more")
        return decision, rungs
    rung = rungs[at]
    for passed in rungs[:at]:
        skipped.append(Skip(passed.lane, SkipCode.ATTEMPTED, "tried earlier in this walk", passed.key))
    rest = rungs[at + 1 :]
    reason = park.pending_reason
    cluster = index.clusters.get(park.cluster)
    if rung.park_cap_s is None:
        note = "P10: pinned; the pending job is the answer"
        if reason in NEVER_RUNS_REASONS:
            note += f" (warning: {reason} means it can never run there)"
        return ParkDecision(ParkAction.HOLD, rung.key, 0, note), rungs[at:]
    if reason in NEVER_RUNS_REASONS:
        skipped.append(Skip(rung.lane, SkipCode.NEVER_RUNS_HERE, f"pending reason {reason}", rung.key))
        return ParkDecision(ParkAction.ADVANCE, rung.key, 0, f"{reason}: never runs on {rung.qos}"), rest
    if reason in SELF_CAP_REASONS and cluster is not None and cluster.advance_on_self_cap:
        skipped.append(Skip(rung.lane, SkipCode.NEVER_RUNS_HERE, f"pending reason {reason}", rung.key))
        return (
            ParkDecision(ParkAction.ADVANCE, rung.key, 0, f"{reason}: your own cap binds; next tier has headroom"),
            rest,
        )
    if park.elapsed_s >= rung.park_cap_s:
        skipped.append(
            Skip(rung.lane, SkipCode.PARK_SPENT, f"P8: parked {park.elapsed_s} s >= cap {rung.park_cap_s} s", rung.key)
        )
        return ParkDecision(ParkAction.ADVANCE, rung.key, 0, f"P8: park cap {rung.park_cap_s} s spent"), rest
    remaining = rung.park_cap_s - park.elapsed_s
    why = f"P8: {park.elapsed_s} s of {rung.park_cap_s} s parked"
    if reason:
        why += f" ({reason})"
    return ParkDecision(ParkAction.WAIT, rung.key, remaining, why), rungs[at:]


def worst_case(rungs: list[Rung], decision: ParkDecision | None) -> int:
    """Seconds a job can spend parked before its first paid (or local) rung starts."""
    total = 0
    for i, r in enumerate(rungs):
        if r.provisioning is not Provisioning.QUEUE:
            break
        if r.park_cap_s is None:
            break
        if i == 0 and decision is not None and decision.action is ParkAction.WAIT:
            total += decision.remaining_s
        else:
            total += r.park_cap_s
    return total
