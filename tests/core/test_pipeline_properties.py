"""Property-based tests of pipelines over random graphs of needs and random phase jobs: each
phase is planned exactly as the same job alone, no cycle is ever accepted, and the order
(the waves) respects ``needs``.  Example counts stay modest: the suite's time matters."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from eps.core.model import CapacitySnapshot, Job, JobError, Policy, QosGrants
from eps.core.pipeline import Phase, Pipeline, PipelinePlan, plan_pipeline
from eps.core.router import plan
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY
from tests.core.test_properties import grants, jobs, policies, snapshots

SOME: dict[str, Any] = {"max_examples": 60, "deadline": None,
                        "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much]}  # fmt: skip
NAMES = [f"p{i}" for i in range(8)]
EASY = Job("cpu-small", 3600)


@st.composite
def dags(draw: st.DrawFn, phase_jobs: st.SearchStrategy[Job] | None = None) -> Pipeline:
    """A pipeline without a cycle: each phase needs only phases made before it, then listed in
    any order (the file's order need not be a run order)."""
    n = draw(st.integers(1, len(NAMES)))
    phase_jobs = st.just(EASY) if phase_jobs is None else phase_jobs
    phases = [Phase(NAMES[i], draw(phase_jobs), tuple(draw(st.lists(st.sampled_from(NAMES[:i]), unique=True)) if i
                                                       else ()))
              for i in range(n)]  # fmt: skip
    return Pipeline(tuple(draw(st.permutations(phases))))


@st.composite
def graphs(draw: st.DrawFn) -> Pipeline:
    """Any graph of needs among known phases: cycles (self-needs too) as likely as not."""
    n = draw(st.integers(1, 6))
    names = NAMES[:n]
    return Pipeline(tuple(Phase(name, EASY, tuple(draw(st.lists(st.sampled_from(names), unique=True, max_size=3))))
                          for name in names))  # fmt: skip


def _has_cycle(pipeline: Pipeline) -> bool:
    """Whether some phase reaches itself through needs (a transitive closure, apart from the code)."""
    reach = _reach(pipeline)
    return any(name in needs for name, needs in reach.items())


def _reach(pipeline: Pipeline) -> dict[str, set[str]]:
    """Each phase and every phase it needs, at any depth (Warshall's closure)."""
    reach = {p.name: set(p.needs) for p in pipeline.phases}
    for k, through in reach.items():
        for needs in reach.values():
            if k in needs:
                needs.update(through)
    return reach


def _check_order(pipeline: Pipeline, got: PipelinePlan) -> None:
    wave = {name: w for w, names in enumerate(got.waves) for name in names}
    assert sorted(wave) == sorted(p.name for p in pipeline.phases)  # each phase in exactly one wave
    assert sum(len(w) for w in got.waves) == len(pipeline.phases) and all(got.waves)
    seen: set[str] = set()
    for pp in got.phases:  # the order respects needs: what a phase needs comes before it, a wave earlier
        assert set(pp.phase.needs) <= seen
        assert all(wave[n] < pp.wave for n in pp.phase.needs)
        assert pp.wave == (1 + max(wave[n] for n in pp.phase.needs) if pp.phase.needs else 0)
        seen.add(pp.phase.name)


def _check_waits(got: PipelinePlan) -> None:
    by = {pp.phase.name: pp for pp in got.phases}
    for pp in got.phases:
        assert pp.chain_wait_s == pp.plan.worst_case_wait_s + max((by[n].chain_wait_s for n in pp.phase.needs),
                                                                  default=0)  # fmt: skip
    assert got.worst_case_wait_s == max(pp.chain_wait_s for pp in got.phases)
    path = got.critical_path  # a chain of needs from a phase that needs nothing, its waits the worst case
    assert not by[path[0]].phase.needs
    assert all(a in by[b].phase.needs for a, b in pairwise(path))
    assert sum(by[n].plan.worst_case_wait_s for n in path) == got.worst_case_wait_s


@settings(**SOME)
@given(dags(jobs), snapshots, grants, policies)
def test_each_phase_is_planned_exactly_as_the_same_job_alone(
    pipeline: Pipeline, snap: CapacitySnapshot, g: QosGrants, pol: Policy
) -> None:
    alone: dict[str, Any] = {}
    for p in pipeline.phases:
        try:
            alone[p.name] = plan(p.job, snap, g, None, policy=pol)
        except JobError as exc:  # the first phase its job alone refuses is the pipeline's refusal, its code kept
            alone[p.name] = exc
            break
    refused = [(name, e) for name, e in alone.items() if isinstance(e, JobError)]
    if refused:
        name, first = refused[0]
        try:
            plan_pipeline(pipeline, snap, g, policy=pol)
        except JobError as exc:
            assert exc.code == first.code and str(exc) == f"phase {name!r}: {first.plain}"
            return
        raise AssertionError("a pipeline with a phase its job alone refuses was accepted")
    got = plan_pipeline(pipeline, snap, g, policy=pol)
    assert {pp.phase.name: pp.plan for pp in got.phases} == alone
    _check_order(pipeline, got)
    _check_waits(got)


@settings(**SOME)
@given(graphs())
def test_no_cycle_is_ever_accepted(pipeline: Pipeline) -> None:
    try:
        got = plan_pipeline(pipeline, CapacitySnapshot(), DEFAULT_GRANTS, policy=DEFAULT_POLICY)
    except JobError as exc:
        assert exc.code == "pipeline_cycle", str(exc)
        assert _has_cycle(pipeline)
        ring = str(exc).split(": ", 1)[1].split(" (", 1)[0].split(" -> ")  # a real cycle: each needs the one before
        needs = {p.name: p.needs for p in pipeline.phases}
        assert ring[0] == ring[-1] and all(a in needs[b] for a, b in pairwise(ring))
        return
    assert not _has_cycle(pipeline)
    _check_order(pipeline, got)


@settings(**SOME)
@given(dags())
def test_the_order_respects_needs_whatever_the_files_order(pipeline: Pipeline) -> None:
    got = plan_pipeline(pipeline, CapacitySnapshot(), DEFAULT_GRANTS)
    _check_order(pipeline, got)
    _check_waits(got)
    assume(len(pipeline.phases) > 1)
    wave = {name: w for w, names in enumerate(got.waves) for name in names}
    reach = _reach(pipeline)  # phases of one wave: no path of needs joins them
    assert not any(wave[a] == wave[b] for a in reach for b in reach[a])
