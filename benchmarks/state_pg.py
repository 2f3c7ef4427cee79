"""The ledger on PostgreSQL: ``eps status --json`` at 100,000 dispatches, next to the same
figure on SQLite (benchmarks/scale.py's, unchanged), each a real ``eps`` process.

    python benchmarks/state_pg.py [--rows 100000]

The server is a throwaway cluster on loopback (tests/pg_support.py: Debian's PostgreSQL,
fsync off, the password in a .pgpass), stopped at the end.  Goal: at most 200 ms.
Asserts nothing.

Here (2 cores shared with other work, load 14-30, PostgreSQL 15, psycopg 3.3.9 with
psycopg-binary), 2026-12-04: PostgreSQL CPU median 244 ms (wall 311 ms), SQLite CPU median
125 ms (wall 265 ms: the machine was busy; CPU is the steadier figure).  The goal is not
met, and the gap to SQLite is not the database's work: ``import psycopg`` alone costs about 115 ms of
CPU (its C libpq wrapper, its error classes, asyncio and importlib.metadata, which it loads
unconditionally), the connection (scram-sha-256) about 10 ms, and the 10 statements of a
status about 10 ms on loopback.  Before the attempts of the rows shown were read in one query
(``Ledger.attempts_of``) a status made 32 statements and took 259 ms of CPU;
``eps status --all --json`` took 24.1 s (a round trip per dispatch), now 9.0 s against
SQLite's 8.4 s.
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
    args = parser.parse_args(argv)
    server = pg_support.start_server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            passfile = Path(tmp) / ".pgpass"
            passfile.write_text(f"127.0.0.1:{server.port}:*:{pg_support.USER}:{server.password}\n")
            passfile.chmod(0o600)
            os.environ["PGPASSFILE"] = str(passfile)
            url = server.url(server.create_database())
            print(f"PostgreSQL: {server.bindir}")
            status_figure(args.rows, Path(tmp), url=url)
            if not args.no_sqlite:
                status_figure(args.rows, Path(tmp))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
