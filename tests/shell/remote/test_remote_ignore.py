"""The files eps ships from a workdir: git's ignore rules (checked against git itself),
.epsignore on top, .git never, symlinks kept inside the tree, and the size limit."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from eps.core.outcome import FailureKind
from eps.shell.remote.errors import RemoteErrorKind
from eps.shell.remote.ignore import human_bytes, list_workdir, select_workdir

TREE = {
    ".gitignore": "*.log\n!keep.log\nbuild/\n/top-only.txt\ndata/*\n!data/small.csv\n# a comment\n\ncache\n",
    "main.py": "print(1)\n",
    "run.log": "x",
    "keep.log": "kept",
    "top-only.txt": "t",
    "build/out.o": "o",
    "data/big.bin": "b" * 100,
    "data/small.csv": "a,b\n",
    "src/top-only.txt": "not anchored here",
    "src/mod.py": "m",
    "src/.gitignore": "secret_*.py\n!keep.log\nlocal/\n",
    "src/secret_x.py": "s",
    "src/local/notes.txt": "n",
    "src/deep/error.log": "e",
    "src/deep/keep.log": "k",
    "src/cache/c.bin": "c",
    "nested/build/inner.txt": "i",
    "sp ace/na me.txt": "space",
    "odd/new\nline.txt": "newline in name",
}


def make_tree(root: Path, tree: dict[str, str]) -> None:
    for rel, text in tree.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def git_would_ship(root: Path) -> list[str]:
    """What git considers not ignored: its own answer to the same rules."""
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    out = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--others", "--cached", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    return sorted(p.decode() for p in out.split(b"\0") if p)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_same_files_as_git(tmp_path: Path) -> None:
    make_tree(tmp_path, TREE)
    expected = git_would_ship(tmp_path)
    assert list(list_workdir(str(tmp_path)).files) == expected
    assert "keep.log" in expected and "src/deep/keep.log" in expected
    assert "data/small.csv" in expected and "data/big.bin" not in expected


def test_epsignore_adds_and_reincludes(tmp_path: Path) -> None:
    make_tree(tmp_path, TREE)
    (tmp_path / ".epsignore").write_text("src/mod.py\n!run.log\n")
    (tmp_path / "src" / ".epsignore").write_text("!secret_x.py\n")
    files = set(list_workdir(str(tmp_path)).files)
    assert "src/mod.py" not in files
    assert "run.log" in files  # re-included for eps only
    assert "src/secret_x.py" in files
    assert ".epsignore" in files


def test_git_dir_is_never_shipped_and_ignored_dirs_are_not_entered(tmp_path: Path) -> None:
    make_tree(tmp_path, {"a.py": "a", ".git/config": "c", "sub/.git": "gitdir: x", "venv/x/y.py": "y"})
    (tmp_path / ".gitignore").write_text("venv/\n!venv/x/y.py\n")
    files = list_workdir(str(tmp_path)).files
    assert files == (".gitignore", "a.py")


def test_symlinks_inside_kept_outside_skipped(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("never shipped")
    root = tmp_path / "work"
    make_tree(root, {"real/file.txt": "f", "a.py": "a"})
    os.symlink("real/file.txt", root / "inner-link")
    os.symlink("real", root / "inner-dir-link")
    os.symlink(str(outside / "secret.txt"), root / "out-link")
    os.symlink("../outside", root / "out-dir-link")
    os.symlink("missing-target", root / "dangling")
    listing = list_workdir(str(root))
    assert listing.files == ("a.py", "dangling", "inner-dir-link", "inner-link", "real/file.txt")
    assert listing.skipped_links == ("out-dir-link", "out-link")
    assert listing.total_bytes == 2  # links are not followed for sizes


def test_sizes_and_largest(tmp_path: Path) -> None:
    make_tree(tmp_path, {"a": "x" * 10, "b/c": "y" * 300, "d": "z" * 20})
    listing = list_workdir(str(tmp_path), keep_largest=2)
    assert listing.total_bytes == 330
    assert listing.largest == (("b/c", 300), ("d", 20))


def test_too_big_names_the_big_files_in_one_line(tmp_path: Path) -> None:
    make_tree(tmp_path, {"code.py": "x", "weights/model.pt": "w" * 5000, "data.bin": "d" * 3000})
    result = select_workdir(str(tmp_path), max_bytes=4096)
    failure = result.failure()
    assert failure.kind is RemoteErrorKind.TOO_BIG
    assert "\n" not in failure.message
    assert "weights/model.pt (4.9 KiB)" in failure.message
    assert failure.message.index("weights/model.pt") < failure.message.index("data.bin")
    assert "4.0 KiB limit" in failure.message and ".epsignore" in failure.message
    assert failure.lane_failure().kind is FailureKind.INVALID_REQUEST
    (tmp_path / ".epsignore").write_text("weights/\n")
    assert select_workdir(str(tmp_path), max_bytes=4096).unwrap().files == (".epsignore", "code.py", "data.bin")


def test_missing_workdir_is_one_line(tmp_path: Path) -> None:
    failure = select_workdir(str(tmp_path / "nope")).failure()
    assert "cannot read workdir" in failure.message


def test_human_bytes() -> None:
    assert human_bytes(512) == "512 B"
    assert human_bytes(2 * 1024**3) == "2.0 GiB"
    assert human_bytes(5 * 1024**4) == "5120.0 GiB"


def _git_env(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def git_would_ship_with(root: Path, env: dict[str, str]) -> list[str]:
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
    out = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--others", "--cached", "--exclude-standard"],
        capture_output=True, check=True, env=env,
    ).stdout  # fmt: skip
    return sorted(p.decode() for p in out.split(b"\0") if p)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_global_gitignore_is_honoured_as_git_does(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "ignore").write_text("*.pem\n")
    root = tmp_path / "work"
    make_tree(root, {"server.pem": "KEY", "main.py": "m", "sub/client.pem": "KEY", ".gitignore": "!keep.pem\n"})
    (root / "keep.pem").write_text("a .gitignore re-includes it")
    env = _git_env(home)
    shipped = list(list_workdir(str(root), environ=env).files)
    assert "server.pem" not in shipped and "sub/client.pem" not in shipped and "keep.pem" in shipped
    assert shipped == [p for p in git_would_ship_with(root, env) if not p.startswith(".git/")]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_core_excludes_file_is_honoured(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "my-ignores").write_text("*.key\nsecrets/\n")
    (home / ".gitconfig").write_text("[core]\n\texcludesFile = ~/my-ignores\n")
    root = tmp_path / "work"
    make_tree(root, {"a.key": "k", "secrets/token": "t", "main.py": "m"})
    env = _git_env(home)
    assert list(list_workdir(str(root), environ=env).files) == ["main.py"]
    assert list(list_workdir(str(root), environ=env).files) == git_would_ship_with(root, env)


def test_an_eps_state_dir_inside_the_workdir_is_never_shipped(tmp_path: Path) -> None:
    """``--workdir ~`` with the default state dir: eps's key, other dispatches' env files and
    dispatch roots stay home; so does any other eps state dir (one with only a key)."""
    root = tmp_path / "home"
    state = root / ".local" / "state" / "eps"
    make_tree(root, {
        "project/main.py": "m",
        ".local/state/eps/ledger.sqlite3": "db",
        ".local/state/eps/ssh/id_ed25519": "PRIVATE",
        ".local/state/eps/env/d1.env": "TOKEN=secret",
        ".local/state/eps/runs/d1/0/env": "TOKEN=secret",
        "old-state/ssh/id_ed25519": "PRIVATE",
        "notes/ssh/readme.txt": "an ssh dir without eps's key is just a directory",
    })  # fmt: skip
    listing = list_workdir(str(root))
    assert listing.files == ("notes/ssh/readme.txt", "project/main.py")
    assert listing.skipped_state == (".local/state/eps", "old-state")
    assert state.exists()
    line = listing.left_out()
    assert line is not None and "\n" not in line and ".local/state/eps" in line


def test_special_files_and_outside_links_are_reported_in_one_line(tmp_path: Path) -> None:
    import socket

    root = tmp_path / "work"
    make_tree(root, {"a.py": "a", ".gitignore": "ignored.fifo\n"})
    os.mkfifo(root / "pipe")
    os.mkfifo(root / "ignored.fifo")  # ignored: not worth a mention
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(root / "sock"))
        os.symlink("/etc/passwd", root / "out-link")
        listing = list_workdir(str(root))
    finally:
        sock.close()
    assert listing.files == (".gitignore", "a.py")
    assert listing.skipped_special == ("pipe", "sock") and listing.skipped_links == ("out-link",)
    line = listing.left_out()
    assert line is not None and "\n" not in line
    assert "pipe" in line and "sock" in line and "out-link" in line and "ignored.fifo" not in line
    assert list_workdir(str(tmp_path / "work" / "..")).left_out() is not None
    make_tree(tmp_path / "clean", {"x": "x"})
    assert list_workdir(str(tmp_path / "clean")).left_out() is None
