"""SlurmClient without a cluster: a recording runner answers as SLURM 22.05 does.

The answers are the texts the real CLIs print (seen on the test cluster); the
real-cluster behaviour is covered by test_slurm_lane.py.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

import pytest
from returns.result import Failure, Success

from eps.core.model import QosGrants, QosTier
from eps.core.outcome import FailureKind
from eps.shell.lanes.slurm.cli import GONE, JobStatus, SlurmClient, gpu_cap, parse_grants


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


@pytest.mark.parametrize(
    ("rc", "err", "kind"),
    [
        (1, "sbatch: error: Batch job submission failed: Invalid qos specification", FailureKind.REFUSED),
        (1, "sbatch: error: Batch job submission failed: Invalid account or account/partition", FailureKind.REFUSED),
        (1, "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy", FailureKind.REFUSED),
        (1, "sbatch: error: Batch job submission failed: Unable to contact slurm controller", FailureKind.UNREACHABLE),
        (255, "ssh: Could not resolve hostname fellows-login", FailureKind.UNREACHABLE),
        (127, "sbatch: command not found", FailureKind.UNREACHABLE),
        (124, "sbatch: no answer within 60 s", FailureKind.TRANSIENT),
        (1, "sbatch: error: Batch job submission failed: Socket timed out on send/recv", FailureKind.TRANSIENT),
    ],
)
def test_submit_failures_are_classified(rc: int, err: str, kind: FailureKind) -> None:
    result = SlurmClient(Recording({"sbatch": [(rc, "", err)]})).submit("x")
    assert isinstance(result, Failure)
    assert result.failure().kind is kind


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


def test_discover_grants_runs_both_listings() -> None:
    runner = Recording({"sacctmgr": [(0, ASSOC, ""), (0, QOS, "")]})
    assert SlurmClient(runner).discover_grants("alice") == Success(parse_grants(ASSOC, QOS))
    assert runner.calls[0][0][-2:] == ["user=alice", "format=Cluster,User,Account,QOS"]
    assert runner.calls[1][0][-1] == "format=Name,Priority,MaxWall,MaxTRESPU"


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
