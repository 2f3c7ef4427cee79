"""Many eps processes at once against the local GCP server (issue 11, finding 1): parallel
executes each run a reconcile of their own while the others create machines.  No reconcile
may judge a machine that was created after its inventory as gone, and ``cancel --all``
afterwards leaves no machine running."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults_support import Eps, GcpTrap, RunpodTrap


@pytest.fixture
def eps_on(tmp_path: Path, gtrap: GcpTrap, rtrap: RunpodTrap, sshd: Path, ledger_url: str | None) -> Iterator[Eps]:
    """``eps`` with its ledger on each backend (SQLite, PostgreSQL: tests/pg_support.py)."""
    e = Eps(tmp_path, gtrap.fake, rtrap.fake, state_url=ledger_url)
    yield e
    e.close()


def test_ten_parallel_executes_all_stay_started_and_cancel_all_leaves_nothing(
    eps_on: Eps, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    eps = eps_on
    gcp: Any = gtrap.fake
    children = [eps.start("execute", "--json", "cpu-small", "--duration", "30m", "--", "sleep 300") for _ in range(10)]
    codes = [c.wait(180) for c in children]
    assert codes == [0] * 10, [c.err for c in children if c.proc.returncode]
    running = {name for (_, name), inst in gcp.instances.items() if inst["status"] == "RUNNING"}
    assert len(running) == 10
    ids = eps.dispatch_ids()
    assert len(ids) == 10
    for d in ids:  # read the ledger directly: status would reconcile first
        row = eps.dispatch(d)
        assert row["state"] == "started", (d, row)
        assert row["handle"]["id"] in running
    # Reconciles (status, another execute's) never turn a running machine into preempted/interrupted.
    rc, _, err = eps.run("status", "--json")
    assert rc == 0, err
    assert {eps.dispatch(d)["state"] for d in ids} == {"started"}
    rc, out, err = eps.run("cancel", "--all", "--json", timeout_s=180)
    assert rc == 0, (out, err)
    assert gcp.instances == {}
    assert {eps.dispatch(d)["state"] for d in ids} == {"cancelled"}


def test_a_wrongly_judged_dispatch_is_put_right_by_the_next_reconcile(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    gcp: Any = gtrap.fake
    rc, events, err = eps.execute("cpu-small", "--duration", "30m", "--", "sleep 300")
    assert rc == 0, err
    d = events[-1]["dispatch"]
    db = sqlite3.connect(eps.state / "ledger.sqlite3")  # what the old race wrote: a running VM judged preempted
    db.execute("UPDATE dispatches SET state='preempted' WHERE id=?", (d,))
    db.execute("UPDATE attempts SET state='gone', outcome='preempted' WHERE dispatch=?", (d,))
    db.commit()
    db.close()
    rc, _, err = eps.run("reconcile", "--json")
    assert rc == 0, err
    assert eps.dispatch(d)["state"] == "started"
    assert [a["state"] for a in eps.attempts(d)] == ["running"]
    assert len(gcp.instances) == 1


def test_cancel_all_releases_what_it_can_see_when_another_provider_is_down(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    """GCP answers 503 to everything: cancel --all still terminates the RunPod pod, names the
    lane it could not check for the dispatch running there, and exits non-zero (issue 11,
    finding 3).  The next cancel, once GCP answers again, releases the VM."""
    from faults_support import gcp_fake

    runpod: Any = rtrap.fake
    rc, events, err = eps.execute("cpu-small", "--duration", "30m", "--", "sleep 300")
    assert rc == 0, err
    on_gcp = events[-1]["dispatch"]
    rc, events, err = eps.execute("cpu-small", "--duration", "30m", "--pin", "runpod", "--", "sleep 300")
    assert rc == 0, err
    assert len(runpod.live_pods()) == 1 and len(gtrap.fake.instances) == 1
    gtrap.fake.fail("GET", r"/aggregated/instances", gcp_fake.unavailable(), times=1000)
    rc, out, err = eps.run("cancel", "--all", timeout_s=120)
    assert rc == 1, (out, err)
    assert f"{on_gcp}: cannot check gcp" in out
    assert runpod.live_pods() == []
    with gtrap.fake._lock:  # GCP answers again
        gtrap.fake._faults.clear()
    rc, out, err = eps.run("cancel", "--all", timeout_s=120)
    assert rc == 0, (out, err)
    assert gtrap.fake.instances == {}
