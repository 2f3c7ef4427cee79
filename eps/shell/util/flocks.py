"""Is a lock file held by another process?  One probe for every flock eps takes (the
supervisor's lock, each dispatch's): take it without waiting, and let go at once."""

from __future__ import annotations

import fcntl
import os


def held_elsewhere(path: str) -> bool:
    """True when another open file (another process) holds an exclusive flock on ``path``;
    False when nobody does or the file does not exist (nothing is created)."""
    if not os.path.exists(path):
        return False
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False
