"""The SLURM lanes' rungs: a cluster's QoS ladder for one job (P7, P9, P10).

Every dispatch starts under the top tier the job can run on; each later granted
tier is one more rung, tried only after a park timeout on the one before (P7).
A tier that can never run the job is skipped up front (P9).  A pin submits
under the first tier that can run it and walks no ladder (P10).  The dev QoS,
when the cluster has one, belongs to the dev-QoS intents (``debug``) and sits
right after the top tier when the cluster's switch is on.

:func:`ladder_order` is the one order of a cluster's tiers, the dev tier
included: the walk goes down it and never back up (see ``parking``).
"""

from __future__ import annotations

from eps.core.durations import format_duration
from eps.core.gpus import gpu_model, job_gpu_need
from eps.core.indexes import Candidates, Facts, PolicyIndex
from eps.core.model import (
    ClusterConfig,
    Intent,
    Job,
    LaneKind,
    Provisioning,
    QosGrants,
    QosTier,
    Rung,
    RungWhy,
    Skip,
    SkipCode,
    evolve,
)


def ladder_order(cluster: ClusterConfig) -> tuple[str, ...]:
    """The cluster's tiers from the top down: its ladder, with the dev QoS right after the top tier."""
    tiers = list(cluster.qos_ladder)
    if cluster.dev_qos is not None and cluster.dev_qos not in tiers:
        tiers.insert(min(1, len(tiers)), cluster.dev_qos)
    return tuple(tiers)


def slurm_rungs(
    cluster: ClusterConfig,
    job: Job,
    intent: Intent,
    facts: Facts,
    grants: QosGrants,
    index: PolicyIndex,
    rungs: list[Rung],
    skipped: list[Skip],
) -> None:
    """Append the cluster's rungs for ``job`` (and its skips) in ladder order."""
    name = cluster.name
    if facts.unreachable(name):
        skipped.append(Skip(name, SkipCode.CLUSTER_UNREACHABLE, f"{name} did not answer"))
        return
    need = job_gpu_need(job, intent)
    if not need.admits(cluster.gpu_model, None):
        have = gpu_model(cluster.gpu_model)
        said = f"{have.name} ({have.memory_gb} GB)" if have else cluster.gpu_model
        skipped.append(Skip(name, SkipCode.GPU_NOT_WANTED, f"{name} has {said}; the job needs {need.words()}"))
        return
    pinned = job.pin == name
    tiers = grants.tiers(name)
    key = ("slurm", name, intent, job.duration_s, pinned, tiers)
    cand, static = index.memo(key, lambda: _candidates(cluster, intent, job.duration_s, pinned, tiers))
    skipped.extend(static)
    if not facts.has_queues and facts.fault(name, None) is None and not _any_fault(facts, name, cand):
        rungs.extend(cand)
        return
    for r in cand:
        fault = facts.fault(name, r.qos)
        if fault is not None:
            said = f"{name} says {r.qos or 'its queue'} is set up wrong: {fault.reason}; fix: {fault.fix}"
            if job.fall_through:
                skipped.append(Skip(name, SkipCode.MISCONFIGURED, f"{said} (--fall-through: skipped)", r.qos))
                continue
            rungs.append(evolve(r, fault=said))
            continue
        note = _queue_note(facts, name, r.qos, intent.gpus)
        rungs.append(evolve(r, reason=r.reason + note) if note else r)


def _any_fault(facts: Facts, cluster: str, rungs: tuple[Rung, ...]) -> bool:
    return any(facts.fault(cluster, r.qos) is not None for r in rungs)


def _candidates(
    cluster: ClusterConfig, intent: Intent, duration_s: int | None, pinned: bool, granted_tiers: tuple[QosTier, ...]
) -> Candidates:
    """The rungs a SLURM lane offers this job before anything is known about its queues (P7, P9, P10).

    A job of unknown length (``duration_s`` ``None``) is ruled out by no MaxWall (P9): it
    runs up to the tier's MaxWall (its time limit is set by ``plan()``)."""
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
        code = RungWhy.PINNED if pinned else RungWhy.CLUSTER_QUEUE
        return (_slurm_rung(cluster, None, intent, cap, why, code),), ()

    tiers = list(cluster.qos_ladder)
    dev = cluster.dev_qos
    if dev is not None and intent.dev_qos_ok:
        if cluster.dev_qos_for_debug:
            tiers = list(ladder_order(cluster))
        else:
            skipped.append(Skip(name, SkipCode.DEV_QOS_DISABLED, "P7: the dev-QoS switch is off", dev))
    elif dev is not None and cluster.dev_qos_for_debug:
        why = f"P7: {dev} is only for debug intents, and {intent.name} is not one"
        skipped.append(Skip(name, SkipCode.DEV_QOS_DEBUG_ONLY, why, dev))
    granted = {t.name: t for t in granted_tiers}
    first = True
    for qos in tiers:
        tier = granted.get(qos)
        if tier is None:
            skipped.append(Skip(name, SkipCode.QOS_NOT_GRANTED, f"P9: {qos} is not granted to you", qos))
            continue
        if tier.max_wall_s is not None and duration_s is not None and duration_s > tier.max_wall_s:
            wall, job = format_duration(tier.max_wall_s), format_duration(duration_s)
            skipped.append(Skip(name, SkipCode.QOS_MAX_WALL, f"P9: MaxWall {wall} < job {job}", qos))
            continue
        if tier.max_gpus_per_user is not None and intent.gpus > tier.max_gpus_per_user:
            why = f"P9: per-user cap {tier.max_gpus_per_user} GPUs < job {intent.gpus}"
            skipped.append(Skip(name, SkipCode.QOS_GPU_CAP, why, qos))
            continue
        if pinned and not first:
            skipped.append(Skip(name, SkipCode.NOT_PINNED, "P10: a pin walks no ladder", qos))
            continue
        if pinned:
            cap, why = None, f"P10: pinned to {name}; submits under {qos} and returns the pending handle"
            code = RungWhy.PINNED
        elif first:
            cap, why = cluster.first_park_cap_s, f"P7: free {cluster.gpu_model}s; every dispatch starts under {qos}"
            code = RungWhy.LADDER_FIRST
        else:
            cap, why = cluster.later_park_cap_s, "P7: next granted tier after a park timeout"
            code = RungWhy.LADDER_NEXT
        rungs.append(_slurm_rung(cluster, qos, intent, cap, why + _preemptible(cluster, qos, granted_tiers), code))
        first = False
    return tuple(rungs), tuple(skipped)


def preempted_by(cluster: ClusterConfig, qos: str, tiers: tuple[QosTier, ...]) -> tuple[str, ...]:
    """The tiers that may preempt a job under ``qos``: what the grants say (``Preempt`` of
    ``sacctmgr show qos``) when they say anything of preemption; else, for a tier the row calls
    preemptible, the ladder's tiers above it that are not preemptible themselves (fellows:
    high-eur preempts normal-eur and low-eur)."""
    if any(t.preempts for t in tiers):
        return tuple(t.name for t in tiers if qos in t.preempts)
    if qos not in cluster.preemptible or qos not in cluster.qos_ladder:
        return ()
    above = cluster.qos_ladder[: cluster.qos_ladder.index(qos)]
    return tuple(t for t in above if t not in cluster.preemptible)


def _preemptible(cluster: ClusterConfig, qos: str, tiers: tuple[QosTier, ...]) -> str:
    by = preempted_by(cluster, qos, tiers)
    return f"; preemptible (by {', '.join(by)})" if by else ""


def _slurm_rung(
    cluster: ClusterConfig, qos: str | None, intent: Intent, cap: int | None, why: str, code: RungWhy
) -> Rung:
    mem, cpus = cluster.resources(intent.gpus)
    return Rung(
        cluster.name,
        LaneKind.SLURM,
        Provisioning.QUEUE,
        why,
        qos=qos,
        machine=f"{intent.gpus}x{cluster.gpu_model}",
        gpus=intent.gpus,
        vcpus=intent.vcpus if cpus is None else cpus,
        mem_gb=intent.mem_gb if mem is None else mem,
        park_cap_s=cap,
        why=code,
    )


def _queue_note(facts: Facts, cluster: str, qos: str | None, gpus: int) -> str:
    for q in facts.queue(cluster, qos):
        if q.free_gpus is not None and q.free_gpus < gpus:
            return f" (snapshot: {q.free_gpus} GPUs free under this QoS; expect to park)"
        if q.pending_reason:
            return f" (snapshot: jobs pend with {q.pending_reason})"
    return ""
