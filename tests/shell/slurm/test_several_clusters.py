"""Issue 23 (item 2): two eps clusters on the real SLURM test cluster (``fellows`` with its
ladder, ``nibi`` with none), in the lane order fellows, nibi, gcp.  With fellows' ladder
parked out the walk goes to nibi before GCP; with the clusters' own start estimates saying
nibi starts sooner, the walk starts there; and the real ``sbatch --test-only`` answer is
read as the estimate."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from slurm_support import USER, Recorder, fill_node, ladder, live_jobs

from eps.core.model import ClusterConfig, Job, LaneKind, Policy, Provisioning, QosGrants, Rung, evolve
from eps.core.sbatch import render_sbatch
from eps.shell.lanes.slurm.cli import SlurmClient, subprocess_runner

pytestmark = pytest.mark.slurm

NIBI = ClusterConfig(name="nibi", gpus_per_node=8, first_park_cap_s=60)
SLEEP = ("sleep", "300")


def _two(policy: Policy) -> Policy:
    return evolve(policy, clusters=(*policy.clusters, NIBI), gpu_lane_order=("fellows", "nibi", "gcp"))


def _rungs(lad: object, dispatch: str) -> list[str]:
    return [a.rung for a in lad.ledger.attempts(dispatch)]  # type: ignore[attr-defined]


def test_with_the_first_ladder_parked_out_the_walk_goes_to_the_second_cluster_before_gcp(
    client: SlurmClient, grants: QosGrants, policy: Policy, recorder: Recorder, workdir: str
) -> None:
    blocker = fill_node(client, policy, workdir, "blockerall")

    def hook(record: dict[str, object]) -> None:
        recorder(record)
        if record["event"] == "submitted" and str(record["rung"]).startswith("nibi/"):
            subprocess.run(["scancel", blocker], check=False, capture_output=True, timeout=30)  # room on nibi now

    state = Path(workdir).parent / "state"
    lad = ladder(state, _two(policy), grants, hook=hook, poll_interval_s=0.2, cancel_timeout_s=20)
    outcome = lad.walk(Job(intent="gpu-1", duration_s=600, command=SLEEP), recorder.dispatch_id)
    assert outcome.handle is not None and (outcome.handle.lane, outcome.handle.state) == ("nibi", "running")
    lanes = [r.split("/")[0] for r in _rungs(lad, recorder.dispatch_id)]
    assert lanes == ["fellows", "fellows", "fellows", "nibi"]  # every fellows tier parked out, then nibi
    assert lad.paid.started == []  # never GCP
    # nibi has no ladder: the job runs under the user's default QoS (low-eur, as on fellows)
    assert live_jobs(f"eps-{recorder.dispatch_id}") == [(outcome.handle.id, "RUNNING", "low-eur")]


def test_a_sooner_start_estimate_on_the_second_cluster_starts_the_walk_there(
    client: SlurmClient, grants: QosGrants, policy: Policy, recorder: Recorder, workdir: str
) -> None:
    """The real cluster runs everything; only the answers of ``sbatch --test-only`` are the
    test's: fellows' (its script names a QoS) says an hour, nibi's (none) says now."""
    asked: list[str] = []

    def runner(argv: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]:
        if list(argv[:2]) == ["bash", "-c"] and "sbatch --test-only" in argv[2]:
            asked.append("fellows" if "--qos=" in (stdin or "") else "nibi")
            start = "2026-12-01T13:00:00" if asked[-1] == "fellows" else "2026-12-01T12:00:00"
            return 0, f"sbatch: Job 9 to start at {start} using 1 processors on nodes n1\n\n2026-12-01T12:00:00\n", ""
        return subprocess_runner(argv, stdin)

    state = Path(workdir).parent / "state"
    lad = ladder(state, _two(policy), grants, hook=recorder, runner=runner, poll_interval_s=0.2, cancel_timeout_s=20)
    outcome = lad.walk(Job(intent="gpu-1", duration_s=600, command=SLEEP), recorder.dispatch_id)
    assert sorted(asked) == ["fellows", "nibi"]  # both asked, at once, before the walk
    assert outcome.handle is not None and outcome.handle.lane == "nibi"
    assert [r.split("/")[0] for r in _rungs(lad, recorder.dispatch_id)] == ["nibi"]  # fellows never submitted to


def test_the_real_sbatch_test_only_answer_is_the_estimate(
    client: SlurmClient, policy: Policy, workdir: str
) -> None:
    cluster = policy.cluster("fellows")
    assert cluster is not None
    rung = Rung("fellows", LaneKind.SLURM, Provisioning.QUEUE, "probe", qos="high-eur", gpus=1)
    job = Job(intent="gpu-1", duration_s=600, command=("true",))
    probe = render_sbatch(job, cluster, rung, dispatch_id="probe1", user=USER)
    assert client.start_estimate(probe) == 0  # an idle node: now
    fill_node(client, policy, workdir, "blockerall")
    later = client.start_estimate(probe)
    assert later is not None and 60 < later <= 660  # when the blocker's 10-minute limit ends
    assert live_jobs("eps-probe1") == []  # nothing was submitted
