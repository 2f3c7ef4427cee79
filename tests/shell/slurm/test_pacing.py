"""Paced submissions and the client's last guards for the cluster's hard rules.

The pacer: every sbatch to one cluster from this host takes its turn (one at a time)
and starts at least the gap after the previous one returned, across threads and
processes.  The guards: no ``--export`` and no ``CUDA_VISIBLE_DEVICES`` ever reaches
sbatch, and every scancel is scoped to the user.  No cluster needed: a runner records.
"""

from __future__ import annotations

import itertools
import os
import shlex
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from returns.result import Failure, Success

from eps.core.outcome import FailureKind
from eps.shell.lanes.slurm.cli import SlurmClient
from eps.shell.lanes.slurm.pacing import Pacer

ROOT = Path(__file__).resolve().parents[3]
GAP_S = 0.05
SBATCH_S = 0.01  # how long the stand-in sbatch takes
# float noise between time.time() and the monotonic clock time.sleep() counts on
SLACK_S = 1e-4


class TimedSbatch:
    """A runner standing in for sbatch: records (start, end) of each call, takes
    ``SBATCH_S``, and counts how many calls run at once in this process."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._inside = 0
        self.most_at_once = 0

    def __call__(self, argv: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]:
        with self._lock:
            self._inside += 1
            self.most_at_once = max(self.most_at_once, self._inside)
        start = time.time()
        time.sleep(SBATCH_S)
        end = time.time()
        with self._lock:
            self._inside -= 1
            self.calls.append((start, end))
            n = len(self.calls)
        return 0, f"{n}\n", ""


def assert_paced(calls: list[tuple[float, float]], gap_s: float) -> None:
    """No two calls overlap, and each starts at least ``gap_s`` after the previous ended."""
    ordered = sorted(calls)
    for (_, end), (start, _) in itertools.pairwise(ordered):
        assert start - end >= gap_s - SLACK_S, f"a call started {start - end:.4f} s after the last ended"


def submit_from_threads(client: SlurmClient, threads: int, each: int) -> None:
    barrier = threading.Barrier(threads)
    results: list[object] = []

    def work() -> None:
        barrier.wait()
        results.extend(client.submit("#!/bin/bash\ntrue\n") for _ in range(each))

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert len(results) == threads * each
    assert all(isinstance(r, Success) for r in results)


@pytest.mark.parametrize("gap_s", [GAP_S, 0.0])
def test_threads_take_turns_spaced_by_the_gap(tmp_path: Path, gap_s: float) -> None:
    sbatch = TimedSbatch()
    client = SlurmClient(sbatch, pacer=Pacer(str(tmp_path / "submit"), "fellows", gap_s))
    submit_from_threads(client, threads=8, each=3)
    assert sbatch.most_at_once == 1  # a gap of 0 still serializes
    assert len(sbatch.calls) == 24
    assert_paced(sbatch.calls, gap_s)
    assert (tmp_path / "submit" / "fellows.submit.lock").exists()


# One eps process submitting through its own Pacer on the same directory: it writes
# "start end" of each stand-in sbatch to the shared log (one short O_APPEND write a call).
_CHILD = textwrap.dedent(
    """
    import os, sys, time
    from eps.shell.lanes.slurm.cli import SlurmClient
    from eps.shell.lanes.slurm.pacing import Pacer

    directory, log, gap, sbatch_s, start_at, each = sys.argv[1:7]

    def sbatch(argv, stdin=None):
        start = time.time()
        time.sleep(float(sbatch_s))
        end = time.time()
        with open(log, "a") as fh:
            fh.write(f"{start!r} {end!r}\\n")
        return 0, "7\\n", ""

    client = SlurmClient(sbatch, pacer=Pacer(directory, "fellows", float(gap)))
    time.sleep(max(0.0, float(start_at) - time.time()))  # all start together
    for _ in range(int(each)):
        assert client.submit("#!/bin/bash\\ntrue\\n").unwrap() == "7"
    """
)


def test_processes_and_threads_share_one_pace(tmp_path: Path) -> None:
    directory, log = str(tmp_path / "submit"), tmp_path / "calls.log"
    start_at = time.time() + 2.0  # past every child's interpreter start
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [directory, str(log), str(GAP_S), str(SBATCH_S), repr(start_at), "4"]
    children = [
        subprocess.Popen([sys.executable, "-c", _CHILD, *args], env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    # this process's threads join in at the same moment, through their own Pacer
    sbatch = TimedSbatch()
    client = SlurmClient(sbatch, pacer=Pacer(directory, "fellows", GAP_S))
    time.sleep(max(0.0, start_at - time.time()))
    submit_from_threads(client, threads=6, each=2)
    for child in children:
        _, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
    from_children = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    assert len(from_children) == 16
    assert_paced([(a, b) for a, b in from_children] + sbatch.calls, GAP_S)


class FakeTime:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_pacer_waits_out_the_gap_from_when_the_last_submission_returned(tmp_path: Path) -> None:
    t = FakeTime()
    pacer = Pacer(str(tmp_path / "a" / "b"), "fellows", 2.0, clock=t.clock, sleep=t.sleep)
    with pacer.turn():  # nothing recorded yet: no wait
        t.now += 0.5  # the sbatch took half a second
    assert t.slept == []
    t.now += 0.5
    with pacer.turn():  # 0.5 s after the last returned: wait the other 1.5 s
        pass
    assert t.slept == [1.5]
    t.now += 10
    with pacer.turn():  # long after: no wait
        pass
    assert t.slept == [1.5]


def test_a_failed_submission_still_counts_and_a_clock_set_back_waits_one_gap(tmp_path: Path) -> None:
    t = FakeTime()
    pacer = Pacer(str(tmp_path), "fellows", 2.0, clock=t.clock, sleep=t.sleep)
    with pytest.raises(RuntimeError), pacer.turn():
        raise RuntimeError("sbatch died")  # it may have reached the controller: recorded
    with pacer.turn():
        pass
    assert t.slept == [2.0]
    t.now -= 3600  # the clock went back an hour: at most one gap, never an hour
    with pacer.turn():
        pass
    assert t.slept == [2.0, 2.0]


def test_a_garbled_record_is_no_record_and_pacers_share_it_by_file(tmp_path: Path) -> None:
    t = FakeTime()
    (tmp_path / "fellows.submit.lock").write_text("not a time")
    first = Pacer(str(tmp_path), "fellows", 2.0, clock=t.clock, sleep=t.sleep)
    with first.turn():
        pass
    assert t.slept == []
    # a second Pacer (another process's, say) reads the same file: it waits
    with Pacer(str(tmp_path), "fellows", 2.0, clock=t.clock, sleep=t.sleep).turn():
        pass
    assert t.slept == [2.0]
    # another cluster has its own file and its own pace
    with Pacer(str(tmp_path), "lab", 2.0, clock=t.clock, sleep=t.sleep).turn():
        pass
    assert t.slept == [2.0]


@pytest.mark.parametrize(("cluster", "gap"), [("", 1.0), ("..", 1.0), ("a/b", 1.0), ("ok", -1.0), ("ok", float("nan"))])
def test_a_pacer_refuses_a_bad_name_or_gap(tmp_path: Path, cluster: str, gap: float) -> None:
    with pytest.raises(ValueError):
        Pacer(str(tmp_path), cluster, gap)


# --- the last guards ------------------------------------------------------------------------------


class Recording:
    """A runner that records each argv and answers every command with success."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        return 0, "1\n", ""


_OK = "#!/bin/bash\n#SBATCH --job-name=eps-x-alice\nexport HF_HOME=/workspace-vast/pretrained_ckpts\npython run.py\n"


@pytest.mark.parametrize(
    ("script", "options"),
    [
        (_OK, ["--export=ALL"]),
        (_OK, ["--export=NONE,HF_HOME=/x"]),
        (_OK, ["--qos=high-eur", "--export", "ALL"]),
        (_OK, ["--export-file=/tmp/env"]),
        ("#!/bin/bash\n#SBATCH --export=ALL\ntrue\n", []),
        ("#!/bin/bash\n#SBATCH   --export=NONE\ntrue\n", []),
        ("#!/bin/bash\nexport CUDA_VISIBLE_DEVICES=0,1\ntrue\n", []),
        ("#!/bin/bash\nCUDA_VISIBLE_DEVICES=0 python run.py\n", []),
        ("#!/bin/bash\nif true; then\n  export CUDA_VISIBLE_DEVICES=\nfi\n", []),
    ],
)
def test_submit_refuses_export_and_cuda_visible_devices_without_running_sbatch(
    tmp_path: Path, script: str, options: list[str]
) -> None:
    runner = Recording()
    pacer = Pacer(str(tmp_path), "fellows", 1.0)
    result = SlurmClient(runner, pacer=pacer).submit(script, options)
    assert isinstance(result, Failure)
    assert result.failure().kind is FailureKind.INVALID_REQUEST
    assert "never" in result.failure().message
    assert runner.calls == []
    assert not os.path.exists(pacer.path)  # not even a turn was taken


@pytest.mark.parametrize(
    "script",
    [
        _OK,
        "#!/bin/bash\n# SLURM sets CUDA_VISIBLE_DEVICES; never set it here\necho $CUDA_VISIBLE_DEVICES\n",
        "#!/bin/bash\n#SBATCH --exclusive\nexport MY_CUDA_VISIBLE_DEVICES=1\n",
    ],
)
def test_submit_lets_scripts_that_only_read_or_mention_them_through(script: str) -> None:
    runner = Recording()
    assert SlurmClient(runner).submit(script, ["--exclusive", "-o", "/dev/null"]) == Success("1")
    assert runner.calls == [["sbatch", "--parsable", "--exclusive", "-o", "/dev/null"]]


@pytest.mark.parametrize(
    ("user", "pending_only", "argv"),
    [
        ("alice", False, ["scancel", "-u", "alice", "123"]),
        ("alice", True, ["scancel", "-u", "alice", "--state=PENDING", "123"]),
        (None, False, ["scancel", "123"]),
        (None, True, ["scancel", "--state=PENDING", "123"]),
    ],
)
def test_cancels_are_scoped_to_the_user(user: str | None, pending_only: bool, argv: list[str]) -> None:
    runner = Recording()
    assert SlurmClient(runner, user=user).cancel("123", pending_only=pending_only) == Success(None)
    assert runner.calls == [argv]


def test_a_self_scoped_cancel_through_a_login_names_the_user() -> None:
    runner = Recording()
    SlurmClient(runner, prefix=("ssh", "fellows-login"), user="alice").cancel("9", pending_only=True)
    (call,) = runner.calls
    assert call[:2] == ["ssh", "fellows-login"]
    assert shlex.split(call[2]) == ["scancel", "-u", "alice", "--state=PENDING", "9"]


def test_a_self_scoped_cancel_of_a_job_already_gone_is_fine() -> None:
    def gone(argv: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]:
        return 1, "", "scancel: error: Kill job error on job id 9: Invalid job id specified\n"

    assert SlurmClient(gone, user="alice").cancel("9") == Success(None)
