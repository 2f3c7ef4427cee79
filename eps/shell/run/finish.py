"""The end of a job: read its record, bring its outputs and whole log back, then release
its machine.  Used by ``eps wait``, ``eps pull``, ``eps status`` / ``eps reconcile`` and
``eps cancel``: nothing the job wrote is lost before it is pulled, and the machine is
released only after that, or once they could never come back (no machine, no job on it).
A pull that failed (a full disk, an unreadable target) keeps the machine: its attempt
says so (outcome ``kept_for_pull``), reconcile leaves it alone, and the ``eps pull`` that
brings the outputs back releases it.  A pull that would leave this machine's disk below its
margin (``vm_disk_margin_gb``) is not even started (:meth:`Finisher.pull_guarded`): it takes
the same path, its line gives the sizes, and ``eps status`` shows the outputs held back for
lack of disk (:mod:`eps.shell.run.held`); so does a sync while the job runs, skipped.

A machine its watcher stopped after the linger (GCP: powered off; RunPod: the pod stopped;
either way its disk kept, only the disk billing) is started again to be pulled by a
collect that may wake it (the supervisor, ``eps wait``, ``eps pull``), then released; one
that may not (``eps status``, ``eps reconcile``: they answer at once) says it is stopped
with its outputs not pulled and keeps it.

A job whose wrapper is gone without writing its end (killed with -9, by the job itself
or the OOM killer) has ended too, with its exit code unknown, where the probe can tell
(it runs on the job's own machine: the VM lane, a GCP VM, a RunPod pod).

Where things land: outputs in ``<state>/outputs/<dispatch>/``, the log in
``<state>/logs/<dispatch>.log``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import NamedTuple

from returns.result import Failure, Result, Success

from eps.core.ends import result_word
from eps.core.jobscript import JobProgress
from eps.core.outcome import FailureKind, Handle, LaneFailure
from eps.core.room import Room, margin_bytes
from eps.core.states import AttemptState, DispatchState, HandleState, Outcome
from eps.core.tables import JOB_LIFECYCLE
from eps.shell.lanes import Lanes
from eps.shell.lanes import jobs as J
from eps.shell.run import held, stored
from eps.shell.state.ledger import DispatchRow, Ledger
from eps.shell.util.polling import poll_until

#: After its TERM, how long ``eps cancel`` waits for the job's end: the wrapper's kill
#: grace, and time to write the end.
STOP_WAIT_S = JOB_LIFECYCLE.kill_grace_s + 30.0
#: How long a SLURM job whose wrapper ended may still read as running (COMPLETING through a
#: preemption's grace, sacct behind squeue) before its end is judged on what SLURM says then.
SLURM_SETTLE_S = 60.0


class Collected(NamedTuple):
    """What :meth:`Finisher.collect` did.  ``lost``: the outputs can never come back (no
    machine, or no job ever ran on it), so there is nothing to keep the machine for."""

    pulled: bool
    note: str
    lost: bool = False
    stored: bool = False  # not pulled here: its machine confirmed them in storage (eps pull fetches them)

    @property
    def kept(self) -> bool:
        """Not pulled, but still on the machine: keep it for a later ``eps pull``."""
        return not self.pulled and not self.lost and not self.stored


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
        """What the job's record says now (from its dispatch root); a wrapper gone without
        its end reads as ended (``gone``) where the probe runs on the job's machine."""
        if row.handle is None:
            return Success(JobProgress(exists=False))
        return self.site(row).bind(_probe)

    def collect(self, row: DispatchRow, to: str | None = None, *, wake: bool = False) -> Collected:
        """Record the job's end (when it has ended) and bring its outputs and log back.
        ``wake``: a machine its watcher stopped is started again first (minutes)."""
        if row.handle is None:
            return Collected(False, "nothing ran", lost=True)
        match self.look(row, wake=wake):
            case Failure(why):
                return Collected(False, why)
            case Success((site, progress)):
                pass
        if progress.gone:
            J.reap(site)  # what the job left running: nothing outlives its end, nothing writes after it
        if progress.ended:
            self.ledger.record_end(row.id, progress.exit_code, progress.status, float(progress.ended_at or self.wall()))
        if not progress.exists:
            return Collected(False, "the job never started on its machine (nothing to pull)", lost=True)
        if to is None and (found := stored.confirmed(row, progress)) is not None:  # never via this machine's disk
            self.ledger.mark_pulled(row.id, stored=True)
            word = result_word(DispatchState.ENDED, progress.status, progress.exit_code)
            return Collected(False, f"{word}; outputs in {found.outputs_url}; eps pull {row.id} brings them here",
                             stored=True)  # fmt: skip
        out = to or self.outputs_dir(row.id)
        log = self.log_path(row.id) if to is None else os.path.join(out, "job.log")
        match self.pull_guarded(row, site, out, log, held_as="pull" if to is None else None):
            case Failure(Room() as room):
                return Collected(False, f"outputs not pulled: {room.line()}")
            case Failure(why):
                return Collected(False, f"outputs not pulled: {why}")
        if to is None:
            self.ledger.mark_pulled(row.id)
        word = result_word(DispatchState.ENDED, progress.status, progress.exit_code) if progress.ended else "running"
        if progress.gone:
            word += ": its wrapper is gone without writing its end"
        return Collected(True, f"{word}; outputs in {out}")

    def look(self, row: DispatchRow, *, wake: bool) -> Result[tuple[J.Site, JobProgress], str]:
        """The job's site and what its record says; a machine its watcher stopped is started
        again first when ``wake`` (else the failure says it is stopped).  A failure is the
        note of why the outputs cannot be pulled now."""
        looked = self.site(row).bind(lambda s: _probe(s).map(lambda p: (s, p)))
        if isinstance(looked, Failure) and row.handle is not None:
            lane = self.lanes.get(row.handle.lane)
            if not _stopped(lane.poll(row.handle)):
                return Failure(f"outputs not pulled: {looked.failure().message}")
            if not wake:
                return Failure(f"{STOPPED}: eps pull {row.id} starts it again")
            woke = lane.wake(row.handle)
            if isinstance(woke, Failure):
                return Failure(f"{STOPPED}; starting it again failed: {woke.failure().message}")
            looked = self.site(row).bind(lambda s: _probe(s).map(lambda p: (s, p)))
        return looked.alt(lambda f: f"outputs not pulled: {f.message}")

    def sync(self, row: DispatchRow) -> str | None:
        """While the job runs: bring what it wrote so far (its checkpoints) to the outputs
        directory, not marking it pulled.  What went wrong (failed, or skipped for lack of
        disk: tried again next round), or ``None``.  A job with storage is not synced here:
        its machine uploads them itself."""
        if row.job.storage:
            return None
        site = self.site(row)
        if isinstance(site, Failure):
            return f"sync of the outputs failed: {site.failure().message}"
        match self.pull_guarded(row, site.unwrap(), self.outputs_dir(row.id), self.log_path(row.id), held_as="sync"):
            case Failure(Room() as room):
                return f"sync of the outputs skipped: {room.line()}"
            case Failure(why):
                return f"sync of the outputs failed: {why}"
        return None

    def pull_guarded(self, row: DispatchRow, site: J.Site, out: str, log: str, *,
                     held_as: str | None) -> Result[None, Room | str]:  # fmt: skip
        """Bring the outputs to ``out`` and the log to ``log``, only when that leaves this
        machine's disk its margin (``vm_disk_margin_gb``): else nothing is started, and the
        failure is the :class:`~eps.core.room.Room` that says why; any other failure is its
        message.  ``held_as`` (``pull``, ``sync``; ``None`` for a ``--to``): the state
        directory's copy, recorded as held back for ``eps status``, cleared once it is done."""
        margin = margin_bytes(self.lanes.settings.policy.thresholds.vm_disk_margin_gb)
        try:
            room = J.pull_room(site, out, log, margin)
            if isinstance(room, Success) and not room.unwrap().fits:
                if held_as is not None:
                    held.record(self.state_dir, row.id, room.unwrap(), self.wall(), during=held_as)
                return Failure(room.unwrap())
            pulled = room.bind(lambda _: J.pull(site, out, log))
        except OSError as exc:  # the target cannot even be made (a file in the way, no permission)
            return Failure(f"cannot write to {out}: {exc.strerror or exc}")
        if isinstance(pulled, Failure):
            return Failure(pulled.failure().message)
        if held_as is not None:
            held.clear(self.state_dir, row.id)
        return Success(None)

    def stopped(self, row: DispatchRow) -> bool:
        """Its machine is there, stopped by its watcher (its outputs wait on its disk)."""
        return row.handle is not None and _stopped(self.lanes.get(row.handle.lane).poll(row.handle))

    def finish(self, row: DispatchRow, *, wake: bool = False) -> str:
        """For a job that ended: pull, then release the machine, then the dispatch has ended.
        A machine is released only after its outputs came back (or could never come back);
        when the pull failed it is kept, and the note says how to bring them back.  A run
        the cluster ended (a SLURM preemption, a lost node) is an interruption instead."""
        got = self.collect(row, wake=wake)
        why = self.interruption(row)
        return self.end_with(row, got) if why is None else self.interrupted(row, got, why)

    def interruption(self, row: DispatchRow) -> str | None:
        """Why a SLURM job's run that left was the cluster's doing, not its own end (it was
        preempted, its node failed, or it was requeued); ``None`` otherwise or on any other lane."""
        from eps.core.healing import slurm_interruption
        from eps.core.model import LaneKind

        if row.handle is None or row.handle.kind is not LaneKind.SLURM:
            return None
        handle = row.handle
        lane = self.lanes.get(handle.lane)

        def settled() -> Handle | None:
            # The job's wrapper has ended; SLURM is told a moment later (a preempted job is
            # COMPLETING through its grace, and sacct lags squeue): judge its final state.
            polled = lane.poll(handle)
            if isinstance(polled, Failure):
                return None
            h = polled.unwrap()
            return None if h.state in (HandleState.RUNNING, HandleState.STARTING) else h

        h = poll_until(settled, timeout_s=SLURM_SETTLE_S, interval_s=0.5)
        return None if h is None else slurm_interruption(h.id, h.state, h.reason)

    def interrupted(self, row: DispatchRow, got: Collected, why: str) -> str:
        """An interrupted run: what it wrote is pulled (``got``; not counted as the end), a
        requeued job is cancelled (a second run is eps's to start, under the retry policy),
        and the dispatch is ``preempted``: its supervisor relaunches it when its policy says so."""
        note = f"interrupted: {why}; {got.note}"
        if row.handle is not None:
            released = self.lanes.get(row.handle.lane).release(row.handle)
            if isinstance(released, Failure):
                note += f"; not cancelled yet: {released.failure().message}"
        for a in self.ledger.attempts(row.id):
            if a.state in (AttemptState.RUNNING, AttemptState.PENDING):
                self.ledger.update_attempt(a.id, AttemptState.GONE, outcome=Outcome.PREEMPTED, reason=why)
        self.ledger.set_dispatch(row.id, DispatchState.PREEMPTED, message=note)
        return note

    def end_with(self, row: DispatchRow, got: Collected) -> str:
        """:meth:`finish` after its collect: release (or keep) the machine, end the dispatch."""
        note = got.note
        if got.kept:
            note += f"; its machine is kept: eps pull {row.id} brings them back, then releases it"
            self.hang_up(row)
        else:
            held.clear(self.state_dir, row.id)  # pulled, or never can be: nothing waits for room
            released = self.lanes.get(row.handle.lane).release(row.handle) if row.handle is not None else None
            if isinstance(released, Failure):
                note += f"; machine not released yet: {released.failure().message}"
        outcome = Outcome.KEPT if got.kept else Outcome.ENDED
        for a in self.ledger.attempts(row.id):
            if a.state in (AttemptState.RUNNING, AttemptState.PENDING):
                self.ledger.update_attempt(a.id, AttemptState.ENDED, outcome=outcome, reason=note)
        self.ledger.set_dispatch(row.id, DispatchState.ENDED, message=note)
        J.drop_env_values(self.state_dir, row.id)
        return note

    def hang_up(self, row: DispatchRow) -> None:
        """Its machine is kept (outputs not pulled yet): its ssh master connection is closed now,
        not left to end after its idle time (``eps pull`` opens a new one)."""
        if row.handle is not None:
            self.site(row).map(J.hang_up)

    def stop(self, row: DispatchRow, *, within_s: float = STOP_WAIT_S) -> JobProgress | None:
        """Ask a running job to stop (``eps cancel``: its wrapper TERMs everything, KILLs it
        after the grace) and wait until its end is written; what its record says then
        (``None``: the machine did not answer)."""
        site = self.site(row)
        if isinstance(site, Failure):
            return None
        J.cancel(site.unwrap())
        if site.unwrap().remote.robot and row.handle is not None:
            # A robot login runs no kill: the cancel mark went by rsync, the TERM comes from
            # SLURM (scancel: the wrapper then records its end as cancelled).
            self.lanes.get(row.handle.lane).release(row.handle)

        def ended() -> JobProgress | None:
            seen = _probe(site.unwrap()).value_or(None)
            return seen if seen is None or seen.ended or not seen.exists else None

        return poll_until(ended, timeout_s=within_s, interval_s=0.2)

    def release_kept(self, row: DispatchRow) -> str | None:
        """After ``eps pull`` brought back what a failed pull left: release the machine that
        was kept for it.  An error message, or ``None``."""
        kept = [a for a in self.ledger.attempts(row.id) if a.outcome == Outcome.KEPT]
        if not kept or row.handle is None:
            return None
        released = self.lanes.get(row.handle.lane).release(row.handle)
        if isinstance(released, Failure):
            return f"machine not released yet: {released.failure().message}"
        for a in kept:
            self.ledger.update_attempt(a.id, AttemptState.CANCELLED, outcome=Outcome.RELEASED)
        return None


#: What a collect says of a machine its watcher stopped while its outputs wait.
STOPPED = "stopped, outputs not pulled (the machine is powered off, its disk kept)"


def _stopped(polled: Result[Handle, LaneFailure]) -> bool:
    """The machine is there but stopped (GCP TERMINATED, RunPod EXITED or ERROR)."""
    return isinstance(polled, Success) and polled.unwrap().state is HandleState.FINISHED


def _probe(site: J.Site) -> Result[JobProgress, LaneFailure]:
    got = J.probe(site)
    if site.runs_here:
        return got.map(lambda p: p._replace(gone=True) if p.wrapper_gone else p)
    return got
