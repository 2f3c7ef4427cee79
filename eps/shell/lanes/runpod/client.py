"""RunPod's REST v2 over httpx: one synchronous client per command, shared by threads.

Wire calls: ``POST /v2/pods`` (createPod), ``GET /v2/pods/{id}`` (getPod; PROVISIONING
-> STARTING -> RUNNING), ``DELETE /v2/pods/{id}`` (deletePod, 204), ``GET /v2/pods``
(listPods; it has no name filter, so the prefix filter runs here).  What the answers
mean is :mod:`eps.shell.lanes.runpod.wire`'s business.

Transport errors and timeouts are retried like 5xx (stamina, bounded); 429 waits out
``Retry-After`` a bounded number of times.  A POST whose answer was lost may still
have created the pod, so before re-sending it (and once after giving up) the client
looks the pod up by its name, which is unique per dispatch and attempt: a create is
never sent twice for one pod.

Thread safety: ``--count N`` walks N copies on a thread pool; they share this client.
At most ``settings.concurrency`` requests are in flight; polling and backoff waits
hold no slot.
"""

from __future__ import annotations

import json
import math
import queue
import ssl
import time
from collections.abc import Callable
from typing import Any, Self
from urllib.parse import quote

import certifi
import httpx
import stamina
from attrs import frozen
from returns.result import Failure, Result, Success

from eps.core.model import Job, LaneKind, Rung, evolve
from eps.core.names import PREFIX
from eps.core.outcome import FailureKind, Handle, LaneFailure
from eps.core.runpod_supply import placement
from eps.core.states import HandleState
from eps.shell.lanes.runpod.wire import (
    DEAD,
    POD_STATES,
    ApiKey,
    GpuStockDoc,
    ListDoc,
    PodDoc,
    PodInfo,
    PodStatus,
    Reply,
    RunpodSettings,
    classify,
    pod_info,
    pod_request,
    problem,
    retry_after_s,
    structure,
)

_POOL_SIZE = 8  # connections per httpx pool (see RunpodClient.__init__)


@frozen
class RungAttempt:
    """One rung tried.  ``leftover`` is a pod that exists but neither came up nor could be
    terminated: the caller must record it so reconcile releases it."""

    rung: Rung
    pod_name: str
    result: Result[Handle, LaneFailure]
    leftover: Handle | None = None


class _ServerError(Exception):
    """A 5xx answer, raised so that stamina retries it."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(f"HTTP {reply.status}")
        self.reply = reply


def _retryable(exc: Exception) -> bool:
    return isinstance(exc, _ServerError | httpx.TransportError)


def _reply(response: httpx.Response) -> Reply:
    body: Any = None
    if response.content:
        try:
            body = response.json()
        except ValueError:
            body = None
    return Reply(response.status_code, body, response.headers.get("retry-after"))


class RunpodClient:
    """RunPod REST v2.  Use as ``with RunpodClient(key, settings) as c``.

    ``sleep`` paces polls and ``Retry-After`` waits (tests inject a recorder);
    ``transport`` replaces httpx's network transport.
    """

    def __init__(
        self,
        api_key: ApiKey,
        settings: RunpodSettings | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.settings = settings or RunpodSettings()
        self._key = api_key
        self._sleep = sleep
        self._clock = clock
        # httpcore's pool does O(connections^2) bookkeeping on every request event, which
        # dominates at a few dozen connections; several small pools keep that cost flat.  A
        # request takes a free slot (a pool with a free connection) and gives it back after.
        shards = max(1, math.ceil(self.settings.concurrency / _POOL_SIZE))
        per_pool = math.ceil(self.settings.concurrency / shards)
        # One TLS context for every pool: building one loads the CA bundle (~40 ms each).
        tls = ssl.create_default_context(cafile=certifi.where())
        self._pools = [
            httpx.Client(
                base_url=self.settings.base_url,
                headers={"Authorization": f"Bearer {api_key.reveal()}", "Accept": "application/json"},
                timeout=httpx.Timeout(self.settings.request_timeout_s),
                limits=httpx.Limits(max_connections=per_pool, max_keepalive_connections=per_pool),
                transport=transport,
                verify=tls,
            )
            for _ in range(shards)
        ]
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for slot in range(self.settings.concurrency):
            self._free.put_nowait(slot % shards)

    def __repr__(self) -> str:
        return f"RunpodClient(base_url={self.settings.base_url!r}, api_key=<redacted>)"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for pool in self._pools:
            pool.close()

    # -- messages never carry the key, even if the provider echoes it --

    def _safe(self, text: str) -> str:
        """``text`` with the key gone in every form a message could carry it: plain, as repr or
        JSON escape it, percent-encoded."""
        key = self._key.reveal()
        if not key:
            return text
        from urllib.parse import quote

        for form in sorted({key, repr(key)[1:-1], json.dumps(key)[1:-1], quote(key, safe="")}, key=len, reverse=True):
            text = text.replace(form, "<redacted>")
        return text

    def _failure(
        self, kind: FailureKind, message: str, code: str | None, retry_after_s: float | None = None
    ) -> LaneFailure:
        return LaneFailure(kind, self._safe(message), code=code, retry_after_s=retry_after_s)

    def _classify(self, reply: Reply, what: str) -> LaneFailure:
        failure = classify(reply, what)
        return self._failure(failure.kind, failure.message, failure.code)

    # -- one request: stamina for 5xx/transport, bounded Retry-After waits for 429 --

    def _send(self, method: str, path: str, body: dict[str, Any] | None = None) -> Reply:
        """One request, unretried, on a free pooled connection."""
        shard = self._free.get()
        try:
            response = self._pools[shard].request(method, path, json=body)
        finally:
            self._free.put_nowait(shard)
        return _reply(response)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Reply | LaneFailure:
        """An idempotent call (GET, DELETE, a pod action): transport errors and 5xx retried
        with backoff, 429 waited out by ``Retry-After``, a bounded number of times each."""
        what = f"RunPod {method} {path}"
        waits = 0
        attempts = self.settings.retry.attempts
        while True:
            try:
                reply = self._with_retries(method, path, body)
            except _ServerError as exc:
                return self._failure(
                    FailureKind.TRANSIENT,
                    f"{what}: still failing after {attempts} attempts: {problem(exc.reply)}",
                    str(exc.reply.status),
                )
            except httpx.TimeoutException as exc:
                message = f"{what}: timed out ({type(exc).__name__}) after {attempts} attempts"
                return self._failure(FailureKind.TRANSIENT, message, "timeout")
            except httpx.TransportError as exc:
                message = f"{what}: {type(exc).__name__} ({exc}) after {attempts} attempts"
                return self._failure(FailureKind.TRANSIENT, message, "transport")
            if reply.status != 429:
                return reply
            wait = min(retry_after_s(reply, self.settings.default_retry_after_s), self.settings.max_retry_after_s)
            if waits >= self.settings.max_rate_limit_waits:
                return self._failure(
                    FailureKind.RATE_LIMITED,
                    f"{what}: rate limited after {waits} waits: {problem(reply)}",
                    "429",
                    retry_after_s=wait,
                )
            waits += 1
            self._sleep(wait)

    def _with_retries(self, method: str, path: str, body: dict[str, Any] | None = None) -> Reply:
        r = self.settings.retry
        for attempt in stamina.retry_context(
            on=_retryable,
            attempts=r.attempts,
            timeout=r.timeout_s,
            wait_initial=r.wait_initial_s,
            wait_max=r.wait_max_s,
            wait_jitter=r.wait_jitter_s,
        ):
            with attempt:
                reply = self._send(method, path, body)
                if reply.status >= 500:
                    raise _ServerError(reply)
                return reply
        raise AssertionError("stamina re-raises the last error when attempts run out")

    def _backoff(self, n: int) -> float:
        r = self.settings.retry
        return float(min(r.wait_max_s, r.wait_initial_s * 2 ** max(0, n - 1)))

    # -- creating a pod: never twice --

    def _post(self, body: dict[str, Any], name: str) -> Reply | LaneFailure:
        """POST /v2/pods, sent again only when RunPod surely made nothing: the request never
        reached it (connect errors), it refused it (429), or it failed (5xx) and a look-up by
        name shows no pod.  After an answer that was lost on the way back, only look-ups."""
        what = "RunPod POST /v2/pods"
        sends = rate_waits = 0
        while True:
            sends += 1
            try:
                reply = self._send("POST", "/v2/pods", body)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                if sends >= self.settings.retry.attempts:
                    return self._failure(FailureKind.TRANSIENT, f"{what}: {type(exc).__name__} ({exc})", "transport")
                self._sleep(self._backoff(sends))
                continue
            except httpx.TransportError as exc:  # it was sent; the answer was lost
                return self._after_lost(name, f"{what}: {type(exc).__name__}")
            if reply.status == 429:  # refused, nothing made: safe to send again after the wait
                if rate_waits >= self.settings.max_rate_limit_waits:
                    message = f"{what}: rate limited after {rate_waits} waits: {problem(reply)}"
                    return self._failure(FailureKind.RATE_LIMITED, message, "429", self._rate_wait(reply))
                rate_waits += 1
                sends -= 1
                self._sleep(self._rate_wait(reply))
                continue
            if reply.status >= 500:
                found = self._lookup(name)
                if found is not None:
                    return found
                if sends >= self.settings.retry.attempts:
                    message = f"{what}: still failing after {sends} attempts: {problem(reply)}"
                    return self._failure(FailureKind.TRANSIENT, message, str(reply.status))
                self._sleep(self._backoff(sends))
                continue
            if reply.status in (200, 201) and not isinstance(reply.body, dict):
                return self._after_lost(name, f"{what}: the answer could not be read")
            return reply

    def _rate_wait(self, reply: Reply) -> float:
        return min(retry_after_s(reply, self.settings.default_retry_after_s), self.settings.max_retry_after_s)

    def _lookup(self, name: str) -> Reply | LaneFailure | None:
        """The pod named ``name`` (as if its create had answered 201), ``None`` when RunPod
        lists no such pod, or UNKNOWN_FATE when RunPod will not say: the look-up was refused
        (401, 403) or kept failing.  A 429 is waited out and asked again."""
        tries = rate_waits = 0
        why = "no answer"
        while True:
            try:
                reply: Reply | None = self._send("GET", "/v2/pods")
            except httpx.TransportError as exc:
                reply, why = None, type(exc).__name__
            if reply is not None and reply.status == 200 and isinstance(reply.body, dict):
                pods = reply.body.get("pods") or ()
                return next((Reply(201, p) for p in pods if isinstance(p, dict) and p.get("name") == name), None)
            if reply is not None and reply.status == 429 and rate_waits < self.settings.max_rate_limit_waits:
                rate_waits += 1
                self._sleep(self._rate_wait(reply))
                continue
            if reply is not None:
                why = f"HTTP {reply.status}"
                if reply.status in (401, 403):
                    return self._unknown(name, f"the look-up was refused ({why})")
            tries += 1
            if tries >= self.settings.retry.attempts:
                return self._unknown(name, f"the look-up kept failing ({why})")
            self._sleep(self._backoff(tries))

    def _after_lost(self, name: str, what: str) -> Reply | LaneFailure:
        """A create was sent and its answer lost: look for the pod by its name until it shows
        or ``lost_create_patience_s`` has passed; never send the create again."""
        deadline = self._clock() + self.settings.lost_create_patience_s
        while True:
            found = self._lookup(name)
            if found is not None:
                return found
            if self._clock() >= deadline:
                patience = self.settings.lost_create_patience_s
                return self._unknown(name, f"{what}; no pod of that name after {patience:g} s")
            self._sleep(self.settings.poll_interval_s)

    def _unknown(self, name: str, why: str) -> LaneFailure:
        return self._failure(
            FailureKind.UNKNOWN_FATE,
            f"the create of pod {name} may have happened ({why}); eps reconcile releases it if it exists",
            "unknown_fate",
        )

    # -- operations --

    def create_pod(
        self,
        rung: Rung,
        name: str,
        *,
        job: Job | None = None,
        dispatch_id: str | None = None,
        public_key: str | None = None,
        also_keys: tuple[str, ...] = (),
    ) -> Result[Handle, LaneFailure]:
        """POST /v2/pods for ``rung``.  The handle's state is the pod's status (starting).
        ``public_key``: ssh into the pod with it (see :func:`pod_request`, :meth:`address`);
        ``also_keys``: the pod lets these in too (the team's other hosts')."""
        others = self._elsewhere(rung)
        if isinstance(others, LaneFailure):
            return Failure(others)
        body = pod_request(
            rung, name, self.settings, job=job, dispatch_id=dispatch_id, public_key=public_key, also_keys=also_keys,
            data_centers=others,
        )  # fmt: skip
        if isinstance(body, LaneFailure):
            return Failure(body)
        reply = self._post(body, name)
        if isinstance(reply, LaneFailure):
            return Failure(reply)
        if reply.status not in (200, 201):
            return Failure(self._classify(reply, f"create {rung.machine}"))
        doc = structure(reply.body, PodDoc)
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
                state=POD_STATES[doc.status],
            )
        )

    def _elsewhere(self, rung: Rung) -> tuple[str, ...] | LaneFailure | None:
        """For a rung that asks for "any data centre but these": the others that stock its GPU
        type in its cloud now (``GET /v2/catalog/gpus/{id}?include=AVAILABILITY&product=POD``),
        or NO_CAPACITY when there are none; ``None`` for every other rung."""
        place = placement(rung.zone) if rung.gpus > 0 and rung.machine else None
        if place is None or not place.avoid:
            return None
        query = f"include=AVAILABILITY&product=POD&cloud={place.api_cloud}&count={rung.gpus}"
        reply = self._call("GET", f"/v2/catalog/gpus/{quote(rung.machine or '', safe='')}?{query}")
        if isinstance(reply, LaneFailure):
            return reply
        if reply.status != 200:
            return self._classify(reply, f"catalog of {rung.machine}")
        doc = structure(reply.body, GpuStockDoc)
        if isinstance(doc, LaneFailure):
            return doc
        others = tuple(d for d in doc.stocked() if d not in place.avoid)
        if others:
            return others
        message = (
            f"no capacity: no data centre but {', '.join(place.avoid)} has {rung.machine} on {place.cloud} cloud"
            " now (RunPod's catalog), and a pod there did not come up"
        )
        return self._failure(FailureKind.NO_CAPACITY, message, "no_other_data_centre")

    def get_pod(self, pod_id: str) -> Result[PodInfo, LaneFailure]:
        reply = self._call("GET", f"/v2/pods/{pod_id}")
        if isinstance(reply, LaneFailure):
            return Failure(reply)
        if reply.status == 404:
            return Failure(self._failure(FailureKind.TRANSIENT, f"pod {pod_id} not found", "404"))
        if reply.status != 200:
            return Failure(self._classify(reply, f"get pod {pod_id}"))
        doc = structure(reply.body, PodDoc)
        return Failure(doc) if isinstance(doc, LaneFailure) else Success(pod_info(doc))

    def address(self, pod_id: str) -> Result[tuple[str, int], LaneFailure]:
        """Where ssh reaches the pod: the Pod document's ``ssh.direct`` ``(host, port)``.

        RunPod fills it only for a RUNNING pod created with ``22/tcp`` in ``ports`` (a
        ``public_key`` given to :meth:`create_pod`); otherwise a TRANSIENT failure that says
        which of the two is missing."""
        reply = self._call("GET", f"/v2/pods/{pod_id}")
        if isinstance(reply, LaneFailure):
            return Failure(reply)
        if reply.status != 200:
            return Failure(self._classify(reply, f"get pod {pod_id}"))
        doc = structure(reply.body, PodDoc)
        if isinstance(doc, LaneFailure):
            return Failure(doc)
        direct = doc.ssh.direct if doc.ssh is not None else None
        if direct is not None:
            return Success((direct.host, direct.port))
        why = (
            f"pod {pod_id} is {doc.status.value}: no ssh address until it runs"
            if doc.status is not PodStatus.RUNNING
            else f"pod {pod_id} publishes no 22/tcp: create it with a public key to reach it over ssh"
        )
        return Failure(self._failure(FailureKind.TRANSIENT, why, "no_ssh_address"))

    def wait_running(self, handle: Handle) -> Result[Handle, LaneFailure]:
        """Poll GET /v2/pods/{id} until RUNNING: at most ``ceil(poll_timeout / poll_interval)``
        polls; EXITED, ERROR or TERMINATED first is a failure."""
        s = self.settings
        polls = max(1, math.ceil(s.poll_timeout_s / s.poll_interval_s))
        running = handle.state is HandleState.RUNNING
        last = handle.state.value
        for _ in range(polls):
            if running:
                break
            self._sleep(s.poll_interval_s)
            match self.get_pod(handle.id):
                case Failure(failure):
                    return Failure(failure)
                case Success(pod):
                    last = pod.status.value
                    running = pod.status is PodStatus.RUNNING
                    handle = evolve(handle, state=POD_STATES[pod.status], zone=pod.data_center or handle.zone)
                    if pod.status in DEAD:
                        return Failure(
                            self._failure(
                                FailureKind.TRANSIENT,
                                f"pod {handle.id} went to {pod.status.value} before RUNNING",
                                f"pod_{pod.status.value.lower()}",
                            )
                        )
        if running:
            return Success(evolve(handle, state=HandleState.RUNNING))
        return Failure(
            self._failure(
                FailureKind.TRANSIENT,
                f"pod {handle.id} not RUNNING after {s.poll_timeout_s:g} s (last status {last})",
                "poll_timeout",
            )
        )

    def terminate(self, pod_id: str) -> Result[None, LaneFailure]:
        """DELETE /v2/pods/{id}.  A pod that is already gone (404) counts as terminated."""
        reply = self._call("DELETE", f"/v2/pods/{pod_id}")
        if isinstance(reply, LaneFailure):
            return Failure(reply)
        if reply.status in (200, 204, 404):
            return Success(None)
        return Failure(self._classify(reply, f"terminate pod {pod_id}"))

    def terminate_confirmed(self, pod_id: str) -> Result[None, LaneFailure]:
        """DELETE the pod, then read it until RunPod says it is gone (404 or TERMINATED): a
        dispatch makes its next pod only once its last one is surely gone."""
        done = self.terminate(pod_id)
        if isinstance(done, Failure):
            return done
        s = self.settings
        last = "no answer"
        for n in range(max(1, math.ceil(s.poll_timeout_s / s.poll_interval_s))):
            if n:
                self._sleep(s.poll_interval_s)
            match self.get_pod(pod_id):
                case Failure(f) if f.code == "404":
                    return Success(None)
                case Success(pod) if pod.status is PodStatus.TERMINATED:
                    return Success(None)
                case Success(pod):
                    last = pod.status.value
                case Failure(f):
                    last = f.message
        return Failure(self._failure(FailureKind.TRANSIENT, f"pod {pod_id} is still there after its DELETE ({last})",
                                     "not_terminated"))  # fmt: skip

    def pod_action(self, pod_id: str, action: str) -> Result[None, LaneFailure]:
        """POST /v2/pods/{id}/action ``{"action": ...}``: ``start`` boots an EXITED pod again
        (its persistent mount kept, its container disk made anew), ``stop`` releases its
        compute and keeps its disk.  Sent again after a lost answer: an action the pod's
        status no longer allows is 409, which the caller reads the pod to understand."""
        reply = self._call("POST", f"/v2/pods/{pod_id}/action", {"action": action})
        if isinstance(reply, LaneFailure):
            return Failure(reply)
        if reply.status in (200, 204):
            return Success(None)
        return Failure(self._classify(reply, f"{action} pod {pod_id}"))

    def list_pods(self, prefix: str = PREFIX) -> Result[tuple[PodInfo, ...], LaneFailure]:
        """GET /v2/pods, keeping pods whose name starts with ``prefix`` (eps's by default)."""
        reply = self._call("GET", "/v2/pods")
        if isinstance(reply, LaneFailure):
            return Failure(reply)
        if reply.status != 200:
            return Failure(self._classify(reply, "list pods"))
        doc = structure(reply.body, ListDoc)
        if isinstance(doc, LaneFailure):
            return Failure(doc)
        return Success(tuple(pod_info(p) for p in doc.pods if p.name.startswith(prefix)))

    def start(
        self,
        rung: Rung,
        name: str,
        *,
        job: Job | None = None,
        dispatch_id: str | None = None,
        public_key: str | None = None,
        also_keys: tuple[str, ...] = (),
    ) -> RungAttempt:
        """Create the pod for ``rung`` and wait until it is RUNNING.  A pod that was created
        but does not come up is terminated; if even that fails it is returned as leftover."""
        created = self.create_pod(
            rung, name, job=job, dispatch_id=dispatch_id, public_key=public_key, also_keys=also_keys
        )
        if not isinstance(created, Success):
            return RungAttempt(rung, name, created)
        handle = created.unwrap()
        waited = self.wait_running(handle)
        if isinstance(waited, Success):
            return RungAttempt(rung, name, waited)
        failure = waited.failure()
        if isinstance(self.terminate_confirmed(handle.id), Success):
            message = f"{failure.message}; pod terminated"
            return RungAttempt(rung, name, Failure(evolve(failure, message=message, made_in=handle.zone or "unknown")))
        leftover = evolve(handle, state=HandleState.UNRELEASED)
        message = f"{failure.message}; pod {handle.id} could not be terminated and is left for reconcile"
        return RungAttempt(rung, name, Failure(evolve(failure, message=message)), leftover)
