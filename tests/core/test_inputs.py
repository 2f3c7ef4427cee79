"""A job's local inputs on a team's ledger (eps.core.inputs): a takeover that lacks them is
told apart from a user's bad workdir, and says in one line where they stayed."""

from __future__ import annotations

import pytest

from eps.core.inputs import Elsewhere, elsewhere, may_reuse_stage
from eps.core.model import Job, LaneKind

JOB = Job("gpu-1", workdir="/home/alice/proj", env_names=("TOKEN", "SEED"))

CASES = [
    # workdir here, env values here, started by, this host -> what stayed elsewhere
    (False, set(), "host-a", "host-b", Elsewhere("host-a", "/home/alice/proj", ("TOKEN", "SEED"))),
    (True, set(), "host-a", "host-b", Elsewhere("host-a", None, ("TOKEN", "SEED"))),
    (False, {"TOKEN", "SEED"}, "host-a", "host-b", Elsewhere("host-a", "/home/alice/proj", ())),
    (True, {"TOKEN"}, "host-a", "host-b", Elsewhere("host-a", None, ("SEED",))),
    (True, {"TOKEN", "SEED"}, "host-a", "host-b", None),  # all here: shipped as ever
    (False, set(), "host-a", "host-a", None),  # the starting host: a missing workdir is the user's error
    (False, set(), None, "host-b", None),  # a row from before eps kept who started it
    (False, set(), "host-a", None, None),  # a ledger no other host shares
]


@pytest.mark.parametrize(("workdir_here", "env_here", "started", "me", "want"), CASES)
def test_what_stayed_on_the_starting_host(
    workdir_here: bool, env_here: set[str], started: str | None, me: str | None, want: Elsewhere | None
) -> None:
    assert elsewhere(JOB, workdir_here=workdir_here, env_here=env_here, started_host=started, this_host=me) == want


def test_a_job_without_local_inputs_lacks_nothing_anywhere() -> None:
    job = Job("gpu-1")
    assert elsewhere(job, workdir_here=False, env_here=(), started_host="host-a", this_host="host-b") is None


def test_the_line_names_the_host_the_workdir_and_the_env_names_never_a_value() -> None:
    line = Elsewhere("host-a", "/home/alice/proj", ("TOKEN",)).lost()
    assert line == (
        "its workdir /home/alice/proj and the values of --env TOKEN stayed on host host-a, and this host has no"
        " complete stage of them to launch from: a team needs `storage` (or the job executed again) for a"
        " takeover before launch"
    )
    assert Elsewhere("host-a", None, ("A", "B")).what() == "the values of --env A, B"


@pytest.mark.parametrize(("kind", "reusable"), [(LaneKind.SLURM, True), (LaneKind.GCP, False),
                                               (LaneKind.RUNPOD, False), (LaneKind.VM, False)])  # fmt: skip
def test_only_a_stage_on_a_filesystem_every_host_reaches_is_reused(kind: LaneKind, reusable: bool) -> None:
    assert may_reuse_stage(kind) is reusable
