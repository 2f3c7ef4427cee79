"""A job's files and life on its machine, the same for every lane: where its dispatch root
is (a :class:`Site`), shipping it (wrapper, env file, workdir), starting it detached,
reading its record, following its log, pulling its outputs, stopping it.

A lane says where the site is (this machine, the cluster's login node, a VM or pod over
ssh); everything else is here and in :mod:`eps.shell.remote`.  The job's truth is the
files its wrapper writes (:data:`eps.core.jobscript.LAYOUT`): they outlive eps.

The values of ``--env`` never enter the ledger, a log or any output: they live in a
mode-0600 file of the state directory (:func:`write_env_values`) while the dispatch
runs, and in the job's own mode-0600 ``env`` file on its machine; both go when the
dispatch is over (:func:`drop_env_values`; :func:`drop_settled_env_values` catches
what a killed eps left behind).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from attrs import evolve, frozen
from returns.result import Failure, Result, Success

from eps.core.inputs import INPUTS_LOST, Elsewhere, elsewhere
from eps.core.jobscript import LAYOUT, VM_RUNS, JobProgress, dispatch_root
from eps.core.lifecycle import job_spec
from eps.core.model import Job
from eps.core.outcome import FailureKind, LaneFailure
from eps.core.room import Disk, Incoming, Room, room_for
from eps.core.states import SETTLED_DISPATCH_STATES
from eps.core.storage import CONF_VALUE, RCLONE_BIN
from eps.shell.remote import mux
from eps.shell.remote.errors import RemoteFailure
from eps.shell.remote.job import (
    cancel_job,
    follow_log,
    job_root_files,
    probe_job,
    pull_log,
    pull_outputs,
    pull_sizes,
    reap_job,
    stage_again,
    stage_job,
    start_job,
)
from eps.shell.remote.ssh import BRIEF, Patience, Remote
from eps.shell.remote.sync import existing_ancestor, upload_files

if TYPE_CHECKING:
    from eps.shell.remote.ignore import Workdir
    from eps.shell.state.ledger import Ledger



class Site(NamedTuple):
    """Where one dispatch's job lives: the target and the dispatch root on it.  ``runs_here``:
    the job runs on the machine the site's commands reach (the VM lane, a GCP VM, a RunPod
    pod; not a SLURM login node), so whether its wrapper is alive can be seen from it."""

    remote: Remote
    root: str
    runs_here: bool = False


@frozen
class JobFiles:
    """What a job takes to its machine besides the wrapper: the workdir's file list (after
    the ignore rules) and the values of its ``--env`` names."""

    workdir: Workdir | None = None
    env: Mapping[str, str] | None = None
    outputs: str | None = None  # a relaunch: the local copy of the outputs synced so far, put back in out/
    storage_conf: str | None = None  # with storage: the machine's rclone.conf (credentials: mode 0600 only)
    # a takeover: what of the inputs stayed on the starting host (then neither workdir nor env is set)
    elsewhere: Elsewhere | None = None


def site_root(work_root: str, dispatch: str, job: Job) -> str:
    return dispatch_root(work_root, dispatch, job.task_index, job.restart)


def _lane(failure: RemoteFailure) -> LaneFailure:
    return failure.lane_failure()


def select_files(job: Job, env: Mapping[str, str] | None) -> Result[JobFiles, LaneFailure]:
    """The job's files: the workdir listed under its ignore rules and checked against the
    size limit (one line naming the biggest files when it is over)."""
    workdir = None
    if job.workdir is not None:
        from eps.shell.remote.ignore import select_workdir  # pathspec: only for a job that ships a workdir

        match select_workdir(job.workdir):
            case Failure(f):
                return Failure(_lane(f))
            case Success(listed):
                workdir = listed
        unreadable = [f for f in listed.files if not _readable(os.path.join(listed.root, f))]
        if unreadable:
            more = f" (and {len(unreadable) - 1} more)" if len(unreadable) > 1 else ""
            return Failure(
                LaneFailure(
                    FailureKind.INVALID_REQUEST,
                    f"workdir file {unreadable[0]}{more} cannot be read, so it cannot be shipped:"
                    " make it readable, or list it in .epsignore",
                )
            )
    conf = (env or {}).get(CONF_VALUE)
    return Success(JobFiles(workdir, env if job.env_names else None, storage_conf=conf))


def files_here(
    job: Job, env: Mapping[str, str] | None, *, started_host: str | None, this_host: str | None
) -> Result[JobFiles, LaneFailure]:
    """:func:`select_files`, unless this host took the dispatch over and lacks its workdir or
    an ``--env`` value: then the files say so (:attr:`JobFiles.elsewhere`), and a launch
    reuses the starting host's complete stage or fails (:mod:`eps.core.inputs`)."""
    here = job.workdir is None or os.path.isdir(job.workdir)
    away = elsewhere(job, workdir_here=here, env_here=frozenset(env or ()), started_host=started_host,
                     this_host=this_host)  # fmt: skip
    if away is None:
        return select_files(job, env)
    return Success(JobFiles(storage_conf=(env or {}).get(CONF_VALUE), elsewhere=away))


def files_for(ledger: Ledger, dispatch: str, parent: str | None, job: Job) -> Result[JobFiles, LaneFailure]:
    """The files of ``dispatch`` (a copy: its ``parent``'s values) as this host has them: its
    kept ``--env`` values, and on a team's ledger who started it (:func:`files_here`)."""
    env = read_env_values(ledger.state_dir, dispatch, *([parent] if parent else []))
    started = None
    if ledger.shared:
        from eps.shell.state.team import owners

        root = parent or dispatch
        owner = owners(ledger, [root]).get(root)
        started = owner.starter()[1] if owner is not None else None
    return files_here(job, env, started_host=started, this_host=ledger.host)


def inputs_lost(away: Elsewhere) -> LaneFailure:
    return LaneFailure(FailureKind.INVALID_REQUEST, away.lost(), code=INPUTS_LOST)


def _readable(path: str) -> bool:
    """Whether eps (and so rsync) can read the file; a symlink ships as a link."""
    if os.path.islink(path):
        return True
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return False
    os.close(fd)
    return True


def job_env(job: Job, files: JobFiles) -> Result[dict[str, str] | None, LaneFailure]:
    """The values of the job's ``--env`` names (None: it has none); a name without a value is refused."""
    if not job.env_names:
        return Success(None)
    env = dict(files.env or {})
    missing = [n for n in job.env_names if n not in env]
    if missing:
        return Failure(LaneFailure(FailureKind.INVALID_REQUEST, f"no value for --env {', '.join(missing)}"))
    return Success({n: env[n] for n in job.env_names})


def stage(
    site: Site, job: Job, dispatch: str, files: JobFiles, *, patience: Patience = BRIEF
) -> Result[None, LaneFailure]:
    """Ship the wrapper, the env file and the workdir to the site (idempotent: rsync).  A
    host lacking them (a takeover, :attr:`JobFiles.elsewhere`) writes the wrapper again into
    the complete stage another host left there, else fails (``inputs_lost``)."""
    spec = job_spec(job, dispatch)
    if files.elsewhere is not None:
        away = files.elsewhere
        again = stage_again(site.remote, site.root, spec, storage_conf=files.storage_conf, patience=patience)
        return again.alt(_lane).bind(lambda found: Success(None) if found else Failure(inputs_lost(away)))
    match job_env(job, files):
        case Failure(f):
            return Failure(f)
        case Success(env):
            pass
    done = stage_job(site.remote, site.root, spec, workdir=files.workdir, env=env, storage_conf=files.storage_conf,
                     patience=patience)  # fmt: skip
    if isinstance(done, Success) and spec.storage is not None:
        done = ship_rclone(site, patience=patience)
    if isinstance(done, Success) and files.outputs is not None and os.path.isdir(files.outputs) and not job.storage:
        return seed_outputs(site, files.outputs, patience=patience)
    return done.alt(_lane)


def ship_rclone(site: Site, *, patience: Patience = BRIEF) -> Result[None, RemoteFailure]:
    """eps's own rclone, to ``<work root>/.eps-bin/rclone`` on the site (one static binary:
    a machine image without rclone still stores; rsync skips it when it is there already).
    A machine of another architecture, or one where this one is missing, uses its own on PATH."""
    local = shutil.which("rclone")
    here = site.remote.host is None and not site.remote.login  # this machine: its own rclone is on PATH
    if local is None or site.remote.robot or here:
        return Success(None)
    local = os.path.realpath(local)
    work_root = site.root.rstrip("/").rsplit("/", 2)[0]
    return upload_files(site.remote, os.path.dirname(local), [os.path.basename(local)],
                        f"{work_root}/{os.path.dirname(RCLONE_BIN)}", patience=patience)  # fmt: skip


def wrapper_files(job: Job, dispatch: str, files: JobFiles) -> Result[list[tuple[str, bytes, int]], LaneFailure]:
    """The small files of the job's dispatch root, as ``(name, content, mode)``: the wrapper
    (0644) and, when the job has ``--env`` names, its env file (0600)."""
    if files.elsewhere is not None:  # a machine's root is its own: nothing there to launch from
        return Failure(inputs_lost(files.elsewhere))
    return job_env(job, files).map(lambda env: job_root_files(job_spec(job, dispatch), env, files.storage_conf))


def trees_to_ship(files: JobFiles, job: Job | None = None) -> bool:
    """Whether :func:`ship_trees` has anything to send (a workdir, or a relaunch's outputs
    (without storage: with it, the machine restores them itself), or eps's rclone)."""
    stored = job is not None and bool(job.storage or job.inputs)
    return files.workdir is not None or stored or (files.outputs is not None and os.path.isdir(files.outputs))


def ship_trees(site: Site, files: JobFiles, job: Job | None = None, *,
               patience: Patience = BRIEF) -> Result[None, LaneFailure]:  # fmt: skip
    """The workdir into ``work/``, eps's rclone for a job with storage, and a relaunch's
    outputs back into ``out/`` (rsync; with storage the machine restores them itself)."""
    if job is not None and (job.storage or job.inputs):
        shipped = ship_rclone(site, patience=patience)
        if isinstance(shipped, Failure):
            return shipped.alt(_lane)
        if job.storage:
            files = evolve(files, outputs=None)
    if files.workdir is not None:
        w = files.workdir
        sent = upload_files(site.remote, w.root, w.files, LAYOUT.under(site.root).workdir, patience=patience)
        if isinstance(sent, Failure):
            return sent.alt(_lane)
    if files.outputs is not None and os.path.isdir(files.outputs):
        return seed_outputs(site, files.outputs, patience=patience)
    return Success(None)


def seed_outputs(site: Site, local: str, *, patience: Patience = BRIEF) -> Result[None, LaneFailure]:
    """A relaunch picks up where the interrupted run left off: what was synced of its
    ``$EPS_OUTPUT_DIR`` goes back into the new run's (its checkpoints among it)."""
    names: list[str] = []
    for top, dirs, files in os.walk(local):
        dirs.sort()
        names.extend(os.path.relpath(os.path.join(top, f), local) for f in sorted(files))
    if not names:
        return Success(None)
    sent = upload_files(site.remote, local, names, f"{site.root}/out", patience=patience)
    return sent.alt(_lane)


def launch(
    site: Site,
    *,
    before: str | None = None,
    guard: str | None = None,
    stdin: bytes | None = None,
    patience: Patience = BRIEF,
) -> Result[int, LaneFailure]:
    """Start the staged job detached; the wrapper's pid.  Twice starts it once.  ``before``:
    a quiet shell line run first, in the same connection (the machine's watcher); ``guard``:
    one that must succeed first (it puts the files in place, ``stdin`` its data), else
    nothing starts."""
    return start_job(site.remote, site.root, before=before, guard=guard, stdin=stdin, patience=patience).alt(_lane)


def probe(site: Site) -> Result[JobProgress, LaneFailure]:
    return probe_job(site.remote, site.root).alt(_lane)


def follow(site: Site, sink: Callable[[bytes], None]) -> Result[int, LaneFailure]:
    return follow_log(site.remote, site.root, sink, wrapper_here=site.runs_here).alt(_lane)


def reap(site: Site) -> Result[None, LaneFailure]:
    """KILL what is left of a job whose wrapper died without its end (nobody else will)."""
    return reap_job(site.remote, site.root).alt(_lane)


def cancel(site: Site) -> Result[None, LaneFailure]:
    """Ask the job to stop (``eps cancel``): its wrapper records ``cancelled``."""
    return cancel_job(site.remote, site.root).alt(_lane)


def hang_up(site: Site) -> None:
    """eps is done with the site's machine for now (its dispatch settled, the machine kept for
    a later pull): its shared ssh master connection is closed rather than left to time out."""
    if site.remote.control_path is not None:
        mux.close(site.remote.control_path)


def pull_room(site: Site, out_dir: str, log_path: str, margin: int) -> Result[Room, LaneFailure]:
    """Whether :func:`pull` would leave ``margin`` bytes free on each filesystem it writes to
    (:func:`eps.core.room.room_for`): what it would write (the same rsync, run dry) against
    what is free there now.  Nothing is written or made."""
    sized = pull_sizes(site.remote, site.root, out_dir, log_path).alt(_lane)
    if isinstance(sized, Failure):
        return Failure(sized.failure())
    outputs, log = sized.unwrap()
    log_dir = os.path.dirname(log_path) or "."
    try:
        parts = [(Incoming(out_dir, *outputs), disk_at(out_dir)), (Incoming(log_dir, *log), disk_at(log_dir))]
    except OSError as exc:
        return Failure(LaneFailure(FailureKind.INVALID_REQUEST, f"cannot read the free disk at {out_dir}: {exc}"))
    return Success(room_for(parts, margin))


def disk_at(path: str) -> Disk:
    """The filesystem ``path`` is (or would be made) on: that of its nearest existing ancestor."""
    here = existing_ancestor(path)
    return Disk(os.stat(here).st_dev, shutil.disk_usage(here).free, os.statvfs(here).f_frsize)


def pull(site: Site, out_dir: str, log_path: str) -> Result[None, LaneFailure]:
    """Bring the job's outputs to ``out_dir`` and its whole log to ``log_path`` (at once: the
    disk guard is :func:`pull_room`, asked first by :class:`~eps.shell.run.finish.Finisher`)."""
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    got = pull_outputs(site.remote, site.root, out_dir).alt(_lane)
    if isinstance(got, Failure):
        return got
    return pull_log(site.remote, site.root, log_path).alt(_lane)


# --- the values of --env, kept aside while the dispatch lives -------------------------------------


def _env_path(state_dir: str, dispatch: str) -> str:
    return os.path.join(state_dir, "env", f"{dispatch}.env")


def write_env_values(state_dir: str, dispatch: str, values: Mapping[str, str]) -> None:
    """Keep ``values`` for ``dispatch`` (a resume or a copy of a fan-out ships them again);
    mode 0600, never in the ledger.  Removed by :func:`drop_env_values`."""
    if not values:
        return
    folder = os.path.join(state_dir, "env")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, stat.S_IRWXU)
    path = _env_path(state_dir, dispatch)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        for name, value in sorted(values.items()):
            fh.write(f"{name}={value.encode('unicode_escape').decode('ascii')}\n")


def read_env_values(state_dir: str, *dispatches: str) -> dict[str, str] | None:
    """The values kept for the first of ``dispatches`` that has any (a copy reads its parent's)."""
    for dispatch in dispatches:
        try:
            with open(_env_path(state_dir, dispatch), encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except FileNotFoundError:
            continue
        values = {}
        for line in lines:
            name, _, value = line.partition("=")
            values[name] = value.encode("ascii").decode("unicode_escape")
        return values
    return None


def drop_env_values(state_dir: str, dispatch: str) -> None:
    """The dispatch is over: its kept values go (and the workdir a takeover fetched from
    storage, eps.shell.run.stored_workdir), and so does the job's own ``env`` file in
    its dispatch roots on this machine (the VM lane's ``<state>/runs/<dispatch>/<task>/env``)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_env_path(state_dir, dispatch))
    shutil.rmtree(os.path.join(state_dir, "workdirs", dispatch), ignore_errors=True)  # a takeover's fetched workdir
    runs = os.path.join(state_dir, VM_RUNS, dispatch)
    with contextlib.suppress(OSError):
        for task in os.listdir(runs):
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                os.unlink(os.path.join(runs, task, LAYOUT.env))


def drop_settled_env_values(ledger: Ledger) -> list[str]:
    """Drop the kept values of every dispatch that is over (ended, failed or cancelled, and
    for a ``--count`` parent every copy too) that are still here: whatever stopped the eps
    that would have dropped them (a crash, a kill).  A dispatch the ledger does not know
    (yet: ``eps execute`` keeps the values just before it records it) is left alone.
    The dispatches dropped."""
    dropped = []
    for name in _listdir(os.path.join(ledger.state_dir, "env")):
        dispatch = name.removesuffix(".env")
        if name.endswith(".env") and _settled(ledger, dispatch):
            drop_env_values(ledger.state_dir, dispatch)
            dropped.append(dispatch)
    for dispatch in _listdir(os.path.join(ledger.state_dir, VM_RUNS)):
        if dispatch not in dropped and _settled(ledger, dispatch):
            drop_env_values(ledger.state_dir, dispatch)
    return dropped


def _settled(ledger: Ledger, dispatch: str) -> bool:
    row = ledger.dispatch(dispatch)
    if row is None:
        return False
    return row.state in SETTLED_DISPATCH_STATES and all(
        c.state in SETTLED_DISPATCH_STATES for c in ledger.children(dispatch)
    )


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []
