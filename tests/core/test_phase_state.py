"""A pipeline phase's state from its row, and the state of a dispatch of many tasks that
``--after`` waits for (``eps/core/pipeline_run.py``: :func:`phase_state`, :func:`together`):
tables of readable rows, and a property of :func:`together`."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eps.core.pipeline_run import DEPENDENCY_FAILED, PhaseState, phase_state, together
from eps.core.states import DispatchState

D, PS = DispatchState, PhaseState
ROW_IDS = [
    *("no-row", "waiting", "started", "handle", "said", "running", "held", "interrupted", "succeeded"),
    *("not-back", "exited-2", "dependency-failed", "failed-said", "failed", "cancelled"),
]


@pytest.mark.parametrize(
    ("state", "row", "expected"),
    [
        (None, {}, PS.WAITING),  # no row yet
        (D.WALKING, {}, PS.WAITING),  # recorded, never started, nothing said
        (D.WALKING, {"started": True}, PS.RUNNING),
        (D.WALKING, {"handle": True}, PS.RUNNING),
        (D.WALKING, {"message": "storage: no bucket"}, PS.RUNNING),  # said something: not waiting
        (D.STARTED, {"result": "running"}, PS.RUNNING),
        (D.HELD, {}, PS.RUNNING),
        (D.INTERRUPTED, {}, PS.RUNNING),
        (D.ENDED, {"result": "succeeded", "back": True}, PS.SUCCEEDED),
        (D.ENDED, {"result": "succeeded", "back": False}, PS.FAILED),  # its outputs did not come back
        (D.ENDED, {"result": "exited 2", "back": True}, PS.FAILED),
        (D.FAILED, {"message": f"{DEPENDENCY_FAILED}: needs 'prep'"}, PS.DEPENDENCY_FAILED),
        (D.FAILED, {"message": "no lane took it"}, PS.FAILED),
        (D.FAILED, {}, PS.FAILED),
        (D.CANCELLED, {}, PS.FAILED),
    ],
    ids=ROW_IDS,
)
def test_a_phases_state_from_its_row(state: DispatchState | None, row: dict[str, Any], expected: PhaseState) -> None:
    assert phase_state(state, **row) is expected


@pytest.mark.parametrize(
    ("tasks", "expected"),
    [
        ([PS.SUCCEEDED, PS.SUCCEEDED], PS.SUCCEEDED),
        ([PS.SUCCEEDED, PS.RUNNING], PS.RUNNING),
        ([PS.RUNNING, PS.FAILED], PS.FAILED),  # failed as soon as one did not succeed
        ([PS.WAITING, PS.DEPENDENCY_FAILED], PS.FAILED),
        ([PS.WAITING], PS.RUNNING),
    ],
    ids=["all-succeeded", "one-running", "one-failed", "one-doomed", "waiting"],
)
def test_a_dispatch_of_many_tasks_is_succeeded_failed_or_running(tasks: list[PhaseState], expected: PhaseState) -> None:
    assert together(tasks) is expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(list(PhaseState)), min_size=1, max_size=8))
def test_together_is_succeeded_only_when_every_task_is_and_failed_when_one_failed(tasks: list[PhaseState]) -> None:
    got = together(tasks)
    assert (got is PS.SUCCEEDED) == all(t is PS.SUCCEEDED for t in tasks)
    if any(t in (PS.FAILED, PS.DEPENDENCY_FAILED) for t in tasks):
        assert got is PS.FAILED
    assert got in (PS.SUCCEEDED, PS.FAILED, PS.RUNNING)
