"""What a user's own jobs hold under each QoS (eps.core.holdings): a table of ledger rows
(every host's) and what the ladder is told."""

from __future__ import annotations

import pytest

from eps.core.holdings import Holding, LiveJob, capped_queues, holdings
from eps.core.model import QueueState
from eps.core.tables import DEFAULT_GRANTS

F = "fellows"

CASES = [
    # rows (cluster, qos, gpus, running, user)                  -> alice's holdings
    ([], []),
    ([(F, "high-eur", 8, True, "alice")], [Holding(F, "high-eur", 8, 0)]),
    # two hosts of alice (the rows carry no host: the user is what the cap binds)
    ([(F, "high-eur", 8, True, "alice"), (F, "high-eur", 8, True, "alice")], [Holding(F, "high-eur", 16, 0)]),
    # a parked job of hers is ahead of a new one: spoken for
    ([(F, "high-eur", 8, True, "alice"), (F, "high-eur", 4, False, "alice")], [Holding(F, "high-eur", 8, 4)]),
    # bob's jobs bind bob's cap
    ([(F, "high-eur", 8, True, "bob")], []),
    # recorded before a team shared the ledger (no user): this host's, so hers
    ([(F, "normal-eur", 2, False, None)], [Holding(F, "normal-eur", 0, 2)]),
    # a queue without QoS (no ladder) is no tier: nothing to count against
    ([("other", None, 8, True, "alice")], []),
    # per cluster and QoS, sorted
    ([(F, "normal-eur", 1, True, "alice"), (F, "high-eur", 2, True, "alice"), ("c2", "high-eur", 3, True, "alice")],
     [Holding("c2", "high-eur", 3, 0), Holding(F, "high-eur", 2, 0), Holding(F, "normal-eur", 1, 0)]),
]  # fmt: skip


@pytest.mark.parametrize(("rows", "expected"), CASES)
def test_holdings_count_the_users_own_live_jobs_of_every_host(rows: list, expected: list) -> None:
    assert list(holdings([LiveJob(*r) for r in rows], "alice")) == expected


CAPPED = [
    # held                                        -> the queue facts the plan gets (fellows caps: 16 / 16 / none / 8)
    ([Holding(F, "high-eur", 8, 0)], [QueueState(F, "high-eur", free_gpus=8)]),
    ([Holding(F, "high-eur", 8, 8)], [QueueState(F, "high-eur", free_gpus=0)]),
    ([Holding(F, "high-eur", 16, 8)], [QueueState(F, "high-eur", free_gpus=0)]),  # never below 0
    ([Holding(F, "low-eur", 64, 0)], []),  # low-eur has no per-user cap
    ([Holding(F, "dev-eur", 3, 0)], [QueueState(F, "dev-eur", free_gpus=5)]),
    ([Holding(F, "not-granted", 3, 0)], []),  # a tier the grants do not list: no cap known
    ([Holding("elsewhere", "high-eur", 3, 0)], []),
]  # fmt: skip


@pytest.mark.parametrize(("held", "expected"), CAPPED)
def test_capped_queues_leave_what_the_per_user_cap_allows(held: list, expected: list) -> None:
    assert list(capped_queues(held, DEFAULT_GRANTS)) == expected


LEDGER_WAITS = [
    # state, outcome, submitted, changed, seen started, now          -> (wait, started) or None
    ("running", "started", 100.0, 170.0, 160.0, 999.0, (60, True)),
    ("ended", "ended", 100.0, 900.0, None, 999.0, (800, True)),  # no start seen: to the row's last change
    ("advanced", "park_timeout", 100.0, 400.0, None, 999.0, (300, False)),  # left at its cap: a lower bound
    ("pending", None, 100.0, 101.0, None, 350.0, (250, False)),  # parked now (any host's): waits on
    ("cancelled", "released", 100.0, 150.0, None, 999.0, None),
    ("failed", "misconfigured", 100.0, 101.0, None, 999.0, None),
    ("intent", None, 100.0, 100.0, None, 999.0, None),
]  # fmt: skip


@pytest.mark.parametrize(("state", "outcome", "submitted", "changed", "seen", "now", "expected"), LEDGER_WAITS)
def test_ledger_attempts_as_waits_for_eps_simulate(
    state: str, outcome: str | None, submitted: float, changed: float, seen: float | None, now: float, expected: object
) -> None:
    from eps.core.simulate import ledger_wait

    assert ledger_wait(state, outcome, submitted, changed, seen, now) == expected
