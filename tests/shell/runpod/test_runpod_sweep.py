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


def test_a_cancel_while_k_tasks_run_ends_them_and_starts_none_of_the_pending(eps: Eps, both: tuple[Any, Any]) -> None:
    import threading
    import time

    from eps.shell.service.operations import Service

    runpod = both[1]
    d = "esweepcancel"
    got: list[tuple[int, str, str]] = []
    run = threading.Thread(target=lambda: got.append(eps(
        "execute", "cpu-small", "--pin", "runpod", "--sweep", "5", "--sweep-parallel", "2", "--dispatch-id", d,
        "--", "sleep 300")))  # fmt: skip
    run.start()
    deadline = time.monotonic() + 60
    while len([p for p in runpod.live_pods() if p["status"] == "RUNNING"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # a third pod would be asked for now if the pool let one through
    assert runpod.count("POST", "/v2/pods") == 2, runpod.count("POST", "/v2/pods")
    report = Service(eps.env, lane_options=eps.options).cancel(d)  # a second eps process's cancel
    run.join(60)
    assert not run.is_alive() and report["errors"] == [], report
    assert runpod.count("POST", "/v2/pods") == 2 and runpod.live_pods() == []  # the 3 pending never got a pod
    [row] = [r for r in eps.status(d) if r["dispatch"] == d]
    assert row["state"] == "cancelled" and row["tasks"]["running"] == 0, row
    assert len(got) == 1  # the execute came back once the cancel had ended its running tasks
    from eps.shell.state.ledger import Ledger

    ledger = Ledger(str(eps.state))
    tries = [len(ledger.attempts(f"{d}n{i}")) for i in range(1, 6)]
    ledger.close()
    assert tries == [1, 1, 0, 0, 0], tries  # tasks 0 and 1 ran; 2..4 waited and were never tried


def test_under_the_supervisor_too_k_pods_at_once_and_all_end(eps: Eps, both: tuple[Any, Any]) -> None:
    import os
    import time

    from eps.shell.run.ownership import pid_path

    runpod = both[1]  # the default: a supervisor process walks the sweep (its own settings, from the config)
    eps.config.write_text(eps.config.read_text().replace("supervise = 'inline'\n", "supervisor_idle_s = 1\n"))
    rc, _, err = eps("execute", "cpu-small", "--pin", "runpod", "--sweep", "4", "--sweep-parallel", "2",
                       "--dispatch-id", "esweepsup", "--", "sleep 1")  # fmt: skip
    assert rc == 0, err
    rc, _, err = eps("wait", "esweepsup")
    assert rc == 0, err
    assert (runpod.peak_live, runpod.count("POST", "/v2/pods"), runpod.live_pods()) == (2, 4, [])
    deadline = time.monotonic() + 30  # idle, the supervisor leaves: no process left behind
    while os.path.exists(pid_path(str(eps.state))) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(pid_path(str(eps.state)))
