"""How a job ships, as every front door gives it (flags and a job file, keyword arguments,
MCP tool arguments): its workdir, setup line, ``--env`` names and time limit, checked
before anything happens, and the files it ships, listed.

How a command is run (stated in ``eps execute --help`` and CLAUDE.md): one argument after
``--`` is a shell line, run through ``bash -lc`` (pipes, ``&&``, globs work); several
arguments are an argv, run as is.
"""

from __future__ import annotations

import os
import sys

from eps.core.model import Job, JobError, evolve
from eps.core.records import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from eps.shell.lanes.jobs import JobFiles


class Shipping(NamedTuple):
    """The execute-only parts of a job as a front door got them: ``workdir`` (shipped to the
    machine), ``setup`` (a shell line run first), ``env`` (``KEY`` or ``KEY=VALUE``),
    ``time_limit`` (a duration's text, or seconds)."""

    workdir: str | None = None
    setup: str | None = None
    env: tuple[str, ...] = ()
    time_limit: str | int | None = None
    storage: str | None = None  # a URL, "none" (not for this job), or None (the config's [storage] url)
    inputs: tuple[str, ...] = ()  # URL[:DEST]


def job_options(job: Job, shipping: Shipping, env: Mapping[str, str]) -> tuple[Job, dict[str, str]]:
    """The execute-only parts of the job, checked: the workdir exists and is a readable
    directory, every ``--env KEY`` has a value (``env``: where a bare ``KEY`` takes it from),
    the time limit parses (a text) and is positive.  Returns the job and the values of its
    ``--env`` names (kept out of the job record)."""
    from eps.core.durations import parse_duration

    given_workdir, setup, env_items, given_limit, storage, inputs = shipping
    _check_storage(job, storage, inputs)
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
    limit = given_limit if isinstance(given_limit, int) else None
    if isinstance(given_limit, str):
        try:
            limit = parse_duration(given_limit)
        except ValueError as exc:
            raise JobError("time_limit", f"--time-limit: {exc}", job) from None
        if limit <= 0:
            raise JobError("time_limit", "--time-limit must be positive", job)
    if setup is not None and not setup.strip():
        raise JobError("setup", "--setup is empty", job)
    job = evolve(job, workdir=workdir, setup=setup, env_names=tuple(values), time_limit_s=limit, storage=storage,
                 inputs=tuple(inputs))  # fmt: skip
    if job.command:  # no command at all is Walker.check's to say
        _check_wrapper(job, values)
    return job, values


def _check_storage(job: Job, storage: str | None, inputs: tuple[str, ...]) -> None:
    """``--storage`` is a URL eps can store to (or ``none``); each ``--input`` is one it can read."""
    from eps.core.storage import StorageError, inputs_of, parse_url

    try:
        if storage is not None and storage != "none":
            parse_url(storage, "--storage")
        inputs_of(inputs)
    except StorageError as exc:
        raise JobError("storage", str(exc), job) from None


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


def check_files(job: Job, values: Mapping[str, str], err: Callable[[str], object] | None = None) -> JobFiles:
    """The files the job ships, listed now: a workdir over the size limit, or with a file eps
    cannot read, is one line; what was left out besides the ignore rules' choice (links out
    of the tree, special files, eps state directories) is said in one line on stderr."""
    from returns.result import Failure

    from eps.shell.lanes.jobs import select_files

    selected = select_files(job, values)
    if isinstance(selected, Failure):
        raise JobError("workdir", selected.failure().message, job)
    files: JobFiles = selected.unwrap()
    if files.workdir is not None and (note := files.workdir.left_out()) is not None:
        (err or sys.stderr.write)(f"eps: note: {note}\n")
    return files
