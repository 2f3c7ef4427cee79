"""The step function of a walk (eps.core.walk), resume, and the state tables: scenario tables.

Each walk scenario feeds observations in order and checks the step the core answers
with; the shell carries steps out and never decides (issue 10)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eps.core.model import Capacity, CapacitySnapshot, Job, LaneKind, Provisioning, Rung, evolve
from eps.core.outcome import FailureKind, Handle, LaneFailure
from eps.core.router import plan
from eps.core.states import (
    ATTEMPT_MOVES,
    DISPATCH_MOVES,
    AttemptState,
    DispatchState,
    HandleState,
    IllegalMove,
    Outcome,
    move_attempt,
    move_dispatch,
)
from eps.core.tables import DEFAULT_GRANTS
from eps.core.walk import (
    AttemptRecord,
    Begin,
    Failed,
    Hold,
    Landed,
    PollFailed,
    Queued,
    Running,
    Start,
    Stop,
    Wait,
    Walk,
    Withdraw,
    WithdrawFailed,
    Withdrawn,
    WithdrawWhy,
    next_step,
    resume,
)

GPU = Job("gpu-1", 3600, command=("train",))
CPU = Job("cpu-small", 1800, command=("score",))


def walk_of(job: Job) -> Walk:
    return Walk(job, CapacitySnapshot(), DEFAULT_GRANTS)


def queued(rung: Rung, elapsed: int, reason: str | None = "Priority") -> Queued:
    handle = Handle(rung.lane, rung.kind, "42", rung.key, qos=rung.qos, state=HandleState.PENDING, reason=reason)
    return Queued(rung, handle, elapsed, reason)


def run(job: Job, *observe: Any) -> tuple[Walk, list[Any]]:
    """Feed ``Begin`` and then each observation (or a function of the last step that makes
    one); return the final walk and every step."""
    walk, step = next_step(walk_of(job), Begin())
    steps = [step]
    for o in observe:
        seen = o(step) if callable(o) else o
        walk, step = next_step(walk, seen)
        steps.append(step)
    return walk, steps


def fail(kind: FailureKind, code: str | None = None) -> Any:
    return lambda step: Failed(step.rung, LaneFailure(kind, f"{kind.value} here", code=code))


# --- the ladder ---------------------------------------------------------------------------------


def test_a_gpu_job_starts_under_high_eur_and_parks_within_its_cap() -> None:
    _, (start, wait) = run(GPU, lambda s: queued(s.rung, 0))
    assert isinstance(start, Start) and (start.rung.lane, start.rung.qos) == ("fellows", "high-eur")
    assert isinstance(wait, Wait)
    assert (wait.seconds, wait.cap_s) == (600, 600)
    assert wait.next_rung is not None and wait.next_rung.qos == "normal-eur"


def test_a_park_timeout_withdraws_only_while_pending_then_the_next_tier_starts() -> None:
    walk, steps = run(GPU, lambda s: queued(s.rung, 600), lambda s: Withdrawn(s.rung, "Priority"))
    _, withdraw, start = steps
    assert isinstance(withdraw, Withdraw)
    assert (withdraw.why, withdraw.pending_only) == (WithdrawWhy.PARK_TIMEOUT, True)
    assert isinstance(start, Start) and start.rung.qos == "normal-eur"
    assert walk.snapshot.attempted == ("fellows/high-eur/-/queue",)
    assert walk.snapshot.queues[-1].pending_reason == "Priority"  # what the queue taught (absorb)


def test_rung_two_parks_with_its_own_cap() -> None:
    _, steps = run(GPU, lambda s: queued(s.rung, 600), lambda s: Withdrawn(s.rung), lambda s: queued(s.rung, 10))
    wait = steps[-1]
    assert isinstance(wait, Wait) and (wait.rung.qos, wait.cap_s, wait.seconds) == ("normal-eur", 300, 290)


def test_a_reason_that_never_clears_withdraws_at_once() -> None:
    _, steps = run(GPU, lambda s: queued(s.rung, 1, "QOSMaxWallDurationPerJobLimit"))
    assert isinstance(steps[-1], Withdraw) and steps[-1].why is WithdrawWhy.PARK_TIMEOUT


def test_the_whole_ladder_parked_out_goes_to_gcp() -> None:
    parkout = [lambda s: queued(s.rung, 600), lambda s: Withdrawn(s.rung)]
    walk, steps = run(GPU, *parkout * 3)
    last = steps[-1]
    assert isinstance(last, Start) and last.rung.lane == "gcp"
    assert len(walk.snapshot.attempted) == 3


def test_a_job_that_starts_is_landed() -> None:
    handle = Handle("fellows", LaneKind.SLURM, "42", "fellows/high-eur/-/queue", qos="high-eur")
    _, steps = run(GPU, Running(handle))
    assert steps[-1] == Landed(handle)


def test_a_pin_holds_the_pending_handle() -> None:
    _, steps = run(evolve(GPU, pin="fellows"), lambda s: queued(s.rung, 5000))
    assert isinstance(steps[-1], Hold) and steps[-1].handle.state is HandleState.PENDING


def test_a_lane_that_stops_answering_is_withdrawn_and_learned() -> None:
    lost = LaneFailure(FailureKind.UNREACHABLE, "no controller")
    walk, steps = run(
        GPU,
        lambda s: PollFailed(s.rung, queued(s.rung, 3).handle, lost),
        lambda s: Withdrawn(s.rung),
    )
    withdraw, start = steps[1], steps[2]
    assert isinstance(withdraw, Withdraw) and (withdraw.why, withdraw.pending_only) == (WithdrawWhy.LANE_LOST, False)
    assert isinstance(start, Start) and start.rung.lane == "gcp"  # the cluster is now known unreachable
    assert walk.snapshot.clusters[-1].reachable is False


def test_a_parked_job_that_will_not_leave_stops_the_walk() -> None:
    stuck = LaneFailure(FailureKind.TRANSIENT, "job 42 still live 60 s after scancel")
    _, steps = run(GPU, lambda s: queued(s.rung, 600), lambda s: WithdrawFailed(s.rung, stuck))
    assert isinstance(steps[-1], Stop) and steps[-1].failure == stuck


# --- paid lanes ----------------------------------------------------------------------------------


def test_an_exhausted_zone_moves_to_the_next_zone() -> None:
    walk, steps = run(CPU, fail(FailureKind.ZONE_EXHAUSTED))
    first, nxt = steps
    assert isinstance(nxt, Start) and nxt.rung.zone != first.rung.zone
    assert walk.snapshot.gcp[-1].state is Capacity.EXHAUSTED


def test_a_create_that_failed_transiently_is_withdrawn_by_name_before_moving_on() -> None:
    walk, steps = run(CPU, fail(FailureKind.TRANSIENT), lambda s: Withdrawn(s.rung))
    first, withdraw, nxt = steps
    assert isinstance(withdraw, Withdraw)
    assert (withdraw.why, withdraw.handle, withdraw.rung) == (WithdrawWhy.MAYBE_MADE, None, first.rung)
    assert isinstance(nxt, Start) and nxt.rung != first.rung
    assert first.rung.key in walk.snapshot.attempted and walk.unsettled is None


def test_a_withdrawal_by_name_that_fails_moves_on_and_leaves_it_to_reconcile() -> None:
    gone = LaneFailure(FailureKind.TRANSIENT, "503")
    _, steps = run(CPU, fail(FailureKind.TRANSIENT), lambda s: WithdrawFailed(s.rung, gone))
    assert isinstance(steps[-1], Start)


@pytest.mark.parametrize("kind", [FailureKind.AUTH, FailureKind.INSUFFICIENT_BALANCE])
def test_failures_that_end_the_dispatch_stop_it(kind: FailureKind) -> None:
    _, steps = run(CPU, fail(kind))
    assert isinstance(steps[-1], Stop) and steps[-1].failure is not None and steps[-1].failure.kind is kind


def test_nothing_left_is_a_terminal_stop() -> None:
    job = evolve(CPU, pin="runpod")
    rungs = len(plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None).rungs)
    _, steps = run(job, *[fail(FailureKind.NO_CAPACITY)] * rungs)
    last = steps[-1]
    assert isinstance(last, Stop) and last.terminal is not None and last.terminal.value == "pin_exhausted"


def test_every_candidate_400_reads_as_a_request_problem() -> None:
    job = evolve(CPU, pin="runpod")
    rungs = len(plan(job, CapacitySnapshot(), DEFAULT_GRANTS, None).rungs)
    _, steps = run(job, *[fail(FailureKind.INVALID_REQUEST, "400")] * rungs)
    assert isinstance(steps[-1], Stop) and "likely a request problem" in steps[-1].message


# --- resume --------------------------------------------------------------------------------------


def _rung(qos: str) -> Rung:
    return Rung("fellows", LaneKind.SLURM, Provisioning.QUEUE, "", qos=qos)


def test_resume_parks_on_the_live_job_and_skips_what_the_dead_walk_left() -> None:
    attempts = [
        AttemptRecord(1, _rung("high-eur"), AttemptState.ADVANCED, Outcome.PARK_TIMEOUT.value, "19"),
        AttemptRecord(2, _rung("normal-eur"), AttemptState.PENDING, None, "20"),
    ]
    start = resume(GPU, CapacitySnapshot(), DEFAULT_GRANTS, attempts)
    assert start.parked == attempts[1] and start.running is None
    assert start.walk.snapshot.attempted == ("fellows/high-eur/-/queue",)


def test_resume_never_demotes_past_a_tier_that_was_never_submitted() -> None:  # P7
    attempts = [AttemptRecord(1, _rung("high-eur"), AttemptState.GONE, Outcome.NOT_SUBMITTED.value)]
    start = resume(GPU, CapacitySnapshot(), DEFAULT_GRANTS, attempts)
    assert start.walk.snapshot.attempted == ()
    _, step = next_step(start.walk, Begin())
    assert isinstance(step, Start) and step.rung.qos == "high-eur"


def test_resume_adopts_a_running_attempt() -> None:
    gcp = Rung("gcp", LaneKind.GCP, Provisioning.ON_DEMAND, "", machine="e2-standard-4", zone="us-central1-a")
    attempts = [AttemptRecord(1, gcp, AttemptState.RUNNING, Outcome.STARTED.value, "eps-x")]
    assert resume(CPU, CapacitySnapshot(), DEFAULT_GRANTS, attempts).running == attempts[0]


def test_resume_after_a_preemption_plans_without_spot_for_a_job_that_cannot_restart() -> None:  # P11
    spot = Rung("gcp", LaneKind.GCP, Provisioning.SPOT, "", machine="e2-standard-4", zone="europe-west4-a")
    attempts = [AttemptRecord(1, spot, AttemptState.GONE, Outcome.PREEMPTED.value)]
    start = resume(CPU, CapacitySnapshot(), DEFAULT_GRANTS, attempts)
    rungs = plan(CPU, start.walk.snapshot, DEFAULT_GRANTS, None).rungs
    assert rungs and all(r.provisioning is not Provisioning.SPOT for r in rungs if r.lane == "gcp")


def test_resume_after_waiting_for_capacity_forgets_what_the_last_round_found_exhausted() -> None:
    gcp = Rung("gcp", LaneKind.GCP, Provisioning.SPOT, "", machine="e2-standard-4", zone="europe-west4-a")
    attempts = [AttemptRecord(1, gcp, AttemptState.FAILED, FailureKind.ZONE_EXHAUSTED.value, started_at=100.0)]
    remembered = resume(CPU, CapacitySnapshot(), DEFAULT_GRANTS, attempts, forget_before=50.0)
    assert remembered.walk.snapshot.attempted == (gcp.key,)
    forgotten = resume(CPU, CapacitySnapshot(), DEFAULT_GRANTS, attempts, forget_before=200.0)
    assert forgotten.walk.snapshot.attempted == ()


def test_a_slurm_run_the_cluster_took_does_not_rule_its_tier_out() -> None:  # P7 on a relaunch
    attempts = [AttemptRecord(1, _rung("high-eur"), AttemptState.GONE, Outcome.PREEMPTED.value, "663")]
    start = resume(GPU, CapacitySnapshot(), DEFAULT_GRANTS, attempts)
    assert start.walk.snapshot.attempted == ()
    _, step = next_step(start.walk, Begin())
    assert isinstance(step, Start) and step.rung.qos == "high-eur"


def test_a_waiting_dispatch_walks_again_fails_or_is_cancelled_and_nothing_else() -> None:
    assert move_dispatch("d", DispatchState.WALKING, DispatchState.WAITING) is DispatchState.WAITING
    for to in (DispatchState.WALKING, DispatchState.FAILED, DispatchState.CANCELLED):
        assert move_dispatch("d", DispatchState.WAITING, to) is to
    for to in (DispatchState.STARTED, DispatchState.ENDED, DispatchState.HELD):
        with pytest.raises(IllegalMove):
            move_dispatch("d", DispatchState.WAITING, to)


# --- the state tables ----------------------------------------------------------------------------


def test_every_state_has_a_row_and_cancel_is_final() -> None:
    assert set(DISPATCH_MOVES) == set(DispatchState)
    assert set(ATTEMPT_MOVES) == set(AttemptState)
    assert move_dispatch("d", DispatchState.CANCELLED, DispatchState.STARTED) is None  # a lost race, dropped
    assert all(AttemptState.INTENT not in targets for targets in ATTEMPT_MOVES.values())


def test_an_illegal_move_names_where_it_was() -> None:
    with pytest.raises(IllegalMove, match=r"dispatch move for d1: ended -> started"):
        move_dispatch("d1", DispatchState.ENDED, DispatchState.STARTED)
    with pytest.raises(IllegalMove, match=r"attempt move for d1#2: ended -> running"):
        move_attempt("d1#2", AttemptState.ENDED, AttemptState.RUNNING)


@given(st.sampled_from(list(DispatchState)), st.sampled_from(list(DispatchState)))
def test_a_dispatch_move_is_allowed_exactly_when_the_table_says(frm: DispatchState, to: DispatchState) -> None:
    if frm is DispatchState.CANCELLED and to is not frm:
        assert move_dispatch("d", frm, to) is None
    elif to is frm or to in DISPATCH_MOVES[frm]:
        assert move_dispatch("d", frm, to) is to
    else:
        with pytest.raises(IllegalMove):
            move_dispatch("d", frm, to)
