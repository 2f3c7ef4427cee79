"""The VM lane: trivial ops run here, as a local subprocess in its own session.

The command's output goes to ``<state_dir>/logs/<dispatch>.log``; its exit
code to ``<dispatch>.rc`` when it ends (a tiny wrapper shell writes it, so the
code survives eps exiting).  The child carries ``EPS_DISPATCH=<id>`` in its
environment, which is how reconcile finds it again after a crash.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess

from returns.result import Failure, Result, Success

from eps.core.model import Job, LaneKind, Rung, evolve
from eps.core.outcome import FailureKind, Handle, LaneFailure
from eps.core.settle import LiveItem
from eps.core.states import HandleState
from eps.core.walk import AttemptRecord
from eps.shell.polling import poll_until

MARKER = "EPS_DISPATCH"
#: The variables of eps's own environment a VM job inherits (besides ``LC_*``).
JOB_ENV = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TMPDIR", "TZ"})
#: The rung key of every VM attempt (one local rung).
VM_RUNG = "vm/-/-/local"


class VmLane:
    """The shared VM (this machine) as a :class:`~eps.shell.lanes.base.Lane`."""

    kind = LaneKind.VM

    def __init__(self, state_dir: str, name: str = "vm") -> None:
        self.name = name
        self.logs = os.path.join(state_dir, "logs")

    def log_path(self, dispatch_id: str) -> str:
        return os.path.join(self.logs, f"{dispatch_id}.log")

    def rc_path(self, dispatch_id: str) -> str:
        return os.path.join(self.logs, f"{dispatch_id}.rc")


    def name_for(self, dispatch: str, rung: Rung, seq: int) -> str:
        return f"pid:{dispatch}"

    def start(self, job: Job, rung: Rung, dispatch: str, name: str) -> Result[Handle, LaneFailure]:
        command = job.command
        if not command:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, "no command to run"))
        os.makedirs(self.logs, exist_ok=True)
        rc_file = self.rc_path(dispatch)
        # sh -c 'CMD; echo $? > rc': the exit code is kept even after eps itself has exited.
        inner = f"{shlex.join(command)}; echo $? > {shlex.quote(rc_file)}"
        # The job gets what a login shell would need, not eps's own environment (its
        # credentials and settings stay with eps).
        env = {k: v for k, v in os.environ.items() if k in JOB_ENV or k.startswith("LC_")}
        env[MARKER] = dispatch
        try:
            with open(self.log_path(dispatch), "ab") as log:
                proc = subprocess.Popen(
                    ["/bin/sh", "-c", inner],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=env,
                )
        except OSError as exc:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, f"cannot start: {exc.strerror or exc}"))
        return Success(Handle(self.name, LaneKind.VM, str(proc.pid), rung.key, machine="local"))

    def exit_code(self, dispatch_id: str) -> str | None:
        """The exit code the wrapper wrote when the command ended, or ``None``."""
        try:
            with open(self.rc_path(dispatch_id)) as fh:
                return fh.read().strip()
        except OSError:
            return None

    def poll(self, handle: Handle) -> Result[Handle, LaneFailure]:
        dispatch = _marker(int(handle.id)) if handle.id.isdigit() else None
        if dispatch is not None and _alive(int(handle.id), dispatch):
            return Success(evolve(handle, state=HandleState.RUNNING))
        return Success(evolve(handle, state=HandleState.GONE))

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
            marker = _marker(pid)
            if marker and (dispatch is None or marker == dispatch):
                handle = Handle(self.name, LaneKind.VM, str(pid), VM_RUNG, machine="local")
                found.append(LiveItem(marker, handle))
        return Success(tuple(found))

    def was_submitted(self, dispatch: str, attempt: AttemptRecord) -> Result[bool, LaneFailure]:
        return Success(False)

    def keep_output(self, handle: Handle, dispatch: str, logs_dir: str) -> str | None:
        return None

    def how_it_ended(self, handle: Handle, dispatch: str) -> str | None:
        code = self.exit_code(dispatch)
        return f"exit code {code}" if code is not None else "process gone"

    def close(self) -> None:
        return None


def _session(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[3])  # state ppid pgrp session
    except (OSError, IndexError, ValueError):
        return None


def _marker(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read().split(b"\0")
    except OSError:
        return None
    prefix = MARKER.encode() + b"="
    for item in env:
        if item.startswith(prefix):
            return item[len(prefix) :].decode(errors="replace")
    return None


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
