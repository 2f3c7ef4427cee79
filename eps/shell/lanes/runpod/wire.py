"""RunPod's REST v2 wire format: credentials, the request body, the answers eps reads,
and what each answer means.  Pure except for reading the key file; no HTTP here.

The contract is RunPod's OpenAPI document for REST v2 (``reference/runpod-openapi-v2.json``;
server ``https://api.runpod.io``, paths under ``/v2/``, ``Authorization: Bearer <key>``).
GraphQL (retiring early 2027) and REST v1 (retired 2026-11-15) are not used.

Failure handling is the table in createPod's description, mapped onto
:class:`~eps.core.outcome.FailureKind` by :func:`classify`:

====== ============================================= =====================================
status RunPod says                                   here
====== ============================================= =====================================
422    body breaks the contract; never retry         INVALID_REQUEST (code "422"), a bug
400    rule violation, or no capacity for this       NO_CAPACITY when ``detail`` is the
       candidate; try the next candidate             no-instances text, else
                                                     INVALID_REQUEST (code "400"); both
                                                     move a dispatch to its next rung
402    insufficient balance; stop                    INSUFFICIENT_BALANCE (RunPod's own
                                                     limit, not an eps cap)
403    no access to the pool; skip the candidate     FORBIDDEN
401    bad or missing key                            AUTH
429    back off by ``Retry-After``                   bounded waits, then RATE_LIMITED
5xx    retry the same candidate with backoff         stamina retries, then TRANSIENT
====== ============================================= =====================================

The API key is held by :class:`ApiKey`, whose repr hides it; it travels only in the
``Authorization`` header and is scrubbed from every message built from provider text.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import cattrs
from attrs import field, frozen
from returns.result import Failure, Result, Success

from eps.core.model import Job, LaneKind, Rung, RunpodCpuFlavor
from eps.core.outcome import FailureKind, LaneFailure
from eps.core.runpod_supply import placement
from eps.core.states import HandleState
from eps.core.tables import RUNPOD_CPU_FLAVORS, runpod_cuda_versions
from eps.shell.config.secrets import secret_problem
from eps.shell.util.retry import RetryPolicy

T = TypeVar("T")

DEFAULT_BASE_URL = "https://api.runpod.io"
#: RunPod's no-capacity ``detail`` (400); the API has no machine-readable code for it.
NO_CAPACITY_TEXT = "no longer any instances available"
#: A GPU pod's persistent volume (``mounts.persistent``): its path, and its size when the
#: rung asks for no disk.  What is there survives a stop (``podAction`` ``stop``), so a
#: GPU pod's dispatch roots go there; the container disk is "ephemeral, wiped on restart".
VOLUME_PATH = "/workspace"
VOLUME_GB = 20
#: ``PersistentMount.size``: "Upstream enforces a 10 GB floor".
VOLUME_MIN_GB = 10
#: Where runpodctl (top-level ``apikey``) and runpod-python (``[default] api_key``) keep the key.
CONFIG_FILE = Path("~/.runpod/config.toml")


class PodStatus(StrEnum):
    """``PodStatus`` of the API document."""

    PROVISIONING = "PROVISIONING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    EXITED = "EXITED"
    ERROR = "ERROR"
    TERMINATED = "TERMINATED"


DEAD = frozenset({PodStatus.EXITED, PodStatus.ERROR, PodStatus.TERMINATED})

#: A pod's status in the handle vocabulary every lane shares.
POD_STATES: dict[PodStatus, HandleState] = {
    PodStatus.PROVISIONING: HandleState.STARTING,
    PodStatus.STARTING: HandleState.STARTING,
    PodStatus.RUNNING: HandleState.RUNNING,
    PodStatus.EXITED: HandleState.FINISHED,
    PodStatus.ERROR: HandleState.FINISHED,
    PodStatus.TERMINATED: HandleState.GONE,
}


class ApiKey:
    """The RunPod API key.  Its repr and str never show it; only :meth:`reveal` does."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "ApiKey(<redacted>)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ApiKey) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@frozen
class RunpodSettings:
    """How the lane talks to RunPod.  Tests point ``base_url`` at a local server."""

    base_url: str = DEFAULT_BASE_URL
    cpu_image: str = "ubuntu:24.04"
    gpu_image: str = "runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404"  # the document's example image
    data_center_ids: tuple[str, ...] = ()  # empty: RunPod's scheduler chooses
    concurrency: int = 32  # HTTP requests in flight at once (also the connection pool size)
    request_timeout_s: float = 30.0
    poll_interval_s: float = 2.0
    poll_timeout_s: float = 600.0  # bounded: polls = ceil(timeout / interval)
    max_rate_limit_waits: int = 5
    default_retry_after_s: float = 5.0
    max_retry_after_s: float = 120.0
    lost_create_patience_s: float = 60.0  # after a create's answer was lost: look for the pod this long
    retry: RetryPolicy = field(factory=lambda: RetryPolicy(attempts=4, wait_max_s=8.0, wait_jitter_s=0.5))
    cpu_flavors: tuple[RunpodCpuFlavor, ...] = RUNPOD_CPU_FLAVORS  # disk limits per vCPU


@frozen
class PodInfo:
    """What eps reads from a RunPod ``Pod`` document."""

    id: str
    name: str
    status: PodStatus
    machine: str | None = None  # "cpu3g-4" (flavor-vCPUs) or the GPU type id
    gpus: int = 0
    data_center: str | None = None
    cost_per_hour: float | None = None


# --- credentials -----------------------------------------------------------------------------


def checked_key(value: str, source: str) -> Result[ApiKey, LaneFailure]:
    """The key, unless it cannot be one: a control character (a pasted newline) would go into an
    HTTP header and from there into error messages; refuse it up front, naming only the source."""
    problem = secret_problem(value)
    if problem is not None:
        return Failure(LaneFailure(FailureKind.AUTH, f"the RunPod API key in {source} {problem}", code="bad_key"))
    return Success(ApiKey(value))


def load_api_key(env: Mapping[str, str] | None = None, config_file: Path | None = None) -> Result[ApiKey, LaneFailure]:
    """``RUNPOD_API_KEY``, else RunPod's standard ``~/.runpod/config.toml``: runpodctl writes a
    top-level ``apikey`` (viper, keys case-insensitive), runpod-python ``[default] api_key``."""
    env = os.environ if env is None else env
    value = env.get("RUNPOD_API_KEY", "").strip()
    if value:
        return checked_key(value, "RUNPOD_API_KEY")
    path = (config_file or CONFIG_FILE).expanduser()
    missing = LaneFailure(
        FailureKind.AUTH,
        f"no RunPod API key: set RUNPOD_API_KEY or store one with `runpodctl config --apiKey` ({path})",
        code="no_key",
    )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Failure(missing)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        # the type only: a parser message could quote the file, and the file holds the key
        return Failure(LaneFailure(FailureKind.AUTH, f"cannot read {path}: {type(exc).__name__}", code="no_key"))
    for name, item in data.items():
        if name.lower() == "apikey" and isinstance(item, str) and item.strip():
            return checked_key(item.strip(), str(path))
    profile = data.get("default")
    if isinstance(profile, dict) and isinstance(profile.get("api_key"), str) and profile["api_key"].strip():
        return checked_key(profile["api_key"].strip(), str(path))
    return Failure(missing)


# --- the request body (pure) -----------------------------------------------------------------


def invalid(message: str) -> LaneFailure:
    return LaneFailure(FailureKind.INVALID_REQUEST, message, code="eps")


def _cpu_target(rung: Rung, flavors: Sequence[RunpodCpuFlavor]) -> tuple[RunpodCpuFlavor, int] | LaneFailure:
    """Flavor and vCPU count from ``cpu3g-4-16`` (or ``cpu3g`` with ``rung.vcpus``)."""
    parts = (rung.machine or "").split("-")
    name = parts[0]
    flavor = next((f for f in flavors if f.name == name), None)
    if flavor is None:
        return invalid(f"unknown RunPod CPU flavor {rung.machine!r}")
    vcpus = rung.vcpus
    if len(parts) > 1:
        if not parts[1].isdigit():
            return invalid(f"malformed RunPod CPU instance id {rung.machine!r}")
        vcpus = int(parts[1])
    # vcpuCount: >= 2, a power of two, valid for the flavor (CreateCpuConfig)
    if vcpus < 2 or vcpus & (vcpus - 1) or vcpus not in flavor.vcpu_options:
        return invalid(f"{rung.machine}: {vcpus} vCPUs is not offered for {flavor.name}")
    return flavor, vcpus


def image_cuda(image: str) -> str | None:
    """The CUDA version (``major.minor``) an image's tag names: ``cuda12.4.1`` (RunPod's older
    tags), ``cu1281`` / ``cu128`` (its newer ones); ``None`` when the tag names none."""
    spelled = re.search(r"cuda[-_]?(\d+)\.(\d+)", image)
    if spelled:
        return f"{int(spelled[1])}.{int(spelled[2])}"
    packed = re.search(r"(?<![a-z])cu(\d{2})(\d)", image)
    return f"{int(packed[1])}.{int(packed[2])}" if packed else None


#: One OpenSSH public key line (what sshd's authorized_keys takes from ``PUBLIC_KEY``).
_SSH_KEY = re.compile(r"(?:ssh-|ecdsa-|sk-)[a-z0-9@.-]+ [A-Za-z0-9+/=]+(?: [^\x00-\x1f\x7f]*)?")


def pod_request(
    rung: Rung,
    name: str,
    settings: RunpodSettings,
    *,
    job: Job | None = None,
    dispatch_id: str | None = None,
    public_key: str | None = None,
    also_keys: Sequence[str] = (),
    data_centers: tuple[str, ...] | None = None,
) -> dict[str, Any] | LaneFailure:
    """The ``CreatePodRequest`` body for ``rung``, or why eps must not send one.

    A GPU rung's ``zone`` names its place (:mod:`eps.core.runpod_supply`): ``cloud`` is sent
    for community supply (``SECURE`` is the API's default), ``dataCenterIds`` is the rung's one
    data centre, else ``data_centers`` (the caller's list of the others that stock the type),
    else ``[runpod] data_centers``.

    CPU rung (``gpus == 0``): ``cpu: {id: flavor, vcpuCount}``; RAM follows from the flavor.
    GPU rung: one pod with ``gpu: {id, count: rung.gpus}`` (P5: never many single-GPU pods),
    and ``gpu.allowedCudaVersions``: the host CUDA versions that can run the GPU image (its
    own version and later ones, :func:`eps.core.tables.runpod_cuda_versions`), so a pod
    never lands on a host whose driver is too old for the image.
    ``public_key``: the pod's sshd gets it (env ``PUBLIC_KEY``, the convention RunPod's
    images follow) and ``ports`` asks for ``22/tcp``, which gives the pod an ``ssh.direct``
    address once it runs (:meth:`RunpodClient.address`).
    ``also_keys``: more keys the pod lets in (the team's other hosts', so a host that takes
    the dispatch over reaches the pod with its own key): ``PUBLIC_KEY`` holds one key a line,
    ``public_key`` first, as RunPod's images write it (``echo "$PUBLIC_KEY" >>
    ~/.ssh/authorized_keys``) and as RunPod itself fills it from an account's several keys.
    Each is checked as one OpenSSH public key line: one that is not (a private key, two
    lines, options) is left out, never sent and never the job's failure.
    ``disk`` (container disk, GB) is sent when the rung sets it and must fit the flavor:
    vCPU x 10 GB on gen 3, x 15 GB on cpu5c (the flavor table's ``disk_gb_per_vcpu``).
    """
    if rung.kind is not LaneKind.RUNPOD or not rung.machine:
        return invalid(f"not a RunPod rung: {rung.key}")
    body: dict[str, Any] = {"name": name}
    if rung.gpus > 0:
        body["image"] = settings.gpu_image
        body["gpu"] = {"id": rung.machine, "count": rung.gpus}
        size = max(VOLUME_MIN_GB, rung.disk_gb or VOLUME_GB)
        body["mounts"] = {"persistent": {"size": size, "path": VOLUME_PATH}}
        cuda = runpod_cuda_versions(image_cuda(settings.gpu_image))
        if cuda:
            body["gpu"]["allowedCudaVersions"] = list(cuda)
    else:
        target = _cpu_target(rung, settings.cpu_flavors)
        if isinstance(target, LaneFailure):
            return target
        flavor, vcpus = target
        limit = vcpus * flavor.disk_gb_per_vcpu
        if rung.disk_gb is not None and rung.disk_gb > limit:
            return invalid(
                f"{rung.machine}: a {rung.disk_gb} GB container disk exceeds the flavor's limit of {limit} GB"
                f" ({vcpus} vCPU x {flavor.disk_gb_per_vcpu} GB)"
            )
        body["image"] = settings.cpu_image
        body["cpu"] = {"id": flavor.name, "vcpuCount": vcpus}
    if rung.disk_gb is not None:
        if rung.disk_gb < 1:
            return invalid(f"{rung.key}: container disk must be at least 1 GB")
        body["disk"] = rung.disk_gb
    place = placement(rung.zone) if rung.gpus > 0 else None
    if place is not None and place.cloud != "secure":
        body["cloud"] = place.api_cloud
    if place is not None and place.data_center is not None:
        body["dataCenterIds"] = [place.data_center]
    elif data_centers:
        body["dataCenterIds"] = list(data_centers)
    elif settings.data_center_ids:
        body["dataCenterIds"] = list(settings.data_center_ids)
    # No ``args``: the image starts as its authors meant (its sshd among it); eps ships and
    # launches the job over ssh (eps.shell.lanes.machines).
    env = {"EPS_POD_NAME": name}
    if dispatch_id is not None:
        env["EPS_DISPATCH_ID"] = dispatch_id
    if public_key is not None:
        key = public_key.strip()
        if not _SSH_KEY.fullmatch(key):
            return invalid("the ssh public key is not one OpenSSH key line")
        more = (k.strip() for k in also_keys)
        env["PUBLIC_KEY"] = "\n".join(dict.fromkeys([key, *(k for k in more if _SSH_KEY.fullmatch(k))]))
        body["ports"] = ["22/tcp"]
    body["env"] = env
    return body


# --- provider payloads -----------------------------------------------------------------------


@frozen
class _CpuDoc:
    id: str
    vcpuCount: int  # the API's field names
    memory: int | None = None


@frozen
class _GpuDoc:
    id: str
    count: int = 1


@frozen
class _SshEndpointDoc:
    host: str
    port: int


@frozen
class _SshDoc:
    direct: _SshEndpointDoc | None = None


@frozen
class PodDoc:
    id: str
    name: str
    status: PodStatus
    dataCenterId: str | None = None
    cost: float | None = None
    cpu: _CpuDoc | None = None
    gpu: _GpuDoc | None = None
    ssh: _SshDoc | None = None


@frozen
class ListDoc:
    pods: list[PodDoc]


@frozen
class _PlaceDoc:
    id: str
    availability: str = "NONE"


@frozen
class GpuStockDoc:
    """``GpuType`` with ``include=AVAILABILITY``: the data centres that offer it now."""

    id: str
    dataCenters: list[_PlaceDoc] = field(factory=list)

    def stocked(self) -> tuple[str, ...]:
        return tuple(d.id for d in self.dataCenters if d.availability != "NONE")


# Responses carry many fields eps does not read, and RunPod adds fields over time; the
# converter checks the ones we use and ignores the rest (requests are checked by tests
# against the document's CreatePodRequest schema instead).
_payloads = cattrs.Converter(forbid_extra_keys=False)


def pod_info(doc: PodDoc) -> PodInfo:
    machine = f"{doc.cpu.id}-{doc.cpu.vcpuCount}" if doc.cpu else (doc.gpu.id if doc.gpu else None)
    return PodInfo(
        id=doc.id,
        name=doc.name,
        status=doc.status,
        machine=machine,
        gpus=doc.gpu.count if doc.gpu else 0,
        data_center=doc.dataCenterId,
        cost_per_hour=doc.cost,
    )


def structure(body: object, kind: type[T]) -> T | LaneFailure:
    try:
        return _payloads.structure(body, kind)
    except Exception as exc:  # cattrs raises a group of many types
        paths = "; ".join(cattrs.transform_error(exc, path="$"))
        return LaneFailure(FailureKind.TRANSIENT, f"RunPod sent an unexpected document: {paths}", code="bad_response")


# --- HTTP ------------------------------------------------------------------------------------


@frozen
class Reply:
    """One HTTP answer as eps reads it: status, parsed JSON body (or None), Retry-After."""

    status: int
    body: Any
    retry_after: str | None = None


def problem(reply: Reply) -> str:
    """The RFC 9457 problem document as one line: ``title: detail (errors)``."""
    body = reply.body
    if not isinstance(body, dict):
        return f"HTTP {reply.status}"
    title = str(body.get("title") or f"HTTP {reply.status}")
    text = f"{title}: {body['detail']}" if body.get("detail") else title
    errors = body.get("errors")
    if isinstance(errors, list) and errors:
        text += " (" + "; ".join(str(e) for e in errors) + ")"
    return text


def retry_after_s(reply: Reply, default: float) -> float:
    try:
        return max(0.0, float(reply.retry_after)) if reply.retry_after is not None else default
    except ValueError:  # an HTTP-date; the document promises integer seconds
        return default


def classify(reply: Reply, what: str) -> LaneFailure:
    """A non-success answer -> one FailureKind, as the createPod table prescribes.  The
    message quotes the provider; the client scrubs the key from it before it goes anywhere."""
    text = f"{what}: {problem(reply)}"
    detail = str(reply.body.get("detail", "")) if isinstance(reply.body, dict) else ""
    code = str(reply.status)
    match reply.status:
        case 400 if NO_CAPACITY_TEXT in detail.lower():
            return LaneFailure(FailureKind.NO_CAPACITY, f"no capacity: {text}", code=code)
        case 400:
            return LaneFailure(
                FailureKind.INVALID_REQUEST,
                f"rejected for this candidate (a rule violation or no placement; try the next): {text}",
                code=code,
            )
        case 401:
            return LaneFailure(FailureKind.AUTH, f"RunPod rejected the API key: {text}", code=code)
        case 402:
            return LaneFailure(
                FailureKind.INSUFFICIENT_BALANCE,
                "RunPod refused for insufficient balance: this is RunPod's own account balance / spending"
                f" limit, not an eps cap (eps has no dollar caps); raise it in the RunPod console: {text}",
                code=code,
            )
        case 403:
            return LaneFailure(FailureKind.FORBIDDEN, f"no access to this pool (skip it): {text}", code=code)
        case 422:
            return LaneFailure(
                FailureKind.INVALID_REQUEST,
                f"eps sent a request that breaks RunPod's contract (a bug in eps; not retried): {text}",
                code=code,
            )
        case _:
            return LaneFailure(FailureKind.INVALID_REQUEST, f"unexpected answer: {text}", code=code)
