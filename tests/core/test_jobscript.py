"""The job wrapper: syrupy snapshots of renders, the refusals, and the rendered script
run for real by bash in a temp dir (pipes, hostile argv, setup failure, exit codes,
the time limit, env files, cancel, the detached start, the probe)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eps.core.jobscript import (
    LAYOUT,
    JobEnd,
    JobProgress,
    JobScriptError,
    JobSpec,
    RemoteLayout,
    dispatch_root,
    parse_probe,
    render_cancel,
    render_env_file,
    render_follow,
    render_jobscript,
    render_probe,
    render_start,
)
from eps.core.model import LaneKind
from eps.core.tables import JOB_LIFECYCLE, REMOTE_WORK_ROOTS, RootBase, job_time_limit_s, remote_work_root

HOSTILE = (
    "it's",
    'say "hi"',
    "$(touch pwned)",
    "`touch pwned2`",
    "a; touch pwned3",
    "line one\nline two",
    "tab\tand\\backslash",
    "*",
    "",
    "--flag=x y",
    "ünïcödé $HOME",
    "\x7fdel",
)


def stage(tmp_path: Path, spec: JobSpec, env: dict[str, str] | None = None) -> Path:
    root = tmp_path / "root"
    (root / LAYOUT.workdir).mkdir(parents=True)
    (root / LAYOUT.script).write_text(render_jobscript(spec))
    if env is not None:
        path = root / LAYOUT.env
        path.write_text(render_env_file(env))
        path.chmod(0o600)
    return root


def run(root: Path, *, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(root / LAYOUT.script), "run"], capture_output=True, text=True, timeout=timeout, check=False
    )


def records(root: Path) -> JobProgress:
    out = subprocess.run(["bash", "-c", render_probe(str(root))], capture_output=True, text=True, check=True)
    return parse_probe(out.stdout)


def log(root: Path) -> str:
    return (root / LAYOUT.log).read_text()


# --- snapshots ------------------------------------------------------------------------------


def test_render_shell_line(snapshot) -> None:
    spec = JobSpec(("python train.py | tee out.txt",), "d0001", job_time_limit_s(3600))
    assert render_jobscript(spec) == snapshot


def test_render_argv_setup_env_tasks(snapshot) -> None:
    spec = JobSpec(
        ("python", "fit.py", "--name", "run 1", "it's"),
        "d0002",
        90,
        setup="pip install -r requirements.txt",
        env_names=("HF_TOKEN", "WANDB_API_KEY"),
        task_index=2,
        task_count=4,
    )
    assert render_jobscript(spec) == snapshot


def test_render_env_file(snapshot) -> None:
    assert render_env_file({"B": "two words", "A": "it's $(not) run\nsecond line"}) == snapshot


def test_render_helpers(snapshot) -> None:
    root = "eps-runs/d-0003/0"
    assert {
        "start": render_start(root),
        "cancel": render_cancel(root),
        "probe": render_probe(root),
        "follow": render_follow(root),
    } == snapshot


# --- the layout and the tables ----------------------------------------------------------------


def test_layout_under_a_root() -> None:
    lay = LAYOUT.under("/srv/eps/d1/0/")
    assert lay.log == "/srv/eps/d1/0/job.log"
    assert lay.workdir == "/srv/eps/d1/0/work"
    assert isinstance(lay, RemoteLayout)
    assert LAYOUT.under("rel").exit_code == "rel/exit-code"
    assert len(set(LAYOUT)) == len(LAYOUT)


def test_dispatch_root() -> None:
    assert dispatch_root("eps-runs", "ddd1") == "eps-runs/ddd1/0"
    assert dispatch_root("/scratch/u/eps/", "ddd1", 3) == "/scratch/u/eps/ddd1/3"
    assert dispatch_root("eps-runs", "ddd1", 0, 2) == "eps-runs/ddd1/0.r2"  # a relaunch: a root of its own
    for bad in ("../x", "a b", ""):
        with pytest.raises(JobScriptError, match="dispatch id"):
            dispatch_root("eps-runs", bad)


def test_lifecycle_tables() -> None:
    assert job_time_limit_s(3600) == 5400
    assert job_time_limit_s(45) == 68  # rounded up
    assert JOB_LIFECYCLE.linger_s == 600
    assert JOB_LIFECYCLE.workdir_max_bytes == 2 * 1024**3
    assert {r.lane for r in REMOTE_WORK_ROOTS} == set(LaneKind)
    assert remote_work_root(LaneKind.VM).base is RootBase.STATE
    assert remote_work_root(LaneKind.GCP).root == "eps-runs"


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (JobSpec((), "ddd", 10), "command"),
        (JobSpec(("  ",), "ddd", 10), "command"),
        (JobSpec(("a\x00b", "c"), "ddd", 10), "command argument"),
        (JobSpec(("x",), "ddd", 10, setup=" "), "setup"),
        (JobSpec(("x",), "ddd", 10, setup="a\x00"), "setup"),
        (JobSpec(("x",), "bad id", 10), "dispatch id"),
        (JobSpec(("x",), "d;rm", 10), "dispatch id"),
        (JobSpec(("x",), "ddd", 0), "time limit"),
        (JobSpec(("x",), "ddd", 10, task_index=2, task_count=2), "task"),
        (JobSpec(("x",), "ddd", 10, task_count=0), "task"),
        (JobSpec(("x",), "ddd", 10, env_names=("A-B",)), "environment name"),
        (JobSpec(("x",), "ddd", 10, env_names=("A B",)), "environment name"),
        (JobSpec(("x",), "ddd", 10, env_names=("EPS_OUTPUT_DIR",)), "environment name"),
        (JobSpec(("x",), "ddd", 10, env_names=("_eps_rc",)), "environment name"),
        (JobSpec(("x",), "ddd", 10, env_names=("A", "A")), "environment name"),
    ],
)
def test_refused(spec: JobSpec, field: str) -> None:
    with pytest.raises(JobScriptError) as err:
        render_jobscript(spec)
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_env_file_refuses_bad_names_and_hides_values() -> None:
    with pytest.raises(JobScriptError, match="shell identifier"):
        render_env_file({"1X": "v"})
    with pytest.raises(JobScriptError) as err:
        render_env_file({"TOKEN": "sec\x00ret"})
    assert "sec" not in str(err.value)


# --- run for real -----------------------------------------------------------------------------


def test_shell_line_with_a_pipe(tmp_path: Path) -> None:
    spec = JobSpec(("printf 'b\\na\\nc\\n' | sort | tee \"$EPS_OUTPUT_DIR/sorted.txt\" | wc -l",), "pipe", 30)
    root = stage(tmp_path, spec)
    assert run(root).returncode == 0
    assert (root / "out" / "sorted.txt").read_text() == "a\nb\nc\n"
    assert "3\n" in log(root)
    rec = records(root)
    assert (rec.status, rec.exit_code) == (JobEnd.EXITED, 0)
    assert rec.started_at is not None and rec.ended_at is not None and rec.ended_at >= rec.started_at
    assert (root / "exit-code").read_text() == "0\n"


def test_argv_with_hostile_strings_arrives_exactly(tmp_path: Path) -> None:
    code = "import json, os, sys; json.dump(sys.argv[1:], open(os.environ['EPS_OUTPUT_DIR'] + '/argv.json', 'w'))"
    spec = JobSpec((sys.executable, "-c", code, *HOSTILE), "argv", 30)
    root = stage(tmp_path, spec)
    assert run(root).returncode == 0, log(root)
    assert json.loads((root / "out" / "argv.json").read_text()) == list(HOSTILE)
    assert not list(root.rglob("pwned*"))
    assert not list(Path.cwd().glob("pwned*"))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",))), max_size=4))
def test_any_argv_round_trips(tmp_path_factory: pytest.TempPathFactory, args: list[str]) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    code = "import json, os, sys; json.dump(sys.argv[1:], open(os.environ['EPS_OUTPUT_DIR'] + '/a.json', 'w'))"
    root = stage(tmp, JobSpec((sys.executable, "-c", code, *args), "prop", 30))
    assert run(root).returncode == 0, log(root)
    assert json.loads((root / "out" / "a.json").read_text()) == args


def test_the_job_runs_in_the_workdir_with_its_variables(tmp_path: Path) -> None:
    spec = JobSpec(
        ('echo "$PWD|$EPS_DISPATCH_ID|$EPS_TASK_INDEX|$EPS_TASK_COUNT|$EPS_OUTPUT_DIR" > "$EPS_OUTPUT_DIR/v"',),
        "vars1",
        30,
        task_index=1,
        task_count=3,
    )
    root = stage(tmp_path, spec)
    (root / "work" / "data.txt").write_text("x")
    assert run(root).returncode == 0
    real = root.resolve()
    assert (root / "out" / "v").read_text() == f"{real}/work|vars1|1|3|{real}/out\n"


@pytest.mark.parametrize(
    ("given", "env_file", "expect"),
    [
        (None, None, "{runs}/hf-cache"),  # a cache on the machine's disk, beside its dispatches
        ("/shared/pretrained_ckpts", None, "/shared/pretrained_ckpts"),  # a cluster's own (its batch script)
        ("/shared/pretrained_ckpts", "/mine", "/mine"),  # the job's own --env HF_HOME wins
    ],
)
def test_the_model_cache(tmp_path: Path, given: str | None, env_file: str | None, expect: str) -> None:
    spec = JobSpec(('printf %s "$HF_HOME" > "$EPS_OUTPUT_DIR/hf"',), "cache1", 30,
                   env_names=("HF_HOME",) if env_file else ())  # fmt: skip
    runs = tmp_path / "eps-runs"
    root = stage(runs / "cache1", spec, env={"HF_HOME": env_file} if env_file else None)
    env = {k: v for k, v in os.environ.items() if k != "HF_HOME"} | ({"HF_HOME": given} if given else {})
    done = subprocess.run(["bash", str(root / LAYOUT.script), "run"], capture_output=True, text=True, timeout=30,
                          check=False, env=env)  # fmt: skip
    assert done.returncode == 0, log(root)
    assert (root / "out" / "hf").read_text() == expect.format(runs=runs)


def test_exit_code_is_recorded(tmp_path: Path) -> None:
    root = stage(tmp_path, JobSpec(("echo before; exit 3",), "exit3", 30))
    assert run(root).returncode == 3
    rec = records(root)
    assert (rec.status, rec.exit_code) == (JobEnd.EXITED, 3)
    assert "eps: job ended: exited, exit code 3" in log(root)


def test_failing_setup_ends_the_job_with_its_code(tmp_path: Path) -> None:
    spec = JobSpec(("touch ran",), "setup", 30, setup="echo installing; exit 5")
    root = stage(tmp_path, spec)
    assert run(root).returncode == 5
    assert not (root / "work" / "ran").exists()
    rec = records(root)
    assert (rec.status, rec.exit_code) == (JobEnd.SETUP_FAILED, 5)
    text = log(root)
    assert "installing" in text
    assert "setup failed with exit code 5; the command did not run" in text


def test_setup_runs_once_before_the_command(tmp_path: Path) -> None:
    spec = JobSpec(('cat marker >> "$EPS_OUTPUT_DIR/seen"',), "setupok", 30, setup="echo set > marker")
    root = stage(tmp_path, spec)
    assert run(root).returncode == 0
    assert (root / "out" / "seen").read_text() == "set\n"


def test_time_limit_stops_the_job_and_says_so(tmp_path: Path) -> None:
    root = stage(tmp_path, JobSpec(("echo start; sleep 100",), "slow", 1))
    began = time.monotonic()
    proc = run(root)
    assert time.monotonic() - began < 10
    assert proc.returncode == 124
    rec = records(root)
    assert (rec.status, rec.exit_code) == (JobEnd.TIMED_OUT, 124)
    assert "time limit of 1 s reached" in log(root)


def test_a_command_that_exits_124_is_not_a_time_out(tmp_path: Path) -> None:
    root = stage(tmp_path, JobSpec(("exit 124",), "own124", 60))
    assert run(root).returncode == 124
    assert records(root).status is JobEnd.EXITED


def test_env_names_load_values_that_never_appear_in_script_or_log(tmp_path: Path) -> None:
    secret = "s3cr3t-'quoted' $(touch pwned) \"x\"\nline2"  # noqa: S105
    spec = JobSpec(
        ('printf %s "$API_TOKEN" > "$EPS_OUTPUT_DIR/tok"; env > "$EPS_OUTPUT_DIR/env.txt"; echo done',),
        "env",
        30,
        env_names=("API_TOKEN",),
    )
    root = stage(tmp_path, spec, env={"API_TOKEN": secret, "NOT_ASKED": "zzz"})
    assert run(root).returncode == 0, log(root)
    assert (root / "out" / "tok").read_text() == secret
    assert "NOT_ASKED" not in (root / "out" / "env.txt").read_text()  # only the named ones are exported
    assert "s3cr3t" not in (root / "run.sh").read_text()
    assert "s3cr3t" not in log(root)
    assert not list(root.rglob("pwned*"))


def test_a_missing_env_name_stops_before_the_command(tmp_path: Path) -> None:
    spec = JobSpec(("touch ran",), "noenv", 30, env_names=("HF_TOKEN",))
    root = stage(tmp_path, spec, env={})
    assert run(root).returncode == 78
    assert records(root).status is JobEnd.ERROR
    assert "HF_TOKEN is not set in env" in log(root)
    assert not (root / "work" / "ran").exists()


def test_detached_start_survives_and_records(tmp_path: Path) -> None:
    root = stage(tmp_path, JobSpec(("sleep 0.5; echo late",), "detach", 30))
    out = subprocess.run(
        ["bash", str(root / "run.sh"), "start"], capture_output=True, text=True, timeout=15, check=True
    )
    pid = int(out.stdout.strip())
    assert records(root).pid == pid
    assert os.getsid(pid) == pid  # its own session: an ssh hang-up does not reach it
    again = subprocess.run(["bash", str(root / "run.sh"), "start"], capture_output=True, text=True, check=True)
    assert "already started" in again.stderr
    deadline = time.monotonic() + 15
    while not (root / "exit-code").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert "late" in log(root)
    assert log(root).count("started") == 1


def test_detached_wrapper_ignores_hup_int_and_quit_as_under_nohup(tmp_path: Path) -> None:
    """``start`` launches without nohup's process what ``nohup CMD &`` gave the wrapper: SIGHUP
    (nohup), SIGINT and SIGQUIT (a background command of a shell without job control) ignored,
    which the job inherits; TERM still stops it.  And the start line is one line of its date."""
    root = stage(tmp_path, JobSpec(("echo up; sleep 100",), "nohup", 300))
    out = subprocess.run(
        ["bash", str(root / "run.sh"), "start"], capture_output=True, text=True, timeout=15, check=True
    )
    pid = int(out.stdout)
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    ignored = int(next(line for line in status if line.startswith("SigIgn:")).split()[1], 16)
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
        assert ignored & (1 << (sig - 1)), sig.name
    assert not ignored & (1 << (signal.SIGTERM - 1))
    started = next(line for line in log(root).splitlines() if " started " in line)
    assert re.search(r" started \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ on \S", started), started  # as date -u +%FT%TZ
    subprocess.run(["bash", "-c", render_cancel(str(root))], check=True)
    deadline = time.monotonic() + 10
    while not (root / "exit-code").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert records(root).status is JobEnd.CANCELLED


def test_cancel_stops_the_job_and_records_cancelled(tmp_path: Path) -> None:
    root = stage(tmp_path, JobSpec(("echo up; sleep 100",), "cancel", 300))
    subprocess.run(["bash", str(root / "run.sh"), "start"], capture_output=True, check=True, timeout=15)
    deadline = time.monotonic() + 10
    while "up" not in log(root):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    subprocess.run(["bash", "-c", render_cancel(str(root))], check=True)
    while not (root / "exit-code").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    rec = records(root)
    assert rec.status is JobEnd.CANCELLED
    assert rec.exit_code == 128 + signal.SIGTERM


def test_follow_streams_the_log_until_the_job_ends(tmp_path: Path) -> None:
    root = stage(tmp_path, JobSpec(("for i in 1 2 3; do echo tick $i; sleep 0.3; done",), "follow", 30))
    subprocess.run(["bash", str(root / "run.sh"), "start"], capture_output=True, check=True, timeout=15)
    out = subprocess.run(
        ["bash", "-c", render_follow(str(root))], capture_output=True, text=True, timeout=20, check=False
    )
    assert out.returncode == 0
    assert "tick 1\ntick 2\ntick 3\n" in out.stdout
    assert "job ended: exited, exit code 0" in out.stdout


def test_probe_of_a_missing_root(tmp_path: Path) -> None:
    assert records(tmp_path / "nothing") == JobProgress(exists=False)
    assert not parse_probe("missing").ended


def test_parse_probe_tolerates_garbage() -> None:
    rec = parse_probe("pid=12\nstarted_at=x\nstatus=weird\nexit_code=\nalive=1\n")
    assert rec == JobProgress(exists=True, pid=12, alive=True)
    assert not rec.ended
