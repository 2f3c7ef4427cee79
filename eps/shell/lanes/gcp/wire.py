"""Compute Engine's wire format as eps uses it: what a provider code means, the names,
labels and request ids eps gives instances, the startup script, and the
classification of every failed call or operation.  Pure but for the lazy imports
of google's exception modules (it never calls out).

- ``google.cloud.compute_v1`` (about 1.1-1.8 s and 150 MB to import) and every
  other ``google.*``/``requests`` import happen inside functions, never at module
  level, so ``eps plan`` never pays for them.
- Every insert carries a deterministic ``request_id`` (uuid5 of dispatch, rung,
  copy and attempt): GCE ignores a repeated id, so a retried create can never
  make a second machine.  The instance name is deterministic too.
- Messages never carry credentials: auth failures are described by exception
  type and a fixed hint, provider errors by the provider's own message.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from attrs import frozen

from eps.core.lifecycle import time_limit_s
from eps.core.model import Job, LaneKind, Provisioning, Rung
from eps.core.names import PREFIX
from eps.core.outcome import FailureKind, Handle, LaneFailure
from eps.core.states import HandleState
from eps.core.watcher import WatchSpec, render_watcher

if TYPE_CHECKING:
    from google.cloud import compute_v1

# --------------------------------------------------------------- the tables ---

#: What a provider code means for the rung.  Keys are the ``code`` of a DONE
#: zonal operation's ``error.errors[]``, the ``reason`` of a synchronous error's
#: ``errors[]``, or the ``reason`` of its ``google.rpc.ErrorInfo`` in ``error.details``
#: (newer errors carry the reason only there); notes/providers.md, GCE
#: "Troubleshooting resource availability errors" and "Troubleshooting bulk VM
#: creation" (``insufficientCapacity``, ``rateLimitExceeded``).  ``QUOTA_REGION``
#: widens to ``QUOTA_GLOBAL`` when the metric is a global one (:data:`GLOBAL_QUOTA_METRICS`).
#: ``UNSUPPORTED_OPERATION`` says the request asks for something Compute does not do
#: (a bug in the request eps built), so it is INVALID_REQUEST, never capacity.
#: ``resourceNotReady`` on an insert means the zone cannot take it now; on a delete
#: the instance is still busy, and :meth:`GcpClient.delete` retries it (bounded).
PROVIDER_CODES: dict[str, FailureKind] = {
    "ZONE_RESOURCE_POOL_EXHAUSTED": FailureKind.ZONE_EXHAUSTED,
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": FailureKind.ZONE_EXHAUSTED,
    "insufficientCapacity": FailureKind.ZONE_EXHAUSTED,
    "resourceNotReady": FailureKind.ZONE_EXHAUSTED,
    "UNSUPPORTED_OPERATION": FailureKind.INVALID_REQUEST,
    "RESOURCE_OPERATION_RATE_EXCEEDED": FailureKind.RATE_LIMITED,
    "rateLimitExceeded": FailureKind.RATE_LIMITED,
    "userRateLimitExceeded": FailureKind.RATE_LIMITED,
    "RATE_LIMIT_EXCEEDED": FailureKind.RATE_LIMITED,  # the ErrorInfo reason of a rate refusal
    "QUOTA_EXCEEDED": FailureKind.QUOTA_REGION,
    "quotaExceeded": FailureKind.QUOTA_REGION,
}

#: What Compute's 400 says of a machine type the zone does not sell ("Invalid value for
#: field 'resource.machineType': '...'. Machine type with name '...' does not exist in zone
#: '...'."; GCE "Troubleshooting VM creation").
NOT_IN_ZONE = "does not exist in zone"

#: The reason Compute gives an operation on an instance that is still busy (being
#: created, or another operation on it still running): retried, never "zone exhausted".
NOT_READY = "resourceNotReady"

#: How a stockout reads when its code is one eps does not know (a new code, or a
#: generic one): the texts of GCE's resource-availability errors ("The zone '...' does
#: not have enough resources available to fulfill the request", "A ... VM instance is
#: currently unavailable in the ... zone"; GCE "Troubleshooting resource availability
#: errors").  Matched case-insensitively against the error's message.
STOCKOUT_TEXTS: tuple[re.Pattern[str], ...] = (
    re.compile(r"does not have enough resources available", re.IGNORECASE),
    re.compile(r"currently unavailable in the \S+ zone", re.IGNORECASE),
)

#: Quota metrics that are per project, not per region: exceeding one means no
#: zone anywhere will do.  GCE names them ``GPUS_ALL_REGIONS`` in messages and
#: ``compute.googleapis.com/gpus_all_regions`` in ``quotaInfo.metricName``.
GLOBAL_QUOTA_METRICS: tuple[str, ...] = ("GPUS_ALL_REGIONS", "CPUS_ALL_REGIONS")

#: HTTP statuses worth retrying the same call for (then TRANSIENT; a 429 is waited out instead).
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
#: How a GCP VM's watcher stops it: powered off (TERMINATED), nothing but its disk bills.
GCP_HALT = "sync; shutdown -h now"

# uuid5 namespace for insert request ids; fixed forever so retries agree.
# uuid5 namespace for insert request ids; fixed forever so retries agree.
_REQUEST_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "eps:gcp:instances.insert")
_MAX_MESSAGE = 300

#: GCE's instance ``status`` words in the handle vocabulary every lane shares.  A
#: TERMINATED spot VM with termination action STOP is PREEMPTED (see :func:`instance_state`).
STATUS_STATES: dict[str, HandleState] = {
    "PROVISIONING": HandleState.STARTING,
    "STAGING": HandleState.STARTING,
    "PENDING": HandleState.STARTING,
    "RUNNING": HandleState.RUNNING,
    "REPAIRING": HandleState.RUNNING,
    "STOPPING": HandleState.STOPPING,
    "SUSPENDING": HandleState.STOPPING,
    "PENDING_STOP": HandleState.STOPPING,
    "DEPROVISIONING": HandleState.STOPPING,
    "TERMINATED": HandleState.FINISHED,
    "STOPPED": HandleState.FINISHED,
    "SUSPENDED": HandleState.FINISHED,
}


def instance_state(status: str, provisioning_model: str, termination_action: str) -> HandleState:
    """The handle state of an instance.  Our startup script powers a VM off when its job
    ends, so TERMINATED means "finished", except for a STOP-action spot VM, which GCE
    stops when it preempts it (a DELETE-action spot VM vanishes instead).  An unknown
    status word is treated as still starting, never as running."""
    state = STATUS_STATES.get(status, HandleState.STARTING)
    if state is HandleState.FINISHED and provisioning_model == "SPOT" and termination_action != "DELETE":
        return HandleState.PREEMPTED
    return state


@frozen
class LabeledInstance:
    """An instance found by :meth:`GcpClient.list_by_label`: whose it is and how to find it again."""

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
    return f"{PREFIX}{slug}-{digest}" if slug else f"{PREFIX}{digest}"


def insert_request_id(
    dispatch_id: str, rung: Rung, attempt: int, copy: int = 0, resend: int = 0, *, name: str | None = None
) -> str:
    """The insert's idempotency key: a name-based UUID (version 5, so never all zeros).

    ``resend`` > 0: the insert sent again after Compute refused the earlier one inside its
    operation (a rate limit): a repeated id would only bring back the refused operation.
    ``name``: the instance's own name when the walker chose it (one per attempt)."""
    tail = f"\0resend{resend}" if resend else ""
    if name is not None:
        tail += f"\0name{name}"
    return str(uuid.uuid5(_REQUEST_NAMESPACE, f"{dispatch_id}\0{rung.key}\0{copy}\0{attempt}{tail}"))


def startup_script(job: Job, dispatch_id: str, rung: Rung, *, user: str, work_root: str, linger_s: int) -> str:
    """The ``startup-script`` metadata: the machine's own watcher (:mod:`eps.core.watcher`),
    from the first boot on.  eps ships and starts the job over ssh; the watcher powers the
    VM off (:data:`GCP_HALT`) when no job was launched in time, when the job ended and the
    linger passed, or when it outlived its limit.  A powered-off VM bills only its disk;
    ``eps status``/``eps reconcile`` then find it TERMINATED, read that as finished, and
    delete it.  ``rung`` is named in a comment, for whoever reads the metadata."""
    spec = WatchSpec(
        dispatch_id, user, f"{work_root.rstrip('/')}/{dispatch_id}/{job.task_index}", time_limit_s(job), GCP_HALT,
        linger_s=linger_s,
    )  # fmt: skip
    text = render_watcher(spec)
    head, _, rest = text.partition("\n")
    return f"{head}\n# rung {rung.key}\n{rest}"


def is_gpu_machine(rung: Rung) -> bool:
    return rung.gpus > 0 or (rung.machine or "").split("-", 1)[0] in GPU_FAMILIES


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def basename(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _quota_kind(texts: Iterable[str]) -> FailureKind:
    folded = " ".join(texts).upper().replace("-", "_")
    if any(metric in folded for metric in GLOBAL_QUOTA_METRICS):
        return FailureKind.QUOTA_GLOBAL
    return FailureKind.QUOTA_REGION


def check_rung(job: Job, rung: Rung) -> LaneFailure | None:
    if rung.kind is not LaneKind.GCP or rung.machine is None or rung.zone is None:
        return LaneFailure(FailureKind.INVALID_REQUEST, f"rung {rung.key} is not a GCP machine rung")
    if rung.provisioning not in (Provisioning.SPOT, Provisioning.ON_DEMAND, Provisioning.FLEX_START):
        return LaneFailure(FailureKind.INVALID_REQUEST, f"rung {rung.key}: GCP needs spot, on-demand or flex-start")
    if not job.command:
        return LaneFailure(FailureKind.INVALID_REQUEST, "the job has no command to run")
    return None


#: A login name GCE's guest environment makes from ``ssh-keys`` (a POSIX user name).
_SSH_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
#: One OpenSSH public key line: ``type base64 [comment]``.
_SSH_KEY = re.compile(r"(?:ssh-|ecdsa-|sk-)[a-z0-9@.-]+ [A-Za-z0-9+/=]+(?: [^\x00-\x1f\x7f]*)?")


def ssh_keys_item(user: str, public_key: str) -> str | LaneFailure:
    """The ``ssh-keys`` metadata value for one key: ``USERNAME:KEY_VALUE`` (GCE "Add SSH keys
    to VMs": the metadata format), or why the key or the user cannot go there."""
    key = public_key.strip()
    if not _SSH_USER.fullmatch(user):
        return LaneFailure(FailureKind.INVALID_REQUEST, f"ssh user {user!r} is not a valid login name", code="eps")
    if not _SSH_KEY.fullmatch(key):
        return LaneFailure(FailureKind.INVALID_REQUEST, "the ssh public key is not one OpenSSH key line", code="eps")
    return f"{user}:{key}"


#: Which eps setting feeds a field Compute names in a refusal (``Invalid value for field
#: 'resource.networkInterfaces[0].network': ...``), so the one line says what to change.
FIELD_SETTINGS: tuple[tuple[str, str], ...] = (
    ("networkInterfaces[0].subnetwork", "gcp.subnetwork"),
    ("networkInterfaces[0].network", "gcp.network"),
    ("networkInterfaces[0].accessConfigs", "gcp.external_ip"),
    ("serviceAccounts", "gcp.service_account / gcp.scopes"),
    ("diskType", "gcp.disk_type"),
    ("sourceImage", "gcp.image / gcp.gpu_image"),
    ("tags", "gcp.tags"),
)


def settings_hint(failure: LaneFailure, project: str) -> LaneFailure:
    """A refusal about a field eps fills from the ``[gcp]`` config, said in one line that
    names the setting (e.g. a project without the ``default`` network)."""
    if failure.kind is not FailureKind.INVALID_REQUEST:
        return failure
    for field_name, setting in FIELD_SETTINGS:
        if field_name in failure.message:
            if setting == "gcp.network" and "cannot be found" in failure.message:
                hint = f"GCP project {project} has no such VPC network: set gcp.network (and gcp.subnetwork)"
            else:
                hint = f"GCP refused {setting} of the eps config"
            return LaneFailure(failure.kind, _clip(f"{hint}: {failure.message}"), failure.code, failure.retry_after_s)
    return failure


# ------------------------------------------------------- error classifying ---


def compute() -> ModuleType:
    """``google.cloud.compute_v1``, imported on first use (it costs over a second)."""
    from google.cloud import compute_v1

    return compute_v1


def errors() -> tuple[ModuleType, ModuleType, ModuleType]:
    """``google.api_core.exceptions``, ``google.auth.exceptions`` and ``requests``, lazily."""
    import requests
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    return api, auth, requests


def unreadable_answers() -> tuple[type[Exception], ...]:
    """What the client raises for an answer that is not the JSON document it expects (a
    truncated body, a proxy's HTML page): protobuf's ParseError, or a JSON decode error.
    (Not every ValueError: google-auth's credential errors are ValueErrors too.)"""
    from google.protobuf.json_format import ParseError  # type: ignore[import-untyped]

    return (ParseError, json.JSONDecodeError)


def expected_errors() -> tuple[type[Exception], ...]:
    """The exceptions a Compute call is expected to raise; anything else is a bug."""
    api, auth, requests = errors()
    return (api.GoogleAPICallError, auth.GoogleAuthError, requests.RequestException, *unreadable_answers())


def lost(exc: Exception) -> bool:
    """The request may have reached Compute and its answer was lost on the way back (a read
    timeout, a connection dropped mid-answer, an unreadable body), as opposed to refused
    or never sent (connection refused, connect timeout)."""
    api, _, requests = errors()
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return True
    if isinstance(exc, requests.exceptions.ConnectionError) and not isinstance(exc, requests.exceptions.ConnectTimeout):
        text = str(exc)
        return "Connection aborted" in text or "RemoteDisconnected" in text
    return isinstance(exc, unreadable_answers()) and not isinstance(exc, api.GoogleAPICallError)


def retryable(exc: Exception) -> bool:
    """stamina's predicate: transport trouble, or a 429/5xx that names no known code."""
    api, auth, requests = errors()
    if isinstance(exc, requests.RequestException | auth.TransportError):
        return True
    if isinstance(exc, unreadable_answers()) and not isinstance(exc, api.GoogleAPICallError):
        return True  # the answer was lost on the way: the same call (same request id) is safe
    if isinstance(exc, auth.RefreshError):
        return bool(getattr(exc, "retryable", False))
    if isinstance(exc, api.GoogleAPICallError):
        # 429s are waited out by the client's own bounded, reported waits (rate_limited)
        return exc.code in RETRY_STATUSES and exc.code != 429 and _known_reason(exc) is None
    return False


def _error_entries(exc: Exception) -> list[dict[str, Any]]:
    return [e for e in getattr(exc, "errors", None) or () if isinstance(e, dict)]


def _reasons(exc: Exception) -> list[str]:
    """Every reason a call error names: the older ``errors[].reason`` (and ``code``) and the
    ``google.rpc.ErrorInfo`` reason of ``error.details`` (``exc.reason``), which newer
    Compute errors carry alone."""
    found = []
    for entry in _error_entries(exc):
        for key in ("reason", "code"):
            value = entry.get(key)
            if isinstance(value, str) and value:
                found.append(value)
    info = getattr(exc, "reason", None)
    if isinstance(info, str) and info:
        found.append(info)
    return found


def _known_reason(exc: Exception) -> str | None:
    return next((r for r in _reasons(exc) if r in PROVIDER_CODES), None)


def is_stockout_text(text: str) -> bool:
    """Whether ``text`` reads as GCE's "zone out of resources" (:data:`STOCKOUT_TEXTS`)."""
    return any(p.search(text) for p in STOCKOUT_TEXTS)


def _quota_texts(exc: Exception, entries: list[dict[str, Any]]) -> list[str]:
    texts = [str(e.get("message", "")) for e in entries] + [str(getattr(exc, "message", ""))]
    metadata = getattr(exc, "metadata", None) or {}
    return texts + [str(v) for v in metadata.values()]


def rate_limited(exc: Exception) -> bool:
    """Whether a call error is a rate refusal (403/429 ``rateLimitExceeded`` and kin, or a
    plain 429): wait and ask again, the same rung (Compute's rate-quota documentation)."""
    api, _, _ = errors()
    if not isinstance(exc, api.GoogleAPICallError):
        return False
    reason = _known_reason(exc)
    if reason is not None:
        return PROVIDER_CODES[reason] is FailureKind.RATE_LIMITED
    return bool(exc.code == 429)


def not_ready(exc: Exception) -> bool:
    """Whether a call error says the instance is busy (``resourceNotReady``)."""
    api, _, _ = errors()
    return isinstance(exc, api.GoogleAPICallError) and NOT_READY in _reasons(exc)


def classify_exception(exc: Exception) -> LaneFailure:
    """One failed call (after retries) as a :class:`LaneFailure`.  Never quotes credentials."""
    api, auth, requests = errors()
    if isinstance(exc, requests.RequestException | auth.TransportError):
        return LaneFailure(FailureKind.TRANSIENT, _clip(f"GCP unreachable: {type(exc).__name__}: {exc}"))
    if isinstance(exc, unreadable_answers()) and not isinstance(exc, api.GoogleAPICallError):
        return LaneFailure(
            FailureKind.TRANSIENT, _clip(f"GCP sent an answer eps could not read ({type(exc).__name__})"),
            code="bad_response",
        )  # fmt: skip
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
            kind = _quota_kind(_quota_texts(exc, entries))
        return LaneFailure(kind, message, code=reason)
    code = next(iter(_reasons(exc)), f"HTTP {status}")
    if is_stockout_text(f"{text or ''} {exc.message}"):
        return LaneFailure(FailureKind.ZONE_EXHAUSTED, message, code=code)
    if status in (401, 403):
        return LaneFailure(FailureKind.AUTH, message, code=code)
    if status == 429:
        return LaneFailure(FailureKind.RATE_LIMITED, message, code=code)
    if status >= 500:
        return LaneFailure(FailureKind.TRANSIENT, message, code=code)
    if status == 400 and NOT_IN_ZONE in f"{text or ''} {exc.message}":
        # the tables named a zone that does not sell this machine type: that zone is out for
        # this rung, the walk goes on to the next (never a stop of the whole dispatch)
        return LaneFailure(FailureKind.ZONE_EXHAUSTED, message, code="not_in_zone")
    return LaneFailure(FailureKind.INVALID_REQUEST, message, code=code)


def classify_operation(op: compute_v1.Operation) -> LaneFailure | None:
    """The failure a DONE zonal operation reports in ``error.errors``, or ``None``.

    A code is known by itself or by the ErrorInfo reason of its ``errorDetails``; an
    unknown code whose message reads as a stockout is ZONE_EXHAUSTED."""
    errors = list(op.error.errors)
    if not errors:
        return None

    def reason(e: compute_v1.Errors) -> str | None:
        if e.code in PROVIDER_CODES:
            return str(e.code)
        infos = (d.error_info.reason for d in e.error_details)
        return next((r for r in infos if r in PROVIDER_CODES), None)

    known = [(e, reason(e)) for e in errors if reason(e) is not None]
    first, code = known[0] if known else (errors[0], None)
    message = _clip(f"GCP {first.code}: {first.message}")
    if code is not None:
        kind = PROVIDER_CODES[code]
        if kind is FailureKind.QUOTA_REGION:
            texts = [first.message]
            for detail in first.error_details:
                info = detail.quota_info
                texts += [info.metric_name, info.limit_name]
            kind = _quota_kind(texts)
        return LaneFailure(kind, message, code=first.code or code)
    if is_stockout_text(first.message):
        return LaneFailure(FailureKind.ZONE_EXHAUSTED, message, code=first.code or None)
    status = op.http_error_status_code
    if status in (401, 403):
        kind = FailureKind.AUTH
    elif status >= 500 or status == 0:
        kind = FailureKind.TRANSIENT
    else:
        kind = FailureKind.INVALID_REQUEST
    return LaneFailure(kind, message, code=first.code or None)
