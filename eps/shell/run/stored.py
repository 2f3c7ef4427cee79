"""A job with storage (``--storage``, ``[storage] url``): its outputs and log are where its
machine put them (:mod:`eps.core.storage`), not on this machine.

- At its end, once its wrapper says the last upload is confirmed (``stored`` is 0), the
  dispatch ends with its outputs in storage and its machine is released at once: nothing is
  copied to the shared VM (:func:`confirmed`).  A last upload that failed falls back to the
  pull to the state directory, as without storage.
- ``eps pull`` brings them from storage, not from the machine (it may be long gone), under
  the same disk guard as any pull (:mod:`eps.core.room`): sized first (``rclone size``), not
  started when it would leave the disk below its margin (:func:`fetch`).
- ``eps logs`` of such a job once its machine is gone reads the log from storage
  (:func:`fetch_log`: brought into the state directory's log file, then read as a kept log).
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from returns.result import Failure, Result, Success

from eps.core.jobscript import JobProgress
from eps.core.room import Incoming, Room, margin_bytes, room_for
from eps.core.storage import Place, StorageError, parse_url, place

if TYPE_CHECKING:
    from eps.shell.lanes import Lanes
    from eps.shell.state.ledger import DispatchRow


def where(row: DispatchRow) -> Place | None:
    """The task's place in storage (this run's log), or ``None`` without storage."""
    if not row.job.storage:
        return None
    return place(parse_url(row.job.storage), row.id, row.job.task_index, row.job.restart)


def confirmed(row: DispatchRow, progress: JobProgress) -> Place | None:
    """The job ended and its machine confirmed the last upload to storage: where they are."""
    found = where(row)
    return found if found is not None and progress.ended and progress.stored == 0 else None


def fetch(lanes: Lanes, row: DispatchRow, out: str, log: str) -> Result[None, Room | str]:
    """The outputs from storage into ``out`` and this run's log to ``log``, when that leaves
    this machine's disk its margin (else the :class:`Room` that says why; nothing started)."""
    from eps.shell.lanes.jobs import disk_at
    from eps.shell.run.storage import local_conf, rclone, said, size

    found = where(row)
    if found is None:
        return Failure("the job has no storage")
    settings = lanes.settings
    margin = margin_bytes(settings.policy.thresholds.vm_disk_margin_gb)
    scheme = parse_url(row.job.storage or "").scheme
    try:
        with local_conf(settings.state_dir, [scheme], settings.storage, lanes.env) as conf:
            got, count = size(conf, found.outputs)
            log_size, _ = size(conf, found.log)
            os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
            parts = [(Incoming(out, got, count), disk_at(out)),
                     (Incoming(os.path.dirname(log), log_size, 1), disk_at(os.path.dirname(log)))]  # fmt: skip
            room = room_for(parts, margin)
            if not room.fits:
                return Failure(room)
            os.makedirs(out, exist_ok=True)
            copied = rclone(conf, "copy", found.outputs, out, timeout_s=None)
            if copied.returncode != 0:
                return Failure(f"from {found.outputs_url}: {said(copied.stderr)}")
            return _log_to(conf, found, log)
    except StorageError as exc:
        return Failure(str(exc))
    except OSError as exc:
        return Failure(f"cannot write to {out}: {exc.strerror or exc}")


def _log_to(conf: str, found: Place, log: str) -> Result[None, Room | str]:
    """This run's log from storage to ``log``: a new name beside it, renamed over it once whole."""
    from eps.shell.run.storage import rclone, said

    tmp = f"{log}.{os.getpid()}.part"
    done = rclone(conf, "copyto", found.log, tmp, timeout_s=None)
    if done.returncode != 0:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return Failure(f"the log from {found.log_url}: {said(done.stderr)}")
    os.replace(tmp, log)
    return Success(None)


def fetch_log(lanes: Lanes, row: DispatchRow, log: str) -> str | None:
    """Bring the job's log from storage to ``log`` (its machine is gone); why not, or ``None``."""
    from eps.shell.run.storage import local_conf

    found = where(row)
    if found is None:
        return "the job has no storage"
    try:
        with local_conf(lanes.settings.state_dir, [found.log.split(":", 1)[0]], lanes.settings.storage,
                        lanes.env) as conf:  # fmt: skip
            os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
            got = _log_to(conf, found, log)
    except (StorageError, OSError) as exc:
        return str(exc)
    return None if isinstance(got, Success) else str(got.failure())
