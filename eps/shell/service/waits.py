"""The bounded waits of every front door: :func:`wait` (one call, at most
:data:`~eps.core.contract.WAIT_MAX_S`) and :func:`wait_until` (slices of it, until the
dispatch ended or the caller's bound passed), read from the ledger under a supervisor and
followed in this process inline.  No signal handlers: this runs in any thread (the MCP
server's)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from eps.core.contract import WAIT_DEFAULT_S, WAIT_MAX_S
from eps.shell.service.context import LOOK_S, doc

if TYPE_CHECKING:
    from eps.shell.service.context import Ctx
    from eps.shell.state.ledger import DispatchRow


def wait(ctx: Ctx, dispatch: str, *, timeout_s: float | None = WAIT_DEFAULT_S, landed: bool = False,
         follow: Callable[[DispatchRow], None] | None = None, capped: bool = True,
         clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:  # fmt: skip
    """The ``wait`` document: wait at most ``timeout_s`` (capped at :data:`WAIT_MAX_S`, unless
    not ``capped``: the command line's ``eps wait`` and ``eps execute --wait``, each its own
    process; ``None``: until it ended) for ``dispatch`` to settle (``landed``: only until its
    walk is over: something runs, or nothing could start); its state, and once it ended
    the exit code ``eps wait`` leaves with and where each copy's outputs are.  Under a
    supervisor this only reads (the supervisor pulls and releases); inline, this process
    follows the jobs itself (``follow(row)`` once per job that started: ``--follow``'s log)."""
    from eps.shell.run.follow import exit_of, rows_of
    from eps.shell.run.ownership import settled

    bound = None if timeout_s is None else max(0.0, float(timeout_s))
    bound = min(bound, WAIT_MAX_S) if capped and bound is not None else bound
    ids = [r.id for r in rows_of(ctx.ledger, dispatch)]
    start = clock()
    until = None if bound is None else start + bound
    if ctx.settings.jobs.supervise == "detached" or landed:
        done = _settle(ctx, ids, until=until, clock=clock, landed=landed)
    else:
        from eps.shell.run.follow import follow_to_end

        done = follow_to_end(ctx.ledger, ctx.lanes, ctx.events, ids, poll_s=ctx.settings.jobs.wait_poll_s,
                             follow=follow, until=until, clock=clock)  # fmt: skip
    rows = [r for r in (ctx.ledger.dispatch(d) for d in ids) if r is not None]
    ended = (done and not landed) or all(settled(r) for r in rows)
    code = None
    if ended:
        from eps.shell.run.pipelines import exit_of as phases_exit

        code = phases_exit(ctx.ledger, rows, ctx.err)  # a pipeline's phases (None: no pipeline)
        code = exit_of(rows, ctx.err) if code is None else code
    failed = {"failed_tasks": [r.job.task_index for r in rows if _failed(r)]} if ended and len(rows) > 1 else {}
    return doc(dispatch=dispatch, ended=ended, state=",".join(sorted({r.state.value for r in rows})),
               exit_code=code, waited_s=round(clock() - start, 3), timeout_s=bound,
               jobs=[_job_end(ctx, r) for r in rows], **failed)  # fmt: skip


def _failed(row: DispatchRow) -> bool:
    from eps.core.lifecycle import exit_status

    return exit_status(row.state, row.job_status, row.exit_code) != 0


def wait_until(
    ctx: Ctx,
    dispatch: str,
    bound_s: float | None,
    *,
    landed: bool = False,
    slice_s: float = WAIT_MAX_S,
    between: Callable[[float, dict[str, Any]], object] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """The one bounded wait of every front door: :func:`wait` in slices of at most ``slice_s``
    (and :data:`WAIT_MAX_S`), until the dispatch ended (``landed``: its walk is over) or
    ``bound_s`` passed (``None``: until it ended).  ``between(waited_s, doc)`` runs after each
    slice that did not end it (the MCP server's progress).  The last slice's document, with
    the whole wait's ``waited_s`` and its bound as ``timeout_s``."""
    slice_s = min(slice_s, WAIT_MAX_S)
    start = clock()
    while True:
        left = slice_s if bound_s is None else max(0.0, bound_s - (clock() - start))
        got = wait(ctx, dispatch, timeout_s=min(left, slice_s), landed=landed, clock=clock)
        walking = any(j["state"] in ("walking", "interrupted") for j in got["jobs"])
        if got["ended"] or (landed and not walking) or (bound_s is not None and left <= slice_s):
            return {**got, "waited_s": round(clock() - start, 3),
                    "timeout_s": got["timeout_s"] if bound_s is None else bound_s}  # fmt: skip
        if between is not None:
            between(clock() - start, got)


def _job_end(ctx: Ctx, row: DispatchRow) -> dict[str, Any]:
    from eps.core.ends import result_word
    from eps.core.lifecycle import exit_status
    from eps.core.states import DispatchState

    ended = row.state is DispatchState.ENDED
    outputs = os.path.join(ctx.settings.state_dir, "outputs", row.id) if row.pulled_at is not None else None
    if outputs is None and row.stored_at is not None:  # in storage, where its machine put them
        from eps.shell.run.stored import where

        outputs = getattr(where(row), "outputs_url", None)
    return {"dispatch": row.id, "state": row.state.value, "started": row.handle is not None,
            "result": result_word(row.state, row.job_status, row.exit_code),
            "exit_code": exit_status(row.state, row.job_status, row.exit_code) if ended else None,
            "outputs": outputs, "message": row.message}  # fmt: skip


def _settle(ctx: Ctx, ids: Sequence[str], *, until: float | None, clock: Callable[[], float], landed: bool) -> bool:
    """Read the ledger until every job of ``ids`` has settled (or ``landed``) (True) or
    ``until`` (False); a supervisor that died meanwhile is started again.  No signal
    handlers: this runs in any thread (the MCP server's)."""
    from eps.shell.run import ownership
    done = ownership.landed if landed else ownership.settled
    checked = clock()
    while True:
        rows = [r for r in (ctx.ledger.dispatch(d) for d in ids) if r is not None]
        if all(done(r) for r in rows):
            return True
        now = clock()
        if until is not None and now >= until:
            return False
        if now - checked >= 1.0:
            checked = now
            if ctx.settings.jobs.supervise == "detached" and ownership.alive_pid(ctx.ledger.state_dir) is None:
                ownership.ensure(ctx.ledger.state_dir, ctx.lanes.env)  # the supervisor died: revive
        time.sleep(LOOK_S if until is None else max(0.0, min(LOOK_S, until - clock())))
