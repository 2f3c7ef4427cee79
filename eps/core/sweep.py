"""Sweeps: one dispatch of N independent tasks of the same job (``--sweep N``).

Task i (0..N-1) runs with ``EPS_TASK_INDEX=i`` and ``EPS_TASK_COUNT=N`` and is one job of
the intent's size: ``gpu-1 --sweep 6`` is six 1-GPU jobs.  That keeps P5, which forbids
splitting *one* GPU job across single-GPU machines; a sweep is N jobs, never one job split.
``--sweep-parallel K`` caps the tasks running at once (on SLURM, the array's ``%K``).

Here, pure: the checks every front door shares (:func:`check_sweep`, one line each, a
stable code), what the plan says of a sweep (:func:`sweep_note`), and the ``--array``
value of the tasks one SLURM submission holds (:func:`array_spec`, :func:`array_indices`),
how far its tasks are (:func:`task_progress`, :func:`progress_line`).
The design, and what is not built yet: ``docs/design/sweeps.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from eps.core.model import Job, JobError, Resource

TYPE_CHECKING = False  # typing itself is not on the plan's fast path
if TYPE_CHECKING:
    from eps.core.states import DispatchState

__all__ = ["MAX_SWEEP_TASKS", "array_indices", "array_spec", "at_once", "check_sweep", "progress_line",
           "side_by_side", "sweep_note", "sweep_parallel_value", "sweep_value", "task_progress"]

#: The most tasks one sweep may have.  SLURM's default ``MaxArraySize`` is 1001 (indices
#: 0..1000; slurm.conf(5), "MaxArraySize"), so a sweep of at most 1000 is always one array.
MAX_SWEEP_TASKS = 1000


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def sweep_value(value: object) -> int:
    """``value`` as a sweep's number of tasks; :class:`ValueError` (one line) unless a whole number 1..1000."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SWEEP_TASKS:
        raise ValueError(f"sweep must be a whole number of tasks 1..{MAX_SWEEP_TASKS}, got {value!r}")
    return value


def sweep_parallel_value(value: object) -> int:
    """``value`` as the most tasks at once; :class:`ValueError` (one line) unless a whole number >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"sweep parallel must be a whole number >= 1, got {value!r}")
    return value


def check_sweep(job: Job, resource: Resource) -> None:
    """Refuse a sweep that cannot be run as asked (:class:`JobError`, one line):
    ``bad_sweep`` (not a whole number 1..MAX_SWEEP_TASKS), ``bad_sweep_parallel`` (not a
    whole number 1..N, or given without a sweep), ``sweep_and_count`` (a CPU ``--count``
    above 1 with a sweep: both fan a CPU job out into machines, one task index cannot name
    both; a GPU ``--count`` only grows the machine, P5, and is fine)."""
    n = job.sweep
    try:
        sweep_value(n)
    except ValueError as exc:
        raise JobError("bad_sweep", str(exc), job, field="sweep") from None
    if job.sweep_parallel is not None:
        try:
            k = sweep_parallel_value(job.sweep_parallel)
        except ValueError as exc:
            raise JobError("bad_sweep_parallel", str(exc), job, field="sweep_parallel") from None
        n = n if n > 1 else job.task_count  # a task of a sweep keeps its sweep's K
        if n == 1 or k > n:
            said = "needs a sweep (--sweep N with N > 1)" if n == 1 else f"is more than the sweep's {n} tasks"
            raise JobError("bad_sweep_parallel", f"sweep parallel {k} {said}", job, field="sweep_parallel")
    if n > 1 and resource is Resource.CPU and job.count > 1:
        raise JobError("sweep_and_count", f"--sweep {n} with --count {job.count}: both fan a CPU job out into "
                       f"machines; give one (--sweep {n * job.count} runs that many tasks)", job)  # fmt: skip


def at_once(job: Job) -> int:
    """How many of the sweep's tasks may run at once: ``sweep_parallel``, else all of them."""
    return job.sweep if job.sweep_parallel is None else min(job.sweep_parallel, job.sweep)


def side_by_side(job: Job) -> int:
    """How many of the job's copies run beside each other (the shared VM's fit counts each, P2):
    a sweep's tasks, at most K at once (``--sweep-parallel K``, else all N); a task of a sweep
    (it keeps its sweep's K) beside its K - 1 siblings; every copy of a ``--count``."""
    if job.sweep > 1:
        return at_once(job)
    if job.task_count > 1 and job.sweep_parallel is not None:
        return min(job.sweep_parallel, job.task_count)
    return max(job.count, job.task_count)


def sweep_note(job: Job, intent: str, clusters: Sequence[str]) -> str | None:
    """What the plan says of a sweep: N tasks of ``intent``, each walking these rungs, at most
    K at once, and on each SLURM lane of its rungs (``clusters``) one ``sbatch --array``;
    ``None`` for no sweep."""
    n = job.sweep
    if n <= 1:
        return None
    k = at_once(job)
    limit = "all at once" if k == n else f"at most {k} at once"
    said = (f"sweep: {n} tasks of {intent} (EPS_TASK_INDEX 0..{n - 1}), each one {intent} job on a machine or "
            f"allocation of its own size, not a split of one job (P5); {limit}; each walks these rungs")  # fmt: skip
    if clusters:
        spec = array_spec(range(n), None if k == n else k)
        said += f"; on {', '.join(dict.fromkeys(clusters))} all {n} are one sbatch --array={spec}"
    return said


def array_spec(indices: Iterable[int], limit: int | None = None) -> str:
    """The ``--array`` value of ``indices`` (any order, no duplicates): runs of consecutive
    indices as ``A-B``, the runs joined by ``,``, then ``%limit`` when given (the most tasks
    running at once).  ``array_spec(range(6), 2) == "0-5%2"``; ``array_spec([1, 3, 4, 5])
    == "1,3-5"``.  :class:`ValueError` for no index, a negative or repeated one, or a limit
    below 1."""
    values = sorted(indices)
    if not values:
        raise ValueError("an array needs at least one task index")
    if values[0] < 0 or any(not _whole(v) for v in values):
        raise ValueError(f"array task indices are whole numbers >= 0, got {values!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"array task indices repeat: {values!r}")
    runs: list[str] = []
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    if limit is not None:
        if not _whole(limit) or limit < 1:
            raise ValueError(f"an array's limit of tasks at once is a whole number >= 1, got {limit!r}")
        return ",".join(runs) + f"%{limit}"
    return ",".join(runs)


def array_indices(spec: str) -> tuple[tuple[int, ...], int | None]:
    """The indices and the limit an ``--array`` value of :func:`array_spec`'s form names
    (``"1,3-5%2"`` -> ``((1, 3, 4, 5), 2)``).  :class:`ValueError` for anything else."""
    body, _, limit_text = spec.partition("%")
    limit = None
    if limit_text:
        if not limit_text.isdigit() or int(limit_text) < 1:
            raise ValueError(f"bad array limit in {spec!r}")
        limit = int(limit_text)
    out: list[int] = []
    for part in body.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"bad array range {part!r} in {spec!r}")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"bad array range {part!r} in {spec!r}")
        out.extend(range(first, last + 1))
    return tuple(out), limit


def task_progress(tasks: Iterable[tuple[DispatchState, str]]) -> dict[str, int]:
    """How far a sweep's tasks are, from each task's state and result word
    (:func:`eps.core.ends.result_word`): ``done`` (succeeded), ``failed`` (ended any
    other way, or nothing started), ``running``, ``pending`` (queued, walking or waiting),
    and their ``total``."""
    from eps.core.states import SETTLED_DISPATCH_STATES, DispatchState  # not on the plan's fast path

    counts = {"total": 0, "done": 0, "failed": 0, "running": 0, "pending": 0}
    for state, result in tasks:
        counts["total"] += 1
        if result == "succeeded":
            counts["done"] += 1
        elif state is DispatchState.STARTED:
            counts["running"] += 1
        elif state in SETTLED_DISPATCH_STATES:
            counts["failed"] += 1
        else:
            counts["pending"] += 1
    return counts


def progress_line(counts: dict[str, int]) -> str:
    """``3/6 done, 2 running, 1 pending`` (the parts that are not 0, after the done count)."""
    rest = [f"{counts[k]} {k}" for k in ("running", "pending", "failed") if counts[k]]
    return ", ".join([f"{counts['done']}/{counts['total']} done", *rest])
