"""A team on one PostgreSQL (issue 37) on the real local SLURM cluster: a host lost while its
dispatch is parked on high-eur.

Two hosts are simulated as in test_faults_team.py (each its own HOME, state dir, config and
supervisors; ``EPS_STATE_HOST``), sharing the session's throwaway PostgreSQL and the
cluster's work root.  high-eur is full the way a busy user's is (its per-user cap lowered
to 2 GPUs, held by a 2-GPU job of this suite), so a gpu-1 job parks there.

Host A parks it with a 12 s park cap; A's supervisor is SIGKILLed and A's HOME and state dir
deleted.  Host B's ``eps supervise`` (every half second, its timer; B's own park caps are 2 s
and 1 s) takes it over within one lease period and continues the ladder from the ELAPSED
park with the caller's cap: the job moves to normal-eur at A's original deadline (or at once
when B's walk begins after it, on a busy machine), not after a fresh cap from the takeover
and not early by B's own cap.  squeue is polled throughout:
never two live jobs of the dispatch.

The same with a job's local inputs (a workdir and an ``--env`` value, which only host A had):
B submits under normal-eur from the complete stage A left in the dispatch's root on the
cluster's shared filesystem, without the files, and the job sees both.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from faults_support import Eps, SlurmTrap, Team, lose_host, squeue, supervise_until_taken, wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("sshd")]

LEASE_S = 4
CAP_S = 12  # the caller's (host A's) park cap on high-eur


@pytest.fixture
def team(team_of_two: Team, slurm_cluster: Any) -> tuple[Eps, Eps, SlurmTrap]:
    """Hosts A and B on the real cluster, A with the caller's park cap, B with its own."""
    a, b = team_of_two(LEASE_S, a={"slurm": True, "caps": (CAP_S, 5)}, b={"slurm": True, "caps": (2, 1)})
    return a, b, SlurmTrap(Path(a.env["EPS_FAULT_DIR"]))


class _Watch:
    """squeue polled in a thread, from before the dispatch is started until the test ends:
    every sight of the dispatch's live jobs."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.seen: list[list[tuple[str, str, str, str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self.seen.append(squeue(self.prefix))
            self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _owner(e: Eps, d: str) -> str | None:
    with contextlib.suppress(Exception):
        return e.dispatch(d)["owner_host"]  # type: ignore[no-any-return]
    return None


def test_a_host_lost_while_parked_on_high_eur_is_taken_over_from_the_elapsed_park(
    team: tuple[Eps, Eps, SlurmTrap], high_eur_full: str
) -> None:
    a, b, strap = team
    d = "f" + uuid.uuid4().hex[:10]
    watch = _Watch(f"eps-{d}")
    try:
        rc, out, err = a.run("execute", "--dispatch-id", d, "--detach", "--json", "gpu-1", "--duration", "1h",
                             "--", "sleep", "300", timeout_s=60)  # fmt: skip
        assert rc == 0, (out, err)
        high = a.wait_attempt(d, lambda r: r["qos"] == "high-eur" and r["state"] == "pending", 60, "parked on high-eur")
        [(job_id, state, qos, _)] = wait_until(lambda: squeue(f"eps-{d}"), 10, "the high-eur job in squeue")
        assert (job_id, state, qos) == (high["handle"], "PENDING", "high-eur")
        assert _owner(a, d) == "host-a"
        time.sleep(1.0)  # parked a while on A: the part of the park B must not give it again
        a.kill_supervisor()
        lost_at, lost_wall = time.monotonic(), time.time()
        shutil.rmtree(a.tmp)  # the host is lost: its HOME, state dir, key and config
        deadline = lost_at + 3 * LEASE_S
        latency = 0.0  # the longest one run of B's timer took
        while _owner(b, d) != "host-b":
            assert time.monotonic() < deadline, f"host B did not take {d} over within {3 * LEASE_S} s"
            began = time.monotonic()
            rc, out, err = b.run("supervise", "--json", timeout_s=60)
            latency = max(latency, time.monotonic() - began)
            assert rc == 0, (out, err)
            time.sleep(0.5)
        took = time.monotonic() - lost_at
        # A's lease ran out within one period of the kill (not before 3/4 of it: it was renewed
        # every quarter); B's timer saw it free within one run, and that run's supervisor took it
        assert 0.75 * LEASE_S - 0.5 <= took <= LEASE_S + 2 * latency + 1.0, (took, latency)
        assert squeue(f"eps-{d}")[0][:3] == (job_id, "PENDING", "high-eur")  # still parked, not withdrawn early
        normal = b.wait_attempt(d, lambda r: r["qos"] == "normal-eur", 3 * CAP_S, "the move to normal-eur")
        wait_until(lambda: [(s, q) for _j, s, q, _n in squeue(f"eps-{d}")] == [("RUNNING", "normal-eur")], 20,
                   "the normal-eur job to run")  # fmt: skip
        # the move came at A's deadline (the caller's cap from the submission on high-eur), or at
        # once when B's walk began after it (a busy machine), never a fresh cap from the takeover
        # (a full CAP_S after B's walk began) nor at B's own 2 s
        events = [json.loads(line) for line in (b.state / "events" / f"{d}.jsonl").read_text().splitlines()]
        walk_began = next(e["ts"] for e in events if e["event"] == "dispatch")
        [advanced] = [e for e in events if e["event"] == "advanced"]
        assert advanced["qos"] == "high-eur" and advanced["elapsed_s"] >= CAP_S - 0.5, advanced  # the park A began
        waited = normal["started_at"] - high["started_at"]
        due = max(high["started_at"] + CAP_S, walk_began)
        assert waited >= CAP_S - 0.5 and normal["started_at"] - due <= 2.5, (waited, took, walk_began - lost_wall)
        attempts = b.attempts(d)
        assert [(r["qos"], r["state"], r["outcome"]) for r in attempts][:1] == [
            ("high-eur", "advanced", "park_timeout")], attempts  # fmt: skip
        assert [r["qos"] for r in attempts] == ["high-eur", "normal-eur"], attempts
        assert [q for q, _ in strap.sbatches()] == ["high-eur", "normal-eur"], strap.calls()  # one submission each
        assert all(c.startswith(f"scancel -u {getpass.getuser()} ") for c in strap.calls() if c.startswith("scancel"))
        wait_until(lambda: b.dispatch(d)["state"] == "started", 20, "B to record it started")
        assert _owner(b, d) == "host-b"
    finally:
        watch.stop()
    assert all(len(jobs) <= 1 for jobs in watch.seen), [j for j in watch.seen if len(j) > 1]
    assert any(jobs and jobs[0][2] == "normal-eur" for jobs in watch.seen)
    rc, out, err = b.run("cancel", d, timeout_s=90)
    assert rc == 0, (out, err)
    assert squeue(f"eps-{d}") == []


#: What the job prints of its inputs: the workdir's file, and a hash of the --env value (never it).
READS_INPUTS = (
    'cat data.txt > "$EPS_OUTPUT_DIR/seen"; printf %s "$TEAM_SECRET" | sha256sum | cut -c1-64 > "$EPS_OUTPUT_DIR/hash"'
)


def test_a_takeover_submits_the_next_tier_from_the_stage_the_lost_host_left(
    team: tuple[Eps, Eps, SlurmTrap], high_eur_full: str
) -> None:
    import hashlib

    a, b, strap = team
    d = "f" + uuid.uuid4().hex[:10]
    secret = "s3cr3t-" + uuid.uuid4().hex
    project = a.tmp / "project"  # on host A alone: it goes with the host
    project.mkdir()
    (project / "data.txt").write_text("made on host A\n")
    watch = _Watch(f"eps-{d}")
    try:
        rc, out, err = a.run("execute", "--dispatch-id", d, "--detach", "--json", "gpu-1", "--duration", "1h",
                             "--workdir", str(project), "--env", f"TEAM_SECRET={secret}",
                             "--", "bash", "-c", READS_INPUTS, timeout_s=60)  # fmt: skip
        assert rc == 0, (out, err)
        a.wait_attempt(d, lambda r: r["qos"] == "high-eur" and r["state"] == "pending", 60, "parked on high-eur")
        root = a.tmp.parent / "cluster" / d / "0"
        assert (root / ".staged").exists() and (root / "work" / "data.txt").exists()
        a.kill_supervisor()
        lose_host(a)
        supervise_until_taken(b, d, 3 * LEASE_S)
        b.wait_attempt(d, lambda r: r["qos"] == "normal-eur", 3 * CAP_S, "the move to normal-eur")
        wait_until(lambda: b.dispatch(d)["state"] == "ended", 60, "the job to end under host B")
    finally:
        watch.stop()
    row = b.dispatch(d)
    assert row["exit_code"] == 0 and row["owner_host"] == "host-b", row
    assert [r["qos"] for r in b.attempts(d)] == ["high-eur", "normal-eur"], b.attempts(d)
    assert [q for q, _ in strap.sbatches()] == ["high-eur", "normal-eur"], strap.calls()
    assert all(len(jobs) <= 1 for jobs in watch.seen), [j for j in watch.seen if len(j) > 1]
    rc, out, err = b.run("pull", d, timeout_s=60)
    assert rc == 0, (out, err)
    outputs = b.state / "outputs" / d
    assert (outputs / "seen").read_text() == "made on host A\n"
    assert (outputs / "hash").read_text().strip() == hashlib.sha256(secret.encode()).hexdigest()
    held = [p for p in b.tmp.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert held == [], held  # B's HOME and state dir never held the value
