"""A job without a duration (issue 25): properties over random jobs, snapshots, grants, parks
and policies, and the time limit each lane then enforces (the wrapper, sbatch --time, flex-start).

Unknown is long, never a guessed number: never trivial (P2), no spot unless restartable
(P11), ruled out by no MaxWall (P9), and each rung's time limit is its lane's maximum.
With a duration, nothing changes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_properties import COMMON, DAY, FELLOWS, POLICY, _plan, grants, jobs, parks, policies, snapshots

from eps.core.gpus import job_gpu_need
from eps.core.lifecycle import at_lane_maximum, batch_time_s, job_spec, on_rung, time_limit_s
from eps.core.model import (
    CapacitySnapshot,
    Job,
    LaneKind,
    Provisioning,
    QosGrants,
    Resource,
    evolve,
)
from eps.core.sbatch import SbatchRenderError, render_sbatch
from eps.core.tables import DEFAULT_GRANTS, FLEX_START_MAX_RUN_S, JOB_LIFECYCLE, flex_start_run_s

#: Jobs without a duration and without --time-limit (``builds`` fills optional fields too).
unknown_jobs = jobs.map(lambda j: evolve(j, duration_s=None, time_limit_s=None))
limits = st.one_of(st.just(7 * DAY), st.integers(1, 30 * DAY))


def _with_limit(pol: Any, max_s: int) -> Any:
    return evolve(pol, max_time_limit_s=max_s)


@settings(**COMMON)
@given(unknown_jobs, snapshots, grants, parks, policies)
def test_p11_without_a_duration_no_spot_unless_restartable(
    job: Job, snap: CapacitySnapshot, g: QosGrants, park: Any, pol: Any
) -> None:
    """P11: a job of unknown length is long: no spot rung unless it is restartable."""
    p = _plan(job, snap, g, park, pol)
    if not job.restartable:
        assert all(r.provisioning is not Provisioning.SPOT for r in p.rungs), [r.key for r in p.rungs]


@settings(**COMMON)
@given(unknown_jobs, snapshots, grants, parks, policies)
def test_p2_without_a_duration_never_the_vm(
    job: Job, snap: CapacitySnapshot, g: QosGrants, park: Any, pol: Any
) -> None:
    """P2: a job of unknown length is never trivial: no VM rung unless pinned there."""
    p = _plan(job, snap, g, park, pol)
    if job.pin != POLICY.trivial_lane:
        assert all(r.kind is not LaneKind.VM for r in p.rungs)
    assert not any(s.code.value == "trivial_stays_on_vm" for s in p.skipped)


@settings(**COMMON)
@given(unknown_jobs, grants, policies)
def test_p9_without_a_duration_every_tier_whose_other_limits_allow_it_is_a_rung(
    job: Job, g: QosGrants, pol: Any
) -> None:
    """P9: no MaxWall rules out a job of unknown length; every granted tier whose GPU cap
    allows it is a rung, in ladder order (the dev tier as P7 says)."""
    job = evolve(job, pin=None)
    p = _plan(job, CapacitySnapshot(), g, None, pol)
    if p.resource is not Resource.GPU:
        return
    intent = POLICY.intent(p.resolved_intent)  # a gradient fit is a GPU job (P4), a count grows the shape (P5)
    assert intent is not None
    gpus = intent.gpus * (job.count if p.resolved_intent == job.intent else 1)
    cluster = pol.clusters[0]
    order = list(cluster.qos_ladder)
    if intent.dev_qos_ok and cluster.dev_qos_for_debug:
        order.insert(1, cluster.dev_qos)
    granted = {t.name: t for t in g.tiers("fellows")}
    want = [
        q
        for q in order
        if q in granted and (granted[q].max_gpus_per_user is None or gpus <= granted[q].max_gpus_per_user)
    ]
    if gpus > cluster.gpus_per_node * cluster.max_nodes:
        want = []
    if not job_gpu_need(job, intent).admits(cluster.gpu_model, None):  # its --gpu/--gpu-mem rule fellows out
        want = []
    assert [r.qos for r in p.rungs if r.lane == "fellows"] == want
    assert not any(s.code.value == "qos_max_wall" for s in p.skipped)


def _lane_maximum(kind: LaneKind, prov: Provisioning, wall: int | None, max_s: int) -> int:
    """The limit the issue asks for, from the lifecycle numbers (not from the code under test)."""
    life = JOB_LIFECYCLE
    if kind is LaneKind.SLURM:
        return max_s if wall is None else max(60, wall - life.kill_grace_s - 60)
    if prov is Provisioning.FLEX_START:
        return FLEX_START_MAX_RUN_S - life.kill_grace_s - life.linger_s
    return max_s


@settings(**COMMON)
@given(unknown_jobs, snapshots, grants, parks, policies, limits)
def test_without_a_duration_each_rungs_time_limit_is_its_lanes_maximum(
    job: Job, snap: CapacitySnapshot, g: QosGrants, park: Any, pol: Any, max_s: int
) -> None:
    """The time limit of a job of unknown length is the lane's maximum on every rung: a tier's
    MaxWall (so that sbatch --time is exactly it), flex-start's maximum run duration (less the
    grace and the linger), else [jobs] max_time_limit; and the wrapper enforces it there."""
    pol = _with_limit(pol, max_s)
    p = _plan(job, snap, g, park, pol)
    walls = {t.name: t.max_wall_s for t in g.tiers("fellows")}
    for r in p.rungs:
        wall = walls.get(r.qos) if r.kind is LaneKind.SLURM and r.qos else None
        assert r.time_limit_s == _lane_maximum(r.kind, r.provisioning, wall, max_s), r
        assert "duration unknown" in r.reason
        ran = on_rung(job, r)
        assert time_limit_s(ran) == job_spec(ran, "disp1").time_limit_s == r.time_limit_s
        if wall is not None and wall >= 120:
            assert batch_time_s(ran) == wall  # sbatch --time is the tier's MaxWall
    assert any("duration unknown" in n for n in p.notes)


@settings(**COMMON)
@given(unknown_jobs, st.integers(1, 30 * DAY), snapshots, grants, parks, policies)
def test_without_a_duration_a_given_time_limit_is_the_limit_everywhere(
    job: Job, limit: int, snap: CapacitySnapshot, g: QosGrants, park: Any, pol: Any
) -> None:
    """--time-limit without --duration: the job's own limit on every rung; still long (no spot
    unless restartable)."""
    job = evolve(job, time_limit_s=limit)
    p = _plan(job, snap, g, park, pol)
    for r in p.rungs:
        assert r.time_limit_s is None and time_limit_s(on_rung(job, r)) == limit
        assert job.restartable or r.provisioning is not Provisioning.SPOT


@settings(**COMMON)
@given(jobs, snapshots, grants, parks, policies, limits)
def test_with_a_duration_every_plan_is_unchanged_by_the_unknown_length_rules(
    job: Job, snap: CapacitySnapshot, g: QosGrants, park: Any, pol: Any, max_s: int
) -> None:
    """With a duration, [jobs] max_time_limit changes nothing, no rung carries a limit of its
    own (the job's 1.5 x duration applies, as before), and no note speaks of an unknown one."""
    p = _plan(job, snap, g, park, pol)
    assert p == _plan(job, snap, g, park, _with_limit(pol, max_s))
    assert all(r.time_limit_s is None for r in p.rungs)
    assert all(on_rung(job, r) is job for r in p.rungs)
    assert not any("duration unknown" in n for n in p.notes)


@settings(**COMMON)
@given(unknown_jobs.filter(lambda j: POLICY.intent(j.intent).resource is Resource.CPU), snapshots, parks)
def test_without_a_duration_a_cpu_job_plans_like_a_long_one(job: Job, snap: CapacitySnapshot, park: Any) -> None:
    """Unknown is long: a CPU job without a duration walks the rungs of the same job three
    days long (no MaxWall is involved on the CPU lanes), in the same order."""
    p = _plan(job, snap, DEFAULT_GRANTS, park)
    long = _plan(evolve(job, duration_s=3 * DAY), snap, DEFAULT_GRANTS, park)
    assert [r.key for r in p.rungs] == [r.key for r in long.rungs]
    assert p.terminal == long.terminal


# --- what the lanes are told -------------------------------------------------------------


def _rungs(job: Job) -> dict[str, Any]:
    p = _plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None)
    return {r.key: r for r in p.rungs}


def test_sbatch_time_is_the_tiers_maxwall_and_the_wrapper_stops_the_job_first() -> None:
    job = Job("gpu-1", command=("python", "train.py"))
    rungs = _rungs(job)
    for key, wall in (("fellows/high-eur/-/queue", "7-00:00:00"), ("fellows/low-eur/-/queue", "14-00:00:00")):
        ran = on_rung(job, rungs[key])
        script = render_sbatch(ran, FELLOWS, rungs[key], dispatch_id="disp1", user="jdoe", time_s=batch_time_s(ran))
        assert f"#SBATCH --time={wall}\n" in script
        assert time_limit_s(ran) + JOB_LIFECYCLE.kill_grace_s + 60 == batch_time_s(ran)


def test_an_unknown_duration_without_a_time_is_refused_by_the_render() -> None:
    job = Job("gpu-1", command=("true",))
    rung = _rungs(job)["fellows/high-eur/-/queue"]
    with pytest.raises(SbatchRenderError, match="duration 'unknown'"):
        render_sbatch(job, FELLOWS, rung, dispatch_id="disp1")


def test_flex_start_asks_for_its_maximum_and_the_job_stops_before_the_vm_is_deleted() -> None:
    job = Job("gpu-1", command=("true",))
    flex = next(r for r in _rungs(job).values() if r.provisioning is Provisioning.FLEX_START)
    ran = on_rung(job, flex)
    assert flex_start_run_s(ran.duration_s) == FLEX_START_MAX_RUN_S
    assert time_limit_s(ran) + JOB_LIFECYCLE.kill_grace_s + JOB_LIFECYCLE.linger_s == FLEX_START_MAX_RUN_S
    assert flex_start_run_s(3600) == 3600 * 3 // 2 + 30 + 600  # with a duration: as before


def test_a_given_time_limit_wins_and_a_rungless_path_gets_the_lanes_maximum() -> None:
    limited = Job("cpu-small", time_limit_s=900)
    rung = next(iter(_rungs(Job("cpu-small")).values()))
    assert on_rung(limited, rung) is limited
    assert time_limit_s(Job("cpu-small")) == 7 * DAY  # the default [jobs] max_time_limit
    assert time_limit_s(at_lane_maximum(Job("cpu-small"), LaneKind.GCP, Provisioning.ON_DEMAND, 20)) == 20
    flex = at_lane_maximum(Job("gpu-1"), LaneKind.GCP, Provisioning.FLEX_START, 20)
    assert time_limit_s(flex) == FLEX_START_MAX_RUN_S - 30 - 600
    known = Job("cpu-small", duration_s=60)
    assert at_lane_maximum(known, LaneKind.GCP, Provisioning.ON_DEMAND, 20) is known
