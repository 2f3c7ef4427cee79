"""Walking in this process (``[jobs] supervise = "inline"``): ``eps execute`` and ``eps
execute --resume`` for every door when no supervisor walks the dispatch.  The same checks as
:mod:`eps.shell.service.operations` (every input error first, nothing recorded), then the
walk here; a resumed ``--count``/``--sweep`` parent walks its copies as the supervisor does."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from eps.core.events import Event
from eps.core.model import CapacitySnapshot, Job, JobError, QosGrants
from eps.shell.service.context import Ctx
from eps.shell.service.operations import Prepared, new_dispatch_id, prepare, unused

if TYPE_CHECKING:
    from eps.shell.request.job import JobRequest
    from eps.shell.run.walker import Walker, WalkResult

__all__ = ["refuse_inline", "run_here", "walk_here"]


def refuse_inline(job: Job | None) -> None:
    """What a walk in this process cannot do: wait for capacity (that needs a supervisor)."""
    if job is not None and job.retry is not None and "no-capacity" in job.retry:
        raise JobError("usage", 'waiting for capacity (--retry no-capacity) needs a supervisor '
                       '([jobs] supervise = "detached", the default)', None)  # fmt: skip


def walk_here(ctx: Ctx, ready: Prepared | None, dispatch: str, snapshot: CapacitySnapshot, grants: QosGrants,
              *, grants_given: bool) -> list[WalkResult]:  # fmt: skip
    """Walk ``ready`` as ``dispatch`` in this process (``[jobs] supervise = "inline"``), or
    with ``ready`` ``None`` resume the recorded ``dispatch``: reconcile, gather the grants and
    what is down here, walk.  Its events go to ``ctx.events``; the results of each job."""
    from eps.shell.lanes.jobs import JobFiles, drop_env_values, write_env_values
    from eps.shell.run.reconcile import Reconciler
    from eps.shell.run.supervisor import gather
    from eps.shell.run.walker import Walker

    settings, ledger, lanes = ctx.settings, ctx.ledger, ctx.lanes
    resumed = [] if ready is not None else [dispatch, *(c.id for c in ledger.children(dispatch))]
    Reconciler(ledger, lanes, ctx.events).reconcile(leave=resumed)  # a resume settles its own, under their locks
    job = None if ready is None else ready.job
    snapshot, grants = gather(lanes, ledger, job, snapshot, grants, grants_given=grants_given)
    walker = Walker(settings, ledger, lanes, ctx.events, grants=grants, snapshot=snapshot,
                    files=JobFiles() if ready is None else ready.files)  # fmt: skip
    if ready is not None:
        write_env_values(settings.state_dir, dispatch, ready.values)  # a resume ships them again; mode 0600
        if ready.inputs:
            ctx.events.emit(Event.INPUTS, dispatch=dispatch, inputs=list(ready.inputs))
    if ready is not None:
        results = walker.execute(ready.job, dispatch)
    else:
        results = _resume_copies(ctx, walker, dispatch) if ledger.children(dispatch) else [walker.resume(dispatch)]
    if not any(r.handle is not None for r in results):
        drop_env_values(settings.state_dir, dispatch)
    return results


def _resume_copies(ctx: Ctx, walker: Walker, parent: str) -> list[WalkResult]:
    """``--resume`` of a ``--count``/``--sweep`` parent in this process: its copies that a walk
    still owes (the pure :func:`eps.core.fanout.copies_owed`: walking, interrupted, preempted)
    walked again as the supervisor walks them (:meth:`Walker.walk_copies`); the parent itself
    is never walked as a job."""
    from eps.core.fanout import copies_owed
    from eps.shell.run.walker import WalkResult

    ctx.ledger.acquire(parent)  # another eps walking it: refused, as a single dispatch's resume is
    row = ctx.ledger.dispatch(parent)
    owed = copies_owed(
        parent, None if row is None else row.state, [(c.id, c.state) for c in ctx.ledger.children(parent)]
    )
    if owed.refusal is not None:
        ctx.ledger.release(parent)
        return [WalkResult(parent, None, failure=owed.refusal)]
    return walker.walk_copies(parent, list(owed.copies))


def run_here(ctx: Ctx, request: JobRequest, dispatch_id: str | None, snapshot: CapacitySnapshot | None,
             grants: QosGrants | None, *, before: Callable[[], object] | None = None,
             ) -> tuple[str, list[WalkResult]]:  # fmt: skip
    """``execute`` in this process (``[jobs] supervise = "inline"``), for every door: every
    input error first, then the walk; the dispatch id and each job's result.  ``before`` runs
    once the inputs are checked, just before the walk (the CLI's live view)."""
    from eps.core.tables import DEFAULT_GRANTS

    refuse_inline(request.job)
    unused(ctx, dispatch_id)
    snap, granted = snapshot or CapacitySnapshot(), grants or DEFAULT_GRANTS
    ready = prepare(ctx, request, dispatch_id, snap, granted)
    dispatch = dispatch_id or new_dispatch_id()
    if before is not None:
        before()
    return dispatch, walk_here(ctx, ready, dispatch, snap, granted, grants_given=grants is not None)
