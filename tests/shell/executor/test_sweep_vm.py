"""A CPU sweep on the VM lane, through ``eps`` commands (issue 36 item 1;
docs/design/sweeps.md): one dispatch of N task rows, task i sees EPS_TASK_INDEX=i and
EPS_TASK_COUNT=N, ``eps wait`` exits 0 only when every task did and names the failed one,
``eps pull`` brings each task's outputs back, ``eps status`` shows one row with progress."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.shell.executor.test_lifecycle_vm import _valid

LINE = 'echo "$EPS_TASK_INDEX/$EPS_TASK_COUNT" > "$EPS_OUTPUT_DIR/i"; [ "$EPS_TASK_INDEX" != {bad} ]'


def test_a_sweep_is_one_dispatch_whose_tasks_run_as_task_i_of_n(eps: Any, tmp_path: Path) -> None:
    rc, out, err = eps("execute", "cpu-small", "--duration", "30s", "--sweep", "3", "--wait", "--",
                       LINE.format(bad=9))  # fmt: skip
    assert rc == 0, (out, err)
    [parent] = [r for r in eps.status() if r["parent"] is None]
    d = parent["dispatch"]
    rc, out, err = eps("pull", d, "--to", str(tmp_path / "all"))
    assert rc == 0, err
    got = sorted((p.parent.name, p.read_text().strip()) for p in (tmp_path / "all").glob("*/i"))
    assert got == [(f"{d}n1", "0/3"), (f"{d}n2", "1/3"), (f"{d}n3", "2/3")]
    rc, out, err = eps("status", d)
    assert rc == 0 and "3/3 done" in out, out
    [row] = [r for r in eps.status(d) if r["dispatch"] == d]  # checked against its schema below
    assert row["tasks"] == {"total": 3, "done": 3, "failed": 0, "running": 0, "pending": 0}, row
    assert [(t["task"], t["dispatch"], t["result"]) for t in row["task_states"]] == [
        (0, f"{d}n1", "succeeded"), (1, f"{d}n2", "succeeded"), (2, f"{d}n3", "succeeded")]
    rc, out, err = eps("status", "--json", d)
    _valid("status", out)
    rc, out, err = eps("wait", d)
    assert rc == 0, err


def test_wait_on_a_sweep_with_a_failed_task_exits_1_and_names_its_index(eps: Any) -> None:
    rc, out, err = eps("execute", "cpu-small", "--duration", "30s", "--sweep", "3", "--wait", "--",
                       LINE.format(bad=1))  # fmt: skip
    assert rc == 1, (out, err)
    d = next(r["dispatch"] for r in eps.status() if r["parent"] is None)
    rc, out, err = eps("wait", d)
    assert rc == 1
    assert f"{d} task 1 ({d}n2): failed (exit 1)" in err, err
    rc, out, err = eps("status", d)
    assert "2/3 done, 1 failed" in out, out
    import eps as api

    got = api.wait(d, env=eps.env)  # the wait document (MCP's and the Python API's)
    assert (got["exit_code"], got["failed_tasks"]) == (1, [1]), got
    _valid("wait", json.dumps(got))


def _most_alive(rows: list[Any], attempts: dict[str, list[Any]]) -> int:
    """How many tasks were alive at once: each from its first attempt (before its machine)
    to its end as the ledger recorded it (pulled, else ended)."""
    spans = [(attempts[r.id][0].started_at, r.pulled_at or r.ended_at) for r in rows]
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])  # an end before a start at a tie
    alive = most = 0
    for _, step in edges:
        alive += step
        most = max(most, alive)
    return most


def test_sweep_parallel_k_runs_at_most_k_tasks_at_once_and_all_end(eps: Any) -> None:
    import threading

    from eps.shell.service.status_rows import status
    from eps.shell.state.ledger import Ledger

    d = "esweepk"
    got: list[tuple[int, str, str]] = []
    run = threading.Thread(target=lambda: got.append(eps(
        "execute", "cpu-small", "--duration", "30s", "--sweep", "5", "--sweep-parallel", "2", "--dispatch-id", d,
        "--wait", "--", "sleep 1; echo $EPS_TASK_INDEX")))  # fmt: skip
    run.start()
    seen = []  # the sweep's progress as eps status reads it from the ledger, while it runs
    while run.is_alive():
        if (eps.state / "ledger.sqlite3").exists():
            ledger = Ledger(str(eps.state))
            rows = [r for r in status(ledger, None) if r["dispatch"] == d]
            ledger.close()
            seen += [(r["tasks"]["running"], r["tasks"]["pending"]) for r in rows if r.get("tasks")]
        run.join(0.1)
    [(rc, out, err)] = got
    assert rc == 0, (out, err)
    assert any(pending > 0 for _, pending in seen), seen  # the tasks not started yet show as pending
    assert max(running for running, _ in seen) <= 2, seen
    ledger = Ledger(str(eps.state))
    rows = ledger.children(d)
    attempts = {r.id: ledger.attempts(r.id) for r in rows}
    ledger.close()
    assert len(rows) == 5 and all(r.state == "ended" and r.exit_code == 0 for r in rows), rows
    assert all(r.ended_at is not None for r in rows)
    assert _most_alive(rows, attempts) == 2  # K at once, never more; a task that ended let the next start
    [row] = [r for r in eps.status(d) if r["dispatch"] == d]
    assert row["tasks"] == {"total": 5, "done": 5, "failed": 0, "running": 0, "pending": 0}, row


def test_logs_and_pull_of_one_task_of_a_sweep(eps: Any, tmp_path: Path) -> None:
    rc, out, err = eps("execute", "cpu-small", "--duration", "30s", "--sweep", "3", "--wait", "--",
                       'echo "task $EPS_TASK_INDEX says hi"; echo $EPS_TASK_INDEX > "$EPS_OUTPUT_DIR/i"')  # fmt: skip
    assert rc == 0, (out, err)
    d = next(r["dispatch"] for r in eps.status() if r["parent"] is None)
    def said(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.endswith(" says hi")]

    rc, out, err = eps("logs", d, "--task", "2")
    assert (rc, said(out), err) == (0, ["task 2 says hi"], ""), (rc, out, err)
    assert "task 2/3 started" in out  # the task's own log, from its wrapper's first line
    rc, out, err = eps("logs", d)  # alone: task 0, and one line saying so and how to pick another
    assert rc == 0 and said(out) == ["task 0 says hi"], (out, err)
    assert err == f"eps: {d} is a sweep of 3 tasks: this is task 0's log; eps logs {d} --task I (0..2) for another\n"
    rc, out, err = eps("logs", d, "--task", "1", "--json")
    got = _valid("logs", out)
    assert (got["task"], [p["dispatch"] for p in got["logs"]]) == (1, [f"{d}n2"]), got
    assert said(got["logs"][0]["text"]) == ["task 1 says hi"] and "note" not in got
    rc, out, err = eps("logs", d, "--tail", "5")
    assert rc == 0 and said(out) == ["task 0 says hi"] and "this is task 0's log" in err, (out, err)
    for argv, why in (([d, "--task", "3"], f"--task 3: sweep {d} has tasks 0..2"),
                       ([f"{d}n1", "--task", "0"], f"--task 0: {d}n1 is not a sweep"),
                       ([d, "--task", "-1"], "--task")):  # fmt: skip
        rc, out, err = eps("logs", *argv)
        assert rc == 2 and out == "" and why in err and err.count("\n") == 1, (argv, rc, out, err)
    rc, out, err = eps("pull", d, "--task", "1", "--to", str(tmp_path / "one"))
    assert rc == 0, err
    assert [p.read_text() for p in (tmp_path / "one").rglob("i")] == ["1\n"]
    rc, out, err = eps("pull", d, "--task", "5")
    assert rc == 2 and "has tasks 0..2" in err
    from eps.core.model import JobError
    from eps.shell.service.operations import Service

    svc = Service(eps.env, lane_options=eps.options)  # the MCP tool's and the Python API's call
    assert said(svc.logs(d, task=0)["logs"][0]["text"]) == ["task 0 says hi"]
    assert svc.logs(d)["note"].startswith(f"{d} is a sweep of 3 tasks")
    try:
        svc.logs(d, task=7)
        raise AssertionError("task 7 of 3 was read")
    except JobError as exc:
        assert "has tasks 0..2" in str(exc)
