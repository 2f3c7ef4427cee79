"""A sweep's array on a SLURM tier: when its park clock runs, and what a move takes.

The tasks of a sweep on a SLURM tier are one array (docs/design/sweeps.md).  Its pending
tasks walk the ladder together: the tier's park clock runs while some task is pending for a
reason of the cluster (priority, resources, a QoS cap), not while the only thing holding
tasks back is the array's own ``%K`` (:data:`OWN_LIMIT`).  After the tier's cap the pending
tasks are cancelled (``scancel --state=PENDING J``: the running ones stay) and those that
were still pending go on to the next tier as one array, whose ``%`` is what is left of K
beside the tasks still running.  Here, pure: those decisions, each a small function, on
plain values (task indices, states, attempt records); the shell (``eps/shell/run/sweeps.py``)
reads the ledger and the lane, asks, and carries the answer out:

- which tasks an array takes (:func:`not_yet_walked`), and which a resume may find parked on
  a dead walk's array (:func:`walk_owed`, then :func:`parked_array`), and where those are now
  (:func:`found_parked`: still pending, moved by the dead walk's cancel, or started), and
  which it had moved and not yet submitted again (:func:`moved_array`);
- whether the core's next step is a SLURM tier the tasks go to as one array (:func:`array_rung`);
- at each poll, which of the array's pending tasks are still pending (they move down the
  ladder together) and which left pending (:func:`after_poll`); after the cancel, which
  moved and which started meanwhile (:func:`after_cancel`); the moved array's ``%``
  (:func:`running_tasks`, :func:`moved_at_once`);
- whether the sweep was cancelled under the walk (:func:`sweep_cancelled`), and which arrays
  ``eps cancel`` of a sweep cancels, once each (:func:`arrays_to_cancel`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from attrs import frozen

from eps.core.model import LaneKind, Rung
from eps.core.states import AttemptState, DispatchState, Outcome

TYPE_CHECKING = False
if TYPE_CHECKING:
    from eps.core.outcome import AttemptRecord
    from eps.core.walk import Step

#: SLURM's pending reason for a task its own array's ``%K`` holds back (squeue(1),
#: "JOB REASON CODES"): not a reason of the cluster, so no reason to move on.
OWN_LIMIT = "JobArrayTaskLimit"

#: A task's state after ``scancel --state=PENDING`` that says it was cancelled before it
#: started (squeue forgot it, or sacct says CANCELLED): it moves to the next tier.
_LEFT_UNSTARTED = frozenset({"CANCELLED", "GONE"})

_TASK = re.compile(r"([0-9]+)_([0-9]+)")


def task_index(job_id: str, array_id: str) -> int | None:
    """Task i of array ``array_id`` when ``job_id`` is ``<array_id>_<i>``, else ``None``."""
    m = _TASK.fullmatch(job_id)
    return int(m.group(2)) if m is not None and m.group(1) == array_id else None


def not_yet_walked(tasks: Mapping[int, tuple[DispatchState, int]]) -> tuple[int, ...]:
    """The tasks (task index -> its row's state and how many attempts it has on record) an
    array takes: those still walking with no attempt yet, in the order given.  A task with an
    attempt is walked from it (resumed, or on its own after a refused array)."""
    return tuple(i for i, (state, tried) in tasks.items() if state is DispatchState.WALKING and not tried)


#: Task states whose walk is still owed when a resume looks for a dead walk's array.
_OWED = frozenset({DispatchState.WALKING, DispatchState.INTERRUPTED})


def walk_owed(states: Mapping[int, DispatchState]) -> tuple[int, ...]:
    """The tasks (task index -> its row's state) a resume may find parked on a dead walk's
    array: those whose walk is still owed (walking, or interrupted), in the order given."""
    return tuple(i for i, state in states.items() if state in _OWED)


def array_rung(step: Step) -> Rung | None:
    """The SLURM tier the sweep's tasks go to as ONE array when the core's next step starts
    them on it; ``None`` when it does not (a paid lane: the ladder is spent, or a stop): the
    tasks are then walked one by one, each from its attempts on record."""
    from eps.core.walk import Start  # not on the plan's fast path

    return step.rung if isinstance(step, Start) and step.rung.kind is LaneKind.SLURM else None


@frozen
class AfterPoll:
    """What one poll of the array says of the tasks that were pending: ``pending`` still wait
    (they move down the ladder together when the tier's cap passes), ``started`` left pending
    (running, already over, or no longer listed: each is recorded started where it is)."""

    pending: tuple[int, ...]
    started: tuple[int, ...]


def after_poll(pending: Iterable[int], states: Mapping[int, str]) -> AfterPoll:
    """Split the array's pending tasks (in the order given) by the state one poll lists for
    each (task index -> SLURM state); a task the poll does not list has left pending."""
    still: list[int] = []
    left: list[int] = []
    for i in dict.fromkeys(pending):
        (still if states.get(i) == "PENDING" else left).append(i)
    return AfterPoll(tuple(still), tuple(left))


def running_tasks(states: Iterable[str]) -> int:
    """How many of the sweep's listed tasks hold a place of its ``%K``: every one not PENDING."""
    return sum(s != "PENDING" for s in states)


def sweep_cancelled(states: Iterable[DispatchState | None]) -> bool:
    """Whether the walk of the sweep's array stops because it was cancelled: the parent's or a
    pending task's row is gone (``None``) or cancelled (``eps cancel`` releases what is live)."""
    return any(s is None or s is DispatchState.CANCELLED for s in states)


#: Attempt states whose ``J_i`` may still be live on the cluster (an array ``eps cancel`` reaches).
_LIVE = frozenset({AttemptState.PENDING, AttemptState.RUNNING, AttemptState.SUBMITTED})


def arrays_to_cancel(tasks: Iterable[tuple[str | None, Sequence[AttemptRecord]]]) -> tuple[tuple[str, str, str], ...]:
    """The arrays ``eps cancel`` of a sweep cancels, once each, in the order first met: for each
    task (its parent sweep, ``None`` for a row of no sweep, and its attempts), each live attempt
    on a SLURM tier whose handle is ``J_i`` names array J; ``(lane, sweep, J)``."""
    arrays: dict[tuple[str, str, str], None] = {}
    for parent, records in tasks:
        if parent is None:
            continue
        for a in records:
            if a.state in _LIVE and a.rung.kind is LaneKind.SLURM and a.handle and (m := _TASK.fullmatch(a.handle)):
                arrays[(a.rung.lane, parent, m.group(1))] = None
    return tuple(arrays)


def clock_runs(reasons: Iterable[str | None]) -> bool:
    """Whether the tier's park clock runs, given the pending reasons of the array's pending
    tasks: yes while one of them waits for the cluster (a reason other than the array's own
    ``%K``; a task not yet looked at, reason ``None``, waits for the cluster too)."""
    return any(r != OWN_LIMIT for r in reasons)


def cluster_reason(reasons: Iterable[str | None]) -> str | None:
    """The pending reason of the cluster the array waits on (the first that is not its own
    ``%K``), for the park decision and the log."""
    return next((r for r in reasons if r is not None and r != OWN_LIMIT), None)


def moved_at_once(k: int | None, running: int) -> int | None:
    """The ``%`` of the array the moved tasks become: K minus the sweep's tasks still running,
    at least 1 (a robot login has no scontrol to raise it later); no cap when K is none."""
    return None if k is None else max(1, k - running)


@frozen
class AfterCancel:
    """What ``scancel --state=PENDING J`` did to the tasks that were pending: ``moved`` left
    unstarted (they go to the next tier), ``started`` began between the poll and the cancel
    (they stay where they are, as one job does)."""

    moved: tuple[int, ...]
    started: tuple[int, ...]


def after_cancel(pending: Iterable[int], states: Mapping[int, str]) -> AfterCancel | None:
    """Split the tasks that were pending by the state each is in now (``GONE``: neither squeue
    nor sacct knows it); ``None`` while one is still PENDING (the cancel is not confirmed yet)."""
    moved: list[int] = []
    started: list[int] = []
    for i in sorted(set(pending)):
        state = states.get(i, "GONE")
        if state == "PENDING":
            return None
        (moved if state in _LEFT_UNSTARTED else started).append(i)
    return AfterCancel(tuple(moved), tuple(started))


@frozen
class FoundParked:
    """Where the tasks a dead walk left parked on an array are when a resume looks: ``pending``
    still wait there (the resumed walk parks on the array again), ``moved`` left unstarted
    (the dead walk's move cancelled them, then it died before the next tier's sbatch: they go
    on to that tier as one array), ``started`` began meanwhile (each stays where it is)."""

    pending: tuple[int, ...]
    moved: tuple[int, ...]
    started: tuple[int, ...]


def found_parked(parked: Iterable[int], states: Mapping[int, str]) -> FoundParked:
    """Split the tasks a dead walk left parked (task indices) by the state each is in now,
    squeue's or else sacct's (``GONE``: neither knows it, as after a cancel)."""
    split: dict[str, list[int]] = {"pending": [], "moved": [], "started": []}
    for i in sorted(set(parked)):
        state = states.get(i, "GONE")
        split["pending" if state == "PENDING" else "moved" if state in _LEFT_UNSTARTED else "started"].append(i)
    return FoundParked(tuple(split["pending"]), tuple(split["moved"]), tuple(split["started"]))


def moved_array(attempts: Mapping[int, Sequence[AttemptRecord]]) -> tuple[int, ...]:
    """The tasks (task index -> its attempts, oldest first) a dead walk had moved off one
    array and not yet submitted on the next tier (it died between the move and the sbatch):
    each one's newest attempt advanced by a park timeout as ``J_i`` (its own index i) of one
    array J on one SLURM tier (but for attempts on the next tier recorded and never submitted),
    and none of its attempts live.  The resumed walk sends them on
    to the next tier as ONE array.  The largest such group (ties: the newest array); ``()``: none."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, records in attempts.items():
        tried = [a for a in records if a.outcome != Outcome.NOT_SUBMITTED]  # the next tier's, the sbatch not run
        if not tried or any(a.state in _LIVE for a in records):
            continue
        a = tried[-1]
        m = _TASK.fullmatch(a.handle or "")
        if a.state is not AttemptState.ADVANCED or a.outcome != Outcome.PARK_TIMEOUT or m is None:
            continue
        if a.rung.kind is LaneKind.SLURM and int(m.group(2)) == i:
            groups.setdefault((m.group(1), a.rung.key), []).append(i)
    if not groups:
        return ()
    _, tasks = max(groups.items(), key=lambda g: (len(g[1]), int(g[0][0])))
    return tuple(sorted(tasks))


@frozen
class ParkedArray:
    """The array a dead walk left some of a sweep's tasks parked on: its job id, and each
    parked task's index with the attempt (its ``id``) that holds ``J_i``."""

    array_id: str
    attempts: Mapping[int, int]


def parked_array(attempts: Mapping[int, Sequence[AttemptRecord]]) -> ParkedArray | None:
    """The array the sweep's tasks (task index -> its attempts, oldest first) are parked on
    when their walk died: each such task's newest attempt is pending on a SLURM tier as
    ``J_i`` (its own index i) of one array J, every one on the same tier.  The resumed walk
    parks on J as one and moves its pending tasks as one array; a task parked on no array,
    or on another one, is walked on its own.  ``None``: no task is parked on an array."""
    groups: dict[tuple[str, str], dict[int, int]] = {}
    for i, records in attempts.items():
        if not records:
            continue
        a = records[-1]
        m = _TASK.fullmatch(a.handle or "")
        if a.state is not AttemptState.PENDING or a.rung.kind is not LaneKind.SLURM or m is None:
            continue
        if int(m.group(2)) != i:
            continue
        groups.setdefault((m.group(1), a.rung.key), {})[i] = a.id
    if not groups:
        return None
    (array, _rung), tasks = max(groups.items(), key=lambda g: (len(g[1]), int(g[0][0])))
    return ParkedArray(array, dict(sorted(tasks.items())))
