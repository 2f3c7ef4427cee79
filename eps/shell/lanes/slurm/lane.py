"""A SLURM cluster as a lane (``fellows`` and any other configured cluster).

Submitting renders the batch script (pure, ``eps.core.sbatch``) and runs
``sbatch``; a submitted job is queued (``HandleState.PENDING``) and the walker
parks on it while the core says WAIT.  Releasing a parked job after a park
timeout cancels it only while it is still pending (``scancel --state=PENDING``)
and confirms it has left every live state before the walk moves on, so no two
jobs of one dispatch are ever live; a job that started between the last poll
and the cancel is kept and reported as started.

A cluster reached through a robot login (``access = "robot"``) is the same lane with
sbatch, scancel, squeue and rsync alone: its site is a robot :class:`~eps.shell.remote.ssh.
Remote` (the job's files move by rsync, :mod:`eps.shell.remote.robot`), a job squeue no
longer lists is ``GONE`` (how it ended is in its wrapper's files, which the finisher reads),
and "was it submitted?" after a crash is squeue's live jobs, else a start in the dispatch's
own files since the attempt (never sacct).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from returns.result import Failure, Result, Success

from eps.core.jobscript import LAYOUT
from eps.core.lifecycle import batch_time_s, on_rung
from eps.core.model import ClusterConfig, Job, LaneKind, Rung, evolve
from eps.core.names import PREFIX, dispatch_of_job, job_name, sweep_of_task, task_of_array
from eps.core.outcome import FailureKind, Handle, LaneFailure
from eps.core.sbatch import TASK_MARK, SbatchArray, SbatchRenderError, render_sbatch
from eps.core.settle import LiveItem
from eps.core.states import HandleState
from eps.core.tables import remote_work_root
from eps.shell.lanes.slurm.cli import GONE, JobStatus, SlurmClient
from eps.shell.util.polling import poll_until

if TYPE_CHECKING:  # eps status builds this lane for its inventory (squeue) alone: no ssh or rsync for that
    from eps.core.array_move import AfterCancel
    from eps.core.outcome import AttemptRecord
    from eps.shell.lanes.jobs import JobFiles, Site

#: squeue/sacct states in the handle vocabulary every lane shares.
SLURM_STATES: dict[str, HandleState] = {
    "PENDING": HandleState.PENDING,
    "REQUEUED": HandleState.PENDING,
    "CONFIGURING": HandleState.STARTING,
    "RUNNING": HandleState.RUNNING,
    "COMPLETING": HandleState.RUNNING,
    "SUSPENDED": HandleState.RUNNING,
    "RESIZING": HandleState.RUNNING,
    "SIGNALING": HandleState.RUNNING,
    "STAGE_OUT": HandleState.RUNNING,
    GONE: HandleState.GONE,
}


#: How long a recent attempt's job is looked for in sacct before it is judged never submitted.
SACCT_LAG_S = 10.0


def handle_state(slurm_state: str) -> HandleState:
    """A SLURM job state as a handle state: anything that has left the live states
    (COMPLETED, FAILED, TIMEOUT, CANCELLED, ...) is FINISHED."""
    return SLURM_STATES.get(slurm_state, HandleState.FINISHED)


class SlurmLane:
    """One SLURM cluster as a :class:`~eps.shell.lanes.base.Lane`."""

    kind = LaneKind.SLURM

    def __init__(
        self,
        cluster: ClusterConfig,
        client: SlurmClient,
        *,
        user: str | None = None,
        login: tuple[str, ...] = (),
        work_root: str | None = None,
        cancel_timeout_s: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.name = cluster.name
        self.cluster = cluster
        self.client = client
        if user is None and cluster.user_in_job_name:  # the job name carries the user: this machine's
            import getpass

            user = getpass.getuser()
        self.user = user
        self._login = login
        default = remote_work_root(LaneKind.SLURM).root
        # Behind a login prefix a relative root is under the login's home (where ssh and
        # sbatch run); on this machine it is made absolute, so the batch step finds it.
        root = work_root or default
        if not login and not os.path.isabs(root) and not root.startswith("~"):
            root = f"~/{root}"
        self.work_root = root if login else os.path.abspath(os.path.expanduser(root))
        self._cancel_timeout_s = cancel_timeout_s
        self._waited_for: set[tuple[str, int]] = set()  # attempts already looked for in a lagging sacct
        self._clock = clock
        self._sleep = sleep

    def job_name(self, dispatch: str) -> str:
        """This dispatch's job name here (with the user where the cluster row says so)."""
        return job_name(dispatch, self.user if self.cluster.user_in_job_name else None)

    def name_for(self, dispatch: str, rung: Rung, seq: int) -> str:
        return self.job_name(dispatch)

    def site(self, handle: Handle | None, dispatch: str, job: Job) -> Result[Site, LaneFailure]:
        from eps.shell.lanes.jobs import Site, site_root
        from eps.shell.remote.ssh import Remote

        remote = Remote.via(self._login, robot=self.cluster.robot)
        if handle is not None and (sweep := sweep_of_task(dispatch, handle.id)) is not None:
            dispatch = sweep  # a task of a sweep's array lives in the sweep's root, <work root>/<sweep>/<i>
        return Success(Site(remote, site_root(self.work_root, dispatch, job)))

    def launch_on(self, handle: Handle, job: Job, dispatch: str, files: JobFiles) -> Result[Handle, LaneFailure]:
        return Success(handle)  # started in one step: nothing is ever made without its job

    def shell_inner(self, handle: Handle) -> list[str] | None:
        return ["srun", f"--jobid={handle.id}", "--overlap"]

    def wake(self, handle: Handle) -> Result[Handle | None, LaneFailure]:
        return Success(None)  # a job's outputs live on the cluster's shared filesystem

    def start(self, job: Job, rung: Rung, dispatch: str, name: str, files: JobFiles) -> Result[Handle, LaneFailure]:
        """Ship the job's files to its dispatch root on the shared filesystem, then submit a
        batch script whose one step runs the wrapper in the foreground.  A job of unknown
        length runs up to the rung's limit: ``--time`` is then the tier's MaxWall."""
        from eps.shell.lanes.jobs import stage

        job = on_rung(job, rung)
        site = self.site(None, dispatch, job).unwrap()
        staged = stage(site, job, dispatch, files)
        if isinstance(staged, Failure):
            return staged
        lay = LAYOUT.under(site.root)
        step = evolve(job, command=("bash", lay.script, "run"))
        try:
            script = render_sbatch(
                step, self.cluster, rung, dispatch_id=dispatch, user=self.user, time_s=batch_time_s(job)
            )
        except SbatchRenderError as exc:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, str(exc), code="sbatch_render"))
        # on sbatch's command line, not in the script: a path may hold blanks
        options = [f"--output={site.root}/sbatch.out"]
        queued = Handle(self.name, LaneKind.SLURM, "", rung.key, qos=rung.qos, machine=rung.machine)
        submitted = self.client.submit(script, options)
        return submitted.map(lambda job_id: evolve(queued, id=job_id, state=HandleState.PENDING))

    def start_array(self, job: Job, rung: Rung, dispatch: str, tasks: tuple[int, ...], files: JobFiles,
                    at_once: int | None = None) -> Result[Handle, LaneFailure]:  # fmt: skip
        """A sweep's ``tasks`` (indices of its N, ``job.sweep``) as one array, one sbatch (the
        cluster's rule 4): each task's files shipped to its own dispatch root
        (``<work root>/<dispatch>/<i>``, the wrapper of task i of N, so ``EPS_TASK_INDEX``
        comes from the wrapper as on every lane), then the array submitted with at most
        ``at_once`` running (``%K``) and each task's sbatch output in its own root.  The
        handle is the array's job id J; task i is ``J_i`` in squeue and sacct.  The walker
        parks on it as one job (eps.shell.run.sweeps)."""
        import posixpath

        from eps.shell.lanes.jobs import stage

        job = on_rung(job, rung)
        if job.restart or not tasks or not all(0 <= i < job.sweep for i in tasks):
            said = "a relaunched task runs alone, not in an array" if job.restart else (
                f"tasks {list(tasks)} are not tasks of a sweep of {job.sweep}")  # fmt: skip
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, said, code="sbatch_render"))
        for i in tasks:
            task = evolve(job, sweep=1, sweep_parallel=None, task_index=i, task_count=job.sweep)
            staged = stage(self.site(None, dispatch, task).unwrap(), task, dispatch, files)
            if isinstance(staged, Failure):
                return staged
        base = posixpath.dirname(self.site(None, dispatch, job).unwrap().root)  # <work root>/<dispatch>
        step = evolve(job, command=("bash", f"{base}/{TASK_MARK}/{LAYOUT.script}", "run"))
        try:
            script = render_sbatch(step, self.cluster, rung, dispatch_id=dispatch, user=self.user,
                                   time_s=batch_time_s(job), array=SbatchArray(tasks, at_once))  # fmt: skip
        except SbatchRenderError as exc:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, str(exc), code="sbatch_render"))
        queued = Handle(self.name, LaneKind.SLURM, "", rung.key, qos=rung.qos, machine=rung.machine)
        submitted = self.client.submit(script, [f"--output={base}/%a/sbatch.out"])
        return submitted.map(lambda job_id: evolve(queued, id=job_id, state=HandleState.PENDING))

    def sweep_jobs(self, dispatch: str) -> Result[tuple[JobStatus, ...], LaneFailure]:
        """The live tasks (``J_i``) of every array of sweep ``dispatch``: one ``squeue -r``."""
        name = self.job_name(dispatch)
        return self.client.list_by_name(name).map(lambda jobs: tuple(j for j in jobs if j.name == name))

    def cancel_pending(
        self, dispatch: str, array_id: str, pending: tuple[int, ...]
    ) -> Result[AfterCancel, LaneFailure]:
        """``scancel --state=PENDING J`` (the array's running tasks stay), then wait until
        every task of ``pending`` has left the pending state: which left unstarted (they move)
        and which started between the last poll and the cancel (they stay)."""
        from eps.core.array_move import after_cancel

        cancelled = self.client.cancel(array_id, pending_only=True)
        if isinstance(cancelled, Failure):
            return cancelled
        still = LaneFailure(
            FailureKind.TRANSIENT,
            f"array {array_id}: tasks still pending {self._cancel_timeout_s:g} s after scancel",
            code="cancel_not_confirmed",
        )

        def settled() -> AfterCancel | None:
            states = self._listed(dispatch, array_id).value_or(None)
            if states is None or any(states.get(i) == "PENDING" for i in pending):
                return None
            return after_cancel(pending, self._with_history(array_id, pending, states))

        found = poll_until(
            settled, timeout_s=self._cancel_timeout_s, interval_s=0.1, clock=self._clock, sleep=self._sleep
        )
        return Success(found) if found is not None else Failure(still)

    def task_states(self, dispatch: str, array_id: str, tasks: tuple[int, ...]) -> Result[dict[int, str], LaneFailure]:
        """The state of each of ``tasks`` of sweep ``dispatch``'s array J: squeue's (one
        ``squeue -r``), else sacct's for a task squeue forgot, whether it ran."""
        return self._listed(dispatch, array_id).map(lambda states: self._with_history(array_id, tasks, states))

    def _listed(self, dispatch: str, array_id: str) -> Result[dict[int, str], LaneFailure]:
        from eps.core.array_move import task_index

        live = self.sweep_jobs(dispatch)
        return live.map(lambda jobs: {i: j.state for j in jobs if (i := task_index(j.job_id, array_id)) is not None})

    def _with_history(self, array_id: str, tasks: tuple[int, ...], states: dict[int, str]) -> dict[int, str]:
        """``states`` with sacct's state of each task squeue forgot (a robot login: GONE; an
        unreadable sacct: PENDING, so nothing is taken for moved or started on a guess)."""
        for i in tasks:
            if i not in states:
                states[i] = self.client.poll(f"{array_id}_{i}").map(lambda s: s.state).value_or("PENDING")
        return states

    def cancel_array(self, dispatch: str, array_id: str) -> Result[None, LaneFailure]:
        """``scancel J``: every task of sweep ``dispatch``'s array J at once (running and
        pending), then wait until squeue lists none of them."""
        from eps.core.array_move import task_index

        cancelled = self.client.cancel(array_id)
        if isinstance(cancelled, Failure):
            return cancelled

        def gone() -> bool | None:
            live = self.sweep_jobs(dispatch).value_or(None)
            if live is None:
                return None
            return True if not any(task_index(j.job_id, array_id) is not None for j in live) else None

        if poll_until(gone, timeout_s=self._cancel_timeout_s, interval_s=0.1, clock=self._clock, sleep=self._sleep):
            return Success(None)
        said = f"array {array_id}: tasks still live {self._cancel_timeout_s:g} s after scancel"
        return Failure(LaneFailure(FailureKind.TRANSIENT, said, code="cancel_not_confirmed"))

    def start_estimate(self, job: Job, rung: Rung, dispatch: str) -> int | None:
        """How long until ``job`` would start on ``rung`` here, by the cluster's estimate
        (``None``: it gives none); nothing is shipped or submitted."""
        probe = evolve(on_rung(job, rung), command=("true",))
        try:
            script = render_sbatch(
                probe, self.cluster, rung, dispatch_id=dispatch, user=self.user, time_s=batch_time_s(probe)
            )
        except SbatchRenderError:
            return None
        return self.client.start_estimate(script)

    def check_tier(self, qos: str | None, dispatch: str = "check") -> LaneFailure | None:
        """Whether the cluster takes the exact script eps would submit under ``qos`` (a
        one-GPU job of ten minutes): ``sbatch --test-only``, nothing submitted.  ``None`` when
        it does; else what it said, classified (MISCONFIGURED names the wrong setting)."""
        from eps.core.model import Provisioning

        gpus = 1 if self.cluster.gpus_per_node > 0 else 0
        rung = Rung(self.name, LaneKind.SLURM, Provisioning.QUEUE, "check", qos=qos, gpus=gpus)
        probe = Job("gpu-1", 600, command=("true",))
        try:
            script = render_sbatch(probe, self.cluster, rung, dispatch_id=dispatch, user=self.user, time_s=600)
        except SbatchRenderError as exc:
            return LaneFailure(FailureKind.INVALID_REQUEST, str(exc), code="sbatch_render")
        return self.client.test_only(script)

    def _with(self, handle: Handle, status: JobStatus) -> Handle:
        state = handle_state(status.state)
        return evolve(handle, state=state, reason=status.reason if state is HandleState.PENDING else status.state)

    def poll(self, handle: Handle) -> Result[Handle, LaneFailure]:
        return self.client.poll(handle.id).map(lambda status: self._with(handle, status))

    def release(self, handle: Handle, *, pending_only: bool = False) -> Result[Handle, LaneFailure]:
        released = evolve(handle, state=HandleState.RELEASED)
        still = LaneFailure(
            FailureKind.TRANSIENT,
            f"job {handle.id} on {handle.rung} still live {self._cancel_timeout_s:g} s after scancel",
            code="cancel_not_confirmed",
        )
        if not pending_only:
            self.client.cancel(handle.id)
            gone = self.client.wait_gone(handle.id, self._cancel_timeout_s, clock=self._clock, sleep=self._sleep)
            return Success(released) if gone else Failure(still)
        # Cancel it only while it is still pending: a job that started between the last
        # poll and the scancel is kept, and is the answer.
        self.client.cancel(handle.id, pending_only=True)

        def settled() -> Handle | None:
            status = self.client.poll(handle.id).value_or(None)  # an unreadable poll: try again
            if status is None or status.state == "PENDING":
                return None
            if status.state in ("CANCELLED", GONE):
                return released
            return self._with(handle, status)  # running, or even already finished: it started

        found = poll_until(
            settled, timeout_s=self._cancel_timeout_s, interval_s=0.1, clock=self._clock, sleep=self._sleep
        )
        return Success(found) if found is not None else Failure(still)

    def withdraw(self, name: str, rung: Rung) -> Result[None, LaneFailure]:
        return Success(None)  # a refused or failed sbatch leaves no job behind

    def inventory(self, dispatch: str | None) -> Result[tuple[LiveItem, ...], LaneFailure]:
        prefix = job_name(dispatch) if dispatch else PREFIX
        match self.client.list_by_name(prefix):
            case Failure(f):
                return Failure(f)
            case Success(jobs):
                found = []
                for j in jobs:
                    owner = task_of_array(dispatch_of_job(j.name or ""), j.job_id)
                    if owner is None or (dispatch is not None and owner != dispatch):
                        continue
                    key = f"{self.name}/{j.qos or '-'}/-/queue"
                    h = Handle(self.name, LaneKind.SLURM, j.job_id, key, qos=j.qos)
                    found.append(LiveItem(owner, self._with(h, j), j.name))
                return Success(tuple(found))
        raise AssertionError("unreachable")  # pragma: no cover

    def was_submitted(self, dispatch: str, attempt: AttemptRecord) -> Result[bool, LaneFailure]:
        if self.cluster.robot:
            return self._robot_submitted(dispatch, attempt)
        return self._in_history(dispatch, attempt).map(lambda job: job is not None)

    def _in_history(self, dispatch: str, attempt: AttemptRecord) -> Result[JobStatus | None, LaneFailure]:
        """The job ``attempt`` submitted, as sacct's history has it (``None``: none).  By the
        name the attempt was recorded with: a task of a sweep is in its array, named for the
        sweep (``eps-D``), task i as ``J_i`` (a task never started is not its own row there)."""
        name = attempt.name or self.job_name(dispatch)
        owner = dispatch_of_job(name)

        def found() -> Result[JobStatus | None, LaneFailure]:
            seen = self.client.history_by_name(name, attempt.started_at - 60)
            return seen.map(lambda jobs: next((j for j in jobs if j.qos == attempt.rung.qos
                                               and task_of_array(owner, j.job_id) == dispatch), None))  # fmt: skip

        first = found()
        recent = time.time() - attempt.started_at <= 120 and (dispatch, attempt.id) not in self._waited_for
        if not isinstance(first, Success) or first.unwrap() is not None or not recent:
            return first
        self._waited_for.add((dispatch, attempt.id))  # once: was_submitted after ran_unrecorded does not wait again
        # slurmdbd writes a job a moment after slurmctld ran it: a job that ran and ended within
        # seconds of a recent attempt may not be in sacct yet (seen on the test cluster)
        later = poll_until(lambda: found().value_or(None), timeout_s=SACCT_LAG_S, interval_s=0.5,
                           clock=self._clock, sleep=self._sleep)  # fmt: skip
        return Success(later)

    def ran_unrecorded(self, dispatch: str, attempt: AttemptRecord) -> Result[Handle | None, LaneFailure]:
        """The job of ``attempt`` (recorded, its job id never read back: a walk killed right
        after its sbatch) that already left the queue after it ran: its handle, to adopt it
        as started (its outputs are in its root), rather than submit it again.  ``None``: no
        such job, or one cancelled (it may never have run; the walk goes on without it).  A
        robot login has no sacct: ``None``."""
        if self.cluster.robot:
            return Success(None)

        def ran(job: JobStatus | None) -> Handle | None:
            if job is None or job.state in (GONE, "CANCELLED", "PENDING", "REQUEUED"):
                return None
            rung = attempt.rung
            h = Handle(self.name, LaneKind.SLURM, job.job_id, rung.key, qos=rung.qos, machine=rung.machine)
            return evolve(h, state=HandleState.RUNNING)

        return self._in_history(dispatch, attempt).map(ran)

    def _robot_submitted(self, dispatch: str, attempt: AttemptRecord) -> Result[bool, LaneFailure]:
        """No sacct through a robot login: a live job of this name and tier in squeue, else a
        start written in one of the dispatch's roots since the attempt (a job of it ran)."""
        import posixpath

        from eps.core.jobscript import dispatch_root
        from eps.shell.remote.robot import started_since
        from eps.shell.remote.ssh import Remote

        name = self.job_name(dispatch)
        match self.client.list_by_name(name):
            case Failure(f):
                return Failure(f)
            case Success(jobs) if any(j.name == name and j.qos == attempt.rung.qos for j in jobs):
                return Success(True)
        where = posixpath.dirname(dispatch_root(self.work_root, dispatch))
        ran = started_since(Remote.via(self._login, robot=True), where, attempt.started_at - 60)
        return ran.alt(lambda f: f.lane_failure())

    def how_it_ended(self, handle: Handle, dispatch: str) -> str | None:
        final = self.client.poll(handle.id)  # squeue forgot it; sacct knows how it ended (a robot login: GONE)
        if isinstance(final, Success):
            return f"SLURM job {handle.id}: {final.unwrap().state}"
        return None

    def close(self) -> None:
        return None
