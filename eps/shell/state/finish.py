"""The end of a job: read its record, bring its outputs and whole log back, then release
its machine.  Used by ``eps wait``, ``eps pull``, ``eps status`` / ``eps reconcile`` and
``eps cancel``: nothing the job wrote is lost before it is pulled, and the machine is
released only after that (its own linger guards the pull when no eps runs).

Where things land: outputs in ``<state>/outputs/<dispatch>/``, the log in
``<state>/logs/<dispatch>.log``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from returns.result import Failure, Result, Success

from eps.core.jobscript import JobProgress
from eps.core.lifecycle import result_word
from eps.core.outcome import FailureKind, LaneFailure
from eps.core.states import AttemptState, DispatchState, Outcome
from eps.shell.lanes import Lanes
from eps.shell.lanes import jobs as J
from eps.shell.state.ledger import DispatchRow, Ledger


class Finisher:
    def __init__(self, ledger: Ledger, lanes: Lanes, *, wall: Callable[[], float] = time.time) -> None:
        self.ledger = ledger
        self.lanes = lanes
        self.wall = wall
        self.state_dir = ledger.state_dir

    def outputs_dir(self, dispatch: str) -> str:
        return os.path.join(self.state_dir, "outputs", dispatch)

    def log_path(self, dispatch: str) -> str:
        return os.path.join(self.state_dir, "logs", f"{dispatch}.log")

    def site(self, row: DispatchRow) -> Result[J.Site, LaneFailure]:
        if row.handle is None:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, f"dispatch {row.id} has no machine"))
        return self.lanes.get(row.handle.lane).site(row.handle, row.id, row.job)

    def progress(self, row: DispatchRow) -> Result[JobProgress, LaneFailure]:
        """What the job's record says now (from its dispatch root)."""
        if row.handle is None:
            return Success(JobProgress(exists=False))
        return self.site(row).bind(J.probe)

    def collect(self, row: DispatchRow, to: str | None = None) -> tuple[bool, str]:
        """Record the job's end (when it has ended) and bring its outputs and log back.
        Returns (pulled, a note for the dispatch's message)."""
        if row.handle is None:
            return False, "nothing ran"
        match self.site(row).bind(lambda s: J.probe(s).map(lambda p: (s, p))):
            case Failure(f):
                return False, f"outputs not pulled: {f.message}"
            case Success((site, progress)):
                pass
        if progress.ended:
            self.ledger.record_end(row.id, progress.exit_code, progress.status, float(progress.ended_at or self.wall()))
        if not progress.exists:
            return False, "the job never started on its machine (nothing to pull)"
        out = to or self.outputs_dir(row.id)
        match J.pull(site, out, self.log_path(row.id) if to is None else os.path.join(out, "job.log")):
            case Failure(f):
                return False, f"outputs not pulled: {f.message}"
        if to is None:
            self.ledger.mark_pulled(row.id)
        word = result_word(DispatchState.ENDED, progress.status, progress.exit_code) if progress.ended else "running"
        return True, f"{word}; outputs in {out}"

    def finish(self, row: DispatchRow) -> str:
        """For a job that ended: pull, then release the machine, then the dispatch has ended.
        A machine is released only after its outputs came back (or could never come back)."""
        _, note = self.collect(row)
        if row.handle is not None:
            released = self.lanes.get(row.handle.lane).release(row.handle)
            if isinstance(released, Failure):
                note += f"; machine not released yet: {released.failure().message}"
        for a in self.ledger.attempts(row.id):
            if a.state in (AttemptState.RUNNING, AttemptState.PENDING):
                self.ledger.update_attempt(a.id, AttemptState.ENDED, outcome=Outcome.ENDED.value, reason=note)
        self.ledger.set_dispatch(row.id, DispatchState.ENDED, message=note)
        J.drop_env_values(self.state_dir, row.id)
        return note
