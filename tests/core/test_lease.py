"""Leases decided from times alone (eps.core.lease): whose a dispatch is, and how long its
owner may act on it after its last confirmed renewal."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eps.core.lease import LeaseState, LeaseTerms, lease_state

CASES = [
    # owner, until, me, now, state
    ("a", 100.0, "a", 50.0, LeaseState.MINE),
    ("a", 100.0, "a", 150.0, LeaseState.MINE),  # run out, nobody took it: still this host's
    ("a", 100.0, "b", 50.0, LeaseState.HELD),
    ("a", 100.0, "b", 100.0, LeaseState.FREE),  # it ends at until
    ("a", 100.0, "b", 150.0, LeaseState.FREE),
    ("a", None, "b", 50.0, LeaseState.FREE),  # let go
    (None, None, "b", 50.0, LeaseState.FREE),
]


@pytest.mark.parametrize(("owner", "until", "me", "now", "state"), CASES)
def test_a_lease_state_follows_from_its_owner_and_times(
    owner: str | None, until: float | None, me: str, now: float, state: LeaseState
) -> None:
    assert lease_state(owner, until, me, now) is state


def test_the_owner_renews_four_times_a_period_and_stops_a_quarter_before_it_ends() -> None:
    terms = LeaseTerms(60.0)
    assert terms.renew_every_s == 15.0
    assert terms.act_within_s == 45.0
    assert terms.may_act(100.0, 144.9)
    assert not terms.may_act(100.0, 145.0)


@pytest.mark.parametrize("period", [0.0, -1.0])
def test_a_lease_period_is_positive(period: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        LeaseTerms(period)


@given(st.floats(0.1, 1e6), st.floats(0, 1e6), st.floats(0, 1e6))
def test_an_owner_that_may_act_is_within_its_lease(period: float, confirmed: float, later: float) -> None:
    """The database set the lease's end to its own time of the renewal (no earlier than its
    start) plus the period: whenever the owner may act, the lease has not ended, so no other
    host can hold it (lease_state is HELD for them)."""
    terms = LeaseTerms(period)
    now = confirmed + later
    until = confirmed + period  # the earliest end the database can have written
    if terms.may_act(confirmed, now):
        assert lease_state("a", until, "b", now) is LeaseState.HELD
