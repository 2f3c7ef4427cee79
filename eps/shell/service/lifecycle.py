"""The commands of a job's life after it started: ``eps logs`` and ``eps ssh``, and the
parts of ``eps execute`` that read how a job ships (``--workdir``, ``--setup``, ``--env``,
``--time-limit``; checked in :mod:`eps.shell.request.shipping`).  Waiting for a job, at every
door and in both modes, is :mod:`eps.shell.service.waits`.

How a command is run (stated in ``eps execute --help`` and CLAUDE.md): one argument after
``--`` is a shell line, run through ``bash -lc`` (pipes, ``&&``, globs work); several
arguments are an argv, run as is.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from returns.result import Failure

from eps.core.jobscript import LAYOUT
from eps.core.model import JobError
from eps.core.states import DispatchState

if TYPE_CHECKING:
    from typing import Protocol, TextIO

    from eps.shell.lanes import Lanes
    from eps.shell.lanes.jobs import Site
    from eps.shell.state.ledger import DispatchRow, Ledger

    class _Bytes(Protocol):
        """Where ``eps logs`` hands the bytes of a log (:class:`_ByteSink`, or a test's recorder)."""

        def write(self, data: bytes, /) -> None: ...
        def flush(self) -> None: ...


# --- the dispatches a command is about ----------------------------------------------------------


def rows_of(ledger: Ledger, dispatch: str) -> list[DispatchRow]:
    """The dispatch, or the copies of a ``--count`` parent."""
    from eps.shell.run.follow import rows_of as of

    return of(ledger, dispatch)


# --- logs, pull, ssh -----------------------------------------------------------------------------


def logs(ledger: Ledger, lanes: Lanes, dispatch: str, *, follow: bool, out: _Bytes | None = None,
         task: int | None = None) -> int:  # fmt: skip
    """The job's log: live from its machine while it runs (``follow``: until it ends), else
    the whole log kept when it was pulled.  Bytes pass through as they are, a chunk at a
    time (a log of any size, binary or not, in little memory).  Nothing is read through a
    symlink: a kept log that is not a regular file is refused in one line, and the live
    log is read only while it is not a link (the job could plant one).  A sweep: task
    ``task``'s log (none given: task 0's, and a line on stderr saying so)."""
    from eps.shell.lanes import jobs as J
    from eps.shell.run.finish import Finisher
    from eps.shell.run.logs_read import log_rows

    rows, note = log_rows(ledger, dispatch, task)
    if note is not None:
        sys.stderr.write(f"eps: {note}\n")
        sys.stderr.flush()
    sink_file: _Bytes = out if out is not None else _ByteSink(sys.stdout)
    finisher = Finisher(ledger, lanes)
    for row in rows:
        kept = finisher.log_path(row.id)
        if row.state is not DispatchState.STARTED and row.job.storage and not os.path.lexists(kept):
            from eps.shell.run.stored import fetch_log

            fetch_log(lanes, row, kept)  # its machine put it there (and may be gone)
        if row.state is not DispatchState.STARTED and os.path.lexists(kept):
            _copy_kept(kept, sink_file.write, row.id)
            sink_file.flush()
            continue
        site = finisher.site(row)
        if isinstance(site, Failure):
            raise JobError("logs", f"{row.id}: no log yet ({row.state.value}): {site.failure().message}", None)
        where = site.unwrap()
        if follow:
            J.follow(where, sink_file.write)
        elif where.remote.robot:  # no cat through a robot login: the log comes by rsync
            _copy_fetched(where, sink_file.write, row.id)
        elif where.remote.is_local:
            log = LAYOUT.under(where.root).log
            if os.path.lexists(log):
                _copy_kept(log, sink_file.write, row.id)
        else:
            import shlex

            from eps.shell.remote.ssh import stream_remote

            log = shlex.quote(LAYOUT.under(where.root).log)
            line = f"if [ -f {log} ] && [ ! -L {log} ]; then cat -- {log}; fi 2>/dev/null; exit 0"
            streamed = stream_remote(where.remote, line, sink_file.write)
            if isinstance(streamed, Failure):
                raise JobError("logs", f"{row.id}: {streamed.failure().message}", None)
        sink_file.flush()
    J.drop_settled_env_values(ledger)
    return 0


def _copy_fetched(site: Site, write: Callable[[bytes], None], dispatch: str) -> None:
    """The live log of a job behind a robot login, fetched by rsync, to ``write``."""
    import tempfile

    from eps.shell.remote.robot import fetch_log

    with tempfile.TemporaryDirectory(prefix="eps-log-") as local:
        got = fetch_log(site.remote, site.root, local)
        if isinstance(got, Failure):
            raise JobError("logs", f"{dispatch}: {got.failure().message}", None)
        if (path := got.unwrap()) is not None:
            _copy_kept(path, write, dispatch)


#: ``eps logs`` hands a log on in pieces of this size.
_CHUNK = 1 << 20


def _copy_kept(path: str, write: Callable[[bytes], None], dispatch: str) -> None:
    """Hand the regular file at ``path`` to ``write`` a chunk at a time, never through a
    link (``O_NOFOLLOW``) and never anything but a regular file."""
    from eps.shell.run.logs_read import open_log

    with open_log(path, dispatch) as (fh, _):
        while chunk := fh.read(_CHUNK):
            write(chunk)


class _ByteSink:
    """Bytes to a text stream: its binary buffer when it has one (a terminal, a pipe)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.buffer = getattr(stream, "buffer", None)

    def write(self, data: bytes) -> None:
        if self.buffer is not None:
            self.buffer.write(data)
        else:
            self.stream.write(data.decode("utf-8", errors="replace"))

    def flush(self) -> None:
        (self.buffer or self.stream).flush()


def ssh_argv(ledger: Ledger, lanes: Lanes, dispatch: str, command: Sequence[str]) -> list[str]:
    """The argv of ``eps ssh``: a shell (or ``command``) in the job's workdir, where it runs."""
    import shlex

    from eps.shell.remote.ssh import remote_argv, shell_argv
    from eps.shell.run.finish import Finisher

    row = rows_of(ledger, dispatch)[0]
    if row.handle is None or row.state is not DispatchState.STARTED:
        raise JobError("ssh", f"{row.id} is {row.state.value}: no machine to open a shell on", None)
    site = Finisher(ledger, lanes).site(row)
    if isinstance(site, Failure):
        raise JobError("ssh", f"{row.id}: {site.failure().message}", None)
    where = site.unwrap()
    if where.remote.robot:
        raise JobError("ssh", f"{row.id} runs on {row.handle.lane}, reached through a robot login: it allows no "
                       "shell (only sbatch, scancel, squeue, scp, rsync); eps logs and eps pull still work", None)
    workdir = LAYOUT.under(where.root).workdir
    step = lanes.get(row.handle.lane).shell_inner(row.handle) or []
    if command:
        run = shlex.join(command) if len(command) > 1 else command[0]
        line = shlex.join([*step, "bash", "-lc", f"cd {shlex.quote(workdir)} && {run}"]) if step else (
            f"cd {shlex.quote(workdir)} && {run}")  # fmt: skip
        return remote_argv(where.remote, line)
    return shell_argv(where.remote, workdir, [*step, "--pty", "bash", "-l"] if step else None)
