"""A job's files through a robot login (``[[clusters]] access = "robot"``), by rsync alone.

A robot login's key runs sbatch, scancel, squeue, scp and rsync and nothing else
(:data:`eps.core.clusters.ROBOT_COMMANDS`): no ``mkdir``, no ``cat``, no ``kill``, no shell
line.  What :mod:`eps.shell.remote.job` does elsewhere with one shell line, it does here with
rsync, the rest of eps unchanged:

- Staging: the dispatch root's small files (the wrapper, the env file) are laid out in a local
  directory under the root's whole path, and sent in one rsync to a destination that always
  exists: the login's home (a relative work root) or ``/`` (an absolute one).  rsync makes only
  the last component of a destination, so the path travels in the transfer instead: the
  directories above the dispatch are implied (``--no-implied-dirs``: missing ones are made, ones
  that are there are left as they are), and the dispatch's own two directories are sent
  themselves, private (0700).  The workdir (into ``work/``) and a relaunch's outputs (into
  ``out/``) follow, each the last component of its destination.
- The job's record (``pid``, ``started-at``, ``ended-at``, ``status``, ``exit-code``) is
  fetched into a local directory and read there (:func:`probe`).  Whether the wrapper is alive
  is never known (``kill -0`` needs a shell); a SLURM job's wrapper runs on a compute node, where
  a login's probe could not see it anyway.
- Following the log fetches the record and ``job.log`` every :data:`FOLLOW_POLL_S` and hands on
  what is new, until the record has the job's end.
- A cancel leaves the ``cancel`` mark by rsync (so the end reads ``cancelled``); the TERM
  comes from SLURM itself (``scancel``, the lane's), never from a ``kill`` here.
- A reap is never needed: a SLURM job's end (scancel, its time limit, a preemption) ends every
  process of it, in its cgroup on the compute node, SLURM's own doing.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
import time
from collections.abc import Callable, Sequence

from returns.result import Failure, Result, Success

from eps.core.jobscript import LAYOUT, PROBED, JobProgress, parse_probe
from eps.shell.remote.errors import RemoteFailure
from eps.shell.remote.process import Runner, run_process
from eps.shell.remote.ssh import BRIEF, Patience, Remote
from eps.shell.remote.sync import download_matching, upload_files

#: The record files a probe reads (their names in the dispatch root).
RECORD: tuple[str, ...] = tuple(getattr(LAYOUT, field) for field in PROBED)
#: How often a robot follow fetches the record and the log (each look is one rsync over ssh).
FOLLOW_POLL_S = 2.0
#: The most of a record file that is read (as the shell probe's ``head -c 64``).
_RECORD_BYTES = 64


def anchor(root: str) -> tuple[str, str]:
    """Where a transfer for ``root`` lands (a directory that is always there: ``.``, the
    login's home, for a relative root; ``/`` for an absolute one) and ``root`` relative to it."""
    path = posixpath.normpath(root.removeprefix("~/"))
    if path.startswith("/"):
        return "/", path.lstrip("/")
    return ".", path


def stage(
    remote: Remote,
    root: str,
    files: Sequence[tuple[str, bytes, int]],
    *,
    patience: Patience = BRIEF,
    runner: Runner = run_process,
    sleep: Callable[[float], None] = time.sleep,
) -> Result[None, RemoteFailure]:
    """Put ``files`` (``(name, content, mode)``, plain names) into ``root`` on ``remote``,
    making ``root`` and the directories above it as needed (see the module docstring)."""
    top, rel = anchor(root)
    dispatch_dir = posixpath.dirname(rel)
    with tempfile.TemporaryDirectory(prefix="eps-stage-") as local:
        here = os.path.join(local, rel)
        os.makedirs(here, mode=0o700)
        for name in (dispatch_dir, rel):
            if name:
                os.chmod(os.path.join(local, name), 0o700)
        for name, content, mode in files:
            fd = os.open(os.path.join(here, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(content)
            os.chmod(os.path.join(here, name), mode)
        names = [n for n in (dispatch_dir, rel) if n] + [f"{rel}/{name}" for name, _, _ in files]
        return upload_files(remote, local, names, top, implied_dirs=False, patience=patience, runner=runner,
                            sleep=sleep)  # fmt: skip


def read_record(local_dir: str) -> JobProgress:
    """The record fetched into ``local_dir``, read as the shell probe's output is
    (:func:`~eps.core.jobscript.parse_probe`); ``alive`` is never known (``False``)."""
    lines = [f"{field}={_head(os.path.join(local_dir, name))}" for field, name in zip(PROBED, RECORD, strict=True)]
    return parse_probe("\n".join(lines))


def probe(
    remote: Remote, root: str, *, patience: Patience = BRIEF, runner: Runner = run_process
) -> Result[JobProgress, RemoteFailure]:
    """What the job's record in ``root`` says now (one rsync); ``exists=False`` when ``root``
    is not there."""
    with tempfile.TemporaryDirectory(prefix="eps-probe-") as local:
        got = download_matching(remote, root, [f"/{n}" for n in RECORD], local, patience=patience, runner=runner)
        return got.map(lambda there: read_record(local) if there else JobProgress(exists=False))


def follow(
    remote: Remote,
    root: str,
    sink: Callable[[bytes], None],
    *,
    poll_s: float = FOLLOW_POLL_S,
    sleep: Callable[[float], None] = time.sleep,
    runner: Runner = run_process,
) -> Result[int, RemoteFailure]:
    """Hand ``job.log`` to ``sink`` from its start, as it grows, until the job's end is in its
    record (then what it wrote last is handed on too); 0, as the shell follow exits."""
    includes = [f"/{n}" for n in (*RECORD, LAYOUT.log)]
    with tempfile.TemporaryDirectory(prefix="eps-follow-") as mirror:
        log, sent, ended = os.path.join(mirror, LAYOUT.log), 0, False
        while True:
            got = download_matching(remote, root, includes, mirror, runner=runner)
            if isinstance(got, Failure):
                return Failure(got.failure())
            sent = _hand_on(log, sent, sink)
            if ended:  # the fetch after the end was seen: the log is whole
                return Success(0)
            ended = got.unwrap() and read_record(mirror).exit_code is not None
            if not ended:
                sleep(poll_s)


def fetch_log(remote: Remote, root: str, local_dir: str) -> Result[str | None, RemoteFailure]:
    """``job.log`` of ``root`` fetched into ``local_dir``: its local path, or ``None`` when
    there is no log (yet)."""
    got = download_matching(remote, root, [f"/{LAYOUT.log}"], local_dir)
    path = os.path.join(local_dir, LAYOUT.log)
    return got.map(lambda _: path if os.path.isfile(path) and not os.path.islink(path) else None)


def leave_cancel_mark(
    remote: Remote, root: str, *, patience: Patience = BRIEF, runner: Runner = run_process
) -> Result[None, RemoteFailure]:
    """The ``cancel`` mark in ``root`` (an empty file): the wrapper, TERMed by SLURM, then
    records its end as ``cancelled``."""
    with tempfile.TemporaryDirectory(prefix="eps-cancel-") as local:
        with open(os.path.join(local, LAYOUT.cancel), "wb"):
            pass
        return upload_files(remote, local, [LAYOUT.cancel], root, patience=patience, runner=runner)


def started_since(remote: Remote, dispatch_dir: str, since: float) -> Result[bool, RemoteFailure]:
    """Whether a run in one of the dispatch's roots under ``dispatch_dir`` wrote its start at
    or after ``since`` (epoch seconds): a job submitted then ran.  ``False`` when none did, or
    the directory is not there."""
    includes = ["/*/", f"/*/{LAYOUT.started_at}"]
    with tempfile.TemporaryDirectory(prefix="eps-history-") as local:
        got = download_matching(remote, dispatch_dir, includes, local)
        if isinstance(got, Failure):
            return Failure(got.failure())
        for leaf in sorted(os.listdir(local)):
            started = read_record(os.path.join(local, leaf)).started_at
            if started is not None and started >= since:
                return Success(True)
        return Success(False)


def _head(path: str) -> str:
    """The first bytes of the regular file ``path`` (never through a link); "" when absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as fh:
        return fh.read(_RECORD_BYTES).decode(errors="replace").strip()


def _hand_on(path: str, offset: int, sink: Callable[[bytes], None]) -> int:
    """What ``path`` holds after ``offset``, to ``sink`` a chunk at a time; the new offset."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return offset
    with os.fdopen(fd, "rb") as fh:
        fh.seek(offset)
        while chunk := fh.read(1 << 20):
            sink(chunk)
            offset += len(chunk)
    return offset
