"""What Compute answers when it refuses: Google's JSON error bodies, byte for byte, and the
synchronous rules of ``instances.insert`` (used by ``fake_server.py``, which re-exports
everything here).

Bodies are compact JSON in the key order Compute sends:
``{"error":{"code","message","errors":[{"message","domain","reason"}],"status"[,"details"]}}``.
Field validation errors also carry a ``google.rpc.ErrorInfo`` in ``details`` (reason
``INVALID_FIELD_VALUE``, domain ``compute.googleapis.com``, metadata ``field``/``value``/
``reason``), as Compute sends them now; :func:`detail_only` makes an error whose reason is
*only* in ``details`` (no ``errors[]``), the shape newer Google errors take.

Sources for the texts (public issue trackers quoting Compute verbatim): instance names
and label keys/values (dstack #1247, skypilot #139, cloudtik #14,
google-cloud-node-core #314; the ErrorInfo: scylla-cluster-tests #13147),
preemptible/spot scheduling (travis-ci/worker #487, percona/mongo_terraform_ansible #34:
Compute names the preemptible field for a spot request too), e2 + TERMINATE
(chainguard-dev/terraform-infra-common #935), a machine type missing from the zone
("Machine type with name ... does not exist in zone ..."), full error bodies with
``status`` and ``details`` (trailofbits/algo #14854).  The requestId and the malformed
``machineType`` texts follow Compute's "Invalid value for field" pattern with the
documented rule ("The request ID must be a valid UUID with the exception that zero UUID
is not supported"; "The URL is malformed."); no verbatim capture of those was at hand.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

API = "https://www.googleapis.com/compute/v1"
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
#: The name rule, exactly as Compute quotes it in its error message.
NAME_REGEX = "(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)"
_NAME = re.compile(NAME_REGEX)
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_MACHINE_TYPE = re.compile(
    r"(?:(?:https?://[^/]+/compute/v1/)?projects/[^/]+/)?zones/(?P<zone>[^/]+)/machineTypes/(?P<type>[^/]+)"
)
#: ``google.rpc.Code`` names by HTTP status, for the ``status`` member of an error.
GRPC_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
LABEL_KEY_RULE = (
    "The key must start with a lowercase character, can only contain lowercase letters, numeric characters, "
    "underscores and dashes. The key can be at most 63 characters long. International characters are allowed."
)
LABEL_VALUE_RULE = (
    "The value can only contain lowercase letters, numeric characters, underscores and dashes. "
    "The value can be at most 63 characters long. International characters are allowed."
)


def dumps(payload: object) -> bytes:
    """Compact JSON, keys in insertion order: the byte shape the notes document."""
    return json.dumps(payload, separators=(",", ":")).encode()


# ---------------------------------------------------------------- replies ---


@dataclass(frozen=True)
class Created:
    """Insert succeeds: the operation is not DONE for ``polls - 1`` reads (PENDING, then
    RUNNING), then DONE; the instance then has ``status``.

    ``pending_gets``: the instance is a flex-start VM waiting for capacity: ``PENDING``
    for that many reads of it, then ``then`` (capacity came), or, with ``then=None``,
    gone (the request's valid-for duration ran out without capacity)."""

    polls: int = 1
    status: str = "RUNNING"
    pending_gets: int = 0
    then: str | None = "RUNNING"


@dataclass(frozen=True)
class OpError:
    """Insert is accepted (a PENDING operation) and the operation ends DONE with this error."""

    code: str
    message: str
    http_status: int
    http_message: str
    error_details: tuple[dict[str, Any], ...] = ()
    polls: int = 1

    def fields(self) -> dict[str, Any]:
        """The members a DONE operation carries for this error, in the API's order."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.error_details:
            error["errorDetails"] = list(self.error_details)
        return {
            "error": {"errors": [error]},
            "httpErrorStatusCode": self.http_status,
            "httpErrorMessage": self.http_message,
        }


@dataclass(frozen=True)
class SyncError:
    """The HTTP call itself fails with ``status`` and Google's JSON error body.

    ``legacy`` False leaves out ``errors[]`` (the v1 reason list): the reason is
    then only in ``details`` (``google.rpc.ErrorInfo``), as newer Google errors
    send it; see :func:`detail_only`."""

    status: int
    reason: str
    message: str
    domain: str = "global"
    details: tuple[dict[str, Any], ...] = ()
    legacy: bool = True
    more: tuple[tuple[str, str], ...] = ()  # further (message, reason) entries of errors[]

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.status, "message": self.message}
        if self.legacy:
            entries = ((self.message, self.reason), *self.more)
            error["errors"] = [{"message": m, "domain": self.domain, "reason": r} for m, r in entries]
        error["status"] = GRPC_STATUS.get(self.status, "UNKNOWN")
        if self.details:
            error["details"] = list(self.details)
        return {"error": error}


Reply = Created | OpError | SyncError


def error_info(reason: str, metadata: dict[str, str], domain: str = "compute.googleapis.com") -> dict[str, Any]:
    """A ``google.rpc.ErrorInfo`` entry of ``error.details``."""
    return {"@type": ERROR_INFO, "reason": reason, "domain": domain, "metadata": dict(metadata)}


def detail_only(status: int, message: str, reason: str, metadata: dict[str, str] | None = None) -> SyncError:
    """An error whose reason is only in ``details`` (an ErrorInfo), with no ``errors[]``."""
    return SyncError(status, "", message, details=(error_info(reason, metadata or {}),), legacy=False)


def invalid_field(field_path: str, value: object, why: str, *, details: bool = True) -> SyncError:
    """Compute's 400 for one bad field: ``Invalid value for field 'f': 'v'. why``."""
    shown = str(value).lower() if isinstance(value, bool) else str(value)
    message = f"Invalid value for field '{field_path}': '{shown}'. {why}"
    info = (error_info("INVALID_FIELD_VALUE", {"field": field_path, "value": shown, "reason": why}),)
    return SyncError(400, "invalid", message, details=info if details else ())


def exhausted(project: str, zone: str, code: str = "ZONE_RESOURCE_POOL_EXHAUSTED") -> OpError:
    """The capacity error GCE reports inside the zonal operation (also ``..._WITH_DETAILS``,
    ``UNSUPPORTED_OPERATION``, ``RESOURCE_OPERATION_RATE_EXCEEDED``)."""
    message = (
        f"The zone 'projects/{project}/zones/{zone}' does not have enough resources available "
        "to fulfill the request.  Try a different zone, or try again later."
    )
    return OpError(code, message, 503, "SERVICE UNAVAILABLE")


def quota_op(metric: str, scope: str, *, details: bool = False) -> OpError:
    """``QUOTA_EXCEEDED`` inside the operation; ``scope`` is ``in region us-central1`` or ``globally``."""
    message = f"Quota '{metric}' exceeded.  Limit: 0.0 {scope}."
    extra: tuple[dict[str, Any], ...] = ()
    if details:
        info = {
            "metricName": f"compute.googleapis.com/{metric.lower()}",
            "limitName": f"{metric.replace('_', '-')}-per-project",
            "limit": 0,
        }
        extra = ({"quotaInfo": info},)
    return OpError("QUOTA_EXCEEDED", message, 403, "FORBIDDEN", extra)


def quota_sync(metric: str, scope: str) -> SyncError:
    return SyncError(403, "quotaExceeded", f"Quota '{metric}' exceeded.  Limit: 0.0 {scope}.", "usageLimits")


def quota_detail_only(metric: str, scope: str) -> SyncError:
    """A synchronous quota refusal that names its reason only in an ErrorInfo detail
    (``QUOTA_EXCEEDED``, metric in ``metadata``), with no ``errors[]``."""
    metadata = {
        "quota_metric": f"compute.googleapis.com/{metric.lower()}",
        "quota_limit": f"{metric.replace('_', '-')}-per-project",
        "quota_limit_value": "0",
    }
    return detail_only(403, f"Quota '{metric}' exceeded.  Limit: 0.0 {scope}.", "QUOTA_EXCEEDED", metadata)


def not_ready(project: str, zone: str) -> SyncError:
    return SyncError(400, "resourceNotReady", f"The resource 'projects/{project}/zones/{zone}' is not ready")


def unavailable() -> SyncError:
    return SyncError(503, "backendError", "Internal error. Please try again or contact Google Support.")


def unauthenticated() -> SyncError:
    return SyncError(
        401,
        "required",
        "Request is missing required authentication credential. Expected OAuth 2 access token, "
        "login cookie or other valid authentication credential.",
    )


def forbidden(permission: str = "compute.instances.create") -> SyncError:
    return SyncError(403, "forbidden", f"Required '{permission}' permission for 'projects/test-project'")


def not_found(what: str) -> SyncError:
    return SyncError(404, "notFound", f"The resource '{what}' was not found")


def already_exists(what: str) -> SyncError:
    return SyncError(409, "alreadyExists", f"The resource '{what}' already exists")


# -------------------------------------------------------------- the rules ---


def request_id_violation(request_id: str | None, *, details: bool = True) -> SyncError | None:
    """``requestId`` must be a UUID, and not the zero UUID (Compute's documented rule)."""
    if request_id is None or (_UUID.fullmatch(request_id) and request_id != ZERO_UUID):
        return None
    why = f"The request ID must be a valid UUID with the exception that zero UUID is not supported ({ZERO_UUID})."
    return invalid_field("requestId", request_id, why, details=details)


def _label_key_ok(key: str) -> bool:
    first = key[:1]
    return (
        0 < len(key) <= 63
        and first.isalpha()
        and not first.isupper()
        and all(c in "_-" or c.isdigit() or (c.isalpha() and not c.isupper()) for c in key)
    )


def _label_value_ok(value: str) -> bool:
    return len(value) <= 63 and all(c in "_-" or c.isdigit() or (c.isalpha() and not c.isupper()) for c in value)


def gpu_machine_zones() -> dict[str, frozenset[str]]:
    """GCP's GPU machine types and the zones that offer each: every family's types (g2-standard,
    a2-highgpu, a2-ultragpu, a3-highgpu, a3-ultragpu, a4-highgpu) in the zones of its
    accelerator on GCE's "GPU regions and zones availability" page, as ``eps.core.gpus``
    records them (the one copy of those facts; a test that wants a zone to lose a type
    changes the fake's ``machine_zones``)."""
    from eps.core.gpus import GCP_GPU_MACHINES

    return {m.name: frozenset(m.zones) for m in GCP_GPU_MACHINES}


#: The machine-type families whose types exist only in the zones ``machine_zones`` lists.
GPU_FAMILIES = ("g2-standard-", "a2-highgpu-", "a2-ultragpu-", "a3-highgpu-", "a3-ultragpu-", "a4-highgpu-")


def _type_in_zone(kind: str, zone: str, machine_zones: dict[str, frozenset[str]] | None) -> bool:
    """Whether ``kind`` exists in ``zone``: a GPU family's type only where its table says (a
    type the table lacks, such as ``a3-highgpu-3g``, nowhere); every other type anywhere."""
    if machine_zones is None or not kind.startswith(GPU_FAMILIES):
        return True
    return zone in machine_zones.get(kind, frozenset())


def insert_violations(
    zone: str,
    body: Any,
    *,
    machine_types: frozenset[str] | None = None,
    machine_zones: dict[str, frozenset[str]] | None = None,
    details: bool = True,
    networks: frozenset[str] | None = None,
) -> list[SyncError]:
    """What Compute refuses in an ``instances.insert`` body, in the order it reports them.
    A machine type that does not exist in the zone (``machine_types``: the types that exist
    anywhere; ``machine_zones``: a GPU type's zones) is the 400 Compute answers for it,
    "Invalid value for field 'resource.machineType': '...'. Machine type with name '...'
    does not exist in zone '...'." (GCE "Troubleshooting VM creation" quotes the same text)."""
    if not isinstance(body, dict):
        return [SyncError(400, "required", "Required field 'resource' not specified")]
    found: list[SyncError] = []
    name = body.get("name")
    if not isinstance(name, str) or not name:
        found.append(SyncError(400, "required", "Required field 'resource.name' not specified"))
    elif not _NAME.fullmatch(name):
        found.append(invalid_field("resource.name", name, f"Must be a match of regex '{NAME_REGEX}'", details=details))
    machine = body.get("machineType")
    match = _MACHINE_TYPE.fullmatch(machine) if isinstance(machine, str) else None
    if not isinstance(machine, str) or not machine:
        found.append(SyncError(400, "required", "Required field 'resource.machineType' not specified"))
    elif match is None:
        found.append(invalid_field("resource.machineType", machine, "The URL is malformed.", details=details))
    elif (
        match["zone"] != zone
        or (machine_types is not None and match["type"] not in machine_types)
        or not _type_in_zone(match["type"], zone, machine_zones)
    ):
        why = f"Machine type with name '{match['type']}' does not exist in zone '{zone}'."
        found.append(invalid_field("resource.machineType", machine, why, details=details))
    for key, value in (body.get("labels") or {}).items():
        if not _label_key_ok(key):
            why = f"Label key '{key}' violates format constraints. {LABEL_KEY_RULE}"
            found.append(invalid_field("resource.labels", "", why, details=details))
        elif not isinstance(value, str) or not _label_value_ok(value):
            why = f"Label value '{value}' violates format constraints. {LABEL_VALUE_RULE}"
            found.append(invalid_field("resource.labels", "", why, details=details))
    for i, nic in enumerate(body.get("networkInterfaces") or []):
        network = nic.get("network") or "global/networks/default"
        if networks is not None and network.rsplit("/", 1)[-1] not in networks:
            # "Invalid value for field 'resource.networkInterfaces[0].network': '...'. The referenced
            # network resource cannot be found." (quoted from gcloud output in public issue threads)
            why = "The referenced network resource cannot be found."
            found.append(invalid_field(f"resource.networkInterfaces[{i}].network", network, why, details=details))
    found += _scheduling_violations(body.get("scheduling") or {}, match["type"] if match else "", details)
    found += _flex_start_violations(body, details)
    return found


#: Flex-start's documented limits (GCE "Create a Flex-start VM"): a max run duration between
#: 10 minutes and seven days; a request-valid duration of 0, or 90 s to 2 h.  The refusal
#: texts follow Compute's "Invalid value for field" pattern; no verbatim capture was at hand.
FLEX_MIN_RUN_S, FLEX_MAX_RUN_S = 600, 7 * 86_400
FLEX_MAX_WAIT_S = 7200


def _seconds(duration: Any) -> int | None:
    if not isinstance(duration, dict):
        return None
    try:
        return int(duration.get("seconds", 0))
    except (TypeError, ValueError):
        return None


def _flex_start_violations(body: dict[str, Any], details: bool) -> list[SyncError]:
    scheduling = body.get("scheduling") or {}
    if scheduling.get("provisioningModel") != "FLEX_START":
        return []
    found = []
    run = _seconds(scheduling.get("maxRunDuration"))
    if run is None or not FLEX_MIN_RUN_S <= run <= FLEX_MAX_RUN_S:
        why = "Flex-start instances need a max run duration between 10 minutes and 7 days."
        found.append(invalid_field("resource.scheduling.maxRunDuration", run, why, details=details))
    if scheduling.get("onHostMaintenance") != "TERMINATE":
        why = "Flex-start instances must have onHostMaintenance set to TERMINATE."
        found.append(invalid_field("resource.scheduling.onHostMaintenance", scheduling.get("onHostMaintenance"), why))
    if scheduling.get("automaticRestart") is True:
        why = "Flex-start instances cannot be automatically restarted."
        found.append(invalid_field("resource.scheduling.automaticRestart", True, why, details=details))
    if scheduling.get("instanceTerminationAction") not in ("STOP", "DELETE"):
        why = "Flex-start instances need a termination action, STOP or DELETE."
        found.append(invalid_field("resource.scheduling.instanceTerminationAction", "", why, details=details))
    if scheduling.get("preemptible") is True:
        why = "Flex-start instances cannot be preemptible."
        found.append(invalid_field("resource.scheduling.preemptible", True, why, details=details))
    wait = _seconds((body.get("params") or {}).get("requestValidForDuration") or {"seconds": 0})
    if wait is None or not (wait == 0 or 90 <= wait <= FLEX_MAX_WAIT_S):
        why = "The request valid-for duration must be 0, or between 90 seconds and 2 hours."
        found.append(invalid_field("resource.params.requestValidForDuration", wait, why, details=details))
    return found


def _scheduling_violations(scheduling: dict[str, Any], machine_type: str, details: bool) -> list[SyncError]:
    # A spot VM is preemptible: Compute names the preemptible field in these refusals even
    # when the request only set provisioningModel SPOT (percona/mongo_terraform_ansible #34).
    spot = scheduling.get("provisioningModel") == "SPOT" or scheduling.get("preemptible") is True
    maintenance = scheduling.get("onHostMaintenance")
    found = []
    if spot and maintenance == "MIGRATE":
        why = "Scheduling must have preemptible be false when OnHostMaintenance isn't TERMINATE."
        found.append(invalid_field("resource.scheduling.preemptible", True, why, details=details))
    if spot and scheduling.get("automaticRestart") is True:
        why = "Scheduling must have preemptible be false when AutomaticRestart is true."
        found.append(invalid_field("resource.scheduling.preemptible", True, why, details=details))
    if not spot and maintenance == "TERMINATE" and machine_type.startswith("e2-"):
        message = "e2 instances do not support onHostMaintenance=TERMINATE unless they are preemptible."
        found.append(SyncError(400, "badRequest", message))
    return found


def combined(errors: list[SyncError]) -> SyncError:
    """Several refusals as Compute sends them: one body, the first message on top,
    every message in ``errors[]`` and every ErrorInfo in ``details``."""
    first = errors[0]
    if len(errors) == 1:
        return first
    more = tuple((e.message, e.reason) for e in errors[1:])
    details = tuple(d for e in errors for d in e.details)
    return SyncError(first.status, first.reason, first.message, first.domain, details, first.legacy, more)
