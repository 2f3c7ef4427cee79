"""The machine's own guard (eps.core.watcher), rendered and run for real by bash on this
machine with a harmless halt line (it writes a file), seconds instead of minutes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from eps.core.jobscript import LAYOUT, JobScriptError
from eps.core.watcher import WatchSpec, render_watch_start, render_watcher


def spec(where: Path, **kw: object) -> WatchSpec:
    base: dict[str, object] = {
        "dispatch_id": "d1abc",
        "user": "root",
        "root": str(where),
        "time_limit_s": 3600,
        "halt": f"echo halted > {where.parent.parent.parent}/halted",
        "launch_grace_s": 3600,
        "linger_s": 3600,
        "kill_grace_s": 0,
        "poll_s": 0.05,
        "deadline_slack_s": 0,
    }
    base.update(kw)
    return WatchSpec(**base)  # type: ignore[arg-type]


def run_watcher(tmp_path: Path, s: WatchSpec) -> subprocess.Popen[str]:
    script = tmp_path / "watch.sh"
    script.write_text(render_watcher(s))
    return subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def halted_within(proc: subprocess.Popen[str], tmp_path: Path, seconds: float) -> str | None:
    try:
        out, _ = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None
    assert (tmp_path / "halted").read_text() == "halted\n"
    return out


def stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "eps-runs" / "d1abc" / "0"
    r.mkdir(parents=True)
    return r


def record(root: Path, **files: object) -> None:
    lay = LAYOUT.under(str(root))
    for name, value in files.items():
        Path(getattr(lay, name)).write_text(f"{value}\n")


def test_a_machine_where_no_job_was_launched_stops_after_the_grace(tmp_path: Path, root: Path) -> None:
    proc = run_watcher(tmp_path, spec(root, launch_grace_s=1))
    out = halted_within(proc, tmp_path, 20)
    assert out is not None and "stopping this machine: no job was launched within 1 s" in out


def test_a_running_job_keeps_its_machine(tmp_path: Path, root: Path) -> None:
    job = subprocess.Popen(["sleep", "60"])
    try:
        record(root, pid=job.pid, started_at=int(time.time()))
        proc = run_watcher(tmp_path, spec(root, launch_grace_s=0, linger_s=0))
        assert halted_within(proc, tmp_path, 2.0) is None  # grace over, but the job runs
        stop(proc)
        assert not (tmp_path / "halted").exists()
    finally:
        job.kill()
        job.wait()


def test_an_ended_job_keeps_its_machine_for_the_linger_then_stops_it(tmp_path: Path, root: Path) -> None:
    now = int(time.time())
    record(root, pid=1, started_at=now - 10, ended_at=now, status="exited", exit_code=3)
    began = time.monotonic()
    proc = run_watcher(tmp_path, spec(root, linger_s=2))
    out = halted_within(proc, tmp_path, 20)
    assert out is not None and "the job ended and the 2 s linger has passed" in out
    assert time.monotonic() - began >= 1.0  # not before the linger (whole seconds: date +%s)


def test_a_wrapper_gone_without_an_exit_code_counts_as_ended(tmp_path: Path, root: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    record(root, pid=dead.pid, started_at=int(time.time()))
    proc = run_watcher(tmp_path, spec(root, linger_s=1))
    out = halted_within(proc, tmp_path, 20)
    assert out is not None and "wrapper is gone without an exit code" in out


def test_a_job_past_its_limit_linger_and_slack_loses_its_machine(tmp_path: Path, root: Path) -> None:
    job = subprocess.Popen(["sleep", "60"])
    try:
        record(root, pid=job.pid, started_at=int(time.time()) - 5)
        proc = run_watcher(tmp_path, spec(root, time_limit_s=2, linger_s=1, deadline_slack_s=1))
        out = halted_within(proc, tmp_path, 20)
        assert out is not None and "outlived its 2 s limit" in out
    finally:
        job.kill()
        job.wait()


def test_a_relative_root_is_under_the_users_home(tmp_path: Path, root: Path) -> None:
    home = Path(os.path.expanduser("~root"))
    text = render_watcher(spec(root, root="eps-runs/d1abc/0", user="root"))
    assert 'home=$(getent passwd root | cut -d: -f6); root="$home/"eps-runs/d1abc/0' in text
    assert home.is_absolute()


def test_starting_the_watcher_twice_runs_one(tmp_path: Path, root: Path) -> None:
    (root / "watch.sh").write_text(render_watcher(spec(root, launch_grace_s=3600)))
    start = render_watch_start(str(root))
    for _ in range(2):
        subprocess.run(["bash", "-c", start], check=True, timeout=10)
    pid = int((root / "watch.pid").read_text())
    try:
        listed = subprocess.run(
            ["pgrep", "-f", f"bash {root}/watch.sh"], capture_output=True, text=True, check=False
        ).stdout
        assert listed.split() == [str(pid)]
    finally:
        os.kill(pid, 9)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"user": "Root; rm -rf /"}, "user"),
        ({"halt": "shutdown\nrm -rf /"}, "halt"),
        ({"halt": "  "}, "halt"),
        ({"root": "a\nb"}, "root"),
        ({"dispatch_id": "x\nshutdown"}, "dispatch id"),
        ({"linger_s": -1}, "linger_s"),
        ({"poll_s": 0}, "poll_s"),
    ],
)
def test_unsafe_values_are_refused_by_name(root: Path, change: dict[str, object], field: str) -> None:
    with pytest.raises(JobScriptError) as err:
        render_watcher(spec(root, **change))
    assert err.value.field == field


def test_a_machine_whose_job_ran_is_parked_with_its_disk_not_removed(tmp_path: Path, root: Path) -> None:
    """Once a job ran, its outputs may wait for a pull: the watcher uses ``park`` (stop, disk
    kept), not ``halt`` (remove)."""
    now = int(time.time())
    record(root, pid=1, started_at=now - 10, ended_at=now - 5, status="exited", exit_code=0)
    park = f"echo parked > {tmp_path}/parked"
    proc = run_watcher(tmp_path, spec(root, linger_s=1, park=park))
    out, _ = proc.communicate(timeout=20)
    assert (tmp_path / "parked").read_text() == "parked\n" and not (tmp_path / "halted").exists()
    assert "its disk kept for eps pull" in out


def test_a_machine_where_no_job_ran_is_removed_even_with_a_park_line(tmp_path: Path, root: Path) -> None:
    park = f"echo parked > {tmp_path}/parked"
    proc = run_watcher(tmp_path, spec(root, launch_grace_s=1, park=park))
    out = halted_within(proc, tmp_path, 20)
    assert out is not None and "removing this machine: no job was launched" in out
    assert not (tmp_path / "parked").exists()
