"""``--count N``: N independent pods at once, each dispatch walking its own rungs."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

from returns.result import Failure, Success
from runpod_testkit import KEY, FakeRunpod, SleepRecorder, cpu_rung, fast_settings, schema_validator

from eps.core.model import Job
from eps.core.outcome import FailureKind
from eps.shell.runpod import ApiKey, FanOutResult, RunpodClient, RunpodLane, fan_out

CREATE = schema_validator("CreatePodRequest")
JOB = Job("cpu-small", 3600, count=50, command=("python", "shard.py"))
RUNGS = [cpu_rung("cpu3g-4-16"), cpu_rung("cpu5g-4-16"), cpu_rung("cpu3c-8-16"), cpu_rung("cpu5c-8-16")]


def run_fan_out(fake: FakeRunpod, n: int, rungs=RUNGS, **overrides) -> list[FanOutResult]:
    settings = fast_settings(fake.url, poll_interval_s=0.01, **overrides)

    async def go() -> list[FanOutResult]:
        async with RunpodClient(ApiKey(KEY), settings, sleep=SleepRecorder()) as client:
            return await fan_out([(f"d{i:02d}", rungs) for i in range(n)], JOB, client=client)

    return asyncio.run(go())


def test_fifty_pods_with_exhausted_flavors_moving_on(fake: FakeRunpod) -> None:
    fake.stock.update({"cpu3g": 12, "cpu5g": 0})  # cpu5g: none left at all
    fake.forbidden.add("cpu3c")  # no access to this pool
    fake.stock["cpu5c-8-16"] = 100
    results = run_fan_out(fake, 50, concurrency=16)

    assert [r.dispatch_id for r in results] == [f"d{i:02d}" for i in range(50)]
    assert all(isinstance(r.result, Success) for r in results)
    handles = [r.result.unwrap() for r in results]
    assert Counter(h.machine for h in handles) == {"cpu3g-4-16": 12, "cpu5c-8-16": 38}
    assert all(h.state == "running" for h in handles)
    for r in results:  # each dispatch walked its own ladder: cpu3g, then cpu5g, cpu3c, cpu5c
        kinds = [a.result.failure().kind for a in r.attempts if isinstance(a.result, Failure)]
        if r.result.unwrap().machine == "cpu5c-8-16":
            assert kinds == [FailureKind.NO_CAPACITY, FailureKind.NO_CAPACITY, FailureKind.FORBIDDEN]
            assert [a.pod_name for a in r.attempts][-1] == f"eps-{r.dispatch_id}-4"
        else:
            assert kinds == []
    live = fake.live_pods()
    assert len(live) == 50  # nothing extra left behind
    assert sorted(p["id"] for p in live) == sorted(h.id for h in handles)
    assert all(p["status"] == "RUNNING" for p in live)
    assert len({p["name"] for p in live}) == 50
    for body in fake.created_bodies():
        assert [e.message for e in CREATE.iter_errors(body)] == []
    assert fake.peak_in_flight <= 16  # the concurrency setting holds


def test_partial_failure_is_reported_per_dispatch(fake: FakeRunpod) -> None:
    fake.stock.update({"cpu3g": 5, "cpu5g": 3, "cpu3c": 0, "cpu5c": 2})
    results = run_fan_out(fake, 20)
    ok = [r for r in results if isinstance(r.result, Success)]
    failed = [r for r in results if isinstance(r.result, Failure)]
    assert len(ok) == 10
    assert len(failed) == 10
    for r in failed:
        assert r.result.failure().kind is FailureKind.NO_CAPACITY
        assert len(r.attempts) == 4
        assert r.leftovers == ()
    assert len(fake.live_pods()) == 10


def test_one_dispatch_with_a_failing_pod_does_not_leave_it(fake: FakeRunpod) -> None:
    fake.fail_start.add("cpu3g")  # every cpu3g pod errors on start
    results = run_fan_out(fake, 5)
    assert all(r.result.unwrap().machine == "cpu5g-4-16" for r in results)
    assert {p["name"].rsplit("-", 1)[1] for p in fake.live_pods()} == {"2"}
    assert len(fake.live_pods()) == 5


def test_insufficient_balance_stops_the_whole_fan_out(fake: FakeRunpod) -> None:
    fake.insufficient_balance = True
    results = run_fan_out(fake, 30)
    assert all(r.result.failure().kind is FailureKind.INSUFFICIENT_BALANCE for r in results)
    assert all("not an eps cap" in r.result.failure().message for r in results)
    assert all(len(r.attempts) <= 1 for r in results)  # never walks on to other rungs
    assert fake.live_pods() == []


def test_every_candidate_400_reads_as_a_request_problem(fake: FakeRunpod) -> None:
    for flavor in ("cpu3g", "cpu5g", "cpu3c", "cpu5c"):
        fake.rule_violation[flavor] = "image is not allowed for CPU pods"
    (result,) = run_fan_out(fake, 1)
    failure = result.result.failure()
    assert failure.kind is FailureKind.INVALID_REQUEST
    assert "likely a request problem" in failure.message
    assert len(result.attempts) == 4


def test_422_stops_the_dispatch_without_walking_on(fake: FakeRunpod) -> None:
    from runpod_testkit import Fault

    fake.queue("POST", "/v2/pods", Fault(422))
    (result,) = run_fan_out(fake, 1)
    assert result.result.failure().code == "422"
    assert len(result.attempts) == 1


def test_sync_facade(fake: FakeRunpod) -> None:
    lane = RunpodLane(ApiKey(KEY), fast_settings(fake.url, poll_interval_s=0.01))
    results = lane.fan_out([("s1", RUNGS), ("s2", RUNGS)], JOB)
    assert all(isinstance(r.result, Success) for r in results)
    assert {p.name for p in lane.list_pods("eps-s").unwrap()} == {"eps-s1-1", "eps-s2-1"}
    assert len(lane.terminate_prefix("eps-s1-").unwrap()) == 1
    assert [p.name for p in lane.list_pods().unwrap()] == ["eps-s2-1"]


def test_a_cancelled_fan_out_releases_the_pods_it_made(fake: FakeRunpod) -> None:
    fake.stuck.add("cpu3g")  # pods stay PROVISIONING, so every dispatch is mid-poll when cancelled
    settings = fast_settings(fake.url, poll_interval_s=0.02, poll_timeout_s=60.0)

    async def go() -> None:
        async with RunpodClient(ApiKey(KEY), settings) as client:
            work = fan_out([(f"c{i}", RUNGS) for i in range(10)], JOB, client=client)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(work, timeout=0.5)

    asyncio.run(go())
    assert fake.count("POST", "/v2/pods") == 10
    assert fake.live_pods() == []
