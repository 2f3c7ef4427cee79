"""Leases on a shared ledger (eps.shell.state.team), on the session's PostgreSQL: two hosts
as two Ledgers (two state dirs, two host names) on one database.

- a host registers (name, user, public key, last seen); a dispatch handed over is held by
  its host for one lease, with its inputs kept in the database;
- another host may not take it while the lease runs, and takes it once it has run out; the
  first host's renewal then finds it lost;
- the owner whose lease was not renewed within 3/4 of the period may not write the
  dispatch's rows (LeaseLost), and nothing is changed; a renewal lets it act again;
- ``unsettled_roots`` on each host: its own, and another's only once that lease ran out;
  a reconcile leaves a dispatch another host's lease holds;
- on SQLite the migration makes the same columns and no lease work happens.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from eps.core.lease import LeaseTerms
from eps.core.model import Job, LaneKind, Provisioning, Rung
from eps.core.states import DispatchState
from eps.shell.run import ownership
from eps.shell.state.ledger import Ledger
from eps.shell.state.team import LeaseLost, Team, owners, register, share

LEASE_S = 1.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _hosts(tmp_path: Path, url: str) -> tuple[Ledger, Ledger]:
    return (Ledger(str(tmp_path / "a"), url=url, host="host-a"), Ledger(str(tmp_path / "b"), url=url, host="host-b"))


def _handed_over(ledger: Ledger, d: str) -> None:
    ledger.new_dispatch(d, Job("cpu-small", 600, command=("true",)))
    ownership.write_inputs(ledger.state_dir, d, None, None)
    share(ledger, d, '{"snapshot": null, "grants": null}', LEASE_S, user="alice")


def test_hosts_register_and_a_handed_over_dispatch_is_its_hosts_for_one_lease(tmp_path: Path, pg_url: str) -> None:
    a, b = _hosts(tmp_path, pg_url)
    try:
        register(a, "ssh-ed25519 AAAAC3Nza eps", user="alice")
        register(b, None, user="bob")
        register(a, None, user="alice")  # a key registered before stays
        hosts = {r[0]: (r[1], r[2]) for r in a.rows("SELECT name, user_name, public_key FROM hosts")}
        assert hosts == {"host-a": ("alice", "ssh-ed25519 AAAAC3Nza eps"), "host-b": ("bob", None)}
        _handed_over(a, "eteam00001")
        owner = owners(b, ["eteam00001"])["eteam00001"]
        assert (owner.host, owner.user) == ("host-a", "alice") and owner.until is not None
        assert [r.id for r in ownership.unsettled_roots(a)] == ["eteam00001"]
        assert ownership.unsettled_roots(b) == []  # A's lease runs
        assert ownership.read_inputs(b.state_dir, "eteam00001", b) == (None, None)  # from the database
        time.sleep(LEASE_S + 0.1)
        assert [r.id for r in ownership.unsettled_roots(b)] == ["eteam00001"]  # ran out: B may take it
    finally:
        a.close()
        b.close()


def test_another_host_takes_a_dispatch_only_once_its_lease_ran_out(tmp_path: Path, pg_url: str) -> None:
    a, b = _hosts(tmp_path, pg_url)
    try:
        _handed_over(a, "eteam00002")
        ta, tb = Team(a, LeaseTerms(LEASE_S)), Team(b, LeaseTerms(LEASE_S))
        assert ta.take("eteam00002")
        assert not tb.take("eteam00002")  # A's lease runs
        assert ta.renew() == []
        time.sleep(LEASE_S + 0.1)  # A renews no more (cut off, or dead)
        assert tb.take("eteam00002")
        assert owners(a, ["eteam00002"])["eteam00002"].host == "host-b"
        assert ta.renew() == ["eteam00002"]  # A finds it lost, and lets it go
        assert not ta.acting("eteam00002")
        assert not ta.take("eteam00002")  # B's lease runs now
    finally:
        a.close()
        b.close()


def test_an_owner_whose_lease_was_not_renewed_in_time_stops_writing_before_it_ends(
    tmp_path: Path, pg_url: str
) -> None:
    a, b = _hosts(tmp_path, pg_url)
    clock = Clock()
    try:
        _handed_over(a, "eteam00003")
        team = Team(a, LeaseTerms(60.0), clock=clock)
        assert team.take("eteam00003", ["eteam00003n1"])
        a.guard = team.check
        a.set_dispatch("eteam00003", DispatchState.WALKING, message="still acting")
        clock.now += 44.0  # within 3/4 of the period
        team.check("eteam00003n1")  # a copy is acted on under its root's lease
        clock.now += 1.0  # 45 s after the last confirmed renewal: the owner stops
        with pytest.raises(LeaseLost, match="host host-a may no longer act on it"):
            a.set_dispatch("eteam00003", DispatchState.FAILED, message="must not land")
        with pytest.raises(LeaseLost):
            a.begin_attempt("eteam00003", _rung(), "eps-eteam00003-1")  # no attempt, so no provider call
        with pytest.raises(LeaseLost):
            team.check("eteam00003n1")
        row = b.dispatch("eteam00003")
        assert row is not None and row.state is DispatchState.WALKING and row.message == "still acting"
        assert b.attempts("eteam00003") == []
        b.set_dispatch("eteam00003", DispatchState.WALKING, message="another process's write passes")
        assert team.renew() == []  # the database answers again, and nobody took it: it acts again
        a.set_dispatch("eteam00003", DispatchState.WALKING, message="acting again")
        team.drop("eteam00003")
        assert owners(b, ["eteam00003"])["eteam00003"].until is None  # let go: free for any host
    finally:
        a.close()
        b.close()


def test_a_reconcile_leaves_a_dispatch_another_hosts_lease_holds(tmp_path: Path, pg_url: str) -> None:
    from eps.shell.config.settings import Settings
    from eps.shell.lanes import LaneOptions, Lanes
    from eps.shell.run.reconcile import Reconciler
    from eps.shell.state.events import Silent

    a, b = _hosts(tmp_path, pg_url)
    try:
        _handed_over(a, "eteam00004")
        from eps.core.tables import DEFAULT_POLICY

        lanes = Lanes(Settings(DEFAULT_POLICY, state_dir=b.state_dir), LaneOptions(env={"HOME": str(tmp_path)}))
        try:
            report = Reconciler(b, lanes, Silent()).reconcile({"eteam00004"})
        finally:
            lanes.close()
        assert report["skipped"] == ["eteam00004: host host-a's supervisor holds it"], report
    finally:
        a.close()
        b.close()


def test_on_sqlite_the_same_schema_and_no_lease(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "state"))
    try:
        assert ledger.host is None and ledger.guard is None
        columns = {r[1] for r in ledger.rows("PRAGMA table_info(dispatches)")}
        assert {"owner_host", "owner_user", "lease_until", "inputs"} <= columns
        assert ledger.rows("SELECT count(*) FROM hosts")[0][0] == 0
        with pytest.raises(ValueError, match="shared ledger"):
            Team(ledger, LeaseTerms(LEASE_S))
    finally:
        ledger.close()


def _rung() -> Rung:
    return Rung("gcp", LaneKind.GCP, Provisioning.SPOT, "", machine="e2-standard-4", zone="us-central1-a")


def test_two_state_directories_of_one_machine_are_two_hosts(tmp_path: Path, pg_url: str) -> None:
    a, b = Ledger(str(tmp_path / "a"), url=pg_url), Ledger(str(tmp_path / "b"), url=pg_url)
    try:
        assert a.host is not None and b.host is not None and a.host != b.host
        again = Ledger(str(tmp_path / "a"), url=pg_url)
        assert again.host == a.host  # the same state dir: the same host
        again.close()
        _handed_over(a, "eteam00005")
        assert ownership.unsettled_roots(b) == []  # A's lease runs: never walked from B
        assert not Team(b, LeaseTerms(LEASE_S)).take("eteam00005")
    finally:
        a.close()
        b.close()


def test_a_hosts_newest_dispatches_are_chosen_by_the_database(tmp_path: Path, ledger_url: str | None) -> None:
    """The row budget of ``eps status --mine``/``--host`` (on both backends): ``select`` with
    ``owner_host`` brings only the ``limit`` newest dispatches whose root that host owns (a
    copy is its root's, whatever its own row says), not every row for eps to filter."""
    ticks = iter(range(1, 100))
    ledger = Ledger(str(tmp_path / "state"), url=ledger_url, clock=lambda: float(next(ticks)))
    try:
        owner = {"eown000001": "host-a", "eown000002": "host-b", "eown000003": "host-a", "eown000004": "host-b",
                 "eown000005": "host-a", "eown000006": None}  # fmt: skip
        for d in owner:
            ledger.new_dispatch(d, Job("cpu-small", 60, command=("true",)))
        ledger.new_dispatch("eowncopy01", Job("cpu-small", 60, command=("true",)), parent="eown000002")
        ledger.new_dispatch("eowncopy02", Job("cpu-small", 60, command=("true",)), parent="eown000006")
        with ledger.transaction() as db:
            for d, host in (*owner.items(), ("eowncopy02", "host-a")):  # a copy's own owner is not asked
                db.execute("UPDATE dispatches SET owner_host=? WHERE id=?", (host, d))
        ids = [r.id for r in ledger.select(owner_host="host-a", limit=2)]
        assert ids == ["eown000003", "eown000005"]  # the two newest of host-a's, oldest first
        assert [r.id for r in ledger.select(owner_host="host-a")] == ["eown000001", "eown000003", "eown000005"]
        assert [r.id for r in ledger.select(owner_host="host-b", limit=2)] == ["eown000004", "eowncopy01"]
        assert [r.id for r in ledger.select(owner_host="host-b", intent="cpu-small", since=4.0)] == [
            "eown000004", "eowncopy01"]  # fmt: skip
        assert ledger.select(owner_host="host-c") == []
    finally:
        ledger.close()
