"""Helpers for the real-SLURM tests (imported by conftest.py and the test modules)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from attrs import frozen
from returns.result import Failure, Result, Success

from eps.core.model import CapacitySnapshot, Job, LaneDown, LaneKind, Policy, Provisioning, QosGrants, Rung
from eps.core.outcome import AttemptRecord, FailureKind, Handle, LaneFailure
from eps.core.sbatch import render_sbatch
from eps.core.settle import LiveItem
from eps.shell.config.settings import ClusterAccess, Settings
from eps.shell.lanes import LaneOptions, Lanes
from eps.shell.lanes.slurm.cli import LIVE_STATES, SlurmClient
from eps.shell.render.progress import Reporter
from eps.shell.run.walker import Walker, WalkResult
from eps.shell.state.ledger import Ledger

CLUSTER_SH = Path(__file__).with_name("cluster.sh")
USER = "root"
#: The per-user GPU cap every tier has in SPEC.md (what a test must put back).
SPEC_GPU_CAPS = {
    "high-eur": "gres/gpu=16",
    "normal-eur": "gres/gpu=16",
    "low-eur": "gres/gpu=-1",
    "dev-eur": "gres/gpu=8",
}
#: Test-sized park caps (seconds): rung 1, then every later rung.
FIRST_CAP_S = 3
NEXT_CAP_S = 2


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the real SLURM cluster is required under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.1) -> None:
    """Poll ``predicate`` until true; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout


def live_jobs(name: str | None = None) -> list[tuple[str, str, str]]:
    """(job id, state, qos) of the user's live jobs, optionally only those named ``name``
    (``eps-<dispatch>``: with the user the fellows row adds, ``eps-<dispatch>-<user>``)."""
    argv = ["squeue", "-h", "-u", USER, "-o", "%i|%T|%q|%j"]
    rows = []
    for line in run(*argv).splitlines():
        job_id, state, qos, job_name = line.split("|", 3)
        if state in LIVE_STATES and (name is None or job_name in (name, f"{name}-{USER}")):
            rows.append((job_id, state, qos))
    return rows


#: The walker's progress events under the names the ladder tests speak of.
_KINDS = {"attempt": "submitting", "submitted": "submitted", "parked": "parked", "advanced": "advanced",
          "started": "started", "held": "held", "withdrawn": "withdrawn", "terminal": "terminal", "stopped": "stopped"}


def fill_node(client: SlurmClient, policy: Policy, workdir: str, name: str) -> str:
    """A job eps did not make (dispatch id ``name``) holding all 8 GPUs of the node under
    high-eur (8 of its 16-GPU cap), which no tier may preempt, unlike low-eur and normal-eur
    (the test cluster preempts those for high-eur, as fellows does); returns its id once RUNNING."""
    cluster = policy.cluster("fellows")
    assert cluster is not None
    rung = Rung("fellows", LaneKind.SLURM, Provisioning.QUEUE, "blocker", qos="high-eur", gpus=8)
    job = Job(intent="gpu-8", duration_s=600, command=("sleep", "300"))
    job_id = client.submit(render_sbatch(job, cluster, rung, dispatch_id=name, user=USER, output=workdir)).unwrap()
    wait_until(lambda: client.poll(job_id).unwrap().state == "RUNNING", 15, f"blocker {job_id} to run")
    return job_id


@frozen
class Recorder:
    """A reporter hook: keeps the walk's events and, at every one, asks squeue how many
    jobs of the dispatch are live (never more than one)."""

    dispatch_id: str
    events: list[dict[str, object]]
    live_counts: list[int]
    check_live: bool = True

    def __call__(self, record: dict[str, object]) -> None:
        kind = _KINDS.get(str(record["event"]))
        if record["event"] == "failed" and record.get("kind") == "refused":
            kind = "refused"
        if kind is None:
            return
        self.events.append({**record, "kind": kind})
        if self.check_live:
            live = live_jobs(f"eps-{self.dispatch_id}")
            self.live_counts.append(len(live))
            assert len(live) <= 1, f"two live jobs of dispatch {self.dispatch_id}: {live}"

    def of(self, kind: str) -> list[dict[str, object]]:
        return [e for e in self.events if e["kind"] == kind]

    def kinds(self) -> list[str]:
        """The event kinds in order, without the ``submitting`` that precedes every sbatch."""
        kinds = [str(e["kind"]) for e in self.events]
        for i, kind in enumerate(kinds):  # every submit (refused or not) is announced first
            if kind in ("submitted", "refused"):
                assert i > 0 and kinds[i - 1] == "submitting", kinds
        return [k for k in kinds if k != "submitting"]


class PaidLane:
    """Stands in for the lane after the ladder (gcp): records the rungs it is asked to start
    and starts each at once, so a test can see the walk hand over without a cloud."""

    kind = LaneKind.GCP

    def __init__(self, name: str = "gcp") -> None:
        self.name = name
        self.started: list[Rung] = []

    def down(self) -> LaneDown | None:
        return None

    def name_for(self, dispatch: str, rung: Rung, seq: int) -> str:
        return f"vm-{dispatch}-{seq}"

    def start(self, job: Job, rung: Rung, dispatch: str, name: str, files: Any) -> Result[Handle, LaneFailure]:
        self.started.append(rung)
        return Success(Handle(self.name, LaneKind.GCP, name, rung.key, zone=rung.zone, machine=rung.machine))

    def poll(self, handle: Handle) -> Result[Handle, LaneFailure]:
        return Success(handle)

    def site(self, handle: Handle | None, dispatch: str, job: Job) -> Result[Any, LaneFailure]:
        return Failure(LaneFailure(FailureKind.UNREACHABLE, "a stand-in has no files"))

    def launch_on(self, handle: Handle, job: Job, dispatch: str, files: Any) -> Result[Handle, LaneFailure]:
        return Success(handle)  # started in one step: nothing is ever made without its job

    def shell_inner(self, handle: Handle) -> list[str] | None:
        return None

    def release(self, handle: Handle, *, pending_only: bool = False) -> Result[Handle, LaneFailure]:
        return Success(handle)

    def withdraw(self, name: str, rung: Rung) -> Result[None, LaneFailure]:
        return Success(None)

    def inventory(self, dispatch: str | None) -> Result[tuple[LiveItem, ...], LaneFailure]:
        return Success(())

    def was_submitted(self, dispatch: str, attempt: AttemptRecord) -> Result[bool, LaneFailure]:
        return Success(False)

    def how_it_ended(self, handle: Handle, dispatch: str) -> str | None:
        return None

    def close(self) -> None:
        return None


@frozen
class Ladder:
    """The production walker on the SLURM lane, over a temp ledger, with the paid lane stubbed."""

    walker: Walker
    ledger: Ledger
    paid: PaidLane

    def walk(self, job: Job, dispatch: str) -> WalkResult:
        return self.walker.execute(job, dispatch)[0]


def ladder(
    state_dir: Path,
    policy: Policy,
    grants: QosGrants,
    *,
    hook: Callable[[dict[str, object]], None] | None = None,
    runner: Callable[..., tuple[int, str, str]] | None = None,
    poll_interval_s: float = 0.2,
    cancel_timeout_s: float = 20.0,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
    wall: Callable[[], float] | None = None,
) -> Ladder:
    # dispatch roots under the test's own directory, not the user's home
    access = tuple(ClusterAccess(c.name, work_root=str(state_dir / "runs")) for c in policy.clusters)
    settings = Settings(policy=policy, state_dir=str(state_dir), access=access)
    options = LaneOptions(
        slurm_runner=runner, slurm_poll_interval_s=poll_interval_s, slurm_cancel_timeout_s=cancel_timeout_s, env={}
    )
    paid = PaidLane()
    lanes = Lanes(settings, options, overrides={"gcp": paid}, clock=clock, sleep=sleep)
    ledger = Ledger(str(state_dir))
    extra = {k: v for k, v in (("clock", clock), ("sleep", sleep), ("wall", wall)) if v is not None}
    walker = Walker(
        settings, ledger, lanes, Reporter(json_lines=True, out=_Sink(), hook=hook), grants=grants,
        snapshot=CapacitySnapshot(), **extra,
    )  # fmt: skip
    return Ladder(walker, ledger, paid)


class _Sink:
    def write(self, _: str) -> None:
        return None

    def flush(self) -> None:
        return None
