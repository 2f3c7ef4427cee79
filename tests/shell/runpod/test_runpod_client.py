"""The RunPod client against the local server: lifecycle and every failure class of the document."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import httpx
import pytest
from returns.result import Failure, Success
from runpod_testkit import (
    KEY,
    FakeRunpod,
    Fault,
    SleepRecorder,
    cpu_rung,
    fast_settings,
    gpu_rung,
    schema_validator,
)

from eps.core.outcome import FailureKind, Handle, LaneFailure
from eps.shell.lanes.runpod.client import RungAttempt, RunpodClient
from eps.shell.lanes.runpod.wire import ApiKey, PodStatus, RunpodSettings

T = TypeVar("T")
CREATE = schema_validator("CreatePodRequest")
POD = schema_validator("Pod")


def run(settings: RunpodSettings, sleep: SleepRecorder, op: Callable[[RunpodClient], T]) -> T:
    with RunpodClient(ApiKey(KEY), settings, sleep=sleep) as client:
        return op(client)


def start(settings: RunpodSettings, sleep: SleepRecorder, instance: str = "cpu3g-4-16") -> RungAttempt:
    return run(settings, sleep, lambda c: c.start(cpu_rung(instance), "eps-d1-1", dispatch_id="d1"))


def failure_of(attempt: RungAttempt) -> LaneFailure:
    assert isinstance(attempt.result, Failure), attempt
    return attempt.result.failure()


def assert_bodies_valid(fake: FakeRunpod) -> None:
    bodies = fake.created_bodies()
    assert bodies
    for body in bodies:
        assert [e.message for e in CREATE.iter_errors(body)] == []


# --- lifecycle -------------------------------------------------------------------------------


def test_cpu_pod_goes_provisioning_starting_running(fake: FakeRunpod, settings, sleeper) -> None:
    attempt = start(settings, sleeper)
    assert isinstance(attempt.result, Success)
    handle = attempt.result.unwrap()
    assert handle == Handle(
        "runpod", handle.kind, handle.id, "runpod/cpu3g-4-16/-/on-demand", "EU-RO-1", None, "cpu3g-4-16", "running"
    )
    assert fake.count("POST", "/v2/pods") == 1
    assert fake.count("GET", "/v2/pods/{id}") == 2  # STARTING, then RUNNING
    assert sleeper.waits == [settings.poll_interval_s] * 2
    assert_bodies_valid(fake)
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in fake.requests)
    for pod in fake.live_pods():
        assert [e.message for e in POD.iter_errors(pod)] == []


def test_gpu_pod_when_pinned_is_one_multi_gpu_pod(fake: FakeRunpod, settings, sleeper) -> None:
    attempt = run(settings, sleeper, lambda c: c.start(gpu_rung("NVIDIA H100 80GB HBM3", 8), "eps-g-1"))
    assert isinstance(attempt.result, Success)
    (body,) = fake.created_bodies()
    assert body["gpu"] == {"id": "NVIDIA H100 80GB HBM3", "count": 8, "allowedCudaVersions": ["12.8", "12.9", "13.0"]}
    assert_bodies_valid(fake)


def test_get_list_by_prefix_and_terminate(fake: FakeRunpod, settings, sleeper) -> None:
    def scenario(c: RunpodClient):
        a = c.start(cpu_rung(), "eps-aaa-1")
        b = c.start(cpu_rung("cpu5c-2-4"), "eps-bbb-1")
        c.create_pod(cpu_rung(), "someone-elses-pod")
        ours = c.list_pods()
        just_a = c.list_pods("eps-aaa-")
        got = c.get_pod(b.result.unwrap().id)
        gone = c.terminate(a.result.unwrap().id)
        again = c.terminate(a.result.unwrap().id)  # already gone: still fine
        after = c.list_pods()
        return ours, just_a, got, gone, again, after

    ours, just_a, got, gone, again, after = run(settings, sleeper, scenario)
    assert sorted(p.name for p in ours.unwrap()) == ["eps-aaa-1", "eps-bbb-1"]
    assert [p.name for p in just_a.unwrap()] == ["eps-aaa-1"]
    assert got.unwrap().status is PodStatus.RUNNING
    assert got.unwrap().machine == "cpu5c-2"
    assert gone == Success(None)
    assert again == Success(None)
    assert [p.name for p in after.unwrap()] == ["eps-bbb-1"]
    assert fake.count("DELETE", "/v2/pods/{id}") == 2


# --- failure classes (createPod's table) ------------------------------------------------------


def test_400_no_capacity_is_not_retried(fake: FakeRunpod, settings, sleeper) -> None:
    fake.stock["cpu3g-4-16"] = 0
    failure = failure_of(start(settings, sleeper))
    assert failure.kind is FailureKind.NO_CAPACITY
    assert "no longer any instances available" in failure.message
    assert fake.count("POST", "/v2/pods") == 1


def test_400_rule_violation_is_invalid_request_for_this_candidate(fake: FakeRunpod, settings, sleeper) -> None:
    fake.rule_violation["cpu3g"] = "cpu3g is not offered in the requested data center"
    failure = failure_of(start(settings, sleeper))
    assert failure.kind is FailureKind.INVALID_REQUEST
    assert failure.code == "400"
    assert "not offered in the requested data center" in failure.message
    assert fake.count("POST", "/v2/pods") == 1


def test_402_is_runpods_own_limit_not_an_eps_cap(fake: FakeRunpod, settings, sleeper) -> None:
    fake.insufficient_balance = True
    failure = failure_of(start(settings, sleeper))
    assert failure.kind is FailureKind.INSUFFICIENT_BALANCE
    assert "RunPod's own" in failure.message
    assert "not an eps cap" in failure.message
    assert fake.count("POST", "/v2/pods") == 1


def test_403_forbidden_skips_the_candidate(fake: FakeRunpod, settings, sleeper) -> None:
    fake.forbidden.add("cpu3g")
    failure = failure_of(start(settings, sleeper))
    assert failure.kind is FailureKind.FORBIDDEN
    assert fake.count("POST", "/v2/pods") == 1


def test_401_bad_key_is_auth(fake: FakeRunpod, sleeper) -> None:
    with RunpodClient(ApiKey("wrong-key"), fast_settings(fake.url), sleep=sleeper) as c:
        failure = failure_of(c.start(cpu_rung(), "eps-d-1"))
    assert failure.kind is FailureKind.AUTH
    assert "invalid bearer token" in failure.message
    assert fake.count("POST", "/v2/pods") == 1


def test_422_is_a_bug_and_never_retried(fake: FakeRunpod, settings, sleeper) -> None:
    fake.queue("POST", "/v2/pods", Fault(422, detail="Request validation failed."))
    failure = failure_of(start(settings, sleeper))
    assert failure.kind is FailureKind.INVALID_REQUEST
    assert failure.code == "422"
    assert "bug in eps" in failure.message
    assert fake.count("POST", "/v2/pods") == 1
    assert sleeper.waits == []


def test_the_server_really_answers_422_with_errors(fake: FakeRunpod) -> None:
    response = httpx.post(
        f"{fake.url}/v2/pods",
        json={"name": "x", "image": "i", "cpu": {"id": "cpu3g", "vcpuCount": 4}, "bogus": 1},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["errors"]


def test_429_waits_retry_after_then_succeeds(fake: FakeRunpod, settings, sleeper) -> None:
    fake.queue("POST", "/v2/pods", Fault(429, retry_after=12), Fault(429, retry_after=3))
    attempt = start(settings, sleeper)
    assert isinstance(attempt.result, Success)
    assert sleeper.waits[:2] == [12.0, 3.0]
    assert fake.count("POST", "/v2/pods") == 3


def test_429_waits_are_bounded_then_rate_limited(fake: FakeRunpod, sleeper) -> None:
    settings = fast_settings(fake.url, max_rate_limit_waits=3, max_retry_after_s=30.0)
    fake.queue("POST", "/v2/pods", *[Fault(429, retry_after=90)] * 10)
    failure = failure_of(start(settings, sleeper))
    assert failure.kind is FailureKind.RATE_LIMITED
    assert failure.retry_after_s == 30.0
    assert sleeper.waits == [30.0, 30.0, 30.0]  # capped and bounded
    assert fake.count("POST", "/v2/pods") == 4


@pytest.mark.parametrize("status", [500, 502, 503])
def test_5xx_is_retried_in_place_then_succeeds(fake: FakeRunpod, settings, sleeper, status: int) -> None:
    fake.queue("POST", "/v2/pods", Fault(status), Fault(status))
    attempt = start(settings, sleeper)
    assert isinstance(attempt.result, Success)
    assert fake.count("POST", "/v2/pods") == 3
    assert len(fake.live_pods()) == 1


def test_5xx_that_persists_is_transient_after_bounded_retries(fake: FakeRunpod, settings, sleeper) -> None:
    fake.queue("POST", "/v2/pods", *[Fault(503, detail="upstream unhealthy")] * 10)
    failure = failure_of(start(settings, sleeper))
    assert failure.kind is FailureKind.TRANSIENT
    assert failure.code == "503"
    assert "upstream unhealthy" in failure.message
    assert fake.count("POST", "/v2/pods") == settings.retry.attempts


def test_5xx_after_the_pod_was_made_does_not_create_twice(fake: FakeRunpod, settings, sleeper) -> None:
    fake.queue("POST", "/v2/pods", Fault(502, process=True))
    attempt = start(settings, sleeper)
    assert isinstance(attempt.result, Success)
    assert fake.count("POST", "/v2/pods") == 1  # the look-up by name found it
    assert len(fake.live_pods()) == 1


def test_slow_answer_times_out_and_is_retried(fake: FakeRunpod, sleeper) -> None:
    settings = fast_settings(fake.url, request_timeout_s=0.2)
    fake.queue("POST", "/v2/pods", Fault(delay_s=0.6, process=True))
    attempt = start(settings, sleeper)
    assert isinstance(attempt.result, Success)
    assert len(fake.live_pods()) == 1  # the slow create did its work; nothing made twice


def test_slow_answers_every_time_give_transient(fake: FakeRunpod, sleeper) -> None:
    settings = fast_settings(fake.url, request_timeout_s=0.1)
    fake.queue("GET", "/v2/pods/{id}", *[Fault(delay_s=0.3)] * 3)
    failure = failure_of(start(settings, sleeper))
    assert failure.kind is FailureKind.TRANSIENT
    assert failure.code == "timeout"
    assert "pod terminated" in failure.message
    assert fake.live_pods() == []  # created, never confirmed: released


def test_connection_refused_is_transient(sleeper) -> None:
    settings = fast_settings("http://127.0.0.1:9")
    failure = failure_of(start(settings, sleeper))
    assert failure.kind is FailureKind.TRANSIENT
    assert failure.code == "transport"


def test_pod_that_errors_is_terminated(fake: FakeRunpod, settings, sleeper) -> None:
    fake.fail_start.add("cpu3g")
    failure = failure_of(start(settings, sleeper))
    assert failure.code == "pod_error"
    assert fake.live_pods() == []
    assert fake.count("DELETE", "/v2/pods/{id}") == 1


def test_poll_is_bounded_and_a_stuck_pod_is_terminated(fake: FakeRunpod, sleeper) -> None:
    settings = fast_settings(fake.url, poll_interval_s=1.0, poll_timeout_s=4.0)
    fake.stuck.add("cpu3g")
    attempt = start(settings, sleeper)
    failure = failure_of(attempt)
    assert failure.code == "poll_timeout"
    assert sleeper.waits == [1.0] * 4
    assert fake.live_pods() == []
    assert attempt.leftover is None


def test_a_pod_that_cannot_be_terminated_is_reported_as_leftover(fake: FakeRunpod, sleeper) -> None:
    settings = fast_settings(fake.url, poll_interval_s=1.0, poll_timeout_s=2.0)
    fake.stuck.add("cpu3g")
    fake.queue("DELETE", "/v2/pods/{id}", *[Fault(503)] * 5)
    attempt = start(settings, sleeper)
    assert failure_of(attempt).code == "poll_timeout"
    assert attempt.leftover is not None
    assert attempt.leftover.id == fake.live_pods()[0]["id"]
    assert "left for reconcile" in failure_of(attempt).message


# --- a create whose answer was lost: never sent twice (issues 11 and 13) ------------------------


def _lost_create_settings(fake: FakeRunpod) -> RunpodSettings:
    # the create takes longer than the client waits for its answer; the pod is made all the same
    fake.queue("POST", "/v2/pods", Fault(delay_s=0.6, process=True))
    return fast_settings(fake.url, request_timeout_s=0.3, lost_create_patience_s=2.0, poll_interval_s=0.05)


def test_a_lost_create_answer_finds_the_pod_by_name(fake: FakeRunpod, sleeper) -> None:
    attempt = start(_lost_create_settings(fake), sleeper)
    assert isinstance(attempt.result, Success), attempt
    assert fake.count("POST", "/v2/pods") == 1
    assert len(fake.live_pods()) == 1


def test_a_lost_create_whose_lookup_is_rate_limited_waits_and_looks_again(fake: FakeRunpod, sleeper) -> None:
    settings = _lost_create_settings(fake)
    fake.queue("GET", "/v2/pods", Fault(429, retry_after=1), Fault(429, retry_after=1))
    attempt = start(settings, sleeper)
    assert isinstance(attempt.result, Success), attempt
    assert fake.count("POST", "/v2/pods") == 1
    assert 1.0 in sleeper.waits  # Retry-After was waited out
    assert len(fake.live_pods()) == 1


@pytest.mark.parametrize("status", [401, 403, 500])
def test_a_lost_create_whose_lookup_fails_is_never_sent_again(fake: FakeRunpod, sleeper, status: int) -> None:
    settings = _lost_create_settings(fake)
    fake.queue("GET", "/v2/pods", *[Fault(status)] * 20)
    failure = failure_of(start(settings, sleeper))
    assert failure.kind is FailureKind.UNKNOWN_FATE
    assert fake.count("POST", "/v2/pods") == 1  # one create, whatever the look-ups said
    assert len(fake.live_pods()) == 1  # left for reconcile, which finds it by its name


def test_a_5xx_create_is_sent_again_only_when_no_pod_was_made(fake: FakeRunpod, settings, sleeper) -> None:
    fake.queue("POST", "/v2/pods", Fault(500, process=True))  # answered 500, but made the pod
    attempt = start(settings, sleeper)
    assert isinstance(attempt.result, Success), attempt
    assert fake.count("POST", "/v2/pods") == 1
    assert len(fake.live_pods()) == 1
