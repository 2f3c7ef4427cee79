"""The ladder walk (the production walker on the SLURM lane) with an injected clock and a
recording runner (no cluster needed): the timing of park polls and what happens when the
controller stops answering."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from slurm_support import Recorder, ladder

from eps.core.model import CapacitySnapshot, Job, LaneKind, Policy, QosGrants, evolve
from eps.core.router import plan
from eps.core.states import AttemptState
from eps.core.tables import DEFAULT_FELLOWS_GRANTS, DEFAULT_GRANTS, DEFAULT_POLICY, FELLOWS
from eps.core.walk import resume

DOWN = (1, "", "squeue: error: Unable to contact slurm controller (connect failure)")
JOB = Job(intent="gpu-1", duration_s=600, command=("true",))


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


def _recorder(dispatch: str) -> Recorder:
    return Recorder(dispatch, [], [], check_live=False)


def test_park_polls_wake_at_the_cap_and_each_tier_gets_its_own_cap(tmp_path: Path) -> None:
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
    rec = _recorder("unit")
    lad = ladder(tmp_path, _policy(3, 2), DEFAULT_GRANTS, hook=rec, runner=runner, poll_interval_s=2.0,
                 cancel_timeout_s=5, clock=t.clock, sleep=t.sleep)  # fmt: skip
    result = lad.walk(JOB, "unit")
    assert result.handle is not None and result.handle.lane == "gcp"  # handed over to the paid lane
    # rung 1: poll at 0 (sleep 2), at 2 (sleep 1: the cap ends at 3), at 3 -> advance;
    # rungs 2 and 3: poll at 0 (sleep 2), at 2 -> advance.
    assert t.sleeps == [2.0, 1.0, 2.0, 2.0]
    advanced = rec.of("advanced")
    assert [e["qos"] for e in advanced] == ["high-eur", "normal-eur", "low-eur"]
    assert [e["elapsed_s"] for e in advanced] == [3.0, 2.0, 2.0]
    assert [e["cap_s"] for e in rec.of("parked")] == [3, 3, 2, 2]  # each tier's own cap (P8)
    assert result.walk is not None
    assert result.walk.snapshot.attempted == (
        "fellows/high-eur/-/queue",
        "fellows/normal-eur/-/queue",
        "fellows/low-eur/-/queue",
    )


def test_a_controller_that_stops_answering_withdraws_the_job_and_hands_over(tmp_path: Path) -> None:
    runner = Script(
        {
            "sbatch": [(0, "7\n", "")],
            "squeue": [DOWN, DOWN, DOWN, DOWN, (0, "7|CANCELLED|None|high-eur\n", "")],
            "scancel": [(0, "", "")],
        }
    )
    t = FakeTime()
    lad = ladder(tmp_path, _policy(600, 300), DEFAULT_GRANTS, runner=runner, poll_interval_s=1.0,
                 cancel_timeout_s=5, clock=t.clock, sleep=t.sleep)  # fmt: skip
    result = lad.walk(JOB, "unit")
    assert result.handle is not None and result.handle.lane == "gcp"  # fellows is now known unreachable
    assert result.walk is not None and not result.walk.snapshot.clusters[0].reachable
    assert runner.calls.count("scancel") == 1
    assert lad.ledger.attempts("unit")[0].state is AttemptState.CANCELLED


def test_a_cancel_that_cannot_be_confirmed_stops_the_walk(tmp_path: Path) -> None:
    runner = Script({"sbatch": [(0, "8\n", "")], "squeue": [DOWN], "scancel": [DOWN]})
    t = FakeTime()
    lad = ladder(tmp_path, _policy(600, 300), DEFAULT_GRANTS, runner=runner, poll_interval_s=1.0,
                 cancel_timeout_s=5, clock=t.clock, sleep=t.sleep)  # fmt: skip
    result = lad.walk(JOB, "unit")
    assert result.handle is None and result.failure is not None
    assert "job 8" in result.failure and "still live" in result.failure
    assert runner.calls.count("sbatch") == 1  # never a second submit while the first may live
    assert lad.paid.started == []  # and never a failover either
    row = lad.ledger.dispatch("unit")
    assert row is not None and row.state == "failed"


def test_a_job_that_starts_as_its_cap_runs_out_is_kept(tmp_path: Path) -> None:
    runner = Script(
        {
            "sbatch": [(0, "9\n", "")],
            "squeue": [(0, "9|PENDING|Priority|high-eur\n", ""), (0, "9|RUNNING|None|high-eur\n", "")],
            "scancel": [(0, "", "")],  # --state=PENDING: a running job is left alone
        }
    )
    t = FakeTime()

    def late_clock() -> float:  # the first poll already sees the cap spent
        t.now += 1.0
        return t.now

    rec = _recorder("race")
    lad = ladder(tmp_path, _policy(1, 1), DEFAULT_GRANTS, hook=rec, runner=runner, clock=late_clock, sleep=t.sleep)
    result = lad.walk(JOB, "race")
    assert result.handle is not None
    assert (result.handle.state, result.handle.qos) == ("running", "high-eur")
    assert runner.calls.count("sbatch") == 1
    assert rec.kinds() == ["submitted", "started"]
    assert lad.ledger.attempts("race")[0].state is AttemptState.RUNNING


def test_a_resumed_walk_parks_the_found_job_on_without_submitting(tmp_path: Path) -> None:
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
    policy = _policy(600, 300)
    rec = _recorder("resumed")
    # parked out before the crash: 600 s on the wall clock since the attempt was recorded
    lad = ladder(tmp_path, policy, DEFAULT_GRANTS, hook=rec, runner=runner, clock=t.clock, sleep=t.sleep,
                 wall=lambda: 10_600.0)  # fmt: skip
    first = plan(JOB, CapacitySnapshot(), DEFAULT_GRANTS, None, policy=policy).rungs[0]
    assert first.kind is LaneKind.SLURM and first.qos == "high-eur"
    lad.ledger.new_dispatch("resumed", JOB)
    attempt = lad.ledger.begin_attempt("resumed", first, "eps-resumed")
    lad.ledger.update_attempt(attempt.id, AttemptState.PENDING, handle="20")
    with lad.ledger._tx() as db:  # recorded at wall time 10 000
        db.execute("UPDATE attempts SET started_at=10000 WHERE id=?", (attempt.id,))
    start = resume(JOB, CapacitySnapshot(), DEFAULT_GRANTS, [a.record() for a in lad.ledger.attempts("resumed")])
    assert start.parked is not None
    result = lad.walker.walk_from("resumed", JOB, start)
    assert result.handle is not None
    assert (result.handle.id, result.handle.qos) == ("21", "normal-eur")
    assert runner.calls.count("sbatch") == 1  # only the next tier was submitted
    assert rec.kinds()[:2] == ["advanced", "submitted"]
    assert rec.of("advanced")[0]["qos"] == "high-eur"


def test_a_resumed_walk_parked_on_rung_two_reports_rung_two_cap(tmp_path: Path) -> None:
    """Regression (issue 10): --resume of a job parked on normal-eur reported 600 s (rung 1's
    cap) while the core parks it with 300 s; the reported cap now comes from the plan."""
    pending = (0, "30|PENDING|Priority|normal-eur\n", "")
    runner = Script({"squeue": [pending] * 5 + [(0, "30|CANCELLED|None|normal-eur\n", "")], "scancel": [(0, "", "")]})
    t = FakeTime()
    policy = _policy(600, 300)
    two = QosGrants((("fellows", tuple(q for q in DEFAULT_FELLOWS_GRANTS if q.name in ("high-eur", "normal-eur"))),))
    rec = _recorder("repark")
    lad = ladder(tmp_path, policy, two, hook=rec, runner=runner, poll_interval_s=50.0, clock=t.clock,
                 sleep=t.sleep, wall=lambda: 10_100.0)  # fmt: skip
    high, normal = plan(JOB, CapacitySnapshot(), two, None, policy=policy).rungs[:2]
    lad.ledger.new_dispatch("repark", JOB)
    gone = lad.ledger.begin_attempt("repark", high, "eps-repark")
    lad.ledger.update_attempt(gone.id, AttemptState.PENDING, handle="29")
    lad.ledger.update_attempt(gone.id, AttemptState.ADVANCED, outcome="park_timeout")
    parked = lad.ledger.begin_attempt("repark", normal, "eps-repark")
    lad.ledger.update_attempt(parked.id, AttemptState.PENDING, handle="30")
    with lad.ledger._tx() as db:  # recorded at wall time 10 000: parked 100 s when the walk resumes
        db.execute("UPDATE attempts SET started_at=10000 WHERE id=?", (parked.id,))
    start = resume(JOB, CapacitySnapshot(), two, [a.record() for a in lad.ledger.attempts("repark")])
    result = lad.walker.walk_from("repark", JOB, start)
    assert result.handle is not None and result.handle.lane == "gcp"
    assert {e["cap_s"] for e in rec.of("parked")} == {300}
    assert [e["elapsed_s"] for e in rec.of("parked")] == [100.0, 150.0, 200.0, 250.0]
    assert [e["qos"] for e in rec.of("advanced")] == ["normal-eur"]
    assert "sbatch" not in runner.calls  # the parked job was adopted, not submitted again
