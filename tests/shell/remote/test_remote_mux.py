"""One ssh master connection per machine (eps.shell.remote.mux), against the real test sshd:
every command, upload and download to a machine after the first rides on one handshake (the
sshd's own log counts them); a master killed before or during a step, or one that hangs, is
replaced and the step succeeds; closing a machine ends its master; the socket path stays
under the unix limit whatever the state dir."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import uuid
from pathlib import Path

import pytest
from returns.result import Success
from ssh_support import LOGIN_HOST, LOGIN_PORT, USER, VM_IP, sshd_log_since, sshd_log_size

from eps.shell.remote import mux
from eps.shell.remote.keys import KeyPair, ensure_key
from eps.shell.remote.ssh import ONCE, Remote, check_remote, remote_argv, run_remote, shell_argv
from eps.shell.remote.sync import download_dir, rsync_rsh, upload_files


def fingerprint(key: KeyPair) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", key.public_path], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


class Handshakes:
    """Counts the sshd's ``Accepted publickey`` lines for ``key`` from now on."""

    def __init__(self, key: KeyPair) -> None:
        self.mark = fingerprint(key)
        self.offset = sshd_log_size()

    def count(self) -> int:
        text = sshd_log_since(self.offset)
        return sum(1 for line in text.splitlines() if "Accepted publickey" in line and self.mark in line)


def machine_target(key: KeyPair, host: str = VM_IP, port: int = 22) -> Remote:
    """A machine of its own (a new id: a new master), as a lane makes it."""
    return Remote.ssh(host, key, user=USER, port=port, machine=f"m-{uuid.uuid4().hex[:12]}")


def master(remote: Remote) -> int | None:
    assert remote.control_path is not None
    return mux.master_pid(remote.control_path)


def test_every_step_to_a_machine_shares_one_handshake(eps_key: KeyPair, tmp_path: Path) -> None:
    remote = machine_target(eps_key)
    seen = Handshakes(eps_key)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    (src / "sub" / "b.txt").write_text("beta\n")
    dest = str(tmp_path / "remote-dir")
    assert check_remote(remote, "true", "first contact") == Success("")
    assert upload_files(remote, str(src), ["a.txt", "sub/b.txt"], dest) == Success(None)
    assert check_remote(remote, f"cat {dest}/sub/b.txt", "read") == Success("beta\n")
    assert download_dir(remote, dest, str(tmp_path / "back")) == Success(None)
    assert (tmp_path / "back" / "a.txt").read_text() == "alpha\n"
    for _ in range(3):
        assert check_remote(remote, "echo hi", "probe") == Success("hi\n")
    assert seen.count() == 1
    assert master(remote) is not None
    mux.close_machine(os.path.dirname(eps_key.private_path), remote.host_key_alias or "")
    assert master(remote) is None and not mux.has_socket(remote.control_path or "")


def test_two_machines_at_one_address_have_two_masters(eps_key: KeyPair) -> None:
    one, two = machine_target(eps_key), machine_target(eps_key)
    assert one.control_path != two.control_path
    seen = Handshakes(eps_key)
    for remote in (one, two, one, two):
        assert check_remote(remote, "true", "contact") == Success("")
    assert seen.count() == 2
    assert master(one) != master(two)


def test_a_master_killed_between_steps_is_replaced(eps_key: KeyPair) -> None:
    remote = machine_target(eps_key, LOGIN_HOST, LOGIN_PORT)
    assert check_remote(remote, "true", "contact") == Success("")
    first = master(remote)
    assert first is not None
    os.kill(first, signal.SIGKILL)
    mux.wait_gone([first])
    assert mux.has_socket(remote.control_path or "")  # the socket is stale now
    assert check_remote(remote, "echo again", "after", patience=ONCE) == Success("again\n")
    second = master(remote)
    assert second is not None and second != first


def test_a_master_killed_mid_step_does_not_fail_the_step(eps_key: KeyPair, tmp_path: Path) -> None:
    """The master dies while a command runs through it: that try fails in transport, the
    command is tried again at once on a fresh connection (even with no patience for retries)."""
    remote = machine_target(eps_key)
    assert check_remote(remote, "true", "contact") == Success("")
    first = master(remote)
    assert first is not None
    marks = tmp_path / "tries"
    killer = threading.Timer(0.5, os.kill, (first, signal.SIGKILL))
    killer.start()
    try:
        done = check_remote(remote, f"echo x >> {marks}; sleep 1.5; echo finished", "step", patience=ONCE)
    finally:
        killer.cancel()
    assert done == Success("finished\n")
    assert marks.read_text() in ("x\n", "x\nx\n")  # the try that died with the master may have begun
    assert master(remote) not in (None, first)


def test_a_master_killed_mid_upload_does_not_fail_the_upload(eps_key: KeyPair, tmp_path: Path) -> None:
    remote = machine_target(eps_key)
    assert check_remote(remote, "true", "contact") == Success("")
    first = master(remote)
    assert first is not None
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "big.bin", "wb") as fh:
        fh.write(os.urandom(64 * 1024 * 1024))
    killer = threading.Timer(0.2, os.kill, (first, signal.SIGKILL))
    killer.start()
    try:
        sent = upload_files(remote, str(src), ["big.bin"], str(tmp_path / "dest"), patience=ONCE)
    finally:
        killer.cancel()
    assert sent == Success(None)
    assert (tmp_path / "dest" / "big.bin").read_bytes() == (src / "big.bin").read_bytes()


def test_a_hung_master_is_replaced(eps_key: KeyPair) -> None:
    """A master that no longer answers (stopped here; in life, a wedged process) makes the
    command time out; the master is killed and the command runs on a fresh connection."""
    remote = machine_target(eps_key, LOGIN_HOST, LOGIN_PORT)
    assert check_remote(remote, "true", "contact") == Success("")
    first = master(remote)
    assert first is not None
    os.kill(first, signal.SIGSTOP)
    try:
        done = run_remote(remote, "echo fresh", timeout_s=1, patience=ONCE)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(first, signal.SIGCONT)
    assert isinstance(done, Success) and done.unwrap().stdout == "fresh\n"
    assert mux.wait_gone([first]) == []


def test_the_socket_path_fits_the_unix_limit_whatever_the_state_dir(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "state"
    key = ensure_key(str(deep)).unwrap()
    remote = Remote.ssh(VM_IP, key, user=USER, machine="m-" + "x" * 60)
    path = remote.control_path
    assert path is not None and len(path) + mux.TEMP_SUFFIX <= mux.SUN_PATH_MAX
    short = os.path.dirname(path)
    assert Path(short, mux.OWNER_FILE).read_text().strip() == str(deep / "ssh")
    assert oct(os.stat(short).st_mode & 0o777) == "0o700"
    short_state = tempfile.mkdtemp(prefix="eps-s", dir="/tmp")  # a state dir like ~/.local/state/eps
    try:
        near = Remote.ssh(VM_IP, ensure_key(short_state).unwrap(), user=USER, machine="m1")
        assert near.control_path is not None and near.control_path.startswith(f"{short_state}/ssh/cm/")
    finally:
        shutil.rmtree(short_state)


def test_a_short_socket_directory_goes_with_its_last_master(tmp_path: Path) -> None:
    """The /tmp fallback leaves nothing behind: once a machine of its state dir is closed and
    no socket is left, the directory goes with its owner file; one with a socket stays; the
    state dir's own directory always stays."""
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "state"
    key = ensure_key(str(deep)).unwrap()
    path = Remote.ssh(VM_IP, key, user=USER, machine="m-tidy").control_path
    assert path is not None
    short = os.path.dirname(path)
    assert os.path.isdir(short) and short.startswith(mux.SHORT_BASE + "/")
    other = os.path.join(short, mux.socket_name("m-other", USER, VM_IP, 22))
    import socket

    with socket.socket(socket.AF_UNIX) as live:  # another machine's master is still there
        live.bind(other)
        mux.close_machine(str(deep / "ssh"), "m-tidy")
        assert os.path.isdir(short)
    os.unlink(other)
    mux.close_machine(str(deep / "ssh"), "m-tidy")
    assert not os.path.exists(short)
    near = tempfile.mkdtemp(prefix="eps-s", dir="/tmp")
    try:
        ensure_key(near).unwrap()
        mux.close_machine(os.path.join(near, "ssh"), "m-none")
        assert os.path.isdir(os.path.join(near, "ssh", mux.CONTROL_DIR))
    finally:
        shutil.rmtree(near)


def test_every_way_eps_reaches_a_machine_names_its_master(eps_key: KeyPair) -> None:
    remote = machine_target(eps_key)
    option = f"ControlPath={remote.control_path}"
    assert option in remote_argv(remote, "true")
    assert option in shell_argv(remote, "/tmp")  # eps ssh
    assert option in (rsync_rsh(remote) or "")  # rsync -e
    assert f"ControlPersist={mux.PERSIST_S}" in remote_argv(remote, "true")
    assert Remote.via(["ssh", "login"]).control_path is None  # a login prefix is the user's own ssh


@pytest.fixture(autouse=True)
def _sshd_up(sshd: Path) -> None:
    """Every test here talks to the real test sshd."""


def test_the_docs_state_the_idle_time_of_a_master() -> None:
    claude = (Path(__file__).parents[3] / "CLAUDE.md").read_text(encoding="utf-8")
    assert f"ends by itself after {mux.PERSIST_S} s" in " ".join(claude.split())


def test_releasing_a_machine_closes_its_master(eps_key: KeyPair, eps_state: Path) -> None:
    from eps.shell.lanes.machines import MachineAccess

    remote = machine_target(eps_key)
    assert check_remote(remote, "true", "contact") == Success("")
    pid = master(remote)
    assert pid is not None
    MachineAccess(str(eps_state), USER, "runs", 0).forget(remote.host_key_alias or "")
    assert mux.wait_gone([pid]) == []
    assert not mux.has_socket(remote.control_path or "")


def test_files_and_start_in_one_command_start_nothing_when_the_files_fail(
    eps_key: KeyPair, tmp_path: Path
) -> None:
    """The merged bring-up: files unpacked from stdin, then the start, guarded by ``&&``."""
    from eps.core.jobscript import JobSpec, render_cancel
    from eps.shell.remote.job import job_root_files, probe_job, start_job
    from eps.shell.remote.sync import pack, unpack_line

    remote = machine_target(eps_key)
    root = str(tmp_path / "root")
    packed = pack(job_root_files(JobSpec(("sleep 30",), "dmerged", 60), {"TOKEN": "s3cret"}))
    broken = packed._replace(archive=packed.archive[:100])  # a transfer cut short
    failed = start_job(remote, root, guard=unpack_line(root, broken), stdin=broken.archive)
    assert not isinstance(failed, Success)
    assert not (tmp_path / "root" / "run.sh").exists() and not (tmp_path / "root" / "pid").exists()
    assert [p.name for p in (tmp_path / "root").iterdir()] == []  # no stage left behind
    pid = start_job(remote, root, guard=unpack_line(root, packed), stdin=packed.archive).unwrap()
    assert probe_job(remote, root).unwrap().pid == pid
    assert oct((tmp_path / "root" / "env").stat().st_mode & 0o777) == "0o600"
    assert "s3cret" not in " ".join(remote_argv(remote, unpack_line(root, packed)))
    check_remote(remote, render_cancel(root), "stop")
