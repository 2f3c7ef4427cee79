"""A team's database down for 60 s while 10 jobs run (issue 37, item 4): nothing is released
or cancelled, every job ends as it would have, and commands meanwhile say the state is
unreachable in one line.

A PostgreSQL server of this test's own (tests/pg_support.py: the session's is shared by other
tests) holds the ledger; ten jobs run on the VM lane (real processes on this machine), under
the state directory's supervisor, with a short lease (``EPS_STATE_LEASE=4s``, so the
supervisor stops acting on them early in the outage and must take them back after it).  The
server is stopped (a fast shutdown: every connection dropped) for 60 s.  Meanwhile:

- every job's process lives on until it ends by itself (nothing is stopped or released);
- ``eps status`` and ``eps execute`` exit non-zero with one line on stderr, saying the state
  database is unreachable, and no traceback; the execute records and starts nothing.

Once the server is back, every dispatch ends with its own exit code, its output pulled, one
attempt each (no second start), and nothing else was recorded.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pg_support
import pytest
from faults_support import Eps, GcpTrap, RunpodTrap, wait_until

OUTAGE_S = 60
JOBS = 10
#: Each job runs through the outage and ends in the middle of it, with its own exit code.
JOB_S = 20


@pytest.fixture
def own_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[pg_support.PgServer, str, Path]]:
    """A PostgreSQL server this test alone uses (and stops), a database on it, and a
    ``.pgpass`` that knows its password (this process's, and the eps processes')."""
    pytest.importorskip("psycopg")
    server = pg_support.start_server()
    try:
        passfile = tmp_path / ".pgpass-own"
        passfile.write_text(f"127.0.0.1:{server.port}:*:{pg_support.USER}:{server.password}\n")
        passfile.chmod(0o600)
        monkeypatch.setenv("PGPASSFILE", str(passfile))
        yield server, server.url(server.create_database()), passfile
    finally:
        server.stop()


def _one_line_unreachable(said: tuple[int, str, str], password: str) -> None:
    rc, out, err = said
    assert rc != 0 and "Traceback" not in out + err, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "unreachable" in lines[0] and "postgresql://" in lines[0], (out, err)
    assert password not in out + err


def _pids(e: Eps, ids: list[str]) -> dict[str, int]:
    """Each VM-lane job's process (its handle's id)."""
    return {d: int(e.dispatch(d)["handle"]["id"]) for d in ids}


def test_the_database_down_for_60s_while_ten_jobs_run_releases_nothing(
    tmp_path: Path, gtrap: GcpTrap, rtrap: RunpodTrap, own_server: tuple[pg_support.PgServer, str, Path]
) -> None:
    server, url, passfile = own_server
    e = Eps(tmp_path, gtrap.fake, rtrap.fake, detached=True, state_url=url)
    e.env.update({"PGPASSFILE": str(passfile), "EPS_STATE_HOST": "host-a", "EPS_STATE_LEASE": "4s"})
    ids = [f"fdbdown{i:02d}" for i in range(JOBS)]
    try:
        starts = [e.start("execute", "cpu-small", "--duration", "10m", "--pin", "vm", "--detach", "--dispatch-id", d,
                          "--", "bash", "-c", f'sleep {JOB_S}; echo {i} > "$EPS_OUTPUT_DIR/out"; exit {i % 3}')
                  for i, d in enumerate(ids)]  # fmt: skip
        for child in starts:
            assert child.wait(120) == 0, (child.lines, child.err)
        wait_until(lambda: all(e.dispatch(d)["state"] == "started" for d in ids), 60, "all ten jobs to start")
        pids = _pids(e, ids)
        server.halt()
        down_at = time.monotonic()
        try:
            _one_line_unreachable(e.run("status", timeout_s=60), server.password)
            _one_line_unreachable(e.run("status", "--json", timeout_s=60), server.password)
            _one_line_unreachable(e.run("execute", "cpu-small", "--duration", "10m", "--pin", "vm", "--detach",
                                        "--dispatch-id", "fdbdownnew", "--", "true", timeout_s=60),
                                  server.password)  # fmt: skip
            for pid in pids.values():  # every job runs on: nothing was stopped or released
                os.kill(pid, 0)
            left = OUTAGE_S - (time.monotonic() - down_at)
            assert left > 0, "the checks took the whole outage"
            time.sleep(left)  # the outage itself: the jobs end in it, unseen by the ledger
        finally:
            server.serve()
        for d in ids:
            wait_until(lambda d=d: e.dispatch(d)["state"] == "ended", 120, f"{d} to end once the database is back")
        for i, d in enumerate(ids):
            row = e.dispatch(d)
            assert row["exit_code"] == i % 3 and row["pulled_at"] is not None, row
            assert (e.state / "outputs" / d / "out").read_text() == f"{i}\n"
            attempts = e.attempts(d)
            assert len(attempts) == 1 and attempts[0]["state"] == "ended", attempts
            assert row["cancelled_by"] is None, row
        assert sorted(e.dispatch_ids()) == sorted(ids)  # the execute during the outage recorded nothing
        rc, out, err = e.run("status", "--json")
        assert rc == 0, err
        results = {r["dispatch"]: (r["state"], r["exit_code"]) for r in json.loads(out)["dispatches"]}
        assert results == {d: ("ended", i % 3) for i, d in enumerate(ids)}, results
    finally:
        e.close()
