"""``--count N`` on RunPod: N independent copies at once, each walking its own rungs, through
the production walker (the same code ``eps execute --count N --pin runpod`` runs)."""

from __future__ import annotations

import io
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from runpod_testkit import KEY, FakeRunpod, schema_validator, ssh_support

from eps.core.model import CapacitySnapshot, Job, evolve
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY
from eps.shell.config.settings import RunpodSettings, Settings
from eps.shell.lanes import LaneOptions, Lanes
from eps.shell.remote.ssh import Patience
from eps.shell.render.progress import Reporter
from eps.shell.run.reconcile import cancel
from eps.shell.run.walker import Walker, WalkResult
from eps.shell.state.ledger import Ledger
from eps.shell.util.retry import RetryPolicy

CREATE = schema_validator("CreatePodRequest")
JOB = Job("cpu-small", 3600, count=50, pin="runpod", command=("sleep", "300"))
pytestmark = pytest.mark.usefixtures("pods_reach_sshd")
#: cpu-small's RunPod flavors for these tests: four candidates per copy.
FLAVORS = ("cpu3g", "cpu5g", "cpu3c", "cpu5c")


class Harness:
    """The walker over a temp ledger, RunPod at the local server, nothing else usable."""

    def __init__(self, tmp: Path, fake: FakeRunpod, *, concurrency: int = 32, poll_timeout_s: float = 5.0) -> None:
        small = next(i for i in DEFAULT_POLICY.intents if i.name == "cpu-small")
        intents = tuple(evolve(small, runpod_cpu=FLAVORS) if i is small else i for i in DEFAULT_POLICY.intents)
        self.settings = Settings(
            policy=evolve(DEFAULT_POLICY, intents=intents),
            runpod=RunpodSettings(base_url=fake.url, concurrency=concurrency, work_root=str(tmp / "runpod-runs")),
            state_dir=str(tmp / "state"),
            fanout_concurrency=concurrency,
        )
        ssh_support.give_key(tmp / "state")  # the pods are the test sshd: jobs are shipped for real
        self.options = LaneOptions(
            machine_patience=Patience(within_s=20.0, first_delay_s=0.2, max_delay_s=1.0, retry_auth=True),
            runpod_api_key=KEY,
            runpod_options={
                "poll_interval_s": 0.01,
                "poll_timeout_s": poll_timeout_s,
                "request_timeout_s": 2.0,
                "retry": RetryPolicy(attempts=3, timeout_s=10.0, wait_initial_s=0.001, wait_max_s=0.005),
            },
            env={},
        )
        self.ledger = Ledger(self.settings.state_dir)
        self.lanes = Lanes(self.settings, self.options)
        self.out = io.StringIO()
        self.reporter = Reporter(json_lines=True, out=self.out)

    def walker(self) -> Walker:
        return Walker(
            self.settings, self.ledger, self.lanes, self.reporter, grants=DEFAULT_GRANTS, snapshot=CapacitySnapshot()
        )

    def run(self, n: int, job: Job = JOB) -> list[WalkResult]:
        return self.walker().execute(evolve(job, count=n))

    def outcomes(self, dispatch: str) -> list[str | None]:
        return [a.outcome for a in self.ledger.attempts(dispatch)]

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.getvalue().splitlines()]

    def close(self) -> None:
        self.lanes.close()
        self.ledger.close()


def test_fifty_pods_with_exhausted_flavors_moving_on(fake: FakeRunpod, tmp_path: Path) -> None:
    fake.stock.update({"cpu3g": 12, "cpu5g": 0})  # cpu5g: none left at all
    fake.forbidden.add("cpu3c")  # no access to this pool
    fake.stock["cpu5c-8-16"] = 100
    h = Harness(tmp_path, fake, concurrency=16)
    results = h.run(50)

    assert all(r.handle is not None for r in results)
    handles = [r.handle for r in results if r.handle is not None]
    assert Counter(x.machine for x in handles) == {"cpu3g-4-16": 12, "cpu5c-8-16": 38}
    assert all(x.state == "running" for x in handles)
    for r in results:  # each copy walked its own ladder: cpu3g, then cpu5g, cpu3c, cpu5c
        attempts = h.ledger.attempts(r.dispatch)
        if r.handle is not None and r.handle.machine == "cpu5c-8-16":
            assert h.outcomes(r.dispatch) == ["no_capacity", "no_capacity", "forbidden", "started"]
            assert attempts[-1].name == f"eps-{r.dispatch}-4"
        else:
            assert h.outcomes(r.dispatch) == ["started"]
    live = fake.live_pods()
    assert len(live) == 50  # nothing extra left behind
    assert sorted(p["id"] for p in live) == sorted(x.id for x in handles)
    assert all(p["status"] == "RUNNING" for p in live)
    assert len({p["name"] for p in live}) == 50
    for body in fake.created_bodies():
        assert [e.message for e in CREATE.iter_errors(body)] == []
    assert fake.peak_in_flight <= 16  # the concurrency setting holds
    h.close()


def test_partial_failure_is_reported_per_copy(fake: FakeRunpod, tmp_path: Path) -> None:
    fake.stock.update({"cpu3g": 5, "cpu5g": 3, "cpu3c": 0, "cpu5c": 2})
    h = Harness(tmp_path, fake)
    results = h.run(20)
    ok = [r for r in results if r.handle is not None]
    failed = [r for r in results if r.handle is None]
    assert len(ok) == 10
    assert len(failed) == 10
    for r in failed:
        assert r.terminal == "pin_exhausted"
        assert h.outcomes(r.dispatch) == ["no_capacity"] * 4
    assert len(fake.live_pods()) == 10
    parent = h.ledger.dispatch(results[0].dispatch[:-2])
    assert parent is not None and parent.state == "failed" and parent.message == "10/20 started"
    h.close()


def test_a_copy_whose_pod_fails_to_start_leaves_nothing(fake: FakeRunpod, tmp_path: Path) -> None:
    fake.fail_start.add("cpu3g")  # every cpu3g pod errors on start
    h = Harness(tmp_path, fake)
    results = h.run(5)
    assert all(r.handle is not None and r.handle.machine == "cpu5g-4-16" for r in results)
    assert {p["name"].rsplit("-", 1)[1] for p in fake.live_pods()} == {"2"}
    assert len(fake.live_pods()) == 5
    h.close()


def test_insufficient_balance_stops_every_copy_at_once(fake: FakeRunpod, tmp_path: Path) -> None:
    fake.insufficient_balance = True
    h = Harness(tmp_path, fake)
    results = h.run(30)
    assert all(r.handle is None and r.failure is not None and "not an eps cap" in r.failure for r in results)
    assert all(len(h.ledger.attempts(r.dispatch)) == 1 for r in results)  # never walks on to other rungs
    assert fake.live_pods() == []
    h.close()


def test_every_candidate_400_reads_as_a_request_problem(fake: FakeRunpod, tmp_path: Path) -> None:
    for flavor in FLAVORS:
        fake.rule_violation[flavor] = "image is not allowed for CPU pods"
    h = Harness(tmp_path, fake)
    (result,) = h.run(1)
    assert result.failure is not None and "likely a request problem" in result.failure
    assert len(h.ledger.attempts(result.dispatch)) == 4
    h.close()


def test_422_stops_the_copy_without_walking_on(fake: FakeRunpod, tmp_path: Path) -> None:
    from runpod_testkit import Fault

    fake.queue("POST", "/v2/pods", Fault(422))
    h = Harness(tmp_path, fake)
    (result,) = h.run(1)
    assert h.outcomes(result.dispatch) == ["invalid_request"]
    stopped = [e for e in h.events() if e["event"] == "stopped"]
    assert stopped and "bug in eps" in stopped[0]["message"]
    h.close()


def test_a_cancelled_fan_out_releases_the_pods_it_made(fake: FakeRunpod, tmp_path: Path) -> None:
    fake.stuck.add("cpu3g")  # pods stay PROVISIONING, so every copy is mid-poll when cancelled
    h = Harness(tmp_path, fake, poll_timeout_s=1.0)
    walker = h.walker()
    dispatch = "ecancelfan1"
    thread = threading.Thread(target=walker.execute, args=(evolve(JOB, count=10), dispatch))
    thread.start()
    deadline = 50
    while fake.count("POST", "/v2/pods") < 10 and deadline:
        threading.Event().wait(0.1)
        deadline -= 1
    other = Ledger(h.settings.state_dir)  # as a second eps process would: the walkers' locks are theirs
    report = cancel(other, h.lanes, h.reporter, [dispatch])
    other.close()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert report["errors"] == []
    assert fake.live_pods() == []
    h.close()
