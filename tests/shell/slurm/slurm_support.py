"""Helpers for the real-SLURM tests (imported by conftest.py and the test modules)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from attrs import frozen

from eps.shell.ladder import LadderEvent
from eps.shell.slurm import LIVE_STATES

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
    """(job id, state, qos) of the user's live jobs, optionally only those named ``name``."""
    argv = ["squeue", "-h", "-u", USER, "-o", "%i|%T|%q|%j"]
    rows = []
    for line in run(*argv).splitlines():
        job_id, state, qos, job_name = line.split("|", 3)
        if state in LIVE_STATES and (name is None or job_name == name):
            rows.append((job_id, state, qos))
    return rows


@frozen
class Recorder:
    """An ``on_event`` hook: keeps the events and, at every one, asks squeue how many
    jobs of the dispatch are live (never more than one)."""

    dispatch_id: str
    events: list[LadderEvent]
    live_counts: list[int]

    def __call__(self, event: LadderEvent) -> None:
        self.events.append(event)
        live = live_jobs(f"eps-{self.dispatch_id}")
        self.live_counts.append(len(live))
        assert len(live) <= 1, f"two live jobs of dispatch {self.dispatch_id}: {live}"

    def kinds(self) -> list[str]:
        """The event kinds in order, without the ``submitting`` that precedes every sbatch."""
        kinds = [e.kind.value for e in self.events]
        for i, kind in enumerate(kinds):  # every submit (refused or not) is announced first
            if kind in ("submitted", "refused"):
                assert i > 0 and kinds[i - 1] == "submitting", kinds
        return [k for k in kinds if k != "submitting"]
