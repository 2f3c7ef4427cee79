"""A team on one PostgreSQL (issue 37, item 2): two hosts, simulated as two HOME and state
directories on this machine (each its own config, supervisors and ``EPS_STATE_HOST``), share
one ledger on the session's throwaway PostgreSQL; jobs run on the local GCP fake (its VMs are
the real test sshd), outputs go to moto's S3 from the machine itself.

- Host A starts a job; A's supervisor is SIGKILLed and A's HOME and state dir deleted (the
  host is lost).  Host B's ``eps supervise`` (a timer: run every half second) takes the
  dispatch over within one lease period (``EPS_STATE_LEASE=4s``); the job ends, B brings its
  outputs back from storage, and the fake recorded exactly one insert and one instance.
- Host A cut from the database (its connection goes through a proxy the test cuts): A's
  supervisor stops acting on the dispatch before B's takes it over, and B finishes it.
- Host A lost before it launched a job with a workdir and an ``--env`` value, no storage: B
  cannot launch it (both stayed on A) and fails it in one line naming host A, making nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from faults_support import (
    TEAM_LEASE_S,
    ZONES,
    Eps,
    GcpTrap,
    Team,
    lose_host,
    owner_of,
    supervise_until_taken,
    wait_until,
)
from storage_support import S3Server

pytestmark = pytest.mark.usefixtures("sshd")

LEASE_S = TEAM_LEASE_S
CPU = ("cpu-small", "--duration", "30m", "--pin", "gcp")
#: A job of about 12 s that leaves one output: long enough to lose its host mid-run.
JOB = ("bash", "-c", 'sleep 12; echo from-the-lost-host > "$EPS_OUTPUT_DIR/result"')


def _started(a: Eps, d: str, *extra: str) -> None:
    rc, out, err = a.run("execute", *CPU, "--dispatch-id", d, "--detach", "--json", *extra, "--", *JOB,
                         timeout_s=120)  # fmt: skip
    assert rc == 0, (out, err)
    wait_until(lambda: a.dispatch(d)["state"] == "started", 90, "the job to start on host A")
    assert owner_of(a, d) == "host-a"


def _ends_on_b(b: Eps, d: str, gtrap: GcpTrap, s3: S3Server, bucket: str) -> None:
    """B finishes the dispatch: it ends, its outputs come back from storage, one machine ever."""
    wait_until(lambda: b.dispatch(d)["state"] == "ended", 120, "the dispatch to end under host B")
    row = b.dispatch(d)
    assert row["exit_code"] == 0 and row["owner_host"] == "host-b", row
    rc, out, err = b.run("pull", d, timeout_s=120)
    assert rc == 0, (out, err)
    assert (b.state / "outputs" / d / "result").read_text() == "from-the-lost-host\n"
    inserts = [r for r in gtrap.inserts() if d in json.dumps(r.body)]
    assert len(inserts) == 1, inserts
    made = [k for k in gtrap.materialized if d in k[1]]
    assert len(made) == 1, made
    wait_until(lambda: gtrap.live(d) == [], 60, "its machine to be released")
    attempts = b.attempts(d)
    assert len(attempts) == 1 and attempts[0]["state"] == "ended", attempts


#: The public key a third host of the team registered (it never runs here).
OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJuLz1XGmYJ8Yl1bm7N2v0o5Q2qk0mYtZ3i8Yv5f4eHk eps@host-c"


def _register_other_host(e: Eps) -> None:
    """Host C in the team's hosts table, with its key, as its own eps would have put it there."""
    import psycopg

    with psycopg.connect(str(e.state_url), autocommit=True) as db:
        from eps.shell.state.migrations import migrate
        from eps.shell.state.pg_store import PgStore

        store = PgStore(str(e.state_url))
        migrate(store)
        store.close()
        db.execute("INSERT INTO hosts (name, user_name, public_key, seen_at) VALUES ('host-c', 'carol', %s, 0)",
                   (OTHER_KEY,))  # fmt: skip


def test_a_lost_hosts_dispatch_is_taken_over_by_another_host_within_one_lease(
    team_s3: tuple[Eps, Eps], gtrap: GcpTrap, s3: S3Server, bucket: str
) -> None:
    a, b = team_s3
    d = "fteam" + os.urandom(3).hex()
    _register_other_host(a)
    _started(a, d)
    [(zone, name)] = [k for k in gtrap.materialized if d in k[1]]
    keys = gtrap.fake.metadata(zone, name)["ssh-keys"].splitlines()
    assert keys[1:] == [f"root:{OTHER_KEY}"], keys  # the team's other host may reach the VM too
    rc, out, _ = b.run("supervise", "--json")  # A's lease runs: B leaves it alone
    assert rc == 0 and json.loads(out)["dispatches"] == [], out
    rc, out, err = b.run("status", "--json")  # B sees A's dispatch, and whose it is; its reconcile leaves it
    [row] = [r for r in json.loads(out)["dispatches"] if r["dispatch"] == d]
    assert row["state"] == "started" and row["owner"]["host"] == "host-a" and row["owner"]["user"], (row, err)
    a.kill_supervisor()
    lost_at = time.monotonic()
    lose_host(a)
    taken_at, latency = supervise_until_taken(b, d, 30)
    # renewed every quarter period until the kill: the lease ran out between 3/4 of a period
    # and one period after it, and not before (B never took it while A's lease ran); B's timer
    # then saw it free within one run of it, and that run started B's supervisor, which took it
    took = taken_at - lost_at
    assert 0.75 * LEASE_S - 0.5 <= took <= LEASE_S + 2 * latency + 1.0, (took, latency)
    _ends_on_b(b, d, gtrap, s3, bucket)
    rc, out, err = b.run("status", d, "--json")
    [row] = json.loads(out)["dispatches"]
    assert row["owner"]["host"] == "host-b" and row["started_by"]["host"] == "host-a", (row, err)  # started_by stays


class _Proxy:
    """A TCP forwarder on loopback to the database, which the test can cut (every connection
    closed, new ones refused): host A's network to the database."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.socks: list[socket.socket] = []
        self.cut_ = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.cut_.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.cut_.is_set():
                client.close()
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            self.socks += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        self.cut_.set()
        with contextlib.suppress(OSError):  # wakes the accept() (a close alone does not, on Linux)
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def test_a_host_cut_from_the_database_stops_acting_before_another_takes_over(
    team_s3: tuple[Eps, Eps], gtrap: GcpTrap, s3: S3Server, bucket: str, pg_server: object, tmp_path: Path
) -> None:
    a, b = team_s3
    port = pg_server.port  # type: ignore[attr-defined]
    proxy = _Proxy(port)
    try:
        passfile = tmp_path / "a.pgpass"  # A's password file knows the proxy's address too
        passfile.write_text(Path(os.environ["PGPASSFILE"]).read_text().replace(f":{port}:", f":{proxy.port}:"))
        passfile.chmod(0o600)
        a.env["PGPASSFILE"] = str(passfile)
        a.env["EPS_STATE_URL"] = a.state_url.replace(f":{port}/", f":{proxy.port}/")  # type: ignore[union-attr]
        d = "fteam" + os.urandom(3).hex()
        _started(a, d)
        log = a.state / "logs" / "supervisor.log"
        proxy.cut()
        cut_at = time.monotonic()
        stopped_at = taken_at = None
        deadline = time.monotonic() + 30
        while (stopped_at is None or taken_at is None) and time.monotonic() < deadline:
            if stopped_at is None and f"dispatch {d}: stopped acting on it" in log.read_text():
                stopped_at = time.monotonic()
            if taken_at is None:
                b.run("supervise", "--json", timeout_s=60)
                if owner_of(b, d) == "host-b":
                    taken_at = time.monotonic()
            time.sleep(0.05)
        assert stopped_at is not None, log.read_text()
        assert taken_at is not None, "host B never took the dispatch over"
        assert stopped_at < taken_at, (stopped_at - cut_at, taken_at - cut_at)
        _ends_on_b(b, d, gtrap, s3, bucket)
    finally:
        proxy.cut()


def test_a_takeover_that_must_launch_without_the_jobs_inputs_fails_saying_where_they_stayed(
    team_of_two: Team, gtrap: GcpTrap
) -> None:
    a, b = team_of_two(LEASE_S)
    d = "fteam" + os.urandom(3).hex()
    project = a.tmp / "project"  # on host A alone
    project.mkdir()
    (project / "data.txt").write_text("made on host A\n")
    # A's supervisor dies as its create reaches the provider, which never makes the machine
    gtrap.arm("POST", rf"/zones/{ZONES[0]}/instances$", "before", a.kill_supervisor)
    rc, out, err = a.run("execute", *CPU, "--dispatch-id", d, "--detach", "--json", "--workdir", str(project),
                         "--env", "TEAM_SECRET=not-for-b", "--", "cat", "data.txt", timeout_s=120)  # fmt: skip
    assert rc == 0, (out, err)
    wait_until(lambda: gtrap.fired, 60, "A's create")
    wait_until(lambda: a.supervisor_pid() is None, 10, "A's supervisor to die")
    attempts = a.attempts(d)
    creates = sum(1 for m, p in gtrap.seen if m == "POST" and p.endswith("/instances"))
    lose_host(a)
    supervise_until_taken(b, d, 3 * LEASE_S)
    wait_until(lambda: b.dispatch(d)["state"] == "failed", 60, "B to fail the dispatch")
    message = b.dispatch(d)["message"]
    assert message == (
        f"its workdir {project} and the values of --env TEAM_SECRET stayed on host host-a, and this host has no"
        " complete stage of them to launch from: a team needs `storage` (or the job executed again) for a"
        " takeover before launch"), message  # fmt: skip
    events = [json.loads(line) for line in (b.state / "events" / f"{d}.jsonl").read_text().splitlines()]
    assert [e["reason"]["code"] for e in events if e["event"] == "stopped"] == ["inputs_lost"], events
    assert gtrap.materialized == [] and gtrap.live(d) == []  # no machine
    assert sum(1 for m, p in gtrap.seen if m == "POST" and p.endswith("/instances")) == creates  # no create by B
    assert [r["id"] for r in b.attempts(d)] == [r["id"] for r in attempts]  # no attempt row of B's



@pytest.mark.parametrize("with_env", [False, True], ids=["workdir", "workdir-and-env"])
def test_a_takeover_that_must_launch_fetches_the_workdir_the_lost_host_kept_in_storage(
    team_s3: tuple[Eps, Eps], gtrap: GcpTrap, s3: S3Server, bucket: str, with_env: bool
) -> None:
    """With storage, A kept the selected workdir there when it executed: B launches from it.
    An --env value never goes there: a job with one fails as without storage, naming it."""
    a, b = team_s3
    d = "fteam" + os.urandom(3).hex()
    secret = "s3cr3t-" + os.urandom(8).hex()
    project = a.tmp / "project"  # on host A alone
    project.mkdir()
    (project / "data.txt").write_text("from-the-lost-host\n")
    (project / "big.ckpt").write_text("left out\n")
    (project / ".epsignore").write_text("*.ckpt\n")
    gtrap.arm("POST", rf"/zones/{ZONES[0]}/instances$", "before", a.kill_supervisor)
    env = ("--env", f"TEAM_SECRET={secret}") if with_env else ()
    rc, out, err = a.run("execute", *CPU, "--dispatch-id", d, "--detach", "--json", "--workdir", str(project), *env,
                         "--", "bash", "-c", 'ls > "$EPS_OUTPUT_DIR/listed"; cp data.txt "$EPS_OUTPUT_DIR/result"',
                         timeout_s=120)  # fmt: skip
    assert rc == 0, (out, err)
    wait_until(lambda: gtrap.fired, 60, "A's create")
    wait_until(lambda: a.supervisor_pid() is None, 10, "A's supervisor to die")
    lose_host(a)
    supervise_until_taken(b, d, 3 * LEASE_S)
    kept = [k for k in s3.keys(bucket) if f"{d}/inputs/work/" in k]
    assert [k.rsplit("/", 1)[-1] for k in kept] == [".epsignore", "data.txt"], kept  # the selected files
    assert all(secret.encode() not in s3.get(bucket, k) for k in s3.keys(bucket))  # never in storage
    if with_env:
        wait_until(lambda: b.dispatch(d)["state"] == "failed", 60, "B to fail the dispatch")
        said = b.dispatch(d)["message"]
        assert said.startswith("the values of --env TEAM_SECRET stayed on host host-a, "), said  # the workdir came
        assert gtrap.materialized == []
        return
    wait_until(lambda: b.dispatch(d)["state"] == "ended", 120, "the dispatch to end under host B")
    assert b.dispatch(d)["exit_code"] == 0, b.dispatch(d)
    rc, out, err = b.run("pull", d, timeout_s=120)
    assert rc == 0, (out, err)
    assert (b.state / "outputs" / d / "result").read_text() == "from-the-lost-host\n"  # fetched from storage
    assert (b.state / "outputs" / d / "listed").read_text().split() == ["data.txt"]  # the selected files alone
    assert len(gtrap.materialized) == 1, gtrap.materialized  # one machine, B's
    wait_until(lambda: gtrap.live(d) == [], 60, "its machine to be released")
    wait_until(lambda: not (b.state / "workdirs" / d).exists(), 30, "B's fetched copy to go with the dispatch")
