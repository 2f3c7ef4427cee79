"""Where a pinned RunPod GPU job asks for pods (eps.core.runpod_supply): the place in the rung's
zone survives the ledger's round trip, the plan rotates through clouds and data centres, and
after 3 lost pods it makes no more."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from eps.core.model import CapacitySnapshot, Job, LaneKind, Policy, SkipCode, evolve
from eps.core.outcome import FailureKind, LaneFailure, absorb
from eps.core.router import plan
from eps.core.runpod_supply import MAX_POD_CREATES, Placement, placement, zone_of
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY

A100 = "NVIDIA A100-SXM4-80GB"
JOB = Job("gpu-1", 3600, pin="runpod")
_DC = st.sampled_from(["EU-RO-1", "US-KS-2", "US-TX-3", "CA-MTL-1"])


@given(
    st.sampled_from(["secure", "community"]),
    st.one_of(st.none(), _DC),
    st.lists(_DC, unique=True, max_size=3),
)
def test_a_place_survives_its_zone(cloud: str, dc: str | None, avoid: list[str]) -> None:
    place = Placement(cloud, dc, () if dc else tuple(avoid))
    assert placement(zone_of(place)) == place


def test_the_default_place_is_no_zone() -> None:
    assert zone_of(Placement()) is None and placement(None) == Placement()


def _policy(**runpod: Any) -> Policy:
    gpus = tuple(g for g in DEFAULT_POLICY.runpod_gpu if g.id == A100)
    return evolve(DEFAULT_POLICY, runpod_gpu=gpus, **runpod)


def test_clouds_then_data_centres_in_order() -> None:
    policy = _policy(runpod_supply=("secure", "community"), runpod_data_centers=("US-TX-3", "EU-RO-1"))
    rungs = plan(JOB, CapacitySnapshot(), DEFAULT_GRANTS, None, policy=policy).rungs
    assert [r.zone for r in rungs] == ["US-TX-3", "EU-RO-1", "community:US-TX-3", "community:EU-RO-1"]


def test_a_lost_pod_moves_to_the_other_data_centres_then_three_end_it() -> None:
    policy = _policy()
    snap = CapacitySnapshot()
    zones = []
    for dc in ("EU-RO-1", "US-KS-2", "US-TX-3"):
        p = plan(JOB, snap, DEFAULT_GRANTS, None, policy=policy)
        (rung,) = p.rungs
        assert rung.kind is LaneKind.RUNPOD
        zones.append(rung.zone)
        snap = absorb(snap, rung, LaneFailure(FailureKind.TRANSIENT, "no ssh", code="no_ssh_address", made_in=dc))
    assert zones == [None, "!EU-RO-1", "!EU-RO-1,US-KS-2"]
    p = plan(JOB, snap, DEFAULT_GRANTS, None, policy=policy)
    assert p.rungs == () and p.terminal is not None
    (spent,) = [s for s in p.skipped if s.code is SkipCode.RUNPOD_ROTATION_SPENT]
    assert f"{MAX_POD_CREATES} RunPod pods were made" in spent.detail


def test_no_stock_in_one_cloud_leaves_the_other() -> None:
    policy = _policy(runpod_supply=("secure", "community"))
    first = plan(JOB, CapacitySnapshot(), DEFAULT_GRANTS, None, policy=policy).rungs[0]
    snap = absorb(CapacitySnapshot(), first, LaneFailure(FailureKind.NO_CAPACITY, "none", code="400"))
    assert [r.zone for r in plan(JOB, snap, DEFAULT_GRANTS, None, policy=policy).rungs] == ["community"]
