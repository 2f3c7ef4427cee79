"""The SLURM lane against a real SLURM cluster: grants, submit/poll/cancel, the ladder walk.

Every test runs on the single-node cluster ``cluster.sh`` starts (8 fake GPUs,
the SPEC QoS tiers granted to root) with test-sized park caps (3 s, then 2 s).
The ``recorder`` hook checks with squeue, at every event of the walk, that no
two jobs of one dispatch are live.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from slurm_support import FIRST_CAP_S, NEXT_CAP_S, USER, Recorder, ladder, live_jobs, run, wait_until

from eps.core.model import Job, LaneKind, Policy, Provisioning, QosGrants, QosTier, Rung, evolve
from eps.core.sbatch import render_sbatch
from eps.core.tables import DEFAULT_FELLOWS_GRANTS
from eps.shell.lanes.slurm.cli import QOS_FORMAT, JobStatus, SlurmClient, parse_grants
from eps.shell.run.walker import WalkResult

pytestmark = pytest.mark.slurm

SLEEP = ("sleep", "300")
DAY = 86_400


def _walk(job: Job, recorder: Recorder, client: SlurmClient, grants: QosGrants, policy: Policy, workdir: str):
    """The production walker on the real cluster (its state dir beside the test's output)."""
    state = Path(workdir).parent / "state"
    return ladder(state, policy, grants, hook=recorder, poll_interval_s=0.2, cancel_timeout_s=20).walk(
        job, recorder.dispatch_id
    )


def _landed(outcome: WalkResult, lane: str = "fellows") -> bool:
    return outcome.handle is not None and outcome.handle.lane == lane


def _blocker(client: SlurmClient, policy: Policy, qos: str, gpus: int, workdir: str) -> str:
    """A job outside any dispatch that holds ``gpus`` GPUs under ``qos``; returns once RUNNING."""
    job = Job(intent=f"gpu-{gpus}", duration_s=600, command=SLEEP)
    cluster = policy.cluster("fellows")
    assert cluster is not None
    rung = Rung("fellows", LaneKind.SLURM, Provisioning.QUEUE, "blocker", qos=qos, gpus=gpus)
    blocker = "blocker" + qos.replace("-", "")
    job_id = client.submit(render_sbatch(job, cluster, rung, dispatch_id=blocker, user=USER, output=workdir)).unwrap()
    wait_until(lambda: _state(client, job_id).state == "RUNNING", 15, f"blocker {job_id} to run")
    return job_id


def _state(client: SlurmClient, job_id: str) -> JobStatus:
    return client.poll(job_id).unwrap()


# --- the client -----------------------------------------------------------------------------


def test_grants_discovery_matches_sacctmgr(client: SlurmClient) -> None:
    grants = client.discover_grants(USER).unwrap()
    assoc = run("sacctmgr", "-P", "-n", "show", "assoc", f"user={USER}", "format=Cluster,User,Account,QOS")
    qos = run("sacctmgr", "-P", "-n", "show", "qos", f"format={QOS_FORMAT}")
    assert grants == parse_grants(assoc, qos)
    assert [name for name, _ in grants.clusters] == ["fellows"]
    # exactly the SPEC tiers (cluster.sh sets them from SPEC.md; the tables say the same), but for
    # the grace of a preempted job: 15 s on the test cluster, about 3 min on fellows
    def same(t: QosTier) -> QosTier:
        return evolve(t, grace_s=None)

    assert {same(t) for t in grants.tiers("fellows")} == {same(t) for t in DEFAULT_FELLOWS_GRANTS}
    high = next(t for t in grants.tiers("fellows") if t.name == "high-eur")
    assert high == QosTier("high-eur", priority=100_000, max_wall_s=7 * DAY, max_gpus_per_user=16,
                           preempts=("low-eur", "normal-eur"))  # fmt: skip
    low = next(t for t in grants.tiers("fellows") if t.name == "low-eur")
    assert low.grace_s == 15
    assert f"|{USER}|fellows|dev-eur,high-eur,low-eur,normal-eur" in assoc


def test_submit_poll_cancel_and_reconcile(client: SlurmClient, policy: Policy, workdir: str) -> None:
    job_id = _blocker(client, policy, "high-eur", 1, workdir)
    status = _state(client, job_id)
    assert (status.state, status.qos) == ("RUNNING", "high-eur")
    found = client.list_by_name("eps-blocker").unwrap()
    assert [s.job_id for s in found] == [job_id]
    assert client.cancel(job_id).unwrap() is None
    assert client.wait_gone(job_id, 20)
    assert not _state(client, job_id).live
    assert client.cancel(job_id).unwrap() is None  # cancelling what is gone is fine


def test_submit_under_a_refused_qos_is_a_refusal(client: SlurmClient) -> None:
    failure = client.submit("#!/bin/bash\n#SBATCH --qos=no-such-qos\n#SBATCH -o /dev/null\ntrue\n").failure()
    assert failure.kind.value == "refused"
    assert "Invalid qos" in failure.message


# --- the ladder walk ------------------------------------------------------------------------


def test_a_job_on_high_eur_runs(client, grants, policy, recorder, workdir) -> None:
    job = Job(intent="gpu-1", duration_s=600, command=SLEEP)
    outcome = _walk(job, recorder, client, grants, policy, workdir)
    assert _landed(outcome)
    assert (outcome.handle.state, outcome.handle.qos, outcome.handle.lane) == ("running", "high-eur", "fellows")
    assert live_jobs(f"eps-{recorder.dispatch_id}") == [(outcome.handle.id, "RUNNING", "high-eur")]
    kinds = recorder.kinds()
    # a few "parked" polls while the scheduler gets to it (reason Priority/None), never more
    assert (kinds[0], kinds[-1], set(kinds[1:-1]) <= {"parked"}) == ("submitted", "started", True)


def test_self_capped_high_eur_parks_its_cap_then_runs_under_normal_eur(
    client, grants, policy, recorder, workdir, gpu_cap
) -> None:
    _blocker(client, policy, "high-eur", 2, workdir)
    gpu_cap("high-eur", 2)  # now binds: the blocker holds both GPUs high-eur allows root
    job = Job(intent="gpu-2", duration_s=600, command=SLEEP)
    outcome = _walk(job, recorder, client, grants, policy, workdir)

    assert _landed(outcome)
    assert (outcome.handle.state, outcome.handle.qos) == ("running", "normal-eur")
    assert live_jobs(f"eps-{recorder.dispatch_id}") == [(outcome.handle.id, "RUNNING", "normal-eur")]
    parked = [e for e in recorder.of("parked") if e["qos"] == "high-eur"]
    assert parked
    assert parked[-1]["pending_reason"] == "QOSMaxGRESPerUser"
    advanced = recorder.of("advanced")
    assert len(advanced) == 1
    assert advanced[0]["qos"] == "high-eur"
    assert advanced[0]["elapsed_s"] >= FIRST_CAP_S  # early advance on a self cap is off by default
    after = [e for e in recorder.events[recorder.events.index(advanced[0]) + 1 :] if e["kind"] != "submitting"]
    assert (after[0]["kind"], after[0]["qos"], after[-1]["kind"]) == ("submitted", "normal-eur", "started")
    assert max(recorder.live_counts) == 1


def test_early_advance_on_self_cap_when_switched_on(client, grants, policy, recorder, workdir, gpu_cap) -> None:
    _blocker(client, policy, "high-eur", 2, workdir)
    gpu_cap("high-eur", 2)
    fellows = evolve(policy.clusters[0], first_park_cap_s=120, advance_on_self_cap=True)
    early = evolve(policy, clusters=(fellows,))
    outcome = _walk(Job(intent="gpu-2", duration_s=600, command=SLEEP), recorder, client, grants, early, workdir)
    assert _landed(outcome)
    assert outcome.handle.qos == "normal-eur"
    advanced = recorder.of("advanced")[0]
    assert advanced["pending_reason"] == "QOSMaxGRESPerUser"
    assert advanced["elapsed_s"] < 30  # well before the 120 s cap


def test_a_job_longer_than_max_wall_skips_those_tiers(client, grants, policy, recorder, workdir) -> None:
    job = Job(intent="gpu-1", duration_s=8 * DAY, command=SLEEP)  # high/normal-eur: MaxWall 7 days
    outcome = _walk(job, recorder, client, grants, policy, workdir)
    assert _landed(outcome)
    assert (outcome.handle.state, outcome.handle.qos) == ("running", "low-eur")
    # nothing was ever submitted above it
    assert {e["qos"] for e in recorder.events if "qos" in e} == {"low-eur"}


def test_a_tier_whose_max_wall_is_too_short_advances_at_once(client, grants, policy, recorder, workdir) -> None:
    # Grants that do not know the MaxWall (stale, or a site that hides it): the plan tries
    # high-eur, SLURM pends the job with QOSMaxWallDurationPerJobLimit, and the walk leaves
    # at once instead of waiting out a (here: long) cap.
    blind = QosGrants(tuple((c, tuple(evolve(t, max_wall_s=None) for t in tiers)) for c, tiers in grants.clusters))
    fellows = evolve(policy.clusters[0], first_park_cap_s=120, next_park_cap_s=120)
    slow = evolve(policy, clusters=(fellows,))
    job = Job(intent="gpu-1", duration_s=8 * DAY, command=SLEEP)
    outcome = _walk(job, recorder, client, blind, slow, workdir)
    assert _landed(outcome)
    assert outcome.handle.qos == "low-eur"
    advanced = recorder.of("advanced")
    assert [e["qos"] for e in advanced] == ["high-eur", "normal-eur"]
    assert {e["pending_reason"] for e in advanced} == {"QOSMaxWallDurationPerJobLimit"}
    assert all(e["elapsed_s"] < 30 for e in advanced)
    assert max(recorder.live_counts) == 1


def test_a_pinned_job_returns_its_pending_handle(client, grants, policy, recorder, workdir, gpu_cap) -> None:
    _blocker(client, policy, "high-eur", 2, workdir)
    gpu_cap("high-eur", 2)
    job = Job(intent="gpu-1", duration_s=600, pin="fellows", command=SLEEP)
    outcome = _walk(job, recorder, client, grants, policy, workdir)
    assert _landed(outcome)
    assert (outcome.handle.state, outcome.handle.qos) == ("pending", "high-eur")
    assert live_jobs(f"eps-{recorder.dispatch_id}") == [(outcome.handle.id, "PENDING", "high-eur")]
    assert "advanced" not in recorder.kinds()
    assert recorder.kinds()[-1] == "held"


def test_a_refused_tier_is_recorded_and_skipped(client, grants, policy, recorder, workdir) -> None:
    # A ladder naming a tier the user's grants list but SLURM does not know: sbatch refuses it.
    fellows = evolve(policy.clusters[0], qos_ladder=("gone-eur", "high-eur", "normal-eur", "low-eur"))
    ladder = evolve(policy, clusters=(fellows,))
    with_gone = QosGrants((("fellows", (QosTier("gone-eur", 300_000), *grants.tiers("fellows"))),))
    outcome = _walk(Job(intent="gpu-1", duration_s=600, command=SLEEP), recorder, client, with_gone, ladder, workdir)
    assert _landed(outcome)
    kinds = recorder.kinds()
    assert outcome.handle.qos == "high-eur"
    assert (kinds[:2], kinds[-1], "advanced" in kinds) == (["refused", "submitted"], "started", False)
    assert outcome.walk.snapshot.attempted == ("fellows/gone-eur/-/queue",)


def test_a_ladder_parked_out_hands_over_to_the_next_lane(client, grants, policy, recorder, workdir) -> None:
    _blocker(client, policy, "low-eur", 8, workdir)  # every GPU taken: every tier pends (Resources)
    outcome = _walk(Job(intent="gpu-1", duration_s=600, command=SLEEP), recorder, client, grants, policy, workdir)
    assert _landed(outcome, "gcp")
    assert outcome.handle.zone is not None  # the first GCP rung
    advanced = recorder.of("advanced")
    assert [e["qos"] for e in advanced] == ["high-eur", "normal-eur", "low-eur"]
    assert all(e["elapsed_s"] >= cap for e, cap in zip(advanced, (FIRST_CAP_S, NEXT_CAP_S, NEXT_CAP_S), strict=True))
    tiers = ("high-eur", "normal-eur", "low-eur")
    assert outcome.walk.snapshot.attempted == tuple(f"fellows/{q}/-/queue" for q in tiers)
    assert live_jobs(f"eps-{recorder.dispatch_id}") == []
    assert max(recorder.live_counts) == 1


def test_cluster_script_is_idempotent_and_fast_when_up(slurm_cluster) -> None:
    started = time.monotonic()
    proc = subprocess.run(["bash", str(slurm_cluster), "start"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 15
    proc = subprocess.run(["bash", str(slurm_cluster), "status"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout


def test_a_state_dir_with_a_space_works(client, grants, policy, recorder, tmp_path) -> None:
    """Issue 11: a state dir whose path holds a space made every SLURM dispatch crash mid-walk."""
    state = tmp_path / "my state dir"
    job = Job(intent="gpu-1", duration_s=600, command=("echo", "hello from slurm"))
    outcome = ladder(state, policy, grants, hook=recorder, poll_interval_s=0.2).walk(job, recorder.dispatch_id)
    assert _landed(outcome)
    log = state / "runs" / recorder.dispatch_id / "0" / "job.log"  # the job wrapper's whole log
    wait_until(lambda: log.exists() and "hello from slurm" in log.read_text(), 30, f"{log} written")
    code = state / "runs" / recorder.dispatch_id / "0" / "exit-code"
    wait_until(code.exists, 90, "the job's exit code recorded")  # a loaded cluster may take its time
    assert code.read_text().strip() == "0"
