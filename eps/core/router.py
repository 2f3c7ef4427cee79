"""The router: ``plan(job, capacity_snapshot, qos_grants, park) -> RoutePlan``.

Pure.  Everything it knows arrives as arguments (the job, what is known about
capacity now, the QoS grants, how long the job has been parked) plus the
policy tables; it returns data and never logs, sleeps or calls out.  The
shell carries out ``rungs[0]``, feeds the outcome back into the snapshot and
calls ``plan()`` again.

Lane orders:

- GPU auto lane order: (fellows, gcp).  RunPod is never in the automatic GPU
  order; a GPU job goes to RunPod only when pinned (``--pin runpod``).
- CPU lane order: (gcp, runpod).  Trivial CPU ops (at most 60 s and at most
  50 GB) stay on the shared VM.  CPU-only work never holds a GPU, so it never
  goes to fellows.

Reversal: exhausted GCP CPU used to be a hard terminal
(``cpu_exhausted_no_runpod_lane``).  That rule is reversed: when every GCP CPU
rung is exhausted the plan fails over to RunPod CPU pods, and only when those
are out too is the plan terminal, with ``cpu_exhausted``.

fellows QoS ladder: high-eur -> normal-eur -> low-eur.  Every fellows dispatch
starts under high-eur unless high-eur can never run it (not granted, MaxWall
shorter than the job, per-user GPU cap below the job's GPUs).  Rung 1 parks at
most 600 s (``EPS_FELLOWS_QUEUE_WAIT_SECONDS``); each later rung parks at most
300 s (``EPS_FELLOWS_NEXT_QUEUE_WAIT_SECONDS``).  Worst-case wait before a job
reaches GCP: 600 + 2 x 300 = 1200 s.  dev-eur is used only for ``debug``
intents and only when the cluster's dev-QoS switch is on (off by default); it
then comes right after high-eur.  A pin returns the live PENDING handle: no
ladder walk, no failover.

GCP spot is length-aware: jobs of at most 7200 s, or restartable ones, try
spot first and then on-demand; longer non-restartable jobs go on-demand only;
``cpu-bigmem`` is always on-demand.  No code path limits work by dollars.
"""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache

from eps.core.durations import format_duration
from eps.core.model import (
    Capacity,
    CapacitySnapshot,
    ClusterConfig,
    Intent,
    Job,
    JobError,
    LaneKind,
    ParkAction,
    ParkDecision,
    ParkState,
    Policy,
    Provisioning,
    QosGrants,
    QosTier,
    Resource,
    RoutePlan,
    Rung,
    Skip,
    SkipCode,
    Stock,
    Terminal,
    evolve,
)
from eps.core.tables import BIG_VOLUME_INTENT, DEFAULT_POLICY, GRADIENT_FIT_INTENT

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


def plan(
    job: Job,
    capacity_snapshot: CapacitySnapshot,
    qos_grants: QosGrants,
    park: ParkState | None,
    *,
    policy: Policy = DEFAULT_POLICY,
) -> RoutePlan:
    """Decide where ``job`` runs: the ordered rungs still to try, what was skipped, and why.

    Raises :class:`JobError` (one-line message, stable code) when the job cannot be
    planned as asked: unknown intent or lane, negative duration, a pin the work can
    never run on, a GPU count no single machine has.
    """
    intent, notes = _resolve(job, policy)
    lanes, skipped = _lanes(job, intent, policy)
    rungs: list[Rung] = []
    for lane in lanes:
        _lane_rungs(lane, job, intent, capacity_snapshot, qos_grants, policy, rungs, skipped)

    decision: ParkDecision | None = None
    if park is not None:
        decision, rungs = _apply_park(park, job, rungs, skipped, policy)

    if capacity_snapshot.attempted:
        tried = set(capacity_snapshot.attempted)
        keep = []
        for r in rungs:
            if r.key in tried and not (decision is not None and decision.rung == r.key):
                skipped.append(Skip(r.lane, SkipCode.ATTEMPTED, "already tried in this dispatch", r.key))
            else:
                keep.append(r)
        rungs = keep

    terminal = None
    if not rungs:
        if job.pin is not None:
            terminal = Terminal.PIN_EXHAUSTED
        elif intent.resource is Resource.CPU:
            terminal = Terminal.CPU_EXHAUSTED
        else:
            terminal = Terminal.GPU_EXHAUSTED

    return RoutePlan(
        intent=job.intent,
        resolved_intent=intent.name,
        resource=intent.resource,
        count=job.count if intent.resource is Resource.CPU else 1,
        rungs=tuple(rungs),
        skipped=tuple(skipped),
        terminal=terminal,
        worst_case_wait_s=_worst_case(rungs, decision),
        notes=tuple(notes),
        park=decision,
    )


# --- intent resolution (P1, P4, P5) -------------------------------------------------------


def _resolve(job: Job, policy: Policy) -> tuple[Intent, list[str]]:
    intent = policy.intent(job.intent)
    if intent is None:
        known = ", ".join(i.name for i in policy.intents)
        raise JobError("unknown_intent", f"unknown intent {job.intent!r} (known: {known})", job)
    if job.duration_s < 0:
        raise JobError("bad_duration", f"duration must not be negative (got {job.duration_s} s)", job)
    if job.count < 1:
        raise JobError("bad_count", f"count must be at least 1 (got {job.count})", job)
    if job.footprint_gb < 0:
        raise JobError("bad_footprint", f"footprint must not be negative (got {job.footprint_gb} GB)", job)
    notes: list[str] = []
    th = policy.thresholds
    if intent.resource is Resource.CPU:
        if job.gradient_fit:
            intent = _must(policy, GRADIENT_FIT_INTENT, job)
            notes.append(f"P4: a gradient-descent fit goes to a GPU intent: {job.intent} -> {intent.name}")
        elif job.footprint_gb > th.big_footprint_gb and intent.name != BIG_VOLUME_INTENT:
            intent = _must(policy, BIG_VOLUME_INTENT, job)
            notes.append(
                f"P4: footprint {job.footprint_gb:g} GB > {th.big_footprint_gb} GB takes the big-volume "
                f"route: {job.intent} -> {intent.name} with a disk sized to the footprint"
            )
    if intent.resource is Resource.GPU and job.count > 1:
        total = intent.gpus * job.count
        multi = policy.intent(f"gpu-{total}")
        if multi is None or multi.resource is not Resource.GPU or multi.gpus != total:
            sizes = sorted(i.gpus for i in policy.intents if i.name.startswith("gpu-"))
            raise JobError(
                "gpu_count",
                f"{job.count} x {intent.gpus} GPU = {total} GPUs: GPU work runs on one multi-GPU machine "
                f"(P5) and no machine has {total}; use one of gpu-{', gpu-'.join(map(str, sizes))}",
                job,
            )
        notes.append(
            f"P5: --count {job.count} of {intent.name} is one {total}-GPU machine, never "
            f"{job.count} single machines: {intent.name} -> {multi.name}"
        )
        intent = multi
    if intent.resource is Resource.CPU and job.count > 1:
        notes.append(f"P5: {job.count} independent CPU machines in parallel; each walks these rungs")
    return intent, notes


def _must(policy: Policy, name: str, job: Job) -> Intent:
    it = policy.intent(name)
    if it is None:
        raise JobError("unknown_intent", f"policy has no {name!r} intent", job)
    return it


def _lane_kind(lane: str, policy: Policy) -> LaneKind | None:
    if lane == policy.trivial_lane:
        return LaneKind.VM
    if lane == "gcp":
        return LaneKind.GCP
    if lane == "runpod":
        return LaneKind.RUNPOD
    if policy.cluster(lane) is not None:
        return LaneKind.SLURM
    return None


def _lanes(job: Job, intent: Intent, policy: Policy) -> tuple[list[str], list[Skip]]:
    """The lanes to walk, in order, and the lanes left out with their reasons."""
    skipped: list[Skip] = []
    th = policy.thresholds
    clusters = [c.name for c in policy.clusters]
    if intent.resource is Resource.CPU:
        for name in clusters:
            skipped.append(Skip(name, SkipCode.CPU_NEVER_HOLDS_GPU, "P1: CPU-only work never holds a GPU"))
        trivial = job.duration_s <= th.trivial_op_s and job.footprint_gb <= th.big_footprint_gb
        natural = [policy.trivial_lane] if trivial else list(policy.cpu_lane_order)
        if trivial:
            for lane in policy.cpu_lane_order:
                skipped.append(Skip(lane, SkipCode.TRIVIAL_STAYS_ON_VM, f"P2: {job.duration_s} s op stays on the VM"))
        else:
            skipped.append(
                Skip(
                    policy.trivial_lane,
                    SkipCode.NOT_TRIVIAL,
                    f"P2: only ops of at most {th.trivial_op_s} s and {th.big_footprint_gb} GB stay on the VM",
                )
            )
    else:
        natural = list(policy.gpu_lane_order)
        if "runpod" not in natural:
            skipped.append(Skip("runpod", SkipCode.RUNPOD_GPU_NEEDS_PIN, "P6: RunPod takes GPU work only when pinned"))
    if job.pin is None:
        return natural, skipped

    pin = job.pin
    kind = _lane_kind(pin, policy)
    if kind is None:
        known = ", ".join([policy.trivial_lane, *clusters, "gcp", "runpod"])
        raise JobError("unknown_lane", f"unknown lane {pin!r} for --pin (known: {known})", job)
    if intent.resource is Resource.GPU and kind is LaneKind.VM:
        raise JobError("impossible_pin", f"{intent.name} needs {intent.gpus} GPU(s); the {pin} lane has none", job)
    if intent.resource is Resource.CPU and kind is LaneKind.SLURM:
        raise JobError("impossible_pin", f"{intent.name} is CPU-only work and {pin} is a GPU cluster (P1)", job)
    # A pin replaces the lane order: explain every other lane as not pinned.
    skipped = [s for s in skipped if s.lane == pin and s.code is not SkipCode.RUNPOD_GPU_NEEDS_PIN]
    for lane in dict.fromkeys([*natural, *clusters, "gcp", "runpod", policy.trivial_lane]):
        if lane != pin and _applies(lane, intent, policy):
            skipped.append(Skip(lane, SkipCode.NOT_PINNED, f"P10: pinned to {pin}"))
    return [pin], skipped


def _applies(lane: str, intent: Intent, policy: Policy) -> bool:
    kind = _lane_kind(lane, policy)
    if intent.resource is Resource.CPU:
        return kind is not LaneKind.SLURM
    return kind is not LaneKind.VM


# --- rungs per lane -----------------------------------------------------------------------


def _lane_rungs(
    lane: str,
    job: Job,
    intent: Intent,
    snap: CapacitySnapshot,
    grants: QosGrants,
    policy: Policy,
    rungs: list[Rung],
    skipped: list[Skip],
) -> None:
    for down in snap.unavailable:
        if down.lane == lane:
            skipped.append(Skip(lane, SkipCode.LANE_UNAVAILABLE, down.reason))
            return
    kind = _lane_kind(lane, policy)
    if kind is LaneKind.VM:
        why = "P2: trivial op stays on the shared VM" if job.pin is None else "P10: pinned to the VM"
        rungs.append(Rung(lane, LaneKind.VM, Provisioning.LOCAL, why, vcpus=intent.vcpus))
    elif kind is LaneKind.SLURM:
        cluster = policy.cluster(lane)
        if cluster is not None:  # always: _lane_kind found it
            _slurm_rungs(cluster, job, intent, snap, grants, rungs, skipped)
    elif kind is LaneKind.GCP:
        _gcp_rungs(job, intent, snap, policy, rungs, skipped)
    elif kind is LaneKind.RUNPOD:
        if intent.resource is Resource.CPU:
            _runpod_cpu_rungs(job, intent, snap, policy, rungs, skipped)
        else:
            _runpod_gpu_rungs(job, intent, snap, policy, rungs, skipped)


def _slurm_rungs(
    cluster: ClusterConfig,
    job: Job,
    intent: Intent,
    snap: CapacitySnapshot,
    grants: QosGrants,
    rungs: list[Rung],
    skipped: list[Skip],
) -> None:
    name = cluster.name
    for cs in snap.clusters:
        if cs.cluster == name and not cs.reachable:
            skipped.append(Skip(name, SkipCode.CLUSTER_UNREACHABLE, f"{name} did not answer"))
            return
    cand, static = _slurm_candidates(cluster, intent, job.duration_s, job.pin == name, grants.tiers(name))
    skipped.extend(static)
    if not snap.queues:
        rungs.extend(cand)
        return
    for r in cand:
        note = _queue_note(snap, name, r.qos, intent.gpus)
        rungs.append(evolve(r, reason=r.reason + note) if note else r)


@lru_cache(maxsize=1024)
def _slurm_candidates(
    cluster: ClusterConfig, intent: Intent, duration_s: int, pinned: bool, granted_tiers: tuple[QosTier, ...]
) -> tuple[tuple[Rung, ...], tuple[Skip, ...]]:
    """The rungs a SLURM lane offers this job before anything is known about its queues (P7, P9, P10)."""
    name = cluster.name
    rungs: list[Rung] = []
    skipped: list[Skip] = []
    capacity = cluster.gpus_per_node * cluster.max_nodes
    if intent.gpus > capacity:
        skipped.append(Skip(name, SkipCode.CLUSTER_TOO_SMALL, f"{intent.gpus} GPUs > {capacity} on one {name} node"))
        return (), tuple(skipped)
    if not cluster.qos_ladder:
        cap = None if pinned else cluster.first_park_cap_s
        why = "P10: pinned; returns the pending handle" if pinned else f"{name} queue (no QoS ladder)"
        return (_slurm_rung(cluster, None, intent, cap, why),), ()

    tiers = list(cluster.qos_ladder)
    if cluster.dev_qos is not None and intent.dev_qos_ok:
        if cluster.dev_qos_for_debug:
            tiers.insert(1, cluster.dev_qos)
        else:
            skipped.append(Skip(name, SkipCode.DEV_QOS_DISABLED, "P7: the dev-QoS switch is off", cluster.dev_qos))
    granted = {t.name: t for t in granted_tiers}
    first = True
    for qos in tiers:
        tier = granted.get(qos)
        if tier is None:
            skipped.append(Skip(name, SkipCode.QOS_NOT_GRANTED, f"P9: {qos} is not granted to you", qos))
            continue
        if tier.max_wall_s is not None and duration_s > tier.max_wall_s:
            skipped.append(
                Skip(
                    name,
                    SkipCode.QOS_MAX_WALL,
                    f"P9: MaxWall {format_duration(tier.max_wall_s)} < job {format_duration(duration_s)}",
                    qos,
                )
            )
            continue
        if tier.max_gpus_per_user is not None and intent.gpus > tier.max_gpus_per_user:
            skipped.append(
                Skip(
                    name,
                    SkipCode.QOS_GPU_CAP,
                    f"P9: per-user cap {tier.max_gpus_per_user} GPUs < job {intent.gpus}",
                    qos,
                )
            )
            continue
        if pinned and not first:
            skipped.append(Skip(name, SkipCode.NOT_PINNED, "P10: a pin walks no ladder", qos))
            continue
        if pinned:
            cap, why = None, f"P10: pinned to {name}; submits under {qos} and returns the pending handle"
        elif first:
            cap, why = cluster.first_park_cap_s, f"P7: free {cluster.gpu_model}s; every dispatch starts under {qos}"
        else:
            cap, why = cluster.next_park_cap_s, "P7: next granted tier after a park timeout"
        rungs.append(_slurm_rung(cluster, qos, intent, cap, why))
        first = False
    return tuple(rungs), tuple(skipped)


def _slurm_rung(cluster: ClusterConfig, qos: str | None, intent: Intent, cap: int | None, why: str) -> Rung:
    return Rung(
        cluster.name,
        LaneKind.SLURM,
        Provisioning.QUEUE,
        why,
        qos=qos,
        machine=f"{intent.gpus}x{cluster.gpu_model}",
        gpus=intent.gpus,
        vcpus=intent.vcpus,
        mem_gb=intent.mem_gb,
        park_cap_s=cap,
    )


def _queue_note(snap: CapacitySnapshot, cluster: str, qos: str | None, gpus: int) -> str:
    for q in snap.queues:
        if q.cluster == cluster and q.qos == qos:
            if q.free_gpus is not None and q.free_gpus < gpus:
                return f" (snapshot: {q.free_gpus} GPUs free under this QoS; expect to park)"
            if q.pending_reason:
                return f" (snapshot: jobs pend with {q.pending_reason})"
    return ""


def _gcp_rungs(
    job: Job,
    intent: Intent,
    snap: CapacitySnapshot,
    policy: Policy,
    rungs: list[Rung],
    skipped: list[Skip],
) -> None:
    th = policy.thresholds
    if not intent.spot_eligible:
        spot = _SpotMode.NEVER_INTENT
    elif job.duration_s <= th.spot_max_s:
        spot = _SpotMode.SHORT
    elif job.restartable:
        spot = _SpotMode.RESTARTABLE
    else:
        spot = _SpotMode.NEVER_LONG
    cand, static = _gcp_candidates(policy, intent, spot, _disk_gb(job, policy))
    skipped.extend(static)
    if not snap.gcp:
        rungs.extend(cand)
        return
    for r in cand:
        state = _gcp_state(snap, r.machine or "", r.zone or "", r.provisioning)
        target = f"{r.machine}/{r.zone}/{r.provisioning.value}"
        if state is Capacity.EXHAUSTED:
            skipped.append(Skip("gcp", SkipCode.GCP_ZONE_EXHAUSTED, f"{r.zone} is out of {r.machine}", target))
        elif state is Capacity.QUOTA_EXCEEDED:
            skipped.append(Skip("gcp", SkipCode.GCP_QUOTA_EXCEEDED, f"quota exceeded for {r.zone}", target))
        else:
            rungs.append(r)


class _SpotMode(StrEnum):
    SHORT = "short"
    RESTARTABLE = "restartable"
    NEVER_LONG = "never_long"
    NEVER_INTENT = "never_intent"


@lru_cache(maxsize=1024)
def _gcp_candidates(
    policy: Policy, intent: Intent, spot: _SpotMode, disk: int | None
) -> tuple[tuple[Rung, ...], tuple[Skip, ...]]:
    """GCP rungs before capacity is consulted: spot (when P11 allows) then on-demand, zones in preference order."""
    skipped: list[Skip] = []
    if intent.gcp_machine is None:
        return (), ()
    machine = policy.gcp_machine(intent.gcp_machine)
    if machine is None:
        return (), ()
    th = policy.thresholds
    provs: list[Provisioning] = []
    if spot is _SpotMode.NEVER_INTENT:
        skipped.append(Skip("gcp", SkipCode.ON_DEMAND_ONLY_INTENT, f"P4: {intent.name} stays on-demand", machine.name))
    elif spot is _SpotMode.NEVER_LONG:
        skipped.append(
            Skip(
                "gcp",
                SkipCode.SPOT_TOO_LONG,
                f"P11: longer than {format_duration(th.spot_max_s)} and not restartable: on-demand only",
                machine.name,
            )
        )
    else:
        provs.append(Provisioning.SPOT)
    if machine.on_demand_offered:
        provs.append(Provisioning.ON_DEMAND)
    else:
        skipped.append(
            Skip(
                "gcp",
                SkipCode.ON_DEMAND_NOT_OFFERED,
                f"{machine.name} is sold as spot/flex-start only; --restartable allows spot",
                machine.name,
            )
        )
    zones = []
    for zone in policy.gcp_zones:
        if zone in machine.zones:
            zones.append(zone)
        else:
            skipped.append(Skip("gcp", SkipCode.ZONE_NOT_OFFERED, f"{machine.name} not offered in {zone}", zone))
    if intent.resource is Resource.GPU:
        lead = f"P6: GPU after the free cluster; {machine.name}"
    else:
        lead = f"P3: cheap dedicated CPU machine, GCP first; {machine.name}"
    rungs = []
    for prov in provs:
        if prov is Provisioning.SPOT:
            why, price = f"{lead}, spot first (P11: {spot.value} job)", machine.spot_per_hour
        else:
            why, price = f"{lead}, on-demand", machine.on_demand_per_hour
        for zone in zones:
            rungs.append(
                Rung(
                    "gcp",
                    LaneKind.GCP,
                    prov,
                    why,
                    machine=machine.name,
                    zone=zone,
                    gpus=machine.gpus,
                    vcpus=machine.vcpus,
                    mem_gb=machine.mem_gb,
                    disk_gb=disk,
                    price_per_hour=price,
                )
            )
    return tuple(rungs), tuple(skipped)


def _gcp_state(snap: CapacitySnapshot, machine: str, zone: str, prov: Provisioning) -> Capacity:
    state = Capacity.UNKNOWN
    for g in snap.gcp:  # later facts override earlier ones
        if g.machine != machine or (g.provisioning is not None and g.provisioning is not prov):
            continue
        z = g.zone
        if z in (zone, "*") or (z.endswith("*") and zone.startswith(z[:-1])):
            state = g.state
    return state


def _disk_gb(job: Job, policy: Policy) -> int | None:
    """Boot/container disk for the big-volume route: the footprint plus 25 %, in 10 GB steps."""
    if job.footprint_gb <= policy.thresholds.big_footprint_gb:
        return None
    need = job.footprint_gb * 1.25
    return int(-(-need // 10) * 10)


def _runpod_filter(cand: tuple[Rung, ...], snap: CapacitySnapshot, rungs: list[Rung], skipped: list[Skip]) -> None:
    if not snap.runpod:
        rungs.extend(cand)
        return
    for r in cand:
        machine = r.machine or ""
        flavor = machine.split("-", 1)[0]
        stock = Stock.UNKNOWN
        for st in snap.runpod:  # later facts override earlier ones
            if st.id in (machine, flavor):
                stock = st.stock
        if stock is Stock.NONE:
            skipped.append(Skip("runpod", SkipCode.RUNPOD_OUT_OF_STOCK, f"{r.machine} is out of stock", r.machine))
        else:
            rungs.append(r)


def _runpod_cpu_rungs(
    job: Job,
    intent: Intent,
    snap: CapacitySnapshot,
    policy: Policy,
    rungs: list[Rung],
    skipped: list[Skip],
) -> None:
    cand, static = _runpod_cpu_candidates(policy, intent, _disk_gb(job, policy), job.pin == "runpod")
    skipped.extend(static)
    _runpod_filter(cand, snap, rungs, skipped)


@lru_cache(maxsize=256)
def _runpod_cpu_candidates(
    policy: Policy, intent: Intent, disk: int | None, pinned: bool
) -> tuple[tuple[Rung, ...], tuple[Skip, ...]]:
    """One CPU pod rung per flavor: the smallest size that holds the intent's vCPUs, RAM and disk."""
    flavors = {f.name: f for f in policy.runpod_cpu}
    need_disk = disk or 0
    rungs: list[Rung] = []
    skipped: list[Skip] = []
    why = "P10: pinned to runpod; CPU pod" if pinned else "P3: RunPod CPU pod, the fallback when GCP CPU is exhausted"
    for name in intent.runpod_cpu:
        flavor = flavors.get(name)
        if flavor is None:
            continue
        vcpus = next(
            (
                v
                for v in flavor.vcpu_options
                if v >= intent.vcpus
                and v * flavor.gb_per_vcpu >= intent.mem_gb
                and v * flavor.disk_gb_per_vcpu >= need_disk
            ),
            None,
        )
        if vcpus is None:
            skipped.append(
                Skip(
                    "runpod",
                    SkipCode.RUNPOD_DISK_TOO_SMALL,
                    f"{name}: no size holds {intent.mem_gb} GB RAM and a {need_disk} GB disk",
                    name,
                )
            )
            continue
        mem = vcpus * flavor.gb_per_vcpu
        rungs.append(
            Rung(
                "runpod",
                LaneKind.RUNPOD,
                Provisioning.ON_DEMAND,
                why,
                machine=f"{name}-{vcpus}-{mem}",
                vcpus=vcpus,
                mem_gb=mem,
                disk_gb=disk,
                price_per_hour=round(vcpus * flavor.per_vcpu_hour, 4),
            )
        )
    return tuple(rungs), tuple(skipped)


def _runpod_gpu_rungs(
    job: Job,
    intent: Intent,
    snap: CapacitySnapshot,
    policy: Policy,
    rungs: list[Rung],
    skipped: list[Skip],
) -> None:
    types = {g.id: g for g in policy.runpod_gpu}
    cand = []
    for gid in intent.runpod_gpu:
        gpu = types.get(gid)
        if gpu is None or gpu.max_count < intent.gpus:
            continue
        cand.append(
            Rung(
                "runpod",
                LaneKind.RUNPOD,
                Provisioning.ON_DEMAND,
                f"P10: pinned to runpod; one pod with {intent.gpus} x {gid} (P5)",
                machine=gid,
                gpus=intent.gpus,
                vcpus=intent.vcpus,
                mem_gb=intent.mem_gb,
                disk_gb=_disk_gb(job, policy),
                price_per_hour=round(intent.gpus * gpu.per_gpu_hour, 4),
            )
        )
    _runpod_filter(tuple(cand), snap, rungs, skipped)


# --- parking (P7, P8, P10) -----------------------------------------------------------------


def _apply_park(
    park: ParkState, job: Job, rungs: list[Rung], skipped: list[Skip], policy: Policy
) -> tuple[ParkDecision, list[Rung]]:
    """Decide about a job parked on ``park.cluster``/``park.qos`` and return what remains."""
    index = next(
        (i for i, r in enumerate(rungs) if r.kind is LaneKind.SLURM and r.lane == park.cluster and r.qos == park.qos),
        None,
    )
    where = f"{park.cluster}/{park.qos or '-'}"
    if index is None:
        decision = ParkDecision(ParkAction.ADVANCE, where, 0, "the parked rung is not in the plan any more")
        return decision, rungs
    rung = rungs[index]
    for passed in rungs[:index]:
        skipped.append(Skip(passed.lane, SkipCode.ATTEMPTED, "tried earlier in this walk", passed.key))
    rest = rungs[index + 1 :]
    reason = park.pending_reason
    cluster = policy.cluster(park.cluster)
    if rung.park_cap_s is None:
        note = "P10: pinned; the pending job is the answer"
        if reason in NEVER_RUNS_REASONS:
            note += f" (warning: {reason} means it can never run there)"
        return ParkDecision(ParkAction.HOLD, rung.key, 0, note), rungs[index:]
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
    return ParkDecision(ParkAction.WAIT, rung.key, remaining, why), rungs[index:]


def _worst_case(rungs: list[Rung], decision: ParkDecision | None) -> int:
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
