"""Outputs held back for lack of disk: what ``eps status`` shows of a dispatch whose pull (or
sync) to the state directory was not started because it would have left this machine's disk
below its margin (:mod:`eps.core.room`).

One small file per such dispatch, ``<state>/held/<dispatch>.json`` (the sizes, the line and
when), written when a pull is held back and removed when one of its pulls to the state
directory is done; a record of this machine's own disk, so it lives beside the ledger, not in
it.  Light on purpose: ``eps status`` reads it (one directory listing) and imports nothing of
ssh or rsync for it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from typing import Any

from eps.core.room import Room

#: The folder of the records, in the state directory.
HELD_DIR = "held"


def _path(state_dir: str, dispatch: str) -> str:
    return os.path.join(state_dir, HELD_DIR, f"{dispatch}.json")


def record(state_dir: str, dispatch: str, room: Room, at: float, *, during: str) -> None:
    """Note that ``dispatch``'s outputs are held back (``during``: ``pull`` or ``sync``).  The
    disk may be full: a record that cannot be written is left out (the line is said anyway)."""
    data = {**room.as_data(), "during": during, "at": at}
    folder = os.path.join(state_dir, HELD_DIR)
    tmp = f"{_path(state_dir, dispatch)}.{os.getpid()}.tmp"
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, _path(state_dir, dispatch))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def clear(state_dir: str, dispatch: str) -> None:
    """Its outputs came back (or can no longer): no longer held back."""
    with contextlib.suppress(OSError):
        os.unlink(_path(state_dir, dispatch))


def held(state_dir: str, dispatches: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """The records there are (of ``dispatches``), by dispatch; one that cannot be read is left out."""
    try:
        names = os.listdir(os.path.join(state_dir, HELD_DIR))
    except OSError:
        return {}
    wanted = None if dispatches is None else set(dispatches)
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        dispatch = name.removesuffix(".json")
        if not name.endswith(".json") or (wanted is not None and dispatch not in wanted):
            continue
        with contextlib.suppress(OSError, ValueError):
            with open(_path(state_dir, dispatch), encoding="utf-8") as fh:
                data = json.load(fh)
            if isinstance(data, dict):
                out[dispatch] = data
    return out


def annotate(state_dir: str, rows: list[dict[str, Any]]) -> None:
    """Each status row gets ``held_back``: the record while its outputs wait for room (the job
    runs, or its machine is kept for ``eps pull``), else ``None``."""
    found = held(state_dir, (r["dispatch"] for r in rows))
    for r in rows:
        waiting = r["state"] == "started" or r.get("kept_since") is not None
        r["held_back"] = found.get(r["dispatch"]) if waiting else None
