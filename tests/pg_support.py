"""The PostgreSQL server the ledger is tested against: Debian's PostgreSQL (``.ci/run``
installs it), one throwaway cluster per test session, a fresh database per test.

- The cluster is made by ``initdb`` in a new directory under ``/tmp`` and served by
  ``postgres -k DIR -h 127.0.0.1 -p PORT`` (loopback, a port the kernel picked, fsync off:
  a test database need not survive a power cut).  As root (CI), both run as the ``postgres``
  user (``runuser``), as PostgreSQL refuses root.  The session fixture's teardown stops the
  server (SIGINT: a fast shutdown) and removes the directory: no process is left behind.
  A test that takes the database away starts a server of its own (:func:`start_server`) and
  stops it for a while (:meth:`PgServer.halt`, then :meth:`PgServer.serve` on the same data
  and port).
- Connections over TCP need a password (scram-sha-256), so a test's URL holds none: the
  password is in a ``.pgpass`` file the session points ``PGPASSFILE`` at, as a user's would
  be.  The URL eps is given is credential-free, like a team's config.
- ``pg_url``: a new database per test (``CREATE DATABASE``, dropped after, ~50 ms).
  ``ledger_url``: the ledger tests' backend, parametrized: ``None`` (SQLite in the state
  dir) and a ``pg_url``; every test that takes it runs on both.

Registered by ``pytest_plugins`` in tests/conftest.py.  Without PostgreSQL's binaries the
``postgres`` cases skip with the reason (CI installs them, so there they run).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

USER = "eps"
START_TIMEOUT_S = 30.0


def _bindir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return os.path.dirname(found[-1]) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    """A running throwaway PostgreSQL cluster."""

    root: str
    port: int
    password: str
    as_user: list[str]
    bindir: str
    proc: subprocess.Popen[bytes] | None = None  # the postmaster's runner while it serves

    def url(self, database: str = "postgres", *, password: bool = False) -> str:
        secret = f":{self.password}" if password else ""
        return f"postgresql://{USER}{secret}@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(self.url(database, password=True), autocommit=True) as db:
            db.execute(sql)  # type: ignore[arg-type]

    def create_database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.admin(f"CREATE DATABASE {name}")
        return name

    def drop_database(self, name: str) -> None:
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def postmaster(self) -> int | None:
        try:
            with open(os.path.join(self.root, "data", "postmaster.pid")) as fh:
                return int(fh.readline())
        except (OSError, ValueError):
            return None

    def halt(self) -> None:
        """Stop the server (a fast shutdown: every connection dropped), keeping its data, so
        :meth:`serve` can start it again on the same port (a database outage)."""
        self._shutdown()

    def serve(self) -> None:
        """Start the server (again) on its data directory and port, and wait until it answers."""
        log = open(os.path.join(self.root, "server.log"), "ab")  # noqa: SIM115 (the server's for its life)
        self.proc = subprocess.Popen(
            [*self.as_user, f"{self.bindir}/postgres", "-D", os.path.join(self.root, "data"), "-k", self.root,
             "-h", "127.0.0.1", "-p", str(self.port), "-F", "-c", "max_connections=200", "-c", "shared_buffers=64MB"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                self.admin("SELECT 1")
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    with open(os.path.join(self.root, "server.log"), errors="replace") as fh:
                        said = fh.read()[-2000:]
                    self.stop()
                    raise RuntimeError(f"PostgreSQL did not start: {said}") from None
                time.sleep(0.1)
            else:
                return

    def _shutdown(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # to the postmaster itself (runuser does not pass signals on): a fast shutdown
            pid = self.postmaster()
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid or self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def stop(self) -> None:
        """Stop the server and remove its directory: nothing is left behind."""
        self._shutdown()
        shutil.rmtree(self.root, ignore_errors=True)


def start_server() -> PgServer:
    bindir = _bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed here (Debian's postgresql package; .ci/run installs it)")
    root = tempfile.mkdtemp(prefix="eps-pg-")
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        os.chmod(root, 0o700)
        as_user = ["runuser", "-u", "postgres", "--"]
    data = os.path.join(root, "data")
    password = uuid.uuid4().hex
    pwfile = os.path.join(root, "pw")
    with open(pwfile, "w") as fh:
        fh.write(password + "\n")
    if as_user:
        os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
    subprocess.run(
        [*as_user, f"{bindir}/initdb", "-D", data, "-U", USER, "--pwfile", pwfile, "--auth-local=trust",
         "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync", "--locale=C"],
        check=True, capture_output=True,
    )  # fmt: skip
    os.unlink(pwfile)
    server = PgServer(root, _free_port(), password, as_user, bindir)
    server.serve()
    return server


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    pytest.importorskip("psycopg")
    server = start_server()
    passfile = os.path.join(tempfile.mkdtemp(prefix="eps-pgpass-"), ".pgpass")
    with open(passfile, "w") as fh:
        fh.write(f"127.0.0.1:{server.port}:*:{USER}:{server.password}\n")
    os.chmod(passfile, 0o600)  # libpq ignores a .pgpass others can read
    old = os.environ.get("PGPASSFILE")
    os.environ["PGPASSFILE"] = passfile
    try:
        yield server
    finally:
        if old is None:
            os.environ.pop("PGPASSFILE", None)
        else:
            os.environ["PGPASSFILE"] = old
        shutil.rmtree(os.path.dirname(passfile), ignore_errors=True)
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A new, empty database on the session's server; its URL holds no password (``.pgpass`` does)."""
    name = pg_server.create_database()
    try:
        yield pg_server.url(name)
    finally:
        with contextlib.suppress(Exception):
            pg_server.drop_database(name)


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request: pytest.FixtureRequest) -> str | None:
    """The ledger's backend for a test that runs on both: ``None`` (SQLite) or a fresh database's URL."""
    if request.param == "sqlite":
        return None
    return str(request.getfixturevalue("pg_url"))
