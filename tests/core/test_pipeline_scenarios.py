"""Pipeline scenarios as data: every file in tests/core/pipelines/ is a list of
{name, rules, phases, snapshot?, expect}; each phase is {name, job, needs?, cpu?}, its job as
tests/core/scenarios' (a ``duration`` word, else the core's fields).  One parametrized test runs
them through the pure :func:`plan_pipeline`, and checks every phase's route against the same
job planned alone.  ``rules`` names the policy asks (P1-P13) a scenario pins down."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eps.core.model import JobError
from eps.core.pipeline import Phase, Pipeline, plan_pipeline
from eps.core.router import plan
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY
from tests.core.test_scenarios import _job, _snapshot

PIPELINES = Path(__file__).parent / "pipelines"


def _load() -> list[Any]:
    files = sorted(PIPELINES.glob("*.json"))
    return [pytest.param(case, id=f"{f.stem}: {case['name']}") for f in files
            for case in json.loads(f.read_text())["scenarios"]]  # fmt: skip


def _pipeline(spec: list[dict[str, Any]]) -> Pipeline:
    return Pipeline(tuple(Phase(p["name"], _job(p["job"]), tuple(p.get("needs", ())), p.get("cpu", False))
                          for p in spec))  # fmt: skip


@pytest.mark.parametrize("case", _load())
def test_pipeline_scenario(case: dict[str, Any], tmp_path: Path) -> None:
    pipeline = _pipeline(case["phases"])
    snap = _snapshot(case.get("snapshot"), tmp_path)
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(JobError) as info:
            plan_pipeline(pipeline, snap, DEFAULT_GRANTS, policy=DEFAULT_POLICY)
        exc = info.value
        assert exc.code == expect["error"]
        assert "\n" not in str(exc) and exc.plain == str(exc)
        if "error_field" in expect:
            assert exc.field == expect["error_field"]
        for text in expect.get("error_contains", ()):
            assert text in str(exc), str(exc)
        return
    got = plan_pipeline(pipeline, snap, DEFAULT_GRANTS, policy=DEFAULT_POLICY)
    for p in got.phases:  # each phase is planned exactly as the same job alone
        assert p.plan == plan(p.phase.job, snap, DEFAULT_GRANTS, None, policy=DEFAULT_POLICY)
    by = {p.phase.name: p for p in got.phases}
    for name, want in expect.items():
        if name == "waves":
            assert [list(w) for w in got.waves] == want
        elif name == "worst_case_wait_s":
            assert got.worst_case_wait_s == want
        elif name == "critical_path":
            assert list(got.critical_path) == want
        elif name == "chain_waits":
            assert {n: by[n].chain_wait_s for n in want} == want
        elif name == "first_lanes":
            assert {n: by[n].plan.rungs[0].lane for n in want} == want
        elif name == "resources":
            assert {n: by[n].plan.resource.value for n in want} == want
        else:
            raise AssertionError(f"unknown expectation {name!r}")


def test_there_are_enough_pipeline_scenarios() -> None:
    cases = [p.values[0] for p in _load()]
    assert len(cases) >= 20
    assert {c["expect"].get("error") for c in cases} >= {
        "pipeline_empty", "bad_phase_name", "duplicate_phase", "unknown_need", "bad_needs", "pipeline_cycle",
        "cpu_phase_holds_gpu"}  # fmt: skip
