"""A machine eps made (a GCP VM, a RunPod pod) as a job's site: reached over ssh with eps's
own key once it is up, given what the job wrapper needs, then the job shipped and launched.

The order, and why:

1. wait until sshd answers and accepts eps's key (a fresh machine: minutes, see
   :data:`~eps.shell.remote.ssh.FRESH_MACHINE`); that first connection becomes the
   machine's ssh master, which every later step shares (:mod:`eps.shell.remote.mux`);
2. in the same command, make sure ``rsync`` is there (installed with the machine's package
   manager when it is not; a machine where it cannot be is refused with that reason) and
   put the wrapper, the env file and the machine's watcher (when the lane brings it over
   ssh: RunPod; on GCP it is the startup script and already runs) in place;
3. send the workdir (and a relaunch's outputs) with rsync;
4. start the watcher, then the job detached, in one command; with nothing for step 3,
   steps 1-4 are one command, and the start runs only once every file is in place.

Any failure after the machine was made is the lane's to clean up: it releases the
machine (a job that could not start must not leave a paid machine behind).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

from returns.result import Failure, Result, Success

from eps.core.jobscript import JobScriptError
from eps.core.lifecycle import time_limit_s
from eps.core.model import Job, Policy, evolve
from eps.core.outcome import FailureKind, Handle, LaneFailure
from eps.core.watcher import WatchSpec, render_watch_start, render_watcher
from eps.shell.lanes.jobs import JobFiles, Site, launch, probe, ship_trees, site_root, trees_to_ship, wrapper_files
from eps.shell.remote import mux
from eps.shell.remote.errors import RemoteErrorKind
from eps.shell.remote.keys import KNOWN_HOSTS_NAME, KeyPair, ensure_key, forget_host, key_dir, load_key
from eps.shell.remote.ssh import FRESH_MACHINE, Patience, Remote, check_remote
from eps.shell.remote.sync import pack, unpack_line
from eps.shell.util.polling import poll_until


class MachineAccess(NamedTuple):
    """How eps reaches the machines of one lane: its key (in the state dir), the login
    user, where dispatch roots go (relative: under that user's home), the linger the
    machine's watcher keeps, how long a fresh machine may take to let eps in, and the time
    limit of a job of unknown length resumed on a machine made earlier, and the key exchange
    eps's ssh offers."""

    state_dir: str
    user: str
    work_root: str
    linger_s: int
    patience: Patience = FRESH_MACHINE
    max_time_limit_s: int = Policy._field_defaults["max_time_limit_s"]  # [jobs] max_time_limit
    kex: str = ""  # [ssh] key_exchange (empty: ssh's default)
    also_keys: tuple[str, ...] = ()  # the team's other hosts' public keys, let in too (GCP VMs, RunPod pods)

    def root(self, dispatch: str, job: Job) -> str:
        return site_root(self.work_root, dispatch, job)

    def key(self, *, make: bool) -> Result[KeyPair, LaneFailure]:
        """eps's key pair (made on first use when ``make``)."""
        got = ensure_key(self.state_dir) if make else load_key(self.state_dir)
        return got.alt(lambda f: f.lane_failure())

    def site(
        self, address: tuple[str, int], key: KeyPair, dispatch: str, job: Job, machine: str
    ) -> Result[Site, LaneFailure]:
        """The job's site on ``machine`` (its id keys its host key, whatever its address)."""
        host, port = address
        try:
            remote = Remote.ssh(host, key, user=self.user, port=port, machine=machine, kex=self.kex)
        except ValueError as exc:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, f"the provider gave an unusable address: {exc}"))
        return Success(Site(remote, self.root(dispatch, job), runs_here=True))

    def site_now(
        self, address: Result[tuple[str, int], LaneFailure], dispatch: str, job: Job, machine: str
    ) -> Result[Site, LaneFailure]:
        """The job's site on ``machine`` at ``address`` (``eps logs``, ``pull``, ``ssh``)."""
        return self.key(make=False).bind(lambda k: address.bind(lambda a: self.site(a, k, dispatch, job, machine)))

    def forget(self, machine: str) -> None:
        """The machine is gone (or stopped, or made anew): its ssh master connection is closed and
        its host key goes from eps's known_hosts."""
        mux.close_machine(key_dir(self.state_dir), machine)
        forget_host(os.path.join(key_dir(self.state_dir), KNOWN_HOSTS_NAME), machine)

    def watch(self, dispatch: str, job: Job, halt: str, park: str = "") -> WatchSpec:
        return WatchSpec(
            dispatch, self.user, self.root(dispatch, job), time_limit_s(job), halt, linger_s=self.linger_s, park=park
        )


def start_on(
    access: MachineAccess,
    key: KeyPair,
    handle: Handle,
    address: Callable[[], Result[tuple[str, int], LaneFailure]],
    release: Callable[[], Result[Handle, LaneFailure]],
    job: Job,
    dispatch: str,
    files: JobFiles,
    *,
    halt: str | None = None,
    park: str = "",
    what: str = "machine",
) -> Result[Handle, LaneFailure]:
    """After the provider made ``handle``: reach it, ship and launch the job (and the
    watcher, when ``halt`` is given: the lane has no other way to put it there).  On any
    failure the machine is released again, and the failure says whether it is gone."""
    up = launch_again(access, key, handle, address, job, dispatch, files, halt=halt, park=park, fresh=True)
    if isinstance(up, Failure):
        mux.close_machine(key_dir(access.state_dir), handle.id)  # whatever the release does, eps is done with it
        return Failure(released_after(up.failure(), release(), f"{what} {handle.id}"))
    return up


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


def launch_again(
    access: MachineAccess,
    key: KeyPair,
    handle: Handle,
    address: Callable[[], Result[tuple[str, int], LaneFailure]],
    job: Job,
    dispatch: str,
    files: JobFiles,
    *,
    halt: str | None = None,
    park: str = "",
    fresh: bool = False,
) -> Result[Handle, LaneFailure]:
    """The job on a machine made earlier (a resume after the walk died before the launch):
    nothing when the job is there already, else ship and launch it.  ``fresh``: the machine
    was just made (:func:`start_on`), so there is nothing to look for.  The caller releases
    the machine on failure."""
    if fresh:  # a machine just made has no host key eps could know: trust on first use, again
        access.forget(handle.id)
    site = _patiently(address, access.patience).bind(lambda where: access.site(where, key, dispatch, job, handle.id))
    if not fresh:
        match site.bind(probe):
            case Success(progress) if progress.launched:
                return Success(handle)
    watcher = access.watch(dispatch, job, halt, park) if halt is not None else None
    up = site.bind(lambda s: bring_up(s, job, dispatch, files, watcher=watcher, patience=access.patience))
    return up.map(lambda _: handle)


def reach_again(
    access: MachineAccess, handle: Handle, address: Callable[[], Result[tuple[str, int], LaneFailure]]
) -> Result[Handle, LaneFailure]:
    """A machine just booted again (:meth:`~eps.shell.lanes.base.Lane.wake`): wait for its
    address, then until its sshd lets eps in (a boot takes a while: the fresh-machine
    patience).  The handle, once eps can reach it."""
    where = _patiently(address, access.patience)

    def answers(key: KeyPair, host: str, port: int) -> Result[Handle, LaneFailure]:
        try:
            remote = Remote.ssh(host, key, user=access.user, port=port, machine=handle.id, kex=access.kex)
        except ValueError as exc:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, f"the provider gave an unusable address: {exc}"))
        up = check_remote(remote, "true", "reaching the machine again", timeout_s=60, patience=access.patience)
        return up.map(lambda _: handle).alt(lambda f: f.lane_failure())

    return access.key(make=False).bind(lambda key: where.bind(lambda a: answers(key, *a)))


def _patiently(
    address: Callable[[], Result[tuple[str, int], LaneFailure]], patience: Patience
) -> Result[tuple[str, int], LaneFailure]:
    """The machine's address, asked again while the provider says it is not there yet
    (an external IP or a port mapping is attached a moment after the machine runs)."""
    last: list[Result[tuple[str, int], LaneFailure]] = []

    def settled() -> Result[tuple[str, int], LaneFailure] | None:
        got = address()
        last[:] = [got]
        transient = isinstance(got, Failure) and got.failure().kind is FailureKind.TRANSIENT
        return None if transient else got

    found = poll_until(settled, timeout_s=patience.within_s, interval_s=patience.first_delay_s)
    return found if found is not None else last[0]


def bring_up(
    site: Site,
    job: Job,
    dispatch: str,
    files: JobFiles,
    *,
    watcher: WatchSpec | None = None,
    patience: Patience = FRESH_MACHINE,
) -> Result[int, LaneFailure]:
    """Reach the fresh machine and launch the job in as few commands as are safe.  The first
    (retried while the machine is not up yet) makes sure rsync is there and puts the wrapper,
    the env file and the watcher in place (one archive on stdin); the workdir (and a
    relaunch's outputs) follow by rsync; the last starts the watcher and the job.  With no
    tree to send, the first and the last are one command, in which the start runs only once
    every file is in place (``&&``): a half-shipped root never starts.  The wrapper's pid."""
    small = wrapper_files(job, dispatch, files)
    if isinstance(small, Failure):
        return small
    entries = small.unwrap()
    if watcher is not None:
        try:
            entries.append((WATCHER_SCRIPT, render_watcher(watcher).encode(), 0o700))
        except JobScriptError as exc:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, str(exc), code="watcher_render"))
    packed = pack(entries)
    prepare = f"( {ENSURE_RSYNC} ) </dev/null && {unpack_line(site.root, packed)}"
    before = render_watch_start(site.root) if watcher is not None else None
    if not trees_to_ship(files, job):
        one = launch(site, before=before, guard=prepare, stdin=packed.archive, patience=patience)
        return one.alt(_first_contact)
    ready = check_remote(site.remote, prepare, "preparing the machine", stdin=packed.archive, timeout_s=600,
                         patience=patience)  # fmt: skip
    if isinstance(ready, Failure):
        return Failure(_first_contact(ready.failure().lane_failure()))
    shipped = ship_trees(site, files, job)
    if isinstance(shipped, Failure):
        return shipped
    return launch(site, before=before)


#: The machine's watcher, in the dispatch root (started with the job, :func:`bring_up`).
WATCHER_SCRIPT = "watch.sh"


def _first_contact(failure: LaneFailure) -> LaneFailure:
    """A failure to get in at all says so (a machine that never answered, or refused eps's key)."""
    if failure.code in (RemoteErrorKind.UNREACHABLE.value, RemoteErrorKind.AUTH.value, RemoteErrorKind.HOST_KEY.value):
        return evolve(failure, message=f"the machine never let eps in: {failure.message}")
    return failure


def released_after(failure: LaneFailure, released: Result[object, LaneFailure], what: str) -> LaneFailure:
    """The failure a lane reports when the machine it made could not take the job: the
    original reason, and whether the machine is gone (a release that failed is said: the
    next reconcile releases it)."""
    if isinstance(released, Failure):
        tail = f"; {what} NOT released yet ({released.failure().message}): eps reconcile releases it"
    else:
        tail = f"; {what} released"
    return LaneFailure(failure.kind, f"the job could not be started: {failure.message}{tail}", code=failure.code)
