"""``eps status``'s ``outputs``: where a dispatch's outputs live now (the pulled copy here, the
storage location, the machine or cluster that ran it, the last sync, or nowhere), as the pure
:func:`eps.core.ends.outputs_where` decides from what the ledger and this state directory
say.  One directory look per row, only for a row neither pulled nor in storage."""

from __future__ import annotations

import os
from typing import Any

from eps.core.ends import outputs_where
from eps.core.model import LaneKind
from eps.shell.state.ledger import DispatchRow


def outputs_of(state_dir: str, row: DispatchRow, *, kept: bool) -> dict[str, Any]:
    """``{"where": ..., "at": ...}``: ``at`` is the local directory of a pulled or synced copy,
    the storage URL of one in storage, else ``None``."""
    local = os.path.join(state_dir, "outputs", row.id)
    pulled, stored = row.pulled_at is not None, row.stored_at is not None
    where = outputs_where(
        row.state,
        ran=row.started_at is not None or row.handle is not None,
        pulled=pulled,
        stored=stored,
        kept=kept,
        synced=not (pulled or stored) and _holds_files(local),
        on_cluster=row.handle is not None and row.handle.kind is LaneKind.SLURM,
    )
    at = None
    if where in ("pulled", "synced"):
        at = local
    elif where == "storage":
        from eps.shell.run.stored import where as place

        at = getattr(place(row), "outputs_url", None)
    return {"where": where, "at": at}


def _holds_files(path: str) -> bool:
    try:
        with os.scandir(path) as it:
            return any(True for _ in it)
    except OSError:
        return False
