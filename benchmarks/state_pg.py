"""The ledger on PostgreSQL: ``eps status --json`` at 100,000 dispatches, next to the same
figure on SQLite (benchmarks/scale.py's, unchanged), each a real ``eps`` process.

    python benchmarks/state_pg.py [--rows 100000] [--attempts] [--no-sqlite] [--runs 9]

The server is a throwaway cluster on loopback (tests/pg_support.py: Debian's PostgreSQL,
fsync off, the password in a .pgpass), stopped at the end.  Goal: at most 200 ms.
``--attempts`` gives each finished dispatch the attempt that ran it, as a real ledger has
(the figures below without it are comparable with the older ones).  It prints which of
psycopg's implementations eps loads (``binary``: psycopg-binary's C one).  Asserts nothing.
On this machine the test SLURM cluster is up, so the running job is on it (``debug``'s
first rung); its supervisor holds it, so a status asks no lane about it (before, each
status's inventory asked the cluster's ``squeue``: about 3 ms of CPU).

Here (2 cores shared with other work, PostgreSQL 15, psycopg 3.3.9 with psycopg-binary,
Python 3.11), CPU is the steadier figure; wall time follows the machine's load.

2026-12-05 (branch statusfast2), int and the branch alternated, the same venv (``PYTHONPATH``
choosing the code; run from outside the checkout: a ``python -c`` finds ``eps`` in its
working directory before ``PYTHONPATH``), ``--runs 15``.  05:45 to 05:52 UTC, load 0.8 to
2.0: the default view on PostgreSQL, CPU median 229 and 227 ms on int (wall 238 and 250 ms),
193 and 181 ms on the branch (wall 207 and 197 ms); on SQLite (``scale.py --pods 0 --runs
15``, 05:51 to 05:55) 94 and 98 ms on int, 73 ms on the branch (its second run met a load of
16 to 46 from other work: 103 ms, wall 1048 ms, not comparable); ``plan_bench.py --runs
30``'s cold ``eps plan`` (05:40): 38.1 and 36.9 ms on int, 35.9 and 36.3 ms on the branch
(unchanged).  The same alternated run by run, 20 each, a job on the VM lane instead of the
cluster's, 05:37 with another helper's tests running: PostgreSQL 250 against 201 ms, SQLite
99 against 79 ms.  06:07 to 06:09, load 1.2 to 1.8 (another helper's tests on the other
core): PostgreSQL 207 ms on the branch, 263 ms on int (wall 233 and 273 ms); SQLite 81 and
104 ms; run by run, 20 each: 196 against 237 ms.  So 36 to 56 ms of CPU less than int in
every pair, but the goal (200 ms) is met only in the quieter minutes: the branch measured
from 178 to 207 ms within the hour as other work came and went.
What the branch changed:

- the exit.  ``entry()`` (the ``eps`` command, not ``main()``) collects the young garbage the
  command left, then freezes what is still alive (``gc.freeze``) before the interpreter exits.
  The exit tore the modules down with full collections over every object the command had
  imported (psycopg's, attrs', eps's classes and functions, each in a reference cycle), only
  to free memory the OS takes back: ``python -c "import psycopg"`` takes 149 ms of CPU here,
  117 ms when it freezes before its exit; an ``eps status`` on PostgreSQL about 35 ms less,
  on SQLite about 13.  What a frozen object's finalizer would do at exit is not done; eps
  leaves nothing to one (a command closes its ledger, lanes and files before it returns);
- modules a status does not need: ``AttemptRecord`` moved to ``eps.core.outcome`` (the
  ledger imported ``eps.core.walk`` for it, and with it the router: 9 modules, about 3.5 ms);
  the status words and ``JobEnd`` to ``eps.core.ends`` (``eps.core.lifecycle`` brought the
  job wrapper's render, the stall watch, storage and the sbatch quoting: 8 modules, about
  3 ms); the SQLite backend to ``eps.shell.state.sqlite_store`` (a ledger on PostgreSQL
  loaded ``sqlite3``: about 1 ms).  tests/cli/test_status_path.py and test_state_url keep
  them off the path;
- a shared ledger's unsettled roots: their owners and the database's clock in one
  statement.  A status with the job its supervisor's makes 11 statements (12 before; each
  about 0.1 to 0.2 ms of CPU once warm).

Where the CPU of a default status on PostgreSQL goes now (``time.process_time`` inside one
process, medians of 9, load about 1; int's in brackets): the interpreter 21 ms, of which
about 11 are the editable install's finder (``-X importtime``) (``pip install -e``; an installed eps has none);
the command line and the config 7 ms; ``import psycopg`` 109 ms (111); eps's modules on the
status path with attrs, the connection, the statements, the rows and the JSON 46 ms (57);
the exit about 8 ms (about 40 without the freeze).

Measured and not built: the collector during the command (71 young collections; turning it
off for the whole command, which long commands such as ``eps execute --wait`` must not, gave
about 4 ms, within the noise; a higher threshold nothing); the revival's two reads of the
unsettled rows as one (0.1 to 0.2 ms a statement warm); the schema version's two statements
(see below).  What is left above psycopg and the interpreter is eps's own (attrs about 10 ms,
the ledger's rows and the core's ``Handle`` are attrs classes) and the work itself (about 6 ms
once every module is loaded: a second status in the same process).

2026-12-05 (branch statusfast), int and the branch alternated, the same venv (``PYTHONPATH``
choosing the code).  03:46 to 03:49 UTC, load under 1: the default view on PostgreSQL, CPU
median 236 and 227 ms on int (wall 255 and 233 ms), 206 and 211 ms on the branch (wall 214
and 220 ms); on SQLite (``scale.py --pods 0``) 121 and 110 ms on int, 89 and 80 ms on the
branch; ``plan_bench.py``'s cold ``eps plan``: 34.5 and 31.3 ms on int, 34.9 and 30.3 ms on
the branch (unchanged).  03:39 to 03:46, load 2.5 falling to 0.7: PostgreSQL 235 and 234 ms on
int, 208 and 207 ms on the branch; SQLite 113 and 113 ms, 86 and 89 ms; ``eps plan`` 34.9 and
34.0 ms, 33.6 and 34.8 ms.  The goal (200 ms) is not met; about 25 ms of CPU less.  What the
branch changed:

- status's reconcile asks only the lanes its unsettled dispatches are on (their handles' and
  attempts', one query), and none for a dispatch whose walker (the supervisor) holds its lock:
  that one was skipped by the settle anyway, now before its lane is listed.  Here the running
  job is its supervisor's, so a status builds no lane: no ``squeue``, no import of the SLURM
  and VM lanes, nor of ``returns`` (imported now where a lane is asked).  ``eps status`` on a
  ledger with nothing unsettled (SQLite, ``sbatch`` on the PATH): 52 modules fewer, CPU
  median 125 ms on int, 91 ms on the branch; on PostgreSQL 233 against 210 ms (load 4.5);
- statements: each settled dispatch's attempts read once (twice before), its lease and the
  database's clock in one statement, an active row not read again for the inventory's item,
  and the other ledgers' jobs the inventory finds looked up in one query, not one each (the
  17 statements above: 4 of them were such look-ups).  A status that settles one running job:
  17 statements on int, 16 on the branch (the server's log); with the job its supervisor's
  (this benchmark), by the code one fewer, and none for each other ledger's job on the
  cluster, as no lane is listed (not counted).

Measured and not built: attrs off the status path.  Deferring ``eps.shell.lanes.base``'s
import of attrs moves its cost, no more: the ledger's rows and the core's ``Handle`` are attrs
classes (``eps.shell.state.ledger``, ``eps.core.outcome``), imported by every status.  The
revival's two reads of the unsettled rows and its owners-and-clock pair (``eps.shell.run.
ownership.unsettled_roots``, outside this change) could be one or two statements fewer;
the schema's version (``to_regclass`` then ``max(version)``) is two because the first may
run inside a migration's transaction, where a failed statement would abort it.

2026-12-05 (branch pgstatus), 02:43 to 02:52 UTC, the quiet minutes of a busy night (the
load average fell from 38 to 0.8 as other work ended; in every run the median wall was
within 40 ms of the median CPU); main and the branch alternated: the default view on
PostgreSQL, CPU median 228, 233, 234 and 240 ms on main (wall 239 to 260 ms), 231, 241,
227, 256 and 230 ms on the branch (wall 240 to 268 ms); on SQLite (this benchmark's line
and ``scale.py --pods 0``) 112, 113 and 113 ms on main (wall 114 to 123 ms), 114, 113,
116, 115 and 107 ms on the branch (wall 110 to 129 ms).  The default view's path is the
same on both (the differences are noise); the goal is not met.  ``plan_bench.py``'s cold
``eps plan``: 33.5 and 33.4 ms on main, 33.9 and 33.8 ms on the branch.
With ``--attempts`` (100,000 attempts): main CPU 233 ms (wall 248 ms), the branch CPU 233 ms
(wall 239 ms).  What the branch changed:

- ``--mine`` and ``--host``: the database picks that host's newest ``--limit`` rows
  (``Ledger.select(owner_host=...)``); before, every row was read and filtered in eps:
  ``eps status --mine --json`` at 100,000 took 2.9 s of CPU (8.2 s wall, load 8), now
  0.27 s at the same load, as the default view;
- opening a ledger on PostgreSQL reads one attempt row, not ``count(*)`` of them, which
  the server counted on every command: ``EXPLAIN ANALYZE`` 11 to 16 ms at 100,000 rows
  (load 8); the wall figures with ``--attempts`` above (248 against 239 ms) show it.

Where a default status's CPU goes now (``time.process_time`` inside one process, load
about 8; each figure after the ones before it):

- the interpreter: about 22 ms;
- ``import psycopg``: 113 to 118 ms, as below (its C implementation is the one loaded;
  ``PSYCOPG_IMPL=binary`` only skips the failed look for ``psycopg_c``: no change);
- the command line, the config and the lanes: about 28 ms, of which attrs 12 ms and
  returns 6 to 7 ms (eps's lanes and reconcile are built on them); the modules the
  command loads as it goes are in the figures below;
- the connection: 5 ms (scram-sha-256); 17 statements (one per machine the inventory
  found, as well: other sessions' were on the cluster): 5 ms of CPU, each well under a
  millisecond of the server's (the default view's ``UNION`` of the active rows and the
  newest 20: 0.2 ms, by its indexes; the rows shown are the only ones sent);
- the reconcile (inventory of every lane set up here, the running job's probe): 23 ms;
  the rows and the JSON: about 8 ms.

Measured and not built (then; the inventory and returns are built since, above): the
attrs-free path (about 19 ms: attrs and returns are imported by eps/shell/lanes and
eps/shell/run/reconcile.py, outside this change); an inventory of only the lanes the active
dispatches use (reconcile's, a change of what a status settles); fewer columns (21 rows
of 25 columns: nothing to gain); a prepared statement (a status
runs each statement once or twice on a connection it opens for itself; psycopg prepares
from a statement's fifth execution, and a PREPARE is one more round trip).

The figures before, 2026-12-04, load 14-30: PostgreSQL CPU median 245 ms (wall 528 ms),
SQLite CPU 120 ms (wall 192 ms).  The same day, load about 2.5: PostgreSQL CPU median 219 ms (wall 246 ms),
SQLite CPU 110 ms (wall 129 ms).  The goal is not met; what is left is mostly psycopg's
import, not the database's work.  Where the CPU goes (medians of 11 processes, load 2.5):

- the interpreter, started as this venv's ``python -c``: 21 ms;
- attrs and returns, which eps's model and lanes are built on: 32 ms;
- eps's own modules on the status path and what of the standard library they load: 36 ms;
- ``import psycopg``: 108 ms more in the same process (124 ms alone).  Its ``__init__``
  imports every submodule and registers every type adapter; there is no lighter entry
  point (``import psycopg.<anything>`` runs it).  The standard modules it loads come to
  about 60 ms: ``asyncio`` about 37 (``psycopg.errors`` imports ``asyncio.CancelledError``
  unconditionally; eps uses no async API and no pool, and SQLite's status loads no
  asyncio), ``importlib.metadata`` about 26 (``psycopg_binary/version.py`` reads its own
  version from the installed metadata), then ``ctypes.util``, ``logging``, ``decimal``,
  ``socket``, ``dataclasses``; psycopg's own 60-odd modules and adapters about 65 ms.
  ``PSYCOPG_IMPL=python`` (the ctypes wrapper, a user's choice) loads no metadata but
  ctypes and its library search instead: no faster (148 ms alone, against 145);
- the connection (scram-sha-256) and the 12 statements of a status: about 8 ms.  The
  server's log shows no round trip besides them (psycopg sends no ``SET`` and loads no
  types on connect);
- the status's work (reconcile of the running job, the rows, the JSON): about 13 ms, and
  the first-use cost of the modules it loads lazily.

This benchmark names the database by ``EPS_STATE_URL``; a team's hosts that name it as
``[state] url`` in a config file pay for reading that file too (cattrs' conversion of
the config): 244 ms of CPU against 220 ms in the same minute.

So eps on psycopg cannot go below about 21 + 32 + 108 + 8 = 169 ms; at 200 ms eps's own
part (about 50 ms of modules and work) would have to lose more than half, or psycopg's
import its asyncio and metadata (an upstream change).  A status path free of attrs (its six
classes there, ``Handle``, ``LaneFailure``, ``LaneOptions``, ``JobStatus``, ``DispatchRow``
and ``AttemptRow``, as records, and the codec's look at ``Handle``) would save about 25 ms,
but not where a config file is read: that loads attrs and cattrs anyway.

Before the attempts of the rows shown were read in one query (``Ledger.attempts_of``) a
status made 32 statements and took 259 ms of CPU; ``eps status --all --json`` took 24.1 s
(a round trip per dispatch), now 7.0 s against SQLite's 7.1 s (16.8 s and 6.4 s at load 14-30).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import pg_support  # noqa: E402
from scale import status_figure  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--no-sqlite", action="store_true", help="the PostgreSQL figure only")
    parser.add_argument("--attempts", action="store_true", help="each finished dispatch with its one attempt")
    parser.add_argument("--runs", type=int, default=9, help="eps status processes per median")
    args = parser.parse_args(argv)
    server = pg_support.start_server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            passfile = Path(tmp) / ".pgpass"
            passfile.write_text(f"127.0.0.1:{server.port}:*:{pg_support.USER}:{server.password}\n")
            passfile.chmod(0o600)
            os.environ["PGPASSFILE"] = str(passfile)
            url = server.url(server.create_database())
            import psycopg

            # eps loads psycopg's C implementation (psycopg_binary) when it is installed, as here
            print(f"PostgreSQL: {server.bindir}; psycopg {psycopg.__version__}, implementation {psycopg.pq.__impl__}")
            status_figure(args.rows, Path(tmp), url=url, attempts=args.attempts, runs=args.runs)
            if not args.no_sqlite:
                status_figure(args.rows, Path(tmp), attempts=args.attempts, runs=args.runs)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
