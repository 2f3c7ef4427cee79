"""The end of a job on every lane that has a machine (the VM lane, a GCP VM and a RunPod pod of
the local fakes, whose machines are the real test sshd), ``eps`` as child processes (issue 19):

- ``eps cancel`` of a job that already ended pulls its outputs and log first, and its own
  exit code stays; cancelling a running job pulls its partial outputs and log before release;
- a pull that fails (a full filesystem under the outputs) keeps the machine, ``execute --wait``
  exits non-zero naming the reason, and a later ``eps pull`` brings everything back and
  releases the machine;
- a job that kills its own wrapper ends as "exit code unknown" (exit 1): ``wait`` and
  ``logs -f`` return;
- the TERM grace: a TERM handler's checkpoint written after the time limit is pulled.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from faults_support import (
    ENTRY,
    Child,
    Eps,
    GcpTrap,
    RunpodTrap,
    assert_ledger_consistent,
    assert_no_orphans,
    tmpfs,
    wait_until,
)

LANES = ("vm", "gcp", "runpod")
JOB = {
    "vm": ("cpu-small", "--duration", "30s"),
    "gcp": ("cpu-small", "--duration", "30m"),
    "runpod": ("cpu-small", "--duration", "30m", "--pin", "runpod"),
}


def _root(eps: Eps, lane: str, d: str) -> Path:
    if lane == "vm":
        return eps.state / "runs" / d / "0"
    return eps.tmp / f"{lane}-runs" / d / "0"


def _live(lane: str, gtrap: GcpTrap, rtrap: RunpodTrap, d: str) -> list[Any]:
    if lane == "gcp":
        return gtrap.live(d)
    if lane == "runpod":
        return rtrap.live(d)
    return []


def _start(eps: Eps, lane: str, line: str, *extra: str) -> str:
    rc, out, err = eps.run("execute", *JOB[lane], *extra, "--", *_bash(line), timeout_s=120)
    assert rc == 0, (out, err)
    d = out.split()[0]
    assert eps.dispatch(d)["handle"]["kind"] == lane, eps.dispatch(d)
    return d


def _bash(line: str) -> tuple[str, str, str]:
    """The job as an argv (``bash -c``): no login shell, whose profile may take seconds here."""
    return ("bash", "-c", line)


def _status(eps: Eps, d: str) -> dict[str, Any]:
    rc, out, err = eps.run("status", "--json", d)
    assert rc == 0, err
    row: dict[str, Any] = json.loads(out)["dispatches"][0]
    return row


@pytest.mark.parametrize("lane", LANES)
def test_cancel_after_the_job_ended_pulls_first(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, lane: str) -> None:
    d = _start(eps, lane, 'echo made > "$EPS_OUTPUT_DIR/o.txt"; echo the-log-line; exit 3')
    wait_until((_root(eps, lane, d) / "exit-code").exists, 60, "the job to end")
    rc, out, err = eps.run("cancel", d, timeout_s=120)
    assert rc == 0, (out, err)
    assert "had already ended" in out, out
    assert (eps.state / "outputs" / d / "o.txt").read_text() == "made\n"
    rc, out, err = eps.run("wait", d)
    assert rc == 3, (out, err)  # its own code, not 130
    rc, log, err = eps.run("logs", d)
    assert rc == 0 and "the-log-line" in log, (log, err)
    assert _live(lane, gtrap, rtrap, d) == []
    assert_no_orphans(eps, gtrap, rtrap)
    assert_ledger_consistent(eps, d)


@pytest.mark.parametrize("lane", LANES)
def test_cancel_of_a_running_job_pulls_its_partial_outputs_and_log(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, lane: str
) -> None:
    d = _start(eps, lane, 'echo partial > "$EPS_OUTPUT_DIR/p.txt"; echo started-here; sleep 300')
    wait_until((_root(eps, lane, d) / "out" / "p.txt").exists, 60, "the job to write")
    rc, out, err = eps.run("cancel", d, timeout_s=120)
    assert rc == 0, (out, err)
    assert (eps.state / "outputs" / d / "p.txt").read_text() == "partial\n"
    rc, log, err = eps.run("logs", d)
    assert rc == 0 and "started-here" in log and "job ended: cancelled" in log, (log, err)
    rc, out, err = eps.run("wait", d)
    assert rc == 130, (out, err)
    assert _status(eps, d)["result"] == "cancelled"
    assert _live(lane, gtrap, rtrap, d) == []
    assert_no_orphans(eps, gtrap, rtrap)


@pytest.mark.parametrize("lane", LANES)
def test_a_pull_that_fails_keeps_the_machine_and_a_later_pull_brings_it_back(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, lane: str
) -> None:
    line = 'head -c 4000000 /dev/urandom > "$EPS_OUTPUT_DIR/big.bin"; sha256sum "$EPS_OUTPUT_DIR/big.bin"'
    with tmpfs(eps.state / "outputs", "1m"):
        rc, out, err = eps.run("execute", *JOB[lane], "--wait", "--", *_bash(line), timeout_s=120)
        assert rc == 1, (out, err)
        assert "outputs not pulled" in err and "eps pull" in err, err
        d = eps.dispatch_ids()[-1]
        row = eps.dispatch(d)
        assert row["state"] == "ended" and row["pulled_at"] is None, row
        if lane != "vm":
            assert len(_live(lane, gtrap, rtrap, d)) == 1  # kept: it holds the outputs
        rc, out, err = eps.run("reconcile")
        assert rc == 0, (out, err)
        if lane != "vm":
            assert len(_live(lane, gtrap, rtrap, d)) == 1  # reconcile leaves it alone
    # the filesystem is gone (unmounted): the outputs can come back now
    rc, out, err = eps.run("pull", d, timeout_s=120)
    assert rc == 0, (out, err)
    want = (_root(eps, lane, d) / "out" / "big.bin").read_bytes()
    assert (eps.state / "outputs" / d / "big.bin").read_bytes() == want
    assert (eps.state / "logs" / f"{d}.log").exists()
    assert _live(lane, gtrap, rtrap, d) == []  # released once they came back
    assert_no_orphans(eps, gtrap, rtrap)
    assert_ledger_consistent(eps, d)


@pytest.mark.parametrize("lane", LANES)
def test_a_job_that_kills_its_wrapper_ends_with_its_code_unknown(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, lane: str
) -> None:
    d = _start(eps, lane, 'echo before; kill -9 "$(cat ../pid)"; sleep 1; echo after > "$EPS_OUTPUT_DIR/a.txt"')
    rc, log, err = eps.run("logs", "-f", d, timeout_s=60)  # returns: the wrapper is gone
    assert rc == 0 and "before" in log, (log, err)
    rc, out, err = eps.run("wait", d, timeout_s=60)
    assert rc == 1, (out, err)
    assert _status(eps, d)["result"] == "ended (exit code unknown)"
    assert _live(lane, gtrap, rtrap, d) == []
    assert_no_orphans(eps, gtrap, rtrap)


@pytest.mark.parametrize("lane", LANES)
def test_the_term_handlers_checkpoint_is_pulled(eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, lane: str) -> None:
    line = "trap 'sleep 5; echo saved > \"$EPS_OUTPUT_DIR/checkpoint.pt\"; exit 1' TERM; sleep 100 & wait"
    rc, out, err = eps.run("execute", *JOB[lane], "--time-limit", "3s", "--wait", "--", *_bash(line), timeout_s=120)
    assert rc == 124, (out, err)
    d = eps.dispatch_ids()[-1]
    assert (eps.state / "outputs" / d / "checkpoint.pt").read_text() == "saved\n"
    assert _live(lane, gtrap, rtrap, d) == []


@pytest.mark.parametrize("lane", ["gcp", "runpod"])
def test_an_unreadable_workdir_file_is_bad_input_before_a_machine_is_made(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path, lane: str
) -> None:
    """Issue 19 (10): found when the files are listed, not after the machine was made.  As
    root the child drops the capabilities that let root read any file (setpriv), so the
    mode-000 file is unreadable to it as to any other user."""
    wd = tmp_path / "project"
    wd.mkdir()
    (wd / "ok.txt").write_text("fine")
    secret = wd / "server.key"
    secret.write_text("x")
    secret.chmod(0)
    prefix: list[str] = []
    if os.geteuid() == 0:
        caps = "-dac_override,-dac_read_search"
        prefix = ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}"]
    pin = ("--pin", "runpod") if lane == "runpod" else ("--pin", "gcp")
    child = Child([*prefix, sys.executable, "-c", ENTRY, "execute", "cpu-small", "--duration", "30m", *pin,
                   "--workdir", str(wd), "--", "true"], eps.env, eps.tmp)  # fmt: skip
    eps.children.append(child)
    rc = child.wait(60)
    assert rc == 2, (child.lines, child.err)
    lines = child.err.strip().splitlines()
    assert len(lines) == 1 and "server.key cannot be read" in lines[0], child.err
    assert gtrap.inserts() == [] and rtrap.created == []
    assert not (eps.state / "ledger.sqlite3").exists() or eps.dispatch_ids() == []
