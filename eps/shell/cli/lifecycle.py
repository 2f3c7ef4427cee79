"""The commands of a job's life after it started: ``eps logs``, ``eps pull``, ``eps wait``,
``eps ssh``, and the parts of ``eps execute`` that ship a job (``--workdir``, ``--setup``,
``--env``, ``--time-limit``) and wait for it (``--wait``, ``--follow``).

How a command is run (stated in ``eps execute --help`` and CLAUDE.md): one argument after
``--`` is a shell line, run through ``bash -lc`` (pipes, ``&&``, globs work); several
arguments are an argv, run as is.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from returns.result import Failure, Success

from eps.core.jobscript import LAYOUT
from eps.core.lifecycle import result_word
from eps.core.model import Job, JobError, evolve
from eps.core.states import DispatchState

if TYPE_CHECKING:
    from eps.shell.cli.progress import Reporter
    from eps.shell.lanes import Lanes
    from eps.shell.lanes.jobs import JobFiles
    from eps.shell.state.finish import Finisher
    from eps.shell.state.ledger import DispatchRow, Ledger


def job_options(ns: argparse.Namespace, job: Job, env: Mapping[str, str]) -> tuple[Job, dict[str, str]]:
    """The execute-only parts of the job (flags, else the job file's), checked: the workdir
    exists and is a readable directory, every ``--env KEY`` has a value, the time limit
    parses.  Returns the job and the values of its ``--env`` names (kept out of the job record)."""
    from eps.core.durations import parse_duration

    from_file = getattr(ns, "job_file", None)
    given_workdir = ns.workdir if ns.workdir is not None else (from_file.workdir if from_file else None)
    setup = ns.setup if ns.setup is not None else (from_file.setup if from_file else None)
    env_items = ns.env if ns.env is not None else list(from_file.env or ()) if from_file else []
    workdir = None
    if given_workdir is not None and not given_workdir.strip():
        raise JobError("workdir", "--workdir is empty (give a directory; . is this one)", job)
    if given_workdir is not None:
        workdir = os.path.abspath(os.path.expanduser(given_workdir))
        if not os.path.isdir(workdir):
            raise JobError("workdir", f"--workdir {given_workdir}: no such directory", job)
        if not os.access(workdir, os.R_OK | os.X_OK):
            raise JobError("workdir", f"--workdir {given_workdir}: not readable", job)
    values: dict[str, str] = {}
    for item in env_items:
        name, sep, value = item.partition("=")
        if not name.isidentifier() or not name.isascii():
            raise JobError("env", f"--env {name!r}: not a variable name", job)
        if name in values:
            raise JobError("env", f"--env {name} is given twice (give each name once)", job)
        if not sep:
            if name not in env:
                raise JobError("env", f"--env {name}: not set in your environment (give --env {name}=VALUE)", job)
            value = env[name]
        values[name] = value
    limit = from_file.time_limit_s if from_file is not None else None
    if ns.time_limit is not None:
        try:
            limit = parse_duration(ns.time_limit)
        except ValueError as exc:
            raise JobError("time_limit", f"--time-limit: {exc}", job) from None
        if limit <= 0:
            raise JobError("time_limit", "--time-limit must be positive", job)
    if setup is not None and not setup.strip():
        raise JobError("setup", "--setup is empty", job)
    job = evolve(job, workdir=workdir, setup=setup, env_names=tuple(values), time_limit_s=limit)
    if job.command:  # no command at all is Walker.check's to say
        _check_wrapper(job, values)
    return job, values


def _check_wrapper(job: Job, values: Mapping[str, str]) -> None:
    """What the job wrapper would refuse on the machine (after it was made), refused now:
    a blank shell line, a name eps or its wrapper sets, a NUL byte."""
    from eps.core.jobscript import JobScriptError, check_spec
    from eps.core.lifecycle import job_spec

    try:
        check_spec(job_spec(job, "check"), values)  # the real dispatch id is checked by Walker.check
    except JobScriptError as exc:
        if exc.field == "environment name":
            raise JobError("env", f"--env {exc.value}: {exc.why}", job) from None
        if exc.field == "setup":
            raise JobError("setup", f"--setup {exc.value!r} {exc.why}", job) from None
        raise JobError("command", f"the {exc.field} {exc.value!r} {exc.why}", job) from None


def check_files(job: Job, values: Mapping[str, str]) -> JobFiles:
    """The files the job ships, listed now: a workdir over the size limit, or with a file eps
    cannot read, is one line; what was left out besides the ignore rules' choice (links out
    of the tree, special files, eps state directories) is said in one line on stderr."""
    from eps.shell.lanes.jobs import select_files

    selected = select_files(job, values)
    if isinstance(selected, Failure):
        raise JobError("workdir", selected.failure().message, job)
    files: JobFiles = selected.unwrap()
    if files.workdir is not None and (note := files.workdir.left_out()) is not None:
        sys.stderr.write(f"eps: note: {note}\n")
    return files


# --- the dispatches a command is about ----------------------------------------------------------


def rows_of(ledger: Ledger, dispatch: str) -> list[DispatchRow]:
    """The dispatch, or the copies of a ``--count`` parent."""
    row = ledger.dispatch(dispatch)
    if row is None:
        raise JobError("unknown_dispatch", f"no dispatch {dispatch!r} in the ledger", None)
    children = ledger.children(dispatch)
    return children or [row]


# --- wait ------------------------------------------------------------------------------------


def wait(
    ledger: Ledger,
    lanes: Lanes,
    reporter: Reporter,
    dispatch: str,
    *,
    poll_s: float = 2.0,
    follow: Callable[[DispatchRow], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    until: float | None = None,
) -> int | None:
    """Block until every job of ``dispatch`` has ended (where no supervisor does it: this
    process pulls each one's outputs and releases its machine); the exit status: the job's
    own code (one job), else 0 only when every copy succeeded.  ``None``: the monotonic
    time ``until`` came first."""
    from eps.shell.state.follow import exit_of, follow_to_end

    ids = [r.id for r in rows_of(ledger, dispatch)]
    done = follow_to_end(ledger, lanes, reporter, ids, poll_s=poll_s, follow=follow, sleep=sleep, clock=clock,
                         until=until)  # fmt: skip
    if not done:
        return None
    rows = [r for r in (ledger.dispatch(d) for d in ids) if r is not None]
    return exit_of(rows, sys.stderr.write)


# --- logs, pull, ssh -----------------------------------------------------------------------------


def logs(ledger: Ledger, lanes: Lanes, dispatch: str, *, follow: bool, out: Any = None) -> int:
    """The job's log: live from its machine while it runs (``follow``: until it ends), else
    the whole log kept when it was pulled.  Bytes pass through as they are, a chunk at a
    time (a log of any size, binary or not, in little memory).  Nothing is read through a
    symlink: a kept log that is not a regular file is refused in one line, and the live
    log is read only while it is not a link (the job could plant one)."""
    from eps.shell.lanes import jobs as J
    from eps.shell.state.finish import Finisher

    sink_file: Any = out if out is not None else _ByteSink(sys.stdout)
    finisher = Finisher(ledger, lanes)
    for row in rows_of(ledger, dispatch):
        kept = finisher.log_path(row.id)
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


#: ``eps logs`` hands a log on in pieces of this size.
_CHUNK = 1 << 20


def _copy_kept(path: str, write: Callable[[bytes], None], dispatch: str) -> None:
    """Hand the regular file at ``path`` to ``write`` a chunk at a time, never through a
    link (``O_NOFOLLOW``) and never anything but a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        why = "is a symlink" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
        raise JobError("logs", f"{dispatch}: the log {path} {why}; not shown", None) from None
    with os.fdopen(fd, "rb", buffering=0) as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise JobError("logs", f"{dispatch}: the log {path} is not a regular file; not shown", None)
        while chunk := fh.read(_CHUNK):
            write(chunk)


class _ByteSink:
    """Bytes to a text stream: its binary buffer when it has one (a terminal, a pipe)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.buffer = getattr(stream, "buffer", None)

    def write(self, data: bytes) -> None:
        if self.buffer is not None:
            self.buffer.write(data)
        else:
            self.stream.write(data.decode("utf-8", errors="replace"))

    def flush(self) -> None:
        (self.buffer or self.stream).flush()


def pull(ledger: Ledger, lanes: Lanes, dispatch: str, to: str | None) -> int:
    """Copy the outputs back (``<state>/outputs/<dispatch>`` or ``--to``; each copy of a
    fan-out in its own subdirectory).  Refused (exit 2) before the job has ended, and when
    ``--to`` names something that is not a directory or cannot be made one.  ``--to`` gets
    exactly what the job wrote to ``$EPS_OUTPUT_DIR`` (an output named ``job.log`` too); the
    whole log is kept in the state dir either way (``eps logs``)."""
    from eps.shell.lanes import jobs as J
    from eps.shell.state.finish import Finisher

    finisher = Finisher(ledger, lanes)
    rows = rows_of(ledger, dispatch)
    if to is not None and os.path.lexists(to) and not os.path.isdir(to):
        raise JobError("pull", f"--to {to}: exists and is not a directory", None)
    fanned = len(rows) > 1 or rows[0].id != dispatch
    rows = [r for r in rows if r.pulled_at is None or to is not None]
    woken: set[str] = set()  # started, but their machine's watcher stopped it: started again here
    for row in rows:
        progress = finisher.progress(row).value_or(None) if row.handle is not None else None
        if row.state is DispatchState.STARTED and progress is None and finisher.stopped(row):
            woken.add(row.id)
        elif row.state is DispatchState.STARTED and (progress is None or not progress.ended):
            raise JobError("pull", f"{row.id} has not ended yet (eps wait {dispatch}, or eps logs -f)", None)
    if to is not None and rows:
        to = _pull_target(to)
    for row in rows:
        if to is None and row.id in woken:  # start it, pull, release it: the dispatch is over
            with ledger.owning(row.id) as owned:
                if not owned:
                    raise JobError("pull", f"{row.id} is being finished by its supervisor (eps wait {row.id})", None)
                got = finisher.collect(row, wake=True)
                pulled, note = got.pulled, finisher.end_with(row, got)
        elif to is None:
            pulled, note, _ = finisher.collect(row, wake=True)
        else:
            pulled, note = _pull_to(finisher, row, os.path.join(to, row.id) if fanned else to)
        if not pulled:
            raise JobError("pull", f"{row.id}: {note}", None)
        if to is None and row.state is not DispatchState.STARTED:
            # what a failed pull had kept the machine for is back: it can go now
            err = finisher.release_kept(row)
            if err is not None:
                note += f"; {err}"
        sys.stdout.write(f"{row.id}: {note}\n")
    J.drop_settled_env_values(ledger)
    return 0


def _pull_target(to: str) -> str:
    """``--to``, made (absolute) when it is not there yet; one line when it cannot be."""
    target = os.path.abspath(os.path.expanduser(to))
    if not to.strip():
        raise JobError("pull", "--to is empty", None)
    if os.path.lexists(target) and not os.path.isdir(target):
        raise JobError("pull", f"--to {to}: exists and is not a directory", None)
    try:
        os.makedirs(target, exist_ok=True)
    except OSError as exc:
        raise JobError("pull", f"--to {to}: cannot create it: {exc.strerror or exc}", None) from None
    if not os.access(target, os.W_OK | os.X_OK):
        raise JobError("pull", f"--to {to}: not writable", None)
    return target


def _pull_to(finisher: Finisher, row: DispatchRow, out: str) -> tuple[bool, str]:
    """``eps pull --to``: the outputs into ``out``, the whole log into the state dir (where
    ``eps logs`` reads it), the job's end recorded; the dispatch is not marked pulled."""
    from eps.shell.lanes import jobs as J

    if row.handle is None:
        return False, "nothing ran"
    match finisher.look(row, wake=True):
        case Failure(why):
            return False, why
        case Success((site, progress)):
            pass
    if progress.ended:
        finisher.ledger.record_end(row.id, progress.exit_code, progress.status, float(progress.ended_at or time.time()))
    if not progress.exists:
        return False, "the job never started on its machine (nothing to pull)"
    match J.pull(site, out, finisher.log_path(row.id)):
        case Failure(f):
            return False, f"outputs not pulled: {f.message}"
    word = result_word(DispatchState.ENDED, progress.status, progress.exit_code) if progress.ended else "running"
    return True, f"{word}; outputs in {out}; log: eps logs {row.id}"


def ssh_argv(ledger: Ledger, lanes: Lanes, dispatch: str, command: Sequence[str]) -> list[str]:
    """The argv of ``eps ssh``: a shell (or ``command``) in the job's workdir, where it runs."""
    import shlex

    from eps.shell.remote.ssh import remote_argv, shell_argv
    from eps.shell.state.finish import Finisher

    row = rows_of(ledger, dispatch)[0]
    if row.handle is None or row.state is not DispatchState.STARTED:
        raise JobError("ssh", f"{row.id} is {row.state.value}: no machine to open a shell on", None)
    site = Finisher(ledger, lanes).site(row)
    if isinstance(site, Failure):
        raise JobError("ssh", f"{row.id}: {site.failure().message}", None)
    where = site.unwrap()
    workdir = LAYOUT.under(where.root).workdir
    step = lanes.get(row.handle.lane).shell_inner(row.handle) or []
    if command:
        run = shlex.join(command) if len(command) > 1 else command[0]
        line = shlex.join([*step, "bash", "-lc", f"cd {shlex.quote(workdir)} && {run}"]) if step else (
            f"cd {shlex.quote(workdir)} && {run}")  # fmt: skip
        return remote_argv(where.remote, line)
    return shell_argv(where.remote, workdir, [*step, "--pty", "bash", "-l"] if step else None)
