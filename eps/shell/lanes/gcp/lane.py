"""The ``gcp`` lane: Compute Engine machines, one client per command, built on first use
(google-cloud-compute costs over a second to import: a command that never touches GCP
never pays for it)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from returns.result import Failure, Result, Success

from eps.core.lifecycle import at_lane_maximum, on_rung
from eps.core.model import Job, LaneKind, Provisioning, Rung, evolve
from eps.core.outcome import AttemptRecord, FailureKind, Handle, LaneFailure
from eps.core.settle import LiveItem
from eps.core.states import HandleState
from eps.shell.config.settings import GcpSettings
from eps.shell.lanes.gcp.client import GcpClient
from eps.shell.lanes.gcp.wire import instance_name
from eps.shell.lanes.jobs import JobFiles, Site
from eps.shell.lanes.machines import MachineAccess, launch_again, reach_again, start_on


class GcpLane:
    """GCP as a :class:`~eps.shell.lanes.base.Lane`."""

    kind = LaneKind.GCP

    def __init__(
        self,
        settings: GcpSettings,
        options: dict[str, Any] | None = None,
        *,
        name: str = "gcp",
        access: MachineAccess,
    ) -> None:
        self.name = name
        self.settings = settings
        self.access = access  # eps's key (state dir), the login, the work root, the linger
        self._options = {"poll_interval_s": settings.poll_interval_s, **(options or {})}
        self._given_on_wait: Callable[[float, str], None] | None = self._options.pop("on_wait", None)
        self._emit: Callable[..., None] | None = None
        self._client: GcpClient | None = None
        self._lock = threading.Lock()

    def report_to(self, emit: Callable[..., None]) -> None:
        """Report the client's in-place waits (rate limits, a busy instance, a PENDING VM
        waiting for capacity) as progress: ``emit("waiting", lane=..., seconds=..., reason=...)``,
        the shape of :meth:`eps.shell.render.progress.Reporter.emit`."""
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
                    self.settings, lane=self.name, on_wait=self._waiting, linger_s=self.access.linger_s, **self._options
                )
            return self._client

    def name_for(self, dispatch: str, rung: Rung, seq: int) -> str:
        """One name per attempt: a resume that tries a rung again (its machine never got the
        job) makes a new VM under a new name and request id, never the deleted one's."""
        return instance_name(dispatch, rung, seq)

    def site(self, handle: Handle | None, dispatch: str, job: Job) -> Result[Site, LaneFailure]:
        """The VM's external address, eps's key, the configured login: a job's site on the VM."""
        if handle is None:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, f"{self.name}: no VM to reach"))
        return self.access.site_now(self.client().address(handle), dispatch, job, handle.id)

    def launch_on(self, handle: Handle, job: Job, dispatch: str, files: JobFiles) -> Result[Handle, LaneFailure]:
        client = self.client()
        how = Provisioning(handle.rung.rsplit("/", 1)[-1])  # a rung key ends with its provisioning
        job = at_lane_maximum(job, LaneKind.GCP, how, self.access.max_time_limit_s)
        return self.access.key(make=False).bind(
            lambda key: launch_again(self.access, key, handle, lambda: client.address(handle), job, dispatch, files)
        )

    def shell_inner(self, handle: Handle) -> list[str] | None:
        return None

    def start(self, job: Job, rung: Rung, dispatch: str, name: str, files: JobFiles) -> Result[Handle, LaneFailure]:
        """Make the VM (its startup script is its watcher, its metadata carries eps's public
        key), then reach it over ssh, ship the job and launch it; a VM that cannot take the
        job is deleted again."""
        job = on_rung(job, rung)  # a job of unknown length runs up to the rung's limit
        match self.access.key(make=True):
            case Failure(f):
                return Failure(f)
            case Success(key):
                pass
        client = self.client()
        # attempt=0 and the attempt's name: a create sent again for this attempt is a no-op
        made = client.create(
            job, rung, dispatch, 0, name=name, ssh_public_key=key.public_key, ssh_user=self.access.user,
            also_keys=self.access.also_keys,
        )
        if isinstance(made, Failure):
            return made
        handle = made.unwrap()
        return start_on(
            self.access, key, handle, lambda: client.address(handle), lambda: client.delete(handle),
            job, dispatch, files, what="VM",
        )  # fmt: skip

    def poll(self, handle: Handle) -> Result[Handle, LaneFailure]:
        match self.client().status(handle):
            case Failure(f) if f.kind is FailureKind.PREEMPTED:
                return Success(evolve(handle, state=HandleState.PREEMPTED, reason=f.message))
            case other:
                return other

    def release(self, handle: Handle, *, pending_only: bool = False) -> Result[Handle, LaneFailure]:
        done = self.client().delete(handle)
        if isinstance(done, Success):
            self.access.forget(handle.id)
        return done

    def withdraw(self, name: str, rung: Rung) -> Result[None, LaneFailure]:
        handle = Handle(self.name, LaneKind.GCP, name, rung.key, zone=rung.zone, machine=rung.machine)
        return self.client().delete(handle).map(lambda _: None)

    def inventory(self, dispatch: str | None) -> Result[tuple[LiveItem, ...], LaneFailure]:
        listed = self.client().list_by_label(dispatch)
        return listed.map(lambda found: tuple(LiveItem(i.dispatch_id, i.handle, i.handle.id) for i in found))

    def was_submitted(self, dispatch: str, attempt: AttemptRecord) -> Result[bool, LaneFailure]:
        return Success(False)

    def how_it_ended(self, handle: Handle, dispatch: str) -> str | None:
        return None

    def wake(self, handle: Handle) -> Result[Handle | None, LaneFailure]:
        """A VM its watcher powered off (TERMINATED: its disk kept, only the disk billing):
        ``instances.start``, wait until RUNNING, then until eps gets in over ssh.  Same disk,
        same host keys; a new ephemeral address, which the VM's id keys for ssh."""
        from eps.shell.lanes.gcp.power import is_stopped, start_instance

        client = self.client()
        match is_stopped(client, handle):
            case Failure(f):
                return Failure(f)
            case Success(False):
                return Success(None)
        up = start_instance(client, handle, within_s=self.access.patience.within_s)
        return up.bind(lambda h: reach_again(self.access, h, lambda: client.address(h)))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
