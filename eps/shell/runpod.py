"""The RunPod lane: CPU pods (the P3 fallback) and, when pinned, GPU pods, over REST v2.

The contract is RunPod's OpenAPI document for REST v2 (``reference/runpod-openapi-v2.json``;
server ``https://api.runpod.io``, paths under ``/v2/``, ``Authorization: Bearer <key>``).
GraphQL (retiring early 2027) and REST v1 (retired 2026-11-15) are not used.

Wire calls: ``POST /v2/pods`` (createPod; ``cpu: {id, vcpuCount}`` or ``gpu: {id, count}``,
container disk in ``disk``), ``GET /v2/pods/{id}`` (getPod; PROVISIONING -> STARTING ->
RUNNING), ``DELETE /v2/pods/{id}`` (deletePod, 204), ``GET /v2/pods`` (listPods; it has no
name filter, so the prefix filter runs here).

Failure handling is the table in createPod's description, mapped onto
:class:`~eps.core.outcome.FailureKind`:

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

Transport errors and timeouts are retried like 5xx.  A POST whose answer was lost may
still have created the pod, so before re-sending it (and once after giving up) the
client looks the pod up by its name, which is unique per dispatch and rung
(``eps-<dispatch id>-<rung index>``): a create is never sent twice for one pod.

The API key is held by :class:`ApiKey`, whose repr hides it; it travels only in the
``Authorization`` header and is scrubbed from every message built from provider text.
"""

from __future__ import annotations

import asyncio
import math
import os
import shlex
import tomllib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, Self, TypeVar

import cattrs
import httpx
import stamina
from attrs import field, frozen
from returns.result import Failure, Result, Success

from eps.core.model import Job, LaneKind, Rung, RunpodCpuFlavor, evolve
from eps.core.outcome import LANE_FATAL, FailureKind, Handle, LaneFailure, stops_dispatch
from eps.core.tables import RUNPOD_CPU_FLAVORS
from eps.shell.retry import RetryPolicy

T = TypeVar("T")

DEFAULT_BASE_URL = "https://api.runpod.io"
#: Every pod eps creates is named ``eps-<dispatch id>-<rung index>``; reconcile lists by it.
POD_PREFIX = "eps-"
#: RunPod's no-capacity ``detail`` (400); the API has no machine-readable code for it.
NO_CAPACITY_TEXT = "no longer any instances available"
_POOL_SIZE = 8  # connections per httpx pool (see RunpodClient.__init__)
#: Where runpodctl (top-level ``apikey``) and runpod-python (``[default] api_key``) keep the key.
CONFIG_FILE = Path("~/.runpod/config.toml")

Sleep = Callable[[float], Awaitable[None]]


class PodStatus(StrEnum):
    """``PodStatus`` of the API document."""

    PROVISIONING = "PROVISIONING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    EXITED = "EXITED"
    ERROR = "ERROR"
    TERMINATED = "TERMINATED"


_DEAD = frozenset({PodStatus.EXITED, PodStatus.ERROR, PodStatus.TERMINATED})


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


@frozen
class RungAttempt:
    """One rung tried.  ``leftover`` is a pod that exists but neither came up nor could be
    terminated: the caller must record it so reconcile releases it."""

    rung: Rung
    pod_name: str
    result: Result[Handle, LaneFailure]
    leftover: Handle | None = None


@frozen
class FanOutResult:
    """One dispatch of a fan-out: its outcome and every rung it tried, in order."""

    dispatch_id: str
    result: Result[Handle, LaneFailure]
    attempts: tuple[RungAttempt, ...] = ()

    @property
    def leftovers(self) -> tuple[Handle, ...]:
        return tuple(a.leftover for a in self.attempts if a.leftover is not None)


# --- credentials -----------------------------------------------------------------------------


def load_api_key(env: Mapping[str, str] | None = None, config_file: Path | None = None) -> Result[ApiKey, LaneFailure]:
    """``RUNPOD_API_KEY``, else RunPod's standard ``~/.runpod/config.toml``: runpodctl writes a
    top-level ``apikey`` (viper, keys case-insensitive), runpod-python ``[default] api_key``."""
    env = os.environ if env is None else env
    value = env.get("RUNPOD_API_KEY", "").strip()
    if value:
        return Success(ApiKey(value))
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
            return Success(ApiKey(item.strip()))
    profile = data.get("default")
    if isinstance(profile, dict) and isinstance(profile.get("api_key"), str) and profile["api_key"].strip():
        return Success(ApiKey(profile["api_key"].strip()))
    return Failure(missing)


# --- the request body (pure) -----------------------------------------------------------------


def pod_name(dispatch_id: str, rung_index: int) -> str:
    """The pod's name: carries the dispatch id so reconcile, status and cancel find it."""
    return f"{POD_PREFIX}{dispatch_id}-{rung_index}"


def dispatch_prefix(dispatch_id: str) -> str:
    return f"{POD_PREFIX}{dispatch_id}-"


def _invalid(message: str) -> LaneFailure:
    return LaneFailure(FailureKind.INVALID_REQUEST, message, code="eps")


def _cpu_target(rung: Rung, flavors: Sequence[RunpodCpuFlavor]) -> tuple[RunpodCpuFlavor, int] | LaneFailure:
    """Flavor and vCPU count from ``cpu3g-4-16`` (or ``cpu3g`` with ``rung.vcpus``)."""
    parts = (rung.machine or "").split("-")
    name = parts[0]
    flavor = next((f for f in flavors if f.name == name), None)
    if flavor is None:
        return _invalid(f"unknown RunPod CPU flavor {rung.machine!r}")
    vcpus = rung.vcpus
    if len(parts) > 1:
        if not parts[1].isdigit():
            return _invalid(f"malformed RunPod CPU instance id {rung.machine!r}")
        vcpus = int(parts[1])
    # vcpuCount: >= 2, a power of two, valid for the flavor (CreateCpuConfig)
    if vcpus < 2 or vcpus & (vcpus - 1) or vcpus not in flavor.vcpu_options:
        return _invalid(f"{rung.machine}: {vcpus} vCPUs is not offered for {flavor.name}")
    return flavor, vcpus


def pod_request(
    rung: Rung,
    name: str,
    settings: RunpodSettings,
    *,
    job: Job | None = None,
    dispatch_id: str | None = None,
) -> dict[str, Any] | LaneFailure:
    """The ``CreatePodRequest`` body for ``rung``, or why eps must not send one.

    CPU rung (``gpus == 0``): ``cpu: {id: flavor, vcpuCount}``; RAM follows from the flavor.
    GPU rung: one pod with ``gpu: {id, count: rung.gpus}`` (P5: never many single-GPU pods).
    ``disk`` (container disk, GB) is sent when the rung sets it and must fit the flavor:
    vCPU x 10 GB on gen 3, x 15 GB on cpu5c (the flavor table's ``disk_gb_per_vcpu``).
    """
    if rung.kind is not LaneKind.RUNPOD or not rung.machine:
        return _invalid(f"not a RunPod rung: {rung.key}")
    body: dict[str, Any] = {"name": name}
    if rung.gpus > 0:
        body["image"] = settings.gpu_image
        body["gpu"] = {"id": rung.machine, "count": rung.gpus}
    else:
        target = _cpu_target(rung, settings.cpu_flavors)
        if isinstance(target, LaneFailure):
            return target
        flavor, vcpus = target
        limit = vcpus * flavor.disk_gb_per_vcpu
        if rung.disk_gb is not None and rung.disk_gb > limit:
            return _invalid(
                f"{rung.machine}: a {rung.disk_gb} GB container disk exceeds the flavor's limit of {limit} GB"
                f" ({vcpus} vCPU x {flavor.disk_gb_per_vcpu} GB)"
            )
        body["image"] = settings.cpu_image
        body["cpu"] = {"id": flavor.name, "vcpuCount": vcpus}
    if rung.disk_gb is not None:
        if rung.disk_gb < 1:
            return _invalid(f"{rung.key}: container disk must be at least 1 GB")
        body["disk"] = rung.disk_gb
    if settings.data_center_ids:
        body["dataCenterIds"] = list(settings.data_center_ids)
    if job is not None and job.command:
        body["args"] = shlex.join(job.command)
    env = {"EPS_POD_NAME": name}
    if dispatch_id is not None:
        env["EPS_DISPATCH_ID"] = dispatch_id
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
class _PodDoc:
    id: str
    name: str
    status: PodStatus
    dataCenterId: str | None = None
    cost: float | None = None
    cpu: _CpuDoc | None = None
    gpu: _GpuDoc | None = None


@frozen
class _ListDoc:
    pods: list[_PodDoc]


# Responses carry many fields eps does not read, and RunPod adds fields over time; the
# converter checks the ones we use and ignores the rest (requests are checked by tests
# against the document's CreatePodRequest schema instead).
_payloads = cattrs.Converter(forbid_extra_keys=False)


def _pod_info(doc: _PodDoc) -> PodInfo:
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


def _structure(body: Any, kind: type[T]) -> T | LaneFailure:
    try:
        return _payloads.structure(body, kind)
    except Exception as exc:  # cattrs raises a group of many types
        paths = "; ".join(cattrs.transform_error(exc, path="$"))
        return LaneFailure(FailureKind.TRANSIENT, f"RunPod sent an unexpected document: {paths}", code="bad_response")


# --- HTTP ------------------------------------------------------------------------------------


@frozen
class _Reply:
    status: int
    body: Any
    retry_after: str | None = None

    @classmethod
    def of(cls, response: httpx.Response) -> _Reply:
        body: Any = None
        if response.content:
            try:
                body = response.json()
            except ValueError:
                body = None
        return cls(response.status_code, body, response.headers.get("retry-after"))


class _ServerError(Exception):
    """A 5xx answer, raised so that stamina retries it."""

    def __init__(self, reply: _Reply) -> None:
        super().__init__(f"HTTP {reply.status}")
        self.reply = reply


def _retryable(exc: Exception) -> bool:
    return isinstance(exc, _ServerError | httpx.TransportError)


def _problem(reply: _Reply) -> str:
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


def _retry_after_s(reply: _Reply, default: float) -> float:
    try:
        return max(0.0, float(reply.retry_after)) if reply.retry_after is not None else default
    except ValueError:  # an HTTP-date; the document promises integer seconds
        return default


class RunpodClient:
    """Async RunPod REST v2 client.  Use as ``async with RunpodClient(key, settings) as c``.

    ``sleep`` paces polls and ``Retry-After`` waits (tests inject a recorder);
    ``transport`` replaces httpx's network transport.  At most ``settings.concurrency``
    requests are in flight; polling and backoff waits hold no slot.
    """

    def __init__(
        self,
        api_key: ApiKey,
        settings: RunpodSettings | None = None,
        *,
        sleep: Sleep = asyncio.sleep,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings or RunpodSettings()
        self._key = api_key
        self._sleep = sleep
        # httpcore 1.0's pool does O(connections^2) bookkeeping on every request event, which
        # dominates at a few dozen connections; several small pools keep that cost flat.  A
        # request takes a free slot (a pool with a free connection) and gives it back after.
        shards = max(1, math.ceil(self.settings.concurrency / _POOL_SIZE))
        per_pool = math.ceil(self.settings.concurrency / shards)
        self._pools = [
            httpx.AsyncClient(
                base_url=self.settings.base_url,
                headers={"Authorization": f"Bearer {api_key.reveal()}", "Accept": "application/json"},
                timeout=httpx.Timeout(self.settings.request_timeout_s),
                limits=httpx.Limits(max_connections=per_pool, max_keepalive_connections=per_pool),
                transport=transport,
            )
            for _ in range(shards)
        ]
        self._free: asyncio.Queue[int] = asyncio.Queue()
        for slot in range(self.settings.concurrency):
            self._free.put_nowait(slot % shards)

    def __repr__(self) -> str:
        return f"RunpodClient(base_url={self.settings.base_url!r}, api_key=<redacted>)"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()

    # -- messages never carry the key, even if the provider echoes it --

    def _safe(self, text: str) -> str:
        key = self._key.reveal()
        return text.replace(key, "<redacted>") if key else text

    def _failure(
        self, kind: FailureKind, message: str, code: str | None, retry_after_s: float | None = None
    ) -> LaneFailure:
        return LaneFailure(kind, self._safe(message), code=code, retry_after_s=retry_after_s)

    # -- one request: stamina for 5xx/transport, bounded Retry-After waits for 429 --

    async def _send(self, method: str, path: str, body: Any = None) -> _Reply:
        shard = await self._free.get()
        try:
            response = await self._pools[shard].request(method, path, json=body)
        finally:
            self._free.put_nowait(shard)
        return _Reply.of(response)

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        probe: Callable[[], Awaitable[_Reply | None]] | None = None,
    ) -> _Reply | LaneFailure:
        what = f"RunPod {method} {path}"
        waits = 0
        while True:
            try:
                reply = await self._with_retries(method, path, body, probe)
            except _ServerError as exc:
                return self._failure(
                    FailureKind.TRANSIENT,
                    f"{what}: still failing after {self.settings.retry.attempts} attempts: {_problem(exc.reply)}",
                    str(exc.reply.status),
                )
            except httpx.TimeoutException as exc:
                return self._failure(
                    FailureKind.TRANSIENT,
                    f"{what}: timed out ({type(exc).__name__}) after {self.settings.retry.attempts} attempts",
                    "timeout",
                )
            except httpx.TransportError as exc:
                return self._failure(
                    FailureKind.TRANSIENT,
                    f"{what}: {type(exc).__name__} ({exc}) after {self.settings.retry.attempts} attempts",
                    "transport",
                )
            if reply.status != 429:
                return reply
            wait = min(_retry_after_s(reply, self.settings.default_retry_after_s), self.settings.max_retry_after_s)
            if waits >= self.settings.max_rate_limit_waits:
                return self._failure(
                    FailureKind.RATE_LIMITED,
                    f"{what}: rate limited after {waits} waits: {_problem(reply)}",
                    "429",
                    retry_after_s=wait,
                )
            waits += 1
            await self._sleep(wait)

    async def _with_retries(
        self,
        method: str,
        path: str,
        body: Any,
        probe: Callable[[], Awaitable[_Reply | None]] | None,
    ) -> _Reply:
        r = self.settings.retry
        maybe_done = False  # an earlier attempt may have reached the server
        async for attempt in stamina.retry_context(
            on=_retryable,
            attempts=r.attempts,
            timeout=r.timeout_s,
            wait_initial=r.wait_initial_s,
            wait_max=r.wait_max_s,
            wait_jitter=r.wait_jitter_s,
        ):
            with attempt:
                if maybe_done and probe is not None:
                    found = await probe()
                    if found is not None:
                        return found
                try:
                    reply = await self._send(method, path, body)
                except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout):
                    raise  # never reached the server
                except httpx.TransportError:
                    maybe_done = True
                    raise
                if reply.status >= 500:
                    maybe_done = True
                    raise _ServerError(reply)
                return reply
        raise AssertionError("stamina re-raises the last error when attempts run out")

    def _classify(self, reply: _Reply, what: str) -> LaneFailure:
        """A non-success answer -> one FailureKind, as the createPod table prescribes."""
        text = f"{what}: {_problem(reply)}"
        detail = str(reply.body.get("detail", "")) if isinstance(reply.body, dict) else ""
        code = str(reply.status)
        match reply.status:
            case 400 if NO_CAPACITY_TEXT in detail.lower():
                return self._failure(FailureKind.NO_CAPACITY, f"no capacity: {text}", code)
            case 400:
                return self._failure(
                    FailureKind.INVALID_REQUEST,
                    f"rejected for this candidate (a rule violation or no placement; try the next): {text}",
                    code,
                )
            case 401:
                return self._failure(FailureKind.AUTH, f"RunPod rejected the API key: {text}", code)
            case 402:
                return self._failure(
                    FailureKind.INSUFFICIENT_BALANCE,
                    "RunPod refused for insufficient balance: this is RunPod's own account balance / spending"
                    f" limit, not an eps cap (eps has no dollar caps); raise it in the RunPod console: {text}",
                    code,
                )
            case 403:
                return self._failure(FailureKind.FORBIDDEN, f"no access to this pool (skip it): {text}", code)
            case 422:
                return self._failure(
                    FailureKind.INVALID_REQUEST,
                    f"eps sent a request that breaks RunPod's contract (a bug in eps; not retried): {text}",
                    code,
                )
            case _:
                return self._failure(FailureKind.INVALID_REQUEST, f"unexpected answer: {text}", code)

    # -- operations --

    async def _find_by_name(self, name: str) -> _Reply | None:
        """One unretried look-up: a pod named ``name``, as if its create had answered 201."""
        reply = await self._send("GET", "/v2/pods")
        if reply.status >= 500:
            raise _ServerError(reply)
        if reply.status != 200 or not isinstance(reply.body, dict):
            return None
        for pod in reply.body.get("pods") or ():
            if isinstance(pod, dict) and pod.get("name") == name:
                return _Reply(201, pod)
        return None

    async def create_pod(
        self, rung: Rung, name: str, *, job: Job | None = None, dispatch_id: str | None = None
    ) -> Result[Handle, LaneFailure]:
        """POST /v2/pods for ``rung``.  The handle's state is the pod's status (provisioning)."""
        body = pod_request(rung, name, self.settings, job=job, dispatch_id=dispatch_id)
        if isinstance(body, LaneFailure):
            return Failure(body)

        async def probe() -> _Reply | None:
            return await self._find_by_name(name)

        reply = await self._call("POST", "/v2/pods", body=body, probe=probe)
        if isinstance(reply, LaneFailure):
            if reply.kind is not FailureKind.TRANSIENT:
                return Failure(reply)
            try:  # the last answer was lost: the pod may exist anyway
                found = await self._find_by_name(name)
            except (httpx.TransportError, _ServerError):
                found = None
            if found is None:
                return Failure(reply)
            reply = found
        if reply.status not in (200, 201):
            return Failure(self._classify(reply, f"create {rung.machine}"))
        doc = _structure(reply.body, _PodDoc)
        if isinstance(doc, LaneFailure):
            return Failure(doc)
        return Success(
            Handle(
                lane=rung.lane,
                kind=LaneKind.RUNPOD,
                id=doc.id,
                rung=rung.key,
                zone=doc.dataCenterId,
                machine=rung.machine,
                state=doc.status.value.lower(),
            )
        )

    async def get_pod(self, pod_id: str) -> Result[PodInfo, LaneFailure]:
        reply = await self._call("GET", f"/v2/pods/{pod_id}")
        if isinstance(reply, LaneFailure):
            return Failure(reply)
        if reply.status == 404:
            return Failure(self._failure(FailureKind.TRANSIENT, f"pod {pod_id} not found", "404"))
        if reply.status != 200:
            return Failure(self._classify(reply, f"get pod {pod_id}"))
        doc = _structure(reply.body, _PodDoc)
        return Failure(doc) if isinstance(doc, LaneFailure) else Success(_pod_info(doc))

    async def wait_running(self, handle: Handle) -> Result[Handle, LaneFailure]:
        """Poll GET /v2/pods/{id} until RUNNING: at most ``ceil(poll_timeout / poll_interval)``
        polls; EXITED, ERROR or TERMINATED first is a failure."""
        s = self.settings
        polls = max(1, math.ceil(s.poll_timeout_s / s.poll_interval_s))
        status = handle.state.upper()
        for _ in range(polls):
            if status == PodStatus.RUNNING:
                break
            await self._sleep(s.poll_interval_s)
            match await self.get_pod(handle.id):
                case Failure(failure):
                    return Failure(failure)
                case Success(pod):
                    status = pod.status
                    handle = evolve(handle, state=pod.status.value.lower(), zone=pod.data_center or handle.zone)
                    if pod.status in _DEAD:
                        return Failure(
                            self._failure(
                                FailureKind.TRANSIENT,
                                f"pod {handle.id} went to {pod.status.value} before RUNNING",
                                f"pod_{pod.status.value.lower()}",
                            )
                        )
        if status == PodStatus.RUNNING:
            return Success(evolve(handle, state="running"))
        return Failure(
            self._failure(
                FailureKind.TRANSIENT,
                f"pod {handle.id} not RUNNING after {s.poll_timeout_s:g} s (last status {status})",
                "poll_timeout",
            )
        )

    async def terminate(self, pod_id: str) -> Result[None, LaneFailure]:
        """DELETE /v2/pods/{id}.  A pod that is already gone (404) counts as terminated."""
        reply = await self._call("DELETE", f"/v2/pods/{pod_id}")
        if isinstance(reply, LaneFailure):
            return Failure(reply)
        if reply.status in (200, 204, 404):
            return Success(None)
        return Failure(self._classify(reply, f"terminate pod {pod_id}"))

    async def list_pods(self, prefix: str = POD_PREFIX) -> Result[tuple[PodInfo, ...], LaneFailure]:
        """GET /v2/pods, keeping pods whose name starts with ``prefix`` (eps's by default)."""
        reply = await self._call("GET", "/v2/pods")
        if isinstance(reply, LaneFailure):
            return Failure(reply)
        if reply.status != 200:
            return Failure(self._classify(reply, "list pods"))
        doc = _structure(reply.body, _ListDoc)
        if isinstance(doc, LaneFailure):
            return Failure(doc)
        return Success(tuple(_pod_info(p) for p in doc.pods if p.name.startswith(prefix)))

    async def terminate_prefix(self, prefix: str) -> Result[tuple[str, ...], LaneFailure]:
        """Terminate every pod named ``prefix...`` (eps cancel); returns the ids terminated."""
        match await self.list_pods(prefix):
            case Failure(failure):
                return Failure(failure)
            case Success(pods):
                results = await asyncio.gather(*(self.terminate(p.id) for p in pods))
                for result in results:
                    if isinstance(result, Failure):
                        return result
                return Success(tuple(p.id for p in pods))
        raise AssertionError("unreachable")

    async def start(
        self, rung: Rung, name: str, *, job: Job | None = None, dispatch_id: str | None = None
    ) -> RungAttempt:
        """Create the pod for ``rung`` and wait until it is RUNNING.  A pod that was created
        but does not come up is terminated; if even that fails it is returned as leftover."""
        created = await self.create_pod(rung, name, job=job, dispatch_id=dispatch_id)
        if not isinstance(created, Success):
            return RungAttempt(rung, name, created)
        handle = created.unwrap()
        try:
            waited = await self.wait_running(handle)
        except asyncio.CancelledError:
            await asyncio.shield(self.terminate(handle.id))
            raise
        if isinstance(waited, Success):
            return RungAttempt(rung, name, waited)
        failure = waited.failure()
        if isinstance(await self.terminate(handle.id), Success):
            return RungAttempt(rung, name, Failure(evolve(failure, message=f"{failure.message}; pod terminated")))
        leftover = evolve(handle, state="unreleased")
        message = f"{failure.message}; pod {handle.id} could not be terminated and is left for reconcile"
        return RungAttempt(rung, name, Failure(evolve(failure, message=message)), leftover)


# --- fan-out ---------------------------------------------------------------------------------


async def _dispatch(
    client: RunpodClient,
    dispatch_id: str,
    rungs: Sequence[Rung],
    job: Job,
    halted: list[LaneFailure],
) -> FanOutResult:
    attempts: list[RungAttempt] = []
    for index, rung in enumerate(rungs, start=1):
        if halted:
            stop = halted[0]
            return FanOutResult(
                dispatch_id,
                Failure(evolve(stop, message=f"not started: the lane stopped: {stop.message}")),
                tuple(attempts),
            )
        attempt = await client.start(rung, pod_name(dispatch_id, index), job=job, dispatch_id=dispatch_id)
        attempts.append(attempt)
        if isinstance(attempt.result, Success):
            return FanOutResult(dispatch_id, attempt.result, tuple(attempts))
        failure = attempt.result.failure()
        if failure.kind in LANE_FATAL:
            if not halted:
                halted.append(failure)
            break
        if stops_dispatch(failure):  # the core's rule, the same one the executor follows
            break
    if not attempts:
        return FanOutResult(dispatch_id, Failure(_invalid(f"dispatch {dispatch_id} has no RunPod rung to try")))
    last = attempts[-1].result
    failures = [a.result.failure() for a in attempts if isinstance(a.result, Failure)]
    if (
        len(failures) == len(rungs)
        and all(f.code == "400" for f in failures)
        and any(f.kind is FailureKind.INVALID_REQUEST for f in failures)
    ):
        # "if every candidate returns 400, read the last detail as a problem with the request"
        final = failures[-1]
        last = Failure(
            evolve(final, message=f"every candidate answered 400; likely a request problem: {final.message}")
        )
    return FanOutResult(dispatch_id, last, tuple(attempts))


async def fan_out(
    requests: Sequence[tuple[str, Sequence[Rung]]],
    job: Job,
    *,
    client: RunpodClient | None = None,
    settings: RunpodSettings | None = None,
    api_key: ApiKey | None = None,
    sleep: Sleep = asyncio.sleep,
) -> list[FanOutResult]:
    """Start one pod per ``(dispatch id, rungs)`` concurrently (``--count N``, P5).

    Each dispatch walks its own rungs: rung 1 first, the next one after a 400 / 403 /
    exhausted retries, so one exhausted flavor stalls nobody else.  A lane-wide failure
    (401, 402) stops dispatches that have not started yet.  Results are in request order.
    """
    if client is None:
        if api_key is None:
            loaded = load_api_key()
            if not isinstance(loaded, Success):
                failure = loaded.failure()
                return [FanOutResult(d, Failure(failure)) for d, _ in requests]
            api_key = loaded.unwrap()
        async with RunpodClient(api_key, settings, sleep=sleep) as own:
            return await fan_out(requests, job, client=own)
    halted: list[LaneFailure] = []
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(_dispatch(client, d, rungs, job, halted)) for d, rungs in requests]
    return [t.result() for t in tasks]


def fan_out_sync(
    requests: Sequence[tuple[str, Sequence[Rung]]],
    job: Job,
    *,
    settings: RunpodSettings | None = None,
    api_key: ApiKey | None = None,
) -> list[FanOutResult]:
    """:func:`fan_out` for synchronous callers (the CLI)."""
    return asyncio.run(fan_out(requests, job, settings=settings, api_key=api_key))


class RunpodLane:
    """Synchronous facade for the executor and ``eps status`` / ``eps cancel``: each call opens
    a client, runs one operation and closes it."""

    def __init__(self, api_key: ApiKey, settings: RunpodSettings | None = None) -> None:
        self._key = api_key
        self.settings = settings or RunpodSettings()

    def __repr__(self) -> str:
        return f"RunpodLane(base_url={self.settings.base_url!r}, api_key=<redacted>)"

    @classmethod
    def from_environment(cls, settings: RunpodSettings | None = None) -> Result[RunpodLane, LaneFailure]:
        return load_api_key().map(lambda key: cls(key, settings))

    def _run(self, op: Callable[[RunpodClient], Awaitable[T]]) -> T:
        async def go() -> T:
            async with RunpodClient(self._key, self.settings) as client:
                return await op(client)

        return asyncio.run(go())

    def start(self, rung: Rung, name: str, *, job: Job | None = None, dispatch_id: str | None = None) -> RungAttempt:
        return self._run(lambda c: c.start(rung, name, job=job, dispatch_id=dispatch_id))

    def get_pod(self, pod_id: str) -> Result[PodInfo, LaneFailure]:
        return self._run(lambda c: c.get_pod(pod_id))

    def terminate(self, pod_id: str) -> Result[None, LaneFailure]:
        return self._run(lambda c: c.terminate(pod_id))

    def list_pods(self, prefix: str = POD_PREFIX) -> Result[tuple[PodInfo, ...], LaneFailure]:
        return self._run(lambda c: c.list_pods(prefix))

    def terminate_prefix(self, prefix: str) -> Result[tuple[str, ...], LaneFailure]:
        return self._run(lambda c: c.terminate_prefix(prefix))

    def fan_out(self, requests: Sequence[tuple[str, Sequence[Rung]]], job: Job) -> list[FanOutResult]:
        return self._run(lambda c: fan_out(requests, job, client=c))
