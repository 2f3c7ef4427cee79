"""What the GCP lane sends to Compute Engine when it creates a machine."""

from __future__ import annotations

import re
import uuid

from returns.result import Failure, Success

from eps.core.model import LaneKind, Provisioning
from eps.core.outcome import FailureKind, Handle
from eps.shell.lanes.gcp.wire import insert_request_id, instance_name, startup_script

from .fake_server import FakeCompute

GCE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
INSERT = r"/zones/[^/]+/instances$"


def only_insert(server: FakeCompute) -> dict:
    bodies = server.bodies("POST", INSERT)
    assert len(bodies) == 1
    return bodies[0]


def metadata(body: dict) -> dict[str, str]:
    return {item["key"]: item["value"] for item in body["metadata"]["items"]}


def test_spot_rung_sends_spot_scheduling_on_one_object(server, lane, gcp_rung, job):
    rung = gcp_rung("e2-standard-4", "us-central1-a", Provisioning.SPOT)
    result = lane.create(job, rung, "d1", 1)

    name = instance_name("d1", rung)
    assert result == Success(
        Handle(
            lane="gcp",
            kind=LaneKind.GCP,
            id=name,
            rung=rung.key,
            zone="us-central1-a",
            machine="e2-standard-4",
            state="running",
        )
    )
    body = only_insert(server)
    assert body["name"] == name
    assert body["machineType"] == "zones/us-central1-a/machineTypes/e2-standard-4"
    assert body["scheduling"] == {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "DELETE",
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
    }
    assert server.instances[("us-central1-a", name)]["status"] == "RUNNING"


def test_spot_termination_action_stop_is_configurable(server, make_lane, gcp_rung, job):
    make_lane(spot_termination_action="STOP").create(job, gcp_rung(), "d1", 1)
    assert only_insert(server)["scheduling"]["instanceTerminationAction"] == "STOP"


def test_on_demand_rung_is_standard_and_never_spot(server, lane, gcp_rung, job):
    lane.create(job, gcp_rung("e2-standard-8", "us-central1-b", Provisioning.ON_DEMAND), "d1", 1)
    assert only_insert(server)["scheduling"] == {
        "provisioningModel": "STANDARD",
        "onHostMaintenance": "MIGRATE",
        "automaticRestart": True,
    }


def test_gpu_machine_terminates_on_host_maintenance(server, lane, gcp_rung, job):
    rung = gcp_rung("a3-highgpu-8g", "us-central1-a", Provisioning.ON_DEMAND, gpus=8)
    assert isinstance(lane.create(job, rung, "d1", 1), Success)
    body = only_insert(server)
    assert body["machineType"] == "zones/us-central1-a/machineTypes/a3-highgpu-8g"
    assert body["scheduling"] == {
        "provisioningModel": "STANDARD",
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": True,
    }
    assert "guestAccelerators" not in body  # a3 GPUs are built in


def test_gpu_spot_keeps_every_scheduling_field(server, lane, gcp_rung, job):
    lane.create(job, gcp_rung("a3-highgpu-2g", "us-central1-a", Provisioning.SPOT, gpus=2), "d1", 1)
    scheduling = only_insert(server)["scheduling"]
    assert scheduling["provisioningModel"] == "SPOT"
    assert scheduling["onHostMaintenance"] == "TERMINATE"
    assert scheduling["instanceTerminationAction"] == "DELETE"


def test_big_volume_route_sizes_the_boot_disk(server, lane, gcp_rung, job):
    rung = gcp_rung("n2-highmem-16", "europe-west4-a", Provisioning.ON_DEMAND, disk_gb=320)
    lane.create(job, rung, "d1", 1)
    (disk,) = only_insert(server)["disks"]
    assert disk["boot"] is True
    assert disk["autoDelete"] is True
    assert disk["initializeParams"] == {
        "sourceImage": "projects/debian-cloud/global/images/family/debian-12",
        "diskSizeGb": "320",  # int64 travels as a JSON string
        "diskType": "zones/europe-west4-a/diskTypes/pd-balanced",
    }


def test_default_boot_disk_without_footprint(server, make_lane, gcp_rung, job):
    make_lane(boot_disk_gb=30).create(job, gcp_rung(), "d1", 1)
    assert only_insert(server)["disks"][0]["initializeParams"]["diskSizeGb"] == "30"


def test_labels_carry_dispatch_and_rung(server, lane, gcp_rung, job):
    rung = gcp_rung("e2-standard-4", "us-central1-a", Provisioning.SPOT)
    lane.create(job, rung, "run-42", 3)
    labels = only_insert(server)["labels"]
    assert labels == {
        "eps-dispatch": "run-42",
        "eps-rung": "gcp_e2-standard-4_us-central1-a_spot",
        "eps-attempt": "3",
        "eps-copy": "0",
        "eps-provisioning": "spot",
    }
    for key, value in labels.items():
        assert re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", key)
        assert re.fullmatch(r"[a-z0-9_-]{0,63}", value)


def test_awkward_dispatch_id_becomes_a_valid_label_and_name(server, lane, gcp_rung, job):
    dispatch = "Run/2026-03-01T10:00:00Z#7 with spaces and a very long tail that goes on and on"
    lane.create(job, gcp_rung(), dispatch, 1)
    body = only_insert(server)
    assert re.fullmatch(r"[a-z0-9_-]{1,63}", body["labels"]["eps-dispatch"])
    assert GCE_NAME.fullmatch(body["name"])
    assert metadata(body)["eps-dispatch-id"] == dispatch  # kept verbatim where any text may go


def test_the_startup_script_is_the_machines_watcher_and_never_the_command(server, lane, gcp_rung, job):
    """eps launches the job over ssh; the startup script only guards the VM (eps.core.watcher):
    the job's command (with its quotes and ``rm -rf``) appears nowhere in the metadata."""
    rung = gcp_rung()
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEpsTestKey eps"
    lane.create(job, rung, "d1", 1, ssh_public_key=key, ssh_user="eps")
    meta = metadata(only_insert(server))
    script = meta["startup-script"]
    assert script == startup_script(job, "d1", rung, user="eps", work_root="eps-runs", linger_s=600)
    assert script.startswith("#!/bin/bash\n") and f"# rung {rung.key}" in script
    assert "getent passwd eps" in script and "eps-runs/d1/0" in script
    assert "shutdown -h now" in script and "no job was launched within 1800 s" in script
    assert "rm -rf" not in script and "it's" not in script
    assert meta["ssh-keys"] == f"eps:{key}"
    assert meta["enable-guest-attributes"] == "TRUE"
    assert meta["eps-rung-key"] == rung.key
    assert meta["eps-lane"] == "gcp"


def test_network_interface_and_service_account(server, make_lane, gcp_rung, job):
    make_lane(service_account="runner@test-project.iam.gserviceaccount.com").create(job, gcp_rung(), "d1", 1)
    body = only_insert(server)
    assert body["networkInterfaces"] == [
        {"network": "global/networks/default", "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]}
    ]
    assert body["serviceAccounts"] == [
        {
            "email": "runner@test-project.iam.gserviceaccount.com",
            "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
        }
    ]


def test_request_id_is_deterministic_uuid5(server, lane, gcp_rung, job):
    rung = gcp_rung()
    lane.create(job, rung, "d1", 2)
    (recorded,) = server.recorded("POST", INSERT)
    request_id = recorded.query["requestId"]
    assert request_id == insert_request_id("d1", rung, 2)
    parsed = uuid.UUID(request_id)
    assert parsed.version == 5
    assert parsed.int != 0
    assert insert_request_id("d1", rung, 3) != request_id
    assert insert_request_id("d1", gcp_rung(zone="us-central1-b"), 2) != request_id


def test_two_identical_creates_make_one_machine(server, lane, gcp_rung, job):
    rung = gcp_rung()
    first = lane.create(job, rung, "d1", 1)
    second = lane.create(job, rung, "d1", 1)

    assert first == second
    assert isinstance(first, Success)
    posts = server.recorded("POST", INSERT)
    assert len(posts) == 2
    assert posts[0].query["requestId"] == posts[1].query["requestId"]
    assert len(server.instances) == 1


def test_lost_insert_response_is_retried_without_a_second_machine(server, lane, gcp_rung, job):
    # The insert takes effect but its answer is lost (a 503 on the way back):
    # stamina retries with the same requestId and GCE hands back the same operation.
    server.fail("POST", INSERT, _backend_error(), after=True)
    result = lane.create(job, gcp_rung(), "d1", 1)

    assert isinstance(result, Success)
    posts = server.recorded("POST", INSERT)
    assert len(posts) == 2
    assert {p.query["requestId"] for p in posts} == {insert_request_id("d1", gcp_rung(), 1)}
    assert len(server.instances) == 1


def test_5xx_on_insert_is_retried_then_succeeds(server, lane, gcp_rung, job):
    server.fail("POST", INSERT, _backend_error(), times=2)
    assert isinstance(lane.create(job, gcp_rung(), "d1", 1), Success)
    assert len(server.recorded("POST", INSERT)) == 3
    assert len(server.instances) == 1


def test_5xx_on_operation_wait_is_retried(server, lane, gcp_rung, job):
    server.fail("POST", r"/operations/[^/]+/wait$", _backend_error())
    assert isinstance(lane.create(job, gcp_rung(), "d1", 1), Success)
    assert len(server.recorded("POST", r"/wait$")) == 2


def test_slow_operation_is_polled_with_injected_sleep(server, lane, gcp_rung, job, sleeps):
    from .fake_server import Created

    server.program("us-central1-a", Created(polls=3))
    assert isinstance(lane.create(job, gcp_rung(), "d1", 1), Success)
    assert len(server.recorded("POST", r"/wait$")) == 3
    assert sleeps == [0.5, 0.5]


def test_new_attempt_adopts_the_machine_this_dispatch_already_owns(server, lane, gcp_rung, job):
    rung = gcp_rung()
    first = lane.create(job, rung, "d1", 1)
    again = lane.create(job, rung, "d1", 2)  # new request id, same deterministic name: 409

    assert again == first
    assert len(server.instances) == 1
    assert len(server.recorded("POST", INSERT)) == 2


def test_name_taken_by_another_dispatch_is_refused(server, lane, gcp_rung, job):
    rung = gcp_rung()
    server.add_instance(
        "us-central1-a", {"name": instance_name("d1", rung), "labels": {"eps-dispatch": "someone-else"}}
    )
    result = lane.create(job, rung, "d1", 1)
    assert isinstance(result, Failure)
    assert result.failure().kind is FailureKind.INVALID_REQUEST
    assert result.failure().code == "alreadyExists"


def test_count_copies_get_distinct_machines(server, lane, gcp_rung, job):
    rung = gcp_rung()
    handles = [lane.create(job, rung, "d1", 1, copy=i).unwrap() for i in range(3)]
    assert len({h.id for h in handles}) == 3
    assert len(server.instances) == 3
    assert [b["labels"]["eps-copy"] for b in server.bodies("POST", INSERT)] == ["0", "1", "2"]


def test_rung_that_is_not_gcp_is_refused_without_a_request(server, lane, gcp_rung, job):
    from eps.core.model import evolve

    result = lane.create(job, evolve(gcp_rung(), kind=LaneKind.RUNPOD), "d1", 1)
    assert result.failure().kind is FailureKind.INVALID_REQUEST
    no_command = lane.create(evolve(job, command=()), gcp_rung(), "d1", 1)
    assert no_command.failure().kind is FailureKind.INVALID_REQUEST
    assert server.requests == []


def _backend_error():
    from .fake_server import unavailable

    return unavailable()
