"""The pure scheduling of a running pipeline (:func:`eps.core.pipeline_run.schedule`): a
table of cases, and properties over random graphs of needs and random outcomes: the order
respects ``needs``, a failed phase's dependents never start, and every phase ends."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eps.core.model import Job
from eps.core.pipeline import Phase, Pipeline
from eps.core.pipeline_run import PhaseState, schedule
from tests.core.test_pipeline_properties import dags

W, R, S, F, D = (PhaseState.WAITING, PhaseState.RUNNING, PhaseState.SUCCEEDED, PhaseState.FAILED,
                 PhaseState.DEPENDENCY_FAILED)  # fmt: skip
JOB = Job("cpu-small", 60, command=("true",))


def _pipe(*spec: tuple[str, tuple[str, ...]]) -> Pipeline:
    return Pipeline(tuple(Phase(name, JOB, needs) for name, needs in spec))


#: prep -> train -> report, plus lint (needs nothing) and plots (needs train and lint)
SHAPE = _pipe(("prep", ()), ("lint", ()), ("train", ("prep",)), ("plots", ("train", "lint")), ("report", ("train",)))

CASES: list[tuple[str, dict[str, PhaseState], tuple[str, ...], tuple[str, ...], tuple[str, ...], bool]] = [
    # name, states, ready, doomed, blocked, over
    ("nothing started: the roots start at once", {}, ("prep", "lint"), (), ("train", "plots", "report"), False),
    ("roots running: the rest blocked", {"prep": R, "lint": R}, (), (), ("train", "plots", "report"), False),
    ("prep done: train starts", {"prep": S, "lint": R}, ("train",), (), ("plots", "report"), False),
    (
        "train done, lint running: report starts, plots waits",
        {"prep": S, "lint": R, "train": S},
        ("report",),
        (),
        ("plots",),
        False,
    ),
    (
        "all needs done: plots and report start together",
        {"prep": S, "lint": S, "train": S},
        ("plots", "report"),
        (),
        (),
        False,
    ),
    (
        "prep failed: train, plots, report doomed at once",
        {"prep": F, "lint": R},
        (),
        ("train", "plots", "report"),
        (),
        False,
    ),
    ("lint failed: plots doomed, the rest goes on", {"prep": S, "lint": F}, ("train",), ("plots",), ("report",), False),
    ("every phase ended: over", {"prep": S, "lint": S, "train": S, "plots": S, "report": S}, (), (), (), True),
    ("ended after a failure: over", {"prep": S, "lint": S, "train": F, "plots": D, "report": D}, (), (), (), True),
    ("a running phase is never doomed", {"prep": F, "lint": S, "train": R}, (), (), ("plots", "report"), False),
]


@pytest.mark.parametrize(("name", "states", "ready", "doomed", "blocked", "over"), CASES, ids=[c[0] for c in CASES])
def test_schedule_table(name: str, states: dict[str, PhaseState], ready: tuple[str, ...], doomed: tuple[str, ...],
                        blocked: tuple[str, ...], over: bool) -> None:  # fmt: skip
    got = schedule(SHAPE, states)
    assert (got.ready, got.doomed, got.blocked, got.over) == (ready, doomed, blocked, over), name


def test_doomed_say_which_need_failed_and_failed_names_only_own_failures() -> None:
    got = schedule(SHAPE, {"prep": F, "lint": S})
    assert dict(got.because) == {"train": "prep", "plots": "train", "report": "train"}
    assert got.failed == ("prep",)
    assert got.dependency_failed == ("train", "plots", "report")
    done = schedule(SHAPE, {"prep": F, "lint": S, "train": D, "plots": D, "report": D})
    assert done.over and not done.succeeded and done.failed == ("prep",)
    assert schedule(SHAPE, dict.fromkeys(("prep", "lint", "train", "plots", "report"), S)).succeeded


SOME: dict[str, Any] = {"max_examples": 80, "deadline": None, "suppress_health_check": [HealthCheck.too_slow]}


@settings(**SOME)
@given(dags(), st.data())
def test_running_to_the_end_respects_needs_and_never_starts_a_failed_phases_dependents(
    pipeline: Pipeline, data: st.DataObject
) -> None:
    """Drive the schedule to its end, each started phase ending as drawn: every phase starts
    only after all it needs succeeded, a phase depending (at any depth) on a failed one never
    starts and ends dependency_failed, and the pipeline is over with every phase ended."""
    states: dict[str, PhaseState] = {}
    started: list[str] = []
    needs = {p.name: p.needs for p in pipeline.phases}
    for _ in range(4 * len(pipeline.phases) + 2):
        got = schedule(pipeline, states)
        for name in got.doomed:
            states[name] = PhaseState.DEPENDENCY_FAILED
        if got.over:  # over once its doomed are ended
            break
        for name in got.ready:
            assert all(states.get(n) is PhaseState.SUCCEEDED for n in needs[name])
            started.append(name)
            states[name] = PhaseState.RUNNING
        running = [n for n, s in states.items() if s is PhaseState.RUNNING]
        if running:  # some of them end, each succeeding or failing as drawn
            ending = data.draw(st.lists(st.sampled_from(running), min_size=1, unique=True))
            for name in ending:
                states[name] = data.draw(st.sampled_from([PhaseState.SUCCEEDED, PhaseState.FAILED]))
    final = schedule(pipeline, states)
    assert final.over, states
    assert len(started) == len(set(started))  # no phase started twice
    failed = {n for n, s in states.items() if s is PhaseState.FAILED}

    def upstream(name: str) -> set[str]:
        seen: set[str] = set()
        todo = list(needs[name])
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(needs[n])
        return seen

    for p in pipeline.phases:
        if upstream(p.name) & failed:
            assert p.name not in started and states[p.name] is PhaseState.DEPENDENCY_FAILED, (p.name, states)
        else:
            assert p.name in started, (p.name, states)
