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
import time
from collections.abc import Sequence

from returns.result import Failure, Result, Success

from eps.core.model import LaneKind, Rung
from eps.core.outcome import FailureKind, Handle, LaneFailure

MARKER = "EPS_DISPATCH"


class VmLane:
    def __init__(self, state_dir: str) -> None:
        self.logs = os.path.join(state_dir, "logs")

    def log_path(self, dispatch_id: str) -> str:
        return os.path.join(self.logs, f"{dispatch_id}.log")

    def rc_path(self, dispatch_id: str) -> str:
        return os.path.join(self.logs, f"{dispatch_id}.rc")

    def start(self, command: Sequence[str], rung: Rung, dispatch_id: str) -> Result[Handle, LaneFailure]:
        if not command:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, "no command to run"))
        os.makedirs(self.logs, exist_ok=True)
        rc_file = self.rc_path(dispatch_id)
        # sh -c 'CMD; echo $? > rc': the exit code is kept even after eps itself has exited.
        inner = f"{shlex.join(command)}; echo $? > {shlex.quote(rc_file)}"
        env = dict(os.environ)
        env[MARKER] = dispatch_id
        try:
            with open(self.log_path(dispatch_id), "ab") as log:
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
        return Success(Handle("vm", LaneKind.VM, str(proc.pid), rung.key, machine="local", state="running"))

    def state(self, handle: Handle, dispatch_id: str) -> str:
        """``running``, ``done:<rc>`` or ``gone``."""
        if _alive(int(handle.id), dispatch_id):
            return "running"
        try:
            with open(self.rc_path(dispatch_id)) as fh:
                return f"done:{fh.read().strip()}"
        except OSError:
            return "gone"

    def cancel(self, handle: Handle, dispatch_id: str, *, grace_s: float = 5.0) -> None:
        pid = int(handle.id)
        if not _alive(pid, dispatch_id):
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _alive(pid, dispatch_id):
            time.sleep(0.05)
        if _alive(pid, dispatch_id):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)

    def find(self, dispatch_id: str | None = None) -> list[tuple[str, int]]:
        """(dispatch, pid) of live processes that carry the marker."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            if _session(pid) != pid:  # only the session leader eps started, not its children
                continue
            marker = _marker(pid)
            if marker and (dispatch_id is None or marker == dispatch_id):
                found.append((marker, int(entry)))
        return found


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
