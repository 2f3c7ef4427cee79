"""A sweep on the real SLURM test cluster, through ``eps`` itself (issue 36 item 1;
docs/design/sweeps.md): ``eps execute --sweep N --sweep-parallel K`` records one dispatch
with N task rows and submits them as ONE ``sbatch --array`` (the wrapper's call log counts
the sbatch calls); each task runs as task i of N; ``eps wait`` and ``eps status`` see the
sweep as one dispatch.  The array's pending tasks walk the ladder together (after the park
cap the pending ones move as ONE array, the running ones stay; the array's own %K does not
run the clock); ``eps cancel`` is one scancel per array and leaves nothing pending or
running; an array submitted but not recorded (the supervisor killed after its sbatch) is
adopted by its job name, task by task, never submitted again."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from faults_support import DetachedEps, Eps, GcpTrap, SlurmTrap, squeue, wait_until

pytestmark = pytest.mark.slurm

SAY = 'echo "$EPS_TASK_INDEX of $EPS_TASK_COUNT" > "$EPS_OUTPUT_DIR/me"; sleep {s}'


def _id() -> str:
    return "f" + uuid.uuid4().hex[:10]


@pytest.fixture
def high_allows_two(slurm_cluster: Path, gpu_cap: Callable[[str, int], None]) -> None:
    """high-eur's per-user cap lowered to 2 GPUs (the cluster's own cap: a third 1-GPU task
    pends there with QOSMaxGRESPerUser while normal-eur has room), waited for in slurmctld;
    put back at the end (``gpu_cap``)."""
    gpu_cap("high-eur", 2)


def test_a_sweep_is_one_dispatch_one_array_and_every_task_runs_as_task_i_of_n(seps: Eps, strap: SlurmTrap) -> None:
    d = _id()
    rc, events, err = seps.execute("--dispatch-id", d, "--wait", "--sweep", "3", "--sweep-parallel", "2",
                                   "gpu-1", "--duration", "10m", "--", "bash", "-c", SAY.format(s=4),
                                   timeout_s=120)  # fmt: skip
    assert rc == 0, (events, err)
    # one sbatch for the three tasks: task 2 waited longer than the park cap (2 s) for the array's
    # own %2 (JobArrayTaskLimit), which does not run the park clock, so it did not move
    assert [q for q, _ in strap.sbatches()] == ["high-eur"]
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


def _scancels(strap: SlurmTrap, after: int) -> list[str]:
    return [c for c in strap.calls()[after:] if c.startswith("scancel")]


def test_cancel_of_a_parked_sweep_is_one_scancel_and_leaves_nothing(seps: Eps, strap: SlurmTrap) -> None:
    """4 tasks, one at a time (``%1``): the walk parks on the array (its own %K does not run the
    park clock); ``eps cancel`` stops it, with ONE ``scancel J`` for the array."""
    d = _id()
    walk = seps.start("execute", "--json", "--dispatch-id", d, "--sweep", "4", "--sweep-parallel", "1",
                      "gpu-1", "--duration", "10m", "--", "bash", "-c", SAY.format(s=300))  # fmt: skip
    wait_until(lambda: any(s == "RUNNING" for _, s, *_ in squeue(f"eps-{d}")), 30, "a task of the sweep to run")
    [(_, array)] = strap.sbatches()
    seen = len(strap.calls())
    rc, out, err = seps.run("cancel", d, timeout_s=90)
    assert rc == 0, (out, err)
    walk.wait(30)  # the walk saw the cancel and stopped
    assert "Traceback" not in walk.err, walk.err
    assert squeue(f"eps-{d}") == []
    assert _scancels(strap, seen) == [f"scancel -u root {array}"], strap.calls()[seen:]
    assert len(strap.sbatches()) == 1
    states = {seps.dispatch(f"{d}n{i}")["state"] for i in (1, 2, 3, 4)}
    assert states == {"cancelled"}, states
    [row] = [r for r in json.loads(seps.run("status", "--json", d)[1])["dispatches"] if r["dispatch"] == d]
    assert row["tasks"]["total"] == 4 and row["tasks"]["running"] == row["tasks"]["pending"] == 0, row


def test_cancel_of_a_sweep_on_two_arrays_is_one_scancel_per_array(
    seps: Eps, strap: SlurmTrap, high_allows_two: None
) -> None:
    """6 tasks, high-eur allowing 2: 2 run on the first array, 4 on the second (the move);
    ``eps cancel`` is two scancels, one per array, and leaves nothing pending or running."""
    d = _id()
    rc, events, err = seps.execute("--dispatch-id", d, "--sweep", "6",
                                   "gpu-1", "--duration", "10m", "--", "bash", "-c", SAY.format(s=300),
                                   timeout_s=90)  # fmt: skip
    assert rc == 0, (events, err)
    arrays = [job.split(";")[0] for _, job in strap.sbatches()]
    assert len(arrays) == 2, strap.calls()
    wait_until(lambda: len([s for _, s, *_ in squeue(f"eps-{d}") if s == "RUNNING"]) == 6, 30, "all six to run")
    seen = len(strap.calls())
    rc, out, err = seps.run("cancel", d, timeout_s=90)
    assert rc == 0, (out, err)
    assert squeue(f"eps-{d}") == []
    assert sorted(_scancels(strap, seen)) == sorted(f"scancel -u root {a}" for a in arrays), strap.calls()[seen:]
    states = {seps.dispatch(f"{d}n{i}")["state"] for i in range(1, 7)}
    assert states == {"cancelled"}, states


def test_the_pending_tasks_of_an_array_move_down_the_ladder_as_one_array(
    seps: Eps, strap: SlurmTrap, high_allows_two: None
) -> None:
    """6 gpu-1 tasks, high-eur allowing 2 at once: one array on high-eur, 2 run; after the park
    cap the 4 pending move as ONE array to normal-eur and the 2 running stay; all 6 end."""
    d = _id()
    rc, events, err = seps.execute("--dispatch-id", d, "--wait", "--sweep", "6",
                                   "gpu-1", "--duration", "10m", "--", "bash", "-c", SAY.format(s=6),
                                   timeout_s=120)  # fmt: skip
    assert rc == 0, (events, err)
    sbatches = strap.sbatches()
    assert [q for q, _ in sbatches] == ["high-eur", "normal-eur"], strap.calls()  # two sbatch calls in all
    first, second = (job.split(";")[0] for _, job in sbatches)
    calls = strap.calls()
    before = calls[: calls.index(f"sbatch normal-eur {sbatches[1][1]}")]
    scancels = [c for c in before if c.startswith("scancel")]
    assert scancels == [f"scancel -u root --state=PENDING {first}"], calls  # the pending tasks alone moved
    stayed, moved = [], []
    for i in range(6):
        t = f"{d}n{i + 1}"
        row = seps.dispatch(t)
        assert (row["state"], row["exit_code"]) == ("ended", 0), row
        assert (seps.state / "outputs" / t / "me").read_text() == f"{i} of 6\n"
        tried = [(a["qos"], a["state"], a["outcome"], a["handle"]) for a in seps.attempts(t)]
        if row["handle"]["id"] == f"{first}_{i}":
            assert tried == [("high-eur", "ended", "ended", f"{first}_{i}")], tried
            stayed.append(i)
        else:  # an attempt per tier, each with the task's own handle there
            assert row["handle"]["id"] == f"{second}_{i}", row
            assert tried == [("high-eur", "advanced", "park_timeout", f"{first}_{i}"),
                             ("normal-eur", "ended", "ended", f"{second}_{i}")], tried  # fmt: skip
            moved.append(i)
    assert (len(stayed), len(moved)) == (2, 4), (stayed, moved)
    advanced = [e for e in events if e.get("event") == "advanced"]
    assert [(e["dispatch"], e["qos"], e["id"]) for e in advanced] == [(d, "high-eur", first)], advanced
    rc, out, err = seps.run("status", "--json", d)
    assert rc == 0, err
    [row] = [r for r in json.loads(out)["dispatches"] if r["dispatch"] == d]
    assert row["tasks"] == {"total": 6, "done": 6, "failed": 0, "running": 0, "pending": 0}, row
    assert seps.run("wait", d)[0] == 0
    assert squeue(f"eps-{d}") == []


@pytest.fixture
def dseps(detached_eps: DetachedEps) -> Eps:
    """Detached eps (a supervisor walks each dispatch) against the real cluster."""
    return detached_eps(slurm=True)


def test_an_array_submitted_but_not_recorded_is_adopted_never_submitted_again(dseps: Eps) -> None:
    """The supervisor killed right after the array's sbatch ran, before its answer was
    recorded: each task's attempt is on record without a handle.  ``eps execute --resume``:
    reconcile finds the array by its job name (``eps-D``), gives each task row its own
    ``J_i``, and the sweep ends 3/3 with the one sbatch it made."""
    strap = SlurmTrap(dseps.faults)
    d = _id()
    strap.arm("sbatch", "after")
    caller = dseps.start("execute", "--json", "--dispatch-id", d, "--sweep", "3",
                         "gpu-1", "--duration", "10m", "--", "bash", "-c", SAY.format(s=15))  # fmt: skip
    wait_until(lambda: strap.fired() == ["KILL after sbatch"], 60, "the supervisor killed after the sbatch")
    caller.kill()
    caller.wait(10)
    [(_, array)] = strap.sbatches()
    tasks = [f"{d}n{i}" for i in (1, 2, 3)]
    for t in tasks:
        [a] = dseps.attempts(t)
        assert (a["state"], a["qos"], a["handle"]) == ("intent", "high-eur", None), a
    assert {j.split("_")[0] for j, *_ in squeue(f"eps-{d}")} == {array}  # the array lives on, unrecorded
    rc, events, err = dseps.execute("--resume", d, timeout_s=90)
    assert rc == 0, (events, err)
    assert dseps.run("wait", d, timeout_s=90)[0] == 0
    assert strap.sbatches() == [("high-eur", array)]  # never submitted again
    for i, t in enumerate(tasks):
        row = dseps.dispatch(t)
        assert (row["state"], row["exit_code"], row["handle"]["id"]) == ("ended", 0, f"{array}_{i}"), row
        [a] = dseps.attempts(t)
        assert (a["state"], a["handle"]) == ("ended", f"{array}_{i}"), a
        assert (dseps.state / "outputs" / t / "me").read_text() == f"{i} of 3\n"
    assert squeue(f"eps-{d}") == []


def test_a_sweep_whose_supervisor_died_parked_on_its_array_moves_its_pending_tasks_as_one_array(
    dseps: Eps, high_allows_two: None
) -> None:
    """6 gpu-1 tasks, high-eur allowing 2: the supervisor is SIGKILLed parked on the array, as
    the 2 s cap ran out (just before the move's scancel).  ``eps execute --resume`` parks on
    that array again as one, the time already parked kept (the cap has passed: it moves at
    once), and moves the 4 pending tasks as ONE array: 2 sbatch calls in all, all 6 end.  The
    two running tasks run 15 s: still running when the resume moves the others (else high-eur
    has room again and the parked ones start there)."""
    from eps.shell.state.events import log_path

    strap = SlurmTrap(dseps.faults)
    d = _id()
    strap.arm("scancel", "before")
    caller = dseps.start("execute", "--json", "--dispatch-id", d, "--sweep", "6",
                         "gpu-1", "--duration", "10m", "--", "bash", "-c", SAY.format(s=15))  # fmt: skip
    wait_until(lambda: strap.fired() == ["KILL before scancel"], 60, "the supervisor killed at the move")
    caller.kill()
    caller.wait(10)
    [(_, first)] = strap.sbatches()
    tasks = [f"{d}n{i}" for i in range(1, 7)]
    parked = [t for t in tasks if [a["state"] for a in dseps.attempts(t)] == ["pending"]]
    assert len(parked) == 4, [dseps.attempts(t) for t in tasks]
    time.sleep(3)  # the time parked so far (the cap and these 3 s) is what the resumed park goes on from
    since = time.time() - min(dseps.attempts(t)[0]["started_at"] for t in parked)
    rc, events, err = dseps.execute("--resume", d, timeout_s=90)
    assert rc == 0, (events, err)
    assert dseps.run("wait", d, timeout_s=120)[0] == 0
    assert [q for q, _ in strap.sbatches()] == ["high-eur", "normal-eur"], strap.calls()  # the 4 as one array
    for i, t in enumerate(tasks):
        row = dseps.dispatch(t)
        assert (row["state"], row["exit_code"]) == ("ended", 0), row
        tried = [(a["qos"], a["state"], a["outcome"]) for a in dseps.attempts(t)]
        if t in parked:
            assert tried[0] == ("high-eur", "advanced", "park_timeout") and tried[1][:2] == ("normal-eur", "ended")
        else:
            assert tried[0][:2] == ("high-eur", "ended"), tried
        assert (dseps.state / "outputs" / t / "me").read_text() == f"{i} of 6\n"
    lines = Path(log_path(str(dseps.state), d)).read_text().splitlines()
    advanced = [e for e in map(json.loads, lines) if e.get("event") == "advanced"]
    assert [(e["qos"], e["id"]) for e in advanced] == [("high-eur", first)], advanced  # moved once, as one
    assert advanced[0]["elapsed_s"] >= since, (since, advanced)  # not a new 2 s park: it went on from there
    assert squeue(f"eps-{d}") == []


def test_when_the_ladder_is_spent_the_pending_tasks_go_to_a_paid_lane_task_by_task(
    seps: Eps, strap: SlurmTrap, gtrap: GcpTrap, blocker: str
) -> None:
    """2 gpu-8 tasks pend on every tier (the blocker holds a GPU): ONE array per tier (3 sbatch
    calls, not 6), each moved with an attempt per tier; then each task is its own GCP machine."""
    d = _id()
    rc, events, err = seps.execute("--dispatch-id", d, "--sweep", "2", "gpu-8", "--duration", "10m",
                                   "--", "sleep", "300", timeout_s=120)  # fmt: skip
    assert rc == 0, (events, err)
    assert [q for q, _ in strap.sbatches()] == ["high-eur", "normal-eur", "low-eur"], strap.calls()
    machines = set()
    for i in (1, 2):
        t = f"{d}n{i}"
        row = seps.dispatch(t)
        assert (row["state"], row["handle"]["lane"]) == ("started", "gcp"), row
        machines.add(row["handle"]["id"])
        tried = [(a["lane"], a["qos"], a["state"], a["outcome"]) for a in seps.attempts(t)]
        assert tried[:3] == [("fellows", q, "advanced", "park_timeout") for q in ("high-eur", "normal-eur", "low-eur")]
        assert [x[0] for x in tried[3:]] == ["gcp"], tried
    assert len(machines) == 2
    assert squeue(f"eps-{d}") == []
    rc, out, err = seps.run("cancel", d, timeout_s=90)
    assert rc == 0, (out, err)


@pytest.mark.parametrize("kill", ["after the move's scancel", "before the next tier's sbatch"])
def test_a_sweep_whose_supervisor_died_in_a_move_sends_the_moved_tasks_on_as_one_array(
    dseps: Eps, high_allows_two: None, kill: str
) -> None:
    """6 gpu-1 tasks, high-eur allowing 2: the supervisor is SIGKILLed in the move of the 4
    pending tasks, after its ``scancel`` (the tasks are nowhere, their attempts still pending)
    or just before the next tier's sbatch (their attempts advanced, and recorded on
    normal-eur).  ``eps execute --resume`` submits the 4 on normal-eur as ONE array (the
    cluster's rule 4), not one sbatch each: 2 sbatch calls in all, and all 6 end."""
    strap = SlurmTrap(dseps.faults)
    d = _id()
    if kill.startswith("after"):
        strap.arm("scancel", "after")
    caller = dseps.start("execute", "--json", "--dispatch-id", d, "--sweep", "6",
                         "gpu-1", "--duration", "10m", "--", "bash", "-c", SAY.format(s=6))  # fmt: skip
    if kill.startswith("before"):
        wait_until(lambda: len(strap.sbatches()) == 1, 60, "the first array")
        strap.arm("sbatch", "before")
    fired = "KILL after scancel" if kill.startswith("after") else "KILL before sbatch"
    wait_until(lambda: strap.fired() == [fired], 60, f"the supervisor killed {kill}")
    caller.kill()
    caller.wait(10)
    tasks = [f"{d}n{i}" for i in range(1, 7)]
    rc, events, err = dseps.execute("--resume", d, timeout_s=90)
    assert rc == 0, (events, err)
    assert dseps.run("wait", d, timeout_s=120)[0] == 0
    assert [q for q, _ in strap.sbatches()] == ["high-eur", "normal-eur"], strap.calls()  # the 4 as one array
    moved = 0
    for i, t in enumerate(tasks):
        row = dseps.dispatch(t)
        assert (row["state"], row["exit_code"]) == ("ended", 0), row
        ran = [a["qos"] for a in dseps.attempts(t) if a["outcome"] != "not_submitted"]
        moved += ran == ["high-eur", "normal-eur"]
        assert ran in (["high-eur"], ["high-eur", "normal-eur"]), dseps.attempts(t)
        assert (dseps.state / "outputs" / t / "me").read_text() == f"{i} of 6\n"
    assert moved == 4
    assert squeue(f"eps-{d}") == []
