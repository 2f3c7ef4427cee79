"""What a pull would write, learned before it starts (issue 33, item 4), through the real test
sshd: rsync's dry run of the very transfer (over eps's own ssh, a login prefix, a robot login
that runs rsync alone), which writes nothing; and a download that meets a full disk midway
(ENOSPC) leaves no cut-short file under a real name."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_support import ssh_support
from returns.result import Failure, Success

from eps.core.jobscript import LAYOUT
from eps.core.room import Disk, Incoming, room_for
from eps.shell.lanes.jobs import Site, disk_at, pull, pull_room
from eps.shell.remote.keys import KeyPair
from eps.shell.remote.ssh import Remote, ssh_options
from eps.shell.remote.sync import (
    RSYNC_DOWNLOAD,
    RSYNC_MEASURE,
    Sizes,
    download_argv,
    download_dir,
    download_file,
    download_size,
    parse_stats,
)

MB = 10**6
ROBOT_SH = Path(__file__).parents[1] / "ssh" / "robot_login.sh"


def _tree(root: Path, sizes: dict[str, int]) -> dict[str, str]:
    """Files of random bytes under ``root``; their sha256 by name."""
    sums = {}
    for name, size in sizes.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = os.urandom(size)
        path.write_bytes(data)
        sums[name] = hashlib.sha256(data).hexdigest()
    return sums


def _job_root(tmp: Path, sizes: dict[str, int], log: bytes = b"the log\n") -> tuple[Path, dict[str, str]]:
    root = tmp / "machine" / "d-1" / "0"
    sums = _tree(root / "out", sizes)
    (root / LAYOUT.log).write_bytes(log)
    return root, sums


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


# --- rsync's own numbers ------------------------------------------------------------------------


def test_parse_stats_reads_rsyncs_summary_in_any_grouping() -> None:
    text = (
        "Number of files: 6 (reg: 2, dir: 3, link: 1)\nNumber of created files: 4 (reg: 2, dir: 2)\n"
        "Number of deleted files: 0\nNumber of regular files transferred: 2\nTotal file size: 100,014 bytes\n"
        "Total transferred file size: 1,100,003 bytes\nLiteral data: 0 bytes\n"
    )
    assert parse_stats(text) == Sizes(1_100_003, 2, 2)
    assert parse_stats(text.replace(",", ".")) == Sizes(1_100_003, 2, 2)  # a locale's grouping
    assert parse_stats("Number of created files: 0\nTotal transferred file size: 0 bytes\n") == Sizes(0, 0, 0)
    assert parse_stats("created directory x\n") is None


def test_a_download_never_keeps_a_cut_short_file() -> None:
    """rsync writes to a temporary name and renames it once whole, and removes it on an
    error: none of the options that would keep a partial file under its name is given."""
    keeping = ("--inplace", "--partial", "--append", "--append-verify", "-P", "--partial-dir")
    for argv in (list(RSYNC_DOWNLOAD), download_argv(Remote.via([]), "/a", "/b", directory=True),
                 download_argv(Remote.via([]), "/a", "/b", directory=False)):  # fmt: skip
        assert not any(a == k or a.startswith(k + "=") for a in argv for k in keeping), argv
    assert "--dry-run" in RSYNC_MEASURE and "--stats" in RSYNC_MEASURE


# --- sizing, over every path a lane uses -----------------------------------------------------------


def _sizes_through(remote: Remote, tmp_path: Path) -> None:
    root, _ = _job_root(tmp_path, {"a.bin": 3 * MB, "sub/b.bin": 1 * MB, "sub/deeper/c.txt": 10})
    here = tmp_path / "state" / "outputs" / "d-1"
    got = download_size(remote, str(root / "out"), str(here), directory=True)
    assert got == Success(Sizes(4 * MB + 10, 3, 3)), got  # the outputs dir, sub/, sub/deeper/ made; 3 files
    assert not here.exists() and not (tmp_path / "state").exists()  # a dry run makes nothing
    assert isinstance(download_dir(remote, str(root / "out"), str(here)), Success)
    assert download_size(remote, str(root / "out"), str(here), directory=True) == Success(Sizes(0, 0, 0))
    (root / "out" / "sub" / "b.bin").write_bytes(os.urandom(2 * MB))  # a checkpoint rewritten
    assert download_size(remote, str(root / "out"), str(here), directory=True) == Success(Sizes(2 * MB, 1, 0))
    log = download_size(remote, str(root / LAYOUT.log), str(tmp_path / "state" / "x.log.new"), directory=False)
    assert log == Success(Sizes(len(b"the log\n"), 1, 0))
    gone = download_size(remote, str(tmp_path / "nowhere"), str(here), directory=True)
    assert isinstance(gone, Failure) and gone.failure().message.startswith("sizing the download of")  # as a pull


def test_sizes_over_eps_own_ssh(vm_target: Remote, tmp_path: Path) -> None:
    _sizes_through(vm_target, tmp_path)


def test_sizes_through_a_login_prefix(login_target: Remote, tmp_path: Path) -> None:
    _sizes_through(Remote.via(["ssh", *ssh_options(login_target), login_target.destination]), tmp_path)


@pytest.fixture
def robot_login(eps_key: KeyPair, tmp_path: Path) -> Iterator[tuple[Remote, Path]]:
    """A login whose key runs rsync (sbatch, scancel, squeue, scp) and nothing else, as a DRAC
    robot key: ``tests/shell/ssh/robot_login.sh`` as its forced command, logging each command."""
    key, log = tmp_path / "robot_key", tmp_path / "robot.log"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, capture_output=True,
                   timeout=30)  # fmt: skip
    public = Path(f"{key}.pub").read_text().strip()
    line = f'restrict,command="bash {ROBOT_SH} {log}",{ssh_support.PLAIN_LOGIN.strip()} {public}'
    ssh_support.authorize(line)
    login = ["ssh", "-F", "none", "-p", str(ssh_support.LOGIN_PORT), "-i", str(key), "-o", "IdentitiesOnly=yes",
             "-o", f"UserKnownHostsFile={tmp_path / 'known_hosts'}", "-o", "StrictHostKeyChecking=accept-new",
             "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", f"{ssh_support.USER}@{ssh_support.LOGIN_HOST}"]  # fmt: skip
    try:
        yield Remote.via(login, robot=True), log
    finally:
        ssh_support.revoke(line)


def test_room_and_pull_through_a_robot_login(robot_login: tuple[Remote, Path], tmp_path: Path) -> None:
    remote, log = robot_login
    root, sums = _job_root(tmp_path, {"a.bin": 2 * MB, "b/c.bin": 1 * MB}, log=b"x" * 5000)
    site = Site(remote, str(root))
    out, log_path = tmp_path / "state" / "outputs" / "d-1", tmp_path / "state" / "logs" / "d-1.log"
    room = pull_room(site, str(out), str(log_path), 0)
    assert isinstance(room, Success), room
    assert room.unwrap().fits and room.unwrap().needed >= 3 * MB + 5000
    assert not out.exists() and not log_path.exists()
    free = disk_at(str(out)).free
    refused = pull_room(site, str(out), str(log_path), free)  # a margin of all that is free: cannot fit
    assert isinstance(refused, Success) and not refused.unwrap().fits
    assert refused.unwrap().line().startswith(f"held back for lack of disk: they need 2.9 MiB in {out}, ")
    assert isinstance(pull(site, str(out), str(log_path)), Success)
    assert _files(out) == sums and log_path.read_bytes() == b"x" * 5000
    commands = log.read_text().splitlines()
    assert commands and all(shlex.split(c)[0] == "rsync" for c in commands), commands
    dry = [c for c in commands if shlex.split(c)[3].startswith("-n")]  # rsync --server --sender -n...: a dry run
    assert len(dry) == 4 and len(commands) == 6, commands  # each room: the outputs and the log sized; then the pull


def test_room_names_the_filesystem_short_of_it(vm_target: Remote, tmp_path: Path) -> None:
    root, _ = _job_root(tmp_path, {"a.bin": 1 * MB})
    out = tmp_path / "state" / "outputs" / "d-1"
    disk = disk_at(str(out))
    assert disk == Disk(os.stat(tmp_path).st_dev, disk.free, os.statvfs(tmp_path).f_frsize)
    need = room_for([(Incoming(str(out), MB, 1, 1), disk)], 0).needed
    got = pull_room(Site(vm_target, str(root)), str(out), str(tmp_path / "state" / "logs" / "d.log"), 0)
    assert got.unwrap().needed >= need and got.unwrap().where == str(out)


# --- a full disk midway ---------------------------------------------------------------------------


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def test_a_download_that_meets_enospc_midway_leaves_no_file_that_looks_whole(
    vm_target: Remote, tmp_path: Path
) -> None:
    root, sums = _job_root(tmp_path, {"a.bin": 3 * MB, "b.bin": 6 * MB, "c.bin": 1 * MB}, log=os.urandom(9 * MB))
    with _tmpfs(tmp_path / "small", "8m") as small:
        (small / "out").mkdir()
        (small / "out" / "b.bin").write_bytes(b"an older whole b\n")  # what the last sync brought
        got = download_dir(vm_target, str(root / "out"), str(small / "out"))
        assert isinstance(got, Failure), got
        assert "No space left on device" in got.failure().message
        there = _files(small / "out")
        assert there, "nothing came at all"
        for name, digest in there.items():
            assert not name.startswith(".") and "/." not in name, f"a temporary file was left: {name}"
            old = hashlib.sha256(b"an older whole b\n").hexdigest()
            assert digest in (sums.get(name), old if name == "b.bin" else None), f"{name} is cut short"
        assert set(there) < set(sums) | {"b.bin"}

        log = download_file(vm_target, str(root / LAYOUT.log), str(small / "logs" / "d-1.log"))
        assert isinstance(log, Failure) and "No space left on device" in log.failure().message
        assert sorted(p.name for p in (small / "logs").iterdir()) == []  # no log, no temporary one
