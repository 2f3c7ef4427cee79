"""The VM lane: trivial ops run here, on the shared VM, under the job wrapper.

The job's files, log and record live in its dispatch root under the state
directory (``runs/<dispatch>/<task>``); the wrapper records the exit code there,
so it survives eps exiting.  The job's session carries ``EPS_DISPATCH=<id>`` in
its environment, which is how reconcile finds it again after a crash.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import TYPE_CHECKING

from returns.result import Failure, Result, Success

from eps.core.jobscript import LAYOUT, VM_RUNS
from eps.core.model import Job, LaneKind, Rung, evolve
from eps.core.outcome import FailureKind, Handle, LaneFailure
from eps.core.settle import LiveItem
from eps.core.states import HandleState
from eps.shell.util.polling import poll_until

if TYPE_CHECKING:  # eps status builds this lane for its inventory alone: no ssh, rsync or subprocess for that
    from eps.core.outcome import AttemptRecord
    from eps.shell.lanes.jobs import JobFiles, Site

MARKER = "EPS_DISPATCH"
#: Whose job it is: the runs directory of the state directory that started it.  Two state
#: directories on one VM (two users, or one user's two configs) may give a dispatch the same
#: id (``--dispatch-id``): each finds, adopts and stops only its own jobs.
OWNER = "EPS_VM_OWNER"
#: The variables of eps's own environment a VM job inherits (besides ``LC_*`` and
#: ``PYENV_*``: the job's login shell may run ``pyenv init``, and a setting such as
#: ``PYENV_REHASH_TIMEOUT`` is the user's own choice for it).
JOB_ENV = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TMPDIR", "TZ"})
#: The rung key of every VM attempt (one local rung).
VM_RUNG = "vm/-/-/local"


class VmLane:
    """The shared VM (this machine) as a :class:`~eps.shell.lanes.base.Lane`.  A job's
    dispatch root is ``<state dir>/runs/<dispatch>/<task>``; its workdir is copied there
    (rsync) and its wrapper runs detached in its own session, which carries the marker."""

    kind = LaneKind.VM

    def __init__(self, state_dir: str, name: str = "vm") -> None:
        self.name = name
        self.work_root = os.path.join(os.path.abspath(state_dir), VM_RUNS)

    def name_for(self, dispatch: str, rung: Rung, seq: int) -> str:
        return f"pid:{dispatch}"

    def site(self, handle: Handle | None, dispatch: str, job: Job) -> Result[Site, LaneFailure]:
        from eps.shell.lanes.jobs import Site, site_root
        from eps.shell.remote.ssh import Remote

        return Success(Site(Remote.local(), site_root(self.work_root, dispatch, job), runs_here=True))

    def launch_on(self, handle: Handle, job: Job, dispatch: str, files: JobFiles) -> Result[Handle, LaneFailure]:
        return Success(handle)  # started in one step: nothing is ever made without its job

    def shell_inner(self, handle: Handle) -> list[str] | None:
        return None

    def wake(self, handle: Handle) -> Result[Handle | None, LaneFailure]:
        return Success(None)  # the shared VM is never stopped by eps

    def start(self, job: Job, rung: Rung, dispatch: str, name: str, files: JobFiles) -> Result[Handle, LaneFailure]:
        import subprocess

        from eps.core.lifecycle import on_rung
        from eps.shell.lanes.jobs import stage

        job = on_rung(job, rung)  # a job of unknown length (pinned here) runs up to the rung's limit
        if not job.command:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, "no command to run"))
        site = self.site(None, dispatch, job).unwrap()
        try:  # the shared VM's other users never see a job's files (its workdir copy, its env)
            os.makedirs(self.work_root, mode=0o700, exist_ok=True)
        except OSError as exc:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, f"cannot create {self.work_root}: {exc.strerror}"))
        staged = stage(site, job, dispatch, files)
        if isinstance(staged, Failure):
            return staged
        # The job gets what a login shell would need, not eps's own environment (its
        # credentials and settings stay with eps); the marker lets reconcile find it.
        env = {k: v for k, v in os.environ.items() if k in JOB_ENV or k.startswith(("LC_", "PYENV_"))}
        env[MARKER] = dispatch
        env[OWNER] = self.work_root
        try:
            done = subprocess.run(
                ["bash", LAYOUT.under(site.root).script, "start"],
                stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=60, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, f"cannot start the job: {exc}"))
        pid = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        if done.returncode != 0 or not pid.isdigit():
            why = " ".join((done.stderr or done.stdout).split())[:200] or f"exit {done.returncode}"
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, f"the job did not start: {why}"))
        return Success(Handle(self.name, LaneKind.VM, pid, rung.key, machine="local"))

    def poll(self, handle: Handle) -> Result[Handle, LaneFailure]:
        dispatch = _marker(int(handle.id)) if handle.id.isdigit() else None
        if dispatch is not None and _alive(int(handle.id), dispatch):
            return Success(evolve(handle, state=HandleState.RUNNING))
        return Success(evolve(handle, state=HandleState.FINISHED))

    def release(
        self, handle: Handle, *, pending_only: bool = False, grace_s: float = 5.0
    ) -> Result[Handle, LaneFailure]:
        pid = int(handle.id)
        dispatch = _marker(pid)
        if dispatch is not None and _alive(pid, dispatch):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
                stopped = poll_until(lambda: _gone(pid, dispatch), timeout_s=grace_s, interval_s=0.05)
                if stopped is None:
                    os.killpg(pid, signal.SIGKILL)
        return Success(evolve(handle, state=HandleState.RELEASED))

    def withdraw(self, name: str, rung: Rung) -> Result[None, LaneFailure]:
        return Success(None)

    def inventory(self, dispatch: str | None) -> Result[tuple[LiveItem, ...], LaneFailure]:
        """Live session leaders that carry the marker (of ``dispatch``, or any)."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            if _session(pid) != pid:  # only the session leader eps started, not its children
                continue
            marker, owner = _markers(pid)
            mine = owner is None or owner == self.work_root  # None: started by an eps before owners were marked
            if marker and mine and (dispatch is None or marker == dispatch):
                handle = Handle(self.name, LaneKind.VM, str(pid), VM_RUNG, machine="local")
                found.append(LiveItem(marker, handle))
        return Success(tuple(found))

    def was_submitted(self, dispatch: str, attempt: AttemptRecord) -> Result[bool, LaneFailure]:
        return Success(False)

    def how_it_ended(self, handle: Handle, dispatch: str) -> str | None:
        return None  # the job's own record (exit-code in its dispatch root) tells

    def close(self) -> None:
        return None


def _session(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[3])  # state ppid pgrp session
    except (OSError, IndexError, ValueError):
        return None


def _marker(pid: int) -> str | None:
    return _markers(pid)[0]


def _markers(pid: int) -> tuple[str | None, str | None]:
    """The dispatch and the owner a process of ``pid`` was started with (``None``: none)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read().split(b"\0")
    except OSError:
        return None, None
    found: dict[bytes, str] = {}
    for item in env:
        key, eq, value = item.partition(b"=")
        if eq and key in (MARKER.encode(), OWNER.encode()):
            found[key] = value.decode(errors="replace")
    return found.get(MARKER.encode()), found.get(OWNER.encode())


def _gone(pid: int, dispatch_id: str) -> bool | None:
    return True if not _alive(pid, dispatch_id) else None


def _alive(pid: int, dispatch_id: str) -> bool:
    """The pid is alive, not a zombie, and still ours (guards against pid reuse)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state == "Z":
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return _marker(pid) == dispatch_id
