"""What a lane failure teaches the core (absorb) and whether it ends the dispatch."""

from __future__ import annotations

import pytest

from eps.core.model import Capacity, CapacitySnapshot, Job, LaneKind, Provisioning, Rung
from eps.core.outcome import FailureKind, LaneFailure, absorb, stops_dispatch
from eps.core.router import plan
from eps.core.tables import DEFAULT_GRANTS

GCP = Rung("gcp", LaneKind.GCP, Provisioning.SPOT, "", machine="e2-standard-4", zone="us-central1-a")


@pytest.mark.parametrize(
    ("kind", "code", "stops"),
    [
        (FailureKind.AUTH, None, True),
        (FailureKind.INSUFFICIENT_BALANCE, "402", True),
        (FailureKind.INVALID_REQUEST, "422", True),
        (FailureKind.INVALID_REQUEST, "400", False),  # RunPod: try the next candidate
        (FailureKind.NO_CAPACITY, "400", False),
        (FailureKind.FORBIDDEN, "403", False),
        (FailureKind.RATE_LIMITED, "429", False),
        (FailureKind.TRANSIENT, "503", False),
        (FailureKind.ZONE_EXHAUSTED, "ZONE_RESOURCE_POOL_EXHAUSTED", False),
        (FailureKind.QUOTA_REGION, "QUOTA_EXCEEDED", False),
        (FailureKind.QUOTA_GLOBAL, "QUOTA_EXCEEDED", False),
        (FailureKind.REFUSED, None, False),
    ],
)
def test_p12_which_failures_end_a_dispatch(kind: FailureKind, code: str | None, stops: bool) -> None:
    """No rule refuses work by dollars (P12): only the provider's own 402 stops a dispatch."""
    assert stops_dispatch(LaneFailure(kind, "x", code=code)) is stops


def test_p3_zone_exhausted_then_region_quota_then_global() -> None:
    snap = absorb(CapacitySnapshot(), GCP, LaneFailure(FailureKind.ZONE_EXHAUSTED, "x"))
    assert snap.attempted == (GCP.key,)
    assert snap.gcp[-1].state is Capacity.EXHAUSTED and snap.gcp[-1].zone == "us-central1-a"
    snap = absorb(snap, GCP, LaneFailure(FailureKind.QUOTA_REGION, "x"))
    assert snap.gcp[-1].zone == "us-central1-*" and snap.attempted == (GCP.key,)
    snap = absorb(snap, GCP, LaneFailure(FailureKind.QUOTA_GLOBAL, "x"))
    p = plan(Job("cpu-small", 1800), snap, DEFAULT_GRANTS, None)
    assert {r.lane for r in p.rungs} == {"runpod"}


def test_p11_preemption_rules_out_spot_for_a_job_that_cannot_restart() -> None:
    job = Job("cpu-small", 1800)
    snap = absorb(CapacitySnapshot(), GCP, LaneFailure(FailureKind.PREEMPTED, "x"), restartable=False)
    p = plan(job, snap, DEFAULT_GRANTS, None)
    assert all(r.provisioning is not Provisioning.SPOT for r in p.rungs)
    snap = absorb(CapacitySnapshot(), GCP, LaneFailure(FailureKind.PREEMPTED, "x"), restartable=True)
    p = plan(job, snap, DEFAULT_GRANTS, None)
    assert p.rungs[0].provisioning is Provisioning.SPOT and p.rungs[0].zone != "us-central1-a"


def test_a_flex_start_zone_without_capacity_rules_out_only_that_zones_flex_start() -> None:
    """P11: a flex-start request that found no capacity (the VM stayed PENDING, or the zone
    answered with a stockout) marks that zone's flex-start out; the next zone is tried."""
    from eps.core.model import GcpState
    from eps.core.outcome import FailureKind, LaneFailure, absorb
    from eps.core.router import plan
    from eps.core.tables import DEFAULT_GRANTS

    job = Job("gpu-1", 3 * 3600)
    first = plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None)
    flex = [r for r in first.rungs if r.provisioning is Provisioning.FLEX_START]
    assert len(flex) >= 2
    rung = flex[0]
    assert rung.kind is LaneKind.GCP
    gone = LaneFailure(FailureKind.ZONE_EXHAUSTED, "stayed PENDING", code="PENDING_TIMEOUT")
    snap = absorb(CapacitySnapshot(), rung, gone)
    assert snap.gcp == (GcpState(rung.machine or "", rung.zone or "", Capacity.EXHAUSTED, Provisioning.FLEX_START),)
    after = plan(job, snap, DEFAULT_GRANTS, None)
    keys = [r.key for r in after.rungs if r.provisioning is Provisioning.FLEX_START]
    assert rung.key not in keys and flex[1].key in keys
    # a preemption teaches nothing about flex-start (it is never preempted), nor about spot
    assert absorb(CapacitySnapshot(), rung, LaneFailure(FailureKind.PREEMPTED, "x")).gcp == ()
