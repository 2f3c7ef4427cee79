"""``each(work, items, workers)``: ``[work(i) for i in items]``, at most ``workers`` at a time.

What ``ThreadPoolExecutor.map`` does for the reconcile of ``eps status``, without importing
``concurrent.futures`` (which brings ``logging``: about 20 ms of a status while two jobs
run, the whole of what the rest of it costs in a busy loop of an agent's)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def each(work: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
    """The results in the order of ``items``; the first item's exception that raised one is
    raised again once every started item has finished (as ``ThreadPoolExecutor.map`` does
    when its results are read)."""
    if len(items) <= 1 or workers <= 1:
        return [work(i) for i in items]
    results: list[R | None] = [None] * len(items)
    errors: dict[int, BaseException] = {}
    lock = threading.Lock()
    following = iter(range(len(items)))

    def run() -> None:
        while True:
            with lock:
                k = next(following, None)
            if k is None:
                return
            try:
                results[k] = work(items[k])
            except BaseException as exc:  # raised again below, in the caller's thread
                errors[k] = exc

    threads = [threading.Thread(target=run, daemon=True) for _ in range(min(workers, len(items)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[min(errors)]
    return results  # type: ignore[return-value]  # every slot was filled: no error
