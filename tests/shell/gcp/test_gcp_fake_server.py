"""The fake server answers in the byte shapes notes/providers.md documents."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from . import fake_server as fs

ZONE_PATH = "/compute/v1/projects/test-project/zones/us-central1-a"


def call(server, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.endpoint + path, data=data, method=method)  # noqa: S310 - 127.0.0.1
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_insert_then_operation_get_then_duplicate(server):
    body = {"name": "vm-1", "machineType": "zones/us-central1-a/machineTypes/e2-standard-2"}
    assert call(server, "POST", ZONE_PATH + "/instances?requestId=r-1", body) == (
        200,
        b'{"name":"operation-1","status":"RUNNING"}',
    )
    assert call(server, "GET", ZONE_PATH + "/operations/operation-1") == (
        200,
        b'{"name":"operation-1","status":"DONE"}',
    )
    # Same requestId: the same operation, no second instance, no 409.
    assert call(server, "POST", ZONE_PATH + "/instances?requestId=r-1", body) == (
        200,
        b'{"name":"operation-1","status":"DONE"}',
    )
    assert list(server.instances) == [("us-central1-a", "vm-1")]
    status, payload = call(server, "GET", ZONE_PATH + "/instances/vm-1")
    assert status == 200
    instance = json.loads(payload)
    assert instance["status"] == "RUNNING"
    assert instance["machineType"].endswith("/zones/us-central1-a/machineTypes/e2-standard-2")


def test_synchronous_quota_body(server):
    server.program("us-central1-a", fs.quota_sync("GPUS_ALL_REGIONS", "globally"))
    status, payload = call(server, "POST", ZONE_PATH + "/instances", {"name": "vm-1"})
    assert status == 403
    assert payload == (
        b'{"error":{"code":403,"message":"Quota \'GPUS_ALL_REGIONS\' exceeded.  Limit: 0.0 globally.",'
        b'"errors":[{"reason":"quotaExceeded","domain":"usageLimits",'
        b'"message":"Quota \'GPUS_ALL_REGIONS\' exceeded.  Limit: 0.0 globally."}]}}'
    )


def test_quota_operation_error_body(server):
    server.program("us-central1-a", fs.quota_op("CPUS", "in region us-central1"))
    call(server, "POST", ZONE_PATH + "/instances", {"name": "vm-1"})
    assert call(server, "POST", ZONE_PATH + "/operations/operation-1/wait") == (
        200,
        b'{"name":"operation-1","status":"DONE","httpErrorStatusCode":403,"httpErrorMessage":"FORBIDDEN",'
        b'"error":{"errors":[{"code":"QUOTA_EXCEEDED","message":"Quota \'CPUS\' exceeded.  '
        b'Limit: 0.0 in region us-central1."}]}}',
    )
    assert server.instances == {}


def test_list_filter_and_unknown_operation(server):
    server.add_instance("us-central1-a", {"name": "a", "labels": {"eps-dispatch": "d1"}})
    server.add_instance("us-central1-a", {"name": "b", "labels": {"eps-dispatch": "d2"}})
    status, payload = call(server, "GET", ZONE_PATH + "/instances?filter=labels.eps-dispatch+%3D+%22d1%22")
    assert status == 200
    assert [i["name"] for i in json.loads(payload)["items"]] == ["a"]
    status, payload = call(server, "GET", ZONE_PATH + "/instances?filter=name+~+x")
    assert status == 400
    assert call(server, "GET", ZONE_PATH + "/operations/operation-9")[0] == 404
