"""Sweeps on RunPod through ``eps`` commands (issue 36 item 1, docs/design/sweeps.md "On
paid lanes"): each task is its own pod, walked by the ``--count`` machinery; a CPU sweep of
50 is one row in ``eps status``, one ``eps wait`` and one ``eps cancel``; ``--sweep-parallel
K`` keeps at most K pods alive at once (the RunPod test server's own count), a task that
ends letting the next start.  Every pod is the test sshd: each task is shipped, run,
pulled and released for real."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.shell.executor.executor_support import Eps, fakes, ssh_support


@pytest.fixture
def both() -> Iterator[tuple[Any, Any]]:
    yield from fakes()


@pytest.fixture
def eps(tmp_path: Path, both: tuple[Any, Any], sshd: Path) -> Iterator[Eps]:
    yield Eps(tmp_path, *both)
    ssh_support.stop_machine_jobs(tmp_path)


def _sweep(eps: Eps) -> str:
    rows = eps.status()
    assert [r["parent"] for r in rows] == [None], [r["dispatch"] for r in rows]  # one row: the sweep, tasks in it
    roots = rows
    return str(roots[0]["dispatch"])


def test_a_cpu_sweep_of_50_on_runpod_ends_as_one_dispatch(eps: Eps, both: tuple[Any, Any]) -> None:
    runpod = both[1]
    rc, out, err = eps("execute", "cpu-small", "--pin", "runpod", "--sweep", "50", "--wait", "--",
                       'test "$EPS_TASK_COUNT" = 50')  # fmt: skip
    assert rc == 0, (out[-2000:], err[-2000:])
    d = _sweep(eps)
    [row] = [r for r in eps.status(d) if r["dispatch"] == d]
    assert row["tasks"] == {"total": 50, "done": 50, "failed": 0, "running": 0, "pending": 0}, row
    assert sorted(t["task"] for t in row["task_states"]) == list(range(50))
    rc, out, err = eps("wait", d)
    assert rc == 0, err
    assert runpod.count("POST", "/v2/pods") == 50  # one pod per task, each released at its end
    assert runpod.live_pods() == []


def test_one_cancel_ends_a_running_sweep_of_50_and_leaves_no_pod(eps: Eps, both: tuple[Any, Any]) -> None:
    runpod = both[1]
    rc, out, err = eps("execute", "cpu-small", "--pin", "runpod", "--sweep", "50", "--", "sleep 300")
    assert rc == 0, (out[-2000:], err[-2000:])
    d = _sweep(eps)
    assert len(runpod.live_pods()) == 50
    [row] = [r for r in eps.status(d) if r["dispatch"] == d]
    assert row["tasks"]["running"] == 50, row["tasks"]
    rc, out, err = eps("cancel", d)
    assert rc == 0, err
    assert runpod.live_pods() == []  # every pod terminated: nothing is billed from here
    created = runpod.count("POST", "/v2/pods")
    rc, out, err = eps("status", d)  # reads the ledger and asks the providers again: nothing comes back
    assert rc == 0 and runpod.count("POST", "/v2/pods") == created == 50 and runpod.live_pods() == []
    [row] = [r for r in eps.status(d) if r["dispatch"] == d]
    assert row["state"] == "cancelled", row
    assert row["tasks"]["running"] == 0 and row["tasks"]["total"] == 50, row["tasks"]


def test_sweep_parallel_keeps_k_pods_alive_at_once_and_all_end(eps: Eps, both: tuple[Any, Any]) -> None:
    runpod = both[1]
    rc, out, err = eps("execute", "cpu-small", "--pin", "runpod", "--sweep", "4", "--sweep-parallel", "2",
                       "--wait", "--", "sleep 1")  # fmt: skip
    assert rc == 0, (out[-2000:], err[-2000:])
    d = _sweep(eps)
    assert runpod.peak_live == 2  # the server's own count: K pods at once, never more
    assert runpod.count("POST", "/v2/pods") == 4 and runpod.live_pods() == []
    [row] = [r for r in eps.status(d) if r["dispatch"] == d]
    assert row["tasks"] == {"total": 4, "done": 4, "failed": 0, "running": 0, "pending": 0}, row
    rc, out, err = eps("wait", d)
    assert rc == 0, err
