"""A ledger on a database several hosts share (``[state] url``), for dispatches recorded
without an owner (before leases, schema 9): a host's supervisor walks only those that host
handed over (their inputs are kept in its own state directory), never another host's: a
second walk would be a second submission.  Dispatches with an owner go by their lease
(tests/shell/state/test_team.py).  On SQLite (one host) nothing changes."""

from __future__ import annotations

from pathlib import Path

from eps.core.model import Job
from eps.core.states import DispatchState
from eps.shell.run import ownership
from eps.shell.state.ledger import Ledger


def _walking(ledger: Ledger, dispatch: str) -> None:
    ledger.new_dispatch(dispatch, Job("cpu-small", 600, command=("true",)))
    assert ledger.dispatch(dispatch) is not None and ledger.dispatch(dispatch).state is DispatchState.WALKING  # type: ignore[union-attr]


def test_a_host_on_a_shared_database_supervises_only_what_it_handed_over(tmp_path: Path, pg_url: str) -> None:
    a, b = Ledger(str(tmp_path / "a"), url=pg_url), Ledger(str(tmp_path / "b"), url=pg_url)
    try:
        _walking(a, "eshared001")
        ownership.write_inputs(a.state_dir, "eshared001", None, None)  # host A handed it over
        _walking(b, "eshared002")
        ownership.write_inputs(b.state_dir, "eshared002", None, None)  # host B its own
        assert [r.id for r in ownership.unsettled_roots(a)] == ["eshared001"]
        assert [r.id for r in ownership.unsettled_roots(b)] == ["eshared002"]
        assert sorted(r.id for r in b.dispatches()) == ["eshared001", "eshared002"]  # both see both
    finally:
        a.close()
        b.close()


def test_on_sqlite_every_unsettled_dispatch_is_this_hosts(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / "state"))
    try:
        _walking(ledger, "elocal0001")  # no inputs kept (a dispatch of an older eps): still walked
        assert [r.id for r in ownership.unsettled_roots(ledger)] == ["elocal0001"]
    finally:
        ledger.close()
