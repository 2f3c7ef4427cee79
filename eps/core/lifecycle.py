"""A job's life after it started: the time limit it runs under, the wrapper spec it runs
as, and the exit status ``eps wait`` leaves with (pure).  What its end is called, the
status words, is :mod:`eps.core.ends`.
"""

from __future__ import annotations

from eps.core.ends import JobEnd, result_word
from eps.core.jobscript import JobSpec
from eps.core.model import Job, LaneKind, Policy, Provisioning, Rung, evolve
from eps.core.stall import STALL_EXIT, StallPlan, poll_s
from eps.core.states import DispatchState
from eps.core.storage import StoragePlan, inputs_of, parse_url, place
from eps.core.tables import (
    HEALING,
    INTENTS,
    JOB_LIFECYCLE,
    SBATCH_TIME_SLACK_S,
    JobLifecycle,
    job_time_limit_s,
    lane_time_limit_s,
)

_DEFAULT_MAX_TIME_LIMIT_S: int = Policy._field_defaults["max_time_limit_s"]


def time_limit_s(job: Job, lifecycle: JobLifecycle = JOB_LIFECYCLE) -> int:
    """The limit the job is stopped at: ``--time-limit`` (or the rung's, :func:`on_rung`),
    else the duration times the margin.  A job of unknown length that no rung limited
    (a lane's own path with no rung at hand) gets the default ``[jobs] max_time_limit``."""
    if job.time_limit_s is not None:
        return job.time_limit_s
    if job.duration_s is None:
        return _DEFAULT_MAX_TIME_LIMIT_S
    return max(60, job_time_limit_s(job.duration_s, lifecycle))


def on_rung(job: Job, rung: Rung) -> Job:
    """``job`` as it runs on ``rung``: a job of unknown length without ``--time-limit`` takes
    the rung's limit (the lane's maximum, decided by ``plan()``); any other job is unchanged."""
    if job.time_limit_s is not None or rung.time_limit_s is None:
        return job
    return evolve(job, time_limit_s=rung.time_limit_s)


def at_lane_maximum(job: Job, kind: LaneKind, provisioning: Provisioning, max_time_limit_s: int) -> Job:
    """``job`` limited as :func:`on_rung` would, when the rung itself is not at hand (a resume
    launching on a machine the dead walk made: the lane knows its kind and provisioning)."""
    if job.time_limit_s is not None or job.duration_s is not None:
        return job
    return evolve(job, time_limit_s=lane_time_limit_s(kind, provisioning, max_time_limit_s))


def batch_time_s(job: Job, lifecycle: JobLifecycle = JOB_LIFECYCLE) -> int:
    """What SLURM is told (``--time``): the wrapper's own limit plus its kill grace and a
    minute, so the wrapper stops the job first and records ``timed_out`` itself."""
    return time_limit_s(job, lifecycle) + lifecycle.kill_grace_s + SBATCH_TIME_SLACK_S


def job_spec(job: Job, dispatch: str) -> JobSpec:
    """The wrapper spec of ``job`` run as ``dispatch``."""
    return JobSpec(
        command=job.command,
        dispatch_id=dispatch,
        time_limit_s=time_limit_s(job),
        setup=job.setup,
        env_names=job.env_names,
        task_index=job.task_index,
        task_count=job.task_count,
        restart=job.restart,
        storage=storage_plan(job, dispatch),
        stall=stall_plan(job),
    )


def with_stall_watch(job: Job, after_s: int, on_stall: str) -> Job:
    """``job`` with the config's stall rule (``[jobs] stall_after_s``, ``on_stall``) where it
    says nothing itself: fixed at submission, so every relaunch and revived supervisor keeps it."""
    return evolve(job, stall_after_s=after_s if job.stall_after_s is None else job.stall_after_s,
                  on_stall=on_stall if job.on_stall is None else job.on_stall)  # fmt: skip


def stall_plan(job: Job) -> StallPlan | None:
    """The wrapper's stall watch (:mod:`eps.core.stall`): ``None`` when ``stall_after`` is 0.
    The job's values are fixed at submission from the config (the shell fills them in); a job
    without them has the table's.  A GPU job (any intent but a CPU one, or a gradient fit)
    reads its GPUs."""
    after = HEALING.stall_after_s if job.stall_after_s is None else job.stall_after_s
    if after <= 0:
        return None
    on = HEALING.on_stall if job.on_stall is None else job.on_stall
    cpu = any(i.name == job.intent and i.gpus == 0 for i in INTENTS) and not job.gradient_fit
    return StallPlan(after, stop=on == "stop", gpu=not cpu, poll_s=poll_s(after))


def storage_plan(job: Job, dispatch: str) -> StoragePlan | None:
    """What the job's machine does with storage (:mod:`eps.core.storage`): ``None`` without."""
    if not job.storage and not job.inputs:
        return None
    where = place(parse_url(job.storage), dispatch, job.task_index, job.restart) if job.storage else None
    every = HEALING.sync_every_s if job.sync_every_s is None else job.sync_every_s
    return StoragePlan(where, every, restore=job.restart > 0, inputs=inputs_of(job.inputs))


def exit_status(state: DispatchState, job_status: str | None, exit_code: int | None) -> int:
    """The exit status ``eps wait`` / ``execute --wait`` leave with: the job's own code
    (128+N when a signal N killed it); 124 for a time limit; 1 when nothing started or the
    code is unknown; 130 if cancelled (by ``eps cancel``)."""
    word = result_word(state, job_status, exit_code)
    if word == "timed out":
        return 124
    if word == "cancelled":
        return 130
    if job_status == JobEnd.STALLED and state is DispatchState.ENDED:
        return STALL_EXIT
    if exit_code is not None and state is DispatchState.ENDED:
        return exit_code if 0 <= exit_code <= 255 else 1
    return 1
