"""Which files of a workdir eps ships: git's ignore rules, plus ``.epsignore``.

Rules, as git applies them (``gitignore(5)``), matched by ``pathspec``'s
``GitIgnoreSpec``:

- every ``.gitignore`` in the tree applies to its own directory and below, its
  patterns relative to that directory; a deeper file overrides a higher one, and
  within a file the last matching pattern wins (``!`` re-includes);
- an ``.epsignore`` beside a ``.gitignore`` (or alone) adds patterns after it,
  so it can ignore more or re-include (``!data/small.csv``) for eps only;
- the user's global excludes file applies first, at the lowest precedence:
  ``core.excludesFile`` as ``git config`` reads it (run in the workdir, so a
  repository's own setting counts), else git's default
  ``$XDG_CONFIG_HOME/git/ignore`` (``~/.config/git/ignore``); then
  ``<root>/.git/info/exclude``;
- an ignored directory is not entered (so nothing below it can be re-included,
  as in git), and ``.git`` is never shipped;
- symlinks are shipped as links when they point inside the tree, skipped
  (and listed) when they point outside it; symlinked directories are not
  entered; sockets, fifos and devices are skipped (and listed);
- an eps state directory inside the tree (one holding a ledger,
  ``ledger.sqlite3``, or eps's key, ``ssh/id_ed25519``: ``--workdir ~`` holds the
  default one) is never entered: eps's private key, the env files of other
  dispatches and their dispatch roots never ship (listed too).

The result names every file relative to the root (``/``-separated, sorted), the
total size, and the largest files, for the size limit
(:data:`eps.core.tables.JOB_LIFECYCLE`).
"""

from __future__ import annotations

import heapq
import os
import stat
from collections.abc import Mapping
from typing import NamedTuple

from pathspec import GitIgnoreSpec
from returns.result import Failure, Result, Success

from eps.core.tables import JOB_LIFECYCLE
from eps.shell.remote.errors import RemoteErrorKind, RemoteFailure
from eps.shell.remote.keys import KEY_DIR, PRIVATE_NAME
from eps.shell.remote.process import run_process

IGNORE_FILES = (".gitignore", ".epsignore")
NEVER_SHIPPED = ".git"
#: What makes a directory an eps state directory (``eps.shell.state.ledger``'s file name).
LEDGER_NAME = "ledger.sqlite3"


class Workdir(NamedTuple):
    root: str  # absolute
    files: tuple[str, ...]  # relative, "/"-separated, sorted: what rsync --files-from gets
    total_bytes: int
    largest: tuple[tuple[str, int], ...]  # (path, bytes), biggest first
    skipped_links: tuple[str, ...]  # symlinks pointing out of the tree
    skipped_special: tuple[str, ...] = ()  # fifos, sockets, device nodes
    skipped_state: tuple[str, ...] = ()  # eps state directories (never entered)

    def left_out(self) -> str | None:
        """One line saying what was left out that the ignore rules did not leave out, or None."""
        parts = [
            f"{what}: {_names(paths)}"
            for what, paths in (
                ("symlinks pointing out of it", self.skipped_links),
                ("special files", self.skipped_special),
                ("eps state directories", self.skipped_state),
            )
            if paths
        ]
        return f"left out of workdir {self.root}: " + "; ".join(parts) if parts else None


def list_workdir(
    root: str,
    *,
    keep_largest: int = JOB_LIFECYCLE.workdir_biggest_named,
    environ: Mapping[str, str] | None = None,
) -> Workdir:
    """The files of ``root`` that eps ships.  Raises ``OSError`` when ``root`` cannot be read.
    ``environ``: where git's global excludes file is looked for (default: this process's)."""
    root = os.path.realpath(root)
    if not os.path.isdir(root):
        raise NotADirectoryError(root)
    files: list[str] = []
    sizes: list[tuple[int, str]] = []
    skipped: list[str] = []
    special: list[str] = []
    states: list[str] = []
    total = 0
    rules = _base_rules(root, os.environ if environ is None else environ)  # (dir prefix, spec), lowest first

    def walk(rel_dir: str, depth_rules: list[tuple[str, GitIgnoreSpec]]) -> None:
        nonlocal total
        here = os.path.join(root, rel_dir) if rel_dir else root
        spec = _spec_from(*(os.path.join(here, name) for name in IGNORE_FILES))
        if spec is not None:
            depth_rules = [*depth_rules, (rel_dir + "/" if rel_dir else "", spec)]
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name)
        except OSError:
            return
        if _is_state_dir(here, entries):
            states.append(rel_dir or ".")
            return
        for entry in entries:
            if entry.name == NEVER_SHIPPED:
                continue
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if entry.is_symlink():
                if _ignored(rel, depth_rules, is_dir=False):
                    continue
                if _inside(root, entry.path):
                    files.append(rel)
                else:
                    skipped.append(rel)
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if not _ignored(rel, depth_rules, is_dir=True):
                    walk(rel, depth_rules)
            elif _ignored(rel, depth_rules, is_dir=False):
                continue
            elif stat.S_ISREG(st.st_mode):
                files.append(rel)
                total += st.st_size
                sizes.append((st.st_size, rel))
            else:
                special.append(rel)

    walk("", rules)
    largest = tuple((path, size) for size, path in heapq.nlargest(keep_largest, sizes))
    return Workdir(
        root,
        tuple(sorted(files)),
        total,
        largest,
        tuple(sorted(skipped)),
        tuple(sorted(special)),
        tuple(sorted(states)),
    )


def select_workdir(
    root: str, *, max_bytes: int = JOB_LIFECYCLE.workdir_max_bytes, environ: Mapping[str, str] | None = None
) -> Result[Workdir, RemoteFailure]:
    """:func:`list_workdir`, refused with one line naming the biggest files when the
    files to ship total more than ``max_bytes``."""
    try:
        workdir = list_workdir(root, environ=environ)
    except OSError as exc:
        return Failure(RemoteFailure.of(RemoteErrorKind.TRANSFER, f"cannot read workdir {root}: {exc.strerror or exc}"))
    if workdir.total_bytes > max_bytes:
        biggest = ", ".join(f"{path} ({human_bytes(size)})" for path, size in workdir.largest)
        return Failure(
            RemoteFailure.of(
                RemoteErrorKind.TOO_BIG,
                f"workdir {workdir.root} has {human_bytes(workdir.total_bytes)} to ship, over the"
                f" {human_bytes(max_bytes)} limit; largest: {biggest}; list what the job does not need"
                " in .epsignore (or .gitignore)",
            )
        )
    return Success(workdir)


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover - the loop always returns


def _base_rules(root: str, environ: Mapping[str, str]) -> list[tuple[str, GitIgnoreSpec]]:
    """The rules below every ``.gitignore``: the global excludes file, then ``.git/info/exclude``."""
    rules = []
    for path in (global_excludes(root, environ), os.path.join(root, ".git", "info", "exclude")):
        spec = _spec_from(path) if path else None
        if spec is not None:
            rules.append(("", spec))
    return rules


def global_excludes(root: str, environ: Mapping[str, str]) -> str | None:
    """The user's global excludes file, as git finds it: ``core.excludesFile`` (``git config
    --path``, run in ``root``), else ``$XDG_CONFIG_HOME/git/ignore`` or ``~/.config/git/ignore``."""
    env = dict(environ)
    asked = run_process(["git", "-C", root, "config", "--path", "--get", "core.excludesFile"], timeout_s=30, env=env)
    if asked.ok and asked.stdout.strip():
        return os.path.join(root, os.path.expanduser(asked.stdout.strip()))
    xdg = env.get("XDG_CONFIG_HOME") or ""
    if os.path.isabs(xdg):
        return os.path.join(xdg, "git", "ignore")
    home = env.get("HOME")
    return os.path.join(home, ".config", "git", "ignore") if home else None


def _is_state_dir(path: str, entries: list[os.DirEntry[str]]) -> bool:
    """An eps state directory: it holds a ledger, or eps's key pair."""
    for entry in entries:
        if entry.name == LEDGER_NAME and entry.is_file(follow_symlinks=False):
            return True
        key = os.path.join(path, KEY_DIR, PRIVATE_NAME)
        if entry.name == KEY_DIR and entry.is_dir(follow_symlinks=False) and os.path.lexists(key):
            return True
    return False


def _names(paths: tuple[str, ...], most: int = 5) -> str:
    shown = ", ".join(repr(p) if any(c in p for c in ", \n") else p for p in paths[:most])
    return shown + (f" and {len(paths) - most} more" if len(paths) > most else "")


def _spec_from(*paths: str) -> GitIgnoreSpec | None:
    lines: list[str] = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as fh:
                lines.extend(fh.read().splitlines())
        except OSError:
            continue
    if not any(line.strip() and not line.startswith("#") for line in lines):
        return None
    return GitIgnoreSpec.from_lines(lines)


def _ignored(rel: str, rules: list[tuple[str, GitIgnoreSpec]], *, is_dir: bool) -> bool:
    """The deepest ignore file with an opinion on ``rel`` decides (git's precedence)."""
    for prefix, spec in reversed(rules):
        if prefix and not rel.startswith(prefix):
            continue
        local = rel[len(prefix) :] + ("/" if is_dir else "")
        verdict = spec.check_file(local).include
        if verdict is not None:
            return verdict
    return False


def _inside(root: str, link: str) -> bool:
    target = os.path.realpath(link)
    return target == root or target.startswith(root + os.sep)
