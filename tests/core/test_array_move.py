"""The decisions of a sweep's array on its SLURM ladder, pure (``eps/core/array_move.py``,
docs/design/sweeps.md): which tasks an array takes, which a resume finds owed, whether the
next step is an array, which of the array's pending tasks are still pending at a poll (they
move down the ladder together), whether the sweep was cancelled, and which arrays ``eps
cancel`` reaches.  Tables of readable rows, and a property: through a poll and the cancel
every pending task is kept (started where it is) or moved, exactly once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eps.core.array_move import (
    AfterPoll,
    FoundParked,
    after_cancel,
    after_poll,
    array_rung,
    arrays_to_cancel,
    found_parked,
    not_yet_walked,
    running_tasks,
    sweep_cancelled,
    walk_owed,
)
from eps.core.model import CapacitySnapshot, Job, LaneKind, Provisioning, Rung
from eps.core.outcome import AttemptRecord
from eps.core.router import plan
from eps.core.states import AttemptState, DispatchState
from eps.core.tables import DEFAULT_GRANTS
from eps.core.walk import Start, Step, Stop

W, INT, S, P, E, C = (DispatchState.WALKING, DispatchState.INTERRUPTED, DispatchState.STARTED,
                    DispatchState.PREEMPTED, DispatchState.ENDED, DispatchState.CANCELLED)  # fmt: skip


# --- which tasks an array takes, which a resume finds owed ---------------------------------------


@pytest.mark.parametrize(
    ("tasks", "taken"),
    [
        ({0: (W, 0), 1: (W, 0), 2: (W, 0)}, (0, 1, 2)),  # a fresh sweep: every task, one array
        ({0: (W, 1), 1: (W, 0), 2: (W, 0)}, (1, 2)),  # task 0 has an attempt: walked from it
        ({0: (S, 1), 1: (INT, 1), 2: (W, 0)}, (2,)),  # started, interrupted: not the array's
        ({2: (W, 0), 0: (W, 0)}, (2, 0)),  # in the order given
        ({0: (E, 1), 1: (C, 0)}, ()),  # nothing left to walk
        ({}, ()),
    ],
    ids=["fresh", "one-tried", "mixed", "order-kept", "none-walking", "empty"],
)
def test_an_array_takes_the_tasks_still_walking_with_no_attempt(
    tasks: dict[int, tuple[DispatchState, int]], taken: tuple[int, ...]
) -> None:
    assert not_yet_walked(tasks) == taken


@pytest.mark.parametrize(
    ("states", "owed"),
    [
        ({0: W, 1: INT, 2: S}, (0, 1)),  # a started task is not parked
        ({0: P, 1: E, 2: C}, ()),  # preempted is walked on its own, never parked on an array
        ({3: INT, 1: W}, (3, 1)),
    ],
    ids=["walking-interrupted", "none", "order-kept"],
)
def test_a_resume_looks_for_the_array_of_the_tasks_whose_walk_is_owed(
    states: dict[int, DispatchState], owed: tuple[int, ...]
) -> None:
    assert walk_owed(states) == owed


# --- is the next step one array? -------------------------------------------------------------------

SLURM = Rung("fellows", LaneKind.SLURM, Provisioning.QUEUE, "", qos="normal-eur", gpus=1)
GCP = Rung("gcp", LaneKind.GCP, Provisioning.SPOT, "", machine="g2-standard-4", gpus=1)
PLAN = plan(Job("gpu-1", 3600), CapacitySnapshot(), DEFAULT_GRANTS, None)


@pytest.mark.parametrize(
    ("step", "rung"),
    [
        (Start(SLURM, PLAN), SLURM),  # the next tier: the tasks move as one array
        (Start(GCP, PLAN), None),  # a paid lane: the ladder is spent, task by task
        (Stop("no rung left"), None),
    ],
    ids=["slurm-tier", "paid-lane", "stop"],
)
def test_the_tasks_go_on_as_one_array_only_to_a_slurm_tier(step: Step, rung: Rung | None) -> None:
    assert array_rung(step) == rung


# --- at a poll: still pending, or started -------------------------------------------------------


@pytest.mark.parametrize(
    ("pending", "polled", "after"),
    [
        ((0, 1, 2), {0: "PENDING", 1: "PENDING", 2: "PENDING"}, ((0, 1, 2), ())),
        ((0, 1, 2), {0: "RUNNING", 1: "PENDING", 2: "PENDING"}, ((1, 2), (0,))),
        ((0, 1, 2), {1: "PENDING"}, ((1,), (0, 2))),  # not listed: over already (a short task)
        ((2, 3), {2: "COMPLETING", 3: "CONFIGURING"}, ((), (2, 3))),
        ((5, 3, 4), {3: "PENDING", 4: "PENDING", 5: "PENDING"}, ((5, 3, 4), ())),  # the order kept
        ((), {0: "RUNNING"}, ((), ())),  # a task not pending before is none of the poll's
    ],
    ids=["all-pending", "one-started", "one-gone", "none-pending", "order-kept", "nothing-pending"],
)
def test_a_poll_keeps_pending_the_tasks_it_lists_pending_and_starts_the_rest(
    pending: tuple[int, ...], polled: dict[int, str], after: tuple[tuple[int, ...], tuple[int, ...]]
) -> None:
    assert after_poll(pending, polled) == AfterPoll(*after)


@pytest.mark.parametrize(
    ("states", "running"),
    [(["PENDING", "PENDING"], 0), (["RUNNING", "PENDING", "COMPLETING"], 2), ([], 0)],
    ids=["none", "two", "empty"],
)
def test_every_task_not_pending_holds_a_place_of_k(states: list[str], running: int) -> None:
    assert running_tasks(states) == running


TASK_STATE = st.sampled_from(["PENDING", "RUNNING", "COMPLETING", "COMPLETED", "CANCELLED", "FAILED", "GONE"])


@settings(max_examples=200, deadline=None)
@given(
    pending=st.lists(st.integers(0, 30), unique=True, max_size=12),
    polled=st.dictionaries(st.integers(0, 30), TASK_STATE, max_size=16),
    cancelled=st.dictionaries(st.integers(0, 30), TASK_STATE.filter(lambda s: s != "PENDING"), max_size=16),
)
def test_through_a_poll_and_the_cancel_every_pending_task_is_kept_or_moved_exactly_once(
    pending: list[int], polled: dict[int, str], cancelled: dict[int, str]
) -> None:
    """Each task pending on the array is, after one poll and the cancel of those still
    pending, exactly one of: started at the poll, started between poll and cancel (both kept
    where they are), or moved down the ladder; and only the still-pending ones can move."""
    poll = after_poll(pending, polled)
    assert set(poll.pending).isdisjoint(poll.started)
    assert sorted([*poll.pending, *poll.started]) == sorted(pending)
    assert all(polled.get(i) == "PENDING" for i in poll.pending)
    moved = after_cancel(poll.pending, cancelled)
    assert moved is not None  # nothing is still PENDING after the cancel here
    outcomes = [*poll.started, *moved.started, *moved.moved]
    assert sorted(outcomes) == sorted(pending)
    assert set(moved.moved) <= set(poll.pending)


# --- where a dead walk's parked tasks are when a resume looks ---------------------------------------


@pytest.mark.parametrize(
    ("parked", "states", "found"),
    [
        ((2, 3), {2: "PENDING", 3: "PENDING"}, FoundParked((2, 3), (), ())),  # killed before the move's cancel
        ((2, 3), {2: "CANCELLED", 3: "CANCELLED"}, FoundParked((), (2, 3), ())),  # after it: they move on
        ((2, 3), {}, FoundParked((), (2, 3), ())),  # neither squeue nor sacct knows them (GONE)
        ((2, 3, 4), {2: "RUNNING", 3: "CANCELLED", 4: "PENDING"}, FoundParked((4,), (3,), (2,))),
        ((5,), {5: "COMPLETED"}, FoundParked((), (), (5,))),  # it ran meanwhile: it stays, adopted
        ((3, 1), {1: "FAILED", 3: "GONE"}, FoundParked((), (3,), (1,))),  # in task order
    ],
    ids=["still-pending", "cancelled", "gone", "mixed", "completed", "sorted"],
)
def test_a_resume_finds_each_parked_task_pending_moved_or_started(
    parked: tuple[int, ...], states: dict[int, str], found: FoundParked
) -> None:
    assert found_parked(parked, states) == found


@given(parked=st.lists(st.integers(0, 30), max_size=12), states=st.dictionaries(st.integers(0, 30), TASK_STATE))
def test_each_parked_task_is_found_in_exactly_one_place(parked: list[int], states: dict[int, str]) -> None:
    found = found_parked(parked, states)
    assert sorted([*found.pending, *found.moved, *found.started]) == sorted(set(parked))
    assert all(states.get(i) == "PENDING" for i in found.pending)
    assert all(states.get(i, "GONE") in ("CANCELLED", "GONE") for i in found.moved)


# --- cancelled under the walk; the arrays eps cancel reaches ----------------------------------------


@pytest.mark.parametrize(
    ("states", "cancelled"),
    [([W, W, W], False), ([C, W], True), ([W, None], True), ([S, INT, P], False), ([], False)],
    ids=["walking", "parent-cancelled", "a-row-gone", "others", "none"],
)
def test_the_array_walk_stops_when_the_sweep_or_a_task_is_cancelled_or_gone(
    states: list[DispatchState | None], cancelled: bool
) -> None:
    assert sweep_cancelled(states) is cancelled


def _attempt(state: AttemptState, handle: str | None, rung: Rung = SLURM) -> AttemptRecord:
    return AttemptRecord(1, rung, state, handle=handle)


A = AttemptState


@pytest.mark.parametrize(
    ("tasks", "arrays"),
    [
        ([("D", [_attempt(A.PENDING, "7_0")]), ("D", [_attempt(A.RUNNING, "7_1")])], [("fellows", "D", "7")]),
        ([("D", [_attempt(A.ADVANCED, "7_0"), _attempt(A.PENDING, "9_0")]), ("D", [_attempt(A.RUNNING, "7_1")])],
         [("fellows", "D", "9"), ("fellows", "D", "7")]),  # two arrays live: one scancel each
        ([("D", [_attempt(A.ENDED, "7_0"), _attempt(A.FAILED, "8_0")])], []),  # nothing live
        ([("D", [_attempt(A.SUBMITTED, "7")])], []),  # one job, not an array's task
        ([("D", [_attempt(A.RUNNING, "gcp-vm-1", GCP)])], []),  # a paid lane's machine
        ([(None, [_attempt(A.RUNNING, "7_0")])], []),  # a row of no sweep
        ([("D", [_attempt(A.PENDING, None)])], []),  # no handle yet
    ],
    ids=["one-array", "two-arrays", "none-live", "plain-job", "paid-lane", "no-sweep", "no-handle"],
)  # fmt: skip
def test_cancel_of_a_sweep_reaches_each_live_array_once(
    tasks: list[tuple[str | None, list[AttemptRecord]]], arrays: list[tuple[str, str, str]]
) -> None:
    assert list(arrays_to_cancel(tasks)) == arrays
