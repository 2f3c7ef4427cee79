"""A local Compute Engine REST server for the GCP lane tests.

It speaks the wire format that ``google-cloud-compute`` (transport "rest")
uses, as ``notes/providers.md`` documents it, on plain HTTP at 127.0.0.1 and a
random port, from a thread:

- ``POST   /compute/v1/projects/{p}/zones/{z}/instances[?requestId=]``: insert;
  answers a RUNNING zonal operation ``{"name":"operation-1","status":"RUNNING"}``.
  A repeated ``requestId`` is a duplicate: the same operation comes back and
  no second instance is made.
- ``GET    .../zones/{z}/operations/{op}`` and ``POST .../operations/{op}/wait``:
  RUNNING for ``polls`` calls, then DONE, with the error body the zone was
  programmed with (``httpErrorStatusCode`` + ``error.errors[]``).
- ``GET    .../zones/{z}/instances/{name}``, ``DELETE`` the same path,
  ``GET .../zones/{z}/instances?filter=`` and ``GET /compute/v1/projects/{p}/aggregated/instances?filter=``.

Operation bodies are exactly the documented shapes (compact JSON, documented
key order); synchronous errors are Google's ``{"error":{"code","message","errors":[...]}}``.

What a zone answers to insert is programmed per zone (:meth:`FakeCompute.program`,
:meth:`FakeCompute.always`); any route can be made to fail a number of times
(:meth:`FakeCompute.fail`), before or after the request took effect.  Every
request is recorded (:attr:`FakeCompute.requests`) with its parsed JSON body.
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

API = "https://www.googleapis.com/compute/v1"


def dumps(payload: object) -> bytes:
    """Compact JSON, keys in insertion order: the byte shape the notes document."""
    return json.dumps(payload, separators=(",", ":")).encode()


# ---------------------------------------------------------------- replies ---


@dataclass(frozen=True)
class Created:
    """Insert succeeds: the operation is RUNNING for ``polls`` reads, then DONE;
    the instance then has ``status``."""

    polls: int = 1
    status: str = "RUNNING"


@dataclass(frozen=True)
class OpError:
    """Insert is accepted (RUNNING operation) and the operation ends DONE with this error."""

    code: str
    message: str
    http_status: int
    http_message: str
    error_details: tuple[dict[str, Any], ...] = ()
    polls: int = 1

    def body(self, name: str) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.error_details:
            error["errorDetails"] = list(self.error_details)
        return {
            "name": name,
            "status": "DONE",
            "httpErrorStatusCode": self.http_status,
            "httpErrorMessage": self.http_message,
            "error": {"errors": [error]},
        }


@dataclass(frozen=True)
class SyncError:
    """The HTTP call itself fails with ``status`` and Google's JSON error body."""

    status: int
    reason: str
    message: str
    domain: str = "global"

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.status,
                "message": self.message,
                "errors": [{"reason": self.reason, "domain": self.domain, "message": self.message}],
            }
        }


Reply = Created | OpError | SyncError


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


# ------------------------------------------------------------------ state ---


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: Any


@dataclass
class _Fault:
    method: str
    pattern: re.Pattern[str]
    reply: SyncError
    times: int
    after: bool  # let the request take effect, then answer the fault (a lost response)


@dataclass
class _Operation:
    name: str
    zone: str
    polls_left: int
    outcome: Created | OpError
    instance: str | None = None  # instance it creates or deletes
    kind: str = "insert"
    status: str = "RUNNING"


@dataclass
class _Zone:
    script: deque[Reply] = field(default_factory=deque)
    otherwise: Reply = field(default_factory=Created)


_BASE = r"/compute/v1/projects/(?P<project>[^/]+)"
_ROUTES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("POST", re.compile(_BASE + r"/zones/(?P<zone>[^/]+)/instances"), "insert"),
    ("GET", re.compile(_BASE + r"/zones/(?P<zone>[^/]+)/instances"), "list"),
    ("GET", re.compile(_BASE + r"/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)/serialPort"), "serial"),
    ("GET", re.compile(_BASE + r"/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)"), "get"),
    ("DELETE", re.compile(_BASE + r"/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)"), "delete"),
    ("GET", re.compile(_BASE + r"/zones/(?P<zone>[^/]+)/operations/(?P<op>[^/]+)"), "op_get"),
    ("POST", re.compile(_BASE + r"/zones/(?P<zone>[^/]+)/operations/(?P<op>[^/]+)/wait"), "op_wait"),
    ("GET", re.compile(_BASE + r"/aggregated/instances"), "aggregated"),
)

# One term of a Compute list filter: ``labels.k = "v"``, ``labels.k != v``, ``labels.k:*``.
_TERM = re.compile(r'\(?\s*labels\.(?P<key>[a-z][a-z0-9_-]*)\s*(?P<op>!=|=|:)\s*"?(?P<value>[^"\s()]*)"?\s*\)?')


def _matches(filter_text: str, labels: dict[str, str]) -> bool:
    text = filter_text.strip()
    pos = 0
    ok = True
    while pos < len(text):
        term = _TERM.match(text, pos)
        if term is None:
            raise ValueError(filter_text)
        key, op, value = term["key"], term["op"], term["value"]
        have = labels.get(key)
        if op == ":":
            ok = ok and (have is not None if value == "*" else have is not None and value in have)
        elif op == "=":
            ok = ok and have == value
        else:
            ok = ok and have != value
        pos = term.end()
        rest = re.match(r"\s*(AND\s+)?", text[pos:])
        pos += rest.end() if rest else 0
    return ok


class FakeCompute:
    """The server's state and its programming interface; thread-safe."""

    def __init__(self, project: str = "test-project") -> None:
        self.project = project
        self.requests: list[Recorded] = []
        self.instances: dict[tuple[str, str], dict[str, Any]] = {}  # (zone, name) -> instance JSON
        self.serial: dict[tuple[str, str], str] = {}  # (zone, name) -> serial port 1 output
        self._ops: dict[str, _Operation] = {}
        self._request_ids: dict[str, str] = {}  # requestId -> operation name
        self._zones: dict[str, _Zone] = {}
        self._faults: list[_Fault] = []
        self._counter = 0
        self._lock = threading.RLock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- programming ------------------------------------------------------

    def program(self, zone: str, *replies: Reply) -> None:
        """The next inserts into ``zone`` get these replies, in order, then ``always``'s."""
        with self._lock:
            self._zone(zone).script.extend(replies)

    def always(self, zone: str, reply: Reply) -> None:
        with self._lock:
            self._zone(zone).otherwise = reply

    def fail(self, method: str, path_regex: str, reply: SyncError, times: int = 1, *, after: bool = False) -> None:
        """The next ``times`` requests matching answer ``reply``.  ``after``: the request
        takes effect first (the answer is lost on the way back)."""
        with self._lock:
            self._faults.append(_Fault(method, re.compile(path_regex), reply, times, after))

    def preempt(self, zone: str, name: str) -> None:
        """Take a spot VM back as GCE does: action DELETE removes it, STOP leaves it TERMINATED."""
        with self._lock:
            instance = self.instances[(zone, name)]
            action = instance.get("scheduling", {}).get("instanceTerminationAction", "STOP")
            if action == "DELETE":
                del self.instances[(zone, name)]
            else:
                instance["status"] = "TERMINATED"

    def set_status(self, zone: str, name: str, status: str) -> None:
        with self._lock:
            self.instances[(zone, name)]["status"] = status

    def add_instance(self, zone: str, body: dict[str, Any], status: str = "RUNNING") -> None:
        """Put an instance in place as if someone else had made it."""
        with self._lock:
            self.instances[(zone, body["name"])] = self._materialize(zone, body, status)

    # -- inspection -------------------------------------------------------

    def bodies(self, method: str, path_regex: str) -> list[Any]:
        with self._lock:
            return [r.body for r in self.requests if r.method == method and re.search(path_regex, r.path)]

    def recorded(self, method: str, path_regex: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.method == method and re.search(path_regex, r.path)]

    # -- lifecycle --------------------------------------------------------

    @property
    def endpoint(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeCompute:
        fake = self

        class Handler(_Handler):
            server_state = fake

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-compute", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    # -- request handling (called from the handler thread) ------------------

    def handle(self, method: str, raw_path: str, raw_body: bytes) -> tuple[int, bytes]:
        parts = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        body = json.loads(raw_body) if raw_body else None
        with self._lock:
            self.requests.append(Recorded(method, parts.path, query, body))
            fault = self._take_fault(method, parts.path)
            if fault is not None and not fault.after:
                return fault.reply.status, dumps(fault.reply.body())
            status, payload = self._route(method, parts.path, query, body)
            if fault is not None:
                return fault.reply.status, dumps(fault.reply.body())
            return status, payload

    def _take_fault(self, method: str, path: str) -> _Fault | None:
        for fault in self._faults:
            if fault.times > 0 and fault.method == method and fault.pattern.search(path):
                fault.times -= 1
                return fault
        return None

    def _route(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        for route_method, pattern, action in _ROUTES:
            match = pattern.fullmatch(path)
            if route_method == method and match:
                args = match.groupdict()
                if args.pop("project") != self.project:
                    return _error(not_found(f"projects/{args.get('project')}"))
                return getattr(self, "_" + action)(query=query, body=body, **args)
        return _error(SyncError(404, "notFound", f"No route for {method} {path}"))

    def _insert(self, zone: str, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        request_id = query.get("requestId")
        if request_id is not None and request_id in self._request_ids:
            return 200, dumps(self._op_json(self._ops[self._request_ids[request_id]]))
        reply = self._next_reply(zone)
        if isinstance(reply, SyncError):
            return _error(reply)
        name = body["name"]
        if (zone, name) in self.instances:
            return _error(already_exists(f"projects/{self.project}/zones/{zone}/instances/{name}"))
        op = self._new_op(zone, reply, name, "insert")
        if isinstance(reply, Created):
            self.instances[(zone, name)] = self._materialize(zone, body, "PROVISIONING")
        if request_id is not None:
            self._request_ids[request_id] = op.name
        return 200, dumps(self._op_json(op))

    def _delete(self, zone: str, name: str, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        request_id = query.get("requestId")
        if request_id is not None and request_id in self._request_ids:
            return 200, dumps(self._op_json(self._ops[self._request_ids[request_id]]))
        if (zone, name) not in self.instances:
            return _error(not_found(f"projects/{self.project}/zones/{zone}/instances/{name}"))
        self.instances[(zone, name)]["status"] = "STOPPING"
        op = self._new_op(zone, Created(), name, "delete")
        if request_id is not None:
            self._request_ids[request_id] = op.name
        return 200, dumps(self._op_json(op))

    def _get(self, zone: str, name: str, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        instance = self.instances.get((zone, name))
        if instance is None:
            return _error(not_found(f"projects/{self.project}/zones/{zone}/instances/{name}"))
        return 200, dumps(instance)

    def _serial(self, zone: str, name: str, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        """``instances.getSerialPortOutput``: a ``compute#serialPortOutput`` of what the VM printed."""
        instance = self.instances.get((zone, name))
        if instance is None:
            return _error(not_found(f"projects/{self.project}/zones/{zone}/instances/{name}"))
        text = self.serial.get((zone, name), "")
        start = int(query.get("start", "0") or 0)
        return 200, dumps(
            {
                "kind": "compute#serialPortOutput",
                "contents": text[start:],
                "start": str(start),
                "next": str(len(text)),
                "selfLink": f"https://www.googleapis.com/compute/v1/projects/{self.project}/zones/{zone}"
                f"/instances/{name}/serialPort",
            }
        )

    def _list(self, zone: str, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        try:
            items = self._filtered(query.get("filter", ""), zone)
        except ValueError:
            return _error(SyncError(400, "invalid", f"Invalid value for field 'filter': '{query['filter']}'."))
        payload: dict[str, Any] = {
            "kind": "compute#instanceList",
            "id": f"projects/{self.project}/zones/{zone}/instances",
        }
        if items:
            payload["items"] = items
        payload["selfLink"] = f"{API}/projects/{self.project}/zones/{zone}/instances"
        return 200, dumps(payload)

    def _aggregated(self, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        scopes: dict[str, Any] = {}
        zones = sorted({z for z, _ in self.instances} | set(self._zones))
        for zone in zones:
            try:
                items = self._filtered(query.get("filter", ""), zone)
            except ValueError:
                return _error(SyncError(400, "invalid", f"Invalid value for field 'filter': '{query['filter']}'."))
            scope = f"zones/{zone}"
            if items:
                scopes[scope] = {"instances": items}
            else:
                scopes[scope] = {
                    "warning": {
                        "code": "NO_RESULTS_ON_PAGE",
                        "message": f"There are no results for scope '{scope}' on this page.",
                        "data": [{"key": "scope", "value": scope}],
                    }
                }
        payload = {
            "kind": "compute#instanceAggregatedList",
            "id": f"projects/{self.project}/aggregated/instances",
            "items": scopes,
            "selfLink": f"{API}/projects/{self.project}/aggregated/instances",
        }
        return 200, dumps(payload)

    def _op_get(self, zone: str, op: str, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        return self._advance(zone, op)

    def _op_wait(self, zone: str, op: str, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        return self._advance(zone, op)

    # -- helpers ------------------------------------------------------------

    def _zone(self, zone: str) -> _Zone:
        return self._zones.setdefault(zone, _Zone())

    def _next_reply(self, zone: str) -> Reply:
        state = self._zone(zone)
        return state.script.popleft() if state.script else state.otherwise

    def _new_op(self, zone: str, outcome: Created | OpError, instance: str, kind: str) -> _Operation:
        self._counter += 1
        op = _Operation(f"operation-{self._counter}", zone, outcome.polls, outcome, instance, kind)
        self._ops[op.name] = op
        return op

    def _advance(self, zone: str, name: str) -> tuple[int, bytes]:
        op = self._ops.get(name)
        if op is None or op.zone != zone:
            return _error(not_found(f"projects/{self.project}/zones/{zone}/operations/{name}"))
        if op.status != "DONE":
            if op.polls_left > 0:
                op.polls_left -= 1
            if op.polls_left == 0:
                self._finish(op)
        return 200, dumps(self._op_json(op))

    def _finish(self, op: _Operation) -> None:
        op.status = "DONE"
        key = (op.zone, op.instance or "")
        if op.kind == "delete":
            self.instances.pop(key, None)
        elif isinstance(op.outcome, Created) and key in self.instances:
            self.instances[key]["status"] = op.outcome.status

    def _op_json(self, op: _Operation) -> dict[str, Any]:
        if op.status == "DONE" and isinstance(op.outcome, OpError):
            return op.outcome.body(op.name)
        return {"name": op.name, "status": op.status}

    def _materialize(self, zone: str, body: dict[str, Any], status: str) -> dict[str, Any]:
        self._counter += 1
        zone_url = f"{API}/projects/{self.project}/zones/{zone}"
        instance: dict[str, Any] = {"kind": "compute#instance", "id": str(1000 + self._counter)}
        instance.update(body)
        machine = body.get("machineType", "")
        instance["machineType"] = f"{zone_url}/machineTypes/{machine.rsplit('/', 1)[-1]}"
        instance["zone"] = zone_url
        instance["status"] = status
        instance["selfLink"] = f"{zone_url}/instances/{body['name']}"
        return instance

    def _filtered(self, filter_text: str, zone: str) -> list[dict[str, Any]]:
        out = []
        for (z, _), instance in sorted(self.instances.items()):
            if z == zone and (not filter_text or _matches(filter_text, instance.get("labels", {}))):
                out.append(instance)
        return out


def _error(reply: SyncError) -> tuple[int, bytes]:
    return reply.status, dumps(reply.body())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_state: FakeCompute

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        status, payload = self.server_state.handle(self.command, self.path, raw)
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_DELETE = _serve

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the tests read :attr:`FakeCompute.requests` instead."""


@contextmanager
def running(project: str = "test-project") -> Iterator[FakeCompute]:
    server = FakeCompute(project).start()
    try:
        yield server
    finally:
        server.stop()
