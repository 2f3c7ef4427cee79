"""Jobs that heal (issue 20): a restartable job whose spot VM is taken back is relaunched by
its supervisor with no further command, on another rung, from the outputs synced so far.

The fake's "machine" is this test sshd, so the VM's death is played in full: the provider
takes it back (the fake deletes it, as ``instanceTerminationAction: DELETE`` does) and what
ran on it dies with its disk (its processes killed, its dispatch root removed)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from faults_support import Eps, GcpTrap, RunpodTrap, assert_no_orphans, wait_until

#: A job that counts to 16 in half seconds, keeping its count in $EPS_OUTPUT_DIR/ckpt and
#: starting from it, and notes each start with EPS_RESTART_COUNT.
COUNTER = (
    'o="$EPS_OUTPUT_DIR"; n=$(cat "$o/ckpt" 2>/dev/null || echo 0); '
    'echo "start $n restart $EPS_RESTART_COUNT" >> "$o/starts"; '
    'while [ "$n" -lt 16 ]; do n=$((n+1)); echo $n > "$o/ckpt.tmp"; mv "$o/ckpt.tmp" "$o/ckpt"; sleep 0.5; done'
)


@pytest.fixture
def eps(tmp_path: Path, gtrap: GcpTrap, rtrap: RunpodTrap, sshd: Path) -> Eps:
    e = Eps(tmp_path, gtrap.fake, rtrap.fake, detached=True)
    yield e  # type: ignore[misc]
    e.close()


def _dies_with_its_disk(root: Path) -> None:
    """What ran on a VM that was taken back: gone, its files with it."""
    found = subprocess.run(["pgrep", "-f", str(root)], capture_output=True, text=True, check=False).stdout.split()
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(pid), signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    shutil.rmtree(root, ignore_errors=True)


def test_a_preempted_restartable_job_resumes_elsewhere_from_its_synced_checkpoint(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path
) -> None:
    d = "f" + uuid.uuid4().hex[:10]
    child = eps.start("execute", "--json", "--wait", "--dispatch-id", d, "cpu-small", "--duration", "30m",
                      "--restartable", "--pin", "gcp", "--sync-every", "1s", "--", COUNTER)  # fmt: skip
    child.wait_event(lambda e: e.get("event") == "started", 60, "the job to start")
    synced = eps.state / "outputs" / d / "ckpt"

    def counted() -> bool:
        try:
            return int(synced.read_text()) >= 3
        except (OSError, ValueError):
            return False

    wait_until(counted, 60, "a synced checkpoint")
    [(zone, name)] = [k for k in gtrap.fake.instances if d in k[1]]
    assert gtrap.fake.instances[(zone, name)]["scheduling"]["provisioningModel"] == "SPOT"
    gtrap.fake.preempt(zone, name)  # DELETE: the VM and its disk are gone
    _dies_with_its_disk(tmp_path / "gcp-runs" / d)
    assert child.wait(180) == 0  # no further command: relaunched, resumed, ended
    out = eps.state / "outputs" / d
    assert (out / "ckpt").read_text() == "16\n"
    starts = (out / "starts").read_text().splitlines()
    assert starts[0] == "start 0 restart 0" and len(starts) == 2, starts
    second = starts[1].split()
    assert int(second[1]) >= 3 and second[3] == "1", starts  # it went on from the synced count
    row = eps.dispatch(d)
    assert row["state"] == "ended" and row["exit_code"] == 0
    rungs = [(a["rung"], a["state"], a["outcome"]) for a in eps.attempts(d)]
    assert len(rungs) == 2 and rungs[0][2] == "preempted", rungs
    assert rungs[1][0] != rungs[0][0]  # planned again from what the preemption taught (P11: another zone)
    assert gtrap.live(d) == []
    assert_no_orphans(eps, gtrap, rtrap)


def test_a_preempted_job_that_is_not_restartable_is_not_relaunched(
    eps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap, tmp_path: Path
) -> None:
    d = "f" + uuid.uuid4().hex[:10]
    child = eps.start("execute", "--json", "--wait", "--dispatch-id", d, "cpu-small", "--duration", "10m",
                      "--pin", "gcp", "--", "sleep 300")  # fmt: skip
    child.wait_event(lambda e: e.get("event") == "started", 60, "the job to start")
    [(zone, name)] = [k for k in gtrap.fake.instances if d in k[1]]
    gtrap.fake.preempt(zone, name)
    _dies_with_its_disk(tmp_path / "gcp-runs" / d)
    rc = child.wait(120)
    assert rc != 0
    assert eps.dispatch(d)["state"] == "preempted"
    assert len(eps.attempts(d)) == 1
