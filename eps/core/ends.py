"""How a job ended and what eps calls it (pure): the end its wrapper writes
(:class:`JobEnd`), the word ``eps status`` shows for a dispatch (:func:`result_word`) and
where its outputs live now (:func:`outputs_where`).

The status words (never one word for every end): ``succeeded``, ``failed (exit N)``,
``failed (setup, exit N)``, ``timed out``, ``cancelled`` (only ``eps cancel``),
``killed by signal N`` (a signal eps did not send: exit 128+N), ``preempted``,
``running``, ``queued``, ``stalled`` (its stall watch stopped it: exit 125), and
``ended (exit code unknown)`` when the machine vanished before the job's record could be
read (a preempted spot VM, a pod gone), or the job's wrapper died without writing its end.

Apart from :mod:`eps.core.jobscript` (which renders the wrapper that writes the end) and
:mod:`eps.core.lifecycle` (the time limit and the spec a job runs under), so that
``eps status`` reads its rows without importing either.
"""

from __future__ import annotations

from enum import StrEnum

from eps.core.states import DispatchState


class JobEnd(StrEnum):
    """How a job ended, as the wrapper writes it to ``status``."""

    EXITED = "exited"  # the command ran to its end; exit-code is its code
    SETUP_FAILED = "setup_failed"  # the setup line failed; the command never ran; exit-code is setup's
    TIMED_OUT = "timed_out"  # the time limit stopped it; exit-code is timeout's (124, or 137 after KILL)
    KILLED = "killed"  # a signal that eps did not send stopped it (exit-code 128+N: signal N)
    CANCELLED = "cancelled"  # `eps cancel` stopped it (its TERM, then KILL after the grace)
    ERROR = "error"  # the wrapper could not start the job (missing env name, no timeout binary)
    STALLED = "stalled"  # its stall watch stopped it (on_stall = stop; eps.core.stall); exit-code 125


def result_word(state: DispatchState, job_status: str | None, exit_code: int | None) -> str:
    """What ``eps status`` calls the dispatch's outcome so far."""
    if state is DispatchState.CANCELLED:
        return "cancelled"
    if state is DispatchState.PREEMPTED:
        return "preempted"
    if state is DispatchState.HELD:
        return "queued"
    if state is DispatchState.WAITING:
        return "waiting for capacity"
    if state in (DispatchState.WALKING, DispatchState.INTERRUPTED):
        return state.value
    if state is DispatchState.FAILED:
        return "nothing started"
    if state is DispatchState.STARTED:
        return "running"
    match job_status:
        case JobEnd.TIMED_OUT:
            return "timed out"
        case JobEnd.CANCELLED:
            return "cancelled"
        case JobEnd.KILLED if exit_code is not None and 128 < exit_code < 192:
            return f"killed by signal {exit_code - 128}"
        case JobEnd.SETUP_FAILED:
            return f"failed (setup, exit {exit_code})"
        case JobEnd.ERROR:
            return f"failed (could not start, exit {exit_code})"
        case JobEnd.STALLED:
            return "stalled"
    if exit_code is None:
        return "ended (exit code unknown)"
    return "succeeded" if exit_code == 0 else f"failed (exit {exit_code})"


#: Where a dispatch's outputs live now (``eps status``'s ``outputs.where``), best copy first.
OUTPUTS_WHERE = ("pulled", "storage", "machine", "synced", "lost", "none")


def outputs_where(state: DispatchState, *, ran: bool, pulled: bool, stored: bool, kept: bool, synced: bool,
                  on_cluster: bool = False) -> str:  # fmt: skip
    """Where the dispatch's outputs live now (one of :data:`OUTPUTS_WHERE`):

    - ``pulled``: copied back whole to this machine (at the job's end, or by ``eps pull``);
    - ``storage``: confirmed in the storage location by the job's own machine (``--storage``);
    - ``machine``: only where the job runs or ran: it is running (or between a preemption
      and its relaunch), or its machine is kept for ``eps pull`` (a pull that failed, outputs
      held back for lack of disk, a machine its watcher stopped), or it ran on a SLURM cluster
      (``on_cluster``), whose shared filesystem keeps them;
    - ``synced``: its machine is gone, and what is here is the last periodic sync (``sync_every``),
      not the end;
    - ``lost``: the job ran, its machine is gone, and nothing of it came back;
    - ``none``: no job ran (nothing started, or not yet).
    """
    if pulled:
        return "pulled"
    if stored:
        return "storage"
    if not ran or state is DispatchState.HELD:  # held: a pinned job still in its queue (P10)
        return "none"
    if kept or on_cluster or state in (DispatchState.STARTED, DispatchState.WALKING, DispatchState.INTERRUPTED):
        return "machine"
    return "synced" if synced else "lost"
