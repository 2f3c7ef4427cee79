"""Compute Engine through ``google-cloud-compute``: create, status, delete, list, console.

- ``InstancesClient.insert(...).result()`` polls compute.googleapis.com even
  when a custom endpoint is set and stays silent when an operation error has
  no HTTP status, so we call ``insert_unary`` and wait on the zonal operation
  with our own ``ZoneOperationsClient``, reading ``op.error.errors`` ourselves
  (notes/providers.md).
- The client's own retries are switched off (``retry=None``); transport
  errors and 5xx are retried here, bounded, with exponential backoff and
  jitter by ``stamina``, then reported as ``TRANSIENT``.
- Rate refusals are waited out, bounded and reported (:mod:`.calls`), then
  ``RATE_LIMITED``; ``resourceNotReady`` on a delete is retried the same way,
  then ``TRANSIENT``.  The insert body is built by :mod:`.request`.
- A 409 on insert adopts the machine when it is this dispatch's: the name is
  deterministic, so even a new attempt cannot duplicate a machine.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from returns.result import Failure, Result, Success

from eps.core.model import Job, LaneKind, Provisioning, Rung, evolve
from eps.core.names import rung_provisioning
from eps.core.outcome import FailureKind, Handle, LaneFailure
from eps.core.states import HandleState
from eps.core.tables import JOB_LIFECYCLE
from eps.shell.lanes.gcp.calls import Calls, RateLimitOutlasted, no_wait, outlasted
from eps.shell.lanes.gcp.request import InstanceShape, build_instance
from eps.shell.lanes.gcp.wire import (
    LABEL_ATTEMPT,
    LABEL_DISPATCH,
    LABEL_RUNG,
    META_DISPATCH,
    META_LANE,
    META_RUNG,
    NOT_READY,
    LabeledInstance,
    basename,
    check_rung,
    classify_exception,
    classify_operation,
    compute,
    errors,
    expected_errors,
    insert_request_id,
    instance_name,
    instance_state,
    label_value,
    lost,
    not_ready,
    settings_hint,
    ssh_keys_item,
)
from eps.shell.util.polling import poll_until
from eps.shell.util.retry import RetryPolicy

if TYPE_CHECKING:
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import Credentials
    from google.cloud import compute_v1
    from google.cloud.compute_v1 import Operation  # its name: _await's local compute_v1 hides the module

    from eps.shell.config.settings import GcpSettings

T = TypeVar("T")

_WAIT_CALL_TIMEOUT_S = 150.0  # zoneOperations.wait blocks up to 2 minutes server-side


def _fate_unknown(failure: LaneFailure, name: str) -> LaneFailure:
    return LaneFailure(
        FailureKind.UNKNOWN_FATE,
        f"{failure.message}; instance {name} may still appear: eps reconcile releases it if it does",
        code=failure.code,
    )


class GcpClient:
    """Compute Engine for the ``gcp`` lane.

    Production: ``GcpLane(project, image=...)`` uses Application Default
    Credentials (``GOOGLE_APPLICATION_CREDENTIALS`` or the gcloud ADC file).
    Tests: pass ``credentials=AnonymousCredentials()`` and
    ``client_options=ClientOptions(api_endpoint="http://127.0.0.1:PORT")``;
    ``sleep``/``clock`` drive the operation wait loop and ``retry`` the
    per-call retries.  Clients are built on first use.
    """

    def __init__(
        self,
        project: str,
        *,
        image: str,
        credentials: Credentials | None = None,
        client_options: ClientOptions | dict[str, Any] | None = None,
        transport: str = "rest",
        lane: str = "gcp",
        gpu_image: str | None = None,
        network: str = "global/networks/default",
        subnetwork: str | None = None,
        external_ip: bool = True,
        service_account: str | None = None,
        scopes: tuple[str, ...] = ("https://www.googleapis.com/auth/cloud-platform",),
        tags: tuple[str, ...] = (),
        boot_disk_gb: int = 50,
        disk_type: str = "pd-balanced",
        spot_termination_action: str = "DELETE",
        retry: RetryPolicy | None = None,
        request_timeout_s: float = 60.0,
        operation_timeout_s: float = 600.0,
        poll_interval_s: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        on_wait: Callable[[float, str], None] = no_wait,
        rate_limit_waits: int = 4,
        rate_limit_wait_s: float = 2.0,
        rate_limit_wait_max_s: float = 30.0,
        capacity_wait_s: float = 0.0,
        work_root: str = "eps-runs",
        linger_s: int = JOB_LIFECYCLE.linger_s,
    ) -> None:
        if spot_termination_action not in ("DELETE", "STOP"):
            raise ValueError(f"spot_termination_action must be DELETE or STOP, not {spot_termination_action!r}")
        self.project = project
        self.image = image
        self.lane = lane
        self._credentials = credentials
        self._client_options = client_options
        self._transport = transport
        self.gpu_image = gpu_image
        self._shape = InstanceShape(
            image=image,
            gpu_image=gpu_image,
            network=network,
            subnetwork=subnetwork,
            external_ip=external_ip,
            service_account=service_account,
            scopes=scopes,
            tags=tags,
            boot_disk_gb=boot_disk_gb,
            disk_type=disk_type,
            spot_action=spot_termination_action,
            capacity_wait_s=capacity_wait_s,
            work_root=work_root,
            linger_s=linger_s,
        )
        self._retry = retry or RetryPolicy()
        self._request_timeout_s = request_timeout_s
        self._operation_timeout_s = operation_timeout_s
        self._poll_interval_s = poll_interval_s
        self._sleep = sleep
        self._clock = clock
        self._on_wait = on_wait
        self._rate_waits = rate_limit_waits
        self._calls = Calls(self._retry, sleep, on_wait, rate_limit_waits, rate_limit_wait_s, rate_limit_wait_max_s)
        self._capacity_wait_s = capacity_wait_s
        self._instances_client: compute_v1.InstancesClient | None = None
        self._operations_client: compute_v1.ZoneOperationsClient | None = None

    @classmethod
    def from_settings(cls, settings: GcpSettings, **options: Any) -> GcpClient:
        """The lane as configured (``[gcp]`` in the config file).

        No endpoint: Google's, with Application Default Credentials.  A plain
        ``http://`` endpoint is a local test server: anonymous credentials."""
        if not settings.project:
            raise ValueError("GCP project is not configured: set gcp.project in the eps config")
        if settings.endpoint:
            from google.api_core.client_options import ClientOptions

            options.setdefault("client_options", ClientOptions(api_endpoint=settings.endpoint))
            if settings.endpoint.startswith("http://"):
                from google.auth.credentials import AnonymousCredentials

                options.setdefault("credentials", AnonymousCredentials())  # type: ignore[no-untyped-call]
        configured = {
            "gpu_image": settings.gpu_image,
            "network": settings.network,
            "subnetwork": settings.subnetwork,
            "external_ip": settings.external_ip,
            "disk_type": settings.disk_type,
            "service_account": settings.service_account,
            "scopes": settings.scopes,
            "tags": settings.tags,
            "capacity_wait_s": float(settings.flex_start_wait_s),
            "work_root": settings.work_root,
        }
        for key, value in configured.items():
            options.setdefault(key, value)
        return cls(settings.project, image=settings.image, **options)

    # -- public --------------------------------------------------------------

    def create(
        self,
        job: Job,
        rung: Rung,
        dispatch_id: str,
        attempt: int,
        *,
        copy: int = 0,
        name: str | None = None,
        ssh_public_key: str | None = None,
        ssh_user: str = "eps",
        also_keys: tuple[str, ...] = (),
    ) -> Result[Handle, LaneFailure]:
        """Start one machine for ``rung`` (copy ``copy`` of a ``--count`` fan-out), named
        ``name`` when given (the walker's name for the attempt), else by dispatch, rung and copy.
        The insert's request id follows the name: the same attempt sent again is a no-op at
        Compute; another attempt on the same rung (a resume) is a new request.

        ``ssh_public_key``: one OpenSSH public key line; the VM gets the metadata item
        ``ssh-keys`` = ``<ssh_user>:<key>`` (GCE's ``USERNAME:KEY_VALUE`` format), so the
        guest environment makes ``ssh_user`` with that key (:meth:`address` says where).
        ``also_keys``: more keys let in as ``ssh_user`` (the team's other hosts': one line each;
        one that is not an OpenSSH key line is left out, never the job's failure).

        Success means the insert operation finished without error.  An
        operation still RUNNING after ``operation_timeout_s`` is TRANSIENT:
        the machine may yet appear, under the same name and labels, where
        :meth:`list_by_label` finds it and a repeated create adopts it."""
        problem = check_rung(job, rung)
        keys = ssh_keys_item(ssh_user, ssh_public_key) if ssh_public_key is not None else None
        if problem is None and isinstance(keys, LaneFailure):
            problem = keys
        if isinstance(keys, str) and also_keys:
            more = [k for k in (ssh_keys_item(ssh_user, k) for k in also_keys) if isinstance(k, str) and k != keys]
            keys = "\n".join(dict.fromkeys([keys, *more]))
        if problem is not None:
            return Failure(problem)
        zone = rung.zone or ""
        given = name
        name = name or instance_name(dispatch_id, rung, copy)
        waited = 0.0
        try:
            api, _, _ = errors()
            compute_v1 = compute()
            ssh_keys = keys if isinstance(keys, str) else None
            instance = build_instance(
                job, rung, dispatch_id, attempt, name, copy, ssh_keys, self._shape, ssh_user=ssh_user
            )
            instances, _ = self._clients()
            for resend in range(self._rate_waits + 1):
                request = compute_v1.InsertInstanceRequest(
                    project=self.project,
                    zone=zone,
                    instance_resource=instance,
                    request_id=insert_request_id(dispatch_id, rung, attempt, copy, resend, name=given),
                )
                try:
                    op = self._call(
                        lambda r=request: instances.insert_unary(  # type: ignore[misc]
                            request=r, retry=None, timeout=self._request_timeout_s
                        )
                    )
                except api.Conflict:
                    return self._adopt(rung, dispatch_id, name)
                # A flex-start insert may wait for capacity as long as it asked to.
                patience = self._capacity_wait_s if rung.provisioning is Provisioning.FLEX_START else 0.0
                failure = self._finish(zone, op, f"insert of {name} in {zone}", extra_s=patience)
                if failure is None:
                    break
                if failure.code == "OPERATION_TIMEOUT":
                    return Failure(_fate_unknown(failure, name))
                if failure.kind is not FailureKind.RATE_LIMITED:
                    return Failure(settings_hint(failure, self.project))
                # Refused inside the operation: nothing was made; ask again after a wait.
                wait = self._calls.rate_wait(resend + 1, None)
                if resend == self._rate_waits:
                    return Failure(outlasted(failure, resend, waited, wait))
                self._calls.wait(wait, f"GCP rate limit on insert of {name} ({failure.code}); the same rung again")
                waited += wait
        except RateLimitOutlasted as gave_up:
            failure = classify_exception(gave_up.cause)
            return Failure(outlasted(failure, gave_up.waits, gave_up.waited_s, gave_up.next_s))
        except expected_errors() as exc:
            # Every retry re-sent the same request id (GCE answers a repeat with the first
            # insert's operation), so an insert that never answered may still make the VM.
            failure = classify_exception(exc)
            return Failure(_fate_unknown(failure, name) if lost(exc) else settings_hint(failure, self.project))
        return self._made(rung, name, zone)

    def _made(self, rung: Rung, name: str, zone: str) -> Result[Handle, LaneFailure]:
        """What the finished insert made, by the instance's own status.

        PROVISIONING, STAGING and RUNNING have started.  PENDING (a flex-start VM waiting
        for capacity from the Dynamic Workload Scheduler; ``Instance.Status`` in
        google-cloud-compute) is waited on, bounded by ``capacity_wait_s`` (the insert's
        ``requestValidForDuration``) plus one poll; a request that outlives it is deleted
        and the zone reported out of capacity.  A VM that stopped or vanished before it
        ran (STOPPED, TERMINATED, DEPROVISIONING, ...) did not start."""
        deadline = self._clock() + self._capacity_wait_s + self._poll_interval_s
        told = False
        try:
            api, _, _ = errors()
            while True:
                try:
                    instance = self._get(zone, name)
                except api.NotFound:
                    return Failure(
                        LaneFailure(
                            FailureKind.ZONE_EXHAUSTED,
                            f"{name} in {zone} was gone before it ran: no capacity for {rung.machine}",
                            code="VANISHED_BEFORE_RUNNING",
                        )
                    )
                if instance.status != "PENDING":
                    break
                if self._clock() >= deadline:
                    return self._gave_up_waiting(rung, name, zone)
                if not told:
                    told = True
                    self._on_wait(
                        self._capacity_wait_s,
                        f"{name} is PENDING: waiting up to {self._capacity_wait_s:g} s for capacity in {zone}",
                    )
                self._sleep(self._poll_interval_s)
        except RateLimitOutlasted as gave_up:
            return Failure(gave_up.failure())
        except expected_errors() as exc:
            return Failure(classify_exception(exc))
        state = self._state(instance)
        if state in (HandleState.STARTING, HandleState.RUNNING):
            return Success(self._handle(rung.lane, rung.key, name, zone, rung.machine or "", state))
        return Failure(
            LaneFailure(
                FailureKind.TRANSIENT,
                f"{name} in {zone} is {instance.status} right after its create: it never ran",
                code=str(instance.status),
            )
        )

    def _gave_up_waiting(self, rung: Rung, name: str, zone: str) -> Result[Handle, LaneFailure]:
        """A PENDING VM that got no capacity in time: cancel the request (delete it)."""
        deleted = self.delete(self._handle(rung.lane, rung.key, name, zone, rung.machine or "", HandleState.STARTING))
        waited = f"{name} in {zone} stayed PENDING for {self._capacity_wait_s:g} s"
        if isinstance(deleted, Failure):
            why = f"{waited} and could not be deleted ({deleted.failure().message}); eps reconcile releases it"
            return Failure(LaneFailure(FailureKind.UNKNOWN_FATE, why, code="PENDING_TIMEOUT"))
        why = f"no capacity for {rung.machine}: {waited} (request deleted)"
        return Failure(LaneFailure(FailureKind.ZONE_EXHAUSTED, why, code="PENDING_TIMEOUT"))

    def status(self, handle: Handle) -> Result[Handle, LaneFailure]:
        """The handle with its current ``state``; a preempted spot VM (TERMINATED,
        or gone) is ``Failure(PREEMPTED)`` so the core can re-plan."""
        spot_rung = rung_provisioning(handle.rung) is Provisioning.SPOT
        try:
            api, _, _ = errors()
            try:
                instance = self._get(handle.zone or "", handle.id)
            except api.NotFound:
                if spot_rung:
                    return Failure(
                        LaneFailure(FailureKind.PREEMPTED, f"spot VM {handle.id} is gone (preempted)", code="notFound")
                    )
                return Success(evolve(handle, state=HandleState.GONE))
        except expected_errors() as exc:
            return Failure(classify_exception(exc))
        state = self._state(instance)
        if state is HandleState.PREEMPTED:
            return Failure(
                LaneFailure(FailureKind.PREEMPTED, f"spot VM {handle.id} was preempted (TERMINATED)", code="TERMINATED")
            )
        return Success(evolve(handle, state=state))

    def address(self, handle: Handle) -> Result[tuple[str, int], LaneFailure]:
        """Where ssh reaches the VM: ``(natIP, 22)`` of ``networkInterfaces[0].accessConfigs[0]``.

        A VM made without an external address (``gcp.external_ip = false``) has none: a
        Failure that names the setting; one whose ephemeral address is not attached yet
        (not up, or stopped) is TRANSIENT: ask again once it runs."""
        try:
            api, _, _ = errors()
            try:
                instance = self._get(handle.zone or "", handle.id)
            except api.NotFound:
                return Failure(LaneFailure(FailureKind.TRANSIENT, f"VM {handle.id} is gone", code="notFound"))
        except RateLimitOutlasted as gave_up:
            return Failure(gave_up.failure())
        except expected_errors() as exc:
            return Failure(classify_exception(exc))
        nics = list(instance.network_interfaces)
        configs = list(nics[0].access_configs) if nics else []
        if not configs:
            return Failure(
                LaneFailure(
                    FailureKind.INVALID_REQUEST,
                    f"VM {handle.id} has no external address: set gcp.external_ip = true in the eps config "
                    "(or reach it over the VPC by its internal address)",
                    code="no_external_ip",
                )
            )
        nat_ip = configs[0].nat_i_p
        if not nat_ip:
            status = str(instance.status)
            why = "not running" if status in ("TERMINATED", "STOPPED", "STOPPING", "SUSPENDED") else "not attached yet"
            return Failure(
                LaneFailure(
                    FailureKind.TRANSIENT,
                    f"VM {handle.id} has no external address: {why} (status {status})",
                    code="no_address_yet",
                )
            )
        return Success((str(nat_ip), 22))

    def delete(self, handle: Handle) -> Result[Handle, LaneFailure]:
        """Delete the machine and wait for the operation; a machine already gone is success.

        ``resourceNotReady`` (the instance is still busy, e.g. still being created) is
        asked again after a bounded wait, then TRANSIENT: it never means "zone exhausted"."""
        busy = 0
        while True:
            outcome = self._delete_once(handle)
            if outcome is not NOT_READY:
                return outcome  # type: ignore[return-value]
            busy += 1
            if busy > self._rate_waits:
                return Failure(
                    LaneFailure(
                        FailureKind.TRANSIENT,
                        f"delete of {handle.id}: the instance stayed busy (resourceNotReady) after {busy - 1} waits",
                        code=NOT_READY,
                    )
                )
            why = f"GCP instance {handle.id} is busy (resourceNotReady); delete again"
            self._calls.wait(self._calls.rate_wait(busy, None), why)

    def _delete_once(self, handle: Handle) -> Result[Handle, LaneFailure] | str:
        try:
            api, _, _ = errors()
            compute_v1 = compute()
            instances, _ = self._clients()
            # One id per delete call: its own retries are deduplicated, while a later
            # delete of a re-created machine with the same name is not mistaken for this one.
            request = compute_v1.DeleteInstanceRequest(
                project=self.project, zone=handle.zone or "", instance=handle.id, request_id=str(uuid.uuid4())
            )
            try:
                op = self._call(
                    lambda: instances.delete_unary(request=request, retry=None, timeout=self._request_timeout_s)
                )
            except api.NotFound:
                return Success(evolve(handle, state=HandleState.GONE))
            failure = self._finish(handle.zone or "", op, f"delete of {handle.id}")
            if failure is not None:
                return NOT_READY if failure.code == NOT_READY else Failure(failure)
        except RateLimitOutlasted as gave_up:
            return Failure(gave_up.failure())
        except expected_errors() as exc:
            return NOT_READY if not_ready(exc) else Failure(classify_exception(exc))
        return Success(evolve(handle, state=HandleState.RELEASED))

    def list_by_label(self, dispatch_id: str | None = None) -> Result[tuple[LabeledInstance, ...], LaneFailure]:
        """Every instance eps made (or those of one dispatch), in every zone, by label filter."""
        if dispatch_id is None:
            filter_text = f"labels.{LABEL_DISPATCH}:*"
        else:
            filter_text = f'labels.{LABEL_DISPATCH} = "{label_value(dispatch_id)}"'
        try:
            compute_v1 = compute()
            instances, _ = self._clients()
            request = compute_v1.AggregatedListInstancesRequest(project=self.project, filter=filter_text)

            def listing() -> list[Any]:
                pages = instances.aggregated_list(request=request, retry=None, timeout=self._request_timeout_s)
                return [instance for _, scoped in pages for instance in scoped.instances]

            found = self._call(listing)
        except expected_errors() as exc:
            return Failure(classify_exception(exc))
        return Success(tuple(self._labeled(instance) for instance in found))

    def close(self) -> None:
        for client in (self._instances_client, self._operations_client):
            if client is not None:
                client.transport.close()  # type: ignore[no-untyped-call]
        self._instances_client = self._operations_client = None

    # -- internals -------------------------------------------------------------

    def _clients(self) -> tuple[compute_v1.InstancesClient, compute_v1.ZoneOperationsClient]:
        if self._instances_client is None or self._operations_client is None:
            compute_v1 = compute()
            options = {
                "credentials": self._credentials,
                "client_options": self._client_options,
                "transport": self._transport,
            }
            self._instances_client = compute_v1.InstancesClient(**options)
            self._operations_client = compute_v1.ZoneOperationsClient(**options)
        return self._instances_client, self._operations_client

    def _call(self, fn: Callable[[], T]) -> T:
        return self._calls.call(fn)

    def _get(self, zone: str, name: str) -> compute_v1.Instance:
        instances, _ = self._clients()
        return self._call(
            lambda: instances.get(
                project=self.project, zone=zone, instance=name, retry=None, timeout=self._request_timeout_s
            )
        )

    def _finish(self, zone: str, op: compute_v1.Operation, what: str, *, extra_s: float = 0.0) -> LaneFailure | None:
        """Wait for a zonal operation; its error, or TRANSIENT when it outlives the timeout
        (``operation_timeout_s`` plus ``extra_s``)."""
        done = self._await(zone, op, self._operation_timeout_s + extra_s)
        if done is None:
            return LaneFailure(
                FailureKind.TRANSIENT,
                f"{what} still running after {self._operation_timeout_s + extra_s:g} s",
                code="OPERATION_TIMEOUT",
            )
        return classify_operation(done)

    def _await(self, zone: str, op: compute_v1.Operation, timeout_s: float) -> compute_v1.Operation | None:
        """Wait until ``op`` is DONE (None after ``timeout_s``)."""
        compute_v1 = compute()
        _, operations = self._clients()
        done = compute_v1.Operation.Status.DONE
        if op.status == done:
            return op
        wait = partial(self._wait_call, operations, zone, op.name)

        def finished() -> Operation | None:
            now = self._call(wait)
            return now if now.status == done else None

        return poll_until(
            finished,
            timeout_s=timeout_s,
            interval_s=self._poll_interval_s,
            clock=self._clock,
            sleep=self._sleep,
        )

    def _wait_call(self, operations: compute_v1.ZoneOperationsClient, zone: str, name: str) -> compute_v1.Operation:
        return operations.wait(
            project=self.project, zone=zone, operation=name, retry=None, timeout=_WAIT_CALL_TIMEOUT_S
        )

    def _adopt(self, rung: Rung, dispatch_id: str, name: str) -> Result[Handle, LaneFailure]:
        """The name is taken (409): if the machine is this dispatch's, it is our machine."""
        zone = rung.zone or ""
        instance = self._get(zone, name)
        if instance.labels.get(LABEL_DISPATCH) != label_value(dispatch_id):
            return Failure(
                LaneFailure(
                    FailureKind.INVALID_REQUEST,
                    f"instance name {name} in {zone} is taken by a machine of another dispatch",
                    code="alreadyExists",
                )
            )
        state = self._state(instance)
        if state is HandleState.PREEMPTED:
            return Failure(
                LaneFailure(FailureKind.PREEMPTED, f"spot VM {name} was preempted (TERMINATED)", code="TERMINATED")
            )
        return Success(self._handle(rung.lane, rung.key, name, zone, rung.machine or "", state))

    def _state(self, instance: compute_v1.Instance) -> HandleState:
        scheduling = instance.scheduling
        return instance_state(instance.status, scheduling.provisioning_model, scheduling.instance_termination_action)

    def _handle(self, lane: str, rung_key: str, name: str, zone: str, machine: str, state: HandleState) -> Handle:
        return Handle(lane=lane, kind=LaneKind.GCP, id=name, rung=rung_key, zone=zone, machine=machine, state=state)

    def _labeled(self, instance: compute_v1.Instance) -> LabeledInstance:
        meta = {item.key: item.value for item in instance.metadata.items}
        labels = dict(instance.labels)
        attempt = labels.get(LABEL_ATTEMPT, "")
        handle = self._handle(
            meta.get(META_LANE, self.lane),
            meta.get(META_RUNG, labels.get(LABEL_RUNG, "")),
            instance.name,
            basename(instance.zone),
            basename(instance.machine_type),
            self._state(instance),
        )
        return LabeledInstance(
            dispatch_id=meta.get(META_DISPATCH, labels.get(LABEL_DISPATCH, "")),
            attempt=int(attempt) if attempt.isdigit() else None,
            handle=handle,
        )
