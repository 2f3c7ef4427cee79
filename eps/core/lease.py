"""Leases: which host's supervisor may act on a dispatch of a shared ledger, decided from
times alone (docs/design/team.md says why leases and not advisory locks).

A lease is a row's owner host and the time its lease ends (``until``, on the database's
clock).  Its owner renews it every :attr:`LeaseTerms.renew_every_s`; another host may take
the dispatch once ``until`` has passed.  The owner stops acting on its own, on its own
monotonic clock, :attr:`LeaseTerms.act_within_s` after the start of its last renewal the
database confirmed: that instant comes before ``until`` (the database set ``until`` to its
own time of the renewal, which is later, plus the period), so a host cut from the database
has stopped before any other host can take the dispatch.  Pure: times come in as numbers.
"""

from __future__ import annotations

from enum import Enum

from attrs import frozen


class LeaseState(Enum):
    """What a lease is to one host now."""

    MINE = "mine"  # this host owns it (its lease may have run out: nobody took it since)
    FREE = "free"  # nobody's, or its owner's lease ran out: this host may take it
    HELD = "held"  # another host's, and its lease runs: hands off


def lease_state(owner: str | None, until: float | None, me: str, now: float) -> LeaseState:
    """The lease of a dispatch owned by ``owner`` until ``until``, as host ``me`` sees it at
    ``now`` (all times on the database's clock)."""
    if owner == me:
        return LeaseState.MINE
    if owner is None or until is None or until <= now:
        return LeaseState.FREE
    return LeaseState.HELD


@frozen
class LeaseTerms:
    """A lease period and what follows from it."""

    period_s: float

    def __attrs_post_init__(self) -> None:
        if not self.period_s > 0:
            raise ValueError(f"a lease period must be positive, not {self.period_s!r}")

    @property
    def renew_every_s(self) -> float:
        """How often the owner renews: four tries before it must stop."""
        return self.period_s / 4

    @property
    def act_within_s(self) -> float:
        """How long after the start of its last confirmed renewal the owner may still act:
        three quarters of the period, so the last quarter is a margin for a step begun
        just before (a provider call in flight) and for clocks that run at slightly
        different rates."""
        return self.period_s * 0.75

    def may_act(self, confirmed_at: float, now: float) -> bool:
        """The owner may act at ``now`` (its monotonic clock), its lease last confirmed by a
        renewal begun at ``confirmed_at`` (the same clock)."""
        return now - confirmed_at < self.act_within_s
