"""Issue 23 (item 2): consecutive clusters of a lane order are ranked by each cluster's own
start estimate for the job (``ClusterState.start_estimate_s``, from ``sbatch --test-only``):
soonest first, unknown last, ties in the written order; a hint, never a gate."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eps.core.model import CapacitySnapshot, ClusterConfig, ClusterState, Job, evolve
from eps.core.router import plan
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY, FELLOWS
from eps.shell.lanes.slurm.cli import start_estimate_s

NIBI = ClusterConfig(name="nibi", gpus_per_node=4)
FIR = ClusterConfig(name="fir", gpus_per_node=4)
POLICY = evolve(DEFAULT_POLICY, clusters=(FELLOWS, NIBI, FIR), gpu_lane_order=("fellows", "nibi", "fir", "gcp"))
JOB = Job("gpu-1", 3600)


def _lanes(snap: CapacitySnapshot, job: Job = JOB) -> list[str]:
    return list(dict.fromkeys(r.lane for r in plan(job, snap, DEFAULT_GRANTS, None, policy=POLICY).rungs))


def _est(**seconds: int) -> CapacitySnapshot:
    return CapacitySnapshot(clusters=tuple(ClusterState(name, start_estimate_s=s) for name, s in seconds.items()))


def test_without_estimates_the_written_order_holds() -> None:
    assert _lanes(CapacitySnapshot()) == ["fellows", "nibi", "fir", "gcp"]


def test_the_soonest_cluster_comes_first_and_unknown_last() -> None:
    assert _lanes(_est(fellows=3600, nibi=60)) == ["nibi", "fellows", "fir", "gcp"]
    assert _lanes(_est(fir=0)) == ["fir", "fellows", "nibi", "gcp"]
    route = plan(JOB, _est(fellows=3600, nibi=60), DEFAULT_GRANTS, None, policy=POLICY)
    assert any("nibi in 60 s, fellows in 3600 s, fir unknown" in n for n in route.notes)


def test_ties_keep_the_written_order_and_a_pin_is_never_reordered() -> None:
    assert _lanes(_est(fellows=60, nibi=60, fir=60)) == ["fellows", "nibi", "fir", "gcp"]
    assert _lanes(_est(nibi=0), evolve(JOB, pin="fellows")) == ["fellows"]


def test_a_cluster_after_a_paid_lane_is_not_pulled_before_it() -> None:
    """Only a run of consecutive clusters is ranked: the order's other lanes stay put."""
    policy = evolve(POLICY, gpu_lane_order=("fellows", "gcp", "nibi"))
    route = plan(JOB, _est(nibi=0, fellows=9999), DEFAULT_GRANTS, None, policy=policy)
    assert list(dict.fromkeys(r.lane for r in route.rungs)) == ["fellows", "gcp", "nibi"]
    assert not any("start estimates" in n for n in route.notes)


@given(st.dictionaries(st.sampled_from(["fellows", "nibi", "fir"]), st.integers(0, 10**6)))
def test_ranking_only_reorders_and_the_first_tier_of_each_cluster_keeps_its_cap(seconds: dict[str, int]) -> None:
    route = plan(JOB, _est(**seconds), DEFAULT_GRANTS, None, policy=POLICY)
    plain = plan(JOB, CapacitySnapshot(), DEFAULT_GRANTS, None, policy=POLICY)
    assert sorted(r.key for r in route.rungs) == sorted(r.key for r in plain.rungs)
    caps = {r.key: r.park_cap_s for r in plain.rungs}
    assert all(r.park_cap_s == caps[r.key] for r in route.rungs)  # a hint: nothing is parked longer or shorter
    lanes = list(dict.fromkeys(r.lane for r in route.rungs))
    known = [n for n in lanes if n in seconds]
    assert [seconds[n] for n in known] == sorted(seconds[n] for n in known)
    assert lanes[-1] == "gcp"


def test_sbatch_test_only_output_is_read_against_the_clusters_own_clock() -> None:
    said = "sbatch: Job 41 to start at 2026-12-01T21:30:00 using 8 processors on nodes n1 in partition gpu\n\n"
    assert start_estimate_s(said + "2026-12-01T21:00:00\n") == 1800
    assert start_estimate_s(said + "2026-12-01T21:45:10\n") == 0  # already due: now
    assert start_estimate_s("sbatch: error: Batch job submission failed: Invalid qos\n\n2026-12-01T21:00:00\n") is None
    assert start_estimate_s(said) is None  # no clock: no estimate
