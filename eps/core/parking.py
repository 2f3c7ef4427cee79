"""Parking and the walk down the ladder: what to do with a job PENDING on a SLURM rung,
which tiers are behind the walk, and the worst-case wait (P7, P8, P10).

The one rule of the walk (P7): the ladder never walks back up.  Once a dispatch
has parked on a tier, or tried one (``CapacitySnapshot.attempted``), no tier
above it in the cluster's ladder order (``ladder.ladder_order``, the dev tier
right after the top one) is proposed again; only the tiers below it, then the
other lanes.  This holds whether or not the tier reached is still in the plan
(the grants may lack it now, or P9 rules it out): every rung of that cluster at
or above it is dropped, with the skip code ``ladder_passed``.  ``eps plan
--park`` and the executor (which calls ``plan()`` with a ``ParkState`` on every
poll of a PENDING job, then plans again with the tier in ``attempted``) both
come through :func:`settle_walk`, so both obey it.
"""

from __future__ import annotations

from eps.core.indexes import PolicyIndex
from eps.core.ladder import ladder_order
from eps.core.model import (
    ClusterConfig,
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


def settle_walk(
    park: ParkState | None, attempted: frozenset[str], rungs: list[Rung], skipped: list[Skip], index: PolicyIndex
) -> tuple[ParkDecision | None, list[Rung]]:
    """Drop the tiers the walk has passed (the ladder never walks back up), then decide
    about the parked job, if any.  Returns the decision and the rungs that remain."""
    floors = _walk_floors(park, attempted, index)
    if floors:
        rungs = _below_floors(rungs, floors, skipped, index)
    if park is None:
        return None, rungs
    return apply_park(park, rungs, skipped, index)


def _position(cluster: ClusterConfig, qos: str | None, index: PolicyIndex) -> int | None:
    """Where ``qos`` sits in the cluster's ladder order (0 = top), or ``None`` when it is no tier of it."""
    positions = index.positions.get(cluster.name)
    if positions is None:
        positions = {tier: i for i, tier in enumerate(ladder_order(cluster))}
        index.positions[cluster.name] = positions
    return None if qos is None else positions.get(qos)


def _walk_floors(park: ParkState | None, attempted: frozenset[str], index: PolicyIndex) -> dict[str, tuple[int, str]]:
    """Per cluster, the lowest tier this dispatch has reached: the parked tier and every tier
    already tried (a SLURM rung key is ``cluster/qos/-/queue``).  cluster -> (position, tier)."""
    reached: list[tuple[str, str | None]] = []
    if park is not None:
        reached.append((park.cluster, park.qos))
    for key in attempted:
        parts = key.split("/")
        if len(parts) == 4 and parts[3] == Provisioning.QUEUE.value:
            reached.append((parts[0], parts[1]))
    floors: dict[str, tuple[int, str]] = {}
    for name, qos in reached:
        cluster = index.clusters.get(name)
        pos = None if cluster is None or qos is None else _position(cluster, qos, index)
        if pos is not None and qos is not None and pos > floors.get(name, (-1, ""))[0]:
            floors[name] = (pos, qos)
    return floors


def _below_floors(
    rungs: list[Rung], floors: dict[str, tuple[int, str]], skipped: list[Skip], index: PolicyIndex
) -> list[Rung]:
    """The rungs without those of a cluster above the tier its walk has reached (the reached
    tier itself stays: parked, it is decided on; tried, ``attempted`` removes it)."""
    keep = []
    for r in rungs:
        floor = floors.get(r.lane) if r.kind is LaneKind.SLURM else None
        cluster = index.clusters.get(r.lane) if floor is not None else None
        pos = None if cluster is None else _position(cluster, r.qos, index)
        if floor is not None and pos is not None and pos < floor[0]:
            why = f"P7: the walk has reached {floor[1]}; the ladder never walks back up"
            skipped.append(Skip(r.lane, SkipCode.LADDER_PASSED, why, r.key))
        else:
            keep.append(r)
    return keep


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
        why = "the parked rung is not in the plan any more; only tiers below it and the other lanes remain (P7)"
        decision = ParkDecision(ParkAction.ADVANCE, where, 0, why)
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
