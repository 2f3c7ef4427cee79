"""SIGKILL at the new steps of a job's life (issue 12): while ``eps execute --wait`` waits,
and while ``eps wait`` pulls the outputs.  A later ``eps wait`` finishes the job: its exit
code, every output byte, and the machine released."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from faults_support import Eps, GcpTrap, RunpodTrap, wait_until

CPU_TRIVIAL = ("cpu-small", "--duration", "30s")


def test_kill_execute_wait_while_the_job_runs_then_wait(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap) -> None:
    child = eps.start("execute", "--json", *CPU_TRIVIAL, "--wait", "--",
                      "sleep 2; echo made > $EPS_OUTPUT_DIR/o.txt; exit 5")  # fmt: skip
    started = child.wait_event(lambda e: e.get("event") == "started", 30, "the job to start")
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
