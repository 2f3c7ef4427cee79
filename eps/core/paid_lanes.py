"""The paid lanes' rungs: GCP machines and RunPod pods (P3, P4, P6, P11).

GCP: spot first when the job is short or restartable (P11), then on-demand;
GPU work on every family whose GPUs satisfy the job (model and memory, ``eps.core.gpus``),
machines by list price per GPU-hour within each provisioning model;
``cpu-bigmem`` on-demand only (P4); a machine type GCP sells as spot/flex-start
only (no on-demand) gives a long, non-restartable job flex-start rungs instead
(never preempted; at most ``FLEX_START_MAX_RUN_S``, P11); zones in the configured
preference order, only those that offer the machine type.  RunPod CPU pods: the intent's flavors
in order, each at the smallest size that holds its vCPUs, RAM and disk; the
fallback when GCP CPU is exhausted (P3).  RunPod GPU pods: pinned jobs only
(P6).  Prices are information only (P12).

What a lane offers a job shape is memoised in the policy's index; the
snapshot's facts then strike out what is known to be exhausted.
"""

from __future__ import annotations

from eps.core.durations import format_duration
from eps.core.gpus import GpuNeed, family_of, gcp_gpu_machines, gpu_memory_gb, job_gpu_need, runpod_gpu_types
from eps.core.indexes import Candidates, Facts, PolicyIndex
from eps.core.model import (
    Capacity,
    GcpMachine,
    Intent,
    Job,
    LaneKind,
    Provisioning,
    Resource,
    Rung,
    RungWhy,
    Skip,
    SkipCode,
    Stock,
)
from eps.core.prices import gcp_price
from eps.core.runpod_supply import MAX_POD_CREATES, places, zone_of
from eps.core.tables import FLEX_START_MAX_RUN_S


def gcp_rungs(
    job: Job,
    intent: Intent,
    facts: Facts,
    index: PolicyIndex,
    rungs: list[Rung],
    skipped: list[Skip],
) -> None:
    """Append the GCP rungs for ``job`` (and the skips), minus what the snapshot knows is exhausted."""
    th = index.policy.thresholds
    duration = job.duration_s  # None: unknown, which is long (P11), never short
    if not intent.spot_eligible:
        spot = _SpotMode.NEVER_INTENT
    elif duration is not None and duration <= th.spot_max_s:
        spot = _SpotMode.SHORT
    elif job.restartable:
        spot = _SpotMode.RESTARTABLE
    else:
        spot = _SpotMode.NEVER_LONG
    disk = disk_gb(job, index, intent)
    fits_flex = duration is None or duration <= FLEX_START_MAX_RUN_S  # unknown: runs up to flex-start's maximum
    shown = None if fits_flex else duration  # the skip text of a job too long for flex-start names its length
    need = job_gpu_need(job, intent) if intent.resource is Resource.GPU else GpuNeed()
    cand, static = index.memo(
        ("gcp", intent, spot, disk, fits_flex, duration is None, shown, need),
        lambda: _gcp_candidates(index, intent, spot, disk, fits_flex, duration, need),
    )
    skipped.extend(static)
    if not facts.has_gcp:
        rungs.extend(cand)
        return
    for r in cand:
        state = facts.gcp_state(r.machine or "", r.zone or "", r.provisioning)
        target = f"{r.machine}/{r.zone}/{r.provisioning.value}"
        if state is Capacity.EXHAUSTED:
            skipped.append(Skip("gcp", SkipCode.GCP_ZONE_EXHAUSTED, f"{r.zone} is out of {r.machine}", target))
        elif state is Capacity.QUOTA_EXCEEDED:
            skipped.append(Skip("gcp", SkipCode.GCP_QUOTA_EXCEEDED, f"quota exceeded for {r.zone}", target))
        else:
            rungs.append(r)


class _SpotMode:
    """What P11 leaves a job on GCP spot (words, not an enum: a memo key, and one class fewer
    to build on every ``eps plan``)."""

    SHORT = "short"
    RESTARTABLE = "restartable"
    NEVER_LONG = "never_long"
    NEVER_INTENT = "never_intent"


def _gcp_candidates(
    index: PolicyIndex, intent: Intent, spot: str, disk: int | None, fits_flex: bool, duration_s: int | None,
    need: GpuNeed,
) -> Candidates:
    """GCP rungs before capacity is consulted.  The machines: the intent's own (CPU work), or
    for GPU work every family's machine type with the job's GPUs that satisfies its need
    (:func:`~eps.core.gpus.gcp_gpu_machines`).  The provisioning models in P11's order: spot
    (when P11 allows), then on-demand, then, for a long non-restartable job on a machine type
    sold as spot/flex-start only, flex-start (when the job fits its maximum run duration);
    within each, machines by list price per GPU-hour (cheapest first; information, P12, but
    the one order that is not arbitrary), each in its zones in preference order.  A job of
    unknown length (``duration_s`` ``None``) counts as long."""
    skipped: list[Skip] = []
    if intent.resource is Resource.GPU:
        machines = list(gcp_gpu_machines(index.policy, need, intent.gpus))
        _gpu_not_wanted(index, need, intent.gpus, machines, skipped)
    else:
        own = index.machines.get(intent.gcp_machine or "")
        machines = [own] if own is not None else []
    per_prov: dict[Provisioning, list[tuple[float, int, GcpMachine]]] = {p: [] for p in _GCP_ORDER}
    for pos, machine in enumerate(machines):
        for prov in _machine_provs(machine, intent, spot, fits_flex, duration_s, index, skipped):
            price = gcp_price(machine, prov)
            per_prov[prov].append((price / max(1, machine.gpus), pos, machine))
    zones_of = {m.name: _zones(m, index, skipped) for m in machines}
    rungs = []
    for prov in _GCP_ORDER:
        for _, _, machine in sorted(per_prov[prov], key=lambda t: (t[0], t[1])):
            why = _gcp_why(machine, intent, prov, spot)
            for zone in zones_of[machine.name]:
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
                        price_per_hour=gcp_price(machine, prov),
                        why=RungWhy.GCP_GPU if intent.resource is Resource.GPU else RungWhy.GCP_CPU,
                    )
                )
    return tuple(rungs), tuple(skipped)


#: The order of GCP's provisioning models in a plan (P11): spot first when allowed, then
#: on-demand, then flex-start (where a long non-restartable job has no on-demand).
_GCP_ORDER = (Provisioning.SPOT, Provisioning.ON_DEMAND, Provisioning.FLEX_START)


def _gpu_not_wanted(index: PolicyIndex, need: GpuNeed, gpus: int, kept: list[GcpMachine], skipped: list[Skip]) -> None:
    """A skip for each family with a ``gpus``-GPU machine whose GPU the job does not want."""
    said = {family_of(m.name) for m in kept}
    for m in index.policy.gcp_machines:
        fam = family_of(m.name)
        if m.gpus == gpus and gpus and fam not in said:
            said.add(fam)
            mem = gpu_memory_gb(m)
            have = f"{m.gpu_model} ({mem} GB)" if mem is not None else str(m.gpu_model)
            skipped.append(Skip("gcp", SkipCode.GPU_NOT_WANTED, f"{fam} has {have}; the job needs {need.words()}", fam))


def _machine_provs(
    machine: GcpMachine,
    intent: Intent,
    spot: str,
    fits_flex: bool,
    duration_s: int | None,
    index: PolicyIndex,
    skipped: list[Skip],
) -> list[Provisioning]:
    """The provisioning models P11 leaves ``machine`` for this job, and the skips that say why not others."""
    th = index.policy.thresholds
    provs: list[Provisioning] = []
    flex_case = spot == _SpotMode.NEVER_LONG and not machine.on_demand_offered and machine.flex_start_offered
    if spot == _SpotMode.NEVER_INTENT:
        skipped.append(Skip("gcp", SkipCode.ON_DEMAND_ONLY_INTENT, f"P4: {intent.name} stays on-demand", machine.name))
    elif spot == _SpotMode.NEVER_LONG:
        instead = ("flex-start instead" if fits_flex else "no spot") if flex_case else "on-demand only"
        spot_max = format_duration(th.spot_max_s)
        unknown = f"duration unknown, so not known to be {spot_max} or less,"
        long = f"longer than {spot_max}" if duration_s is not None else unknown
        skipped.append(Skip("gcp", SkipCode.SPOT_TOO_LONG, f"P11: {long} and not restartable: {instead}", machine.name))
    elif Provisioning.SPOT in machine.sold_as:
        provs.append(Provisioning.SPOT)
    if machine.on_demand_offered:
        provs.append(Provisioning.ON_DEMAND)
    else:
        also = "--restartable allows spot" if spot == _SpotMode.NEVER_LONG else "spot first"
        skipped.append(
            Skip(
                "gcp",
                SkipCode.ON_DEMAND_NOT_OFFERED,
                f"{machine.name} is sold as spot/flex-start only; {also}",
                machine.name,
            )
        )
    if flex_case and fits_flex:
        provs.append(Provisioning.FLEX_START)
    elif flex_case:
        limit = format_duration(FLEX_START_MAX_RUN_S)
        skipped.append(
            Skip(
                "gcp",
                SkipCode.FLEX_START_TOO_LONG,
                f"P11: a {format_duration(duration_s or 0)} job is longer than flex-start's maximum run duration "
                f"({limit}), and {machine.name} is sold as spot/flex-start only: no rung of it can hold the job",
                machine.name,
            )
        )
    return provs


def _zones(machine: GcpMachine, index: PolicyIndex, skipped: list[Skip]) -> list[str]:
    """The configured zones, in preference order, that offer ``machine``."""
    zones = []
    offered = index.machine_zones[machine.name]
    for zone in index.policy.gcp_zones:
        if zone in offered:
            zones.append(zone)
        else:
            skipped.append(Skip("gcp", SkipCode.ZONE_NOT_OFFERED, f"{machine.name} not offered in {zone}", zone))
    return zones


def _gcp_why(machine: GcpMachine, intent: Intent, prov: Provisioning, spot: str) -> str:
    if intent.resource is Resource.GPU:
        lead = f"P6: GPU after the free cluster; {machine.name} ({machine.gpus} x {machine.gpu_model})"
    else:
        lead = f"P3: cheap dedicated CPU machine, GCP first; {machine.name}"
    if prov is Provisioning.SPOT:
        return f"{lead}, spot first (P11: {spot} job)"
    if prov is Provisioning.FLEX_START:
        limit = format_duration(FLEX_START_MAX_RUN_S)
        return f"{lead}, flex-start (P11: long, not restartable, no on-demand; uninterrupted, up to {limit})"
    return f"{lead}, on-demand"


def disk_gb(job: Job, index: PolicyIndex, intent: Intent | None = None) -> int | None:
    """The machine's disk: for the big-volume route the footprint plus 25 %, in 10 GB steps; a
    GPU intent's own default (its model and cache) when that is bigger; else ``None`` (the lane's)."""
    own = intent.disk_gb if intent is not None else None
    if job.footprint_gb <= index.policy.thresholds.big_footprint_gb:
        return own
    need = job.footprint_gb * 1.25
    sized = int(-(-need // 10) * 10)
    return sized if own is None else max(own, sized)


def _runpod_filter(cand: tuple[Rung, ...], facts: Facts, rungs: list[Rung], skipped: list[Skip]) -> None:
    if not facts.has_runpod:
        rungs.extend(cand)
        return
    for r in cand:
        machine = r.machine or ""
        if facts.runpod_stock(machine, machine.split("-", 1)[0]) is Stock.NONE:
            skipped.append(Skip("runpod", SkipCode.RUNPOD_OUT_OF_STOCK, f"{r.machine} is out of stock", r.machine))
        else:
            rungs.append(r)


def runpod_cpu_rungs(
    job: Job,
    intent: Intent,
    facts: Facts,
    index: PolicyIndex,
    rungs: list[Rung],
    skipped: list[Skip],
) -> None:
    """Append one CPU pod rung per flavor of the intent that has a size for it (P3)."""
    disk = disk_gb(job, index, intent)
    pinned = job.pin == "runpod"
    cand, static = index.memo(
        ("runpod-cpu", intent, disk, pinned), lambda: _runpod_cpu_candidates(index, intent, disk, pinned)
    )
    skipped.extend(static)
    _runpod_filter(cand, facts, rungs, skipped)


def _runpod_cpu_candidates(index: PolicyIndex, intent: Intent, disk: int | None, pinned: bool) -> Candidates:
    """One CPU pod rung per flavor: the smallest size that holds the intent's vCPUs, RAM and disk."""
    flavors = index.runpod_cpu
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
                why=RungWhy.PINNED if pinned else RungWhy.RUNPOD_CPU,
            )
        )
    return tuple(rungs), tuple(skipped)


def runpod_gpu_rungs(
    job: Job,
    intent: Intent,
    facts: Facts,
    index: PolicyIndex,
    rungs: list[Rung],
    skipped: list[Skip],
) -> None:
    """Append one GPU pod rung per RunPod GPU type that satisfies the job's need (a pinned job
    only, P6), cheapest per GPU first, all GPUs on one pod (P5)."""
    need = job_gpu_need(job, intent)
    policy = index.policy
    lost = facts.runpod_lost
    if len(lost) >= MAX_POD_CREATES:
        where = ", ".join(f"{dc} ({g})" for g, dc in lost)
        detail = (
            f"{len(lost)} RunPod pods were made in this dispatch and none came up (at most {MAX_POD_CREATES}"
            f" per dispatch; each was terminated): {where}"
        )
        skipped.append(Skip("runpod", SkipCode.RUNPOD_ROTATION_SPENT, detail))
        return
    cand = []
    for gpu in runpod_gpu_types(policy, need, intent.gpus):
        gid = gpu.id
        for place in places(gid, policy.runpod_supply, policy.runpod_data_centers, lost):
            cand.append(
                Rung(
                    "runpod",
                    LaneKind.RUNPOD,
                    Provisioning.ON_DEMAND,
                    f"P10: pinned to runpod; one pod with {intent.gpus} x {gid} ({gpu.memory_gb} GB) (P5);"
                    f" {place.words()}",
                    machine=gid,
                    zone=zone_of(place),
                    gpus=intent.gpus,
                    vcpus=intent.vcpus,
                    mem_gb=intent.mem_gb,
                    disk_gb=disk_gb(job, index, intent),
                    price_per_hour=round(intent.gpus * gpu.per_gpu_hour, 4),
                    why=RungWhy.PINNED,
                )
            )
    _runpod_filter(tuple(cand), facts, rungs, skipped)
