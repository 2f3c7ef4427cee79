"""SlurmClient without a cluster: a recording runner answers as SLURM 22.05 does.

The answers are the texts the real CLIs print (seen on the test cluster).  The tests
marked ``slurm`` at the end check those texts against the real test cluster (a wrong
partition or account, the preemption facts, a self-scoped scancel); the rest of the
real-cluster behaviour is covered by test_slurm_lane.py.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence

import pytest
from returns.result import Failure, Success
from slurm_support import USER, live_jobs, wait_until

from eps.core.model import QosGrants, QosTier
from eps.core.outcome import FailureKind, LaneFailure
from eps.shell.lanes.slurm.cli import GONE, JobStatus, SlurmClient, classify, gpu_cap, parse_grants, subprocess_runner


class Recording:
    """A runner that records each call and answers from a script keyed by the command name."""

    def __init__(self, answers: dict[str, list[tuple[int, str, str]]]) -> None:
        self.answers = answers
        self.calls: list[tuple[list[str], str | None]] = []

    def __call__(self, argv: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]:
        self.calls.append((list(argv), stdin))
        command = argv[0] if argv[0] != "ssh" else shlex.split(argv[-1])[0]
        return self.answers[command].pop(0)


def test_submit_reads_the_script_on_stdin_and_returns_the_job_id() -> None:
    runner = Recording({"sbatch": [(0, "4242\n", "")]})
    assert SlurmClient(runner).submit("#!/bin/bash\ntrue\n") == Success("4242")
    assert runner.calls == [(["sbatch", "--parsable"], "#!/bin/bash\ntrue\n")]


def test_submit_parsable_with_cluster_suffix() -> None:
    runner = Recording({"sbatch": [(0, "77;fellows\n", "")]})
    assert SlurmClient(runner).submit("x") == Success("77")


# What SLURM 22.05 prints for a wrong partition / account (seen on the test cluster).
BAD_PARTITION = (
    "sbatch: error: invalid partition specified: gpu\n"
    "sbatch: error: Batch job submission failed: Invalid partition name specified"
)
BAD_ACCOUNT = "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified"


@pytest.mark.parametrize(
    ("rc", "err", "kind", "code"),
    [
        (1, "sbatch: error: Batch job submission failed: Invalid qos specification", FailureKind.REFUSED, None),
        (1, BAD_ACCOUNT, FailureKind.MISCONFIGURED, "account"),
        (1, BAD_PARTITION, FailureKind.MISCONFIGURED, "partition"),
        (1, "sbatch: error: Batch job submission failed: Invalid partition name specified",
         FailureKind.MISCONFIGURED, "partition"),
        (1, "sbatch: error: invalid partition specified: gpu", FailureKind.MISCONFIGURED, "partition"),
        (1, "sbatch: error: Batch job submission failed: No partition specified or system default partition",
         FailureKind.MISCONFIGURED, "partition"),
        (1, "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy",
         FailureKind.REFUSED, None),
        (1, "sbatch: error: Batch job submission failed: Unable to contact slurm controller",
         FailureKind.UNREACHABLE, None),
        (255, "ssh: Could not resolve hostname fellows-login", FailureKind.UNREACHABLE, None),
        (127, "sbatch: command not found", FailureKind.UNREACHABLE, None),
        (124, "sbatch: no answer within 60 s", FailureKind.TRANSIENT, None),
        (1, "sbatch: error: Batch job submission failed: Socket timed out on send/recv", FailureKind.TRANSIENT, None),
    ],
)  # fmt: skip
def test_submit_failures_are_classified(rc: int, err: str, kind: FailureKind, code: str | None) -> None:
    result = SlurmClient(Recording({"sbatch": [(rc, "", err)]})).submit("x")
    assert isinstance(result, Failure)
    assert result.failure().kind is kind
    if code is not None:
        assert result.failure().code == code


def test_test_only_submits_nothing_and_classifies_the_answer() -> None:
    runner = Recording(
        {"sbatch": [(0, "", "sbatch: Job 3 to start at 2026-01-01T00:00:00 using 1 processors on nodes vm"),
                    (1, "", "allocation failure: Invalid partition name specified")]}
    )  # fmt: skip
    client = SlurmClient(runner)
    assert client.test_only("#!/bin/bash\ntrue\n", ["--qos=high-eur"]) is None
    assert runner.calls[0] == (["sbatch", "--test-only", "--qos=high-eur"], "#!/bin/bash\ntrue\n")
    failure = client.test_only("#!/bin/bash\ntrue\n")
    assert failure is not None
    assert (failure.kind, failure.code) == (FailureKind.MISCONFIGURED, "partition")
    refused = client.test_only("#!/bin/bash\n#SBATCH --export=ALL\ntrue\n")
    assert refused is not None
    assert refused.kind is FailureKind.INVALID_REQUEST
    assert len(runner.calls) == 2  # the guard ran no sbatch


def test_sbatch_test_only_texts_are_classified_alike() -> None:
    # ``sbatch --test-only`` (what ``eps check`` runs) says "allocation failure: ..." instead
    failure = classify(1, "allocation failure: Invalid account or account/partition combination specified", "sbatch")
    assert (failure.kind, failure.code) == (FailureKind.MISCONFIGURED, "account")
    failure = classify(1, "allocation failure: Invalid qos specification", "sbatch")
    assert failure.kind is FailureKind.REFUSED


def test_a_login_prefix_passes_one_quoted_remote_command() -> None:
    runner = Recording({"squeue": [(0, "12|PENDING|QOSMaxGRESPerUser|high-eur\n", "")]})
    client = SlurmClient(runner, prefix=("ssh", "fellows-login"))
    assert client.poll("12") == Success(JobStatus("12", "PENDING", "QOSMaxGRESPerUser", "high-eur"))
    argv, _ = runner.calls[0]
    assert argv[:2] == ["ssh", "fellows-login"]
    assert len(argv) == 3
    assert shlex.split(argv[2]) == ["squeue", "-h", "-j", "12", "-o", "%i|%T|%r|%q"]


def test_poll_of_a_job_that_left_squeue_asks_sacct() -> None:
    runner = Recording(
        {
            "squeue": [(1, "", "slurm_load_jobs error: Invalid job id specified\n"), (0, "", "")],
            "sacct": [(0, "31|CANCELLED by 0|Unknown\n", ""), (0, "", "")],
        }
    )
    client = SlurmClient(runner)
    assert client.poll("31") == Success(JobStatus("31", "CANCELLED", None, None))
    assert client.poll("32") == Success(JobStatus("32", GONE))
    assert not JobStatus("31", "CANCELLED").live
    assert JobStatus("31", "COMPLETING").live


def test_cancel_of_an_unknown_job_is_fine() -> None:
    runner = Recording({"scancel": [(1, "", "scancel: error: Kill job error on job id 9: Invalid job id specified")]})
    assert SlurmClient(runner).cancel("9") == Success(None)


def test_list_by_name_keeps_the_prefix_only() -> None:
    out = "5|RUNNING|None|high-eur|eps-abc\n6|PENDING|Priority|low-eur|other|with|bars\n"
    client = SlurmClient(Recording({"squeue": [(0, out, "")]}))
    assert client.list_by_name("eps-") == Success((JobStatus("5", "RUNNING", None, "high-eur", "eps-abc"),))


ASSOC = "fellows|alice|fellows|high-eur,normal-eur\nfellows|alice|other|low-eur\nlab|alice|lab|\n"
QOS = (
    "normal|0||\n"
    "high-eur|100000|7-00:00:00|gres/gpu=16\n"
    "normal-eur|50000|7-00:00:00|cpu=64,gres/gpu=16\n"
    "low-eur|10000|14-00:00:00|\n"
    "dev-eur|200000|1-00:00:00|gres/gpu=8\n"
)


def test_grants_parse_sacctmgr_listings() -> None:
    grants = parse_grants(ASSOC, QOS)
    assert grants == QosGrants(
        (
            (
                "fellows",
                (
                    QosTier("high-eur", 100_000, 7 * 86_400, 16),
                    QosTier("normal-eur", 50_000, 7 * 86_400, 16),
                    QosTier("low-eur", 10_000, 14 * 86_400, None),
                ),
            ),
            ("lab", ()),
        )
    )


# The same tiers with their preemption, as ``format=...,Preempt,PreemptMode,GraceTime`` prints them.
QOS_PREEMPT = (
    "normal|0||||cluster|00:00:00\n"
    "high-eur|100000|7-00:00:00|gres/gpu=16|low-eur,normal-eur|cluster|00:00:00\n"
    "normal-eur|50000|7-00:00:00|cpu=64,gres/gpu=16||CANCEL|00:00:15\n"
    "low-eur|10000|14-00:00:00|||REQUEUE|00:03:00\n"
    "dev-eur|200000|1-00:00:00|gres/gpu=8||OFF|1-00:00:00\n"
)


def test_grants_parse_preemption() -> None:
    tiers = {t.name: t for t in parse_grants(ASSOC.replace("low-eur", "low-eur,dev-eur"), QOS_PREEMPT).tiers("fellows")}
    assert tiers["high-eur"] == QosTier("high-eur", 100_000, 7 * 86_400, 16, preempts=("low-eur", "normal-eur"))
    assert tiers["normal-eur"] == QosTier("normal-eur", 50_000, 7 * 86_400, 16, preempt_mode="cancel", grace_s=15)
    assert tiers["low-eur"] == QosTier("low-eur", 10_000, 14 * 86_400, None, preempt_mode="requeue", grace_s=180)
    assert tiers["dev-eur"].preempt_mode == "off"
    assert tiers["dev-eur"].grace_s == 86_400


def test_grants_of_the_old_four_field_listing_have_no_preemption_facts() -> None:
    # a grants text captured before preemption was read: the tiers without it
    old, new = parse_grants(ASSOC, QOS), parse_grants(ASSOC, QOS_PREEMPT)
    assert old.tiers("fellows") == tuple(t._replace(preempts=(), preempt_mode=None, grace_s=None)
                                         for t in new.tiers("fellows"))  # fmt: skip


@pytest.mark.parametrize(
    ("grace", "seconds"), [("00:00:00", None), ("", None), ("00:00:15", 15), ("1-00:00:00", 86_400)]
)
def test_grace_forms(grace: str, seconds: int | None) -> None:
    # 0 is no grace of the tier's own: SLURM prints 00:00:00 for every QoS that sets none
    assert parse_grants("c|u|a|q\n", f"q|1|||||{grace}\n").tiers("c")[0].grace_s == seconds


def test_a_bad_grace_time_is_a_malformed_listing() -> None:
    runner = Recording({"sacctmgr": [(0, ASSOC, ""), (0, "high-eur|1|||||soon\n", "")]})
    result = SlurmClient(runner).discover_grants("alice")
    assert isinstance(result, Failure)
    assert result.failure().kind is FailureKind.INVALID_REQUEST


def test_discover_grants_runs_both_listings() -> None:
    runner = Recording({"sacctmgr": [(0, ASSOC, ""), (0, QOS_PREEMPT, "")]})
    assert SlurmClient(runner).discover_grants("alice") == Success(parse_grants(ASSOC, QOS_PREEMPT))
    assert runner.calls[0][0][-2:] == ["user=alice", "format=Cluster,User,Account,QOS"]
    assert runner.calls[1][0][-1] == "format=Name,Priority,MaxWall,MaxTRESPU,Preempt,PreemptMode,GraceTime"


def test_discover_grants_reports_garbage_as_a_failure() -> None:
    runner = Recording({"sacctmgr": [(0, "fellows|alice\n", ""), (0, QOS, "")]})
    assert isinstance(SlurmClient(runner).discover_grants("alice"), Failure)


@pytest.mark.parametrize(
    ("tres", "cap"),
    [("", None), ("gres/gpu=16", 16), ("cpu=4,gres/gpu=2", 2), ("gres/gpu:h200=8", 8), ("cpu=4", None)],
)
def test_gpu_cap(tres: str, cap: int | None) -> None:
    assert gpu_cap(tres) == cap


@pytest.mark.parametrize(("wall", "seconds"), [("7-00:00:00", 604_800), ("1-00:00:00", 86_400), ("UNLIMITED", None)])
def test_max_wall_forms(wall: str, seconds: int | None) -> None:
    tiers = parse_grants("c|u|a|q\n", f"q|1|{wall}|\n").tiers("c")
    assert tiers == (QosTier("q", 1, seconds, None),)


# --- against the real test cluster (tests/shell/slurm/cluster.sh) ---------------------------------

_TRUE = "#!/bin/bash\ntrue\n"


def _failure_of(client: SlurmClient, *options: str) -> LaneFailure:
    result = client.submit(_TRUE, ["-o", "/dev/null", *options])
    assert isinstance(result, Failure), f"sbatch {' '.join(options)} was accepted: {result}"
    return result.failure()


@pytest.mark.slurm
def test_a_wrong_partition_or_account_is_misconfigured_on_the_real_cluster(client: SlurmClient) -> None:
    bad_partition = _failure_of(client, "--partition=gpu")
    assert (bad_partition.kind, bad_partition.code) == (FailureKind.MISCONFIGURED, "partition")
    assert "Invalid partition name specified" in bad_partition.message
    bad_account = _failure_of(client, "--account=nope")
    assert (bad_account.kind, bad_account.code) == (FailureKind.MISCONFIGURED, "account")
    assert "Invalid account or account/partition combination specified" in bad_account.message
    # an account that exists but is not the user's reads the same
    assert _failure_of(client, "--account=root").code == "account"
    # a QoS the user is not granted stays a capacity refusal (the ladder advances)
    assert _failure_of(client, "--qos=not-granted").kind is FailureKind.REFUSED
    # sbatch --test-only (eps check) says the same
    probe = client.test_only(_TRUE, ["-o", "/dev/null", "--partition=gpu"])
    assert probe is not None
    assert (probe.kind, probe.code) == (FailureKind.MISCONFIGURED, "partition")
    probe = client.test_only(_TRUE, ["-o", "/dev/null", "--account=nope"])
    assert probe is not None
    assert (probe.kind, probe.code) == (FailureKind.MISCONFIGURED, "account")
    assert client.test_only(_TRUE, ["-o", "/dev/null", "--partition=general,overflow", "--qos=low-eur"]) is None
    assert not live_jobs()


@pytest.mark.slurm
def test_discover_grants_reads_the_real_preemption(client: SlurmClient) -> None:
    tiers = {t.name: t for t in client.discover_grants(USER).unwrap().tiers("fellows")}
    assert set(tiers["high-eur"].preempts) == {"low-eur", "normal-eur"}
    grace = int(os.environ.get("EPS_SLURM_GRACE", "15"))  # cluster.sh's grace of the preemptible tiers
    assert tiers["low-eur"].grace_s == grace
    assert tiers["normal-eur"].grace_s == grace
    assert tiers["low-eur"].preempts == ()
    assert tiers["high-eur"].grace_s is None  # 00:00:00: not preemptible, no grace of its own
    assert tiers["low-eur"].preempt_mode is None  # "cluster": slurm.conf's PreemptMode applies


@pytest.mark.slurm
def test_a_self_scoped_cancel_cancels_the_users_own_job(client: SlurmClient) -> None:
    calls: list[list[str]] = []

    def recording(argv: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]:
        calls.append(list(argv))
        return subprocess_runner(argv, stdin)

    job_id = client.submit("#!/bin/bash\nsleep 300\n", ["-o", "/dev/null", "--job-name=eps-selfscope"]).unwrap()
    # scoped to another user, the same id touches nothing: SLURM leaves the job alone
    assert SlurmClient(recording, user="nobody").cancel(job_id) == Success(None)
    assert [j for j, _, _ in live_jobs("eps-selfscope")] == [job_id]
    mine = SlurmClient(recording, user=USER)
    assert mine.cancel(job_id) == Success(None)
    wait_until(lambda: not live_jobs("eps-selfscope"), 15, f"job {job_id} to leave the queue")
    assert mine.cancel(job_id) == Success(None)  # gone now: "Invalid job id" is cancelled too
    assert calls == [
        ["scancel", "-u", "nobody", job_id],
        ["scancel", "-u", USER, job_id],
        ["scancel", "-u", USER, job_id],
    ]
