"""What a job wrote is hostile input (issue 19): a download never writes outside its target,
never recreates a link that points out of the tree or a device node, never turns a planted
link into a local read; sparse files stay sparse.  Against the real test sshd, whose
"remote" directories are on this machine, so both sides can be looked at."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from returns.result import Failure, Success

from eps.shell.remote.ssh import Remote
from eps.shell.remote.sync import download_dir, download_file, upload_files

MiB = 1024 * 1024


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as fh:
        fh.write(b"head")
        fh.truncate(size)


def _allocated(path: Path) -> int:
    return path.stat().st_blocks * 512


def test_links_out_of_the_outputs_are_not_recreated(login_target: Remote, tmp_path: Path) -> None:
    out = tmp_path / "root" / "out"
    (out / "sub").mkdir(parents=True)
    (out / "result.txt").write_text("r")
    secret_dir = tmp_path / "elsewhere"
    secret_dir.mkdir()
    os.symlink(str(secret_dir), out / "job.log")  # absolute, to a directory
    os.symlink("/etc/passwd", out / "abs")
    os.symlink("../../../../etc/passwd", out / "sub" / "up")  # out through ..
    os.symlink("result.txt", out / "alias")  # inside: kept as a link
    os.symlink("../result.txt", out / "sub" / "back")  # inside, through ..: kept
    local = tmp_path / "pulled"
    assert isinstance(download_dir(login_target, str(out), str(local)), Success)
    assert (local / "result.txt").read_text() == "r"
    for planted in ("job.log", "abs", "sub/up"):
        assert not os.path.lexists(local / planted), planted
    assert os.readlink(local / "alias") == "result.txt"
    assert os.readlink(local / "sub" / "back") == "../result.txt"
    assert list(secret_dir.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_device_nodes_and_fifos_in_the_outputs_are_not_recreated(login_target: Remote, tmp_path: Path) -> None:
    out = tmp_path / "root" / "out"
    out.mkdir(parents=True)
    os.mknod(out / "blk", 0o666 | stat.S_IFBLK, os.makedev(7, 200))
    os.mknod(out / "chr", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mkfifo(out / "fifo")
    (out / "suid").write_text("#!/bin/sh\n")
    os.chmod(out / "suid", 0o6755)  # noqa: S103 - the bits a download must drop
    (out / "plain").write_text("p")
    local = tmp_path / "pulled"
    assert isinstance(download_dir(login_target, str(out), str(local)), Success)
    assert sorted(os.listdir(local)) == ["plain", "suid"]
    assert stat.S_IMODE((local / "suid").stat().st_mode) == 0o755  # no setuid/setgid bit survives


def test_a_planted_log_link_is_not_brought_and_a_local_link_is_replaced(login_target: Remote, tmp_path: Path) -> None:
    secret = tmp_path / "local-secret"
    secret.write_text("do not show")
    remote_log = tmp_path / "root" / "job.log"
    remote_log.parent.mkdir()
    os.symlink(str(secret), remote_log)
    kept = tmp_path / "logs" / "d1.log"
    got = download_file(login_target, str(remote_log), str(kept))
    assert isinstance(got, Failure) and "not a regular file" in got.failure().message
    assert not os.path.lexists(kept) and list(kept.parent.iterdir()) == []
    # a link already at the target (to a directory outside) is replaced, not written through
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(str(outside), kept)
    remote_log.unlink()
    remote_log.write_text("the log\n")
    assert isinstance(download_file(login_target, str(remote_log), str(kept)), Success)
    assert not kept.is_symlink() and kept.read_text() == "the log\n"
    assert list(outside.iterdir()) == []


def test_sparse_files_stay_sparse_both_ways(login_target: Remote, tmp_path: Path) -> None:
    local = tmp_path / "wd"
    local.mkdir()
    _sparse(local / "weights.bin", 64 * MiB)
    dest = tmp_path / "root" / "work"
    assert isinstance(upload_files(login_target, str(local), ["weights.bin"], str(dest)), Success)
    assert (dest / "weights.bin").stat().st_size == 64 * MiB
    assert _allocated(dest / "weights.bin") < 4 * MiB
    out = tmp_path / "root" / "out"
    out.mkdir()
    _sparse(out / "ckpt.bin", 64 * MiB)
    back = tmp_path / "back"
    assert isinstance(download_dir(login_target, str(out), str(back)), Success)
    assert (back / "ckpt.bin").read_bytes()[:4] == b"head"
    assert _allocated(back / "ckpt.bin") < 4 * MiB


def _a_host_key(tmp_path: Path) -> str:
    """The public half of a fresh host key: what some other machine once showed."""
    import subprocess

    path = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return " ".join((tmp_path / "other_host_key.pub").read_text().split()[:2])


def test_host_keys_belong_to_a_machine_not_an_address(eps_key, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """An earlier machine at this address left its (different) key: a new machine there,
    known by its own id, is trusted on first use; a changed key under one id is refused until
    the machine is forgotten (released)."""
    from remote_support import ssh_support

    from eps.shell.remote.errors import RemoteErrorKind
    from eps.shell.remote.keys import KeyPair, forget_host
    from eps.shell.remote.ssh import ONCE, run_remote

    known = tmp_path / "known_hosts"
    other = _a_host_key(tmp_path)
    known.write_text(f"{ssh_support.VM_IP} {other}\nvm-old {other}\n")
    key = KeyPair(eps_key.private_path, eps_key.public_path, str(known), eps_key.public_key)
    by_address = Remote.ssh(ssh_support.VM_IP, key, user=ssh_support.USER)
    assert run_remote(by_address, "true", patience=ONCE).failure().kind is RemoteErrorKind.HOST_KEY
    new = Remote.ssh(ssh_support.VM_IP, key, user=ssh_support.USER, machine="vm-new")
    assert run_remote(new, "true", patience=ONCE).unwrap().returncode == 0
    assert any(line.startswith("vm-new ") for line in known.read_text().splitlines())
    old = Remote.ssh(ssh_support.VM_IP, key, user=ssh_support.USER, machine="vm-old")
    assert run_remote(old, "true", patience=ONCE).failure().kind is RemoteErrorKind.HOST_KEY
    forget_host(str(known), "vm-old")
    assert not any(line.startswith("vm-old ") for line in known.read_text().splitlines())
    assert run_remote(old, "true", patience=ONCE).unwrap().returncode == 0
    with pytest.raises(ValueError, match="not a machine id"):
        Remote.ssh(ssh_support.VM_IP, key, machine="-oProxyCommand=x")
