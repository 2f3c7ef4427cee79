"""``eps cancel`` of a sweep on a SLURM cluster: one ``scancel J`` per array, not one per task
(the cluster's rule 4; docs/design/sweeps.md).  Apart from :mod:`eps.shell.run.sweeps`, which
settles through reconcile, so that reconcile's cancel does not import the sweeps' walk."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from returns.result import Failure

from eps.core.array_move import arrays_to_cancel

if TYPE_CHECKING:
    from eps.shell.lanes import Lanes
    from eps.shell.lanes.slurm.lane import SlurmLane
    from eps.shell.state.ledger import DispatchRow, Ledger


def cancel_arrays(ledger: Ledger, lanes: Lanes, rows: Iterable[DispatchRow]) -> list[str]:
    """``eps cancel`` of a sweep: ``scancel J`` once for each array of it that still has a
    live task (each task attempt's handle ``J_i`` names its array), not once per task; then
    each task is settled as any job is.  Returns what could not be confirmed (one line each)."""
    tasks = [(r.parent, [a.record() for a in ledger.attempts(r.id)] if r.parent is not None else []) for r in rows]
    errors = []
    for lane_name, sweep, array in arrays_to_cancel(tasks):
        lane: SlurmLane = lanes.get(lane_name)  # type: ignore[assignment]
        done = lane.cancel_array(sweep, array)
        if isinstance(done, Failure):
            errors.append(f"{sweep}: {done.failure().message}")
    return errors
