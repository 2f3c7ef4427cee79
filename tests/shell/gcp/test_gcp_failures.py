"""Every way a GCP create fails, classified, and fed back into the capacity snapshot."""

from __future__ import annotations

import json
import socket

import pytest
from returns.result import Failure, Success

from eps.core.model import Capacity, CapacitySnapshot, GcpState, Provisioning
from eps.core.outcome import FailureKind, LaneFailure, absorb
from eps.shell.util.retry import RetryPolicy

from . import fake_server as fs

PROJECT = "test-project"
INSERT = r"/zones/[^/]+/instances$"


def failure_of(result) -> LaneFailure:
    assert isinstance(result, Failure), result
    return result.failure()


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("ZONE_RESOURCE_POOL_EXHAUSTED", FailureKind.ZONE_EXHAUSTED),
        ("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", FailureKind.ZONE_EXHAUSTED),
    ],
)
def test_zone_codes_in_the_operation(server, lane, gcp_rung, job, code, kind):
    server.always("us-central1-a", fs.exhausted(PROJECT, "us-central1-a", code))
    failure = failure_of(lane.create(job, gcp_rung(), "d1", 1))
    assert failure.kind is kind
    assert failure.code == code
    assert "does not have enough resources" in failure.message
    assert server.instances == {}
    assert len(server.recorded("POST", INSERT)) == 1  # a DONE operation error is never retried


def test_operation_error_body_is_the_documented_shape(server, lane, gcp_rung, job):
    server.always("us-central1-a", fs.exhausted(PROJECT, "us-central1-a"))
    lane.create(job, gcp_rung(), "d1", 1)
    status, payload = server.handle(
        "POST", f"/compute/v1/projects/{PROJECT}/zones/us-central1-a/operations/operation-1/wait", b""
    )
    assert status == 200
    body = json.loads(payload)
    assert list(body) == [
        "kind",
        "id",
        "name",
        "zone",
        "operationType",
        "targetLink",
        "status",
        "progress",
        "insertTime",
        "startTime",
        "endTime",
        "error",
        "httpErrorStatusCode",
        "httpErrorMessage",
        "selfLink",
    ]
    assert (body["name"], body["status"], body["progress"]) == ("operation-1", "DONE", 100)
    assert payload.split(b'"endTime":', 1)[1].split(b",", 1)[1].rsplit(b',"selfLink"', 1)[0] == (
        b'"error":{"errors":[{"code":"ZONE_RESOURCE_POOL_EXHAUSTED",'
        b'"message":"The zone \'projects/test-project/zones/us-central1-a\' does not have enough resources '
        b'available to fulfill the request.  Try a different zone, or try again later."}]},'
        b'"httpErrorStatusCode":503,"httpErrorMessage":"SERVICE UNAVAILABLE"'
    )


def test_zone_failover_marks_the_exhausted_zone_and_lands_in_the_next(server, lane, gcp_rung, job):
    server.always("us-central1-a", fs.exhausted(PROJECT, "us-central1-a"))
    rungs = (
        gcp_rung("e2-standard-4", "us-central1-a", Provisioning.SPOT),
        gcp_rung("e2-standard-4", "us-central1-b", Provisioning.SPOT),
        gcp_rung("e2-standard-4", "us-central1-c", Provisioning.SPOT),
    )
    snapshot = CapacitySnapshot()
    handle = None
    for rung in rungs:
        match lane.create(job, rung, "d1", 1):
            case Success(started):
                handle = started
                break
            case Failure(failure):
                assert failure.kind is FailureKind.ZONE_EXHAUSTED
                snapshot = absorb(snapshot, rung, failure)

    assert handle is not None
    assert handle.zone == "us-central1-b"
    assert snapshot.attempted == (rungs[0].key,)
    assert snapshot.gcp == (GcpState("e2-standard-4", "us-central1-a", Capacity.EXHAUSTED, Provisioning.SPOT),)
    zones = [r.path.split("/zones/")[1].split("/")[0] for r in server.recorded("POST", INSERT)]
    assert zones == ["us-central1-a", "us-central1-b"]


def test_regional_quota_in_the_operation(server, lane, gcp_rung, job):
    server.program("us-central1-a", fs.quota_op("CPUS", "in region us-central1"))
    rung = gcp_rung()
    failure = failure_of(lane.create(job, rung, "d1", 1))
    assert failure == LaneFailure(
        FailureKind.QUOTA_REGION,
        "GCP QUOTA_EXCEEDED: Quota 'CPUS' exceeded. Limit: 0.0 in region us-central1.",
        code="QUOTA_EXCEEDED",
    )
    snapshot = absorb(CapacitySnapshot(), rung, failure)
    assert snapshot.gcp == (GcpState("e2-standard-4", "us-central1-*", Capacity.QUOTA_EXCEEDED, Provisioning.SPOT),)


@pytest.mark.parametrize("details", [False, True])
def test_gpus_all_regions_quota_is_global(server, lane, gcp_rung, job, details):
    server.program("us-central1-a", fs.quota_op("GPUS_ALL_REGIONS", "globally", details=details))
    rung = gcp_rung("a3-highgpu-8g", "us-central1-a", Provisioning.ON_DEMAND, gpus=8)
    failure = failure_of(lane.create(job, rung, "d1", 1))
    assert failure.kind is FailureKind.QUOTA_GLOBAL
    snapshot = absorb(CapacitySnapshot(), rung, failure)
    assert snapshot.gcp == (GcpState("a3-highgpu-8g", "*", Capacity.QUOTA_EXCEEDED, None),)


def test_global_metric_found_in_quota_info_alone(server, lane, gcp_rung, job):
    info = {"quotaInfo": {"metricName": "compute.googleapis.com/gpus_all_regions", "limit": 0}}
    reply = fs.OpError("QUOTA_EXCEEDED", "Quota exceeded.", 403, "FORBIDDEN", (info,))
    server.program("us-central1-a", reply)
    assert failure_of(lane.create(job, gcp_rung(gpus=8), "d1", 1)).kind is FailureKind.QUOTA_GLOBAL


@pytest.mark.parametrize(
    ("metric", "scope", "kind"),
    [
        ("NVIDIA_H100_GPUS", "in region us-central1", FailureKind.QUOTA_REGION),
        ("GPUS_ALL_REGIONS", "globally", FailureKind.QUOTA_GLOBAL),
    ],
)
def test_synchronous_403_quota(server, lane, gcp_rung, job, metric, scope, kind):
    server.program("us-central1-a", fs.quota_sync(metric, scope))
    failure = failure_of(lane.create(job, gcp_rung(gpus=1), "d1", 1))
    assert failure.kind is kind
    assert failure.code == "quotaExceeded"
    assert len(server.recorded("POST", INSERT)) == 1


def test_unsupported_operation_is_an_eps_request_bug_not_exhaustion(server, lane, gcp_rung, job):
    """Issue 13 item 3 (policy change: UNSUPPORTED_OPERATION used to read as ZONE_EXHAUSTED)."""
    from eps.core.outcome import stops_dispatch

    reply = fs.OpError(
        "UNSUPPORTED_OPERATION", "The requested operation is not supported for this machine type.", 400, "BAD REQUEST"
    )
    server.always("us-central1-a", reply)
    rung = gcp_rung()
    failure = failure_of(lane.create(job, rung, "d1", 1))
    assert failure.kind is FailureKind.INVALID_REQUEST
    assert failure.code == "UNSUPPORTED_OPERATION"
    assert stops_dispatch(failure)  # a request eps built wrong: no other rung would take it either
    assert absorb(CapacitySnapshot(), rung, failure).gcp == ()  # and it teaches nothing about capacity


@pytest.mark.parametrize(
    "message",
    [
        "The zone 'projects/test-project/zones/us-central1-a' does not have enough resources available to "
        "fulfill the request.  Try a different zone, or try again later.",
        "A a3-highgpu-1g VM instance is currently unavailable in the us-central1-a zone. Alternatively, you can "
        "try your request again with a different VM hardware configuration or at a later time.",
    ],
)
def test_an_unfamiliar_code_that_reads_as_a_stockout_is_zone_exhausted(server, lane, gcp_rung, job, message):
    server.program("us-central1-a", fs.OpError("ZONE_CAPACITY_SHORTFALL_NEW", message, 503, "SERVICE UNAVAILABLE"))
    failure = failure_of(lane.create(job, gcp_rung(), "d1", 1))
    assert (failure.kind, failure.code) == (FailureKind.ZONE_EXHAUSTED, "ZONE_CAPACITY_SHORTFALL_NEW")
    server.program("us-central1-a", fs.SyncError(400, "stockout", message))
    failure = failure_of(lane.create(job, gcp_rung(), "d2", 1))
    assert (failure.kind, failure.code) == (FailureKind.ZONE_EXHAUSTED, "stockout")


def test_an_unfamiliar_code_with_another_message_is_not_a_stockout(server, lane, gcp_rung, job):
    server.program("us-central1-a", fs.OpError("SOMETHING_ELSE", "Disk image is corrupt.", 400, "BAD REQUEST"))
    assert failure_of(lane.create(job, gcp_rung(), "d1", 1)).kind is FailureKind.INVALID_REQUEST


def test_a_403_whose_reason_is_only_in_details_is_not_auth(server, lane, gcp_rung, job):
    """Issue 13 item 3: the ErrorInfo of error.details is read as well as errors[].reason."""
    server.program("us-central1-a", fs.quota_detail_only("CPUS", "in region us-central1"))
    failure = failure_of(lane.create(job, gcp_rung(), "d1", 1))
    assert (failure.kind, failure.code) == (FailureKind.QUOTA_REGION, "QUOTA_EXCEEDED")


def test_synchronous_400_resource_not_ready_means_zone_out(server, lane, gcp_rung, job):
    server.program("us-central1-a", fs.not_ready(PROJECT, "us-central1-a"))
    failure = failure_of(lane.create(job, gcp_rung(), "d1", 1))
    assert failure.kind is FailureKind.ZONE_EXHAUSTED
    assert failure.code == "resourceNotReady"


def test_persistent_5xx_is_transient_after_bounded_retries(server, lane, gcp_rung, job):
    server.fail("POST", INSERT, fs.unavailable(), times=10)
    failure = failure_of(lane.create(job, gcp_rung(), "d1", 1))
    assert failure.kind is FailureKind.TRANSIENT
    assert failure.code == "backendError"
    assert len(server.recorded("POST", INSERT)) == 3  # RetryPolicy(attempts=3) in conftest


def test_429_is_rate_limited_after_bounded_reported_waits(server, make_lane, gcp_rung, job, sleeps):
    """Issue 13 item 2 (policy change: a rate refusal used to fail at once after one call):
    the same call again after doubling waits, each reported, then RATE_LIMITED."""
    waits: list[tuple[float, str]] = []
    lane = make_lane(on_wait=lambda s, why: waits.append((s, why)))
    server.fail("POST", INSERT, fs.SyncError(429, "rateLimitExceeded", "Rate Limit Exceeded"), times=10)
    failure = failure_of(lane.create(job, gcp_rung(), "d1", 1))
    assert failure.kind is FailureKind.RATE_LIMITED
    assert failure.code == "rateLimitExceeded"
    assert "still refused after 4 waits, 30 s in all" in failure.message
    assert failure.retry_after_s == 30.0
    assert len(server.recorded("POST", INSERT)) == 5  # bounded: 1 + 4 waits, never hammered
    assert [s for s, _ in waits] == [2.0, 4.0, 8.0, 16.0]
    assert all("rate limit (rateLimitExceeded)" in why for _, why in waits)
    assert sleeps == [2.0, 4.0, 8.0, 16.0]  # the injected sleep, nothing real


@pytest.mark.parametrize(
    "reply",
    [
        fs.SyncError(403, "rateLimitExceeded", "Rate Limit Exceeded", "usageLimits"),
        fs.SyncError(403, "userRateLimitExceeded", "User Rate Limit Exceeded", "usageLimits"),
        fs.detail_only(403, "Rate Limit Exceeded", "RATE_LIMIT_EXCEEDED", {"service": "compute.googleapis.com"}),
        fs.SyncError(429, "tooManyRequests", "Too Many Requests"),
    ],
)
def test_a_rate_refusal_is_waited_out_and_the_same_rung_lands(server, make_lane, gcp_rung, job, sleeps, reply):
    waits: list[float] = []
    lane = make_lane(on_wait=lambda s, why: waits.append(s))
    server.fail("POST", INSERT, reply, times=2)
    result = lane.create(job, gcp_rung(), "d1", 1)
    assert isinstance(result, Success), result
    assert waits == [2.0, 4.0]
    assert len(server.instances) == 1
    assert len({r.query["requestId"] for r in server.recorded("POST", INSERT)}) == 1  # the same insert again


def test_a_rate_limit_inside_the_operation_resends_the_insert(server, make_lane, gcp_rung, job, sleeps):
    waits: list[float] = []
    lane = make_lane(on_wait=lambda s, why: waits.append(s))
    zone = "us-central1-a"
    limited = fs.exhausted(PROJECT, zone, "RESOURCE_OPERATION_RATE_EXCEEDED")
    server.program(zone, limited, limited, fs.Created())
    result = lane.create(job, gcp_rung(), "d1", 1)
    assert isinstance(result, Success), result
    assert waits == [2.0, 4.0]
    ids = [r.query["requestId"] for r in server.recorded("POST", INSERT)]
    assert len(ids) == 3 and len(set(ids)) == 3  # a repeated id would only bring back the refused operation
    assert len(server.instances) == 1


def test_a_rate_limit_inside_the_operation_that_never_lifts(server, make_lane, gcp_rung, job, sleeps):
    lane = make_lane(rate_limit_waits=2, rate_limit_wait_s=1.0)
    server.always("us-central1-a", fs.exhausted(PROJECT, "us-central1-a", "RESOURCE_OPERATION_RATE_EXCEEDED"))
    failure = failure_of(lane.create(job, gcp_rung(), "d1", 1))
    assert (failure.kind, failure.code) == (FailureKind.RATE_LIMITED, "RESOURCE_OPERATION_RATE_EXCEEDED")
    assert failure.retry_after_s == 4.0
    assert len(server.recorded("POST", INSERT)) == 3
    assert server.instances == {}


def test_a_rate_limit_on_reads_is_waited_out_too(server, make_lane, gcp_rung, job, sleeps):
    waits: list[float] = []
    lane = make_lane(on_wait=lambda s, why: waits.append(s))
    handle = lane.create(job, gcp_rung(), "d1", 1).unwrap()
    server.fail("GET", r"/instances/[^/]+$", fs.SyncError(403, "rateLimitExceeded", "Rate Limit Exceeded"), times=1)
    assert isinstance(lane.status(handle), Success)
    assert waits == [2.0]


def test_resource_not_ready_on_delete_is_retried_not_zone_exhausted(server, make_lane, gcp_rung, job, sleeps):
    """Issue 13 item 3: a busy instance is deleted after a bounded wait."""
    waits: list[tuple[float, str]] = []
    lane = make_lane(on_wait=lambda s, why: waits.append((s, why)))
    handle = lane.create(job, gcp_rung(), "d1", 1).unwrap()
    busy = fs.SyncError(400, "resourceNotReady", f"The resource '{handle.id}' is not ready")
    server.fail("DELETE", r"/instances/[^/]+$", busy, times=2)
    released = lane.delete(handle)
    assert isinstance(released, Success), released
    assert server.instances == {}
    assert [s for s, _ in waits] == [2.0, 4.0]
    assert "busy (resourceNotReady)" in waits[0][1]
    server.add_instance("us-central1-a", {"name": handle.id, "machineType": "zones/us-central1-a/machineTypes/x"})
    server.fail("DELETE", r"/instances/[^/]+$", busy, times=100)
    failure = failure_of(lane.delete(handle))
    assert (failure.kind, failure.code) == (FailureKind.TRANSIENT, "resourceNotReady")


def test_resource_not_ready_inside_the_delete_operation_is_retried(server, make_lane, gcp_rung, job, sleeps):
    lane = make_lane()
    handle = lane.create(job, gcp_rung(), "d1", 1).unwrap()
    busy = fs.OpError("resourceNotReady", f"The resource '{handle.id}' is not ready", 400, "BAD REQUEST")
    server.program_deletes("us-central1-a", busy)
    assert isinstance(lane.delete(handle), Success)
    assert len(server.recorded("DELETE", r"/instances/[^/]+$")) == 2
    assert server.instances == {}


def test_unreachable_endpoint_is_transient(make_lane, gcp_rung, job):
    from google.api_core.client_options import ClientOptions

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    lane = make_lane(client_options=ClientOptions(api_endpoint=f"http://127.0.0.1:{port}"))
    failure = failure_of(lane.create(job, gcp_rung(), "d1", 1))
    assert failure.kind is FailureKind.TRANSIENT
    assert failure.message.startswith("GCP unreachable: ConnectionError")


def test_503_on_get_is_bounded_by_our_retry_policy(server, make_lane, gcp_rung, job):
    # The client's own GET retry (minutes) is off: our RetryPolicy bounds it.
    lane = make_lane(
        retry=RetryPolicy(attempts=2, timeout_s=5.0, wait_initial_s=0.0, wait_max_s=0.0, wait_jitter_s=0.0)
    )
    handle = lane.create(job, gcp_rung(), "d1", 1).unwrap()
    before = len(server.recorded("GET", r"/instances/[^/]+$"))  # create reads the VM's status once
    server.fail("GET", r"/instances/[^/]+$", fs.unavailable(), times=5)
    assert failure_of(lane.status(handle)).kind is FailureKind.TRANSIENT
    assert len(server.recorded("GET", r"/instances/[^/]+$")) - before == 2


def test_operation_that_never_finishes_leaves_the_machines_fate_unknown(server, make_lane, gcp_rung, job):
    """The insert was accepted and its operation never finished: the VM may yet appear, so the
    walk must not move on to another rung (issue 11): UNKNOWN_FATE stops the dispatch."""
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    server.program("us-central1-a", fs.Created(polls=1_000))
    lane = make_lane(sleep=sleep, clock=lambda: now[0], operation_timeout_s=10.0, poll_interval_s=2.0)
    failure = failure_of(lane.create(job, gcp_rung(), "d1", 1))
    assert failure.kind is FailureKind.UNKNOWN_FATE
    assert failure.code == "OPERATION_TIMEOUT"
    assert len(server.recorded("POST", r"/wait$")) == 5


def test_401_is_auth(server, lane, gcp_rung, job):
    server.program("us-central1-a", fs.unauthenticated())
    assert failure_of(lane.create(job, gcp_rung(), "d1", 1)).kind is FailureKind.AUTH


def test_403_permission_is_auth(server, lane, gcp_rung, job):
    server.program("us-central1-a", fs.forbidden())
    failure = failure_of(lane.create(job, gcp_rung(), "d1", 1))
    assert failure.kind is FailureKind.AUTH
    assert failure.code == "forbidden"
    assert "compute.instances.create" in failure.message


def test_rejected_token_never_appears_in_the_message(server, make_lane, gcp_rung, job):
    from google.oauth2.credentials import Credentials

    token = "ya29.SECRET-ACCESS-TOKEN"  # noqa: S105 - a fake token to look for
    server.always("us-central1-a", fs.unauthenticated())
    failure = failure_of(make_lane(credentials=Credentials(token=token)).create(job, gcp_rung(), "d1", 1))
    assert failure.kind is FailureKind.AUTH
    assert "SECRET" not in failure.message
    server.always("us-central1-a", fs.forbidden())
    failure = failure_of(make_lane(credentials=Credentials(token=token)).create(job, gcp_rung(), "d1", 1))
    assert failure.kind is FailureKind.AUTH
    assert "SECRET" not in failure.message


def test_missing_application_default_credentials_is_auth(server, make_lane, gcp_rung, job, tmp_path, monkeypatch):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    failure = failure_of(make_lane(credentials=None).create(job, gcp_rung(), "d1", 1))
    assert failure.kind is FailureKind.AUTH
    assert "GOOGLE_APPLICATION_CREDENTIALS" in failure.message
    assert server.requests == []


def test_unknown_zone_is_an_invalid_request(server, lane, gcp_rung, job):
    server.program("us-central1-z", fs.not_found(f"projects/{PROJECT}/zones/us-central1-z"))
    failure = failure_of(lane.create(job, gcp_rung(zone="us-central1-z"), "d1", 1))
    assert failure.kind is FailureKind.INVALID_REQUEST
    assert failure.code == "notFound"


def test_a_truncated_insert_answer_is_retried_into_one_machine(server, lane, gcp_rung, job):
    """The VM is made, its answer is cut short: the same insert (same request id) is sent again
    and answers with the same operation; one machine, no crash (issue 11)."""
    server.truncate("POST", r"/instances$")
    result = lane.create(job, gcp_rung(), "dtrunc01", 0)
    assert isinstance(result, Success), result
    assert len(server.instances) == 1
    assert len(server.recorded("POST", r"/instances$")) == 2


def test_answers_that_stay_unreadable_are_a_transient_failure(server, lane, gcp_rung, job):
    server.truncate("GET", r"/aggregated/instances", times=100)
    failure = lane.list_by_label(None).failure()
    assert failure.kind is FailureKind.TRANSIENT and failure.code == "bad_response"


@pytest.mark.parametrize("status", ["STOPPED", "DEPROVISIONING", "TERMINATED", "STOPPING"])
def test_a_vm_that_is_not_up_after_its_insert_did_not_start(server, lane, gcp_rung, job, status):
    """Issue 13 item 3: the insert's operation finishing is not the VM running: its status says."""
    server.program("us-central1-a", fs.Created(status=status))
    failure = failure_of(lane.create(job, gcp_rung(), "d1", 1))
    assert (failure.kind, failure.code) == (FailureKind.TRANSIENT, status)
    assert "never ran" in failure.message


@pytest.mark.parametrize(("status", "state"), [("PROVISIONING", "starting"), ("STAGING", "starting")])
def test_a_vm_on_its_way_up_is_started_not_running(server, lane, gcp_rung, job, status, state):
    server.program("us-central1-a", fs.Created(status=status))
    handle = lane.create(job, gcp_rung(), "d1", 1).unwrap()
    assert handle.state.value == state


@pytest.mark.parametrize("status", ["PENDING", "STOPPED", "DEPROVISIONING"])
def test_status_of_a_vm_that_is_not_running(server, lane, gcp_rung, job, status):
    handle = lane.create(job, gcp_rung(provisioning=Provisioning.ON_DEMAND), "d1", 1).unwrap()
    server.set_status("us-central1-a", handle.id, status)
    assert lane.status(handle).unwrap().state.value != "running"


def test_a_pending_vm_that_gets_no_capacity_in_time_is_deleted(server, make_lane, gcp_rung, job):
    now = [0.0]
    waits: list[tuple[float, str]] = []

    def sleep(seconds: float) -> None:
        now[0] += seconds

    lane = make_lane(
        sleep=sleep, clock=lambda: now[0], capacity_wait_s=60.0, poll_interval_s=10.0,
        on_wait=lambda s, why: waits.append((s, why)),
    )  # fmt: skip
    server.program("us-central1-a", fs.Created(status="PENDING"))
    rung = gcp_rung("a3-highgpu-1g", provisioning=Provisioning.ON_DEMAND, gpus=1)
    failure = failure_of(lane.create(job, rung, "d1", 1))
    assert (failure.kind, failure.code) == (FailureKind.ZONE_EXHAUSTED, "PENDING_TIMEOUT")
    assert server.instances == {}  # the request was withdrawn: nothing left waiting for capacity
    assert waits[0][0] == 60.0 and "PENDING" in waits[0][1]
    assert 60.0 <= now[0] <= 80.0
