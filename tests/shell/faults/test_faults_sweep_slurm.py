"""A sweep on the real SLURM test cluster, through ``eps`` itself (issue 36 item 1;
docs/design/sweeps.md): ``eps execute --sweep N --sweep-parallel K`` records one dispatch
with N task rows and submits them as ONE ``sbatch --array`` (the wrapper's call log counts
the sbatch calls); each task runs as task i of N; ``eps wait`` and ``eps status`` see the
sweep as one dispatch; ``eps cancel`` leaves nothing of it pending or running."""

from __future__ import annotations

import json
import uuid

import pytest
from faults_support import Eps, SlurmTrap, squeue, wait_until

pytestmark = pytest.mark.slurm

SAY = 'echo "$EPS_TASK_INDEX of $EPS_TASK_COUNT" > "$EPS_OUTPUT_DIR/me"; sleep {s}'


def _id() -> str:
    return "f" + uuid.uuid4().hex[:10]


def test_a_sweep_is_one_dispatch_one_array_and_every_task_runs_as_task_i_of_n(seps: Eps, strap: SlurmTrap) -> None:
    d = _id()
    rc, events, err = seps.execute("--dispatch-id", d, "--wait", "--sweep", "3", "--sweep-parallel", "2",
                                   "gpu-1", "--duration", "10m", "--", "bash", "-c", SAY.format(s=1),
                                   timeout_s=120)  # fmt: skip
    assert rc == 0, (events, err)
    assert [q for q, _ in strap.sbatches()] == ["high-eur"]  # one sbatch for the three tasks
    tasks = [f"{d}n{i}" for i in (1, 2, 3)]
    for i, t in enumerate(tasks):
        row = seps.dispatch(t)
        assert (row["parent"], row["state"], row["exit_code"]) == (d, "ended", 0), row
        assert row["handle"]["id"].endswith(f"_{i}")  # task i of the array: J_i
        assert (seps.state / "outputs" / t / "me").read_text() == f"{i} of 3\n"
    rc, out, err = seps.run("status", "--json", d)  # reconciles first: the sweep has ended when its tasks have
    assert rc == 0, err
    assert seps.dispatch(d)["state"] == "ended"
    [row] = [r for r in json.loads(out)["dispatches"] if r["dispatch"] == d]
    assert row["tasks"] == {"total": 3, "done": 3, "failed": 0, "running": 0, "pending": 0}, row
    assert seps.run("wait", d)[0] == 0
    assert squeue(f"eps-{d}") == []


def test_cancel_of_a_sweep_leaves_nothing_pending_or_running(seps: Eps, strap: SlurmTrap) -> None:
    d = _id()
    rc, events, err = seps.execute("--dispatch-id", d, "--sweep", "4", "--sweep-parallel", "1",
                                   "gpu-1", "--duration", "10m", "--", "bash", "-c", SAY.format(s=300),
                                   timeout_s=60)  # fmt: skip
    assert rc == 0, (events, err)
    wait_until(lambda: any(s == "RUNNING" for _, s, *_ in squeue(f"eps-{d}")), 30, "a task of the sweep to run")
    assert len(strap.sbatches()) == 1
    rc, out, err = seps.run("cancel", d)
    assert rc == 0, (out, err)
    wait_until(lambda: squeue(f"eps-{d}") == [], 30, "nothing of the sweep in the queue")
    states = {seps.dispatch(f"{d}n{i}")["state"] for i in (1, 2, 3, 4)}
    assert states == {"cancelled"}, states
    [row] = [r for r in json.loads(seps.run("status", "--json", d)[1])["dispatches"] if r["dispatch"] == d]
    assert row["tasks"]["total"] == 4 and row["tasks"]["running"] == row["tasks"]["pending"] == 0, row
