"""A machine eps made (a GCP VM, a RunPod pod) as a job's site: reached over ssh with eps's
own key once it is up, given what the job wrapper needs, then the job shipped and launched.

The order, and why:

1. wait until sshd answers and accepts eps's key (a fresh machine: minutes, see
   :data:`~eps.shell.remote.ssh.FRESH_MACHINE`);
2. make sure ``rsync`` is there (installed with the machine's package manager when it
   is not; a machine where it cannot be is refused with that reason);
3. ship the wrapper, the env file and the workdir;
4. start the machine's watcher when the lane brings it over ssh (RunPod; on GCP it is
   the startup script and already runs), before the job: a launch that never happens
   still ends with the machine stopped;
5. start the job detached.

Any failure after the machine was made is the lane's to clean up: it releases the
machine (a job that could not start must not leave a paid machine behind).
"""

from __future__ import annotations

from collections.abc import Callable

from returns.result import Failure, Result

from eps.core.jobscript import JobScriptError
from eps.core.model import Job
from eps.core.outcome import FailureKind, LaneFailure
from eps.core.watcher import WatchSpec, render_watch_start, render_watcher
from eps.shell.lanes.jobs import JobFiles, Site, launch, stage
from eps.shell.remote.ssh import FRESH_MACHINE, Patience, check_remote, wait_reachable
from eps.shell.remote.sync import put_file

#: One shell line: rsync present, or installed by whichever package manager the image has
#: (as root, or through passwordless sudo: a GCE user from ``ssh-keys`` has it).
ENSURE_RSYNC = (
    "command -v rsync >/dev/null 2>&1 && exit 0; "
    's=; [ "$(id -u)" = 0 ] || s="sudo -n"; '
    "{ if command -v apt-get >/dev/null 2>&1; then "
    "$s env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync "
    "|| { $s apt-get update -qq && $s env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync; }; "
    "elif command -v dnf >/dev/null 2>&1; then $s dnf install -y -q rsync; "
    "elif command -v yum >/dev/null 2>&1; then $s yum install -y -q rsync; "
    "elif command -v apk >/dev/null 2>&1; then $s apk add -q rsync; fi; } >/dev/null 2>&1; "
    'command -v rsync >/dev/null 2>&1 || { echo "rsync is not installed and could not be installed" >&2; exit 1; }'
)


def bring_up(
    site: Site,
    job: Job,
    dispatch: str,
    files: JobFiles,
    *,
    watcher: WatchSpec | None = None,
    patience: Patience = FRESH_MACHINE,
    on_step: Callable[[str], None] | None = None,
) -> Result[int, LaneFailure]:
    """Reach the fresh machine, prepare it, ship the job, start the watcher (when given),
    then the job.  The wrapper's pid."""
    remote = site.remote

    def step(what: str) -> None:
        if on_step is not None:
            on_step(what)

    step(f"waiting for ssh on {remote.describe()}")
    reached = wait_reachable(remote, patience=patience)
    if isinstance(reached, Failure):
        failure = reached.failure().lane_failure()
        return Failure(LaneFailure(failure.kind, f"the machine never let eps in: {failure.message}", code=failure.code))
    step("checking rsync")
    tools = check_remote(remote, ENSURE_RSYNC, "making sure rsync is installed", timeout_s=600)
    if isinstance(tools, Failure):
        return Failure(tools.failure().lane_failure())
    step("shipping the job")
    staged = stage(site, job, dispatch, files)
    if isinstance(staged, Failure):
        return staged
    if watcher is not None:
        started = start_watcher(site, watcher)
        if isinstance(started, Failure):
            return started
    step("starting the job")
    return launch(site)


def start_watcher(site: Site, watcher: WatchSpec) -> Result[None, LaneFailure]:
    """Put ``watch.sh`` in the dispatch root and start it detached (once)."""
    try:
        text = render_watcher(watcher)
    except JobScriptError as exc:
        return Failure(LaneFailure(FailureKind.INVALID_REQUEST, str(exc), code="watcher_render"))
    put = put_file(site.remote, f"{site.root}/watch.sh", text.encode(), mode=0o700)
    if isinstance(put, Failure):
        return Failure(put.failure().lane_failure())
    started = check_remote(site.remote, render_watch_start(site.root), "starting the machine's watcher", timeout_s=60)
    return started.map(lambda _: None).alt(lambda f: f.lane_failure())


def released_after(failure: LaneFailure, released: Result[object, LaneFailure], what: str) -> LaneFailure:
    """The failure a lane reports when the machine it made could not take the job: the
    original reason, and whether the machine is gone (a release that failed is said: the
    next reconcile releases it)."""
    if isinstance(released, Failure):
        tail = f"; {what} NOT released yet ({released.failure().message}): eps reconcile releases it"
    else:
        tail = f"; {what} released"
    return LaneFailure(failure.kind, f"the job could not be started: {failure.message}{tail}", code=failure.code)
