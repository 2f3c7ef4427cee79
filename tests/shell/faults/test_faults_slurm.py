"""Fault injection on the fellows QoS ladder against the real local SLURM cluster.

A gpu-8 job pends on every tier while this suite's blocker job holds one GPU (reason
Resources), so every walk parks on high-eur (cap 2 s), cancels and resubmits under
normal-eur and low-eur (1 s each), then fails over to GCP (the local server).  eps is
SIGKILLed at each step: before/after an sbatch (through ``slurm_wrap.sh``), while
parked, between a scancel and the next sbatch, and at the GCP insert of the failover.
A new process resumes the dispatch; squeue, the wrapper's log of every sbatch and the
GCP server then say whether anything was orphaned or submitted twice."""

from __future__ import annotations

import signal
import uuid
from typing import Any

import pytest
from faults_support import (
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
    assert (attempt["state"], attempt["qos"], attempt["name"]) == ("intent", "high-eur", f"eps-{d}")
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
