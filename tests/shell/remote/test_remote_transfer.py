"""rsync transfers to and from the real test sshd (the "remote" directories are on
this machine, so the tests can look at both sides directly)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from remote_support import Recorder
from returns.result import Success

from eps.shell.remote.errors import RemoteErrorKind
from eps.shell.remote.ignore import list_workdir, select_workdir
from eps.shell.remote.process import Completed
from eps.shell.remote.ssh import ONCE, Remote, check_remote, ssh_options
from eps.shell.remote.sync import (
    download_dir,
    download_file,
    put_file,
    upload_argv,
    upload_files,
)

WORKDIR = {
    ".gitignore": "*.pyc\n__pycache__/\ndata/\n",
    ".epsignore": "notes/\n!keep.pyc\n",
    "train.py": "print('train')\n",
    "pkg/__init__.py": "",
    "pkg/__pycache__/x.cpython-311.pyc": "junk",
    "pkg/model.pyc": "junk",
    "keep.pyc": "kept for eps",
    "data/huge.bin": "d" * 1000,
    "notes/todo.md": "private notes",
    "with space/and 'quote'.txt": "odd name",
    "conf/$(touch pwned).yaml": "not a command",
}


def make_tree(root: Path, tree: dict[str, str | bytes]) -> None:
    for rel, content in tree.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_upload_ships_only_what_is_not_ignored(login_target: Remote, tmp_path: Path) -> None:
    local = tmp_path / "local"
    make_tree(local, dict(WORKDIR))
    workdir = select_workdir(str(local)).unwrap()
    dest = tmp_path / "remote root" / "work"  # created on the far side
    assert isinstance(upload_files(login_target, workdir.root, workdir.files, str(dest)), Success)
    shipped = files_under(dest)
    assert sorted(shipped) == sorted(workdir.files)
    assert "train.py" in shipped and "keep.pyc" in shipped and "with space/and 'quote'.txt" in shipped
    for ignored in ("pkg/model.pyc", "pkg/__pycache__/x.cpython-311.pyc", "data/huge.bin", "notes/todo.md"):
        assert ignored not in shipped
        assert not (dest / ignored).exists()
    assert all(shipped[name] == (local / name).read_bytes() for name in shipped)
    assert not list(tmp_path.rglob("pwned"))


def test_second_upload_of_an_unchanged_tree_is_quick_and_sends_nothing(login_target: Remote, tmp_path: Path) -> None:
    local = tmp_path / "local"
    make_tree(local, {f"src/m{i}.py": f"x = {i}\n" * 50 for i in range(500)})
    workdir = list_workdir(str(local))
    dest = tmp_path / "dest"
    assert isinstance(upload_files(login_target, workdir.root, workdir.files, str(dest)), Success)
    before = {p: p.stat().st_ino for p in dest.rglob("*.py")}
    began = time.monotonic()
    assert isinstance(upload_files(login_target, workdir.root, workdir.files, str(dest)), Success)
    assert time.monotonic() - began < 2.0
    assert {p: p.stat().st_ino for p in dest.rglob("*.py")} == before  # nothing rewritten


def test_download_outputs_byte_for_byte(login_target: Remote, tmp_path: Path) -> None:
    remote_out = tmp_path / "root" / "out"
    outputs: dict[str, str | bytes] = {
        "metrics.json": '{"loss": 0.1}\n',
        "ckpt/model.bin": os.urandom(3 * 1024 * 1024 + 17),
        "ckpt/empty": b"",
        "odd name\nnewline.txt": "x",
        "all-bytes.bin": bytes(range(256)) * 4,
    }
    make_tree(remote_out, outputs)
    local = tmp_path / "pulled"
    assert isinstance(download_dir(login_target, str(remote_out), str(local)), Success)
    assert files_under(local) == files_under(remote_out)
    # pulling again picks up a new file and leaves the rest
    (remote_out / "late.txt").write_text("late")
    assert isinstance(download_dir(login_target, str(remote_out), str(local)), Success)
    assert (local / "late.txt").read_text() == "late"


def test_download_one_file(login_target: Remote, tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text("line 1\nline 2\n")
    dest = tmp_path / "logs" / "d1.log"
    assert isinstance(download_file(login_target, str(tmp_path / "job.log"), str(dest)), Success)
    assert dest.read_text() == "line 1\nline 2\n"


def test_put_file_is_0600_and_its_content_never_in_argv(
    login_target: Remote, tmp_path: Path, recorder: Recorder
) -> None:
    secret = b"TOKEN='hunter2-$(id)'\n"
    path = tmp_path / "root" / "env"
    assert isinstance(put_file(login_target, str(path), secret, runner=recorder), Success)
    assert path.read_bytes() == secret
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not (tmp_path / "root" / "env.tmp").exists()
    assert "hunter2" not in recorder.argv_text()
    assert "hunter2" not in recorder.output_text()
    assert [c.stdin for c in recorder.calls] == [secret]


def test_put_file_locally(tmp_path: Path) -> None:
    path = tmp_path / "a" / "run.sh"
    assert isinstance(put_file(Remote.local(), str(path), b"echo\n", mode=0o644), Success)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert path.read_text() == "echo\n"


def test_local_target_copies_locally(tmp_path: Path, recorder: Recorder) -> None:
    local = tmp_path / "local"
    make_tree(local, dict(WORKDIR))
    workdir = list_workdir(str(local))
    dest = tmp_path / "state" / "runs" / "d1" / "0" / "work"
    assert isinstance(upload_files(Remote.local(), workdir.root, workdir.files, str(dest), runner=recorder), Success)
    assert sorted(files_under(dest)) == sorted(workdir.files)
    assert "ssh" not in recorder.argv_text()
    back = tmp_path / "back"
    assert isinstance(download_dir(Remote.local(), str(dest), str(back)), Success)
    assert files_under(back) == files_under(dest)


def test_login_prefix_transfers(login_target: Remote, tmp_path: Path) -> None:
    """A SLURM login node reached by the user's own prefix: rsync runs through it."""
    prefix = Remote.via(["ssh", *ssh_options(login_target), login_target.destination])
    local = tmp_path / "local"
    make_tree(local, {"a.py": "a", "b/c.py": "c"})
    workdir = list_workdir(str(local))
    dest = tmp_path / "shared fs" / "work"
    assert isinstance(upload_files(prefix, workdir.root, workdir.files, str(dest)), Success)
    assert files_under(dest) == files_under(local)
    back = tmp_path / "back"
    assert isinstance(download_dir(prefix, str(dest), str(back)), Success)
    assert files_under(back) == files_under(local)


def test_unreachable_upload_is_one_line(eps_key, tmp_path: Path) -> None:
    remote = Remote.ssh("127.0.0.1", eps_key, user="root", port=1)
    local = tmp_path / "l"
    make_tree(local, {"a": "a"})
    failure = upload_files(remote, str(local), ["a"], "/tmp/x", patience=ONCE).failure()
    assert failure.kind is RemoteErrorKind.UNREACHABLE
    assert "Connection refused" in failure.message and "\n" not in failure.message


def test_missing_remote_rsync_is_named(login_target: Remote, tmp_path: Path) -> None:
    def runner(argv, *, stdin=None, timeout_s=None) -> Completed:
        return Completed(12, "", "bash: line 1: rsync: command not found\nrsync: connection unexpectedly closed\n")

    failure = upload_files(login_target, str(tmp_path), [], "/x", runner=runner, patience=ONCE).failure()
    assert failure.kind is RemoteErrorKind.MISSING_TOOL
    assert "rsync is not installed on root@127.0.0.1 port 2222" in failure.message


def test_upload_argv_names_no_file() -> None:
    argv = upload_argv(Remote.local(), "/src", "/dst")
    assert argv[:4] == ["rsync", "-a", "--no-owner", "--no-group"]
    assert "--files-from=-" in argv and "--from0" in argv
    assert argv[-2:] == ["/src/", "/dst/"]


def test_a_file_rewritten_within_the_second_of_a_pull_is_pulled_again(vm_target: Remote, tmp_path: Path) -> None:
    """rsync's quick check at whole seconds would call it unchanged (same size, same second)."""
    remote = vm_target
    out = tmp_path / "out"
    out.mkdir()
    write = "echo {n} > {out}/ckpt.tmp && touch -d @1700000000.{ns} {out}/ckpt.tmp && mv {out}/ckpt.tmp {out}/ckpt"
    assert check_remote(remote, write.format(n=15, ns=1, out=out), "write") == Success("")
    assert download_dir(remote, str(out), str(tmp_path / "back")) == Success(None)
    assert check_remote(remote, write.format(n=16, ns=6, out=out), "rewrite") == Success("")
    assert download_dir(remote, str(out), str(tmp_path / "back")) == Success(None)
    assert (tmp_path / "back" / "ckpt").read_text() == "16\n"
