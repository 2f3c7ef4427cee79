"""The router: ``plan(job, capacity_snapshot, qos_grants, park) -> RoutePlan``.

Pure.  Everything it knows arrives as arguments (the job, what is known about
capacity now, the QoS grants, how long the job has been parked) plus the
policy tables; it returns data and never logs, sleeps or calls out.  The
shell carries out ``rungs[0]``, feeds the outcome back into the snapshot and
calls ``plan()`` again.

Here: intent resolution (P1, P4, P5) and lane selection (P2, P3, P6, P10).
Each lane's rungs come from ``ladder`` (the SLURM QoS ladder: P7, P9, P10) and
``paid_lanes`` (GCP and RunPod: P3, P4, P11); ``parking`` decides about a
parked job and drops the tiers the walk has passed (P7, P8); ``indexes`` makes
each lookup O(1).  A trivial op stays on the VM only when it fits there
(``_vm_misfit``; the VM's size is ``model.VmCapacity``).

Lane orders:

- GPU auto lane order: (fellows, gcp).  RunPod is never in the automatic GPU
  order; a GPU job goes to RunPod only when pinned (``--pin runpod``).
- CPU lane order: (gcp, runpod).  Trivial CPU ops (at most 60 s and at most
  50 GB) stay on the shared VM when they fit it (memory, footprint plus a
  safety margin of free disk).  CPU-only work never holds a GPU,
  so it never goes to fellows.

Reversal: exhausted GCP CPU used to be a hard terminal
(``cpu_exhausted_no_runpod_lane``).  That rule is reversed: when every GCP CPU
rung is exhausted the plan fails over to RunPod CPU pods, and only when those
are out too is the plan terminal, with ``cpu_exhausted``.

fellows QoS ladder: high-eur -> normal-eur -> low-eur.  Every fellows dispatch
starts under high-eur unless high-eur can never run it (not granted, MaxWall
shorter than the job, per-user GPU cap below the job's GPUs).  Rung 1 parks at
most 600 s (``EPS_FELLOWS_QUEUE_WAIT_SECONDS``); each later rung parks at most
300 s (``EPS_FELLOWS_NEXT_QUEUE_WAIT_SECONDS``), and never longer than rung 1:
the effective cap of rungs 2+ is the smaller of the two settings.  Worst-case
wait before a job reaches GCP: 600 + 2 x 300 = 1200 s.  dev-eur is used only for ``debug``
intents and only when the cluster's dev-QoS switch is on (off by default); it
then comes right after high-eur.  A pin returns the live PENDING handle: no
ladder walk, no failover.

GPUs (issue 35): a GPU job needs GPUs of some models with some memory each (``Job.gpu_models``,
``Job.gpu_mem_gb``, else its intent's defaults; :mod:`eps.core.gpus`).  Every lane offers only
GPUs that satisfy it: fellows when its H200s do, GCP every family that does (``paid_lanes``),
RunPod (pinned) every type that does; a need no lane meets is a ``no_such_gpu`` refusal.

A job without a duration (``Job.duration_s`` ``None``) is taken as long, never as a
guessed number: it is never trivial (P2), gets no spot unless restartable (P11), is
ruled out by no MaxWall (P9), and each of its rungs carries its lane's maximum as its
time limit (``_at_lane_maximum``), which the plan's reasons and notes state.

Boot loops: a rung whose machines died soon after coming up twice within a day
(:func:`~eps.core.healing.boot_looped`, from ``CapacitySnapshot.lives``, the ledger's
memory the shell reads) is skipped with ``boot_loop`` for every dispatch, its deaths as
evidence, until the day has passed; a pin is exempt (P10), and says so in a note.

GCP spot is length-aware: jobs of at most 7200 s, or restartable ones, try
spot first and then on-demand; longer non-restartable jobs go on-demand only,
or, on machine types sold as spot/flex-start only, flex-start (up to 7d);
``cpu-bigmem`` is always on-demand.  No code path limits work by dollars.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

from eps.core.durations import format_duration
from eps.core.gpus import ANY_GPU, GPU_MODELS, gpu_errors, job_gpu_need, no_such_gpu
from eps.core.healing import boot_loop_evidence, boot_loop_lasts_s, boot_looped
from eps.core.indexes import Facts, PolicyIndex, policy_index
from eps.core.ladder import slurm_rungs
from eps.core.model import (
    CapacitySnapshot,
    Intent,
    Job,
    JobError,
    LaneKind,
    ParkState,
    Policy,
    Provisioning,
    QosGrants,
    Resource,
    RoutePlan,
    Rung,
    RungWhy,
    Skip,
    SkipCode,
    Terminal,
    VmCapacity,
    evolve,
)
from eps.core.paid_lanes import gcp_rungs, runpod_cpu_rungs, runpod_gpu_rungs
from eps.core.parking import NEVER_RUNS_REASONS, SELF_CAP_REASONS, settle_walk, worst_case
from eps.core.sweep import check_sweep, side_by_side, sweep_note
from eps.core.tables import (
    BIG_VOLUME_INTENT,
    DEFAULT_POLICY,
    FLEX_START_MAX_RUN_S,
    GRADIENT_FIT_INTENT,
    HEALING,
    lane_time_limit_s,
)

__all__ = ["NEVER_RUNS_REASONS", "SELF_CAP_REASONS", "did_you_mean", "lane_runs", "plan", "unknown_intent",
           "with_intent_duration"]


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
    index = policy_index(policy)
    intent, notes = _resolve(job, index)
    lanes, skipped = _lanes(job, intent, index, capacity_snapshot.vm, notes)
    if job.pin is None:
        lanes = _by_start_estimate(lanes, capacity_snapshot, index, notes)
    if intent.resource is Resource.CPU and job.count > 1:
        notes.append(_fan_out_note(job.count, lanes, index))
    facts = Facts.of(capacity_snapshot)
    rungs: list[Rung] = []
    for lane in lanes:
        _lane_rungs(lane, job, intent, facts, qos_grants, index, rungs, skipped)

    decision, rungs = settle_walk(park, facts.attempted, rungs, skipped, index)
    rungs = _left_out(rungs, job, capacity_snapshot, facts, decision.rung if decision else None, skipped, notes)

    if job.duration_s is None and job.time_limit_s is None:
        rungs = [_at_lane_maximum(r, qos_grants, index) for r in rungs]
    if (said := _preemption_note(job, rungs, qos_grants, index)) is not None:
        notes.append(said)
    if (said := _disk_note(intent, rungs)) is not None:
        notes.append(said)
    if (said := sweep_note(job, intent.name, [r.lane for r in rungs if r.kind is LaneKind.SLURM])) is not None:
        notes.append(said)

    terminal = None
    if not rungs:
        if lanes and all(facts.lane_down(lane) is not None for lane in lanes):
            terminal = Terminal.NO_USABLE_LANE  # nothing was exhausted: nothing here could even try
        elif job.pin is not None:
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
        worst_case_wait_s=worst_case(rungs, decision),
        notes=tuple(notes),
        park=decision,
    )


def _disk_note(intent: Intent, rungs: Sequence[Rung]) -> str | None:
    """The disk a paid GPU machine of this plan gets, and why."""
    sizes = sorted({r.disk_gb for r in rungs if r.disk_gb is not None and r.gpus > 0})
    if not sizes:
        return None
    gb = "/".join(str(s) for s in sizes)
    why = f"{intent.name}'s default: its model and a cache" if intent.disk_gb in sizes else "the footprint plus 25 %"
    return f"paid GPU machines get a {gb} GB disk ({why}; a bigger --footprint-gb sizes it), the model cache on it"


def _preemption_note(job: Job, rungs: Sequence[Rung], grants: QosGrants, index: PolicyIndex) -> str | None:
    """What this job does if a preemptible rung's run is preempted, under its retry policy."""
    from eps.core.healing import RetryOn
    from eps.core.ladder import preempted_by

    tiers = [
        r.key for r in rungs
        if r.kind is LaneKind.SLURM and r.qos and preempted_by(index.clusters[r.lane], r.qos, grants.tiers(r.lane))
    ]  # fmt: skip
    if not tiers:
        return None
    retried = job.restartable if job.retry is None else RetryOn.INTERRUPTION.value in job.retry
    restarts = job.max_restarts
    if restarts is None:
        restarts = HEALING.restartable_restarts if job.retry is None else HEALING.max_restarts
    if retried and restarts > 0:
        then = f"relaunched from the top of the ladder with its synced outputs (at most {restarts} restarts)"
    else:
        then = "not relaunched: the dispatch ends preempted (--restartable or --retry interruption relaunches it)"
    return f"preemptible rungs ({', '.join(tiers)}): a preempted run is interrupted, not failed, and is {then}"


def _left_out(
    rungs: list[Rung],
    job: Job,
    snap: CapacitySnapshot,
    facts: Facts,
    held: str | None,
    skipped: list[Skip],
    notes: list[str],
) -> list[Rung]:
    """``rungs`` without those this dispatch already tried (``attempted``) and, unless the
    job is pinned (P10: pins are exempt), those in a boot loop (``boot_loop``, its early
    deaths as evidence).  The rung the job is parked on (``held``) stays."""
    looped = boot_looped(snap.lives, snap.lives_at) if snap.lives else {}
    if not facts.attempted and not looped:
        return rungs
    keep = []
    for r in rungs:
        deaths = looped.get(r.key)
        if r.key == held:
            keep.append(r)
        elif r.key in facts.attempted:
            skipped.append(Skip(r.lane, SkipCode.ATTEMPTED, "already tried in this dispatch", r.key))
        elif deaths and job.pin is None:
            lasts = format_duration(boot_loop_lasts_s(deaths, snap.lives_at))
            why = f"{boot_loop_evidence(deaths, snap.lives_at)}; skipped for {lasts} more (a pin is exempt)"
            skipped.append(Skip(r.lane, SkipCode.BOOT_LOOP, why, r.key))
        else:
            if deaths:
                evidence = boot_loop_evidence(deaths, snap.lives_at)
                notes.append(f"P10: pinned to {job.pin}: {r.key} is tried although in a boot loop ({evidence})")
            keep.append(r)
    return keep


# --- a job of unknown length (P2, P9, P11) ---------------------------------------------------

#: What ``plan()`` assumes of a job without a duration, said in its notes.
UNKNOWN_DURATION_NOTE = (
    "duration unknown (no --duration): taken as long, not guessed: never trivial, so never on the shared "
    "VM (P2); no spot unless --restartable (P11); no QoS tier is ruled out by its MaxWall (P9); each "
    "rung's time limit is its lane's maximum"
)


def _at_lane_maximum(rung: Rung, grants: QosGrants, index: PolicyIndex) -> Rung:
    """``rung`` with the time limit of a job of unknown length there: the lane's maximum
    (:func:`~eps.core.tables.lane_time_limit_s`), said in its reason."""
    policy = index.policy
    wall = None
    if rung.kind is LaneKind.SLURM and rung.qos is not None:
        wall = next((t.max_wall_s for t in grants.tiers(rung.lane) if t.name == rung.qos), None)
    limit = lane_time_limit_s(rung.kind, rung.provisioning, policy.max_time_limit_s, max_wall_s=wall)
    stop = f"the job is stopped at {format_duration(limit)}"
    if wall is not None:
        upto = f"sbatch --time is the tier's MaxWall {format_duration(wall)}; {stop}"
    elif rung.provisioning is Provisioning.FLEX_START:
        upto = f"up to flex-start's maximum run duration {format_duration(FLEX_START_MAX_RUN_S)}; {stop}"
    else:
        upto = f"time limit {format_duration(limit)}, the lane's maximum ([jobs] max_time_limit)"
    return evolve(rung, time_limit_s=limit, reason=f"{rung.reason}; duration unknown: {upto}")


# --- intent resolution (P1, P4, P5) -------------------------------------------------------


def did_you_mean(word: str, known: list[str]) -> str:
    """``" (did you mean gpu-1?)"`` when ``word`` is close to one of ``known``, else ``""``."""
    from difflib import get_close_matches  # only on this error path

    close = [k for k in known if k.replace("-", "") == word.replace("-", "").lower()]
    close = close or get_close_matches(word, known, n=1, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def unknown_intent(name: str, policy: Policy, job: Job | None = None) -> JobError:
    """The error for an intent the policy does not have, with the closest ones and the list."""
    known = [i.name for i in policy.intents]
    return JobError(
        "unknown_intent", f"unknown intent {name!r}{did_you_mean(name, known)} (known: {', '.join(known)})", job,
        field="intent",
    )


def with_intent_duration(job: Job, policy: Policy) -> Job:
    """``job`` with its intent's default duration (``[intents.NAME] duration``) when it gives
    none; the front doors' job as planned and executed (every lane's time limit follows it)."""
    intent = policy.intent(job.intent) if job.duration_s is None else None
    if intent is None or intent.duration_s is None:
        return job
    return evolve(job, duration_s=intent.duration_s)


def _resolve(job: Job, index: PolicyIndex) -> tuple[Intent, list[str]]:
    policy = index.policy
    intent = index.intents.get(job.intent)
    if intent is None:
        raise unknown_intent(job.intent, policy, job)
    if job.duration_s is not None and job.duration_s < 0:
        raise JobError("bad_duration", f"duration must not be negative (got {job.duration_s} s)", job)
    if job.count < 1:
        raise JobError("bad_count", f"count must be at least 1 (got {job.count})", job)
    if job.footprint_gb < 0:
        raise JobError("bad_footprint", f"footprint must not be negative (got {job.footprint_gb} GB)", job)
    notes: list[str] = [UNKNOWN_DURATION_NOTE] if job.duration_s is None else []
    th = policy.thresholds
    if intent.resource is Resource.CPU:
        if job.gradient_fit:
            intent = _must(index, GRADIENT_FIT_INTENT, job)
            notes.append(f"P4: a gradient-descent fit goes to a GPU intent: {job.intent} -> {intent.name}")
        elif job.footprint_gb > th.big_footprint_gb and intent.name != BIG_VOLUME_INTENT:
            intent = _must(index, BIG_VOLUME_INTENT, job)
            notes.append(
                f"P4: footprint {job.footprint_gb:g} GB > {th.big_footprint_gb} GB takes the big-volume "
                f"route: {job.intent} -> {intent.name} with a disk sized to the footprint"
            )
    check_sweep(job, intent.resource)
    if intent.resource is Resource.GPU and job.count > 1:
        intent = _grown(intent, job, index, notes)
    _gpu_need(job, intent, index, notes)
    return intent, notes


def _gpu_need(job: Job, intent: Intent, index: PolicyIndex, notes: list[str]) -> None:
    """Check the job's GPU need (``--gpu``, ``--gpu-mem``): a CPU job has none (P1), and a
    need no lane can meet is refused in one line naming what each lane has."""
    asked = bool(job.gpu_models) or job.gpu_mem_gb is not None
    if intent.resource is Resource.CPU:
        if asked:
            raise JobError("gpu_on_cpu", f"{intent.name} is CPU-only work (P1): --gpu/--gpu-mem need a GPU intent", job)
        return
    bad = gpu_errors(job)
    if bad is not None:
        code, said, word = bad
        if code == "unknown_gpu":
            names = [m.name for m in GPU_MODELS]
            said += f"{did_you_mean(word, names)} (known: {', '.join(names)}, {ANY_GPU})"
        raise JobError(code, said, job)
    need = job_gpu_need(job, intent)
    refused = no_such_gpu(job, need, index.policy)
    if refused is not None:
        raise refused
    if asked:
        notes.append(f"GPUs: {need.words()} (--gpu/--gpu-mem); every lane offers only GPUs that satisfy it")
    elif need.min_mem_gb:
        notes.append(f"GPUs: {need.words()} ({intent.name}'s default; --gpu/--gpu-mem change it)")


def _grown(intent: Intent, job: Job, index: PolicyIndex, notes: list[str]) -> Intent:
    """A GPU intent with ``--count N``: one machine with N x its GPUs, never N machines (P5).

    The machine shape (GPUs, vCPUs, memory) is that of the ``gpu-<total>`` intent; the
    GCP machine types follow from the GPU count and the need (:mod:`eps.core.gpus`).  A
    shape intent (``gpu-1``) becomes the bigger shape (``gpu-4``); any other intent keeps
    its name and its traits and only takes the bigger machine: ``debug --count 2`` is a
    2-GPU debug job, still eligible for the dev QoS (P7), whose tier caps then apply to its
    2 GPUs (P9)."""
    total = intent.gpus * job.count
    shape = index.intents.get(f"gpu-{total}")
    if shape is None or shape.resource is not Resource.GPU or shape.gpus != total:
        sizes = sorted(i.gpus for i in index.policy.intents if i.name.startswith("gpu-"))
        raise JobError(
            "gpu_count",
            f"{job.count} x {intent.gpus} GPU = {total} GPUs: GPU work runs on one multi-GPU machine "
            f"(P5) and no machine has {total}; use one of gpu-{', gpu-'.join(map(str, sizes))}",
            job,
        )
    lead = f"P5: --count {job.count} of {intent.name} is one {total}-GPU machine, never {job.count} single machines"
    if index.intents.get(f"gpu-{intent.gpus}") == intent:
        notes.append(f"{lead}: {intent.name} -> {shape.name}")
        return shape
    keeps = "; dev-QoS eligible (P7)" if intent.dev_qos_ok else ""
    notes.append(f"{lead}: the shape of {shape.name}, still a {intent.name} job{keeps}")
    return evolve(intent, gpus=shape.gpus, vcpus=shape.vcpus, mem_gb=shape.mem_gb, gcp_machine=shape.gcp_machine)


def _fan_out_note(count: int, lanes: list[str], index: PolicyIndex) -> str:
    """What ``--count N`` of CPU work means here (P5): N machines, or N copies on the shared VM."""
    if lanes == [index.policy.trivial_lane]:
        return f"P5: --count {count}: {count} copies run side by side on the shared VM (P2), not on {count} machines"
    return f"P5: {count} independent CPU machines in parallel; each walks these rungs"


def _must(index: PolicyIndex, name: str, job: Job) -> Intent:
    it = index.intents.get(name)
    if it is None:
        raise JobError("unknown_intent", f"policy has no {name!r} intent", job)
    return it


def _lanes(
    job: Job, intent: Intent, index: PolicyIndex, snap_vm: VmCapacity, notes: list[str]
) -> tuple[list[str], list[Skip]]:
    """The lanes to walk, in order, and the lanes left out with their reasons (P1, P2, P3, P6, P10)."""
    policy = index.policy
    misfit: str | None = None
    skipped: list[Skip] = []
    th = policy.thresholds
    clusters = [c.name for c in policy.clusters]
    if intent.resource is Resource.CPU:
        for name in clusters:
            skipped.append(Skip(name, SkipCode.CPU_NEVER_HOLDS_GPU, "P1: CPU-only work never holds a GPU"))
        short = job.duration_s is not None and job.duration_s <= th.trivial_op_s  # unknown is never trivial
        trivial = short and job.footprint_gb <= th.big_footprint_gb
        misfit = _vm_misfit(job, intent, snap_vm.over(policy.vm), th.vm_disk_margin_gb) if trivial else None
        natural = [policy.trivial_lane] if trivial and misfit is None else list(policy.cpu_lane_order)
        if trivial and misfit is None:
            for lane in policy.cpu_lane_order:
                skipped.append(Skip(lane, SkipCode.TRIVIAL_STAYS_ON_VM, f"P2: {job.duration_s} s op stays on the VM"))
        elif job.pin == policy.trivial_lane:  # the pin wins (P10): the VM is the rung, never a skip as well
            why = misfit or "it is not a trivial op (P2)"
            notes.append(f"P10: pinned to the VM, although {'it does not fit: ' if misfit else ''}{why}")
        elif misfit is not None:
            skipped.append(Skip(policy.trivial_lane, SkipCode.VM_TOO_SMALL, misfit))
            if job.pin is None:
                notes.append(f"{misfit}: a trivial op that does not fit the VM takes the normal CPU route")
        else:
            unknown = "duration unknown, so not trivial: " if job.duration_s is None else ""
            only = f"only ops of at most {th.trivial_op_s} s and {th.big_footprint_gb} GB stay on the VM"
            skipped.append(Skip(policy.trivial_lane, SkipCode.NOT_TRIVIAL, f"P2: {unknown}{only}"))
    else:
        natural = list(policy.gpu_lane_order)
        if "runpod" not in natural:
            skipped.append(Skip("runpod", SkipCode.RUNPOD_GPU_NEEDS_PIN, "P6: RunPod takes GPU work only when pinned"))
    if job.pin is None:
        return natural, [*skipped, *_out_of_order(natural, skipped, intent, index)]

    pin = job.pin
    kind = index.lane_kinds.get(pin)
    if kind is None:
        known = [policy.trivial_lane, *clusters, "gcp", "runpod"]
        rest = f"{did_you_mean(pin, known)} (known: {', '.join(known)})"
        raise JobError("unknown_lane", f"unknown lane {pin!r} for --pin{rest}", job, field="pin",
                       plain=f"unknown lane {pin!r}{rest}")  # fmt: skip
    if intent.resource is Resource.GPU and kind is LaneKind.VM:
        raise JobError("impossible_pin", f"{intent.name} needs {intent.gpus} GPU(s); the {pin} lane has none", job)
    if intent.resource is Resource.CPU and kind is LaneKind.SLURM:
        raise JobError("impossible_pin", f"{intent.name} is CPU-only work and {pin} is a GPU cluster (P1)", job)
    # A pin replaces the lane order: explain every other lane as not pinned.
    drop = (SkipCode.RUNPOD_GPU_NEEDS_PIN, SkipCode.VM_TOO_SMALL)  # the pin's own lane is the answer
    skipped = [s for s in skipped if s.lane == pin and s.code not in drop]
    for lane in dict.fromkeys([*natural, *clusters, "gcp", "runpod", policy.trivial_lane]):
        if lane != pin and _applies(lane, intent, index):
            skipped.append(Skip(lane, SkipCode.NOT_PINNED, f"P10: pinned to {pin}"))
    return [pin], skipped


def _out_of_order(natural: list[str], skipped: list[Skip], intent: Intent, index: PolicyIndex) -> list[Skip]:
    """The lanes this intent could use that the lane order leaves out (``[lanes]``) and
    nothing else explains: named, never dropped in silence (``--pin`` still reaches them)."""
    policy = index.policy
    said = {s.lane for s in skipped}
    order, key = (policy.gpu_lane_order, "gpu") if intent.resource is Resource.GPU else (policy.cpu_lane_order, "cpu")
    lanes = [c.name for c in policy.clusters] + ["gcp"] if key == "gpu" else ["gcp", "runpod"]
    return [
        Skip(lane, SkipCode.NOT_IN_LANE_ORDER, f"{lane} is in no {key.upper()} lane order ({', '.join(order)}): "
             f"add it to [lanes] {key}, or --pin {lane}")
        for lane in lanes
        if lane not in natural and lane not in said and _applies(lane, intent, index)
    ]


def _by_start_estimate(lanes: list[str], snap: CapacitySnapshot, index: PolicyIndex, notes: list[str]) -> list[str]:
    """Each run of consecutive clusters in ``lanes``, sorted by the clusters' own start
    estimates for this job (soonest first; unknown last; ties keep the order).  A hint: the
    first cluster is parked and capped as any first choice.  A robot login's estimate was read
    against eps's own clock (it runs no ``date``): the note says it has no clock correction."""
    est = {c.cluster: c.start_estimate_s for c in snap.clusters if c.start_estimate_s is not None}
    if not est:
        return lanes
    out: list[str] = []
    for ranks, run in lane_runs(lanes, index.policy):
        ranked = sorted(run, key=lambda n: (est.get(n) is None, est.get(n) or 0)) if ranks else run
        if ranks:
            said = ", ".join(f"{n} in {est[n]} s{_NO_CLOCK if index.clusters[n].robot else ''}" if n in est
                             else f"{n} unknown" for n in ranked)  # fmt: skip
            notes.append(f"clusters ranked by their start estimates (sbatch --test-only): {said}")
        out.extend(ranked)
    return out


#: Said of a robot login's start estimate: its start time was read against this machine's clock.
_NO_CLOCK = " (no clock correction: a robot login's estimate, read against this machine's clock)"


def lane_runs(lanes: Sequence[str], policy: Policy) -> list[tuple[bool, list[str]]]:
    """``lanes`` cut into runs: each run of two or more consecutive clusters (``True``: the
    start estimates rank it), and every other lane on its own (``False``)."""
    runs: list[tuple[bool, list[str]]] = []
    for slurm, group in groupby(lanes, key=lambda lane: policy.lane_kind(lane) is LaneKind.SLURM):
        names = list(group)
        runs.extend([(True, names)] if slurm and len(names) > 1 else [(False, [n]) for n in names])
    return runs


def _vm_misfit(job: Job, intent: Intent, room: VmCapacity, margin_gb: int) -> str | None:
    """Why a trivial op does not fit the shared VM (P2), or ``None`` when it fits or the size is unknown.

    It fits when the intent's memory, once per ``--count`` copy (the copies run side
    by side on the VM), is within the VM's memory, and its footprint, once per copy,
    plus ``margin_gb`` is within the VM's free disk: the cheap CPU machines exist
    because the shared VM once stalled the whole fleet on disk pressure."""
    # A copy of a fan-out (count 1, task i of N) is walked alone but runs beside the other
    # N - 1: it fits only where all N fit, as the plan of the whole --count said.  A sweep's
    # tasks run at most K at once (--sweep-parallel K): min(N, K) of them, a task's plan too.
    copies = side_by_side(job)
    each = f" ({copies} copies side by side)" if copies > 1 else ""
    mem = intent.mem_gb * copies
    if room.mem_gb is not None and mem > room.mem_gb:
        return f"P2: {intent.name} needs {mem:g} GB of memory{each}; the shared VM has {room.mem_gb:g} GB"
    disk = job.footprint_gb * copies
    if room.free_disk_gb is not None and disk + margin_gb > room.free_disk_gb:
        return (
            f"P2: footprint {disk:g} GB{each} + {margin_gb} GB margin > {room.free_disk_gb:g} GB free disk "
            f"on the shared VM"
        )
    return None


def _applies(lane: str, intent: Intent, index: PolicyIndex) -> bool:
    kind = index.lane_kinds.get(lane)
    if intent.resource is Resource.CPU:
        return kind is not LaneKind.SLURM
    return kind is not LaneKind.VM


# --- rungs per lane -----------------------------------------------------------------------


def _lane_rungs(
    lane: str,
    job: Job,
    intent: Intent,
    facts: Facts,
    grants: QosGrants,
    index: PolicyIndex,
    rungs: list[Rung],
    skipped: list[Skip],
) -> None:
    down = facts.lane_down(lane)
    if down is not None:
        skipped.append(Skip(lane, SkipCode.LANE_UNAVAILABLE, down))
        return
    kind = index.lane_kinds.get(lane)
    if kind is LaneKind.VM:
        why = "P2: trivial op stays on the shared VM" if job.pin is None else "P10: pinned to the VM"
        code = RungWhy.TRIVIAL_ON_VM if job.pin is None else RungWhy.PINNED
        rungs.append(Rung(lane, LaneKind.VM, Provisioning.LOCAL, why, vcpus=intent.vcpus, why=code))
    elif kind is LaneKind.SLURM:
        slurm_rungs(index.clusters[lane], job, intent, facts, grants, index, rungs, skipped)
    elif kind is LaneKind.GCP:
        gcp_rungs(job, intent, facts, index, rungs, skipped)
    elif kind is LaneKind.RUNPOD:
        if intent.resource is Resource.CPU:
            runpod_cpu_rungs(job, intent, facts, index, rungs, skipped)
        else:
            runpod_gpu_rungs(job, intent, facts, index, rungs, skipped)
