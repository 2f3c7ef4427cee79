"""The GCP lane: Compute Engine machines through ``google-cloud-compute``.

Rules of this module:

- ``google.cloud.compute_v1`` (about 1.1-1.8 s and 150 MB to import) and every
  other ``google.*``/``requests``/``stamina`` import happen inside functions,
  never at module level, so ``eps plan`` never pays for them.
- The adapter carries out one rung and classifies what happened into
  :class:`~eps.core.outcome.FailureKind`; it never decides what comes next.
- ``InstancesClient.insert(...).result()`` polls compute.googleapis.com even
  when a custom endpoint is set and stays silent when an operation error has
  no HTTP status, so we call ``insert_unary`` and wait on the zonal operation
  with our own ``ZoneOperationsClient``, reading ``op.error.errors`` ourselves
  (notes/providers.md).
- Every insert carries a deterministic ``request_id`` (uuid5 of dispatch, rung,
  copy and attempt): GCE ignores a repeated id, so a retried create can never
  make a second machine.  The instance name is deterministic too, so even a
  new attempt cannot duplicate a machine: a 409 adopts the one we own.
- The client's own retries are switched off (``retry=None``); transport
  errors, 429 and 5xx are retried here, bounded, with exponential backoff and
  jitter by ``stamina``, then reported as ``TRANSIENT`` / ``RATE_LIMITED``.
- Messages never carry credentials: auth failures are described by exception
  type and a fixed hint, provider errors by the provider's own message.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import time
import uuid
from collections.abc import Callable, Iterable
from enum import StrEnum
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import frozen
from returns.result import Failure, Result, Success

from eps.core.model import Job, LaneKind, Provisioning, Rung, evolve
from eps.core.outcome import FailureKind, Handle, LaneFailure

if TYPE_CHECKING:
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import Credentials
    from google.cloud import compute_v1

    from eps.shell.config import GcpSettings
from eps.shell.retry import RetryPolicy

T = TypeVar("T")

# --------------------------------------------------------------- the tables ---

#: What a provider code means for the rung.  Keys are the ``code`` of a DONE
#: zonal operation's ``error.errors[]`` or the ``reason`` of a synchronous
#: error's ``errors[]`` (notes/providers.md; GCE "Troubleshooting resource
#: availability errors").  ``QUOTA_REGION`` widens to ``QUOTA_GLOBAL`` when the
#: metric is a global one (:data:`GLOBAL_QUOTA_METRICS`).
PROVIDER_CODES: dict[str, FailureKind] = {
    "ZONE_RESOURCE_POOL_EXHAUSTED": FailureKind.ZONE_EXHAUSTED,
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": FailureKind.ZONE_EXHAUSTED,
    "UNSUPPORTED_OPERATION": FailureKind.ZONE_EXHAUSTED,
    "resourceNotReady": FailureKind.ZONE_EXHAUSTED,
    "RESOURCE_OPERATION_RATE_EXCEEDED": FailureKind.RATE_LIMITED,
    "rateLimitExceeded": FailureKind.RATE_LIMITED,
    "userRateLimitExceeded": FailureKind.RATE_LIMITED,
    "QUOTA_EXCEEDED": FailureKind.QUOTA_REGION,
    "quotaExceeded": FailureKind.QUOTA_REGION,
}

#: Quota metrics that are per project, not per region: exceeding one means no
#: zone anywhere will do.  GCE names them ``GPUS_ALL_REGIONS`` in messages and
#: ``compute.googleapis.com/gpus_all_regions`` in ``quotaInfo.metricName``.
GLOBAL_QUOTA_METRICS: tuple[str, ...] = ("GPUS_ALL_REGIONS", "CPUS_ALL_REGIONS")

#: HTTP statuses worth retrying the same call for (then TRANSIENT / RATE_LIMITED).
RETRY_STATUSES: frozenset[int] = frozenset({429, 500, 502, 503, 504})

#: Machine families whose GPUs are built in; they cannot live-migrate, so
#: ``on_host_maintenance`` must be TERMINATE (GCE "GPU machine types").
GPU_FAMILIES: tuple[str, ...] = ("a2", "a3", "a4", "g2")

#: Labels and metadata keys eps puts on every instance it makes.
LABEL_DISPATCH = "eps-dispatch"
LABEL_RUNG = "eps-rung"
LABEL_ATTEMPT = "eps-attempt"
LABEL_COPY = "eps-copy"
LABEL_PROVISIONING = "eps-provisioning"
META_DISPATCH = "eps-dispatch-id"  # verbatim, labels may be sanitized
META_RUNG = "eps-rung-key"
META_LANE = "eps-lane"
EXIT_CODE_PATH = "/var/lib/eps/exit-code"
#: The line the startup script prints last on the serial console (see :meth:`GcpLane.job_output`).
EXIT_MARKER = "eps: exit code "

# uuid5 namespace for insert request ids; fixed forever so retries agree.
_REQUEST_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "eps:gcp:instances.insert")
_WAIT_CALL_TIMEOUT_S = 150.0  # zoneOperations.wait blocks up to 2 minutes server-side
_MAX_MESSAGE = 300


class InstanceState(StrEnum):
    """What ``status`` reports in ``Handle.state``; GCE's status words folded."""

    STARTING = "starting"  # PROVISIONING, STAGING
    RUNNING = "running"
    STOPPING = "stopping"  # STOPPING, SUSPENDING, PENDING_STOP
    STOPPED = "stopped"  # TERMINATED or SUSPENDED, on-demand
    REPAIRING = "repairing"
    PREEMPTED = "preempted"  # a spot VM TERMINATED (action STOP) or gone (action DELETE)
    GONE = "gone"  # an on-demand VM that no longer exists
    DELETED = "deleted"  # we deleted it


_STATUS_STATES: dict[str, InstanceState] = {
    "PROVISIONING": InstanceState.STARTING,
    "STAGING": InstanceState.STARTING,
    "RUNNING": InstanceState.RUNNING,
    "STOPPING": InstanceState.STOPPING,
    "SUSPENDING": InstanceState.STOPPING,
    "PENDING_STOP": InstanceState.STOPPING,
    "TERMINATED": InstanceState.STOPPED,
    "SUSPENDED": InstanceState.STOPPED,
    "REPAIRING": InstanceState.REPAIRING,
}


@frozen
class LabeledInstance:
    """An instance found by :meth:`GcpLane.list_by_label`: whose it is and how to find it again."""

    dispatch_id: str
    attempt: int | None
    handle: Handle


# ------------------------------------------------------------ pure helpers ---


def label_value(text: str) -> str:
    """``text`` as a GCE label value: lowercase ``[a-z0-9_-]``, at most 63 characters.

    Valid text is kept as is; anything else is sanitized and suffixed with a
    short digest of the original so distinct ids stay distinct."""
    if re.fullmatch(r"[a-z0-9_-]{0,63}", text):
        return text
    slug = re.sub(r"[^a-z0-9_-]+", "_", text.lower()).strip("_")
    return f"{slug[:54]}-{_digest(text)[:8]}"


def instance_name(dispatch_id: str, rung: Rung, copy: int = 0) -> str:
    """A valid GCE name (``[a-z]([-a-z0-9]{0,61}[a-z0-9])?``) fixed by dispatch, rung and copy."""
    slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", dispatch_id.lower())).strip("-")[:30].strip("-")
    digest = _digest(f"{dispatch_id}\0{rung.key}\0{copy}")[:10]
    return f"eps-{slug}-{digest}" if slug else f"eps-{digest}"


def insert_request_id(dispatch_id: str, rung: Rung, attempt: int, copy: int = 0) -> str:
    """The insert's idempotency key: a name-based UUID (version 5, so never all zeros)."""
    return str(uuid.uuid5(_REQUEST_NAMESPACE, f"{dispatch_id}\0{rung.key}\0{copy}\0{attempt}"))


def startup_script(job: Job, dispatch_id: str, rung: Rung) -> str:
    """The ``startup-script`` metadata: run the job command once, record its exit code,
    then power the machine off so a finished job never keeps a paid VM running.

    The command is shlex-quoted; output goes to ``/var/lib/eps/job.log``; the
    exit code is written atomically to ``EXIT_CODE_PATH`` and published as the
    guest attribute ``eps/exit-code``.  A reboot (a STOP-action spot VM started
    again) never runs the command a second time."""
    command = shlex.join(job.command)
    return "\n".join(
        (
            "#!/bin/bash",
            f"# eps dispatch {shlex.quote(dispatch_id)} rung {shlex.quote(rung.key)}",
            "set -u",
            "state=/var/lib/eps",
            'mkdir -p "$state"',
            f'if [ -e {EXIT_CODE_PATH} ] || [ -e "$state/started" ]; then exit 0; fi',
            'date -u +%FT%TZ > "$state/started"',
            f'( {command} ) > "$state/job.log" 2>&1',
            "code=$?",
            f'echo "$code" > "$state/exit-code.tmp" && mv "$state/exit-code.tmp" {EXIT_CODE_PATH}',
            'curl -sf -X PUT --data "$code" -H "Metadata-Flavor: Google" '
            "http://metadata.google.internal/computeMetadata/v1/instance/guest-attributes/eps/exit-code || true",
            "# Leave the log tail and the exit code on the serial console: eps reads them",
            "# (getSerialPortOutput) into its own logs before it deletes the stopped VM.",
            'echo "eps: job log (last 64 KiB) follows"; tail -c 65536 "$state/job.log"; echo',
            f'echo "{EXIT_MARKER}$code"',
            "# The job is done: stop billing for the machine.  eps status/reconcile then",
            "# sees it TERMINATED, reads that as finished and deletes it (disk included).",
            "sync; shutdown -h now",
            "",
        )
    )


def is_gpu_machine(rung: Rung) -> bool:
    return rung.gpus > 0 or (rung.machine or "").split("-", 1)[0] in GPU_FAMILIES


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _basename(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _quota_kind(texts: Iterable[str]) -> FailureKind:
    folded = " ".join(texts).upper().replace("-", "_")
    if any(metric in folded for metric in GLOBAL_QUOTA_METRICS):
        return FailureKind.QUOTA_GLOBAL
    return FailureKind.QUOTA_REGION


def _check_rung(job: Job, rung: Rung) -> LaneFailure | None:
    if rung.kind is not LaneKind.GCP or rung.machine is None or rung.zone is None:
        return LaneFailure(FailureKind.INVALID_REQUEST, f"rung {rung.key} is not a GCP machine rung")
    if rung.provisioning not in (Provisioning.SPOT, Provisioning.ON_DEMAND):
        return LaneFailure(FailureKind.INVALID_REQUEST, f"rung {rung.key}: GCP needs spot or on-demand")
    if not job.command:
        return LaneFailure(FailureKind.INVALID_REQUEST, "the job has no command to run")
    return None


# ------------------------------------------------------- error classifying ---


def _compute() -> ModuleType:
    """``google.cloud.compute_v1``, imported on first use (it costs over a second)."""
    from google.cloud import compute_v1

    return compute_v1


def _errors() -> tuple[ModuleType, ModuleType, ModuleType]:
    """``google.api_core.exceptions``, ``google.auth.exceptions`` and ``requests``, lazily."""
    import requests
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    return api, auth, requests


def _expected_errors() -> tuple[type[Exception], ...]:
    """The exceptions a Compute call is expected to raise; anything else is a bug."""
    api, auth, requests = _errors()
    return (api.GoogleAPICallError, auth.GoogleAuthError, requests.RequestException)


def _retryable(exc: Exception) -> bool:
    """stamina's predicate: transport trouble, or a 429/5xx that names no known code."""
    api, auth, requests = _errors()
    if isinstance(exc, requests.RequestException | auth.TransportError):
        return True
    if isinstance(exc, auth.RefreshError):
        return bool(getattr(exc, "retryable", False))
    if isinstance(exc, api.GoogleAPICallError):
        return exc.code in RETRY_STATUSES and _known_reason(exc) is None
    return False


def _error_entries(exc: Any) -> list[dict[str, Any]]:
    return [e for e in getattr(exc, "errors", None) or () if isinstance(e, dict)]


def _known_reason(exc: Any) -> str | None:
    for entry in _error_entries(exc):
        for key in ("reason", "code"):
            value = entry.get(key)
            if isinstance(value, str) and value in PROVIDER_CODES:
                return value
    return None


def classify_exception(exc: Exception) -> LaneFailure:
    """One failed call (after retries) as a :class:`LaneFailure`.  Never quotes credentials."""
    api, auth, requests = _errors()
    if isinstance(exc, requests.RequestException | auth.TransportError):
        return LaneFailure(FailureKind.TRANSIENT, _clip(f"GCP unreachable: {type(exc).__name__}: {exc}"))
    if isinstance(exc, auth.RefreshError) and getattr(exc, "retryable", False):
        return LaneFailure(FailureKind.TRANSIENT, f"GCP token refresh kept failing ({type(exc).__name__})")
    if isinstance(exc, auth.GoogleAuthError):
        return LaneFailure(
            FailureKind.AUTH,
            f"GCP credentials missing or rejected ({type(exc).__name__}); set up Application Default "
            "Credentials (gcloud auth application-default login) or GOOGLE_APPLICATION_CREDENTIALS",
        )
    if not isinstance(exc, api.GoogleAPICallError):  # pragma: no cover - callers pass expected errors
        raise exc
    status = exc.code or 0
    entries = _error_entries(exc)
    text = next((e["message"] for e in entries if isinstance(e.get("message"), str)), None)
    message = _clip(f"GCP {status}: {text or exc.message}")
    reason = _known_reason(exc)
    if reason is not None:
        kind = PROVIDER_CODES[reason]
        if kind is FailureKind.QUOTA_REGION:
            kind = _quota_kind(str(e.get("message", "")) for e in entries)
        return LaneFailure(kind, message, code=reason)
    code = next((e["reason"] for e in entries if isinstance(e.get("reason"), str)), f"HTTP {status}")
    if status in (401, 403):
        return LaneFailure(FailureKind.AUTH, message, code=code)
    if status == 429:
        return LaneFailure(FailureKind.RATE_LIMITED, message, code=code)
    if status >= 500:
        return LaneFailure(FailureKind.TRANSIENT, message, code=code)
    return LaneFailure(FailureKind.INVALID_REQUEST, message, code=code)


def classify_operation(op: compute_v1.Operation) -> LaneFailure | None:
    """The failure a DONE zonal operation reports in ``error.errors``, or ``None``."""
    errors = list(op.error.errors)
    if not errors:
        return None
    known = [e for e in errors if e.code in PROVIDER_CODES]
    first = known[0] if known else errors[0]
    message = _clip(f"GCP {first.code}: {first.message}")
    if known:
        kind = PROVIDER_CODES[first.code]
        if kind is FailureKind.QUOTA_REGION:
            texts = [first.message]
            for detail in first.error_details:
                info = detail.quota_info
                texts += [info.metric_name, info.limit_name]
            kind = _quota_kind(texts)
        return LaneFailure(kind, message, code=first.code)
    status = op.http_error_status_code
    if status in (401, 403):
        kind = FailureKind.AUTH
    elif status >= 500 or status == 0:
        kind = FailureKind.TRANSIENT
    else:
        kind = FailureKind.INVALID_REQUEST
    return LaneFailure(kind, message, code=first.code or None)


# ---------------------------------------------------------------- the lane ---


class GcpLane:
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
        network: str = "global/networks/default",
        external_ip: bool = True,
        service_account: str | None = None,
        boot_disk_gb: int = 50,
        disk_type: str = "pd-balanced",
        spot_termination_action: str = "DELETE",
        retry: RetryPolicy | None = None,
        request_timeout_s: float = 60.0,
        operation_timeout_s: float = 600.0,
        poll_interval_s: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if spot_termination_action not in ("DELETE", "STOP"):
            raise ValueError(f"spot_termination_action must be DELETE or STOP, not {spot_termination_action!r}")
        self.project = project
        self.image = image
        self.lane = lane
        self._credentials = credentials
        self._client_options = client_options
        self._transport = transport
        self._network = network
        self._external_ip = external_ip
        self._service_account = service_account
        self._boot_disk_gb = boot_disk_gb
        self._disk_type = disk_type
        self._spot_action = spot_termination_action
        self._retry = retry or RetryPolicy()
        self._request_timeout_s = request_timeout_s
        self._operation_timeout_s = operation_timeout_s
        self._poll_interval_s = poll_interval_s
        self._sleep = sleep
        self._clock = clock
        self._instances_client: compute_v1.InstancesClient | None = None
        self._operations_client: compute_v1.ZoneOperationsClient | None = None

    @classmethod
    def from_settings(cls, settings: GcpSettings, **options: Any) -> GcpLane:
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

                options.setdefault("credentials", AnonymousCredentials())
        options.setdefault("service_account", settings.service_account)
        return cls(settings.project, image=settings.image, **options)

    # -- public --------------------------------------------------------------

    def create(
        self, job: Job, rung: Rung, dispatch_id: str, attempt: int, *, copy: int = 0
    ) -> Result[Handle, LaneFailure]:
        """Start one machine for ``rung`` (copy ``copy`` of a ``--count`` fan-out).

        Success means the insert operation finished without error.  An
        operation still RUNNING after ``operation_timeout_s`` is TRANSIENT:
        the machine may yet appear, under the same name and labels, where
        :meth:`list_by_label` finds it and a repeated create adopts it."""
        problem = _check_rung(job, rung)
        if problem is not None:
            return Failure(problem)
        zone = rung.zone or ""
        name = instance_name(dispatch_id, rung, copy)
        try:
            api, _, _ = _errors()
            compute_v1 = _compute()
            request = compute_v1.InsertInstanceRequest(
                project=self.project,
                zone=zone,
                instance_resource=self._instance(job, rung, dispatch_id, attempt, name, copy),
                request_id=insert_request_id(dispatch_id, rung, attempt, copy),
            )
            instances, _ = self._clients()
            try:
                op = self._call(
                    lambda: instances.insert_unary(request=request, retry=None, timeout=self._request_timeout_s)
                )
            except api.Conflict:
                return self._adopt(rung, dispatch_id, name)
            failure = self._finish(zone, op, f"insert of {name} in {zone}")
            if failure is not None:
                return Failure(failure)
        except _expected_errors() as exc:
            return Failure(classify_exception(exc))
        return Success(self._handle(rung.lane, rung.key, name, zone, rung.machine or "", InstanceState.RUNNING))

    def status(self, handle: Handle) -> Result[Handle, LaneFailure]:
        """The handle with its current ``state``; a preempted spot VM (TERMINATED,
        or gone) is ``Failure(PREEMPTED)`` so the core can re-plan."""
        spot_rung = handle.rung.endswith("/" + Provisioning.SPOT.value)
        try:
            api, _, _ = _errors()
            instances, _ = self._clients()
            try:
                instance = self._call(
                    lambda: instances.get(
                        project=self.project,
                        zone=handle.zone or "",
                        instance=handle.id,
                        retry=None,
                        timeout=self._request_timeout_s,
                    )
                )
            except api.NotFound:
                if spot_rung:
                    return Failure(
                        LaneFailure(FailureKind.PREEMPTED, f"spot VM {handle.id} is gone (preempted)", code="notFound")
                    )
                return Success(evolve(handle, state=InstanceState.GONE.value))
        except _expected_errors() as exc:
            return Failure(classify_exception(exc))
        state = self._state(instance)
        if state is InstanceState.PREEMPTED:
            return Failure(
                LaneFailure(FailureKind.PREEMPTED, f"spot VM {handle.id} was preempted (TERMINATED)", code="TERMINATED")
            )
        return Success(evolve(handle, state=state.value))

    def job_output(self, handle: Handle) -> Result[tuple[str, int | None], LaneFailure]:
        """The serial console (port 1) of a finished VM: the job's log tail that the startup
        script printed there, and its exit code (``None`` when the marker is missing)."""
        try:
            compute_v1 = _compute()
            instances, _ = self._clients()
            request = compute_v1.GetSerialPortOutputInstanceRequest(
                project=self.project, zone=handle.zone or "", instance=handle.id, port=1
            )
            out = self._call(
                lambda: instances.get_serial_port_output(request=request, retry=None, timeout=self._request_timeout_s)
            )
        except _expected_errors() as exc:
            return Failure(classify_exception(exc))
        text = out.contents
        code = None
        for line in reversed(text.splitlines()):
            _, marker, rest = line.partition(EXIT_MARKER)
            if marker and rest.strip().lstrip("-").isdigit():
                code = int(rest.strip())
                break
        return Success((text, code))

    def delete(self, handle: Handle) -> Result[Handle, LaneFailure]:
        """Delete the machine and wait for the operation; a machine already gone is success."""
        try:
            api, _, _ = _errors()
            compute_v1 = _compute()
            instances, _ = self._clients()
            # One id per delete() call: its own retries are deduplicated, while a later
            # delete of a re-created machine with the same name is not mistaken for this one.
            request = compute_v1.DeleteInstanceRequest(
                project=self.project, zone=handle.zone or "", instance=handle.id, request_id=str(uuid.uuid4())
            )
            try:
                op = self._call(
                    lambda: instances.delete_unary(request=request, retry=None, timeout=self._request_timeout_s)
                )
            except api.NotFound:
                return Success(evolve(handle, state=InstanceState.GONE.value))
            failure = self._finish(handle.zone or "", op, f"delete of {handle.id}")
            if failure is not None:
                return Failure(failure)
        except _expected_errors() as exc:
            return Failure(classify_exception(exc))
        return Success(evolve(handle, state=InstanceState.DELETED.value))

    def list_by_label(self, dispatch_id: str | None = None) -> Result[tuple[LabeledInstance, ...], LaneFailure]:
        """Every instance eps made (or those of one dispatch), in every zone, by label filter."""
        if dispatch_id is None:
            filter_text = f"labels.{LABEL_DISPATCH}:*"
        else:
            filter_text = f'labels.{LABEL_DISPATCH} = "{label_value(dispatch_id)}"'
        try:
            compute_v1 = _compute()
            instances, _ = self._clients()
            request = compute_v1.AggregatedListInstancesRequest(project=self.project, filter=filter_text)

            def listing() -> list[compute_v1.Instance]:
                pages = instances.aggregated_list(request=request, retry=None, timeout=self._request_timeout_s)
                return [instance for _, scoped in pages for instance in scoped.instances]

            found = self._call(listing)
        except _expected_errors() as exc:
            return Failure(classify_exception(exc))
        return Success(tuple(self._labeled(instance) for instance in found))

    def close(self) -> None:
        for client in (self._instances_client, self._operations_client):
            if client is not None:
                client.transport.close()
        self._instances_client = self._operations_client = None

    # -- internals -------------------------------------------------------------

    def _clients(self) -> tuple[compute_v1.InstancesClient, compute_v1.ZoneOperationsClient]:
        if self._instances_client is None or self._operations_client is None:
            compute_v1 = _compute()
            options = {
                "credentials": self._credentials,
                "client_options": self._client_options,
                "transport": self._transport,
            }
            self._instances_client = compute_v1.InstancesClient(**options)
            self._operations_client = compute_v1.ZoneOperationsClient(**options)
        return self._instances_client, self._operations_client

    def _call(self, fn: Callable[[], T]) -> T:
        import stamina

        policy = self._retry
        caller = stamina.RetryingCaller(
            attempts=policy.attempts,
            timeout=policy.timeout_s,
            wait_initial=policy.wait_initial_s,
            wait_max=policy.wait_max_s,
            wait_jitter=policy.wait_jitter_s,
        )
        return caller(_retryable, fn)

    def _finish(self, zone: str, op: Any, what: str) -> LaneFailure | None:
        """Wait for a zonal operation; its error, or TRANSIENT when it outlives the timeout."""
        done = self._await(zone, op)
        if done is None:
            return LaneFailure(
                FailureKind.TRANSIENT,
                f"{what} still running after {self._operation_timeout_s:g} s",
                code="OPERATION_TIMEOUT",
            )
        return classify_operation(done)

    def _await(self, zone: str, op: compute_v1.Operation) -> compute_v1.Operation | None:
        """Wait until ``op`` is DONE (None after ``operation_timeout_s``)."""
        compute_v1 = _compute()
        _, operations = self._clients()
        done = compute_v1.Operation.Status.DONE
        deadline = self._clock() + self._operation_timeout_s
        while op.status != done:
            if self._clock() >= deadline:
                return None
            op = self._call(partial(self._wait_call, operations, zone, op.name))
            if op.status != done:
                self._sleep(self._poll_interval_s)
        return op

    def _wait_call(self, operations: compute_v1.ZoneOperationsClient, zone: str, name: str) -> compute_v1.Operation:
        return operations.wait(
            project=self.project, zone=zone, operation=name, retry=None, timeout=_WAIT_CALL_TIMEOUT_S
        )

    def _adopt(self, rung: Rung, dispatch_id: str, name: str) -> Result[Handle, LaneFailure]:
        """The name is taken (409): if the machine is this dispatch's, it is our machine."""
        instances, _ = self._clients()
        zone = rung.zone or ""
        instance = self._call(
            lambda: instances.get(
                project=self.project, zone=zone, instance=name, retry=None, timeout=self._request_timeout_s
            )
        )
        if instance.labels.get(LABEL_DISPATCH) != label_value(dispatch_id):
            return Failure(
                LaneFailure(
                    FailureKind.INVALID_REQUEST,
                    f"instance name {name} in {zone} is taken by a machine of another dispatch",
                    code="alreadyExists",
                )
            )
        state = self._state(instance)
        if state is InstanceState.PREEMPTED:
            return Failure(
                LaneFailure(FailureKind.PREEMPTED, f"spot VM {name} was preempted (TERMINATED)", code="TERMINATED")
            )
        return Success(self._handle(rung.lane, rung.key, name, zone, rung.machine or "", state))

    def _state(self, instance: compute_v1.Instance) -> InstanceState:
        state = _STATUS_STATES.get(instance.status, InstanceState.RUNNING)
        scheduling = instance.scheduling
        # A preempted spot VM with action DELETE vanishes; with action STOP it is TERMINATED.
        # Our own startup script powers a VM off when its job ends, so TERMINATED means
        # "preempted" only for STOP-action spot VMs; otherwise the job finished.
        if (
            state is InstanceState.STOPPED
            and scheduling.provisioning_model == "SPOT"
            and scheduling.instance_termination_action != "DELETE"
        ):
            return InstanceState.PREEMPTED
        return state

    def _handle(self, lane: str, rung_key: str, name: str, zone: str, machine: str, state: InstanceState) -> Handle:
        return Handle(
            lane=lane, kind=LaneKind.GCP, id=name, rung=rung_key, zone=zone, machine=machine, state=state.value
        )

    def _labeled(self, instance: compute_v1.Instance) -> LabeledInstance:
        meta = {item.key: item.value for item in instance.metadata.items}
        labels = dict(instance.labels)
        attempt = labels.get(LABEL_ATTEMPT, "")
        handle = self._handle(
            meta.get(META_LANE, self.lane),
            meta.get(META_RUNG, labels.get(LABEL_RUNG, "")),
            instance.name,
            _basename(instance.zone),
            _basename(instance.machine_type),
            self._state(instance),
        )
        return LabeledInstance(
            dispatch_id=meta.get(META_DISPATCH, labels.get(LABEL_DISPATCH, "")),
            attempt=int(attempt) if attempt.isdigit() else None,
            handle=handle,
        )

    def _instance(
        self, job: Job, rung: Rung, dispatch_id: str, attempt: int, name: str, copy: int
    ) -> compute_v1.Instance:
        compute_v1 = _compute()
        zone = rung.zone or ""
        gpu = is_gpu_machine(rung)
        # Every scheduling field on one object: a second Scheduling would replace the first.
        if rung.provisioning is Provisioning.SPOT:
            scheduling = compute_v1.Scheduling(
                provisioning_model="SPOT",
                instance_termination_action=self._spot_action,
                on_host_maintenance="TERMINATE",
                automatic_restart=False,
            )
        else:
            scheduling = compute_v1.Scheduling(
                provisioning_model="STANDARD",
                on_host_maintenance="TERMINATE" if gpu else "MIGRATE",
                automatic_restart=True,
            )
        boot = compute_v1.AttachedDisk(
            boot=True,
            auto_delete=True,
            initialize_params=compute_v1.AttachedDiskInitializeParams(
                source_image=self.image,
                disk_size_gb=rung.disk_gb or self._boot_disk_gb,
                disk_type=f"zones/{zone}/diskTypes/{self._disk_type}",
            ),
        )
        nic = compute_v1.NetworkInterface(network=self._network)
        if self._external_ip:
            nic.access_configs = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
        metadata = {
            "startup-script": startup_script(job, dispatch_id, rung),
            "enable-guest-attributes": "TRUE",
            META_DISPATCH: dispatch_id,
            META_RUNG: rung.key,
            META_LANE: rung.lane,
        }
        instance = compute_v1.Instance(
            name=name,
            machine_type=f"zones/{zone}/machineTypes/{rung.machine}",
            scheduling=scheduling,
            disks=[boot],
            network_interfaces=[nic],
            metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v) for k, v in metadata.items()]),
            labels={
                LABEL_DISPATCH: label_value(dispatch_id),
                LABEL_RUNG: label_value(rung.key.replace("/", "_")),
                LABEL_ATTEMPT: str(attempt),
                LABEL_COPY: str(copy),
                LABEL_PROVISIONING: rung.provisioning.value,
            },
        )
        if self._service_account is not None:
            instance.service_accounts = [
                compute_v1.ServiceAccount(
                    email=self._service_account, scopes=["https://www.googleapis.com/auth/cloud-platform"]
                )
            ]
        return instance
