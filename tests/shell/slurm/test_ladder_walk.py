"""The ladder walk with an injected clock and a recording runner (no cluster needed):
the timing of park polls and what happens when the controller stops answering."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from eps.core.model import CapacitySnapshot, Job, Policy, evolve
from eps.core.router import plan
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY, FELLOWS
from eps.shell.ladder import CancelNotConfirmed, EventKind, HandOver, LadderEvent, Landed, walk_ladder
from eps.shell.slurm import SlurmClient

DOWN = (1, "", "squeue: error: Unable to contact slurm controller (connect failure)")


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 3))
        self.now += seconds


class Script:
    """Answers per command name; the last answer repeats."""

    def __init__(self, answers: dict[str, list[tuple[int, str, str]]]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    def __call__(self, argv: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]:
        self.calls.append(argv[0])
        queue = self.answers[argv[0]]
        return queue.pop(0) if len(queue) > 1 else queue[0]


def _policy(first: int, nxt: int) -> Policy:
    return evolve(DEFAULT_POLICY, clusters=(evolve(FELLOWS, first_park_cap_s=first, next_park_cap_s=nxt),))


def _walk(runner: Script, t: FakeTime, policy: Policy, events: list[LadderEvent], poll: float = 2.0):
    job = Job(intent="gpu-1", duration_s=600, command=("true",))
    rung = plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None, policy=policy).rungs[0]
    return walk_ladder(
        job,
        dispatch_id="unit",
        rung=rung,
        snapshot=CapacitySnapshot(),
        grants=DEFAULT_GRANTS,
        client=SlurmClient(runner),
        policy=policy,
        poll_interval_s=poll,
        cancel_timeout_s=5,
        clock=t.clock,
        sleep=t.sleep,
        on_event=events.append,
    )


def test_park_polls_wake_at_the_cap_and_each_tier_gets_its_own_cap() -> None:
    pending = (0, "1|PENDING|Priority|x\n", "")
    cancelled = (0, "1|CANCELLED|None|x\n", "")
    # Each tier: two pending polls per second of cap ... then a poll after scancel shows it gone.
    runner = Script(
        {
            "sbatch": [(0, "1\n", "")],
            "squeue": [pending, pending, pending, cancelled] + [pending, pending, cancelled] * 2,
            "scancel": [(0, "", "")],
        }
    )
    t = FakeTime()
    events: list[LadderEvent] = []
    outcome = _walk(runner, t, _policy(3, 2), events)
    assert isinstance(outcome, HandOver)
    assert outcome.plan.rungs[0].lane == "gcp"
    # rung 1: poll at 0 (sleep 2), at 2 (sleep 1: the cap ends at 3), at 3 -> advance;
    # rungs 2 and 3: poll at 0 (sleep 2), at 2 -> advance.
    assert t.sleeps == [2.0, 1.0, 2.0, 2.0]
    advanced = [e for e in events if e.kind is EventKind.ADVANCED]
    assert [e.qos for e in advanced] == ["high-eur", "normal-eur", "low-eur"]
    assert [e.elapsed_s for e in advanced] == [3.0, 2.0, 2.0]
    assert outcome.snapshot.attempted == (
        "fellows/high-eur/-/queue",
        "fellows/normal-eur/-/queue",
        "fellows/low-eur/-/queue",
    )


def test_a_controller_that_stops_answering_withdraws_the_job_and_hands_over() -> None:
    runner = Script(
        {
            "sbatch": [(0, "7\n", "")],
            "squeue": [DOWN, DOWN, DOWN, DOWN, (0, "7|CANCELLED|None|high-eur\n", "")],
            "scancel": [(0, "", "")],
        }
    )
    t = FakeTime()
    events: list[LadderEvent] = []
    outcome = _walk(runner, t, _policy(600, 300), events, poll=1.0)
    assert isinstance(outcome, HandOver)
    assert outcome.plan.rungs[0].lane == "gcp"  # fellows is now known unreachable
    assert not outcome.snapshot.clusters[0].reachable
    assert runner.calls.count("scancel") == 1


def test_a_cancel_that_cannot_be_confirmed_stops_the_walk() -> None:
    runner = Script({"sbatch": [(0, "8\n", "")], "squeue": [DOWN], "scancel": [DOWN]})
    with pytest.raises(CancelNotConfirmed) as exc:
        _walk(runner, FakeTime(), _policy(600, 300), [], poll=1.0)
    assert exc.value.job_id == "8"
    assert runner.calls.count("sbatch") == 1  # never a second submit while the first may live


def test_a_job_that_starts_as_its_cap_runs_out_is_kept() -> None:
    runner = Script(
        {
            "sbatch": [(0, "9\n", "")],
            "squeue": [(0, "9|PENDING|Priority|high-eur\n", ""), (0, "9|RUNNING|None|high-eur\n", "")],
            "scancel": [(0, "", "")],  # --state=PENDING: a running job is left alone
        }
    )
    t = FakeTime()
    events: list[LadderEvent] = []
    policy = _policy(1, 1)
    job = Job(intent="gpu-1", duration_s=600, command=("true",))
    rung = plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None, policy=policy).rungs[0]

    def late_clock() -> float:  # the first poll already sees the cap spent
        t.now += 1.0
        return t.now

    outcome = walk_ladder(
        job,
        dispatch_id="race",
        rung=rung,
        snapshot=CapacitySnapshot(),
        grants=DEFAULT_GRANTS,
        client=SlurmClient(runner),
        policy=policy,
        clock=late_clock,
        sleep=t.sleep,
        on_event=events.append,
    )
    assert isinstance(outcome, Landed)
    assert (outcome.handle.state, outcome.handle.qos) == ("running", "high-eur")
    assert runner.calls.count("sbatch") == 1
    assert [e.kind for e in events] == [EventKind.SUBMITTING, EventKind.SUBMITTED, EventKind.STARTED]


def test_a_resumed_walk_parks_the_found_job_on_without_submitting() -> None:
    runner = Script(
        {
            "sbatch": [(0, "21\n", "")],
            "squeue": [
                (0, "20|PENDING|Priority|high-eur\n", ""),
                (0, "20|CANCELLED|None|high-eur\n", ""),
                (0, "21|RUNNING|None|normal-eur\n", ""),
            ],
            "scancel": [(0, "", "")],
        }
    )
    t = FakeTime()
    events: list[LadderEvent] = []
    policy = _policy(600, 300)
    job = Job(intent="gpu-1", duration_s=600, command=("true",))
    rung = plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None, policy=policy).rungs[0]
    outcome = walk_ladder(
        job,
        dispatch_id="resumed",
        rung=rung,
        snapshot=CapacitySnapshot(),
        grants=DEFAULT_GRANTS,
        client=SlurmClient(runner),
        policy=policy,
        clock=t.clock,
        sleep=t.sleep,
        on_event=events.append,
        resume_job_id="20",
        resume_elapsed_s=600.0,  # parked out before the crash: advance at the first poll
    )
    assert isinstance(outcome, Landed)
    assert (outcome.handle.id, outcome.handle.qos) == ("21", "normal-eur")
    assert runner.calls.count("sbatch") == 1  # only the next tier was submitted
    assert [e.kind for e in events][:2] == [EventKind.ADVANCED, EventKind.SUBMITTING]
