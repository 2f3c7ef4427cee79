"""Status, preemption, delete and list-by-label against the fake server."""

from __future__ import annotations

import pytest
from returns.result import Failure, Success

from eps.core.model import CapacitySnapshot, Provisioning, evolve
from eps.core.outcome import FailureKind, absorb
from eps.core.states import HandleState
from eps.shell.lanes.gcp.client import GcpClient
from eps.shell.lanes.gcp.wire import LabeledInstance
from eps.shell.util.retry import RetryPolicy


def test_status_of_a_running_machine(server, lane, gcp_rung, job):
    handle = lane.create(job, gcp_rung(), "d1", 1).unwrap()
    assert lane.status(handle) == Success(handle)
    server.set_status("us-central1-a", handle.id, "STAGING")
    assert lane.status(handle) == Success(evolve(handle, state="starting"))


def test_preempted_spot_with_delete_action_is_gone(server, lane, gcp_rung, job):
    rung = gcp_rung(provisioning=Provisioning.SPOT)
    handle = lane.create(job, rung, "d1", 1).unwrap()
    server.preempt("us-central1-a", handle.id)

    result = lane.status(handle)
    assert isinstance(result, Failure)
    failure = result.failure()
    assert failure.kind is FailureKind.PREEMPTED
    assert server.instances == {}
    assert absorb(CapacitySnapshot(), rung, failure).attempted == (rung.key,)


def test_preempted_spot_with_stop_action_is_terminated(server, make_lane, gcp_rung, job):
    lane = make_lane(spot_termination_action="STOP")
    handle = lane.create(job, gcp_rung(provisioning=Provisioning.SPOT), "d1", 1).unwrap()
    server.preempt("us-central1-a", handle.id)

    assert server.instances[("us-central1-a", handle.id)]["status"] == "TERMINATED"
    failure = lane.status(handle).failure()
    assert failure.kind is FailureKind.PREEMPTED
    assert failure.code == "TERMINATED"


def test_stopped_on_demand_machine_is_not_preempted(server, lane, gcp_rung, job):
    handle = lane.create(job, gcp_rung(provisioning=Provisioning.ON_DEMAND), "d1", 1).unwrap()
    server.set_status("us-central1-a", handle.id, "TERMINATED")
    assert lane.status(handle) == Success(evolve(handle, state=HandleState.FINISHED))
    del server.instances[("us-central1-a", handle.id)]
    assert lane.status(handle) == Success(evolve(handle, state=HandleState.GONE))


def test_delete_waits_for_the_operation(server, lane, gcp_rung, job):
    handle = lane.create(job, gcp_rung(), "d1", 1).unwrap()
    result = lane.delete(handle)

    assert result == Success(evolve(handle, state=HandleState.RELEASED))
    assert server.instances == {}
    (deleted,) = server.recorded("DELETE", r"/instances/[^/]+$")
    assert deleted.path.endswith(f"/zones/us-central1-a/instances/{handle.id}")
    assert "requestId" in deleted.query
    assert len(server.recorded("POST", r"/wait$")) == 2  # the insert's and the delete's


def test_delete_of_a_machine_already_gone_succeeds(server, lane, gcp_rung, job):
    handle = lane.create(job, gcp_rung(), "d1", 1).unwrap()
    lane.delete(handle)
    assert lane.delete(handle) == Success(evolve(handle, state="gone"))


def test_list_by_label_finds_a_dispatch_in_every_zone(server, lane, gcp_rung, job):
    a = lane.create(job, gcp_rung(zone="us-central1-a"), "d1", 1).unwrap()
    b = lane.create(job, gcp_rung(zone="europe-west4-b", provisioning=Provisioning.ON_DEMAND), "d1", 2).unwrap()
    other = lane.create(job, gcp_rung(zone="us-central1-a"), "d2", 1).unwrap()
    server.add_instance(
        "us-central1-a", {"name": "not-ours", "machineType": "zones/us-central1-a/machineTypes/e2-small"}
    )

    found = lane.list_by_label("d1").unwrap()
    assert set(found) == {LabeledInstance("d1", 1, a), LabeledInstance("d1", 2, b)}
    (listed,) = server.recorded("GET", r"/aggregated/instances$")
    assert listed.query["filter"] == 'labels.eps-dispatch = "d1"'

    everything = lane.list_by_label().unwrap()
    assert {item.handle for item in everything} == {a, b, other}
    assert server.recorded("GET", r"/aggregated/instances$")[-1].query["filter"] == "labels.eps-dispatch:*"


def test_list_by_label_reports_preempted_spot(server, make_lane, gcp_rung, job):
    lane = make_lane(spot_termination_action="STOP")
    handle = lane.create(job, gcp_rung(provisioning=Provisioning.SPOT), "d1", 1).unwrap()
    server.preempt("us-central1-a", handle.id)
    (item,) = lane.list_by_label("d1").unwrap()
    assert item.handle.state == HandleState.PREEMPTED


def test_list_by_label_with_awkward_dispatch_id(server, lane, gcp_rung, job):
    dispatch = "Run #7 / 2026"
    handle = lane.create(job, gcp_rung(), dispatch, 1).unwrap()
    assert lane.list_by_label(dispatch).unwrap() == (LabeledInstance(dispatch, 1, handle),)
    assert lane.list_by_label("run-7-2026").unwrap() == ()


def test_lane_from_settings_reaches_a_plain_http_endpoint(server, gcp_rung, job):
    from eps.shell.config.settings import GcpSettings

    settings = GcpSettings(project="test-project", endpoint=server.endpoint, service_account="sa@x.iam")
    quick = RetryPolicy(attempts=2, timeout_s=10.0, wait_initial_s=0.0, wait_max_s=0.0, wait_jitter_s=0.0)
    lane = GcpClient.from_settings(settings, retry=quick, sleep=lambda _: None)
    try:
        handle = lane.create(job, gcp_rung(), "d1", 1).unwrap()
    finally:
        lane.close()
    assert handle.zone == "us-central1-a"
    body = server.bodies("POST", r"/instances$")[0]
    assert body["serviceAccounts"][0]["email"] == "sa@x.iam"
    assert body["disks"][0]["initializeParams"]["sourceImage"] == settings.image


def test_lane_from_settings_needs_a_project():
    from eps.shell.config.settings import GcpSettings

    with pytest.raises(ValueError, match=r"gcp\.project"):
        GcpClient.from_settings(GcpSettings())
