"""A sweep's tasks on a SLURM rung: one ``sbatch --array`` (docs/design/sweeps.md).

The walker records a sweep as a parent and N task rows (the ``--count`` shape).  When the
core's first step for a task is a SLURM tier, every task still to walk is submitted there
as one array (the cluster's rule 4: never sbatch in a loop), ``%K`` from
``--sweep-parallel``: each task's attempt is recorded before the sbatch, then gets its
own handle ``J_i`` and is held where it is (as a pinned job is, P10), so the supervisor
follows each task to its end, and status, wait, logs and cancel work per task.  A sweep
whose first rung is a paid lane, or whose array the cluster refused, is walked task by
task by the caller (the refused attempt is on record: each task moves on from it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from eps.core.events import Event
from eps.core.model import CapacitySnapshot, Job, LaneKind, QosGrants, evolve
from eps.core.outcome import Handle
from eps.core.states import AttemptState, DispatchState, Outcome
from eps.core.walk import Begin, Start, Walk, next_step

if TYPE_CHECKING:
    from eps.shell.config.settings import Settings
    from eps.shell.lanes import Lanes
    from eps.shell.lanes.jobs import JobFiles
    from eps.shell.lanes.slurm.lane import SlurmLane
    from eps.shell.state.events import Events
    from eps.shell.state.ledger import Ledger


class Walking(Protocol):
    """What of the walker an array submission uses."""

    settings: Settings
    ledger: Ledger
    lanes: Lanes
    reporter: Events
    grants: QosGrants
    snapshot: CapacitySnapshot
    files: JobFiles

    def select_files(self, dispatch: str, parent: str | None, job: Job) -> object | None: ...


def submit_array(walker: Walking, parent: str, children: list[str]) -> tuple[list[tuple[str, Handle]], list[str]]:
    """The tasks one array took (each with its handle ``J_i``), and the ids left for the
    caller to walk."""
    ledger = walker.ledger
    top = ledger.dispatch(parent)
    rows = [r for r in (ledger.dispatch(c) for c in children) if r is not None]
    fresh = [r for r in rows if r.state is DispatchState.WALKING and not ledger.attempts(r.id)]
    if top is None or top.job.sweep <= 1 or not fresh:
        return [], children
    first = fresh[0]
    if walker.select_files(first.id, parent, first.job) is not None:
        return [], children  # each task fails the same way, on its own
    walk = Walk(first.job, walker.snapshot, walker.grants)
    _, step = next_step(walk, Begin(), policy=walker.settings.policy)
    if not isinstance(step, Start) or step.rung.kind is not LaneKind.SLURM:
        return [], children
    rung = step.rung
    lane: SlurmLane = walker.lanes.for_rung(rung)  # type: ignore[assignment]
    name = lane.job_name(parent)
    attempts = {r.id: ledger.begin_attempt(r.id, rung, name) for r in fresh}  # before the sbatch
    tasks = tuple(r.job.task_index for r in fresh)
    walker.reporter.emit(
        Event.ATTEMPT, dispatch=parent, rung=rung.key, qos=rung.qos,
        reason={"code": rung.why.value if rung.why else None, "text": rung.reason},
        price_per_hour=rung.price_per_hour,
    )  # fmt: skip
    submitted = lane.start_array(top.job, rung, parent, tasks, walker.files, at_once=top.job.sweep_parallel)
    if not isinstance(submitted.value_or(None), Handle):
        failure = submitted.failure()
        for a in attempts.values():
            ledger.update_attempt(a.id, AttemptState.FAILED, outcome=failure.kind, reason=failure.message)
        walker.reporter.emit(
            Event.FAILED, dispatch=parent, rung=rung.key, kind=failure.kind.value, code=failure.code,
            message=failure.message, reason={"code": failure.kind.value, "text": failure.message},
        )  # fmt: skip
        return [], children
    array = submitted.unwrap()
    results = []
    for r in fresh:
        handle = evolve(array, id=f"{array.id}_{r.job.task_index}")
        ledger.update_attempt(attempts[r.id].id, AttemptState.PENDING, handle=handle.id, outcome=Outcome.HELD)
        ledger.set_dispatch(r.id, DispatchState.HELD, handle=handle)
        walker.reporter.emit(Event.SUBMITTED, dispatch=r.id, rung=rung.key, qos=rung.qos, id=handle.id)
        results.append((r.id, handle))
    taken = {r.id for r in fresh}
    return results, [c for c in children if c not in taken]
