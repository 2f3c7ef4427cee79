"""Fault injection on the GCP, RunPod and VM lanes: ``eps execute`` runs as a real process
and is SIGKILLed at each step of a walk; a new process reconciles or resumes; the fake
servers and the ledger file are then asked whether anything was orphaned or made twice.
Also: provider timeouts and 5xx mid-walk, two executors racing on one dispatch, ``eps
cancel`` while another process walks, a read-only or full state directory."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from faults_support import (
    ENTRY_FAST_TIMEOUTS,
    ZONES,
    Eps,
    GcpTrap,
    RunpodTrap,
    assert_ledger_consistent,
    assert_no_orphans,
    gcp_fake,
    runpod_fake,
    ssh_support,
    tmpfs,
    wait_until,
)
from procs import live

CPU = ("cpu-small", "--duration", "30m")
A_SPOT = f"gcp/e2-standard-4/{ZONES[0]}/spot"


def _id() -> str:
    return "f" + uuid.uuid4().hex[:10]


def _kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in events]


def _exhaust_gcp(gcp: Any) -> None:
    for zone in ZONES:
        gcp.always(zone, gcp_fake.exhausted(gcp.project, zone))


def _resume_started(eps: Eps, d: str) -> dict[str, Any]:
    """``eps execute --resume D`` in a new process: exit 0, and the last event is ``started``."""
    rc, events, err = eps.execute("--resume", d)
    assert rc == 0, (events, err)
    assert events and events[-1]["event"] == "started", events
    assert events[-1]["dispatch"] == d
    return events[-1]["handle"]


def _check(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, d: str) -> None:
    assert_no_orphans(eps, gtrap, rtrap)
    assert_ledger_consistent(eps, d)


# --- SIGKILL at each step of a GCP walk ---------------------------------------------------


@pytest.mark.parametrize("when", ["before", "after"])
def test_kill_at_the_gcp_insert_then_resume(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, when: str) -> None:
    """Killed as the insert reaches GCP: ``before`` it is applied (the provider never saw a
    call) or ``after`` (the machine exists, the answer is lost).  The attempt was recorded
    first, with the deterministic name; the resumed walk makes no second machine."""
    d = _id()
    child = eps.start("execute", "--json", "--dispatch-id", d, *CPU, "--", "true")
    gtrap.arm("POST", rf"/zones/{ZONES[0]}/instances$", when, child)
    assert child.wait(30) == -signal.SIGKILL
    assert gtrap.fired == [f"{when} POST /compute/v1/projects/test-project/zones/{ZONES[0]}/instances"]
    [attempt] = eps.attempts(d)  # written before the provider call, with the name it uses
    assert (attempt["state"], attempt["rung"], attempt["handle"]) == ("intent", A_SPOT, None)
    assert attempt["name"].startswith(f"eps-{d}-")
    assert len(gtrap.live(d)) == (1 if when == "after" else 0)

    handle = _resume_started(eps, d)
    assert handle["lane"] == "gcp"
    [inst] = gtrap.live(d)
    assert inst["name"] == handle["id"]
    if when == "after":  # adopted, not made again
        assert handle["id"] == attempt["name"]
        assert gtrap.materialized == [(ZONES[0], attempt["name"])]
    _check(eps, gtrap, rtrap, d)


def test_kill_after_the_machine_is_up_before_running_is_recorded(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    """Killed while reading the finished insert operation: the machine runs, the ledger
    still says ``intent``, and no job was ever launched on it.  ``eps reconcile`` (no eps
    owns the dispatch) releases the machine rather than let it bill with nothing on it; the
    dispatch is interrupted, and ``--resume`` tries the rung again under a new name."""
    d = _id()
    child = eps.start("execute", "--json", "--dispatch-id", d, *CPU, "--", "true")
    gtrap.arm("POST", r"/operations/[^/]+/wait$", "after", child)
    assert child.wait(30) == -signal.SIGKILL
    [inst] = gtrap.live(d)
    assert inst["status"] == "RUNNING"
    assert [a["state"] for a in eps.attempts(d)] == ["intent"]

    rc, out, err = eps.run("reconcile", "--json")
    assert rc == 0, err
    assert f"{d}:gcp:{inst['name']}" in json.loads(out)["released"]
    assert gtrap.live(d) == []
    row = eps.dispatch(d)
    assert row["state"] == "interrupted"
    [attempt] = eps.attempts(d)
    assert (attempt["state"], attempt["outcome"]) == ("cancelled", "not_launched")
    handle = _resume_started(eps, d)
    assert handle["rung"] == attempt["rung"] and handle["id"] != inst["name"]  # the same rung, a new VM
    [again] = gtrap.live(d)
    assert again["name"] == handle["id"]
    assert len(gtrap.inserts()) == 2
    _check(eps, gtrap, rtrap, d)


def test_a_resume_launches_the_job_on_the_machine_the_dead_walk_made(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    """Killed after the VM came up, before the job was launched; ``--resume`` straight away
    adopts that VM and launches the job on it: one machine, and the job runs there."""
    d = _id()
    child = eps.start("execute", "--json", "--dispatch-id", d, *CPU, "--", "echo ran-after-resume")
    gtrap.arm("POST", r"/operations/[^/]+/wait$", "after", child)
    assert child.wait(30) == -signal.SIGKILL
    [inst] = gtrap.live(d)
    handle = _resume_started(eps, d)
    assert handle["id"] == inst["name"]
    assert len(gtrap.inserts()) == 1 and len(gtrap.materialized) == 1
    rc, out, err = eps.run("wait", d, timeout_s=60)
    assert rc == 0, (out, err)
    assert "ran-after-resume" in (eps.state / "logs" / f"{d}.log").read_text()
    assert gtrap.live(d) == []  # pulled, then released
    _check(eps, gtrap, rtrap, d)


# --- SIGKILL during failover to RunPod ----------------------------------------------------


@pytest.mark.parametrize("when", ["before", "after"])
def test_kill_at_the_runpod_create_during_failover(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, when: str) -> None:
    """GCP CPU is exhausted everywhere; the walk fails over to a RunPod CPU pod and is
    killed as the create arrives.  Resume: one pod at most per name, the dispatch starts
    on RunPod, no GCP machine anywhere."""
    _exhaust_gcp(gtrap.fake)
    d = _id()
    child = eps.start("execute", "--json", "--dispatch-id", d, *CPU, "--", "true")
    rtrap.arm("POST", r"^/v2/pods$", when, child)
    assert child.wait(30) == -signal.SIGKILL
    attempts = eps.attempts(d)
    assert [a["state"] for a in attempts] == ["failed"] * 4 + ["intent"]
    assert attempts[-1]["rung"].startswith("runpod/cpu3g")
    assert len(rtrap.live(d)) == (1 if when == "after" else 0)

    handle = _resume_started(eps, d)
    assert handle["lane"] == "runpod"
    [pod] = rtrap.live(d)
    assert pod["id"] == handle["id"]
    if when == "after":
        assert rtrap.created == [attempts[-1]["name"]]  # the pod the dead walk made, adopted
    assert gtrap.live() == []
    _check(eps, gtrap, rtrap, d)


def test_kill_after_the_pod_is_created_before_running_is_recorded(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    """Killed at the first status poll of a new pod (still PROVISIONING): the resumed
    dispatch owns that pod and no second one is created."""
    _exhaust_gcp(gtrap.fake)
    d = _id()
    child = eps.start("execute", "--json", "--dispatch-id", d, *CPU, "--", "true")
    rtrap.arm("GET", r"^/v2/pods/[0-9a-f]+$", "before", child)
    assert child.wait(30) == -signal.SIGKILL
    [pod] = rtrap.live(d)
    assert pod["status"] == "PROVISIONING"
    assert eps.attempts(d)[-1]["state"] == "intent"

    handle = _resume_started(eps, d)
    assert handle["id"] == pod["id"]
    assert rtrap.created == [pod["name"]]
    _check(eps, gtrap, rtrap, d)


# --- the VM lane ----------------------------------------------------------------------------


def _vm_processes(d: str) -> list[int]:
    """The process groups (their leaders) of the jobs of dispatch ``d`` on the VM lane."""
    mark = f"EPS_DISPATCH={d}".encode()
    return [p.pid for p in live(lambda p: p.leads_its_group and mark in p.environ())]


def test_kill_after_the_vm_process_started_before_it_is_recorded(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path
) -> None:
    """The VM lane's process is running but eps has not recorded it: the command's log is a
    FIFO (eps's open blocks until this test reads it) and this test holds the ledger's write
    lock while it lets the open through, so eps starts the process and then waits to record
    it; it is killed there.  Reconcile finds the process by its marker and adopts it: never
    a second process, and cancel stops it."""
    d = _id()
    (eps.state / "logs").mkdir(parents=True)
    fifo = eps.state / "logs" / f"{d}.log"
    os.mkfifo(fifo)
    child = eps.start("execute", "--json", "--dispatch-id", d, "cpu-small", "--duration", "10s", "--", "sleep", "60")
    eps.wait_attempt(d, lambda a: a["state"] == "intent", 30, "the VM attempt to be recorded")
    lock = sqlite3.connect(eps.state / "ledger.sqlite3", isolation_level=None, timeout=30)
    reader = -1
    try:
        lock.execute("BEGIN IMMEDIATE")  # eps cannot record the start until we let go
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets eps's open of the log through
        [pid] = wait_until(lambda: _vm_processes(d), 10, "the VM process")
        child.kill()
    finally:
        lock.execute("ROLLBACK")
        lock.close()
        if reader >= 0:
            os.close(reader)
    assert child.wait(10) == -signal.SIGKILL
    assert [a["state"] for a in eps.attempts(d)] == ["intent"]

    handle = _resume_started(eps, d)
    assert (handle["lane"], handle["id"]) == ("vm", str(pid))
    assert _vm_processes(d) == [pid]
    assert_ledger_consistent(eps, d)
    rc, _, err = eps.run("cancel", d)
    assert rc == 0, err
    wait_until(lambda: not _vm_processes(d), 10, "the VM process to stop")
    assert eps.dispatch(d)["state"] == "cancelled"


# --- provider errors and timeouts mid-walk ------------------------------------------------


def test_gcp_5xx_with_lost_answers_is_retried_into_one_machine(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    """The insert takes effect but its answers are lost as 503s: the retries carry the same
    request id, so GCP makes one machine and the walk starts on it."""
    gtrap.fake.fail("POST", rf"/zones/{ZONES[0]}/instances$", gcp_fake.unavailable(), times=1, after=True)
    d = _id()
    rc, events, err = eps.execute("--dispatch-id", d, *CPU, "--", "true", entry=ENTRY_FAST_TIMEOUTS)
    assert rc == 0, (events, err)
    assert events[-1]["handle"]["zone"] == ZONES[0]
    assert len(gtrap.inserts()) == 2 and len({r.query["requestId"] for r in gtrap.inserts()}) == 1
    assert len(gtrap.materialized) == 1
    _check(eps, gtrap, rtrap, d)


def test_gcp_5xx_that_outlasts_the_retries_moves_on_and_leaves_nothing(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    """Every answer to the zone-a insert is a 503, though the machine was made: the walk
    moves on to the next zone and must not leave the zone-a machine behind."""
    gtrap.fake.fail("POST", rf"/zones/{ZONES[0]}/instances$", gcp_fake.unavailable(), times=2, after=True)
    d = _id()
    rc, events, err = eps.execute("--dispatch-id", d, *CPU, "--", "true", entry=ENTRY_FAST_TIMEOUTS)
    assert rc == 0, (events, err)
    failed = [e for e in events if e["event"] == "failed"]
    assert [(e["rung"], e["kind"]) for e in failed] == [(A_SPOT, "transient")]
    assert events[-1]["handle"]["zone"] == ZONES[1]
    # asked before any reconcile: the walk itself cleaned up
    assert [i["name"] for i in gtrap.live(d)] == [events[-1]["handle"]["id"]]
    _check(eps, gtrap, rtrap, d)


def test_gcp_insert_timeout_is_retried_without_a_second_machine(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    """The first insert hangs past the client's timeout (then lands late); the retry with
    the same request id and the late original make one machine between them."""
    gtrap.arm("POST", rf"/zones/{ZONES[0]}/instances$", "delay:2.5", lambda: None)
    d = _id()
    rc, events, err = eps.execute("--dispatch-id", d, *CPU, "--", "true", entry=ENTRY_FAST_TIMEOUTS)
    assert rc == 0, (events, err)
    assert events[-1]["handle"]["zone"] == ZONES[0]
    wait_until(lambda: len(gtrap.inserts()) == 2, 10, "the late insert to land")
    assert len(gtrap.materialized) == 1
    _check(eps, gtrap, rtrap, d)


def test_a_gcp_insert_that_never_answers_ends_the_walk_without_a_second_machine(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    """Every send of the insert (same request id) hangs past the client's patience, then lands
    late (issue 11, finding 2): the walk must not fail over while the VM may yet appear.  It
    stops; the one VM that appears is released by the next reconcile."""
    for _ in range(4):
        gtrap.arm("POST", rf"/zones/{ZONES[0]}/instances$", "delay:3", lambda: None)
    d = _id()
    rc, events, err = eps.execute("--dispatch-id", d, *CPU, "--", "true", entry=ENTRY_FAST_TIMEOUTS)
    assert rc == 1, (events, err)
    assert [e["kind"] for e in events if e["event"] == "failed"] == ["unknown_fate"]
    assert len({(e.get("rung") or "") for e in events if e["event"] == "attempt"}) == 1  # no other rung tried
    assert rtrap.fake.created_bodies() == []
    wait_until(lambda: gtrap.live(d), 15, "the late insert to make its VM")
    assert len(gtrap.materialized) == 1
    assert eps.dispatch(d)["state"] == "failed"
    rc, out, err = eps.run("reconcile", "--json")
    assert rc == 0, (out, err)
    assert gtrap.live(d) == []


def test_runpod_create_timeout_finds_the_pod_instead_of_making_another(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    """The pod is made but the create answers after the client gave up: the retry looks the
    pod up by name and adopts it."""
    _exhaust_gcp(gtrap.fake)
    rtrap.fake.queue("POST", "/v2/pods", runpod_fake.Fault(delay_s=2.5, process=True))
    d = _id()
    rc, events, err = eps.execute("--dispatch-id", d, *CPU, "--", "true", entry=ENTRY_FAST_TIMEOUTS)
    assert rc == 0, (events, err)
    assert events[-1]["handle"]["lane"] == "runpod"
    wait_until(lambda: rtrap.created, 10, "the slow create to answer")
    assert len(rtrap.created) == 1 and len(rtrap.fake.created_bodies()) == 1  # found by name, not sent again
    _check(eps, gtrap, rtrap, d)


def test_runpod_5xx_everywhere_fails_clearly_and_leaves_nothing(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    _exhaust_gcp(gtrap.fake)
    rtrap.fake.queue("POST", "/v2/pods", *[runpod_fake.Fault(status=503)] * 8)
    d = _id()
    rc, events, err = eps.execute("--dispatch-id", d, *CPU, "--", "true", entry=ENTRY_FAST_TIMEOUTS)
    assert rc == 1, (events, err)
    failed = [e for e in events if e["event"] == "failed"]
    assert [e["kind"] for e in failed][-2:] == ["transient", "transient"]
    assert all(e["message"] for e in failed)
    assert events[-1]["event"] in ("terminal", "stopped")
    assert rtrap.created == [] and gtrap.live() == []
    assert eps.dispatch(d)["state"] == "failed"
    _check(eps, gtrap, rtrap, d)


# --- two executors, and cancel while walking ---------------------------------------------


def _interrupted(eps: Eps, gtrap: GcpTrap) -> str:
    """A dispatch whose walk was killed before its first insert reached GCP."""
    d = _id()
    child = eps.start("execute", "--json", "--dispatch-id", d, *CPU, "--", "true")
    gtrap.arm("POST", rf"/zones/{ZONES[0]}/instances$", "before", child)
    assert child.wait(30) == -signal.SIGKILL
    return d


def test_two_resumes_race_exactly_one_walks(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    d = _interrupted(eps, gtrap)
    gtrap.arm("POST", r"/instances$", "delay:3", lambda: None)  # the winner's insert is slow
    a = eps.start("execute", "--json", "--resume", d)
    b = eps.start("execute", "--json", "--resume", d)
    codes = sorted([a.wait(60), b.wait(60)])
    assert codes == [0, 2], (a.lines, a.err, b.lines, b.err)
    loser = a if a.proc.returncode == 2 else b
    winner = b if loser is a else a
    assert loser.lines == []
    assert loser.err.strip().count("\n") == 0 and "being walked by another eps process" in loser.err
    assert winner.events[-1]["event"] == "started"
    assert len(gtrap.materialized) == 1
    _check(eps, gtrap, rtrap, d)


def test_cancel_while_another_process_walks(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    """``eps cancel D`` arrives while the walker waits on a GCP insert: the walker stops,
    the machine it was making is deleted, the dispatch stays cancelled."""
    d = _id()
    arrived = threading.Event()
    gtrap.arm("POST", r"/instances$", "delay:2", arrived.set)
    walker = eps.start("execute", "--json", "--dispatch-id", d, *CPU, "--", "true")
    assert arrived.wait(30)
    rc, out, err = eps.run("cancel", d, "--json")
    assert rc == 0, (out, err)
    wrc = walker.wait(30)
    assert wrc == 1, (walker.lines, walker.err)
    assert walker.events[-1]["event"] == "stopped" and walker.events[-1]["message"] == "cancelled"
    assert gtrap.live(d) == []
    row = eps.dispatch(d)
    assert row["state"] == "cancelled"
    assert_ledger_consistent(eps, d)
    assert_no_orphans(eps, gtrap, rtrap)


# --- the state directory ------------------------------------------------------------------


def _one_line(err: str) -> None:
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_read_only_state_directory(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path) -> None:
    """A state directory on a read-only mount, fresh and with a ledger in it: one clear
    line, exit 2, nothing submitted, and the existing ledger is intact afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root")
    with tmpfs(tmp_path / "ro", "4m") as mnt:
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        rc, _, err = eps.run("execute", *CPU, "--", "true", env={"EPS_STATE_DIR": str(mnt / "state")})
        assert rc == 2
        _one_line(err)
        assert "state directory" in err and "Read-only" in err

        subprocess.run(["mount", "-o", "remount,rw", str(mnt)], check=True)
        d = _id()
        env = {"EPS_STATE_DIR": str(mnt / "state")}
        ssh_support.give_key(mnt / "state")  # the VM it makes is the test sshd
        rc, _, err = eps.run("execute", "--dispatch-id", d, *CPU, "--", "sleep 300", env=env)
        assert rc == 0, err
        inserts = len(gtrap.inserts())
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        rc, _, err = eps.run("execute", *CPU, "--", "true", env=env)
        assert rc == 2
        _one_line(err)
        assert "read-only" in err.lower()
        assert len(gtrap.inserts()) == inserts and rtrap.created == []
        subprocess.run(["mount", "-o", "remount,rw", str(mnt)], check=True)
        rc, out, err = eps.run("status", "--json", d, env=env)
        assert rc == 0, err
        assert '"state": "started"' in out


def _fill(mnt: Path) -> Path:
    filler = mnt / "filler"
    try:
        with open(filler, "ab", buffering=0) as fh:
            while True:
                fh.write(b"\0" * 4096)
    except OSError:
        pass  # ENOSPC: full
    return filler


def test_full_state_disk_is_one_clear_line_and_loses_nothing(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root")
    with tmpfs(tmp_path / "full", "1m") as mnt:
        env = {"EPS_STATE_DIR": str(mnt / "state")}
        ssh_support.give_key(mnt / "state")  # the VMs it makes are the test sshd
        first = _id()
        rc, _, err = eps.run("execute", "--dispatch-id", first, *CPU, "--", "sleep 300", env=env)
        assert rc == 0, err
        inserts = len(gtrap.inserts())

        filler = _fill(mnt)
        rc, _, err = eps.run("execute", *CPU, "--", "true", env=env)
        assert rc == 2
        _one_line(err)
        assert "full" in err
        assert len(gtrap.inserts()) == inserts  # nothing submitted

        # The disk fills between the insert and its record (the job is launched on the VM, the
        # record of it fails): the walk stops with one line, and once there is room again
        # reconcile finds the machine with its job running on it, and adopts it.
        filler.unlink()
        d = _id()
        gtrap.arm("POST", r"/instances$", "after", lambda: _fill(mnt))
        rc, out, err = eps.run("execute", "--json", "--dispatch-id", d, *CPU, "--", "true", env=env)
        assert rc == 2, err
        assert [e["event"] for e in map(json.loads, out.splitlines())] == ["dispatch", "attempt"]
        _one_line(err)
        assert "full" in err
        assert len(gtrap.live(d)) == 1
        (mnt / "filler").unlink()
        rc, out, err = eps.run("reconcile", "--json", env=env)
        assert rc == 0, err
        assert f"{d}:gcp:" in out
        eps.state = mnt / "state"
        assert eps.dispatch(first)["state"] == "started"
        assert eps.dispatch(d)["state"] == "started"
        assert eps.dispatch(d)["handle"]["id"] == gtrap.live(d)[0]["name"]
        assert_no_orphans(eps, gtrap, rtrap)
        assert_ledger_consistent(eps, d)
