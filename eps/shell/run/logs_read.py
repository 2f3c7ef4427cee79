"""A bounded piece of a job's log, for callers that must not hold a log of any size: the
``logs`` operation of :mod:`eps.shell.service.operations` (the MCP server's ``logs`` tool, the Python
API).  ``eps logs`` itself streams the whole log (:mod:`eps.shell.service.lifecycle`).

A piece is at most ``max_bytes`` from byte ``offset``, or the last ``tail_lines`` lines
within ``max_bytes``; it says the log's size now and the offset to continue from, so a
reader keeps its own offset (as ``tail -F`` does).  The log is read where ``eps logs``
reads it: the copy kept in the state directory once the job was pulled, else live on its
machine (a local file, or ``tail -c`` over ssh).  Nothing is read through a symlink.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, BinaryIO

from returns.result import Failure

from eps.core.jobscript import LAYOUT
from eps.core.model import JobError
from eps.core.states import DispatchState

if TYPE_CHECKING:
    from eps.shell.lanes import Lanes
    from eps.shell.lanes.jobs import Site
    from eps.shell.remote.ssh import Remote
    from eps.shell.state.ledger import DispatchRow, Ledger


def task_row(ledger: Ledger, dispatch: str, task: int) -> DispatchRow:
    """Task ``task`` of the sweep ``dispatch`` (row ``copy_id(dispatch, task + 1)``); a task
    out of range, or a dispatch that is not a sweep: one line (``JobError``, exit 2)."""
    from eps.core.names import copy_id

    row = ledger.dispatch(dispatch)
    if row is None:
        raise JobError("unknown_dispatch", f"no dispatch {dispatch!r} in the ledger", None)
    if isinstance(task, bool) or not isinstance(task, int):
        raise JobError("usage", f"task must be a whole number, got {task!r}", None)
    n = row.job.sweep if row.parent is None else 1
    if n <= 1:
        raise JobError("usage", f"--task {task}: {dispatch} is not a sweep (no tasks to pick from)", None)
    if not 0 <= task < n:
        raise JobError("usage", f"--task {task}: sweep {dispatch} has tasks 0..{n - 1}", None)
    child = ledger.dispatch(copy_id(dispatch, task + 1))
    if child is None:
        raise JobError("unknown_dispatch", f"sweep {dispatch} has no row for task {task} in the ledger", None)
    return child


def log_rows(ledger: Ledger, dispatch: str, task: int | None = None) -> tuple[list[DispatchRow], str | None]:
    """Whose log ``eps logs dispatch [--task I]`` reads, and a note for the reader (or
    ``None``): a sweep's task ``task`` (:func:`task_row`); a sweep named alone: task 0, the
    note saying so and how to pick another; anything else: the dispatch, or each copy of a
    ``--count`` fan-out."""
    from eps.shell.run.follow import rows_of

    if task is not None:
        return [task_row(ledger, dispatch, task)], None
    rows = rows_of(ledger, dispatch)
    row = ledger.dispatch(dispatch)
    if row is None or row.parent is not None or row.job.sweep <= 1:
        return rows, None
    n = row.job.sweep
    note = f"{dispatch} is a sweep of {n} tasks: this is task 0's log; eps logs {dispatch} --task I (0..{n - 1}) " \
        "for another"
    return [task_row(ledger, dispatch, 0)], note


def read_piece(ledger: Ledger, lanes: Lanes, row: DispatchRow, offset: int, max_bytes: int,
               tail_lines: int | None) -> dict[str, Any]:  # fmt: skip
    """One job's piece of log: ``{dispatch, state, source, size, offset, next_offset, text,
    note}``; ``source`` is ``kept``, ``live`` or ``none`` (no log yet: ``note`` says why)."""
    from eps.shell.run.finish import Finisher

    finisher = Finisher(ledger, lanes)
    kept = finisher.log_path(row.id)
    note = None
    if row.state is not DispatchState.STARTED and row.job.storage and not os.path.lexists(kept):
        from eps.shell.run.stored import fetch_log

        fetch_log(lanes, row, kept)  # its machine put it there (and may be gone)
    if row.state is not DispatchState.STARTED and os.path.lexists(kept):
        source = "kept"
        size, start, data = _local(kept, offset, max_bytes, tail_lines, row.id)
    else:
        site = finisher.site(row)
        if isinstance(site, Failure):
            source, size, start, data = "none", 0, 0, b""
            note = f"no log yet ({row.state.value}): {site.failure().message}"
        else:
            source = "live"
            where = site.unwrap()
            log = LAYOUT.under(where.root).log
            if where.remote.robot:  # no shell through a robot login: the log comes by rsync
                size, start, data = _fetched(where, offset, max_bytes, tail_lines, row.id)
            elif not where.remote.is_local:
                size, start, data = _remote(where.remote, log, offset, max_bytes, tail_lines, row.id)
            elif os.path.lexists(log):
                size, start, data = _local(log, offset, max_bytes, tail_lines, row.id)
            else:
                size, start, data = 0, 0, b""
    return {
        "dispatch": row.id,
        "state": row.state.value,
        "source": source,
        "size": max(size, start + len(data)),
        "offset": start,
        "next_offset": start + len(data),
        "text": data.decode("utf-8", errors="replace"),
        "note": note,
    }


def _window(size: int, offset: int, max_bytes: int, tail_lines: int | None) -> int:
    """Where the piece starts in a log of ``size`` bytes."""
    if tail_lines is not None:
        return max(0, size - max_bytes)
    return min(offset, size)


def _lines(data: bytes, start: int, tail_lines: int | None) -> tuple[int, bytes]:
    """The last ``tail_lines`` lines of the piece read from ``start`` (a first line the
    window cut in two is left out), and where they start."""
    if tail_lines is None:
        return start, data
    body = data[:-1] if data.endswith(b"\n") else data
    parts = body.split(b"\n")
    keep = parts[-tail_lines:]
    if start > 0 and len(keep) == len(parts) and len(parts) > 1:
        keep = keep[1:]  # the window began inside that line
    out = b"\n".join(keep) + (b"\n" if data.endswith(b"\n") and keep else b"")
    return start + len(data) - len(out), out


@contextmanager
def open_log(path: str, dispatch: str) -> Iterator[tuple[BinaryIO, int]]:
    """The regular file at ``path`` open for reading, and its size; never through a link
    (``O_NOFOLLOW``) and never anything but a regular file (one line otherwise)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        why = "is a symlink" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
        raise JobError("logs", f"{dispatch}: the log {path} {why}; not shown", None) from None
    with os.fdopen(fd, "rb", buffering=0) as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise JobError("logs", f"{dispatch}: the log {path} is not a regular file; not shown", None)
        yield fh, st.st_size


def _local(path: str, offset: int, max_bytes: int, tail_lines: int | None, dispatch: str) -> tuple[int, int, bytes]:
    """(size, start, bytes) of the regular file at ``path``, never through a link."""
    with open_log(path, dispatch) as (fh, size):
        start = _window(size, offset, max_bytes, tail_lines)
        fh.seek(start)
        data = b""
        while len(data) < max_bytes and (chunk := fh.read(max_bytes - len(data))):
            data += chunk
    start, data = _lines(data, start, tail_lines)
    return size, start, data


def _fetched(site: Site, offset: int, max_bytes: int, tail_lines: int | None, dispatch: str) -> tuple[int, int, bytes]:
    """The same through a robot login: the whole log fetched by rsync, then read here."""
    import tempfile

    from eps.shell.remote.robot import fetch_log

    with tempfile.TemporaryDirectory(prefix="eps-log-") as local:
        got = fetch_log(site.remote, site.root, local)
        if isinstance(got, Failure):
            raise JobError("logs", f"{dispatch}: {got.failure().message}", None)
        path = got.unwrap()
        return (0, 0, b"") if path is None else _local(path, offset, max_bytes, tail_lines, dispatch)


def _remote(remote: Remote, log: str, offset: int, max_bytes: int, tail_lines: int | None,
            dispatch: str) -> tuple[int, int, bytes]:  # fmt: skip
    """The same over ssh: the size on the first line, then the piece (``tail -c | head -c``)."""
    import shlex

    from eps.shell.remote.ssh import stream_remote

    q = shlex.quote(log)
    first = f"$(( S > {max_bytes} ? S - {max_bytes} + 1 : 1 ))" if tail_lines is not None else f"$(( {offset} + 1 ))"
    line = (f"if [ -f {q} ] && [ ! -L {q} ]; then S=$(wc -c < {q}); echo $S; "
            f"tail -c +{first} -- {q} | head -c {max_bytes}; else echo 0; fi 2>/dev/null; exit 0")  # fmt: skip
    got = bytearray()

    def sink(chunk: bytes) -> None:
        got.extend(chunk[: max(0, max_bytes + 32 - len(got))])

    streamed = stream_remote(remote, line, sink)
    if isinstance(streamed, Failure):
        raise JobError("logs", f"{dispatch}: {streamed.failure().message}", None)
    head, _, data = bytes(got).partition(b"\n")
    size = int(head.strip() or 0) if head.strip().isdigit() else 0
    start = _window(size, offset, max_bytes, tail_lines)
    start, data = _lines(data[:max_bytes], start, tail_lines)
    return size, start, data
