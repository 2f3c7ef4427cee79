"""A job's life in its dispatch root on a :class:`~eps.shell.remote.ssh.Remote`:
stage (wrapper, env file, workdir), start detached, probe, wait, follow the log,
pull outputs and log, cancel.  The file names are :data:`eps.core.jobscript.LAYOUT`;
what the wrapper does is :func:`eps.core.jobscript.render_jobscript`'s contract.

Every function reads the job's truth from the files the wrapper wrote, so it
holds after eps exited and came back: ``exit-code`` present means ended.  Through a
robot login (``remote.robot``) each does the same by rsync alone (:mod:`eps.shell.remote.robot`).
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from returns.result import Failure, Result, Success

from eps.core.jobscript import (
    LAYOUT,
    JobProgress,
    JobSpec,
    parse_probe,
    render_cancel,
    render_env_file,
    render_follow,
    render_jobscript,
    render_probe,
    render_reap,
    render_start,
)
from eps.shell.remote import robot
from eps.shell.remote.errors import RemoteErrorKind, RemoteFailure
from eps.shell.remote.process import Runner, Streamer, run_process, stream_process
from eps.shell.remote.ssh import BRIEF, Patience, Remote, check_remote, shell_argv, stream_remote
from eps.shell.remote.sync import (
    Sizes,
    download_dir,
    download_file,
    download_size,
    existing_ancestor,
    put_file,
    upload_files,
)

if TYPE_CHECKING:
    from eps.shell.remote.ignore import Workdir  # pathspec: imported only where a workdir is listed


def job_root_files(spec: JobSpec, env: Mapping[str, str] | None = None,
                   storage_conf: str | None = None) -> list[tuple[str, bytes, int]]:  # fmt: skip
    """The wrapper (``run.sh``, 0644) and, when ``env`` is given, the env file (0600), and
    with storage, rclone's config (0600), as ``(name, content, mode)`` in the dispatch root."""
    files = [(LAYOUT.script, render_jobscript(spec).encode(), 0o644)]
    if env is not None:
        files.append((LAYOUT.env, render_env_file(env).encode(), 0o600))
    if storage_conf is not None and spec.storage is not None:
        files.append((LAYOUT.rclone_conf, storage_conf.encode(), 0o600))
    return files


def stage_job(
    remote: Remote,
    root: str,
    spec: JobSpec,
    *,
    workdir: Workdir | None = None,
    env: Mapping[str, str] | None = None,
    storage_conf: str | None = None,
    patience: Patience = BRIEF,
    runner: Runner = run_process,
    sleep: Callable[[float], None] = time.sleep,
) -> Result[None, RemoteFailure]:
    """Put the wrapper (``run.sh``), the env file (0600, only when ``env`` is given), rclone's
    config (0600, with storage) and the workdir's files (into ``work/``) under ``root`` on ``remote``."""
    files = job_root_files(spec, env, storage_conf)
    if remote.robot:  # laid out here, sent by one rsync that makes the root itself
        staged = robot.stage(remote, root, files, patience=patience, runner=runner, sleep=sleep)
        if isinstance(staged, Failure):
            return staged
        files = []
    for name, content, mode in files:
        path = root.rstrip("/") + "/" + name if root.rstrip("/") else "/" + name  # as LAYOUT.under joins
        put = put_file(remote, path, content, mode=mode, patience=patience, runner=runner, sleep=sleep)
        if isinstance(put, Failure):
            return put
    if workdir is not None:  # into work/: the last component of its destination, made by rsync
        workdir_dir = LAYOUT.under(root).workdir
        sent = upload_files(
            remote, workdir.root, workdir.files, workdir_dir, patience=patience, runner=runner, sleep=sleep
        )
        if isinstance(sent, Failure):
            return sent
    if remote.robot:  # no shell there to look for the mark: a robot login's stage is never reused
        return Success(None)
    # last, once the wrapper, the env file and the workdir are there: a host lacking the job's
    # inputs (a takeover) may submit again from this root as it is (stage_again)
    return put_file(remote, LAYOUT.under(root).staged, b"", mode=0o644, patience=patience, runner=runner,
                    sleep=sleep)  # fmt: skip


def stage_again(
    remote: Remote,
    root: str,
    spec: JobSpec,
    *,
    storage_conf: str | None = None,
    patience: Patience = BRIEF,
    runner: Runner = run_process,
    sleep: Callable[[float], None] = time.sleep,
) -> Result[bool, RemoteFailure]:
    """A host without the job's workdir or ``--env`` values submits from a stage another
    host completed under ``root`` (its ``.staged`` mark): only the wrapper (and rclone's
    config, with storage) is written again, for this rung; the env file and the workdir
    stay as they are.  ``False``: there is no complete stage (nothing was written)."""
    if remote.robot:
        return Success(False)
    mark = LAYOUT.under(root).staged
    line = f"if [ -e {shlex.quote(mark)} ]; then echo staged; fi"
    found = check_remote(remote, line, f"looking for a complete stage in {root}", patience=patience, runner=runner,
                         sleep=sleep)  # fmt: skip
    if isinstance(found, Failure):
        return found
    if found.unwrap().strip() != "staged":
        return Success(False)
    for name, content, mode in job_root_files(spec, None, storage_conf):
        put = put_file(remote, f"{root.rstrip('/')}/{name}", content, mode=mode, patience=patience, runner=runner,
                       sleep=sleep)  # fmt: skip
        if isinstance(put, Failure):
            return put
    return Success(True)


def start_job(
    remote: Remote,
    root: str,
    *,
    patience: Patience = BRIEF,
    runner: Runner = run_process,
    before: str | None = None,
    guard: str | None = None,
    stdin: bytes | None = None,
) -> Result[int, RemoteFailure]:
    """Start the staged job detached; its wrapper's pid once it has recorded its start.
    Starting twice starts it once (the second call answers with the first pid's probe).
    ``before``: a shell line run first in the same connection (one that prints nothing).
    ``guard``: a quiet shell line that must succeed before anything starts (one that puts
    the job's files in place from ``stdin``, :func:`~eps.shell.remote.sync.unpack_line`):
    when it fails, nothing was started and the command fails."""
    line = render_start(root) if before is None else f"{before}; {render_start(root)}"
    if guard is not None:
        line = f"{guard} && {{ {line}; }}"
    started = check_remote(remote, line, f"starting the job in {root}", stdin=stdin, patience=patience, runner=runner)
    match started:
        case Success(text) if text.strip().isdigit():
            return Success(int(text.strip()))
        case Success(_):
            probe = probe_job(remote, root, patience=patience, runner=runner)
            match probe:
                case Success(JobProgress(pid=int(pid))):
                    return Success(pid)
            return Failure(RemoteFailure.of(RemoteErrorKind.COMMAND, f"the job in {root} did not report its pid"))
    return started.map(int)


def probe_job(
    remote: Remote, root: str, *, patience: Patience = BRIEF, runner: Runner = run_process
) -> Result[JobProgress, RemoteFailure]:
    """What the job's record files say now (one command; a robot login: one rsync)."""
    if remote.robot:
        return robot.probe(remote, root, patience=patience, runner=runner)
    read = check_remote(remote, render_probe(root), f"reading {root}", patience=patience, runner=runner)
    return read.map(parse_probe)


def wait_job(
    remote: Remote,
    root: str,
    *,
    poll_s: float = 2.0,
    within_s: float | None = None,
    patience: Patience = BRIEF,
    runner: Runner = run_process,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Result[JobProgress, RemoteFailure]:
    """Poll until ``exit-code`` exists (the job ended) and return the final record.
    ``within_s`` bounds the wait (a COMMAND failure when it runs out); a job whose
    root does not exist is a COMMAND failure at once."""
    deadline = None if within_s is None else clock() + within_s
    while True:
        probe = probe_job(remote, root, patience=patience, runner=runner)
        match probe:
            case Success(JobProgress(exists=False)):
                return Failure(RemoteFailure.of(RemoteErrorKind.COMMAND, f"no job at {root} on {remote.describe()}"))
            case Success(progress) if progress.ended:
                return probe
            case Failure(_):
                return probe
        if deadline is not None and clock() + poll_s > deadline:
            return Failure(RemoteFailure.of(RemoteErrorKind.COMMAND, f"the job in {root} has not ended yet"))
        sleep(poll_s)


def follow_log(
    remote: Remote,
    root: str,
    sink: Callable[[bytes], None],
    *,
    wrapper_here: bool = False,
    streamer: Streamer = stream_process,
) -> Result[int, RemoteFailure]:
    """Stream ``job.log`` from its start to ``sink`` until the job has ended (``eps logs -f``);
    ``wrapper_here``: the job runs on ``remote``, so a wrapper gone without its end ends it too.
    The follow ends, there too, once eps is gone: see :func:`until_reader_gone`.  A robot
    login: the log fetched by rsync every few seconds (:func:`eps.shell.remote.robot.follow`)."""
    if remote.robot:
        return robot.follow(remote, root, sink)
    return stream_remote(remote, until_reader_gone(render_follow(root, wrapper_here=wrapper_here)), sink,
                         streamer=streamer)  # fmt: skip


def until_reader_gone(line: str) -> str:
    """``line`` (bash) run in its own process group beside a watcher of stdin: when stdin
    closes (the streamer's pipe: eps ended, or its ssh client did) the watcher stops the
    whole group (``tail`` and its loop); when ``line`` ends, the watcher is stopped.  The
    exit code is ``line``'s.  stderr is dropped (job control reports each job's end there)."""
    return (
        f"exec 2>/dev/null; set -m; ( {line} ) & _eps_f=$!; "
        '( cat >/dev/null; kill -TERM -- "-$_eps_f" ) & _eps_w=$!; '
        'wait "$_eps_f"; _eps_rc=$?; kill -TERM -- "-$_eps_w"; exit "$_eps_rc"'
    )


def pull_outputs(
    remote: Remote, root: str, local_dir: str, *, patience: Patience = BRIEF, runner: Runner = run_process
) -> Result[None, RemoteFailure]:
    """Bring ``out/`` (what the job wrote to ``$EPS_OUTPUT_DIR``) into ``local_dir``."""
    return download_dir(remote, LAYOUT.under(root).outputs, local_dir, patience=patience, runner=runner)


def pull_log(
    remote: Remote, root: str, local_path: str, *, patience: Patience = BRIEF, runner: Runner = run_process
) -> Result[None, RemoteFailure]:
    """Bring the whole ``job.log`` to ``local_path``."""
    return download_file(remote, LAYOUT.under(root).log, local_path, patience=patience, runner=runner)


def pull_sizes(
    remote: Remote, root: str, local_dir: str, log_path: str, *, patience: Patience = BRIEF,
    runner: Runner = run_process,
) -> Result[tuple[Sizes, Sizes], RemoteFailure]:
    """What :func:`pull_outputs` into ``local_dir`` and :func:`pull_log` to ``log_path`` would
    write here (each transfer run dry; the log lands whole under a new name, so all of it)."""
    layout = LAYOUT.under(root)
    # a name that is not there, in a directory that is: the log lands whole, every byte counts
    fresh = os.path.join(existing_ancestor(os.path.dirname(os.path.abspath(log_path))), f".eps-sizing-{os.getpid()}")

    def with_log(outputs: Sizes) -> Result[tuple[Sizes, Sizes], RemoteFailure]:
        log = download_size(remote, layout.log, fresh, directory=False, patience=patience, runner=runner)
        return log.map(lambda g: (outputs, g))

    return download_size(remote, layout.outputs, local_dir, directory=True, patience=patience,
                         runner=runner).bind(with_log)  # fmt: skip


def cancel_job(
    remote: Remote, root: str, *, patience: Patience = BRIEF, runner: Runner = run_process
) -> Result[None, RemoteFailure]:
    """Stop a running job (its wrapper records ``cancelled``); nothing when it has ended.
    A robot login: only the ``cancel`` mark is left (by rsync); the TERM is SLURM's (scancel)."""
    if remote.robot:
        return robot.leave_cancel_mark(remote, root, patience=patience, runner=runner)
    done = check_remote(remote, render_cancel(root), f"cancelling the job in {root}", patience=patience, runner=runner)
    return done.map(lambda _: None)


def reap_job(
    remote: Remote, root: str, *, patience: Patience = BRIEF, runner: Runner = run_process
) -> Result[None, RemoteFailure]:
    """KILL what a job whose wrapper died left running (:func:`~eps.core.jobscript.render_reap`)."""
    if remote.robot:
        # Unnecessary there: a robot login is a SLURM cluster's, and the job's end under SLURM
        # (scancel, its time limit, a preemption) ends every process of it (its cgroup); a
        # wrapper's death is never even seen from the login (it runs on a compute node).
        return Success(None)
    done = check_remote(remote, render_reap(root), f"stopping what is left of the job in {root}",
                        patience=patience, runner=runner)  # fmt: skip
    return done.map(lambda _: None)


def job_shell_argv(remote: Remote, root: str, inner: Sequence[str] | None = None) -> list[str]:
    """The argv of ``eps ssh``: an interactive shell in the job's workdir."""
    return shell_argv(remote, LAYOUT.under(root).workdir, inner)
