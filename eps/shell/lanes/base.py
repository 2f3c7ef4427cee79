"""The one interface every lane implements, and the knobs tests turn.

Whether a lane is set up here at all (configured, credentials present) is answered
by the registry (:meth:`eps.shell.lanes.registry.Lanes.down`) without building the
adapter.

A lane carries out what the core decided on one kind of provider and reports
what happened; it never decides what comes next.  Every operation that can fail
returns ``returns.result.Result`` with a :class:`~eps.core.outcome.LaneFailure`
that the adapter classified; a queued job is a state (``HandleState.PENDING``),
not a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from attrs import frozen

if TYPE_CHECKING:  # annotations only: ``eps status`` imports this module without ssh, rsync or returns
    from returns.result import Result

    from eps.core.model import Job, LaneKind, Rung
    from eps.core.outcome import AttemptRecord, Handle, LaneFailure
    from eps.core.settle import LiveItem
    from eps.shell.lanes.jobs import JobFiles, Site
    from eps.shell.remote.ssh import Patience


class Lane(Protocol):
    """One lane: the shared VM, one SLURM cluster, GCP or RunPod."""

    name: str
    kind: LaneKind

    def name_for(self, dispatch: str, rung: Rung, seq: int) -> str:
        """The deterministic provider-side name of attempt ``seq`` of ``dispatch`` on ``rung``:
        written to the ledger before the call, so a crash can be recovered by name."""
        ...

    def start(self, job: Job, rung: Rung, dispatch: str, name: str, files: JobFiles) -> Result[Handle, LaneFailure]:
        """Start the job on ``rung``: ship its files and run it under its wrapper (a queued
        SLURM job runs it when it starts).  The handle is ``PENDING`` while queued.  A
        machine made for a job that then could not be started is released again."""
        ...

    def launch_on(self, handle: Handle, job: Job, dispatch: str, files: JobFiles) -> Result[Handle, LaneFailure]:
        """Make sure the job runs on ``handle``'s machine: a resume adopting a machine whose
        walk died between making it and launching the job ships and launches it there.  A
        lane whose start is one step (VM, SLURM) has nothing to do."""
        ...

    def site(self, handle: Handle | None, dispatch: str, job: Job) -> Result[Site, LaneFailure]:
        """Where the job's files and records are (its dispatch root, and how to reach it)."""
        ...

    def shell_inner(self, handle: Handle) -> list[str] | None:
        """The prefix that puts ``eps ssh``'s shell (or command) where the job runs rather
        than at its site (SLURM: a step in the job's allocation, ``srun --jobid=ID
        --overlap``), or ``None``."""
        ...

    def poll(self, handle: Handle) -> Result[Handle, LaneFailure]:
        """The handle with its current state (and, when queued, the pending reason)."""
        ...

    def release(self, handle: Handle, *, pending_only: bool = False) -> Result[Handle, LaneFailure]:
        """Cancel, delete or terminate it and confirm it is gone (``RELEASED``).
        ``pending_only``: only while it is still queued; a job that started meanwhile
        is kept and returned with its started state."""
        ...

    def withdraw(self, name: str, rung: Rung) -> Result[None, LaneFailure]:
        """Release whatever exists under ``name`` (a create whose answer was lost)."""
        ...

    def inventory(self, dispatch: str | None) -> Result[tuple[LiveItem, ...], LaneFailure]:
        """What exists at the provider under eps's names (of one dispatch, or all)."""
        ...

    def was_submitted(self, dispatch: str, attempt: AttemptRecord) -> Result[bool, LaneFailure]:
        """Whether the provider's history shows ``attempt``'s call happened."""
        ...

    def how_it_ended(self, handle: Handle, dispatch: str) -> str | None:
        """For a job no longer at the provider: how it ended, when the lane can tell."""
        ...

    def wake(self, handle: Handle) -> Result[Handle | None, LaneFailure]:
        """A machine its watcher stopped after the linger (the job's outputs still on its
        disk), started again and letting eps in over ssh, so they can be pulled: the handle,
        RUNNING.  ``None``: nothing to start (it runs, it is gone, or the lane's machines
        are never stopped).  A machine that cannot boot again (no capacity) is a failure;
        it stays stopped, its disk kept."""
        ...

    def close(self) -> None: ...


@frozen
class LaneOptions:
    """Knobs for tests and for the CLI: how often to poll, how long to wait, where the
    providers are.  Production uses the defaults."""

    slurm_runner: Callable[..., tuple[int, str, str]] | None = None
    slurm_poll_interval_s: float = 5.0
    slurm_cancel_timeout_s: float = 120.0
    slurm_poll_failures_allowed: int = 3
    gcp_options: dict[str, Any] | None = None
    runpod_options: dict[str, Any] | None = None
    runpod_api_key: str | None = None  # tests only; production reads RUNPOD_API_KEY / ~/.runpod
    machine_patience: Patience | None = None  # how long a fresh VM / pod may take to let eps in (FRESH_MACHINE)
    env: dict[str, str] | None = None
    #: The public keys of the team's other hosts (a shared ledger, eps.shell.state.team): every
    #: GCP VM and RunPod pod eps makes lets them in too, so a host that takes a dispatch over
    #: can reach its machine.
    team_keys: tuple[str, ...] = ()
