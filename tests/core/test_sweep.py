"""Sweeps in the pure core (issue 36, item 1; docs/design/sweeps.md): a sweep's plan is the
plan of one of its tasks plus one note (P5: N jobs of the intent, never one job split), the
``--array`` value of a set of task indices, and the array render of ``render_sbatch``, run
by a real bash.  The routing cases are data: ``tests/core/scenarios/sweeps.json``."""

from __future__ import annotations

import itertools
import os
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eps.core.array_move import AfterCancel, after_cancel, clock_runs, cluster_reason, moved_at_once, task_index
from eps.core.model import CapacitySnapshot, ClusterConfig, Job, JobError, LaneKind, Provisioning, Rung, evolve
from eps.core.outcome import AttemptRecord
from eps.core.router import plan
from eps.core.sbatch import TASK_MARK, SbatchArray, SbatchRenderError, render_sbatch
from eps.core.sweep import MAX_SWEEP_TASKS, array_indices, array_spec, check_sweep, sweep_note
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY, FELLOWS

#: A SLURM cluster without the fellows row's trap and environment: its script ends in the command.
LAB = ClusterConfig(name="lab", partition="batch", account=None, qos_ladder=(), gpus_per_node=4, gpu_model="A100")
STEP = Job("gpu-1", 3600, command=("bash", f"/work/eps/d1/{TASK_MARK}/run.sh", "run"))


def _rung(cluster: ClusterConfig, qos: str | None = None, gpus: int = 1) -> Rung:
    return Rung(cluster.name, LaneKind.SLURM, Provisioning.QUEUE, "test", qos=qos, gpus=gpus)


# --- the plan of a sweep is the plan of its task -----------------------------------------------

INTENTS = [i.name for i in DEFAULT_POLICY.intents]


@settings(max_examples=300, deadline=None)
@given(
    intent=st.sampled_from(INTENTS),
    duration=st.one_of(st.none(), st.sampled_from([30, 600, 3600, 3 * 3600, 3 * 86400])),
    restartable=st.booleans(),
    n=st.integers(2, MAX_SWEEP_TASKS),
    k=st.one_of(st.none(), st.integers(1, MAX_SWEEP_TASKS)),
    count=st.sampled_from([1, 2, 4]),
    pin=st.sampled_from([None, "fellows", "gcp", "runpod"]),
    index=st.integers(0, MAX_SWEEP_TASKS - 1),
)
def test_p5_a_sweeps_plan_is_its_tasks_plan_and_one_note(
    intent: str, duration: int | None, restartable: bool, n: int, k: int | None, count: int, pin: str | None,
    index: int,
) -> None:  # fmt: skip
    """P5: each task is one job of the intent, planned exactly as that job alone (with its
    task index, as the walker will record it); the sweep only adds the note saying so."""
    k = None if k is None else min(k, n)
    job = Job(intent, duration, restartable, count=count, pin=pin, sweep=n, sweep_parallel=k)
    task = evolve(job, sweep=1, sweep_parallel=None, task_index=index % n, task_count=n)
    try:
        alone = plan(task, CapacitySnapshot(), DEFAULT_GRANTS, None)
    except JobError as exc:  # what the task cannot be, the sweep cannot be either, and says so alike
        with pytest.raises(JobError) as info:
            plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None)
        assert info.value.code in (exc.code, "sweep_and_count")
        return
    if alone.resource.value == "cpu" and count > 1:
        with pytest.raises(JobError) as info:
            plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None)
        assert info.value.code == "sweep_and_count" and "\n" not in str(info.value)
        return
    swept = plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None)
    assert swept._replace(notes=()) == alone._replace(notes=())
    slurm = [r.lane for r in alone.rungs if r.kind is LaneKind.SLURM]
    note = sweep_note(job, alone.resolved_intent, slurm)
    assert note is not None and swept.notes == (*alone.notes, note)
    assert f"sweep: {n} tasks of {alone.resolved_intent}" in note and "(P5)" in note
    assert ("sbatch --array=" in note) == bool(slurm)
    assert ("at most" in note) == (k is not None and k < n)


def test_no_sweep_says_nothing_and_changes_nothing() -> None:
    job = Job("gpu-1", 3600)
    assert sweep_note(job, "gpu-1", ["fellows"]) is None
    assert plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None) == plan(
        evolve(job, sweep=1), CapacitySnapshot(), DEFAULT_GRANTS, None
    )


@pytest.mark.parametrize(("job", "code", "says"), [
    (Job("gpu-1", sweep=0), "bad_sweep", "sweep must be a whole number of tasks 1..1000, got 0"),
    (Job("gpu-1", sweep=2.5), "bad_sweep", "got 2.5"),  # type: ignore[arg-type]
    (Job("gpu-1", sweep=6, sweep_parallel=0), "bad_sweep_parallel", "sweep parallel must be a whole number >= 1"),
    (Job("gpu-1", sweep=6, sweep_parallel=True), "bad_sweep_parallel", "got True"),  # type: ignore[arg-type]
    (Job("gpu-1", sweep_parallel=2), "bad_sweep_parallel", "sweep parallel 2 needs a sweep"),
    (Job("gpu-1", sweep=6, sweep_parallel=7), "bad_sweep_parallel", "sweep parallel 7 is more than the sweep's 6"),
    (Job("cpu-small", count=2, sweep=3), "sweep_and_count", "give one (--sweep 6 runs that many tasks)"),
])  # fmt: skip
def test_a_sweep_that_cannot_be_is_one_line_with_a_stable_code(job: Job, code: str, says: str) -> None:
    with pytest.raises(JobError) as info:
        plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None)
    assert info.value.code == code and says in str(info.value) and "\n" not in str(info.value)
    resource = DEFAULT_POLICY.intent(job.intent)
    assert resource is not None
    with pytest.raises(JobError):
        check_sweep(job, resource.resource)


# --- the --array value ---------------------------------------------------------------------------


@pytest.mark.parametrize(("indices", "limit", "spec"), [
    (range(6), 2, "0-5%2"),
    (range(6), None, "0-5"),
    ([0], None, "0"),
    ([5, 3, 4, 1], None, "1,3-5"),
    ([2, 3, 4, 5], 1, "2-5%1"),
    ([0, 2, 4], 3, "0,2,4%3"),
    ([999, 998, 0], None, "0,998-999"),
])  # fmt: skip
def test_array_spec(indices: list[int], limit: int | None, spec: str) -> None:
    assert array_spec(indices, limit) == spec
    assert array_indices(spec) == (tuple(sorted(indices)), limit)


@pytest.mark.parametrize(("indices", "limit"), [([], None), ([-1, 0], None), ([1, 1], None), ([0], 0)])
def test_array_spec_refuses_what_no_array_is(indices: list[int], limit: int | None) -> None:
    with pytest.raises(ValueError):
        array_spec(indices, limit)


@pytest.mark.parametrize("spec", ["", "a", "1-", "3-1", "1,,2", "0-5%0", "0-5%x", "-1"])
def test_array_indices_refuses_what_array_spec_never_writes(spec: str) -> None:
    with pytest.raises(ValueError):
        array_indices(spec)


@given(st.sets(st.integers(0, 1000), min_size=1), st.one_of(st.none(), st.integers(1, 1000)))
def test_array_spec_round_trips_and_is_short(indices: set[int], limit: int | None) -> None:
    spec = array_spec(indices, limit)
    assert array_indices(spec) == (tuple(sorted(indices)), limit)
    runs = spec.partition("%")[0].split(",")
    # each run is maximal: no two runs touch, so a range of N consecutive tasks is one "A-B"
    ends = [(int(r.split("-")[0]), int(r.split("-")[-1])) for r in runs]
    assert all(b[0] > a[1] + 1 for a, b in itertools.pairwise(ends))


# --- the array render ----------------------------------------------------------------------------


def test_an_array_render_is_the_plain_render_with_one_array_line_and_the_task_in_its_step() -> None:
    plain = render_sbatch(STEP, FELLOWS, _rung(FELLOWS, "high-eur"), dispatch_id="d0001", user="jdoe")
    array = render_sbatch(STEP, FELLOWS, _rung(FELLOWS, "high-eur"), dispatch_id="d0001", user="jdoe",
                          array=SbatchArray(tuple(range(6)), 2))  # fmt: skip
    p, a = plain.splitlines(), array.splitlines()
    at = p.index("#SBATCH --job-name=eps-d0001-jdoe") + 1
    assert a[at] == "#SBATCH --array=0-5%2"
    assert a[:at] + a[at + 1 :] == [
        line.replace(f"'/work/eps/d1/{TASK_MARK}/run.sh'", '/work/eps/d1/"$SLURM_ARRAY_TASK_ID"/run.sh')
        for line in p
    ]
    assert "bash /work/eps/d1/\"$SLURM_ARRAY_TASK_ID\"/run.sh run &" in a  # the fellows trap keeps its shape
    assert "--export" not in array and "CUDA_VISIBLE_DEVICES" not in array  # the cluster's hard rules hold


@pytest.mark.parametrize(("indices", "at_once", "line"), [
    ((0, 1, 2, 3, 4, 5), None, "#SBATCH --array=0-5"),
    ((0, 1, 2, 3, 4, 5), 6, "#SBATCH --array=0-5"),  # a limit of all of them is no limit
    ((0, 1, 2, 3, 4, 5), 9, "#SBATCH --array=0-5"),
    ((2, 3, 4, 5), 1, "#SBATCH --array=2-5%1"),  # the pending tasks, moved to the next tier
])  # fmt: skip
def test_the_array_line_says_the_tasks_and_their_limit(indices: tuple[int, ...], at_once: int | None,
                                                       line: str) -> None:  # fmt: skip
    script = render_sbatch(STEP, LAB, _rung(LAB), dispatch_id="d0001", array=SbatchArray(indices, at_once))
    assert [x for x in script.splitlines() if x.startswith("#SBATCH --array")] == [line]


def test_an_array_whose_step_names_no_task_or_holds_no_task_is_refused() -> None:
    same = evolve(STEP, command=("bash", "/work/eps/d1/0/run.sh", "run"))
    with pytest.raises(SbatchRenderError, match="names no task"):
        render_sbatch(same, LAB, _rung(LAB), dispatch_id="d0001", array=SbatchArray((0, 1)))
    with pytest.raises(SbatchRenderError, match="at least one task"):
        render_sbatch(STEP, LAB, _rung(LAB), dispatch_id="d0001", array=SbatchArray(()))


def test_without_an_array_the_token_is_plain_text() -> None:
    script = render_sbatch(STEP, LAB, _rung(LAB), dispatch_id="d0001")
    assert "--array" not in script and "SLURM_ARRAY_TASK_ID" not in script
    assert script.splitlines()[-1] == f"bash '/work/eps/d1/{TASK_MARK}/run.sh' run"


def _step_words(command: tuple[str, ...], task: int) -> list[str]:
    """What a real bash makes of the array script's step, as task ``task`` of the array."""
    job = evolve(STEP, command=("printf", "%s\\0", *command))
    script = render_sbatch(job, LAB, _rung(LAB), dispatch_id="d0001", array=SbatchArray((task,)))
    step = script.split("\n")[-2]  # bash's lines (splitlines would also split at U+2028 and friends)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLURM_ARRAY_TASK_ID": str(task)}
    out = subprocess.run(["bash", "-c", step], env=env, capture_output=True, check=True).stdout
    return out.decode().split("\0")[:-1]


def test_bash_runs_each_task_its_own_wrapper() -> None:
    words = (f"/w d/it's/{TASK_MARK}/run.sh", f"x{TASK_MARK}y{TASK_MARK}", f"{TASK_MARK}", "FOO=$HOME",
             f"A={TASK_MARK}")  # fmt: skip
    assert _step_words(words, 4) == ["/w d/it's/4/run.sh", "x4y4", "4", "FOO=$HOME", "A=4"]


def test_a_first_word_that_reads_as_an_assignment_is_still_the_command() -> None:
    job = evolve(STEP, command=(f"A={TASK_MARK}",))
    step = render_sbatch(job, LAB, _rung(LAB), dispatch_id="d0001", array=SbatchArray((0, 1))).splitlines()[-1]
    assert step == "'A='\"$SLURM_ARRAY_TASK_ID\""


_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_TEXT, st.booleans()), min_size=1, max_size=4), st.integers(0, 999))
def test_any_word_with_the_task_in_it_reaches_the_step_exactly(parts: list[tuple[str, bool]], task: int) -> None:
    word = "".join(text + (TASK_MARK if with_task else "") for text, with_task in parts) + TASK_MARK
    assert _step_words((word, "end"), task) == [word.replace(TASK_MARK, str(task)), "end"]


def test_a_sweeps_progress_counts_each_task_once_by_its_state_and_result() -> None:
    from eps.core.states import DispatchState as D
    from eps.core.sweep import progress_line, task_progress

    tasks = [(D.ENDED, "succeeded"), (D.ENDED, "failed (exit 2)"), (D.STARTED, "running"), (D.HELD, "queued"),
             (D.WALKING, "walking"), (D.FAILED, "nothing started"), (D.CANCELLED, "cancelled")]  # fmt: skip
    got = task_progress(tasks)
    assert got == {"total": 7, "done": 1, "failed": 3, "running": 1, "pending": 2}
    assert progress_line(got) == "1/7 done, 1 running, 2 pending, 3 failed"
    assert progress_line(task_progress([(D.ENDED, "succeeded")] * 6)) == "6/6 done"


def test_task_i_of_a_sweeps_array_is_its_task_row_and_lives_in_the_sweeps_root() -> None:
    from eps.core.names import copy_id, sweep_of_task, task_of_array

    assert task_of_array("esw1", "4711_0") == copy_id("esw1", 1) == "esw1n1"
    assert task_of_array("esw1", "4711_5") == "esw1n6"
    assert task_of_array("esw1", "4711") == "esw1"  # a job of its own: the dispatch's
    assert task_of_array(None, "4711_2") is None  # not eps's
    assert sweep_of_task("esw1n6", "4711_5") == "esw1"
    assert sweep_of_task("esw1n6", "4711_4") is None  # task 4 is esw1n5, not esw1n6
    assert sweep_of_task("esw1n1", "4711") is None  # not an array task: the row's own root


# --- the ladder of an array's pending tasks (eps.core.array_move) -------------------------------


@pytest.mark.parametrize(
    ("reasons", "runs", "shown"),
    [
        (["JobArrayTaskLimit", "JobArrayTaskLimit"], False, None),  # only its own %K: the clock stands
        (["JobArrayTaskLimit", "QOSMaxGRESPerUser"], True, "QOSMaxGRESPerUser"),  # a QoS cap
        (["Priority"], True, "Priority"),
        (["Resources", "JobArrayTaskLimit"], True, "Resources"),
        ([None], True, None),  # not looked at yet: it waits for the cluster, as one job does
        ([], False, None),
    ],
)
def test_the_park_clock_runs_only_for_a_reason_of_the_cluster(
    reasons: list[str | None], runs: bool, shown: str | None
) -> None:
    assert clock_runs(reasons) is runs
    assert cluster_reason(reasons) == shown


@pytest.mark.parametrize(
    ("k", "running", "at"),
    [(None, 2, None), (4, 2, 2), (4, 0, 4), (2, 2, 1), (2, 5, 1), (1, 0, 1)],
)
def test_the_moved_array_runs_what_is_left_of_k_at_least_one(k: int | None, running: int, at: int | None) -> None:
    assert moved_at_once(k, running) == at


@pytest.mark.parametrize(
    ("pending", "states", "after"),
    [
        ((2, 3), {2: "CANCELLED", 3: "CANCELLED"}, AfterCancel((2, 3), ())),
        ((2, 3), {2: "RUNNING"}, AfterCancel((3,), (2,))),  # 3 left squeue and sacct: gone unstarted
        ((2, 3, 5), {2: "COMPLETED", 3: "GONE", 5: "CANCELLED"}, AfterCancel((3, 5), (2,))),  # 2 ran and ended
        ((2, 3), {2: "CANCELLED", 3: "PENDING"}, None),  # not confirmed yet
        ((), {}, AfterCancel((), ())),
    ],
)
def test_after_the_cancel_the_unstarted_move_and_the_started_stay(
    pending: tuple[int, ...], states: dict[int, str], after: AfterCancel | None
) -> None:
    assert after_cancel(pending, states) == after


@pytest.mark.parametrize(
    ("job_id", "array", "index"),
    [("47_3", "47", 3), ("47_13", "47", 13), ("470_3", "47", None), ("47", "47", None), ("47_[2-5%2]", "47", None)],
)
def test_a_task_of_an_array_is_its_id_and_index(job_id: str, array: str, index: int | None) -> None:
    assert task_index(job_id, array) == index


def _tried(
    state: str, handle: str | None, qos: str = "high-eur", kind: LaneKind = LaneKind.SLURM, aid: int = 0
) -> AttemptRecord:
    from eps.core.states import AttemptState

    lane = "fellows" if kind is LaneKind.SLURM else "gcp"
    how = Provisioning.QUEUE if kind is LaneKind.SLURM else Provisioning.ON_DEMAND
    return AttemptRecord(1, Rung(lane, kind, how, "", qos=qos if kind is LaneKind.SLURM else None),
                         AttemptState(state), handle=handle, id=aid)  # fmt: skip


@pytest.mark.parametrize(
    ("attempts", "parked"),
    [
        # every task pending as J_i of array 47 on high-eur: parked on it as one
        ({0: [_tried("pending", "47_0", aid=1)], 1: [_tried("pending", "47_1", aid=2)]}, ("47", {0: 1, 1: 2})),
        # task 0 started (it stays, followed as a job), task 1 never got its handle: only 2 and 3 are parked
        ({0: [_tried("running", "47_0", aid=1)], 1: [_tried("intent", None, aid=2)],
          2: [_tried("pending", "47_2", aid=3)], 3: [_tried("pending", "47_3", aid=4)]}, ("47", {2: 3, 3: 4})),
        # moved once: the newest attempt counts (array 52 on normal-eur), not the advanced one on 47
        ({2: [_tried("advanced", "47_2", aid=1), _tried("pending", "52_2", "normal-eur", aid=5)],
          3: [_tried("advanced", "47_3", aid=2), _tried("pending", "52_3", "normal-eur", aid=6)]},
         ("52", {2: 5, 3: 6})),
        # a handle that is not its own task of an array, or not on SLURM: not parked on one
        ({0: [_tried("pending", "47_1", aid=1)], 1: [_tried("pending", "47", aid=2)]}, None),
        ({0: [_tried("pending", "inst-0", kind=LaneKind.GCP, aid=1)]}, None),
        ({0: [], 1: [_tried("ended", "47_1", aid=2)]}, None),
        # two arrays at once (never made by eps, but possible by hand): the one that holds more tasks
        ({0: [_tried("pending", "47_0", aid=1)], 1: [_tried("pending", "52_1", "normal-eur", aid=2)],
          2: [_tried("pending", "52_2", "normal-eur", aid=3)]}, ("52", {1: 2, 2: 3})),
    ],
)  # fmt: skip
def test_a_resumed_sweep_parks_on_the_array_its_dead_walk_left_as_one(
    attempts: dict[int, list[AttemptRecord]], parked: tuple[str, dict[int, int]] | None
) -> None:
    from eps.core.array_move import ParkedArray, parked_array

    assert parked_array(attempts) == (None if parked is None else ParkedArray(*parked))


def _moved(handle: str, qos: str = "high-eur", aid: int = 0, outcome: str = "park_timeout") -> AttemptRecord:
    from eps.core.states import Outcome

    return _tried("advanced", handle, qos, aid=aid)._replace(outcome=Outcome(outcome))


def _not_submitted(qos: str = "normal-eur", aid: int = 0) -> AttemptRecord:
    from eps.core.states import Outcome

    return _tried("gone", None, qos, aid=aid)._replace(outcome=Outcome.NOT_SUBMITTED)


@pytest.mark.parametrize(
    ("attempts", "moved"),
    [
        # the move advanced tasks 2 and 3 off array 47, then the walk died before the next sbatch
        ({2: [_moved("47_2")], 3: [_moved("47_3")]}, (2, 3)),
        # ... or it had recorded their attempts on normal-eur and died before the sbatch ran
        ({2: [_moved("47_2"), _not_submitted()], 3: [_moved("47_3"), _not_submitted()]}, (2, 3)),
        # a task started where it was (running) or still parked: not moved
        ({0: [_tried("running", "47_0")], 2: [_moved("47_2")], 3: [_tried("pending", "47_3")]}, (2,)),
        # on the next tier already (submitted there): walked from there, not moved again
        ({2: [_moved("47_2"), _tried("pending", "52_2", "normal-eur")]}, ()),
        ({2: [_moved("47_2"), _tried("gone", "52_2", "normal-eur")]}, ()),
        # advanced for another reason (a lost lane), not its own task, or no attempt: not moved
        ({2: [_moved("47_2", outcome="gone")]}, ()),
        ({2: [_moved("47_3")]}, ()),
        ({2: []}, ()),
        # two moved groups (never made by eps): the larger one
        ({1: [_moved("47_1")], 2: [_moved("52_2", "normal-eur")], 3: [_moved("52_3", "normal-eur")]}, (2, 3)),
    ],
    ids=["after-the-move", "next-tier-recorded", "others-stay", "submitted-there", "gone-there",
         "other-outcome", "not-its-task", "none", "larger-group"],
)  # fmt: skip
def test_a_resumed_sweep_sends_the_tasks_its_dead_walk_moved_on_as_one_array(
    attempts: dict[int, list[AttemptRecord]], moved: tuple[int, ...]
) -> None:
    from eps.core.array_move import moved_array

    assert moved_array(attempts) == moved
