"""Several eps processes on one ledger at once, on both backends (``ledger_url``): a write
transaction runs alone (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: the advisory lock of
eps.shell.state.pg_store), so a state read and the update that follows it never interleave
with another process's.  Each test races real processes started together; each fails when
the write transactions do not exclude each other (checked by taking the lock out)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from eps.core.model import Job
from eps.core.states import DispatchState
from eps.shell.state.ledger import Ledger

PROCS = 4
#: One racer: opens the ledger, waits for the start, then (1) tries to claim the dispatch by a
#: compare-and-set (read its state; walking: take it, after a pause that lets another racer
#: read the same state if nothing stops it) and (2) records attempts on it.
RACER = r"""
import json, sys, time
from eps.core.model import LaneKind, Provisioning, Rung
from eps.shell.state.ledger import Ledger

state_dir, url, me = sys.argv[1], sys.argv[2] or None, sys.argv[3]
start, attempts = float(sys.argv[4]), int(sys.argv[5])
ledger = Ledger(state_dir, url=url)
rung = Rung("gcp", LaneKind.GCP, Provisioning.SPOT, "", machine="e2-standard-4", zone="us-central1-a")
time.sleep(max(0.0, start - time.time()))
won = False
with ledger._tx() as db:
    if db.execute("SELECT state FROM dispatches WHERE id='e-race'").fetchone()[0] == "walking":
        time.sleep(0.2)
        db.execute("UPDATE dispatches SET state='started', message=? WHERE id='e-race'", (me,))
        won = True
seqs = [ledger.begin_attempt("e-race", rung, f"eps-e-race-{me}-{i}").seq for i in range(attempts)]
ledger.close()
print(json.dumps({"won": won, "seqs": seqs}))
"""


def _race(state: Path, url: str | None, attempts: int) -> list[dict[str, object]]:
    start = time.time() + 1.5  # every racer has opened its ledger by then
    procs = [
        subprocess.Popen([sys.executable, "-c", RACER, str(state), url or "", f"r{i}", str(start), str(attempts)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        for i in range(PROCS)
    ]  # fmt: skip
    said = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * PROCS, [err for _, err in said]
    return [json.loads(out) for out, _ in said]


def test_racing_processes_one_claims_the_dispatch_and_every_attempt_has_its_own_seq(
    tmp_path: Path, ledger_url: str | None
) -> None:
    ledger = Ledger(str(tmp_path), url=ledger_url)
    ledger.new_dispatch("e-race", Job("cpu-small", 60, command=("true",)))
    ledger.close()
    results = _race(tmp_path, ledger_url, attempts=15)
    winners = [r for r in results if r["won"]]
    assert len(winners) == 1, results  # exactly one compare-and-set wins
    seqs = sorted(s for r in results for s in r["seqs"])  # type: ignore[attr-defined]
    assert seqs == list(range(1, PROCS * 15 + 1))  # no seq taken twice, none lost
    ledger = Ledger(str(tmp_path), url=ledger_url)
    row = ledger.dispatch("e-race")
    assert row is not None and row.state is DispatchState.STARTED
    assert [a.seq for a in ledger.attempts("e-race")] == seqs
    ledger.close()
