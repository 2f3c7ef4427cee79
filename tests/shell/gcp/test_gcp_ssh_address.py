"""GCP instances report where ssh reaches them, and keep the metadata eps's keys travel in.

``networkInterfaces[0].networkIP`` always; ``accessConfigs[0].natIP`` only when the insert
asked for an external IP, and only while the VM is up (Compute releases an ephemeral
address when the VM stops).  Both addresses are knobs of the fake."""

from __future__ import annotations

import json
import urllib.request

from returns.result import Success

from eps.core.model import Provisioning

from . import fake_server as fs

ZONE = "us-central1-a"
ZONE_PATH = f"/compute/v1/projects/test-project/zones/{ZONE}"
E2 = f"zones/{ZONE}/machineTypes/e2-standard-4"
NAT = [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]


def get(server, name: str) -> dict:
    with urllib.request.urlopen(f"{server.endpoint}{ZONE_PATH}/instances/{name}", timeout=5) as response:  # noqa: S310
        return json.loads(response.read())


def post(server, path: str, body: object | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(f"{server.endpoint}{ZONE_PATH}{path}", data=data, method="POST")  # noqa: S310
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
        return json.loads(response.read())


def test_an_eps_vm_has_an_internal_and_an_external_address(server, instances_client, lane, gcp_rung, job):
    handle = lane.create(job, gcp_rung(), "d1", 1).unwrap()
    nic = get(server, handle.id)["networkInterfaces"][0]
    assert nic["networkIP"] == "10.128.0.2"
    assert nic["accessConfigs"][0]["natIP"] == "127.0.0.1"
    assert server.ssh_address(ZONE, handle.id) == "127.0.0.1"
    # The real client reads them where eps will.
    instance = instances_client.get(project="test-project", zone=ZONE, instance=handle.id)
    assert instance.network_interfaces[0].network_i_p == "10.128.0.2"
    assert instance.network_interfaces[0].access_configs[0].nat_i_p == "127.0.0.1"


def test_addresses_are_knobs(server, lane, gcp_rung, job):
    server.nat_ip = "127.0.0.7"
    server.network_ip = "10.9.8.7"
    handle = lane.create(job, gcp_rung(), "d1", 1).unwrap()
    nic = server.instances[(ZONE, handle.id)]["networkInterfaces"][0]
    assert (nic["networkIP"], nic["accessConfigs"][0]["natIP"]) == ("10.9.8.7", "127.0.0.7")
    with fs.running(nat_ip="192.0.2.10") as other:
        post(other, "/instances", {"name": "vm-1", "machineType": E2, "networkInterfaces": [{"accessConfigs": NAT}]})
        assert other.ssh_address(ZONE, "vm-1") is None  # not up yet
        post(other, "/operations/operation-1/wait")
        assert other.ssh_address(ZONE, "vm-1") == "192.0.2.10"


def test_internal_addresses_are_handed_out_in_order(server, lane, gcp_rung, job):
    handles = [lane.create(job, gcp_rung(), "d1", 1, copy=i).unwrap() for i in range(3)]
    ips = [server.instances[(ZONE, h.id)]["networkInterfaces"][0]["networkIP"] for h in handles]
    assert ips == ["10.128.0.2", "10.128.0.3", "10.128.0.4"]


def test_no_external_ip_asked_for_none_given(server, make_lane, gcp_rung, job):
    handle = make_lane(external_ip=False).create(job, gcp_rung(), "d1", 1).unwrap()
    nic = get(server, handle.id)["networkInterfaces"][0]
    assert "accessConfigs" not in nic
    assert nic["networkIP"] == "10.128.0.2"
    assert server.ssh_address(ZONE, handle.id) is None


def test_an_insert_nobody_waits_on_still_brings_the_vm_up(server):
    """A walk that died right after the insert leaves its operation unpolled: the VM still
    comes up (reading it finishes the insert, as the time that passed would have)."""
    post(server, "/instances", {"name": "vm-2", "machineType": E2, "networkInterfaces": [{"accessConfigs": NAT}]})
    assert get(server, "vm-2")["status"] == "RUNNING"
    assert server.ssh_address(ZONE, "vm-2") == "127.0.0.1"


def test_the_external_address_comes_and_goes_with_the_vm(server):
    server.program(ZONE, fs.Created(polls=2))
    post(server, "/instances", {"name": "vm-1", "machineType": E2, "networkInterfaces": [{"accessConfigs": NAT}]})
    post(server, "/operations/operation-1/wait")
    config = get(server, "vm-1")["networkInterfaces"][0]["accessConfigs"][0]
    assert "natIP" not in config  # PROVISIONING
    assert server.ssh_address(ZONE, "vm-1") is None  # operation RUNNING, the VM not up yet
    server.set_status(ZONE, "vm-1", "STAGING")
    assert server.ssh_address(ZONE, "vm-1") == "127.0.0.1"
    post(server, "/operations/operation-1/wait")
    assert get(server, "vm-1")["networkInterfaces"][0]["accessConfigs"][0] == {
        "name": "External NAT",
        "type": "ONE_TO_ONE_NAT",
        "kind": "compute#accessConfig",
        "networkTier": "PREMIUM",
        "natIP": "127.0.0.1",
    }
    server.set_status(ZONE, "vm-1", "TERMINATED")
    assert server.ssh_address(ZONE, "vm-1") is None
    server.set_status(ZONE, "vm-1", "RUNNING")
    assert server.ssh_address(ZONE, "vm-1") == "127.0.0.1"


def test_a_static_address_stays_as_asked(server):
    static = [{"name": "External NAT", "type": "ONE_TO_ONE_NAT", "natIP": "203.0.113.5"}]
    post(server, "/instances", {"name": "vm-1", "machineType": E2, "networkInterfaces": [{"accessConfigs": static}]})
    assert server.ssh_address(ZONE, "vm-1") == "203.0.113.5"  # even before it runs
    post(server, "/operations/operation-1/wait")
    server.set_status(ZONE, "vm-1", "TERMINATED")
    assert server.ssh_address(ZONE, "vm-1") == "203.0.113.5"


def test_metadata_items_are_kept_for_ssh_keys(server, lane, gcp_rung, job):
    keys = "eps:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEps eps@runner"
    body = {"name": "vm-1", "machineType": E2, "metadata": {"items": [{"key": "ssh-keys", "value": keys}]}}
    post(server, "/instances", body)
    assert server.metadata(ZONE, "vm-1") == {"ssh-keys": keys}
    metadata = get(server, "vm-1")["metadata"]
    assert metadata["kind"] == "compute#metadata"
    assert metadata["fingerprint"]
    assert metadata["items"] == [{"key": "ssh-keys", "value": keys}]
    handle = lane.create(job, gcp_rung(provisioning=Provisioning.ON_DEMAND), "d1", 1)
    assert isinstance(handle, Success)
    kept = server.metadata(ZONE, handle.unwrap().id)
    assert kept["eps-dispatch-id"] == "d1"
    assert kept["startup-script"].startswith("#!/bin/bash\n")


def test_the_recorded_request_is_not_the_stored_instance(server, lane, gcp_rung, job):
    lane.create(job, gcp_rung(), "d1", 1)
    (body,) = server.bodies("POST", r"/instances$")
    assert body["networkInterfaces"] == [{"network": "global/networks/default", "accessConfigs": NAT}]
