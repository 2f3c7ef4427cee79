"""Jobs that heal (eps.core.healing): the retry policy in effect, what an interruption, a
failed job and no capacity lead to, which rungs a boot loop rules out, and when a
machine is wedged.  Tables of
scenarios, then properties of the rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eps.core.healing import (
    GiveUp,
    MachineLife,
    Relaunch,
    RetryOn,
    WaitThenPlan,
    after_error,
    after_interruption,
    after_no_capacity,
    after_run,
    boot_loop_evidence,
    boot_loop_lasts_s,
    boot_looped,
    no_capacity,
    parse_events,
    policy_of,
    wedge_reason,
    wedged,
)
from eps.core.model import Job, Terminal
from eps.core.states import DispatchState
from eps.core.tables import HEALING, Healing

DAY = 86_400


@pytest.mark.parametrize(
    ("job", "on", "restarts"),
    [
        (Job("cpu-small"), frozenset(), HEALING.max_restarts),
        (Job("cpu-small", restartable=True), frozenset({RetryOn.INTERRUPTION}), HEALING.restartable_restarts),
        (Job("cpu-small", retry=("error",)), frozenset({RetryOn.ERROR}), HEALING.max_restarts),
        (Job("cpu-small", restartable=True, retry=("no-capacity",)), frozenset({RetryOn.NO_CAPACITY}), 3),
        (Job("cpu-small", retry=("interruption",), max_restarts=7), frozenset({RetryOn.INTERRUPTION}), 7),
    ],
)
def test_the_policy_in_effect(job: Job, on: frozenset[RetryOn], restarts: int) -> None:
    p = policy_of(job)
    assert p.on == on and p.max_restarts == restarts
    assert p.retry_for_s == (job.retry_for_s or HEALING.retry_for_s)


@pytest.mark.parametrize(
    ("job", "restarts", "elapsed", "want"),
    [
        (Job("cpu-small", restartable=True), 0, 60, Relaunch),
        (Job("cpu-small", restartable=True), 2, 60, Relaunch),
        (Job("cpu-small", restartable=True), 3, 60, GiveUp),  # the restarts are used
        (Job("cpu-small", restartable=True), 0, DAY + 1, GiveUp),  # retry_for passed
        (Job("cpu-small"), 0, 60, GiveUp),  # not restartable, not asked
        (Job("cpu-small", retry=("interruption",)), 0, 60, Relaunch),  # asked for
        (Job("cpu-small", restartable=True, retry=("error",)), 0, 60, GiveUp),  # its own policy replaces the default
        (Job("cpu-small", restartable=True, retry_for_s=120), 0, 119, Relaunch),
        (Job("cpu-small", restartable=True, retry_for_s=120), 0, 120, GiveUp),
    ],
)
def test_after_an_interruption(job: Job, restarts: int, elapsed: float, want: type) -> None:
    got = after_interruption(job, restarts=restarts, elapsed_s=elapsed)
    assert isinstance(got, want), got
    if isinstance(got, Relaunch):
        assert got.restart == restarts + 1


def test_a_failed_job_is_relaunched_only_when_error_is_retried() -> None:
    assert isinstance(after_error(Job("x"), 3, restarts=0, elapsed_s=1), GiveUp)
    assert isinstance(after_error(Job("x", retry=("error",)), 3, restarts=0, elapsed_s=1), Relaunch)
    assert isinstance(after_error(Job("x", retry=("error",)), 0, restarts=0, elapsed_s=1), GiveUp)
    assert isinstance(after_error(Job("x", retry=("error",)), None, restarts=0, elapsed_s=1), Relaunch)
    assert isinstance(after_error(Job("x", retry=("error",), max_restarts=1), 3, restarts=1, elapsed_s=1), GiveUp)


def test_no_capacity_waits_longer_each_round_and_never_past_retry_for() -> None:
    job = Job("cpu-small", retry=("no-capacity",), retry_for_s=120)
    waits = [after_no_capacity(job, waits=n, elapsed_s=0) for n in range(4)]
    assert [w.seconds for w in waits if isinstance(w, WaitThenPlan)] == [30, 60, 120, 120]
    last = after_no_capacity(job, waits=2, elapsed_s=100)
    assert isinstance(last, WaitThenPlan) and last.seconds == 20  # only what is left of retry_for
    assert isinstance(after_no_capacity(job, waits=3, elapsed_s=120), GiveUp)
    assert isinstance(after_no_capacity(Job("cpu-small"), waits=0, elapsed_s=0), GiveUp)


def test_the_capacity_failures_are_failure_kinds() -> None:
    from eps.core.healing import CAPACITY_FAILURES
    from eps.core.outcome import FailureKind

    assert {k.value for k in FailureKind} >= CAPACITY_FAILURES


@pytest.mark.parametrize(
    ("terminal", "outcomes", "want"),
    [
        (Terminal.CPU_EXHAUSTED, ["zone_exhausted", "zone_exhausted", "no_capacity"], True),
        (Terminal.GPU_EXHAUSTED, ["park_timeout", "quota_region"], True),
        (Terminal.PIN_EXHAUSTED, ["no_capacity"], True),
        (Terminal.CPU_EXHAUSTED, ["invalid_request", "forbidden"], False),  # a broken request: never retried
        (Terminal.CPU_EXHAUSTED, [], False),  # nothing tried: no evidence of a capacity shortage
        (Terminal.NO_USABLE_LANE, ["zone_exhausted"], False),  # more time does not make a lane usable here
    ],
)
def test_what_counts_as_no_capacity(terminal: Terminal, outcomes: list[str], want: bool) -> None:
    assert no_capacity(terminal, outcomes) is want


@pytest.mark.parametrize(
    ("job", "state", "status", "code", "want"),
    [
        (Job("cpu-small", restartable=True), DispatchState.PREEMPTED, None, None, Relaunch),
        (Job("cpu-small"), DispatchState.PREEMPTED, None, None, GiveUp),
        (Job("cpu-small", retry=("error",)), DispatchState.ENDED, "exited", 3, Relaunch),
        (Job("cpu-small", retry=("error",)), DispatchState.ENDED, "exited", 0, type(None)),
        (Job("cpu-small", retry=("error",)), DispatchState.ENDED, "cancelled", 130, type(None)),  # a cancel is final
        (Job("cpu-small", retry=("error",)), DispatchState.ENDED, "killed", None, Relaunch),  # code unknown
        (Job("cpu-small", retry=("error",)), DispatchState.STARTED, None, None, type(None)),
    ],
)
def test_after_a_run(job: Job, state: DispatchState, status: str | None, code: int | None, want: type) -> None:
    assert isinstance(after_run(job, state, status, code, elapsed_s=60), want)


def test_events_parse_and_a_bad_one_is_named() -> None:
    assert parse_events("no-capacity, interruption,error") == (
        RetryOn.NO_CAPACITY, RetryOn.INTERRUPTION, RetryOn.ERROR,
    )  # fmt: skip
    with pytest.raises(ValueError, match="'preempt'"):
        parse_events("preempt")
    with pytest.raises(ValueError, match="no retry event"):
        parse_events(" , ")


def test_two_early_deaths_within_a_day_make_a_boot_loop() -> None:
    rung = "gcp/e2-standard-4/us-central1-a/spot"
    lives = [MachineLife(rung, 0, 30), MachineLife(rung, 100, 130)]
    assert list(boot_looped(lives, now=200)) == [rung]
    assert boot_looped(lives, now=130 + DAY) == {}  # the day has passed
    assert boot_looped([MachineLife(rung, 0, 30)], now=200) == {}  # one death is not a loop
    late = [MachineLife(rung, 0, HEALING.early_death_s + 1), MachineLife(rung, 0, 30)]
    assert boot_looped(late, now=10_000) == {}  # a machine that lived past early_death_s is not one
    assert boot_looped([MachineLife(rung, 0, None), MachineLife(rung, 0, None)], now=10) == {}  # released


@pytest.mark.parametrize(
    ("lost", "now", "lasts"),
    [
        ([30, 130], 200, DAY + 30 - 200),  # until the first death is a day old
        ([30, 130, 500], 1000, DAY + 130 - 1000),  # three: until only one is left in the window
        ([30], 200, 0),  # one death: no loop, nothing to wait for
        ([30, 130], 30 + DAY, 0),  # the day has passed
    ],
)
def test_a_boot_loop_lasts_until_too_few_deaths_are_within_the_window(lost: list[int], now: int, lasts: int) -> None:
    deaths = [MachineLife("r", at - 30, at) for at in lost]
    assert boot_loop_lasts_s(deaths, now) == lasts


def test_the_evidence_names_each_death_oldest_first() -> None:
    deaths = [MachineLife("r", 3600, 3631), MachineLife("r", 0, 30)]
    assert boot_loop_evidence(deaths, now=7200) == (
        "2 machines died within 10m of coming up in the last 1d: one lost 1h59m30s ago, 30s after it came up; "
        "one lost 59m29s ago, 31s after it came up"
    )


jobs = st.builds(
    Job,
    st.just("cpu-small"),
    restartable=st.booleans(),
    retry=st.none() | st.lists(st.sampled_from([e.value for e in RetryOn]), max_size=3).map(tuple),
    retry_for_s=st.none() | st.integers(0, 10 * DAY),
    max_restarts=st.none() | st.integers(0, 10),
)


@given(jobs, st.integers(0, 12), st.floats(0, 20 * DAY))
def test_a_job_that_is_not_restartable_is_never_relaunched_on_interruption_unless_asked(
    job: Job, restarts: int, elapsed: float
) -> None:
    got = after_interruption(job, restarts=restarts, elapsed_s=elapsed)
    if isinstance(got, Relaunch):
        assert job.restartable or (job.retry is not None and "interruption" in job.retry)


@given(jobs, st.integers(0, 12), st.floats(0, 20 * DAY), st.integers(-1, 5) | st.none())
def test_no_retry_after_retry_for_nor_past_max_restarts(
    job: Job, restarts: int, elapsed: float, code: int | None
) -> None:
    p = policy_of(job)
    for got in (
        after_interruption(job, restarts=restarts, elapsed_s=elapsed),
        after_error(job, code, restarts=restarts, elapsed_s=elapsed),
        after_no_capacity(job, waits=restarts, elapsed_s=elapsed),
    ):
        if elapsed >= p.retry_for_s:
            assert isinstance(got, GiveUp)
        if isinstance(got, Relaunch):
            assert got.restart <= p.max_restarts
        if isinstance(got, WaitThenPlan):
            assert 1 <= got.seconds <= max(1, p.retry_for_s - elapsed)


# --- wedged machines ---------------------------------------------------------------------------

T0 = 1_000_000.0
SHORT = HEALING._replace(wedge_s=5)


@pytest.mark.parametrize(
    ("since", "now", "running", "table", "want"),
    [
        (None, T0, True, HEALING, False),  # it answered last time
        (T0, T0, True, HEALING, False),  # it has just stopped answering
        (T0, T0 + HEALING.wedge_s - 1, True, HEALING, False),
        (T0, T0 + HEALING.wedge_s, True, HEALING, True),
        (T0, T0 + 10 * HEALING.wedge_s, True, HEALING, True),
        (T0, T0 + 10 * HEALING.wedge_s, False, HEALING, False),  # gone, preempted, stopped: not a wedge
        (T0, T0 + 5, True, SHORT, True),  # [jobs] wedge_s
        (T0, T0 + 4.9, True, SHORT, False),
    ],
)
def test_a_machine_is_wedged_after_wedge_s_unreachable_while_the_provider_says_running(
    since: float | None, now: float, running: bool, table: Healing, want: bool
) -> None:
    assert wedged(since, now, running, table) is want


def test_the_default_wedge_is_fifteen_minutes_and_its_reason_names_the_seconds() -> None:
    assert HEALING.wedge_s == 900
    assert wedge_reason(901.7) == "unreachable over ssh for 901 s while the provider said running"


@given(st.integers(0, 10 * DAY), st.integers(0, 10 * DAY), st.booleans())
def test_never_wedged_before_wedge_s_nor_when_the_provider_says_otherwise(
    since: int, later: int, running: bool
) -> None:
    got = wedged(T0 + since, T0 + since + later, running)
    assert got == (running and later >= HEALING.wedge_s)
