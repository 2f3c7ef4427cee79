"""One way to wait for something: :func:`poll_until`, with the clock and the sleep injected."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(
    probe: Callable[[], T | None],
    *,
    timeout_s: float,
    interval_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T | None:
    """Call ``probe`` until it returns something other than ``None`` (which is returned):
    once at once, then every ``interval_s`` while the deadline ``timeout_s`` away has not
    come; ``None`` when it has (no probe is made at or after the deadline)."""
    deadline = clock() + timeout_s
    while True:
        found = probe()
        if found is not None:
            return found
        left = deadline - clock()
        if left <= 0:
            return None
        sleep(min(interval_s, left))
        if clock() >= deadline:
            return None
