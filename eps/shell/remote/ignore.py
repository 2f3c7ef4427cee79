"""Which files of a workdir eps ships: git's ignore rules, plus ``.epsignore``.

Rules, as git applies them (``gitignore(5)``), matched by ``pathspec``'s
``GitIgnoreSpec``:

- every ``.gitignore`` in the tree applies to its own directory and below, its
  patterns relative to that directory; a deeper file overrides a higher one, and
  within a file the last matching pattern wins (``!`` re-includes);
- an ``.epsignore`` beside a ``.gitignore`` (or alone) adds patterns after it,
  so it can ignore more or re-include (``!data/small.csv``) for eps only;
- ``<root>/.git/info/exclude`` applies first, at the lowest precedence;
- an ignored directory is not entered (so nothing below it can be re-included,
  as in git), and ``.git`` is never shipped;
- symlinks are shipped as links when they point inside the tree, skipped
  (and listed) when they point outside it; symlinked directories are not
  entered; sockets, fifos and devices are skipped.

The result names every file relative to the root (``/``-separated, sorted), the
total size, and the largest files, for the size limit
(:data:`eps.core.tables.JOB_LIFECYCLE`).
"""

from __future__ import annotations

import heapq
import os
import stat
from typing import NamedTuple

from pathspec import GitIgnoreSpec
from returns.result import Failure, Result, Success

from eps.core.tables import JOB_LIFECYCLE
from eps.shell.remote.errors import RemoteErrorKind, RemoteFailure

IGNORE_FILES = (".gitignore", ".epsignore")
NEVER_SHIPPED = ".git"


class Workdir(NamedTuple):
    root: str  # absolute
    files: tuple[str, ...]  # relative, "/"-separated, sorted: what rsync --files-from gets
    total_bytes: int
    largest: tuple[tuple[str, int], ...]  # (path, bytes), biggest first
    skipped_links: tuple[str, ...]  # symlinks pointing out of the tree


def list_workdir(root: str, *, keep_largest: int = JOB_LIFECYCLE.workdir_biggest_named) -> Workdir:
    """The files of ``root`` that eps ships.  Raises ``OSError`` when ``root`` cannot be read."""
    root = os.path.realpath(root)
    if not os.path.isdir(root):
        raise NotADirectoryError(root)
    files: list[str] = []
    sizes: list[tuple[int, str]] = []
    skipped: list[str] = []
    total = 0
    rules: list[tuple[str, GitIgnoreSpec]] = []  # (dir prefix, spec), shallowest first
    exclude = _spec_from(os.path.join(root, ".git", "info", "exclude"))
    if exclude is not None:
        rules.append(("", exclude))

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
            elif stat.S_ISREG(st.st_mode) and not _ignored(rel, depth_rules, is_dir=False):
                files.append(rel)
                total += st.st_size
                sizes.append((st.st_size, rel))

    walk("", rules)
    largest = tuple((path, size) for size, path in heapq.nlargest(keep_largest, sizes))
    return Workdir(root, tuple(sorted(files)), total, largest, tuple(sorted(skipped)))


def select_workdir(root: str, *, max_bytes: int = JOB_LIFECYCLE.workdir_max_bytes) -> Result[Workdir, RemoteFailure]:
    """:func:`list_workdir`, refused with one line naming the biggest files when the
    files to ship total more than ``max_bytes``."""
    try:
        workdir = list_workdir(root)
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
