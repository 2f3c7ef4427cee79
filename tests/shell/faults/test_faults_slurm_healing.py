"""Jobs that heal on the real SLURM cluster (issue 20): a restartable job whose run the
cluster ended (its node failed, so SLURM ends it ``NODE_FAIL``; eps submits with
``--no-requeue``, so the cluster never runs it a second time behind eps's back) is
relaunched by its supervisor with no further command, walking the ladder from the top
again, from the outputs synced so far."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from faults_support import (
    COUNTER,
    DetachedEps,
    Eps,
    GcpTrap,
    RunpodTrap,
    assert_counter_resumed,
    assert_no_orphans,
    scancel_names,
    squeue,
    wait_synced,
    wait_until,
)

pytestmark = pytest.mark.slurm


@pytest.fixture
def heps(detached_eps: DetachedEps, slurm_cluster: Path) -> Eps:
    return detached_eps(slurm=True, caps=(60, 30))


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
    assert_counter_resumed((out / "ckpt").read_text(), (out / "starts").read_text())
    attempts = heps.attempts(d)
    first, last = attempts[0], attempts[-1]
    assert (first["state"], first["outcome"]) == ("gone", "preempted") and "NODE_FAIL" in first["reason"], attempts
    assert first["qos"] == last["qos"] == "high-eur"  # the ladder from the top again (P7)
    assert last["state"] == "ended" and last["handle"] != job_id
    assert heps.dispatch(d)["state"] == "ended" and heps.dispatch(d)["exit_code"] == 0
    assert squeue(f"eps-{d}") == []
    assert_no_orphans(heps, gtrap, rtrap, slurm_prefix="eps-f")


#: A job that counts until it is preempted (its first run) or four more (a relaunch), saving
#: its count as it goes; on SIGTERM it writes what it had reached into its outputs (within the
#: grace a preempted job gets) and leaves.
PREEMPTIBLE = (
    'o="$EPS_OUTPUT_DIR"; n=$(cat "$o/ckpt" 2>/dev/null || echo 0); '
    'echo "start $n restart $EPS_RESTART_COUNT" >> "$o/starts"; '
    "trap 'echo \"term $n\" >> \"$o/terms\"; exit 143' TERM; "
    'if [ "$EPS_RESTART_COUNT" -gt 0 ]; then stop=$((n + 4)); else stop=100000; fi; '
    'while [ "$n" -lt "$stop" ]; do n=$((n+1)); echo $n > "$o/ckpt.tmp"; mv "$o/ckpt.tmp" "$o/ckpt"; '
    "sleep 0.5 & wait $!; done"
)


def _runs(job_id: str) -> list[str]:
    """The state of each run of ``job_id`` as the cluster's accounting has it (``sacct -D``
    lists every run of a job the cluster requeued; one line: it ran once)."""
    out = subprocess.run(["sacct", "-n", "-P", "-X", "-D", "-j", job_id, "-o", "State"],
                         capture_output=True, text=True, check=True, timeout=30).stdout  # fmt: skip
    return [line.split(" ")[0] for line in out.split()]


def test_a_low_eur_run_preempted_by_a_real_high_eur_job_is_relaunched_from_its_outputs(
    heps: Eps, gtrap: GcpTrap, rtrap: RunpodTrap
) -> None:
    """A restartable job on low-eur, preempted by a real high-eur job that wants the whole node
    (the test cluster preempts as fellows does: PreemptType=preempt/qos, high-eur preempting
    normal-eur and low-eur with a grace): it gets SIGTERM before its end, what it wrote in the
    grace comes back, the dispatch is interrupted (not failed), its supervisor relaunches it
    under its policy, the relaunch resumes from the synced outputs and ends 0.  There are never
    two live jobs of the dispatch, and SLURM never requeued it (``--no-requeue``)."""
    heps.config.write_text(heps.config.read_text() + 'qos_ladder = ["low-eur"]\n')  # the last [[clusters]]
    d = "f" + uuid.uuid4().hex[:10]
    child = heps.start("execute", "--json", "--wait", "--dispatch-id", d, "gpu-1", "--duration", "10m",
                       "--restartable", "--sync-every", "1s", "--", PREEMPTIBLE)  # fmt: skip
    started = child.wait_event(lambda e: e.get("event") == "started", 90, "the job to start on low-eur")
    first_id = started["handle"]["id"]
    assert started["handle"]["qos"] == "low-eur"
    wait_synced(heps.state / "outputs" / d / "ckpt", 3)

    live_counts: list[int] = []
    watching = True

    def watch() -> None:  # never two live jobs of the dispatch, sampled all along
        while watching:
            live_counts.append(len(squeue(f"eps-{d}")))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    name = f"faults-high-{uuid.uuid4().hex[:6]}"  # no eps name: reconcile leaves it alone
    high = subprocess.run(
        ["sbatch", "--parsable", "-J", name, "--qos=high-eur", "--partition=general", "--gres=gpu:8",
         "--time=5", "-o", "/dev/null", "--wrap", "sleep 4"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.strip().split(";")[0]  # fmt: skip
    try:
        assert child.wait(300) == 0  # no further command: preempted, relaunched, resumed, ended
    finally:
        watching = False
        watcher.join(5)
        scancel_names(name)
    assert max(live_counts) <= 1, live_counts
    assert _runs(high) == ["COMPLETED"]
    assert _runs(first_id) == ["PREEMPTED"]  # one run: the cluster's own requeue never ran it again
    out = heps.state / "outputs" / d
    terms = (out / "terms").read_text().split()
    assert terms[0] == "term" and int(terms[1]) >= 3, terms  # written in the grace, and it came back
    starts = (out / "starts").read_text().splitlines()
    assert starts[0] == "start 0 restart 0" and len(starts) == 2, starts
    second = starts[1].split()
    assert int(second[1]) >= int(terms[1]) and second[3] == "1", starts  # resumed from what was synced
    assert int((out / "ckpt").read_text()) == int(second[1]) + 4
    attempts = heps.attempts(d)
    first, last = attempts[0], attempts[-1]
    assert (first["state"], first["outcome"]) == ("gone", "preempted") and "PREEMPTED" in first["reason"], attempts
    assert last["state"] == "ended" and last["handle"] != first_id
    assert heps.dispatch(d)["state"] == "ended" and heps.dispatch(d)["exit_code"] == 0
    assert squeue(f"eps-{d}") == []
    assert_no_orphans(heps, gtrap, rtrap, slurm_prefix="eps-f")
