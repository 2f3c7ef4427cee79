"""The ``gcp`` lane: Compute Engine machines, one client per command, built on first use
(google-cloud-compute costs over a second to import: a command that never touches GCP
never pays for it)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from returns.result import Failure, Result, Success

from eps.core.model import Job, LaneKind, Rung, evolve
from eps.core.outcome import FailureKind, Handle, LaneFailure
from eps.core.settle import LiveItem
from eps.core.states import HandleState
from eps.core.walk import AttemptRecord
from eps.shell.lanes.gcp.client import GcpClient
from eps.shell.lanes.gcp.wire import instance_name
from eps.shell.lanes.jobs import JobFiles, Site
from eps.shell.settings import GcpSettings


class GcpLane:
    """GCP as a :class:`~eps.shell.lanes.base.Lane`."""

    kind = LaneKind.GCP

    def __init__(self, settings: GcpSettings, options: dict[str, Any] | None = None, *, name: str = "gcp") -> None:
        self.name = name
        self.settings = settings
        self._options = {"poll_interval_s": settings.poll_interval_s, **(options or {})}
        self._given_on_wait: Callable[[float, str], None] | None = self._options.pop("on_wait", None)
        self._emit: Callable[..., None] | None = None
        self._client: GcpClient | None = None
        self._lock = threading.Lock()

    def report_to(self, emit: Callable[..., None]) -> None:
        """Report the client's in-place waits (rate limits, a busy instance, a PENDING VM
        waiting for capacity) as progress: ``emit("waiting", lane=..., seconds=..., reason=...)``,
        the shape of :meth:`eps.shell.cli.progress.Reporter.emit`."""
        self._emit = emit

    def _waiting(self, seconds: float, why: str) -> None:
        if self._given_on_wait is not None:
            self._given_on_wait(seconds, why)
        if self._emit is not None:
            self._emit("waiting", lane=self.name, seconds=seconds, reason=why)

    def client(self) -> GcpClient:
        with self._lock:
            if self._client is None:
                self._client = GcpClient.from_settings(
                    self.settings, lane=self.name, on_wait=self._waiting, **self._options
                )
            return self._client

    def name_for(self, dispatch: str, rung: Rung, seq: int) -> str:
        return instance_name(dispatch, rung)

    def site(self, handle: Handle | None, dispatch: str, job: Job) -> Result[Site, LaneFailure]:
        return Failure(LaneFailure(FailureKind.UNREACHABLE, f"{self.name}: job files are not shipped to it yet"))

    def shell_inner(self, handle: Handle) -> list[str] | None:
        return None

    def start(self, job: Job, rung: Rung, dispatch: str, name: str, files: JobFiles) -> Result[Handle, LaneFailure]:
        # attempt=0: the request id is fixed per (dispatch, rung), so a retried create is a no-op
        return self.client().create(job, rung, dispatch, 0)

    def poll(self, handle: Handle) -> Result[Handle, LaneFailure]:
        match self.client().status(handle):
            case Failure(f) if f.kind is FailureKind.PREEMPTED:
                return Success(evolve(handle, state=HandleState.PREEMPTED, reason=f.message))
            case other:
                return other

    def release(self, handle: Handle, *, pending_only: bool = False) -> Result[Handle, LaneFailure]:
        return self.client().delete(handle)

    def withdraw(self, name: str, rung: Rung) -> Result[None, LaneFailure]:
        handle = Handle(self.name, LaneKind.GCP, name, rung.key, zone=rung.zone, machine=rung.machine)
        return self.client().delete(handle).map(lambda _: None)

    def inventory(self, dispatch: str | None) -> Result[tuple[LiveItem, ...], LaneFailure]:
        listed = self.client().list_by_label(dispatch)
        return listed.map(lambda found: tuple(LiveItem(i.dispatch_id, i.handle, i.handle.id) for i in found))

    def was_submitted(self, dispatch: str, attempt: AttemptRecord) -> Result[bool, LaneFailure]:
        return Success(False)

    def keep_output(self, handle: Handle, dispatch: str, logs_dir: str) -> str | None:
        """Before a finished VM is deleted, copy its serial console (the job's log tail and
        exit code) to ``<logs_dir>/<dispatch>.log``: deleting must lose no data."""
        got = self.client().job_output(handle)
        if isinstance(got, Failure):
            return None
        text, code = got.unwrap()
        path = os.path.join(logs_dir, f"{dispatch}.log")
        with open(path, "a") as fh:
            fh.write(text)
        ended = f"exit code {code}" if code is not None else "finished"
        return f"{ended}; machine released; output in {path}"

    def how_it_ended(self, handle: Handle, dispatch: str) -> str | None:
        return None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
