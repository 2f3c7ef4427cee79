"""SIGKILL at the new steps of a job's life (issue 12): while the workdir ships to a fresh
VM, while ``eps execute --wait`` waits, and while ``eps wait`` pulls the outputs.  A later
``eps wait`` finishes the job: its exit code, every output byte, and the machine released."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from faults_support import Eps, GcpTrap, RunpodTrap, assert_ledger_consistent, assert_no_orphans, wait_until

CPU_TRIVIAL = ("cpu-small", "--duration", "30s")


def test_kill_execute_wait_while_the_job_runs_then_wait(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    child = eps.start("execute", "--json", *CPU_TRIVIAL, "--wait", "--",
                      "sleep 2; echo made > $EPS_OUTPUT_DIR/o.txt; exit 5")  # fmt: skip
    started = child.wait_event(lambda e: e.get("event") == "started", 60, "the job to start")
    d = started["dispatch"]
    child.kill()
    rc, out, err = eps.run("wait", d, timeout_s=60)
    assert rc == 5, (out, err)
    assert (eps.state / "outputs" / d / "o.txt").read_text() == "made\n"
    assert eps.dispatch(d)["state"] == "ended"


def test_kill_wait_while_it_pulls_then_wait_again(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path) -> None:
    # 300 MB of outputs: the pull takes long enough to be cut in the middle
    line = 'head -c 300000000 /dev/urandom > "$EPS_OUTPUT_DIR/big.bin"; sha256sum "$EPS_OUTPUT_DIR/big.bin" > sum'
    rc, out, err = eps.run("execute", *CPU_TRIVIAL, "--", line)
    assert rc == 0, (out, err)
    d = out.split()[0]
    root = eps.state / "runs" / d / "0"
    wait_until((root / "exit-code").exists, 60, "the job to end")
    waiter = eps.start("wait", d)
    target = eps.state / "outputs" / d
    wait_until(lambda: target.exists() and any(target.rglob("*")), 60, "the pull to begin")
    time.sleep(0.05)
    waiter.kill()
    assert eps.dispatch(d)["state"] == "started"  # not settled by the killed waiter
    rc, out, err = eps.run("wait", d, timeout_s=120)
    assert rc == 0, (out, err)
    want = (root / "work" / "sum").read_text().split()[0]
    got = hashlib.sha256((target / "big.bin").read_bytes()).hexdigest()
    assert got == want
    assert eps.dispatch(d)["state"] == "ended"


# --- a GCP VM (the fake's VM is the real test sshd) -----------------------------------------------

CPU_GCP = ("cpu-small", "--duration", "30m")


def test_kill_while_the_workdir_ships_to_a_vm_then_reconcile_and_resume(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path
) -> None:
    """SIGKILL while the workdir is on its way to the fresh VM: the VM runs with a half-shipped
    dispatch root and no job.  ``eps reconcile`` releases it (nobody will launch it); the
    resume makes a new VM on the same rung, ships everything again and runs the job: its
    output comes back whole and nothing is left billing."""
    wd = tmp_path / "project"
    wd.mkdir()
    (wd / "data.bin").write_bytes(os.urandom(200_000_000))  # the upload takes long enough to be cut
    (wd / "job.sh").write_text('sha256sum data.bin | cut -d" " -f1 > "$EPS_OUTPUT_DIR/sum"\n')
    child = eps.start("execute", "--json", *CPU_GCP, "--workdir", str(wd), "--", "bash job.sh")
    event = child.wait_event(lambda e: e.get("event") == "dispatch", 30, "the dispatch")
    d = event["dispatch"]
    root = tmp_path / "gcp-runs" / d / "0"
    wait_until((root / "run.sh").exists, 60, "the wrapper to reach the VM")
    child.kill()
    [inst] = gtrap.live(d)
    assert not (root / "pid").exists()  # never launched

    rc, out, err = eps.run("reconcile", "--json")
    assert rc == 0, err
    assert gtrap.live(d) == []  # released: a VM with no job on it and nobody to launch one
    assert eps.dispatch(d)["state"] == "interrupted"
    rc, events, err = eps.execute("--resume", d, timeout_s=120)
    assert rc == 0, (events, err)
    [again] = gtrap.live(d)
    assert again["name"] != inst["name"]
    rc, out, err = eps.run("wait", d, timeout_s=120)
    assert rc == 0, (out, err)
    want = hashlib.sha256((wd / "data.bin").read_bytes()).hexdigest()
    assert (eps.state / "outputs" / d / "sum").read_text().strip() == want
    assert gtrap.live(d) == [] and eps.dispatch(d)["state"] == "ended"
    assert_no_orphans(eps, gtrap, rtrap)
    assert_ledger_consistent(eps, d)


def test_kill_execute_wait_on_a_vm_then_wait(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    child = eps.start("execute", "--json", *CPU_GCP, "--wait", "--",
                      "sleep 2; echo made > $EPS_OUTPUT_DIR/o.txt; exit 5")  # fmt: skip
    started = child.wait_event(lambda e: e.get("event") == "started", 60, "the job to start")
    d = started["dispatch"]
    assert started["handle"]["lane"] == "gcp"
    child.kill()
    rc, out, err = eps.run("wait", d, timeout_s=60)
    assert rc == 5, (out, err)
    assert (eps.state / "outputs" / d / "o.txt").read_text() == "made\n"
    assert eps.dispatch(d)["state"] == "ended" and gtrap.live(d) == []
    assert_no_orphans(eps, gtrap, rtrap)
