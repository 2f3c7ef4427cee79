"""The stall watch (:mod:`eps.core.stall`): its rule as a table, the wrapper it renders into
(``bash -n`` for any values; run for real with a window of a few seconds), what eps calls a
job its watch stopped, and the retry event ``stalled``."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_jobscript import records, run, stage

from eps.core.ends import JobEnd, result_word
from eps.core.healing import GiveUp, Relaunch, after_run, policy_of
from eps.core.jobscript import LAYOUT, JobSpec, parse_probe, render_jobscript
from eps.core.lifecycle import exit_status, job_spec, stall_plan, with_stall_watch
from eps.core.model import Job
from eps.core.stall import (
    POLL_MAX_S,
    STALL_EXIT,
    STALL_STOP,
    STALLED,
    StallPlan,
    check_on_stall,
    describe,
    parse_stall_after,
    poll_s,
)
from eps.core.states import DispatchState
from eps.core.tables import HEALING


@pytest.mark.parametrize(
    ("text", "seconds"), [("20s", 20), ("30m", 1800), ("1h30m", 5400), ("0", 0), ("off", 0), (" 45 ", 45), (90, 90)]
)
def test_stall_after_values(text: str | int, seconds: int) -> None:
    assert parse_stall_after(text) == seconds


@pytest.mark.parametrize("text", ["soon", "-5", "", "1h1h", True, 2.5, "of"])
def test_bad_stall_after_is_one_line(text: object) -> None:
    with pytest.raises(ValueError, match="stall_after") as got:
        parse_stall_after(text)
    assert "\n" not in str(got.value)


def test_on_stall_is_notify_or_stop() -> None:
    assert [check_on_stall(v) for v in ("notify", "stop")] == ["notify", "stop"]
    with pytest.raises(ValueError, match="on_stall must be notify or stop"):
        check_on_stall("kill")


@pytest.mark.parametrize(
    ("after", "poll"), [(1, 1), (9, 1), (20, 2), (300, 30), (600, 60), (1800, 60), (86_400, POLL_MAX_S)]
)
def test_the_watch_looks_at_a_tenth_of_the_window_within_1_to_60_s(after: int, poll: int) -> None:
    assert poll_s(after) == poll


@pytest.mark.parametrize(
    ("job", "plan"),
    [
        (Job("cpu-small"), StallPlan(HEALING.stall_after_s, False, False, 60)),  # the table's default: 30 min
        (Job("gpu-1"), StallPlan(1800, False, True, 60)),  # a GPU job reads its GPUs
        (Job("cpu-small", gradient_fit=True), StallPlan(1800, False, True, 60)),  # a fit goes to a GPU
        (Job("debug", stall_after_s=20, on_stall="stop"), StallPlan(20, True, True, 2)),
        (Job("gpu-1", stall_after_s=0, on_stall="stop"), None),  # 0: not watched
    ],
)
def test_the_stall_plan_of_a_job(job: Job, plan: StallPlan | None) -> None:
    assert HEALING.stall_after_s == 1800 and HEALING.on_stall == "notify"
    assert stall_plan(job) == plan
    assert job_spec(evolve_cmd(job), "d0001").stall == plan


def evolve_cmd(job: Job) -> Job:
    return job._replace(command=("true",))


def test_the_config_fills_in_only_what_the_job_leaves_out() -> None:
    def said(job: Job) -> tuple[int | None, str | None]:
        return job.stall_after_s, job.on_stall

    assert said(with_stall_watch(Job("gpu-1"), 600, "stop")) == (600, "stop")
    assert said(with_stall_watch(Job("gpu-1", stall_after_s=0), 600, "stop")) == (0, "stop")
    assert said(with_stall_watch(Job("gpu-1", on_stall="notify"), 60, "stop")) == (60, "notify")


def test_the_rule_in_words() -> None:
    assert describe(0, "stop") == "stall: not watched (--stall-after 0)"
    assert describe(1800, "notify").endswith("for 30m: say so (notify)")
    assert "--retry stalled" in describe(20, "stop")
    p = policy_of(Job("gpu-1", stall_after_s=20, on_stall="stop"))
    assert (p.stall_after_s, p.on_stall) == (20, "stop") and p.describe_stall() == describe(20, "stop")


@settings(max_examples=25, deadline=None)
@given(after=st.integers(1, 30 * 86_400), stop=st.booleans(), gpu=st.booleans(), storage=st.booleans())
def test_the_wrapper_with_any_stall_watch_is_valid_bash(after: int, stop: bool, gpu: bool, storage: bool) -> None:
    from eps.core.storage import StoragePlan, parse_url, place

    store = StoragePlan(place(parse_url("s3://bucket/x"), "d0001"), 60) if storage else None
    spec = JobSpec(("echo hi",), "d0001", 3600, storage=store, stall=StallPlan(after, stop, gpu, poll_s(after)))
    text = render_jobscript(spec)
    assert subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True, check=False).returncode == 0
    assert f"sleep {poll_s(after)} &" in text and f"-ge {after} ]" in text
    assert (f": > {STALL_STOP}" in text) is stop and ("nvidia-smi --query-gpu=utilization.gpu" in text) is gpu
    assert f"_eps_rm exit-code status ended-at .job-ended cancel{' stored' if storage else ''} {STALLED}" in text


def test_without_a_watch_the_wrapper_has_none() -> None:
    text = render_jobscript(JobSpec(("echo hi",), "d0001", 3600))
    assert "stall watch" not in text and "_eps_stw" not in text and "nvidia-smi" not in text


def test_the_probe_reads_the_spell() -> None:
    assert parse_probe("pid=1\nstalled=1796280000\nalive=1\n").stalled == 1796280000
    assert parse_probe("pid=1\nstalled=\nalive=1\n").stalled is None


# --- the watch, run for real (a window of 2 s, looked at every second) -------------------------


def _spec(command: str, *, stop: bool, gpu: bool = False, after: int = 2) -> JobSpec:
    return JobSpec((command,), "d0001", 60, kill_grace_s=2, stall=StallPlan(after, stop, gpu, poll_s(after)))


def test_stop_terms_the_job_and_ends_it_stalled_with_125(tmp_path: Path) -> None:
    line = 'echo hi; trap \'echo term > "$EPS_OUTPUT_DIR/t"; exit 3\' TERM; sleep 60 & wait'
    root = stage(tmp_path, _spec(line, stop=True))
    t0 = time.monotonic()
    proc = run(root)
    assert proc.returncode == STALL_EXIT and time.monotonic() - t0 < 20  # the job would sleep 60 s
    got = records(root)
    assert (got.status, got.exit_code) == (JobEnd.STALLED, 125) and got.stalled is not None
    assert (root / LAYOUT.outputs / "t").read_text() == "term\n"  # its TERM handler ran before the end
    text = (root / LAYOUT.log).read_text()
    assert "eps: stalled: no log line, no output for 2 s" in text and "job ended: stalled, exit code 125" in text


def test_notify_keeps_it_running_and_the_job_speaking_again_ends_the_spell(tmp_path: Path) -> None:
    # silent 5 s (stalled after 2 s), then it talks for 3 s: a look or two of the watch hear it
    root = stage(tmp_path, _spec("echo hi; sleep 5; for i in 1 2 3 4 5 6; do echo back; sleep 0.5; done", stop=False))
    proc = subprocess.Popen(["bash", str(root / LAYOUT.script), "run"])
    try:
        deadline = time.monotonic() + 5
        while not (root / STALLED).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (root / STALLED).exists() and records(root).exit_code is None  # stalled, still running
        assert proc.wait(30) == 0
    finally:
        proc.kill()
    assert not (root / STALLED).exists() and records(root).status is JobEnd.EXITED
    assert "eps: the job is busy again (log)" in (root / LAYOUT.log).read_text()


def test_wrapper_and_rclone_lines_are_not_the_job_speaking_but_outputs_are(tmp_path: Path) -> None:
    noise = ('for i in 1 2 3 4 5 6 7 8; do echo "eps: not me"; echo "2026/01/02 03:04:05 NOTICE: copied"; '
             "sleep 0.5; done")
    root = stage(tmp_path, _spec(noise, stop=True))
    assert run(root).returncode == STALL_EXIT  # stalled though the log grew
    writes = 'for i in 1 2 3 4 5 6 7 8; do echo $i > "$EPS_OUTPUT_DIR/n"; sleep 0.5; done'
    root2 = stage(tmp_path / "b", _spec(writes, stop=True))
    assert run(root2).returncode == 0  # its outputs changed all along


@pytest.mark.parametrize(("reading", "code"), [("0\n0\n", STALL_EXIT), ("3\n0\n", 0), ("[N/A]\n", STALL_EXIT)])
def test_a_gpu_job_is_judged_by_its_gpus(tmp_path: Path, reading: str, code: int) -> None:
    """No GPU is here: a stand-in ``nvidia-smi`` first on PATH prints NVIDIA's documented
    ``--query-gpu=utilization.gpu --format=csv,noheader,nounits`` format (one integer per GPU
    per line) from a file this test writes.  ``[N/A]`` is no reading: the silent log decides."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "util").write_text(reading)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\n[ "$1 $2" = "--query-gpu=utilization.gpu --format=csv,noheader,nounits" ] '
                   f'&& exec cat {tmp_path / "util"}\nexit 9\n')  # fmt: skip
    smi.chmod(0o755)
    root = stage(tmp_path, _spec("echo hi; sleep 4", stop=True, gpu=True))
    import os

    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", str(root / LAYOUT.script), "run"], env=env, timeout=30, check=False)
    assert proc.returncode == code
    if reading.startswith("0"):
        assert "every GPU at 0 % for 2 s" in (root / LAYOUT.log).read_text()


# --- what eps calls it ---------------------------------------------------------------------------


def test_a_stalled_end_is_called_stalled_and_exits_125() -> None:
    assert result_word(DispatchState.ENDED, "stalled", 125) == "stalled"
    assert exit_status(DispatchState.ENDED, "stalled", 125) == 125


@pytest.mark.parametrize(
    ("retry", "relaunched"), [(("stalled",), True), (("error",), False), (None, False), (("interruption",), False)]
)
def test_stalled_is_a_retry_event_of_its_own(retry: tuple[str, ...] | None, relaunched: bool) -> None:
    job = Job("gpu-1", retry=retry, restartable=True)
    got = after_run(job, DispatchState.ENDED, "stalled", 125, elapsed_s=60)
    assert isinstance(got, Relaunch if relaunched else GiveUp), got
    used = after_run(job._replace(restart=3), DispatchState.ENDED, "stalled", 125, elapsed_s=60)
    assert isinstance(used, GiveUp)  # three restarts are the most without --max-restarts


def test_a_job_its_watch_stopped_is_told_as_stopped_not_failed() -> None:
    from eps.shell.notify.notices import fold

    rec = {"event": "ended", "dispatch": "d1", "job_status": "stalled", "exit_code": 125, "pulled": True,
           "outputs": "/o", "lane": "vm", "message": "job ended"}  # fmt: skip
    stalled = {"event": "stalled", "dispatch": "d1", "message": "stalled: nothing from the job", "lane": "vm"}
    notices, _ = fold([(0, 10, stalled), (10, 20, rec)], frozenset({"ended", "failed", "stalled"}))
    assert [(n.event, n.title) for n in notices] == [
        ("stalled", "eps d1: stalled"), ("ended", "eps d1: stopped by its stall watch (exit 125)")
    ]  # fmt: skip
