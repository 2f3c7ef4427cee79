"""Jobs that heal on the real SLURM cluster (issue 20): a restartable job whose run the
cluster ended (its node failed, so SLURM ends it ``NODE_FAIL``; eps submits with
``--no-requeue``, so the cluster never runs it a second time behind eps's back) is
relaunched by its supervisor with no further command, walking the ladder from the top
again, from the outputs synced so far."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults_support import (
    COUNTER,
    Eps,
    GcpTrap,
    RunpodTrap,
    assert_no_orphans,
    scancel_names,
    squeue,
    wait_synced,
    wait_until,
)

pytestmark = pytest.mark.slurm


@pytest.fixture
def heps(tmp_path: Path, gtrap: GcpTrap, rtrap: RunpodTrap, slurm_cluster: Path, sshd: Path) -> Iterator[Eps]:
    e = Eps(tmp_path, gtrap.fake, rtrap.fake, slurm=True, caps=(60, 30), detached=True)
    yield e
    e.close()
    scancel_names("eps-f")


def _node() -> str:
    return subprocess.run(["sinfo", "-h", "-o", "%N"], capture_output=True, text=True, check=True).stdout.strip()


def _scontrol(*words: str) -> None:
    subprocess.run(["scontrol", "update", *words], capture_output=True, text=True, check=True, timeout=30)


def _node_back(node: str) -> None:
    """Resume the node (ReturnToService=2 may have brought it back already) and wait until
    it takes jobs again."""
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True, check=False)

    def up() -> bool:
        out = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True, text=True, check=False)
        return out.stdout.strip() in ("idle", "mixed", "allocated")

    wait_until(up, 60, f"node {node} to take jobs again")


def test_a_slurm_run_whose_node_failed_is_relaunched_from_its_synced_checkpoint(
    heps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    d = "f" + uuid.uuid4().hex[:10]
    child = heps.start("execute", "--json", "--wait", "--dispatch-id", d, "gpu-1", "--duration", "10m",
                       "--restartable", "--sync-every", "1s", "--", COUNTER)  # fmt: skip
    started = child.wait_event(lambda e: e.get("event") == "started", 90, "the job to start on the cluster")
    job_id = started["handle"]["id"]
    synced = heps.state / "outputs" / d / "ckpt"
    wait_synced(synced, 3)
    node = _node()
    try:
        _scontrol(f"nodename={node}", "state=down", "reason=eps-faults-node-failure")
        wait_until(lambda: all(j != job_id for j, *_ in squeue(f"eps-{d}")), 60, "the cluster to end the run")
    finally:
        _node_back(node)
    assert child.wait(240) == 0  # no further command: relaunched, resumed, ended
    out = heps.state / "outputs" / d
    assert (out / "ckpt").read_text() == "16\n"
    starts = (out / "starts").read_text().splitlines()
    assert starts[0] == "start 0 restart 0" and len(starts) == 2, starts
    second = starts[1].split()
    assert int(second[1]) >= 3 and second[3] == "1", starts  # it went on from the synced count
    attempts = heps.attempts(d)
    first, last = attempts[0], attempts[-1]
    assert (first["state"], first["outcome"]) == ("gone", "preempted") and "NODE_FAIL" in first["reason"], attempts
    assert first["qos"] == last["qos"] == "high-eur"  # the ladder from the top again (P7)
    assert last["state"] == "ended" and last["handle"] != job_id
    assert heps.dispatch(d)["state"] == "ended" and heps.dispatch(d)["exit_code"] == 0
    assert squeue(f"eps-{d}") == []
    assert_no_orphans(heps, gtrap, rtrap, slurm_prefix="eps-f")
