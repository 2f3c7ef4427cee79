"""The commands of a job's life after it started: ``eps logs``, ``eps pull``, ``eps wait``,
``eps ssh``, and the parts of ``eps execute`` that ship a job (``--workdir``, ``--setup``,
``--env``, ``--time-limit``) and wait for it (``--wait``, ``--follow``).

How a command is run (stated in ``eps execute --help`` and CLAUDE.md): one argument after
``--`` is a shell line, run through ``bash -lc`` (pipes, ``&&``, globs work); several
arguments are an argv, run as is.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from returns.result import Failure, Success

from eps.core.jobscript import LAYOUT
from eps.core.lifecycle import exit_status, result_word
from eps.core.model import Job, JobError, evolve
from eps.core.states import DispatchState

if TYPE_CHECKING:
    from eps.shell.cli.progress import Reporter
    from eps.shell.lanes import Lanes
    from eps.shell.lanes.jobs import JobFiles
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
    cannot read, is one line."""
    from eps.shell.lanes.jobs import select_files

    selected = select_files(job, values)
    if isinstance(selected, Failure):
        raise JobError("workdir", selected.failure().message, job)
    files: JobFiles = selected.unwrap()
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


#: ``eps wait`` looks at most this far apart (it starts at ``[jobs] wait_poll_s``).
WAIT_POLL_MAX_S = 30.0
#: ... and asks the providers at least this often (sooner when a record cannot be read).
WAIT_RECONCILE_S = 60.0


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
) -> int:
    """Block until every job of ``dispatch`` has ended; pull each one's outputs, release its
    machine, and return the exit status: the job's own code (one job), else 0 only when
    every copy succeeded.

    It looks every ``poll_s`` at first, then less and less often (x1.5 a round, up to 15 x
    ``poll_s`` and at most :data:`WAIT_POLL_MAX_S`): a job of hours is not asked over ssh
    every two seconds.  The
    providers are asked (reconcile) when a job's record could not be read, and otherwise
    at most every :data:`WAIT_RECONCILE_S`."""
    from eps.shell.state.finish import Finisher
    from eps.shell.state.reconcile import Reconciler

    finisher = Finisher(ledger, lanes)
    ids = [r.id for r in rows_of(ledger, dispatch)]
    pending = set(ids)
    followed: set[str] = set()
    interval = poll_s
    reconciled_at = clock()
    while pending:
        unread = False
        for d in sorted(pending):
            row = ledger.dispatch(d)
            if row is None:
                pending.discard(d)
                continue
            if row.state is DispatchState.STARTED and row.handle is not None:
                if follow is not None and d not in followed:
                    followed.add(d)
                    follow(row)
                progress = finisher.progress(row).value_or(None)
                unread = unread or progress is None
                if progress is not None and progress.ended:
                    with ledger.owning(d) as owned:
                        if owned:
                            note = finisher.finish(row)
                            reporter.emit("ended", dispatch=d, message=note)
                if (fresh := ledger.dispatch(d)) is not None and fresh.state is not DispatchState.STARTED:
                    pending.discard(d)
            elif row.state in (DispatchState.WALKING, DispatchState.HELD, DispatchState.INTERRUPTED):
                pass  # a walk (or a queue) is still deciding; the next round looks again
            else:
                pending.discard(d)
        if pending and (unread or clock() - reconciled_at >= WAIT_RECONCILE_S):
            # a machine that vanished, a job that left, a walk that settled
            Reconciler(ledger, lanes, reporter).reconcile(set(pending))
            reconciled_at = clock()
            pending = {d for d in pending if (r := ledger.dispatch(d)) is not None and _unsettled(r)}
        if pending:
            sleep(interval)
            interval = min(interval * 1.5, max(poll_s, min(WAIT_POLL_MAX_S, poll_s * 15)))
    rows = [r for r in (ledger.dispatch(d) for d in ids) if r is not None]
    return _exit_of(rows)


def _unsettled(row: DispatchRow) -> bool:
    return row.state in (DispatchState.STARTED, DispatchState.WALKING, DispatchState.HELD, DispatchState.INTERRUPTED)


def _exit_of(rows: Sequence[DispatchRow]) -> int:
    unpulled = [r for r in rows if _not_pulled(r)]
    for r in unpulled:
        sys.stderr.write(f"eps: {r.id}: {r.message}\n")
    if len(rows) == 1:
        r = rows[0]
        code = exit_status(r.state, r.job_status, r.exit_code)
        return code if code != 0 or not unpulled else 1
    failed = [r for r in rows if exit_status(r.state, r.job_status, r.exit_code) != 0]
    for r in failed:
        sys.stderr.write(f"eps: {r.id}: {result_word(r.state, r.job_status, r.exit_code)}\n")
    return 1 if failed or unpulled else 0


def _not_pulled(row: DispatchRow) -> bool:
    """The job ended and its end was read, but its outputs did not come back (the pull
    failed; its machine is kept for ``eps pull``): waiting did not succeed."""
    return row.state is DispatchState.ENDED and row.job_status is not None and row.pulled_at is None


# --- logs, pull, ssh -----------------------------------------------------------------------------


def logs(ledger: Ledger, lanes: Lanes, dispatch: str, *, follow: bool, out: Any = None) -> int:
    """The job's log: live from its machine while it runs (``follow``: until it ends), else
    the whole log kept when it was pulled."""
    from eps.shell.lanes import jobs as J
    from eps.shell.state.finish import Finisher

    sink_file: Any = out if out is not None else _ByteSink(sys.stdout)
    finisher = Finisher(ledger, lanes)
    for row in rows_of(ledger, dispatch):
        kept = finisher.log_path(row.id)
        if row.state is not DispatchState.STARTED and os.path.exists(kept):
            with open(kept, "rb") as fh:
                sink_file.write(fh.read())
            continue
        site = finisher.site(row)
        if isinstance(site, Failure):
            raise JobError("logs", f"{row.id}: no log yet ({row.state.value}): {site.failure().message}", None)
        if follow:
            J.follow(site.unwrap(), sink_file.write)
        else:
            import shlex

            from eps.shell.remote.ssh import check_remote

            log = shlex.quote(LAYOUT.under(site.unwrap().root).log)
            text = check_remote(site.unwrap().remote, f"cat -- {log} 2>/dev/null || true", f"the log of {row.id}")
            match text:
                case Success(content):
                    sink_file.write(content.encode())
                case Failure(f):
                    raise JobError("logs", f"{row.id}: {f.message}", None)
        sink_file.flush()
    return 0


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
    fan-out in its own subdirectory).  Refused (exit 2) before the job has ended."""
    from eps.shell.state.finish import Finisher

    finisher = Finisher(ledger, lanes)
    rows = rows_of(ledger, dispatch)
    fanned = len(rows) > 1 or rows[0].id != dispatch
    for row in rows:
        if row.pulled_at is not None and to is None:
            continue
        progress = finisher.progress(row).value_or(None) if row.handle is not None else None
        if row.state is DispatchState.STARTED and (progress is None or not progress.ended):
            raise JobError("pull", f"{row.id} has not ended yet (eps wait {dispatch}, or eps logs -f)", None)
        target = None if to is None else (os.path.join(to, row.id) if fanned else to)
        pulled, note, _ = finisher.collect(row, target)
        if not pulled:
            raise JobError("pull", f"{row.id}: {note}", None)
        if to is None and row.state is not DispatchState.STARTED:
            # what a failed pull had kept the machine for is back: it can go now
            err = finisher.release_kept(row)
            if err is not None:
                note += f"; {err}"
        sys.stdout.write(f"{row.id}: {note}\n")
    return 0


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
