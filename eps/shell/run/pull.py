"""``eps pull``: each job's outputs back, into the state directory (``<state>/outputs/<dispatch>``,
the dispatch then marked pulled) or a directory of the caller's (``--to``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from returns.result import Failure, Success

from eps.core.ends import result_word
from eps.core.model import JobError
from eps.core.room import Room
from eps.core.states import DispatchState
from eps.shell.lanes import Lanes
from eps.shell.run.finish import Finisher
from eps.shell.run.follow import rows_of
from eps.shell.state.ledger import DispatchRow, Ledger


def pull_each(ledger: Ledger, lanes: Lanes, dispatch: str, to: str | None, each: Callable[[str, str], object]) -> None:
    """Copy the outputs back (``<state>/outputs/<dispatch>`` or ``--to``; each copy of a
    fan-out in its own subdirectory).  Refused (exit 2) before the job has ended, and when
    ``--to`` names something that is not a directory or cannot be made one.  ``--to`` gets
    exactly what the job wrote to ``$EPS_OUTPUT_DIR`` (an output named ``job.log`` too); the
    whole log is kept in the state dir either way (``eps logs``)."""
    from eps.shell.lanes import jobs as J
    from eps.shell.run.finish import Finisher

    finisher = Finisher(ledger, lanes)
    rows = rows_of(ledger, dispatch)
    if to is not None and os.path.lexists(to) and not os.path.isdir(to):
        raise JobError("pull", f"--to {to}: exists and is not a directory", None)
    fanned = len(rows) > 1 or rows[0].id != dispatch
    rows = [r for r in rows if r.pulled_at is None or to is not None]
    woken: set[str] = set()  # started, but their machine's watcher stopped it: started again here
    for row in rows:
        progress = finisher.progress(row).value_or(None) if row.handle is not None else None
        if row.state is DispatchState.STARTED and progress is None and finisher.stopped(row):
            woken.add(row.id)
        elif row.state is DispatchState.STARTED and (progress is None or not progress.ended):
            raise JobError("pull", f"{row.id} has not ended yet (eps wait {dispatch}, or eps logs -f)", None)
    if to is not None and rows:
        to = _pull_target(to)
    for row in rows:
        if _in_storage(finisher, row):  # its machine put them there (and may be long gone)
            pulled, note = _from_storage(finisher, row, to if not fanned or to is None else os.path.join(to, row.id))
        elif to is None and row.id in woken:  # start it, pull, release it: the dispatch is over
            with ledger.owning(row.id) as owned:
                if not owned:
                    raise JobError("pull", f"{row.id} is being finished by its supervisor (eps wait {row.id})", None)
                got = finisher.collect(row, wake=True)
                pulled, note = got.pulled, finisher.end_with(row, got)
        elif to is None:
            got = finisher.collect(row, wake=True)
            pulled, note = got.pulled, got.note
        else:
            pulled, note = _pull_to(finisher, row, os.path.join(to, row.id) if fanned else to)
        if not pulled:
            raise JobError("pull", f"{row.id}: {note}", None)
        if to is None and row.state is not DispatchState.STARTED:
            # what a failed pull had kept the machine for is back: it can go now
            err = finisher.release_kept(row)
            if err is not None:
                note += f"; {err}"
        each(row.id, note)
    J.drop_settled_env_values(ledger)


def _in_storage(finisher: Finisher, row: DispatchRow) -> bool:
    """The job ended with its outputs in storage: not on a machine kept for the pull."""
    from eps.core.states import Outcome

    if row.stored_at is None or row.state is DispatchState.STARTED:
        return False
    return not any(a.outcome == Outcome.KEPT for a in finisher.ledger.attempts(row.id))


def _from_storage(finisher: Finisher, row: DispatchRow, to: str | None) -> tuple[bool, str]:
    """``eps pull`` of a job with storage: from there, under the same disk guard."""
    from eps.shell.run import held, stored
    out = to or finisher.outputs_dir(row.id)
    match stored.fetch(finisher.lanes, row, out, finisher.log_path(row.id)):
        case Failure(Room() as room):
            if to is None:
                held.record(finisher.state_dir, row.id, room, time.time(), during="pull")
            return False, f"outputs not pulled: {room.line()}"
        case Failure(why):
            return False, f"outputs not pulled: {why}"
    if to is None:
        held.clear(finisher.state_dir, row.id)
        finisher.ledger.mark_pulled(row.id)
    word = result_word(row.state, row.job_status, row.exit_code)
    source = getattr(stored.where(row), "outputs_url", row.job.storage)
    return True, f"{word}; outputs in {out} (from {source}); log: eps logs {row.id}"


def _pull_target(to: str) -> str:
    """``--to``, made (absolute) when it is not there yet; one line when it cannot be."""
    target = os.path.abspath(os.path.expanduser(to))
    if not to.strip():
        raise JobError("pull", "--to is empty", None)
    if os.path.lexists(target) and not os.path.isdir(target):
        raise JobError("pull", f"--to {to}: exists and is not a directory", None)
    try:
        os.makedirs(target, exist_ok=True)
    except OSError as exc:
        raise JobError("pull", f"--to {to}: cannot create it: {exc.strerror or exc}", None) from None
    if not os.access(target, os.W_OK | os.X_OK):
        raise JobError("pull", f"--to {to}: not writable", None)
    return target


def _pull_to(finisher: Finisher, row: DispatchRow, out: str) -> tuple[bool, str]:
    """``eps pull --to``: the outputs into ``out``, the whole log into the state dir (where
    ``eps logs`` reads it), the job's end recorded; the dispatch is not marked pulled.  Not
    started when it would leave either disk below its margin (the line says so)."""
    if row.handle is None:
        return False, "nothing ran"
    match finisher.look(row, wake=True):
        case Failure(why):
            return False, why
        case Success((site, progress)):
            pass
    if progress.ended:
        finisher.ledger.record_end(row.id, progress.exit_code, progress.status, float(progress.ended_at or time.time()))
    if not progress.exists:
        return False, "the job never started on its machine (nothing to pull)"
    match finisher.pull_guarded(row, site, out, finisher.log_path(row.id), held_as=None):
        case Failure(Room() as room):
            return False, f"outputs not pulled: {room.line()}"
        case Failure(why):
            return False, f"outputs not pulled: {why}"
    word = result_word(DispatchState.ENDED, progress.status, progress.exit_code) if progress.ended else "running"
    return True, f"{word}; outputs in {out}; log: eps logs {row.id}"
