"""A sweep's array on the real SLURM test cluster (issue 36; docs/design/sweeps.md): the
facts the design stands on, seen on a real slurmctld, with the script ``render_sbatch``
writes for an array and the lane's own ``SlurmClient``.

- one ``sbatch --array=0-3%2`` is one submission whose tasks run their own step (the
  ``{eps_task}`` of the step is ``$SLURM_ARRAY_TASK_ID``), at most 2 at once, the others
  pending for ``JobArrayTaskLimit``, each task ``J_i`` in squeue (``-r``) and sacct;
- ``scancel --state=PENDING J`` (the client's ``cancel(J, pending_only=True)``) ends the
  pending tasks and leaves the running one; the pending indices then go to the next tier
  as one array (``--array=1-3%1``): two sbatch calls for the whole sweep;
- the lane's ``start_array`` ships each task its own wrapper and submits them with one
  sbatch; each task runs as task i of N (``EPS_TASK_INDEX``/``EPS_TASK_COUNT``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from slurm_support import USER, run, wait_until

from eps.core.model import ClusterConfig, Job, LaneKind, Provisioning, Rung, evolve
from eps.core.sbatch import TASK_MARK, SbatchArray, render_sbatch
from eps.core.states import HandleState
from eps.shell.lanes.jobs import JobFiles
from eps.shell.lanes.slurm.cli import SlurmClient, subprocess_runner
from eps.shell.lanes.slurm.lane import SlurmLane

pytestmark = pytest.mark.slurm


def _steps(root: Path, tasks: range | tuple[int, ...], seconds: int) -> None:
    """Task i's own step in ``root/i/run.sh``: it says which task it is, then sleeps."""
    for i in tasks:
        (root / str(i)).mkdir(parents=True, exist_ok=True)
        (root / str(i) / "run.sh").write_text(
            f'echo "task {i} array-index $SLURM_ARRAY_TASK_ID" > "{root}/{i}/said"\nsleep {seconds}\n'
        )


def _submit(client: SlurmClient, cluster: ClusterConfig, root: Path, qos: str, array: SbatchArray) -> str:
    job = Job("gpu-1", 600, command=("bash", f"{root}/{TASK_MARK}/run.sh"))
    rung = Rung(cluster.name, LaneKind.SLURM, Provisioning.QUEUE, "sweep", qos=qos, gpus=1)
    script = render_sbatch(job, cluster, rung, dispatch_id="sweep0", user=USER, array=array)
    assert script.count("#SBATCH --array=") == 1
    return client.submit(script, [f"--output={root}/%a/sbatch.out"]).unwrap()


def _tasks(job_id: str) -> dict[str, tuple[str, str]]:
    """squeue -r: each live task of the array, ``J_i`` -> (state, reason)."""
    out = run("squeue", "-h", "-r", "-j", job_id, "-o", "%i|%T|%r")
    return {i: (s, r) for i, s, r in (line.split("|") for line in out.splitlines())}


def _ended(job_id: str) -> dict[str, str]:
    """sacct -X: each task of the array that has a record, ``J_i`` -> its state."""
    out = run("sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State")
    return {i: s.split(" ")[0] for i, s in (line.split("|") for line in out.splitlines())}


def _all_completed(job_id: str, tasks: range | tuple[int, ...]) -> None:
    """sacct has each task's own record, COMPLETED (slurmdbd writes them a moment after the end)."""
    want = {f"{job_id}_{i}": "COMPLETED" for i in tasks}
    wait_until(lambda: _ended(job_id) == want, 30, f"sacct to show {sorted(want)} COMPLETED", interval_s=0.5)


def test_a_sweep_is_one_array_whose_tasks_run_their_own_step_k_at_once(
    client: SlurmClient, fellows: ClusterConfig, tmp_path: Path
) -> None:
    _steps(tmp_path, range(4), 2)
    job_id = _submit(client, fellows, tmp_path, "high-eur", SbatchArray((0, 1, 2, 3), 2))
    running_at_once: list[int] = []
    reasons: set[str] = set()

    def done() -> bool:
        tasks = _tasks(job_id)
        running_at_once.append(sum(state == "RUNNING" for state, _ in tasks.values()))
        reasons.update(reason for state, reason in tasks.values() if state == "PENDING")
        return not tasks

    wait_until(done, 90, f"the 4 tasks of array {job_id} to end", interval_s=0.2)
    assert max(running_at_once) <= 2  # %2
    assert "JobArrayTaskLimit" in reasons  # pending for its own %K: no reason to park and move
    _all_completed(job_id, range(4))
    for i in range(4):
        assert (tmp_path / str(i) / "said").read_text() == f"task {i} array-index {i}\n"
        assert (tmp_path / str(i) / "sbatch.out").exists()  # --output=<root>/%a/sbatch.out: one per task


def test_the_pending_tasks_are_cancelled_and_move_as_one_array_while_the_running_one_stays(
    client: SlurmClient, fellows: ClusterConfig, tmp_path: Path
) -> None:
    _steps(tmp_path, range(4), 60)
    first = _submit(client, fellows, tmp_path, "high-eur", SbatchArray((0, 1, 2, 3), 1))
    wait_until(lambda: _tasks(first).get(f"{first}_0", ("", ""))[0] == "RUNNING", 30, f"{first}_0 to run")
    assert client.poll(f"{first}_0").unwrap().state == "RUNNING"  # a task is a handle of its own: J_i

    client.cancel(first, pending_only=True).unwrap()
    wait_until(lambda: list(_tasks(first)) == [f"{first}_0"], 30, "only the running task to be left")
    assert _tasks(first)[f"{first}_0"][0] == "RUNNING"

    _steps(tmp_path, (1, 2, 3), 1)  # the moved tasks end quickly (task 0's script, running, is left alone)
    moved = _submit(client, fellows, tmp_path, "normal-eur", SbatchArray((1, 2, 3), 1))
    wait_until(lambda: not _tasks(moved), 90, f"the 3 moved tasks of array {moved} to end", interval_s=0.2)
    _all_completed(moved, (1, 2, 3))
    for i in (1, 2, 3):
        assert (tmp_path / str(i) / "said").read_text() == f"task {i} array-index {i}\n"
    assert _tasks(first)[f"{first}_0"][0] == "RUNNING"  # untouched by the move
    qos = run("squeue", "-h", "-j", f"{first}_0", "-o", "%q").strip()
    assert qos == "high-eur"


def test_the_lane_ships_each_task_its_own_wrapper_and_submits_them_with_one_sbatch(
    fellows: ClusterConfig, tmp_path: Path
) -> None:
    called: list[str] = []

    def runner(argv: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]:
        called.append(argv[0])
        return subprocess_runner(argv, stdin)

    lane = SlurmLane(fellows, SlurmClient(runner), user=USER, work_root=str(tmp_path / "work"))
    said = 'echo "$EPS_TASK_INDEX of $EPS_TASK_COUNT" > "$EPS_OUTPUT_DIR/me"'
    job = Job("gpu-1", 600, command=(said,), sweep=3, sweep_parallel=2)
    rung = Rung("fellows", LaneKind.SLURM, Provisioning.QUEUE, "sweep", qos="high-eur", gpus=1)
    handle = lane.start_array(job, rung, "sweep1", (0, 1, 2), JobFiles(), at_once=2).unwrap()
    assert called.count("sbatch") == 1 and handle.state is HandleState.PENDING and handle.id.isdigit()
    wait_until(lambda: not _tasks(handle.id), 90, f"the 3 tasks of array {handle.id} to end", interval_s=0.2)
    _all_completed(handle.id, range(3))
    for i in range(3):
        root = tmp_path / "work" / "sweep1" / str(i)
        assert (root / "out" / "me").read_text() == f"{i} of 3\n"
        assert (root / "exit-code").read_text().strip() == "0" and (root / "status").read_text().strip() == "exited"
        assert (root / "sbatch.out").exists()
        task = lane.poll(evolve(handle, id=f"{handle.id}_{i}")).unwrap()  # task i is a handle of its own
        assert task.state is HandleState.FINISHED
    assert called.count("sbatch") == 1


def test_the_lane_moves_pending_tasks_cancels_an_array_at_once_and_finds_it_by_the_sweeps_name(
    fellows: ClusterConfig, tmp_path: Path
) -> None:
    """``cancel_pending``: the pending tasks leave unstarted (moved), the running one stays;
    ``cancel_array``: one scancel J ends the rest; ``was_submitted`` of task 0 finds its run in
    sacct under the sweep's name (``eps-sweep2``), and a task index the array never had is not."""
    import time

    from eps.core.array_move import AfterCancel
    from eps.core.names import copy_id
    from eps.core.outcome import AttemptRecord
    from eps.core.states import AttemptState

    called: list[str] = []

    def runner(argv: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]:
        called.append(" ".join(argv))
        return subprocess_runner(argv, stdin)

    lane = SlurmLane(fellows, SlurmClient(runner), user=USER, work_root=str(tmp_path / "work"))
    job = Job("gpu-1", 600, command=("sleep", "120"), sweep=4, sweep_parallel=1)
    rung = Rung("fellows", LaneKind.SLURM, Provisioning.QUEUE, "sweep", qos="high-eur", gpus=1)
    began = time.time()
    array = lane.start_array(job, rung, "sweep2", (0, 1, 2, 3), JobFiles(), at_once=1).unwrap().id
    wait_until(lambda: _tasks(array).get(f"{array}_0", ("", ""))[0] == "RUNNING", 30, f"{array}_0 to run")
    assert lane.cancel_pending("sweep2", array, (1, 2, 3)).unwrap() == AfterCancel((1, 2, 3), ())
    assert list(_tasks(array)) == [f"{array}_0"]  # the running task stays
    assert [j.job_id for j in lane.sweep_jobs("sweep2").unwrap()] == [f"{array}_0"]
    lane.cancel_array("sweep2", array).unwrap()
    assert _tasks(array) == {}
    assert [c for c in called if c.startswith("scancel")] == [f"scancel --state=PENDING {array}", f"scancel {array}"]
    attempt = AttemptRecord(1, rung, AttemptState.INTENT, started_at=began, name=lane.job_name("sweep2"))

    wait_until(lambda: f"{array}_0" in _ended(array), 30, "sacct to know task 0")
    assert lane.was_submitted(copy_id("sweep2", 1), attempt).unwrap() is True
    assert lane.was_submitted(copy_id("sweep2", 9), attempt).unwrap() is False
    # it ran, but was cancelled (it may never have run): not adopted as a start, the walk goes on
    assert lane.ran_unrecorded(copy_id("sweep2", 1), attempt).unwrap() is None
