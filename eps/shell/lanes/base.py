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
from typing import Any, Protocol

from attrs import frozen
from returns.result import Result

from eps.core.model import Job, LaneKind, Rung
from eps.core.outcome import Handle, LaneFailure
from eps.core.settle import LiveItem
from eps.core.walk import AttemptRecord


class Lane(Protocol):
    """One lane: the shared VM, one SLURM cluster, GCP or RunPod."""

    name: str
    kind: LaneKind

    def name_for(self, dispatch: str, rung: Rung, seq: int) -> str:
        """The deterministic provider-side name of attempt ``seq`` of ``dispatch`` on ``rung``:
        written to the ledger before the call, so a crash can be recovered by name."""
        ...

    def start(self, job: Job, rung: Rung, dispatch: str, name: str) -> Result[Handle, LaneFailure]:
        """Create the machine or submit the job; its handle (``PENDING`` when queued)."""
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

    def keep_output(self, handle: Handle, dispatch: str, logs_dir: str) -> str | None:
        """Before a finished machine is released: copy what it left that would be lost
        (e.g. a VM's console) to ``logs_dir``; a short note on how the job ended."""
        ...

    def how_it_ended(self, handle: Handle, dispatch: str) -> str | None:
        """For a job no longer at the provider: how it ended, when the lane can tell."""
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
    env: dict[str, str] | None = None
