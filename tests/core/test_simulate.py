"""``eps simulate``'s model (eps/core/simulate.py): the Kaplan-Meier curve, the replay as a table
of scenarios, and properties over random histories (a cap of 0 passes the tier; unbounded caps
send nothing to the paid lanes; the order of the history does not matter)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eps.core.simulate import Caps, Lane, Survival, Wait, default_settings, parse_caps, simulate

LADDER = ("high-eur", "normal-eur", "low-eur")
NOW = (600, 300)


def w(job: str, tier: str, wait: int, started: bool, *, d: str | None = "d1", gpus: int = 1, at: int = 0,
      run: int | None = None) -> Wait:  # fmt: skip
    return Wait(job, tier, d, gpus, at, wait, started, run)


def others(tier: str, *waits: int, started: bool = True, gpus: int = 1) -> list[Wait]:
    """Jobs eps did not make: history for the draws, never replayed themselves."""
    return [w(f"o-{tier}-{i}", tier, x, started, d=None, gpus=gpus, at=i) for i, x in enumerate(waits)]


def test_kaplan_meier_counts_censored_waits_as_at_risk_until_they_leave() -> None:
    s = Survival.of([(1, True), (2, False), (3, True), (4, True)])
    assert s.times == (1, 3, 4)
    assert s.surv == pytest.approx((0.75, 0.375, 0.0))
    assert s.at(0) == 1.0 and s.at(2) == 0.75 and s.at(3) == pytest.approx(0.375)
    # a tie: the censored job was still waiting at t, so it is at risk there
    assert Survival.of([(5, True), (5, False)]).surv == (0.5,)


def test_draws_follow_the_curve_and_its_tail_is_no_start() -> None:
    s = Survival.of([(10, True), (20, True), (30, False)])
    assert s.draw(0.0) == 10 and s.draw(0.4) == 20
    assert s.draw(0.9) is None  # beyond the last start: history cannot place it
    assert s.draw(0.0, above=10) == 20  # given it waited more than 10 s
    assert s.draw(0.0, above=20) is None
    assert Survival.of([]).draw(0.5) is None


SCENARIOS = [
    # (what, waits, caps, lane of d1, time to start of d1)
    ("starts on high-eur within the cap", [w("1", "high-eur", 100, True)], NOW, "high-eur", 100),
    ("the recorded walk: parked 600 s, then normal-eur",
     [w("1", "high-eur", 600, False), w("2", "normal-eur", 50, True)], NOW, "normal-eur", 650),
    ("a tighter rung-1 cap moves on sooner",
     [w("1", "high-eur", 600, False), w("2", "normal-eur", 50, True)], (300, 300), "normal-eur", 350),
    ("a start later than the cap is a park timeout",
     [w("1", "high-eur", 400, True), *others("normal-eur", 20, 20, 20, 20, 20)], (300, 300), "normal-eur", 320),
    ("the whole ladder parked: paid lanes at the worst case",
     [w("1", "high-eur", 600, False), w("2", "normal-eur", 300, False), w("3", "low-eur", 300, False)],
     NOW, "paid", 1200),
    ("caps of 0 skip every tier", [w("1", "high-eur", 0, True)], (0, 0), "paid", 0),
    ("P8: rungs 2+ never wait longer than rung 1",
     [w("1", "high-eur", 200, False), w("2", "normal-eur", 250, True)], (200, 900), "paid", 600),
    ("an unbounded cap draws past the censored wait from the tier's own history",
     [w("1", "high-eur", 600, False), *others("high-eur", 900)], (None, None), "high-eur", 900),
    ("an unbounded cap and no start beyond the wait: never",
     [w("1", "high-eur", 600, False), *others("high-eur", 100)], (None, None), "never", None),
    ("a tier never reached is drawn from similar jobs (same GPUs)",
     [w("1", "high-eur", 600, False, gpus=2), *others("normal-eur", 40, 40, 40, 40, 40, gpus=2),
      *others("normal-eur", 5, 5, 5, 5, 5, gpus=1)], NOW, "normal-eur", 640),
]  # fmt: skip


@pytest.mark.parametrize(("what", "waits", "caps", "lane", "start"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_replay(
    what: str, waits: list[Wait], caps: tuple[int | None, int | None], lane: str, start: int | None
) -> None:
    sim = simulate(waits, LADDER, [Caps(*caps)], rounds=3)
    (setting,) = sim.settings
    (o,) = setting.first_round
    assert (o.dispatch, o.lane, o.start_s) == ("d1", lane, start), what
    assert sim.dispatches == 1


def test_figures_of_a_setting() -> None:
    waits = [
        w("1", "high-eur", 10, True, d="a", run=3600), w("2", "high-eur", 30, True, d="b"),
        w("3", "high-eur", 600, False, d="c", gpus=2), w("4", "normal-eur", 300, False, d="c", gpus=2),
        w("5", "low-eur", 300, False, d="c", gpus=2, run=None), w("6", "high-eur", 20, True, d="e"),
    ]  # fmt: skip
    (s,) = simulate(waits, LADDER, [Caps(600, 300)], rounds=4, price_per_gpu_hour=10.0).settings
    assert s.jobs == 4 and s.replays == 16
    assert (s.median_start_s, s.p90_start_s, s.max_start_s, s.worst_case_s) == (20, 1200, 1200, 1200)
    assert s.paid_share == 0.25 and s.paid_unknown_runs == 4 and s.paid_gpu_hours == 0
    assert dict(s.lanes) == {"high-eur": 0.75, "normal-eur": 0.0, "low-eur": 0.0, "paid": 0.25, "never": 0.0}


def test_paid_gpu_hours_and_their_list_price() -> None:
    waits = [w("1", "high-eur", 0, True, gpus=4, run=1800)]
    (s,) = simulate(waits, LADDER, [Caps(0, 0)], rounds=2, price_per_gpu_hour=11.06).settings
    assert s.paid_gpu_hours == 2.0 and s.paid_list_usd == 22.12


def test_honest_limits() -> None:
    waits = [w("1", "high-eur", 600, False), w("2", "normal-eur", 50, True), w("3", "dev-eur", 5, True)]
    sim = simulate(waits, LADDER, [Caps(600, 300)])
    assert [(t.tier, t.waits, t.started, t.censored) for t in sim.tiers] == [
        ("high-eur", 1, 0, 1), ("normal-eur", 1, 1, 0), ("low-eur", 0, 0, 0)]  # fmt: skip
    assert sim.other_qos_jobs == 1
    assert sim.warning is not None and sim.warning.startswith("small sample: 1 dispatches")
    assert "Kaplan-Meier" in sim.estimator


def test_other_jobs_are_replayed_only_when_asked() -> None:
    waits = others("high-eur", 5, 6, 7)
    assert simulate(waits, LADDER, [Caps(600, 300)]).dispatches == 0
    assert simulate(waits, LADDER, [Caps(600, 300)], all_jobs=True).dispatches == 3


def test_the_seed_decides_the_draws() -> None:
    waits = [w(str(i), "high-eur", 600, False, d=f"d{i}") for i in range(20)] + others("normal-eur", *range(0, 400, 8))
    a = simulate(waits, LADDER, [Caps(600, 300)], seed=1)
    assert a == simulate(waits, LADDER, [Caps(600, 300)], seed=1)
    assert a.settings[0].first_round != simulate(waits, LADDER, [Caps(600, 300)], seed=2).settings[0].first_round


def test_settings_grid_and_caps_text() -> None:
    grid = default_settings(600, 300)
    assert grid[0] == Caps(600, 300) and len(set(grid)) == len(grid) == 6
    assert Caps(300, 150) in grid and Caps(1200, 300) in grid
    assert parse_caps("600,300") == Caps(600, 300)
    assert parse_caps("300") == Caps(300, 300)
    assert parse_caps("inf,120") == Caps(None, 120)
    assert Caps(None, 120).effective_next_s == 120 and Caps(None, None).worst_case_s(3) is None
    for bad in ("", "1,2,3", "-5,3", "10m,5"):
        with pytest.raises(ValueError, match="caps must be"):
            parse_caps(bad)


# --- properties --------------------------------------------------------------------------------

_waits = st.lists(
    st.builds(
        Wait,
        job_id=st.integers(0, 60).map(str),
        tier=st.sampled_from((*LADDER, "dev-eur")),
        dispatch=st.one_of(st.none(), st.sampled_from(("a", "b", "c", "d", "e"))),
        gpus=st.integers(0, 4),
        submit_s=st.integers(0, 3 * 86_400),
        wait_s=st.integers(0, 2000),
        started=st.booleans(),
        run_s=st.one_of(st.none(), st.integers(0, 7200)),
    ),
    max_size=30,
)
_cap = st.one_of(st.none(), st.integers(0, 1500))


@settings(max_examples=60, deadline=None)
@given(_waits, _cap, st.integers(0, 5))
def test_a_cap_of_0_sends_every_job_past_the_tier(waits: list[Wait], later: int | None, seed: int) -> None:
    sim = simulate(waits, LADDER, [Caps(0, later), Caps(0, 0)], seed=seed, rounds=3, all_jobs=True)
    assert all(o.lane != LADDER[0] for s in sim.settings for o in s.first_round)
    assert all(o.lane == Lane.PAID and o.start_s == 0 for o in sim.settings[1].first_round)


@settings(max_examples=60, deadline=None)
@given(_waits, st.integers(0, 5))
def test_an_unbounded_cap_sends_none_to_the_paid_lanes(waits: list[Wait], seed: int) -> None:
    (s,) = simulate(waits, LADDER, [Caps(None, None)], seed=seed, rounds=3, all_jobs=True).settings
    assert s.paid_share == 0.0
    # and a job never starts only where history holds no start at or after its own wait
    for o in s.first_round:
        assert o.lane in (LADDER[0], Lane.NEVER)


@settings(max_examples=60, deadline=None)
@given(_waits, st.lists(st.tuples(_cap, _cap), min_size=1, max_size=3), st.randoms(use_true_random=False))
def test_results_do_not_depend_on_the_order_of_the_history(
    waits: list[Wait], caps: list[tuple[int | None, int | None]], rnd: random.Random
) -> None:
    shuffled = list(waits)
    rnd.shuffle(shuffled)
    settings_ = [Caps(*c) for c in caps]
    assert simulate(waits, LADDER, settings_, rounds=3, all_jobs=True) == simulate(
        shuffled, LADDER, settings_, rounds=3, all_jobs=True
    )


@settings(max_examples=40, deadline=None)
@given(_waits)
def test_time_to_start_is_within_the_worst_case(waits: list[Wait]) -> None:
    (s,) = simulate(waits, LADDER, [Caps(600, 300)], rounds=2, all_jobs=True).settings
    assert all(o.start_s is not None and o.start_s <= 1200 for o in s.first_round)
    assert all(o.start_s == 1200 for o in s.first_round if o.lane == Lane.PAID)
