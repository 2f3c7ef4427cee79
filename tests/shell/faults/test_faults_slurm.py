"""Fault injection on the fellows QoS ladder against the real local SLURM cluster.

A gpu-8 job pends on every tier while this suite's blocker job holds one GPU (reason
Resources), so every walk parks on high-eur (cap 2 s), cancels and resubmits under
normal-eur and low-eur (1 s each), then fails over to GCP (the local server).  eps is
SIGKILLed at each step: before/after an sbatch (through ``slurm_wrap.sh``), while
parked, between a scancel and the next sbatch, and at the GCP insert of the failover.
A new process resumes the dispatch; squeue, the wrapper's log of every sbatch and the
GCP server then say whether anything was orphaned or submitted twice."""

from __future__ import annotations

import getpass
import signal
import uuid
from typing import Any

import pytest
from faults_support import (
    DetachedEps,
    Eps,
    GcpTrap,
    RunpodTrap,
    SlurmTrap,
    assert_ledger_consistent,
    assert_no_orphans,
    squeue,
    wait_until,
)

pytestmark = pytest.mark.slurm

GPU8 = ("gpu-8", "--duration", "10m")
LADDER = ["high-eur", "normal-eur", "low-eur"]


def _id() -> str:
    return "f" + uuid.uuid4().hex[:10]


def _walk(seps: Eps, d: str) -> Any:
    return seps.start("execute", "--json", "--dispatch-id", d, *GPU8, "--", "sleep", "300")


def _resume_to_gcp(seps: Eps, d: str) -> dict[str, Any]:
    rc, events, err = seps.execute("--resume", d, timeout_s=90)
    assert rc == 0, (events, err)
    assert events[-1]["event"] == "started" and events[-1]["dispatch"] == d, events
    return events[-1]["handle"]


def _check(seps: Eps, strap: SlurmTrap, gtrap: GcpTrap, rtrap: RunpodTrap, d: str, handle: dict[str, Any]) -> None:
    """Each tier was submitted at most once, nothing of the dispatch is left in the queue,
    the dispatch runs on the one GCP machine it names."""
    qos = [q for q, _job in strap.sbatches()]
    assert len(qos) == len(set(qos)), f"a tier was submitted twice: {strap.sbatches()}"
    assert set(qos) <= set(LADDER)
    cancels = [c for c in strap.calls() if c.startswith("scancel")]
    assert cancels and all(c.startswith(f"scancel -u {getpass.getuser()} ") for c in cancels), cancels  # self-scoped
    assert squeue(f"eps-{d}") == []
    assert handle["lane"] == "gcp"
    assert [i["name"] for i in gtrap.live(d)] == [handle["id"]]
    assert len(gtrap.materialized) == 1
    assert_no_orphans(seps, gtrap, rtrap, slurm_prefix="eps-f")
    assert_ledger_consistent(seps, d)
    assert seps.dispatch(d)["state"] == "started"


@pytest.mark.parametrize("when", ["before", "after"])
def test_kill_at_the_first_sbatch_then_resume(seps, strap, gtrap, rtrap, blocker, when) -> None:
    """``before``: the high-eur attempt is recorded and sbatch never ran.  ``after``: the job
    is queued but not recorded; reconcile adopts it and the resumed walk parks that job
    instead of submitting high-eur again."""
    d = _id()
    strap.arm("sbatch", when)
    child = _walk(seps, d)
    assert child.wait(60) == -signal.SIGKILL
    [attempt] = seps.attempts(d)
    name = f"eps-{d}-{getpass.getuser()}"  # the user in the job name (the cluster's rule 8)
    assert (attempt["state"], attempt["qos"], attempt["name"]) == ("intent", "high-eur", name)
    queued = squeue(f"eps-{d}")
    if when == "before":
        assert queued == [] and strap.sbatches() == []
    else:
        [(job_id, state, qos, _)] = queued
        assert (state, qos) == ("PENDING", "high-eur")
        rc, out, err = seps.run("reconcile", "--json")
        assert rc == 0, err
        assert f"{d}:fellows:{job_id}" in out
        row = seps.dispatch(d)
        assert row["state"] == "interrupted"
        assert seps.attempts(d)[0]["handle"] == job_id
    handle = _resume_to_gcp(seps, d)
    if when == "after":
        assert strap.sbatches()[0] == ("high-eur", job_id)
    else:  # P7: a walk that died before its first sbatch still starts under high-eur
        assert strap.sbatches()[0][0] == "high-eur"
    _check(seps, strap, gtrap, rtrap, d, handle)


def test_kill_while_parked_then_resume(seps, strap, gtrap, rtrap, blocker) -> None:
    d = _id()
    child = _walk(seps, d)
    parked = child.wait_event(lambda e: e["event"] == "parked", 60, "parked on high-eur")
    child.kill()
    assert child.wait(10) == -signal.SIGKILL
    assert parked["rung"].startswith("fellows/high-eur")
    [(job_id, state, _, _)] = squeue(f"eps-{d}")
    assert (job_id, state) == (parked["id"], "PENDING")
    handle = _resume_to_gcp(seps, d)
    assert strap.sbatches()[0] == ("high-eur", job_id)
    high = next(a for a in seps.attempts(d) if a["qos"] == "high-eur")
    assert (high["handle"], high["state"]) == (job_id, "advanced")
    _check(seps, strap, gtrap, rtrap, d, handle)


def test_kill_between_scancel_and_the_next_sbatch(seps, strap, gtrap, rtrap, blocker) -> None:
    """Killed right after the park timeout's scancel of the high-eur job: the resumed walk
    goes on with normal-eur; high-eur is never submitted again."""
    d = _id()
    strap.arm("scancel", "after")
    child = _walk(seps, d)
    assert child.wait(60) == -signal.SIGKILL
    assert [q for q, _ in strap.sbatches()] == ["high-eur"]
    wait_until(lambda: not squeue(f"eps-{d}"), 10, "the cancelled job to leave the queue")
    handle = _resume_to_gcp(seps, d)
    assert [q for q, _ in strap.sbatches()] == LADDER
    _check(seps, strap, gtrap, rtrap, d, handle)


def test_kill_during_failover_from_the_ladder_to_gcp(seps, strap, gtrap, rtrap, blocker) -> None:
    """The whole ladder parked out; killed as the GCP insert lands: the resumed dispatch
    owns that machine, and no SLURM job of it is left."""
    d = _id()
    child = _walk(seps, d)
    gtrap.arm("POST", r"/instances$", "after", child)
    assert child.wait(60) == -signal.SIGKILL
    assert [q for q, _ in strap.sbatches()] == LADDER
    assert squeue(f"eps-{d}") == []
    handle = _resume_to_gcp(seps, d)
    assert [q for q, _ in strap.sbatches()] == LADDER  # nothing resubmitted
    _check(seps, strap, gtrap, rtrap, d, handle)


def test_cancel_while_another_process_is_parked(seps, strap, gtrap, rtrap, blocker) -> None:
    d = _id()
    walker = _walk(seps, d)
    walker.wait_event(lambda e: e["event"] == "parked", 60, "parked on high-eur")
    rc, out, err = seps.run("cancel", d, "--json")
    assert rc == 0, (out, err)
    assert walker.wait(30) == 1
    assert walker.events[-1]["event"] == "stopped" and walker.events[-1]["message"] == "cancelled"
    assert squeue(f"eps-{d}") == []
    assert seps.dispatch(d)["state"] == "cancelled"
    assert gtrap.inserts() == []
    assert_ledger_consistent(seps, d)
    assert_no_orphans(seps, gtrap, rtrap, slurm_prefix="eps-f")


# --- a supervised dispatch outlives its caller on the real cluster (issue 18) ------------------


@pytest.fixture
def deps(detached_eps: DetachedEps, slurm_cluster: Any) -> Eps:
    """Detached eps against the real cluster: park caps 20 s on high-eur, 5 s below."""
    return detached_eps(slurm=True, caps=(20, 5))


def test_a_caller_killed_while_parked_leaves_the_ladder_walking(deps, gtrap, rtrap, high_eur_full) -> None:
    """`timeout 8 eps execute gpu-2 --duration 1h -- sleep 300`, killed while parked on
    high-eur: with no further command it is RUNNING on normal-eur within 60 s, its high-eur
    job cancelled, and never two live jobs of its own at once."""
    import subprocess
    import sys
    import time

    from faults_support import ENTRY

    d = _id()
    argv = ["timeout", "8", sys.executable, "-c", ENTRY, "execute", "--dispatch-id", d, "gpu-2", "--duration", "1h",
            "--", "sleep", "300"]  # fmt: skip
    began = time.monotonic()
    proc = subprocess.run(argv, env=deps.env, cwd=deps.tmp, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 124, (proc.stdout, proc.stderr)  # timeout's own code: it had to kill eps
    assert f"eps attach {d}" in proc.stderr  # the caller said how to come back
    seen: list[list[tuple[str, str, str, str]]] = []
    while time.monotonic() - began < 60:
        jobs = squeue(f"eps-{d}")
        seen.append(jobs)
        if [(s, q) for _j, s, q, _n in jobs] == [("RUNNING", "normal-eur")]:
            break
        time.sleep(0.1)
    assert [(s, q) for _j, s, q, _n in seen[-1]] == [("RUNNING", "normal-eur")], seen[-5:]
    assert all(len(jobs) <= 1 for jobs in seen), [j for j in seen if len(j) > 1]
    assert any(q == "high-eur" for jobs in seen for _j, _s, q, _n in jobs) or deps.attempts(d)[0]["qos"] == "high-eur"
    high = next(a for a in deps.attempts(d) if a["qos"] == "high-eur")
    assert (high["state"], high["outcome"]) == ("advanced", "park_timeout")
    wait_until(lambda: deps.dispatch(d)["state"] == "started", 20, "the walk to record it started")
    assert squeue(f"eps-{d}")[0][1] == "RUNNING"  # the job itself runs (sleep 300)
    rc, out, err = deps.run("cancel", d, timeout_s=90)
    assert rc == 0, (out, err)
    assert squeue(f"eps-{d}") == []
