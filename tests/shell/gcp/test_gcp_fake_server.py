"""The fake server answers in Compute's byte shapes: operations with their real fields,
passing through PENDING, and Google's JSON error bodies."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from . import fake_server as fs

ZONE_PATH = "/compute/v1/projects/test-project/zones/us-central1-a"
ZONE_URL = "https://www.googleapis.com/compute/v1/projects/test-project/zones/us-central1-a"
REQUEST_ID = "3f1c5a52-9d3e-4a8b-b1f0-6c2d7e8f9a01"
BODY = {"name": "vm-1", "machineType": "zones/us-central1-a/machineTypes/e2-standard-2"}
NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def still() -> Iterator[fs.FakeCompute]:
    """A server whose clock stands still, so operation bodies are byte-exact."""
    fake = fs.FakeCompute("test-project", clock=lambda: NOON).start()
    yield fake
    fake.stop()


def call(server, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.endpoint + path, data=data, method=method)  # noqa: S310 - 127.0.0.1
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def operation(status: str, n: int = 1, *, target: str = "vm-1", kind: str = "insert", **extra: object) -> bytes:
    """The ``compute#operation`` Compute sends, member order included."""
    body: dict[str, object] = {
        "kind": "compute#operation",
        "id": str(4_000_000_000_000_000_000 + n),
        "name": f"operation-{n}",
        "zone": ZONE_URL,
        "operationType": kind,
        "targetLink": f"{ZONE_URL}/instances/{target}",
        "targetId": "1001",
        "status": status,
        "progress": 100 if status == "DONE" else 0,
        "insertTime": "2026-03-01T12:00:00.000+00:00",
    }
    if status != "PENDING":
        body["startTime"] = "2026-03-01T12:00:00.000+00:00"
    if status == "DONE":
        body["endTime"] = "2026-03-01T12:00:00.000+00:00"
    body.update(extra)
    body["selfLink"] = f"{ZONE_URL}/operations/operation-{n}"
    return fs.dumps(body)


def test_insert_is_pending_then_running_then_done_and_a_duplicate_is_ignored(still):
    still.program("us-central1-a", fs.Created(polls=2))
    assert call(still, "POST", ZONE_PATH + f"/instances?requestId={REQUEST_ID}", BODY) == (200, operation("PENDING"))
    assert call(still, "GET", ZONE_PATH + "/operations/operation-1") == (200, operation("RUNNING"))
    assert call(still, "POST", ZONE_PATH + "/operations/operation-1/wait") == (200, operation("DONE"))
    # Same requestId: the same operation, no second instance, no 409.
    assert call(still, "POST", ZONE_PATH + f"/instances?requestId={REQUEST_ID}", BODY) == (200, operation("DONE"))
    assert list(still.instances) == [("us-central1-a", "vm-1")]
    status, payload = call(still, "GET", ZONE_PATH + "/instances/vm-1")
    assert status == 200
    instance = json.loads(payload)
    assert instance["status"] == "RUNNING"
    assert instance["machineType"] == f"{ZONE_URL}/machineTypes/e2-standard-2"


def test_the_real_client_reads_every_operation_field(still):
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1

    options = {
        "credentials": AnonymousCredentials(),
        "client_options": ClientOptions(api_endpoint=still.endpoint),
        "transport": "rest",
    }
    instances = compute_v1.InstancesClient(**options)
    operations = compute_v1.ZoneOperationsClient(**options)
    try:
        request = compute_v1.InsertInstanceRequest(
            project="test-project",
            zone="us-central1-a",
            instance_resource=compute_v1.Instance(name="vm-1", machine_type=BODY["machineType"]),
            request_id=REQUEST_ID,
        )
        op = instances.insert_unary(request=request)
        assert op.status == compute_v1.Operation.Status.PENDING
        assert (op.kind, op.operation_type, op.progress) == ("compute#operation", "insert", 0)
        assert op.target_link == f"{ZONE_URL}/instances/vm-1"
        assert op.target_id == 1001
        assert op.id == 4_000_000_000_000_000_001
        assert op.zone == ZONE_URL
        assert op.insert_time == "2026-03-01T12:00:00.000+00:00"
        assert op.self_link == f"{ZONE_URL}/operations/operation-1"
        done = operations.wait(project="test-project", zone="us-central1-a", operation=op.name)
        assert done.status == compute_v1.Operation.Status.DONE
        assert (done.progress, done.end_time) == (100, "2026-03-01T12:00:00.000+00:00")
    finally:
        instances.transport.close()
        operations.transport.close()


def test_delete_operation(still):
    call(still, "POST", ZONE_PATH + "/instances", BODY)
    call(still, "POST", ZONE_PATH + "/operations/operation-1/wait")
    assert call(still, "DELETE", ZONE_PATH + "/instances/vm-1") == (200, operation("PENDING", 2, kind="delete"))
    assert call(still, "GET", ZONE_PATH + "/operations/operation-2") == (200, operation("DONE", 2, kind="delete"))
    assert still.instances == {}


def test_synchronous_quota_body(still):
    still.program("us-central1-a", fs.quota_sync("GPUS_ALL_REGIONS", "globally"))
    status, payload = call(still, "POST", ZONE_PATH + "/instances", BODY)
    assert status == 403
    assert payload == (
        b'{"error":{"code":403,"message":"Quota \'GPUS_ALL_REGIONS\' exceeded.  Limit: 0.0 globally.",'
        b'"errors":[{"message":"Quota \'GPUS_ALL_REGIONS\' exceeded.  Limit: 0.0 globally.",'
        b'"domain":"usageLimits","reason":"quotaExceeded"}],"status":"PERMISSION_DENIED"}}'
    )


def test_quota_operation_error_body(still):
    still.program("us-central1-a", fs.quota_op("CPUS", "in region us-central1"))
    call(still, "POST", ZONE_PATH + "/instances", BODY)
    error = {
        "errors": [{"code": "QUOTA_EXCEEDED", "message": "Quota 'CPUS' exceeded.  Limit: 0.0 in region us-central1."}]
    }
    expected = json.loads(
        operation("DONE", error=error, httpErrorStatusCode=403, httpErrorMessage="FORBIDDEN").decode()
    )
    del expected["targetId"]  # no instance was made
    assert call(still, "POST", ZONE_PATH + "/operations/operation-1/wait") == (200, fs.dumps(expected))
    assert still.instances == {}


def test_list_filter_and_unknown_operation(server):
    server.add_instance("us-central1-a", {"name": "a", "labels": {"eps-dispatch": "d1"}})
    server.add_instance("us-central1-a", {"name": "b", "labels": {"eps-dispatch": "d2"}})
    status, payload = call(server, "GET", ZONE_PATH + "/instances?filter=labels.eps-dispatch+%3D+%22d1%22")
    assert status == 200
    assert [i["name"] for i in json.loads(payload)["items"]] == ["a"]
    status, payload = call(server, "GET", ZONE_PATH + "/instances?filter=name+~+x")
    assert status == 400
    assert call(server, "GET", ZONE_PATH + "/operations/operation-9")[0] == 404
