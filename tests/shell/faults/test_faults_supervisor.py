"""A dispatch outlives the process that started it (issue 18): eps as real processes in
the default detached mode, the state directory's supervisor a real detached process.

The caller of ``execute --wait`` is SIGTERMed or SIGKILLed mid-job: with no further
command, the job ends, its outputs come back byte for byte and the machine is released.
The supervisor is SIGKILLed at each step (creating, shipping, running, pulling): the
next ``eps status`` revives it, and the dispatch ends as it would have, with no second
machine and no second submission.  ``--detach``, ``wait --timeout``, ``attach``,
``eps supervise``, the idle exit, and many dispatches revived at once on the VM lane.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults_support import ZONES, Eps, GcpTrap, RunpodTrap, assert_ledger_consistent, assert_no_orphans, wait_until

CPU_GCP = ("cpu-small", "--duration", "30m", "--pin", "gcp")
CPU_RUNPOD = ("cpu-small", "--duration", "30m", "--pin", "runpod")
CPU_VM = ("cpu-small", "--duration", "20s")
#: The job writes a random blob and, on the machine, its hash: the pulled copy must match.
BLOB = ('{wait}head -c 3000000 /dev/urandom > "$EPS_OUTPUT_DIR/blob"; '
        'sha256sum "$EPS_OUTPUT_DIR/blob" | cut -d" " -f1 > "$EPS_OUTPUT_DIR/blob.sha"; exit {rc}')  # fmt: skip


@pytest.fixture
def eps(tmp_path: Path, gtrap: GcpTrap, rtrap: RunpodTrap, sshd: Path) -> Iterator[Eps]:
    e = Eps(tmp_path, gtrap.fake, rtrap.fake, detached=True)
    yield e
    e.close()


def _until(go: Path) -> str:
    """A shell prefix that holds the job until the test touches ``go``."""
    return f"while [ ! -e {go} ]; do sleep 0.2; done; "


def _id() -> str:
    return "f" + uuid.uuid4().hex[:10]


def _ended(eps: Eps, d: str, timeout_s: float = 90.0) -> dict[str, Any]:
    wait_until(lambda: eps.dispatch(d)["state"] in ("ended", "failed", "cancelled"), timeout_s, f"{d} to end")
    return eps.dispatch(d)


def _blob_back(eps: Eps, d: str) -> None:
    out = eps.state / "outputs" / d
    got = hashlib.sha256((out / "blob").read_bytes()).hexdigest()
    assert got == (out / "blob.sha").read_text().strip()


def _no_supervisor_soon(eps: Eps) -> None:
    wait_until(lambda: eps.supervisor_pid() is None, 30, "the supervisor to leave when idle")


# --- the caller goes away ---------------------------------------------------------------------


@pytest.mark.parametrize("lane", ["gcp", "runpod"])
@pytest.mark.parametrize("how", ["TERM", "KILL"])
def test_the_caller_killed_mid_job_changes_nothing(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path, lane: str, how: str
) -> None:
    d = _id()
    go = tmp_path / "go"  # the job runs on until the caller is gone, however slow the machine
    job = CPU_GCP if lane == "gcp" else CPU_RUNPOD
    child = eps.start("execute", "--json", "--dispatch-id", d, *job, "--wait", "--", BLOB.format(wait=_until(go), rc=4))
    child.wait_event(lambda e: e.get("event") == "started", 60, "the job to start")
    if how == "TERM":
        os.kill(child.pid, signal.SIGTERM)
        assert child.wait(10) == 75, (child.lines, child.err)  # still running: it goes on under its supervisor
        last = child.events[-1]
        assert (last["event"], last["dispatch"], last["state"]) == ("still_running", d, "started")
    else:
        child.kill()
        child.wait(10)
    go.touch()
    row = _ended(eps, d)  # no further command
    assert (row["state"], row["exit_code"]) == ("ended", 4)
    _blob_back(eps, d)
    live = gtrap.live(d) if lane == "gcp" else rtrap.live(d)
    assert live == []
    assert_no_orphans(eps, gtrap, rtrap)
    assert_ledger_consistent(eps, d)
    rc, out, err = eps.run("wait", d)  # the code is still there for whoever asks
    assert rc == 4, (out, err)


def test_detach_then_wait_gives_the_jobs_code(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    began = time.monotonic()
    rc, out, err = eps.run("execute", "--json", "--detach", *CPU_VM, "--", "sleep 2; exit 3")
    took = time.monotonic() - began
    assert rc == 0, (out, err)
    doc = json.loads(out)
    d = doc["dispatch"]
    assert doc["state"] in ("walking", "started")
    assert took < 20  # the figure itself: benchmarks/supervisor_bench.py
    rc, out, err = eps.run("wait", d, "--timeout", "30s")
    assert rc == 3, (out, err)
    assert eps.dispatch(d)["state"] == "ended"


def test_a_bounded_wait_returns_still_running(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    rc, out, err = eps.run("execute", "--detach", *CPU_VM, "--", "sleep 12")
    assert rc == 0, err
    d = out.split()[0]
    began = time.monotonic()
    rc, out, err = eps.run("wait", d, "--timeout", "2s", "--json")
    took = time.monotonic() - began
    assert rc == 75, (out, err)
    assert 1.5 < took < 10
    last = json.loads(out.splitlines()[-1])
    assert (last["event"], last["dispatch"], last["state"]) == ("still_running", d, "started")
    rc, out, err = eps.run("attach", d, "--json", timeout_s=60)  # the events so far, then live, to the end
    assert rc == 0, (out, err)
    kinds = [json.loads(line)["event"] for line in out.splitlines()]
    assert kinds[0] == "supervised" and "started" in kinds and kinds[-1] == "ended"
    _no_supervisor_soon(eps)


def test_cancel_is_the_one_way_to_stop_a_supervised_dispatch(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    d = _id()
    child = eps.start("execute", "--json", "--dispatch-id", d, *CPU_GCP, "--", "sleep 300")
    child.wait_event(lambda e: e.get("event") == "started", 60, "the job to start")
    assert child.wait(10) == 0  # landed: execute without --wait returns, the supervisor keeps it
    assert eps.dispatch(d)["state"] == "started" and len(gtrap.live(d)) == 1
    rc, out, err = eps.run("cancel", d, timeout_s=90)
    assert rc == 0, (out, err)
    assert eps.dispatch(d)["state"] == "cancelled"
    assert gtrap.live(d) == []
    _no_supervisor_soon(eps)
    assert_no_orphans(eps, gtrap, rtrap)


# --- the supervisor dies at each step; the next eps status revives it ---------------------------


def _revive(eps: Eps) -> None:
    rc, out, err = eps.run("status", "--json")
    assert rc == 0, (out, err)
    assert eps.supervisor_pid() is not None or all(
        eps.dispatch(d)["state"] in ("ended", "failed", "cancelled") for d in eps.dispatch_ids()
    )


@pytest.mark.parametrize("when", ["before", "after"])
def test_supervisor_killed_at_the_gcp_insert(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, when: str) -> None:
    d = _id()
    gtrap.arm("POST", rf"/zones/{ZONES[0]}/instances$", when, eps.kill_supervisor)
    rc, out, err = eps.run("execute", "--detach", "--dispatch-id", d, *CPU_GCP, "--", BLOB.format(wait="", rc=0))
    assert rc == 0, (out, err)
    wait_until(lambda: gtrap.fired, 30, "the insert")
    wait_until(lambda: eps.supervisor_pid() is None, 10, "the supervisor to die")
    _revive(eps)
    row = _ended(eps, d)
    assert row["state"] == "ended" and row["exit_code"] == 0
    _blob_back(eps, d)
    assert gtrap.live(d) == []
    assert len(gtrap.materialized) == 1  # never a second machine
    assert_no_orphans(eps, gtrap, rtrap)
    assert_ledger_consistent(eps, d)


def test_supervisor_killed_while_the_workdir_ships(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path
) -> None:
    wd = tmp_path / "project"
    wd.mkdir()
    (wd / "data.bin").write_bytes(os.urandom(150_000_000))  # the upload takes long enough to be cut
    (wd / "job.sh").write_text('sha256sum data.bin | cut -d" " -f1 > "$EPS_OUTPUT_DIR/sum"\n')
    d = _id()
    rc, out, err = eps.run("execute", "--detach", "--dispatch-id", d, *CPU_GCP, "--workdir", str(wd), "--",
                           "bash job.sh")  # fmt: skip
    assert rc == 0, (out, err)
    root = tmp_path / "gcp-runs" / d / "0"
    wait_until((root / "run.sh").exists, 60, "the wrapper to reach the VM")
    eps.kill_supervisor()
    assert not (root / "pid").exists()  # never launched
    _revive(eps)
    row = _ended(eps, d, 180)
    assert row["state"] == "ended" and row["exit_code"] == 0, row
    want = hashlib.sha256((wd / "data.bin").read_bytes()).hexdigest()
    assert (eps.state / "outputs" / d / "sum").read_text().strip() == want
    assert gtrap.live(d) == []
    assert len(gtrap.materialized) == 1  # the machine the dead supervisor made is the one used
    assert_no_orphans(eps, gtrap, rtrap)


@pytest.mark.parametrize("lane", ["gcp", "runpod"])
def test_supervisor_killed_while_the_job_runs(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, lane: str) -> None:
    d = _id()
    job = CPU_GCP if lane == "gcp" else CPU_RUNPOD
    child = eps.start("execute", "--json", "--dispatch-id", d, *job, "--", BLOB.format(wait="sleep 4; ", rc=0))
    child.wait_event(lambda e: e.get("event") == "started", 60, "the job to start")
    eps.kill_supervisor()
    _revive(eps)
    row = _ended(eps, d)
    assert row["state"] == "ended" and row["exit_code"] == 0
    _blob_back(eps, d)
    assert (gtrap.live(d) if lane == "gcp" else rtrap.live(d)) == []
    assert len(gtrap.materialized) + len(rtrap.created) == 1
    assert_no_orphans(eps, gtrap, rtrap)
    assert_ledger_consistent(eps, d)


def test_a_machine_its_watcher_stopped_is_started_pulled_and_deleted_by_the_revived_supervisor(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path
) -> None:
    """The supervisor was gone past the linger: the VM's watcher powered it off with the
    outputs not pulled (TERMINATED, its disk kept).  The next eps status revives the
    supervisor, which starts the VM again, pulls the outputs byte for byte, then deletes it."""
    d = _id()
    child = eps.start("execute", "--json", "--dispatch-id", d, *CPU_GCP, "--", BLOB.format(wait="sleep 1; ", rc=5))
    child.wait_event(lambda e: e.get("event") == "started", 60, "the job to start")
    eps.kill_supervisor()
    wait_until((tmp_path / "gcp-runs" / d / "0" / "exit-code").exists, 60, "the job to end on its VM")
    [(zone, name)] = [k for k in gtrap.fake.instances if d in k[1]]
    gtrap.fake.set_status(zone, name, "TERMINATED")  # the watcher: the linger passed, nobody pulled
    _revive(eps)
    row = _ended(eps, d, 120)
    assert row["state"] == "ended" and row["exit_code"] == 5, row
    _blob_back(eps, d)
    assert len(gtrap.fake.recorded("POST", f"/instances/{name}/start$")) == 1
    assert gtrap.live(d) == [] and len(gtrap.materialized) == 1
    assert_no_orphans(eps, gtrap, rtrap)


def test_supervisor_killed_while_it_pulls(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    d = _id()
    line = 'head -c 300000000 /dev/urandom > "$EPS_OUTPUT_DIR/big.bin"; sha256sum "$EPS_OUTPUT_DIR/big.bin" > sum'
    rc, out, err = eps.run("execute", "--detach", "--dispatch-id", d, *CPU_VM, "--", line)
    assert rc == 0, (out, err)
    target = eps.state / "outputs" / d
    wait_until(lambda: target.exists() and any(target.rglob("*")), 90, "the pull to begin")
    eps.kill_supervisor()
    assert eps.dispatch(d)["state"] == "started"  # not settled by the dead supervisor
    _revive(eps)
    row = _ended(eps, d, 120)
    assert row["state"] == "ended" and row["exit_code"] == 0
    want = (eps.state / "runs" / d / "0" / "work" / "sum").read_text().split()[0]
    assert hashlib.sha256((target / "big.bin").read_bytes()).hexdigest() == want


def test_many_dispatches_revived_at_once(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    """20 supervised dispatches (VM lane) in flight, the supervisor SIGKILLed: one `eps
    status` revives them, and each ends with its own code.  (200: benchmarks/supervisor_bench.py.)"""
    ids = []
    for i in range(20):
        rc, out, err = eps.run("execute", "--detach", *CPU_VM, "--", f"sleep 25; exit {i % 4}")
        assert rc == 0, err
        ids.append(out.split()[0])
    wait_until(lambda: all(eps.dispatch(d)["state"] == "started" for d in ids), 60, "all to start")
    eps.kill_supervisor()
    _revive(eps)
    for i, d in enumerate(ids):
        row = _ended(eps, d)
        assert (row["state"], row["exit_code"]) == ("ended", i % 4)
    _no_supervisor_soon(eps)


def test_supervise_is_idempotent_and_cheap_when_idle(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    rc, out, err = eps.run("supervise", "--json")
    assert rc == 0, err
    assert json.loads(out)["supervisor"] is None  # nothing to do: nothing started
    assert eps.supervisor_pid() is None
    rc, out, err = eps.run("execute", "--detach", *CPU_VM, "--", "sleep 5")
    d = out.split()[0]
    first = eps.supervisor_pid()
    eps.kill_supervisor()
    rc, out, err = eps.run("supervise", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["dispatches"] == [d] and doc["supervisor"] not in (None, first)
    rc, out, err = eps.run("supervise", "--json")
    assert json.loads(out)["supervisor"] == doc["supervisor"]  # the same one: nothing started twice
    assert _ended(eps, d)["state"] == "ended"


def test_a_retired_keeper_setting_is_a_note_not_a_crash(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    eps.config.write_text(eps.config.read_text().replace("[jobs]\n", "[jobs]\nkeeper = true\n"))
    rc, out, err = eps.run("execute", "--wait", *CPU_VM, "--", "true")
    assert rc == 0, (out, err)
    assert "[jobs] keeper is retired" in err
