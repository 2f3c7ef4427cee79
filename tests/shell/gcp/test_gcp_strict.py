"""The fake refuses what Compute refuses, with Compute's answer, and takes what eps sends.

Each rule: a bad request through the real ``google-cloud-compute`` client (or raw HTTP)
and the exact answer; then the requests eps builds today, all accepted."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from returns.result import Failure, Success

from eps.core.model import Provisioning
from eps.core.outcome import FailureKind

from . import fake_server as fs

PROJECT = "test-project"
ZONE = "us-central1-a"
INSERT = r"/zones/[^/]+/instances$"
UUID = "3f1c5a52-9d3e-4a8b-b1f0-6c2d7e8f9a01"
E2 = f"zones/{ZONE}/machineTypes/e2-standard-4"
NAME_RULE = "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'"
UUID_RULE = (
    "The request ID must be a valid UUID with the exception that zero UUID is not supported "
    "(00000000-0000-0000-0000-000000000000)."
)
KEY_RULE = (
    "violates format constraints. The key must start with a lowercase character, can only contain lowercase "
    "letters, numeric characters, underscores and dashes. The key can be at most 63 characters long. "
    "International characters are allowed."
)
VALUE_RULE = (
    "violates format constraints. The value can only contain lowercase letters, numeric characters, "
    "underscores and dashes. The value can be at most 63 characters long. International characters are allowed."
)
MIGRATE_RULE = "Scheduling must have preemptible be false when OnHostMaintenance isn't TERMINATE."
RESTART_RULE = "Scheduling must have preemptible be false when AutomaticRestart is true."


def compute() -> Any:
    from google.cloud import compute_v1

    return compute_v1


def insert(client: Any, *, request_id: str | None = None, zone: str = ZONE, **fields: Any) -> Any:
    """``instances.insert`` through the real client; the operation, or the exception it raised."""
    from google.api_core import exceptions

    c = compute()
    fields.setdefault("name", "vm-1")
    fields.setdefault("machine_type", E2)
    request = c.InsertInstanceRequest(
        project=PROJECT, zone=zone, instance_resource=c.Instance(**fields), request_id=request_id
    )
    try:
        return client.insert_unary(request=request, retry=None)
    except exceptions.GoogleAPICallError as exc:
        return exc


def invalid(exc: Any, field: str, value: str, why: str) -> None:
    """``exc`` is Compute's 400 for one bad field: message, ``errors[]`` and the ErrorInfo."""
    from google.api_core import exceptions

    message = f"Invalid value for field '{field}': '{value}'. {why}"
    assert isinstance(exc, exceptions.BadRequest), exc
    assert exc.errors == [{"message": message, "domain": "global", "reason": "invalid"}]
    assert exc.message.endswith(f": {message}")
    assert exc.reason == "INVALID_FIELD_VALUE"
    assert exc.domain == "compute.googleapis.com"
    assert exc.metadata == {"field": field, "value": value, "reason": why}
    assert json.loads(exc.response.content)["error"]["status"] == "INVALID_ARGUMENT"


def accepted(result: Any) -> None:
    assert not isinstance(result, Exception), result
    assert result.operation_type == "insert"


# --- instance names ----------------------------------------------------------------------


def test_a_bad_name_gets_computes_exact_answer(server, instances_client):
    exc = insert(instances_client, name="Bad_Name")
    assert exc.response.status_code == 400
    assert exc.response.headers["Content-Type"] == "application/json; charset=UTF-8"
    assert exc.response.content == (
        b'{"error":{"code":400,"message":"Invalid value for field \'resource.name\': \'Bad_Name\'. '
        b"Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'\","
        b'"errors":[{"message":"Invalid value for field \'resource.name\': \'Bad_Name\'. '
        b"Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'\","
        b'"domain":"global","reason":"invalid"}],"status":"INVALID_ARGUMENT",'
        b'"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"INVALID_FIELD_VALUE",'
        b'"domain":"compute.googleapis.com","metadata":{"field":"resource.name","value":"Bad_Name",'
        b'"reason":"Must be a match of regex \'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)\'"}}]}}'
    )
    assert server.instances == {}


@pytest.mark.parametrize("name", ["Bad_Name", "1vm", "vm-", "-vm", "vm.1", "vm_1", "a" * 64])
def test_names_outside_the_rule_are_refused(server, instances_client, name):
    invalid(insert(instances_client, name=name), "resource.name", name, NAME_RULE)


@pytest.mark.parametrize("name", ["a", "a" * 63, "vm-1-x9", "eps-d1-0123456789"])
def test_names_inside_the_rule_are_taken(server, instances_client, name):
    accepted(insert(instances_client, name=name))


def test_an_empty_body_names_the_missing_fields(server):
    status, payload = _raw(server, "POST", f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances", {})
    assert status == 400
    assert [e["message"] for e in json.loads(payload)["error"]["errors"]] == [
        "Required field 'resource.name' not specified",
        "Required field 'resource.machineType' not specified",
    ]


# --- requestId ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_id",
    ["r-1", "00000000-0000-0000-0000-000000000000", "3f1c5a52-9d3e-4a8b-b1f0-6c2d7e8f9a0", f"{{{UUID}}}"],
)
def test_request_id_must_be_a_nonzero_uuid(server, instances_client, request_id):
    invalid(insert(instances_client, request_id=request_id), "requestId", request_id, UUID_RULE)
    assert server.instances == {}


def test_a_refused_request_id_is_not_remembered(server, instances_client):
    invalid(insert(instances_client, request_id="r-1", name="vm-2"), "requestId", "r-1", UUID_RULE)
    accepted(insert(instances_client, request_id=UUID, name="vm-2"))
    assert list(server.instances) == [(ZONE, "vm-2")]


def test_delete_checks_its_request_id_too(server, instances_client):
    from google.api_core import exceptions

    accepted(insert(instances_client))
    with pytest.raises(exceptions.BadRequest) as caught:
        request = compute().DeleteInstanceRequest(project=PROJECT, zone=ZONE, instance="vm-1", request_id="0" * 32)
        instances_client.delete_unary(request=request, retry=None)
    invalid(caught.value, "requestId", "0" * 32, UUID_RULE)
    assert server.instances[(ZONE, "vm-1")]["status"] == "PROVISIONING"  # untouched


@pytest.mark.parametrize("request_id", [UUID, UUID.upper(), "00000000-0000-0000-0000-000000000001"])
def test_uuids_are_taken(server, instances_client, request_id):
    accepted(insert(instances_client, request_id=request_id))


# --- machine types -----------------------------------------------------------------------


def test_a_bare_machine_type_is_a_malformed_url(server, instances_client):
    invalid(insert(instances_client, machine_type="e2-standard-4"), "resource.machineType", "e2-standard-4", _URL)


def test_a_machine_type_of_another_zone_does_not_exist_here(server, instances_client):
    other = "zones/us-central1-b/machineTypes/e2-standard-4"
    why = f"Machine type with name 'e2-standard-4' does not exist in zone '{ZONE}'."
    invalid(insert(instances_client, machine_type=other), "resource.machineType", other, why)


@pytest.mark.parametrize(
    "machine_type",
    [
        E2,
        f"projects/{PROJECT}/zones/{ZONE}/machineTypes/e2-standard-4",
        f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE}/machineTypes/e2-standard-4",
        f"https://compute.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE}/machineTypes/e2-standard-4",
    ],
)
def test_zone_paths_and_urls_are_taken(server, instances_client, machine_type):
    accepted(insert(instances_client, machine_type=machine_type))


def test_a_fake_told_which_types_exist_refuses_others(server, instances_client):
    server.machine_types = frozenset({"e2-standard-4"})
    accepted(insert(instances_client))
    n2 = f"zones/{ZONE}/machineTypes/n2-highmem-16"
    why = f"Machine type with name 'n2-highmem-16' does not exist in zone '{ZONE}'."
    invalid(insert(instances_client, name="vm-2", machine_type=n2), "resource.machineType", n2, why)


_URL = "The URL is malformed."


# --- labels ------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["Eps", "1abc", "a.b", "k" * 64, "_x", "-x"])
def test_bad_label_keys_are_refused(server, instances_client, key):
    invalid(insert(instances_client, labels={key: "v"}), "resource.labels", "", f"Label key '{key}' {KEY_RULE}")


@pytest.mark.parametrize("value", ["Run/1", "A", "v" * 64, "a.b", "x y"])
def test_bad_label_values_are_refused(server, instances_client, value):
    why = f"Label value '{value}' {VALUE_RULE}"
    invalid(insert(instances_client, labels={"eps-dispatch": value}), "resource.labels", "", why)


def test_good_labels_are_taken(server, instances_client):
    labels = {"a" * 63: "v" * 63, "eps-dispatch": "", "k_1-x": "0-_a", "ключ": "значение"}
    accepted(insert(instances_client, labels=labels))
    assert server.instances[(ZONE, "vm-1")]["labels"] == labels


# --- scheduling --------------------------------------------------------------------------


def scheduling(**fields: Any) -> Any:
    return compute().Scheduling(**fields)


def test_spot_that_would_migrate_is_refused(server, instances_client):
    spot = scheduling(provisioning_model="SPOT", on_host_maintenance="MIGRATE")
    invalid(insert(instances_client, scheduling=spot), "resource.scheduling.preemptible", "true", MIGRATE_RULE)


def test_spot_that_would_restart_is_refused(server, instances_client):
    spot = scheduling(provisioning_model="SPOT", on_host_maintenance="TERMINATE", automatic_restart=True)
    invalid(insert(instances_client, scheduling=spot), "resource.scheduling.preemptible", "true", RESTART_RULE)


def test_legacy_preemptible_follows_the_same_rules(server, instances_client):
    legacy = scheduling(preemptible=True, automatic_restart=True)
    invalid(insert(instances_client, scheduling=legacy), "resource.scheduling.preemptible", "true", RESTART_RULE)


def test_every_violation_is_listed_the_first_on_top(server, instances_client):
    spot = scheduling(provisioning_model="SPOT", on_host_maintenance="MIGRATE", automatic_restart=True)
    exc = insert(instances_client, name="Bad_Name", scheduling=spot)
    first = f"Invalid value for field 'resource.name': 'Bad_Name'. {NAME_RULE}"
    assert exc.message.endswith(f": {first}")
    assert [e["message"] for e in exc.errors] == [
        first,
        f"Invalid value for field 'resource.scheduling.preemptible': 'true'. {MIGRATE_RULE}",
        f"Invalid value for field 'resource.scheduling.preemptible': 'true'. {RESTART_RULE}",
    ]
    assert [d["metadata"]["field"] for d in exc.details] == [
        "resource.name",
        "resource.scheduling.preemptible",
        "resource.scheduling.preemptible",
    ]


def test_e2_cannot_terminate_on_maintenance_unless_spot(server, instances_client):
    from google.api_core import exceptions

    standard = scheduling(provisioning_model="STANDARD", on_host_maintenance="TERMINATE")
    exc = insert(instances_client, scheduling=standard)
    message = "e2 instances do not support onHostMaintenance=TERMINATE unless they are preemptible."
    assert isinstance(exc, exceptions.BadRequest)
    assert exc.errors == [{"message": message, "domain": "global", "reason": "badRequest"}]
    n2 = f"zones/{ZONE}/machineTypes/n2-highmem-16"
    accepted(insert(instances_client, name="vm-n2", machine_type=n2, scheduling=standard))
    spot = scheduling(provisioning_model="SPOT", on_host_maintenance="TERMINATE", automatic_restart=False)
    accepted(insert(instances_client, name="vm-spot", scheduling=spot))


@pytest.mark.parametrize(
    "fields",
    [
        {"provisioning_model": "SPOT"},
        {"provisioning_model": "SPOT", "instance_termination_action": "STOP", "on_host_maintenance": "TERMINATE"},
        {"provisioning_model": "STANDARD", "on_host_maintenance": "MIGRATE", "automatic_restart": True},
        {},
    ],
)
def test_consistent_scheduling_is_taken(server, instances_client, fields):
    accepted(insert(instances_client, scheduling=scheduling(**fields)))


# --- order: refusals first, then the name clash, then the zone's script ------------------


def test_a_refused_insert_changes_nothing(server, instances_client):
    server.program(ZONE, fs.exhausted(PROJECT, ZONE))
    invalid(insert(instances_client, name="Bad_Name"), "resource.name", "Bad_Name", NAME_RULE)
    assert server.instances == {}
    result = insert(instances_client, name="vm-1")  # the scripted reply is still first in line
    assert result.status.name == "PENDING"
    assert server.instances == {}


def test_a_name_clash_is_409_before_any_scripted_reply(server, instances_client):
    from google.api_core import exceptions

    server.add_instance(ZONE, {"name": "vm-1", "machineType": E2})
    server.program(ZONE, fs.quota_sync("CPUS", "in region us-central1"))
    exc = insert(instances_client, name="vm-1")
    assert isinstance(exc, exceptions.Conflict)
    assert exc.errors == [
        {
            "message": f"The resource 'projects/{PROJECT}/zones/{ZONE}/instances/vm-1' already exists",
            "domain": "global",
            "reason": "alreadyExists",
        }
    ]
    assert json.loads(exc.response.content)["error"]["status"] == "ALREADY_EXISTS"
    assert isinstance(insert(instances_client, name="vm-2"), exceptions.Forbidden)  # the script was kept


# --- errors whose reason is only in details ------------------------------------------------


def test_a_detail_only_error_can_be_scripted(server, instances_client):
    from google.api_core import exceptions

    server.program(ZONE, fs.quota_detail_only("GPUS_ALL_REGIONS", "globally"))
    exc = insert(instances_client)
    assert isinstance(exc, exceptions.Forbidden)
    assert exc.response.content == (
        b'{"error":{"code":403,"message":"Quota \'GPUS_ALL_REGIONS\' exceeded.  Limit: 0.0 globally.",'
        b'"status":"PERMISSION_DENIED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo",'
        b'"reason":"QUOTA_EXCEEDED","domain":"compute.googleapis.com","metadata":{'
        b'"quota_metric":"compute.googleapis.com/gpus_all_regions","quota_limit":"GPUS-ALL-REGIONS-per-project",'
        b'"quota_limit_value":"0"}}]}}'
    )
    assert exc.errors == []
    assert (exc.reason, exc.domain) == ("QUOTA_EXCEEDED", "compute.googleapis.com")
    assert exc.metadata["quota_metric"] == "compute.googleapis.com/gpus_all_regions"


def test_any_detail_only_error(server, instances_client):
    from google.api_core import exceptions

    reply = fs.detail_only(429, "Rate Limit Exceeded", "RATE_LIMIT_EXCEEDED", {"service": "compute.googleapis.com"})
    server.fail("POST", INSERT, reply)
    exc = insert(instances_client)
    assert isinstance(exc, exceptions.TooManyRequests)
    assert json.loads(exc.response.content) == {
        "error": {
            "code": 429,
            "message": "Rate Limit Exceeded",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "RATE_LIMIT_EXCEEDED",
                    "domain": "compute.googleapis.com",
                    "metadata": {"service": "compute.googleapis.com"},
                }
            ],
        }
    }
    assert exc.reason == "RATE_LIMIT_EXCEEDED"


def test_field_errors_without_details_on_request(server, instances_client):
    server.error_details = False
    exc = insert(instances_client, name="Bad_Name")
    assert "details" not in json.loads(exc.response.content)["error"]
    assert exc.reason is None


def test_eps_reads_a_detail_only_quota_error(server, lane, gcp_rung, job):
    server.program(ZONE, fs.quota_detail_only("GPUS_ALL_REGIONS", "globally"))
    result = lane.create(job, gcp_rung("a3-highgpu-8g", ZONE, Provisioning.ON_DEMAND, gpus=8), "d1", 1)
    assert isinstance(result, Failure)
    assert result.failure().kind is FailureKind.QUOTA_GLOBAL


# --- what eps sends today passes ----------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "provisioning", "gpus", "options"),
    [
        ("e2-standard-4", Provisioning.SPOT, 0, {}),
        ("e2-standard-4", Provisioning.SPOT, 0, {"spot_termination_action": "STOP"}),
        ("e2-standard-8", Provisioning.ON_DEMAND, 0, {}),
        ("n2-highmem-16", Provisioning.ON_DEMAND, 0, {"external_ip": False}),
        ("a3-highgpu-8g", Provisioning.ON_DEMAND, 8, {}),
        ("a3-highgpu-2g", Provisioning.SPOT, 2, {"service_account": "sa@test-project.iam.gserviceaccount.com"}),
    ],
)
@pytest.mark.parametrize("dispatch", ["d1", "Run/2026-03-01T10:00:00Z#7 with spaces and a very long tail " * 2])
def test_what_eps_sends_today_is_taken(
    server, make_lane, gcp_rung, job, machine, provisioning, gpus, options, dispatch
):
    lane = make_lane(**options)
    rung = gcp_rung(machine, ZONE, provisioning, gpus=gpus, disk_gb=120)
    handles = [lane.create(job, rung, dispatch, 3, copy=copy) for copy in range(2)]
    assert all(isinstance(h, Success) for h in handles), handles
    for recorded in server.recorded("POST", INSERT):
        assert fs.insert_violations(ZONE, recorded.body) == []
        assert fs.request_id_violation(recorded.query["requestId"]) is None
    for handle in handles:
        assert isinstance(lane.delete(handle.unwrap()), Success)
    for recorded in server.recorded("DELETE", r"/instances/[^/]+$"):
        assert fs.request_id_violation(recorded.query["requestId"]) is None
    assert server.instances == {}


def _raw(server, method: str, path: str, body: object) -> tuple[int, bytes]:
    request = urllib.request.Request(  # noqa: S310 - 127.0.0.1
        server.endpoint + path, data=json.dumps(body).encode(), method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
