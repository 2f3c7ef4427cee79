"""A job's whole life through the real sshd: stage (wrapper, env file, workdir), start
detached, follow the log, wait for exit-code, pull outputs and log; the time limit,
cancel, the VM lane (local) and a SLURM-style login prefix; and the env value never
in an argv, an output or a log."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from remote_support import Recorder, ssh_support
from returns.result import Success

from eps.core.ends import JobEnd
from eps.core.jobscript import LAYOUT, JobSpec, dispatch_root
from eps.shell.remote.errors import RemoteErrorKind
from eps.shell.remote.ignore import select_workdir
from eps.shell.remote.job import (
    cancel_job,
    follow_log,
    job_shell_argv,
    probe_job,
    pull_log,
    pull_outputs,
    stage_again,
    stage_job,
    start_job,
    wait_job,
)
from eps.shell.remote.ssh import Remote, ssh_options

SECRET = "hf_S3CR3T-value 'quoted' $(whoami)"  # noqa: S105

TRAIN = """\
import os, sys
out = os.environ["EPS_OUTPUT_DIR"]
token = os.environ["HF_TOKEN"]
with open(os.path.join(out, "token-ok"), "w") as fh:
    fh.write(str(token == sys.argv[1] if len(sys.argv) > 1 else len(token)))
with open(os.path.join(out, "weights.bin"), "wb") as fh:
    fh.write(bytes(range(256)) * 4096)
print("epoch 1 loss 0.5", flush=True)
print("epoch 2 loss 0.25", flush=True)
print("config", open("conf/cfg.yaml").read().strip())
sys.exit(int(os.environ.get("EXIT", "0")))
"""


def make_workdir(root: Path) -> Path:
    files = {
        "train.py": TRAIN,
        "conf/cfg.yaml": "lr: 3e-4",
        ".gitignore": "*.ckpt\n",
        ".epsignore": "scratch/\n",
        "old.ckpt": "x" * 1000,
        "scratch/tmp.txt": "t",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def run_whole_job(remote: Remote, tmp_path: Path, recorder: Recorder, root: str) -> None:
    workdir = select_workdir(str(make_workdir(tmp_path / "workdir"))).unwrap()
    spec = JobSpec(
        ("python3 train.py | tee -a train.out",),
        "dlife",
        120,
        setup="echo setting up; test -f train.py",
        env_names=("HF_TOKEN",),
    )
    staged = stage_job(remote, root, spec, workdir=workdir, env={"HF_TOKEN": SECRET}, runner=recorder)
    assert isinstance(staged, Success), staged

    pid = start_job(remote, root, runner=recorder).unwrap()
    assert pid > 1
    assert start_job(remote, root, runner=recorder).unwrap() == pid  # a second start starts nothing new

    chunks: list[bytes] = []
    assert follow_log(remote, root, chunks.append, streamer=recorder.stream).unwrap() == 0
    followed = b"".join(chunks).decode()
    assert "setting up" in followed
    assert "epoch 1 loss 0.5\nepoch 2 loss 0.25\n" in followed
    assert "job ended: exited, exit code 0" in followed

    final = wait_job(remote, root, poll_s=0.2, within_s=60, runner=recorder).unwrap()
    assert (final.status, final.exit_code) == (JobEnd.EXITED, 0)
    assert final.started_at is not None and final.ended_at is not None

    pulled = tmp_path / "pulled"
    assert isinstance(pull_outputs(remote, root, str(pulled / "out"), runner=recorder), Success)
    assert (pulled / "out" / "weights.bin").read_bytes() == bytes(range(256)) * 4096
    assert (pulled / "out" / "token-ok").read_text() == str(len(SECRET))
    assert isinstance(pull_log(remote, root, str(pulled / "job.log"), runner=recorder), Success)
    log = (pulled / "job.log").read_text()
    assert log == followed
    assert "config lr: 3e-4" in log

    # the secret went only through stdin into the 0600 env file
    assert SECRET not in recorder.argv_text()
    assert SECRET not in recorder.output_text()
    assert SECRET not in log and SECRET not in followed
    env_puts = [c for c in recorder.calls if c.stdin and c.stdin.startswith(b"HF_TOKEN=")]
    assert len(env_puts) == (0 if remote.is_local else 1)


def test_whole_job_on_a_vm_address(vm_target: Remote, tmp_path: Path, recorder: Recorder) -> None:
    offset = ssh_support.sshd_log_size()
    root = dispatch_root(str(tmp_path / "eps-runs"), "dlife")
    run_whole_job(vm_target, tmp_path, recorder, root)
    lay = LAYOUT.under(root)
    assert stat.S_IMODE(os.stat(lay.env).st_mode) == 0o600
    assert not Path(lay.workdir, "old.ckpt").exists() and not Path(lay.workdir, "scratch").exists()
    assert Path(lay.workdir, "train.out").exists()  # the job ran in work/
    assert SECRET not in Path(lay.script).read_text()
    assert SECRET not in Path(lay.log).read_text()
    assert SECRET not in ssh_support.sshd_log_since(offset)
    assert any(a[0] == "ssh" and a[-2] == "root@127.0.0.5" for a in recorder.streamed)


def test_whole_job_on_the_vm_lane_locally(tmp_path: Path, recorder: Recorder) -> None:
    root = dispatch_root(str(tmp_path / "state" / "runs"), "dlife")
    run_whole_job(Remote.local(), tmp_path, recorder, root)
    assert "ssh" not in {c.argv[0] for c in recorder.calls}


def test_whole_job_through_a_login_prefix(login_target: Remote, tmp_path: Path, recorder: Recorder) -> None:
    prefix = Remote.via(["ssh", *ssh_options(login_target), login_target.destination])
    root = dispatch_root(str(tmp_path / "shared"), "dlife", 0)
    run_whole_job(prefix, tmp_path, recorder, root)


def test_a_complete_stage_is_reused_by_a_host_without_the_files(login_target: Remote, tmp_path: Path,
                                                                  recorder: Recorder) -> None:  # fmt: skip
    """The stage marks itself complete last; another host (no workdir, no env value) rewrites
    only the wrapper there and runs the job as staged; no mark: nothing is written."""
    prefix = Remote.via(["ssh", *ssh_options(login_target), login_target.destination])
    root = dispatch_root(str(tmp_path / "shared"), "dagain", 0)
    spec = JobSpec(("cat conf/cfg.yaml; printf %s \"$HF_TOKEN\" | wc -c",), "dagain", 120, env_names=("HF_TOKEN",))
    assert stage_again(prefix, root, spec, runner=recorder).unwrap() is False
    assert not Path(root).exists()  # nothing staged, nothing written
    workdir = select_workdir(str(make_workdir(tmp_path / "workdir"))).unwrap()
    assert isinstance(stage_job(prefix, root, spec, workdir=workdir, env={"HF_TOKEN": SECRET}), Success)
    lay = LAYOUT.under(root)
    assert Path(lay.staged).exists()
    Path(lay.script).write_text("exit 99\n")  # what the other host rewrites: the wrapper, for its rung
    assert stage_again(prefix, root, spec, runner=recorder).unwrap() is True
    assert start_job(prefix, root).unwrap() > 1
    assert wait_job(prefix, root, poll_s=0.2, within_s=60).unwrap().exit_code == 0
    assert f"\nlr: 3e-4{len(SECRET)}\n" in Path(lay.log).read_text()  # the staged workdir and env file
    assert SECRET not in recorder.argv_text() and all(c.stdin is None or SECRET.encode() not in c.stdin
                                                       for c in recorder.calls)  # fmt: skip


def test_the_job_outlives_the_ssh_session_that_started_it(login_target: Remote, tmp_path: Path) -> None:
    root = dispatch_root(str(tmp_path), "ddetach")
    spec = JobSpec(("sleep 2; echo survived > $EPS_OUTPUT_DIR/s",), "ddetach", 60)
    assert isinstance(stage_job(login_target, root, spec), Success)
    began = time.monotonic()
    start_job(login_target, root).unwrap()
    assert time.monotonic() - began < 2  # start returned while the job still runs
    assert not probe_job(login_target, root).unwrap().ended
    final = wait_job(login_target, root, poll_s=0.2, within_s=30).unwrap()
    assert final.exit_code == 0
    assert Path(root, "out", "s").read_text() == "survived\n"


def test_time_limit_over_ssh(login_target: Remote, tmp_path: Path) -> None:
    root = dispatch_root(str(tmp_path), "dslow")
    assert isinstance(stage_job(login_target, root, JobSpec(("sleep 100",), "dslow", 1)), Success)
    start_job(login_target, root).unwrap()
    final = wait_job(login_target, root, poll_s=0.2, within_s=20).unwrap()
    assert (final.status, final.exit_code) == (JobEnd.TIMED_OUT, 124)


def test_exit_code_and_failed_setup_over_ssh(login_target: Remote, tmp_path: Path) -> None:
    cases = [
        (JobSpec(("exit 3",), "dthree", 30), JobEnd.EXITED, 3),
        (JobSpec(("touch never",), "dsetup", 30, setup="exit 9"), JobEnd.SETUP_FAILED, 9),
    ]
    for spec, status, code in cases:
        root = dispatch_root(str(tmp_path), spec.dispatch_id)
        assert isinstance(stage_job(login_target, root, spec), Success)
        start_job(login_target, root).unwrap()
        final = wait_job(login_target, root, poll_s=0.2, within_s=20).unwrap()
        assert (final.status, final.exit_code) == (status, code)


def test_cancel_over_ssh(login_target: Remote, tmp_path: Path) -> None:
    root = dispatch_root(str(tmp_path), "dcancel")
    assert isinstance(stage_job(login_target, root, JobSpec(("sleep 100",), "dcancel", 600)), Success)
    start_job(login_target, root).unwrap()
    assert isinstance(cancel_job(login_target, root), Success)
    final = wait_job(login_target, root, poll_s=0.2, within_s=20).unwrap()
    assert final.status is JobEnd.CANCELLED
    assert isinstance(cancel_job(login_target, root), Success)  # ended: nothing to do


def test_wait_for_a_job_that_is_not_there(login_target: Remote, tmp_path: Path) -> None:
    failure = wait_job(login_target, str(tmp_path / "nothing"), poll_s=0.1).failure()
    assert failure.kind is RemoteErrorKind.COMMAND and "no job at" in failure.message


def test_wait_is_bounded(login_target: Remote, tmp_path: Path) -> None:
    root = dispatch_root(str(tmp_path), "dlong")
    assert isinstance(stage_job(login_target, root, JobSpec(("sleep 30",), "dlong", 60)), Success)
    start_job(login_target, root).unwrap()
    failure = wait_job(login_target, root, poll_s=0.2, within_s=1).failure()
    assert "has not ended yet" in failure.message
    cancel_job(login_target, root).unwrap()


@pytest.mark.parametrize("inner", [None, ("srun", "--jobid=7", "--overlap", "--pty", "bash")])
def test_shell_argv_for_eps_ssh(login_target: Remote, inner: tuple[str, ...] | None) -> None:
    argv = job_shell_argv(login_target, "eps-runs/d/0", inner)
    assert argv[:2] == ["ssh", "-t"]
    assert argv[-1].startswith("cd -- eps-runs/d/0/work && exec ")
