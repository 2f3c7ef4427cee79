"""Every GCP GPU family on the fake (issue 35): the fake knows each family's machine types and
the zones that offer them and refuses a type in a zone that lacks it as Compute does; every
GPU rung the planner offers (each family, each provisioning model) is a request the fake
takes, through the real google-cloud-compute client and eps's own lane."""

from __future__ import annotations

from typing import Any

import pytest
from returns.result import Failure, Success

from eps.core.model import CapacitySnapshot, Job, evolve
from eps.core.outcome import FailureKind
from eps.core.router import plan
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY

from . import fake_server as fs
from .test_gcp_strict import accepted, insert, invalid


def _missing(kind: str, zone: str) -> str:
    return f"Machine type with name '{kind}' does not exist in zone '{zone}'."


@pytest.mark.parametrize(
    ("kind", "zone"),
    [
        ("a2-ultragpu-1g", "us-central1-b"),  # A100 80GB: us-central1-a/c only
        ("a3-ultragpu-8g", "europe-west4-b"),  # H200: europe-west4-a only in that region
        ("a4-highgpu-8g", "us-central1-a"),  # B200: us-central1-b
        ("a3-highgpu-3g", "us-central1-a"),  # no such shape anywhere
    ],
)
def test_a_gpu_type_in_a_zone_that_lacks_it_is_computes_400(instances_client: Any, kind: str, zone: str) -> None:
    url = f"zones/{zone}/machineTypes/{kind}"
    invalid(insert(instances_client, zone=zone, machine_type=url), "resource.machineType", url, _missing(kind, zone))


@pytest.mark.parametrize(
    ("kind", "zone"),
    [("g2-standard-4", "europe-west4-a"), ("a2-ultragpu-1g", "us-central1-a"), ("a3-ultragpu-8g", "us-central1-b"),
     ("a3-ultragpu-8g", "europe-west4-a"), ("a4-highgpu-8g", "europe-west4-b"), ("e2-standard-4", "asia-south1-b")],
)  # fmt: skip
def test_a_type_where_its_zone_has_it_is_taken(instances_client: Any, kind: str, zone: str) -> None:
    accepted(insert(instances_client, zone=zone, machine_type=f"zones/{zone}/machineTypes/{kind}"))


def test_a_fake_told_a_zone_lost_a_type_refuses_it(server: fs.FakeCompute, instances_client: Any) -> None:
    assert server.machine_zones is not None
    server.machine_zones = {**server.machine_zones, "g2-standard-4": frozenset({"us-central1-b"})}
    url = "zones/us-central1-a/machineTypes/g2-standard-4"
    why = _missing("g2-standard-4", "us-central1-a")
    invalid(insert(instances_client, machine_type=url), "resource.machineType", url, why)


def _gpu_rungs() -> list[Any]:
    """One rung per (machine type, provisioning) the planner offers the GPU intents, every
    zone GCP has them in: each family under each model it is sold as here."""
    zones = tuple(sorted({z for m in DEFAULT_POLICY.gcp_machines if m.gpus for z in m.zones}))
    policy = evolve(DEFAULT_POLICY, gcp_zones=zones)
    seen: dict[tuple[str, str], Any] = {}
    for intent in ("debug", "gpu-2", "gpu-8"):
        for duration, restartable in ((3600, False), (3 * 86_400, False)):
            route = plan(Job(intent, duration, restartable, pin="gcp"), CapacitySnapshot(), DEFAULT_GRANTS, None,
                         policy=policy)  # fmt: skip
            for r in route.rungs:
                seen.setdefault((r.machine, r.provisioning.value), r)
    return list(seen.values())


GPU_RUNGS = _gpu_rungs()


def test_the_planner_offers_every_family() -> None:
    families = {r.machine.rsplit("-", 1)[0] for r in GPU_RUNGS}
    assert families == {"g2-standard", "a2-highgpu", "a2-ultragpu", "a3-highgpu", "a3-ultragpu", "a4-highgpu"}


@pytest.mark.parametrize("rung", GPU_RUNGS, ids=lambda r: r.key)
def test_every_gpu_rung_the_planner_offers_is_a_request_the_fake_takes(
    server: fs.FakeCompute, lane: Any, rung: Any, job: Job
) -> None:
    result = lane.create(evolve(job, intent="gpu-1"), rung, "d1", 1)
    assert isinstance(result, Success), result
    body = next(r.body for r in server.requests if r.method == "POST" and r.path.endswith("/instances"))
    assert body["machineType"].endswith(f"zones/{rung.zone}/machineTypes/{rung.machine}")
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"  # GPUs built in cannot live-migrate


def test_the_lane_says_a_type_missing_in_its_zone_as_computes_refusal(lane: Any, gcp_rung: Any, job: Job) -> None:
    """A zone the tables named that does not sell the type (the tables are wrong there) is
    that zone out for the rung, as a stockout is: the walk goes on to the next rung, never a
    stop of the dispatch; the message is Compute's."""
    rung = gcp_rung("a2-ultragpu-1g", "us-central1-b", gpus=1)
    result = lane.create(job, rung, "d1", 1)
    assert isinstance(result, Failure)
    failure = result.failure()
    assert (failure.kind, failure.code) == (FailureKind.ZONE_EXHAUSTED, "not_in_zone")
    assert "does not exist in zone 'us-central1-b'" in failure.message
