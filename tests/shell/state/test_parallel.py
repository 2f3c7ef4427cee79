"""``eps.shell.util.parallel.each``: ThreadPoolExecutor.map's results, order and errors, at most
``workers`` at a time, without concurrent.futures."""

from __future__ import annotations

import threading
import time

import pytest

from eps.shell.util.parallel import each


def test_results_come_in_the_order_of_the_items_whatever_finishes_first() -> None:
    def work(i: int) -> int:
        time.sleep(0.001 * (10 - i))
        return i * i

    assert each(work, list(range(10)), 4) == [i * i for i in range(10)]
    assert each(work, [], 4) == []
    assert each(work, [3], 4) == [9]


def test_never_more_than_workers_at_once_and_every_item_once() -> None:
    lock, now, peak, seen = threading.Lock(), [0], [0], []

    def work(i: int) -> None:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
            seen.append(i)
        time.sleep(0.01)
        with lock:
            now[0] -= 1

    each(work, list(range(20)), 3)
    assert peak[0] == 3
    assert sorted(seen) == list(range(20))


def test_one_worker_runs_in_the_callers_thread() -> None:
    assert each(lambda _: threading.current_thread(), [1, 2], 1) == [threading.current_thread()] * 2


def test_the_first_items_error_is_raised_after_every_item_ran() -> None:
    ran = []

    def work(i: int) -> int:
        ran.append(i)
        if i in (2, 5):
            raise ValueError(f"item {i}")
        return i

    with pytest.raises(ValueError, match="item 2"):
        each(work, list(range(8)), 3)
    assert sorted(ran) == list(range(8))
