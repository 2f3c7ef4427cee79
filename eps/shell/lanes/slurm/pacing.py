"""Submissions to one SLURM cluster from this host: one at a time, spaced by a gap.

fellows' hard rule 4: never sbatch in a loop, a burst of submissions crashes slurmd.
Every eps process on this host (many dispatches at once, threads of one eps, several
eps) submits to a cluster through the same :class:`Pacer`: an exclusive ``flock`` on
``<directory>/<cluster>.submit.lock`` makes the sbatch calls take turns, and the same
file holds the time the last one returned, so the next waits until ``gap_s`` after it.
The lock is the file, not memory: it holds across processes, and the kernel releases
it when its holder dies.  A gap of 0 still serializes.
"""

from __future__ import annotations

import fcntl
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# The file holds one float (seconds since the epoch, as ``repr`` writes it: read back exactly).
_RECORD_MAX = 64


class Pacer:
    """Turns at submitting to ``cluster``, shared through files under ``directory``."""

    def __init__(
        self,
        directory: str,
        cluster: str,
        gap_s: float,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not cluster or cluster in (".", "..") or "/" in cluster or "\0" in cluster:
            raise ValueError(f"cluster name {cluster!r} cannot name a lock file")
        if math.isnan(gap_s) or gap_s < 0:
            raise ValueError(f"submit gap must be at least 0 s, got {gap_s!r}")
        self.directory = directory
        self.cluster = cluster
        self.gap_s = float(gap_s)
        self.path = os.path.join(directory, f"{cluster}.submit.lock")
        self._clock = clock
        self._sleep = sleep

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Wait for this host's turn at the cluster and until ``gap_s`` after the last
        submission, then hold the turn while the body submits.  The next turn waits the
        gap from when the body ended, returned or raised (the sbatch may have reached the
        controller either way)."""
        os.makedirs(self.directory, exist_ok=True)
        # Each turn opens its own file: flock locks belong to the open file, so threads of
        # one process exclude each other as processes do.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            last = _read_last(fd)
            if last is not None:
                # At most one gap: a clock set back (or a file from the future) never blocks for long.
                wait = min(self.gap_s, last + self.gap_s - self._clock())
                if wait > 0:
                    self._sleep(wait)
            try:
                yield
            finally:
                _write_last(fd, self._clock())
        finally:
            os.close(fd)  # releases the lock


def _read_last(fd: int) -> float | None:
    """The time the last submission returned, ``None`` when none is recorded (a new file,
    or one cut short by a crash: the lock still serializes, at most one gap is skipped)."""
    raw = os.pread(fd, _RECORD_MAX, 0)
    try:
        last = float(raw.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        return None
    return None if math.isnan(last) else last


def _write_last(fd: int, when: float) -> None:
    data = f"{when!r}\n".encode("ascii")
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))
