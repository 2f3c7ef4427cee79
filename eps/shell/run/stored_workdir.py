"""A job's workdir kept in its storage for a team's takeover (issue 37; docs/design/team.md).

On a team's ledger a job with ``storage`` has its selected workdir (the files its machine
would get, after the ignore rules) copied to ``<prefix>/<dispatch>/inputs/work/`` when it is
executed (:func:`put_workdir`, the executing host's own credentials).  A host that takes the
dispatch over and must launch it without the workdir fetches that copy into its own state
directory (``<state>/workdirs/<dispatch>``) and ships it from there (:func:`files_of`).
``--env`` values are secrets: they never go to storage; a takeover without them launches
only from a complete stage (:mod:`eps.core.inputs`), else fails naming their names.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping

from attrs import evolve as evolve_files
from returns.result import Result, Success

from eps.core.model import Job, evolve
from eps.core.outcome import LaneFailure
from eps.core.storage import StorageError, parse_url, rclone_config
from eps.shell.config.storage import StorageSettings
from eps.shell.lanes.jobs import JobFiles, files_for
from eps.shell.run.storage import local_conf, rclone, remotes, said, schemes_of
from eps.shell.state.ledger import Ledger

#: Where under a dispatch's storage its workdir is kept (beside its tasks' ``<task>/``).
WORKDIR_AT = ("inputs", "work")
#: Where in its state directory a taking host keeps a fetched workdir (``<FETCHED>/<dispatch>``,
#: removed with the dispatch's kept values when it is over: jobs.drop_env_values).
FETCHED = "workdirs"
#: How long a copy of a workdir to or from storage may take.
COPY_TIMEOUT_S = 1800.0


def put_workdir(state_dir: str, job: Job, dispatch: str, files: JobFiles, settings: StorageSettings | None,
                env: Mapping[str, str]) -> None:  # fmt: skip
    """The selected workdir's files to the dispatch's storage (:class:`StorageError` when
    that fails); nothing when the job has no storage or no workdir."""
    if not job.storage or files.workdir is None:
        return
    url = parse_url(job.storage)
    with local_conf(state_dir, [url.scheme], settings, env) as conf:
        fd, listing = tempfile.mkstemp(prefix=".files-", dir=state_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.writelines(f"{name}\n" for name in files.workdir.files)
            done = rclone(conf, "copy", "--files-from-raw", listing, files.workdir.root,
                          url.remote(dispatch, *WORKDIR_AT), timeout_s=COPY_TIMEOUT_S)  # fmt: skip
        finally:
            with contextlib.suppress(OSError):
                os.unlink(listing)
    if done.returncode != 0:
        raise StorageError(f"cannot keep the workdir in {url.url(dispatch, *WORKDIR_AT)}: {said(done.stderr)}")


def files_of(ledger: Ledger, dispatch: str, parent: str | None, job: Job, settings: StorageSettings | None,
             env: Mapping[str, str]) -> Result[JobFiles, LaneFailure]:  # fmt: skip
    """:func:`~eps.shell.lanes.jobs.files_for`; and when the workdir stayed on the host that
    started the dispatch and the job has storage, the workdir fetched from it (the files
    then say only what else stayed there: ``--env`` values).  A takeover's machine gets its
    rclone.conf from this host's own credentials (the starting host kept its own with the
    dispatch's values)."""
    got = files_for(ledger, dispatch, parent, job)
    match got:
        case Success(JobFiles(elsewhere=away)) if away is not None and away.workdir is not None and job.storage:
            root = parent or dispatch
            local = os.path.join(ledger.state_dir, FETCHED, root)
            if os.path.isdir(local) or _fetch(ledger.state_dir, job.storage, root, local, settings, env):
                got = files_for(ledger, dispatch, parent, evolve(job, workdir=local))
    match got:
        case Success(files) if files.storage_conf is None and ledger.shared and (schemes := schemes_of(job)):
            with contextlib.suppress(StorageError):  # none: the machine stores nothing, as before
                conf = rclone_config(remotes(schemes, settings or StorageSettings(), env, machine=True))
                return Success(evolve_files(files, storage_conf=conf))
    return got


def _fetch(state_dir: str, storage: str, dispatch: str, local: str, settings: StorageSettings | None,
           env: Mapping[str, str]) -> bool:  # fmt: skip
    """The dispatch's kept workdir into ``local`` (whole, or not at all: fetched beside it
    under a name of its own, then renamed; the copies of a fan-out may fetch at once, and
    the first rename wins); whether it is there."""
    url = parse_url(storage)
    os.makedirs(os.path.dirname(local), mode=0o700, exist_ok=True)
    part = tempfile.mkdtemp(prefix=f".{os.path.basename(local)}-", dir=os.path.dirname(local))
    try:
        with local_conf(state_dir, [url.scheme], settings, env) as conf:
            done = rclone(conf, "copy", url.remote(dispatch, *WORKDIR_AT), part, timeout_s=COPY_TIMEOUT_S)
        if done.returncode == 0 and os.listdir(part):
            with contextlib.suppress(OSError):  # another copy's fetch got there first
                os.rename(part, local)
    except StorageError:
        pass
    finally:
        shutil.rmtree(part, ignore_errors=True)
    return os.path.isdir(local)
