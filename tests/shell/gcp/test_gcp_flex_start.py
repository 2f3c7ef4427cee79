"""Flex-start rungs on GCP (issue 13 item 5), the [gcp] settings a real project needs (item 4),
the image per machine family (issue 12), and the ssh plumbing (issue 12): through the real
google-cloud-compute client against the strict fake."""

from __future__ import annotations

import pytest
from returns.result import Failure, Success

from eps.core.model import Job, Provisioning
from eps.core.outcome import FailureKind
from eps.core.tables import FLEX_START_MAX_RUN_S, GCP_GPU_IMAGES, flex_start_run_s
from eps.shell.config.settings import GcpSettings
from eps.shell.lanes.gcp.client import GcpClient

from . import fake_server as fs
from .conftest import FAST_RETRY, PROJECT

ZONE = "us-central1-a"
INSERT = r"/zones/[^/]+/instances$"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEpsTestKey eps@runner"


def long_job(hours: float = 3) -> Job:
    return Job("gpu-1", int(hours * 3600), command=("python", "train.py"))


def test_a_flex_start_rung_asks_for_flex_start_as_documented(server, make_lane, gcp_rung):
    lane = make_lane(capacity_wait_s=600.0)
    rung = gcp_rung("a3-highgpu-1g", ZONE, Provisioning.FLEX_START, gpus=1)
    handle = lane.create(long_job(), rung, "dflex1", 0)
    assert isinstance(handle, Success), handle
    (body,) = server.bodies("POST", INSERT)
    assert body["scheduling"] == {
        "provisioningModel": "FLEX_START",
        "maxRunDuration": {"seconds": str(flex_start_run_s(3 * 3600))},
        "instanceTerminationAction": "DELETE",
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
    }
    assert body["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert body["params"] == {"requestValidForDuration": {"seconds": "600"}}
    assert body["labels"]["eps-provisioning"] == "flex-start"
    # time limit (1.5 x 3 h) + kill grace + linger, within 10 min..7 d
    assert flex_start_run_s(3 * 3600) == 3 * 3600 * 3 // 2 + 30 + 600
    assert flex_start_run_s(6 * 86_400) == FLEX_START_MAX_RUN_S
    assert flex_start_run_s(0) == 630  # never below 10 min either: the linger alone is 600 s


def test_the_fake_refuses_flex_start_outside_its_limits(server, instances_client):
    from google.api_core import exceptions
    from google.cloud import compute_v1

    machine = f"zones/{ZONE}/machineTypes/a3-highgpu-1g"
    bad = compute_v1.Instance(
        name="vm-1",
        machine_type=machine,
        scheduling=compute_v1.Scheduling(
            provisioning_model="FLEX_START",
            max_run_duration=compute_v1.Duration(seconds=8 * 86_400),
            instance_termination_action="DELETE",
            on_host_maintenance="MIGRATE",
        ),
        params=compute_v1.InstanceParams(request_valid_for_duration=compute_v1.Duration(seconds=30)),
    )
    with pytest.raises(exceptions.BadRequest) as caught:
        instances_client.insert_unary(project=PROJECT, zone=ZONE, instance_resource=bad)
    fields = [d["metadata"]["field"] for d in caught.value.details]
    assert fields == [
        "resource.scheduling.maxRunDuration",
        "resource.scheduling.onHostMaintenance",
        "resource.params.requestValidForDuration",
    ]
    assert server.instances == {}


def test_a_flex_start_vm_waits_pending_for_capacity_then_runs(server, make_lane, gcp_rung):
    now = [0.0]
    waits: list[tuple[float, str]] = []

    def sleep(seconds: float) -> None:
        now[0] += seconds

    lane = make_lane(
        sleep=sleep, clock=lambda: now[0], capacity_wait_s=600.0, poll_interval_s=30.0,
        on_wait=lambda s, why: waits.append((s, why)),
    )  # fmt: skip
    server.program(ZONE, fs.Created(pending_gets=3, then="RUNNING"))
    rung = gcp_rung("a3-highgpu-1g", ZONE, Provisioning.FLEX_START, gpus=1)
    handle = lane.create(long_job(), rung, "dflex2", 0)
    assert isinstance(handle, Success), handle
    assert handle.unwrap().state.value == "running"
    assert len(waits) == 1 and "PENDING" in waits[0][1] and waits[0][0] == 600.0  # reported once
    assert now[0] == 90.0


def test_a_flex_start_request_that_gets_no_capacity_is_zone_exhausted(server, make_lane, gcp_rung):
    from eps.core.model import Capacity, CapacitySnapshot, GcpState
    from eps.core.outcome import absorb

    lane = make_lane(capacity_wait_s=600.0)
    server.program(ZONE, fs.Created(pending_gets=2, then=None))
    rung = gcp_rung("a3-highgpu-1g", ZONE, Provisioning.FLEX_START, gpus=1)
    failure = lane.create(long_job(), rung, "dflex3", 0).failure()
    assert (failure.kind, failure.code) == (FailureKind.ZONE_EXHAUSTED, "VANISHED_BEFORE_RUNNING")
    snap = absorb(CapacitySnapshot(), rung, failure)
    assert snap.gcp == (GcpState("a3-highgpu-1g", ZONE, Capacity.EXHAUSTED, Provisioning.FLEX_START),)


def test_a_gpu_machine_boots_its_familys_gpu_image_and_a_cpu_machine_the_plain_one(server, make_lane, gcp_rung, job):
    lane = make_lane()
    lane.create(job, gcp_rung(), "dimg1", 0)
    lane.create(long_job(), gcp_rung("a3-highgpu-1g", ZONE, Provisioning.FLEX_START, gpus=1), "dimg2", 0)
    cpu, gpu = (b["disks"][0]["initializeParams"]["sourceImage"] for b in server.bodies("POST", INSERT))
    assert cpu == "projects/debian-cloud/global/images/family/debian-12"
    assert gpu == dict(GCP_GPU_IMAGES)["a3"]
    assert "nvidia" in gpu and "deeplearning-platform-release" in gpu
    other = make_lane(gpu_image="projects/p/global/images/family/mine")
    other.create(long_job(), gcp_rung("a3-highgpu-2g", ZONE, Provisioning.SPOT, gpus=2), "dimg3", 0)
    assert server.bodies("POST", INSERT)[-1]["disks"][0]["initializeParams"]["sourceImage"].endswith("/mine")


def test_the_gcp_settings_reach_the_request(server, gcp_rung, job):
    from google.auth.credentials import AnonymousCredentials

    server.networks = frozenset({"default", "research"})
    settings = GcpSettings(
        project=PROJECT,
        endpoint=server.endpoint,
        network="global/networks/research",
        subnetwork="regions/us-central1/subnetworks/research-usc1",
        external_ip=False,
        disk_type="pd-ssd",
        service_account="runner@test-project.iam.gserviceaccount.com",
        scopes=("https://www.googleapis.com/auth/devstorage.read_write",),
        tags=("eps-job", "allow-ssh"),
    )
    lane = GcpClient.from_settings(settings, retry=FAST_RETRY, credentials=AnonymousCredentials(), sleep=lambda s: None)
    try:
        assert isinstance(lane.create(job, gcp_rung(), "dset1", 0), Success)
    finally:
        lane.close()
    (body,) = server.bodies("POST", INSERT)
    assert body["networkInterfaces"] == [
        {"network": "global/networks/research", "subnetwork": "regions/us-central1/subnetworks/research-usc1"}
    ]
    assert body["disks"][0]["initializeParams"]["diskType"] == f"zones/{ZONE}/diskTypes/pd-ssd"
    assert body["serviceAccounts"] == [
        {"email": "runner@test-project.iam.gserviceaccount.com",
         "scopes": ["https://www.googleapis.com/auth/devstorage.read_write"]}
    ]  # fmt: skip
    assert body["tags"] == {"items": ["eps-job", "allow-ssh"]}


def test_the_defaults_work_in_a_default_project(server, gcp_rung, job):
    from google.auth.credentials import AnonymousCredentials

    settings = GcpSettings(project=PROJECT, endpoint=server.endpoint)
    lane = GcpClient.from_settings(settings, retry=FAST_RETRY, credentials=AnonymousCredentials(), sleep=lambda s: None)
    try:
        assert isinstance(lane.create(job, gcp_rung(), "ddef1", 0), Success)
    finally:
        lane.close()
    (body,) = server.bodies("POST", INSERT)
    assert body["networkInterfaces"] == [
        {"network": "global/networks/default", "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]}
    ]
    assert "serviceAccounts" not in body and "tags" not in body


def test_a_project_without_the_default_network_says_so_in_one_line(server, lane, gcp_rung, job):
    server.networks = frozenset({"research"})
    failure = lane.create(job, gcp_rung(), "dnet1", 0).failure()
    assert failure.kind is FailureKind.INVALID_REQUEST
    assert "\n" not in failure.message
    assert failure.message.startswith(
        "GCP project test-project has no such VPC network: set gcp.network (and gcp.subnetwork)"
    )
    assert "The referenced network resource cannot be found" in failure.message
    assert server.instances == {}


def test_ssh_keys_travel_in_the_documented_metadata_format(server, lane, gcp_rung, job):
    handle = lane.create(job, gcp_rung(), "dssh1", 0, ssh_public_key=KEY + "\n", ssh_user="eps").unwrap()
    assert server.metadata(ZONE, handle.id)["ssh-keys"] == f"eps:{KEY}"
    other = lane.create(job, gcp_rung(), "dssh2", 0)
    assert "ssh-keys" not in server.metadata(ZONE, other.unwrap().id)


@pytest.mark.parametrize(
    ("user", "key"), [("eps", "not a key"), ("eps", KEY + "\nssh-rsa AAAA second"), ("Root;x", KEY)]
)
def test_a_bad_ssh_key_or_user_is_refused_before_any_call(server, lane, gcp_rung, job, user, key):
    result = lane.create(job, gcp_rung(), "dssh3", 0, ssh_public_key=key, ssh_user=user)
    assert isinstance(result, Failure)
    assert result.failure().kind is FailureKind.INVALID_REQUEST
    assert server.requests == []


def test_the_address_is_the_external_nat_ip_and_port_22(server, lane, gcp_rung, job):
    handle = lane.create(job, gcp_rung(), "daddr1", 0).unwrap()
    assert lane.address(handle) == Success(("127.0.0.1", 22))
    server.nat_ip = "192.0.2.44"
    handle2 = lane.create(job, gcp_rung(zone="us-central1-b"), "daddr2", 0).unwrap()
    assert lane.address(handle2) == Success(("192.0.2.44", 22))
    server.set_status(ZONE, handle.id, "TERMINATED")  # an ephemeral address goes with the running VM
    assert lane.address(handle).failure().kind is FailureKind.TRANSIENT


def test_a_vm_without_an_external_address_names_the_setting(server, make_lane, gcp_rung, job):
    lane = make_lane(external_ip=False)
    handle = lane.create(job, gcp_rung(), "daddr3", 0).unwrap()
    failure = lane.address(handle).failure()
    assert failure.kind is FailureKind.INVALID_REQUEST
    assert "gcp.external_ip = true" in failure.message
