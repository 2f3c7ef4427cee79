"""Starting a stopped VM again (``instances.start``): a VM its watcher powered off after
the linger, with its job's outputs still on its disk, boots once more so they can be pulled.

GCE keeps a TERMINATED VM's disk and bills only for it; ``start`` boots it (STAGING, then
RUNNING) with the same disk, host keys and name, and a new ephemeral external address.  A
zone out of capacity refuses in the operation (``ZONE_RESOURCE_POOL_EXHAUSTED``): the VM
stays TERMINATED, and the failure says so (a later ``eps pull`` tries again).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from returns.result import Failure, Result, Success

from eps.core.model import evolve
from eps.core.outcome import FailureKind, Handle, LaneFailure
from eps.core.states import HandleState
from eps.shell.lanes.gcp.calls import RateLimitOutlasted
from eps.shell.lanes.gcp.wire import NOT_READY, classify_exception, compute, errors, expected_errors, not_ready
from eps.shell.util.polling import poll_until

if TYPE_CHECKING:
    from eps.shell.lanes.gcp.client import GcpClient


def start_instance(client: GcpClient, handle: Handle, *, within_s: float) -> Result[Handle, LaneFailure]:
    """Boot the stopped VM ``handle`` and wait (up to ``within_s``) until it is RUNNING."""
    zone = handle.zone or ""
    try:
        api, _, _ = errors()
        compute_v1 = compute()
        instances, _ = client._clients()
        request = compute_v1.StartInstanceRequest(
            project=client.project, zone=zone, instance=handle.id, request_id=str(uuid.uuid4())
        )
        try:
            op = client._call(
                lambda: instances.start_unary(request=request, retry=None, timeout=client._request_timeout_s)
            )
        except api.NotFound:
            return Failure(LaneFailure(FailureKind.TRANSIENT, f"VM {handle.id} is gone", code="notFound"))
        failure = client._finish(zone, op, f"start of {handle.id}")
    except RateLimitOutlasted as gave_up:
        return Failure(gave_up.failure())
    except expected_errors() as exc:
        if not_ready(exc):  # still stopping: it can be started once it has stopped
            return Failure(LaneFailure(FailureKind.TRANSIENT, f"VM {handle.id} is still stopping", code=NOT_READY))
        return Failure(classify_exception(exc))
    if failure is not None:
        return Failure(failure)

    def running() -> Result[Handle, LaneFailure] | None:
        got = client.status(handle)
        if isinstance(got, Failure) or got.unwrap().state is HandleState.RUNNING:
            return got
        return None

    done = poll_until(running, timeout_s=within_s, interval_s=client._poll_interval_s)
    if done is None:
        why = f"VM {handle.id} was started again but is not RUNNING after {within_s:g} s"
        return Failure(LaneFailure(FailureKind.TRANSIENT, why, code="start_timeout"))
    return done.map(lambda h: evolve(h, state=HandleState.RUNNING))


def is_stopped(client: GcpClient, handle: Handle) -> Result[bool, LaneFailure]:
    """Whether the VM is there but powered off (TERMINATED, STOPPED, SUSPENDED)."""
    got = client.status(handle)
    if isinstance(got, Failure):
        return Failure(got.failure())
    return Success(got.unwrap().state is HandleState.FINISHED)
