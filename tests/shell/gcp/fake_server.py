"""A local Compute Engine REST server for the GCP lane tests, as strict as Compute itself.

It speaks the wire format that ``google-cloud-compute`` (transport "rest")
uses, as ``notes/providers.md`` documents it, on plain HTTP at 127.0.0.1 and a
random port, from a thread:

- ``POST   /compute/v1/projects/{p}/zones/{z}/instances[?requestId=]``: insert;
  answers a PENDING zonal operation.  A repeated ``requestId`` is a duplicate:
  the same operation comes back and no second instance is made.
- ``GET    .../zones/{z}/operations/{op}`` and ``POST .../operations/{op}/wait``:
  each read moves the operation on: PENDING -> RUNNING (for ``polls - 1``
  reads) -> DONE, with the error body the zone was programmed with
  (``httpErrorStatusCode`` + ``error.errors[]``).
- ``GET    .../zones/{z}/instances/{name}``, ``DELETE`` the same path,
  ``GET .../instances/{name}/serialPort``, ``GET .../zones/{z}/instances?filter=``
  and ``GET /compute/v1/projects/{p}/aggregated/instances?filter=``.

What Compute refuses synchronously, this server refuses the same way, before
anything else happens (:func:`insert_violations`): a ``requestId`` that is not
a UUID or is the zero UUID, an instance name outside
``[a-z]([-a-z0-9]{0,61}[a-z0-9])?``, a ``machineType`` that is not a
``zones/{zone}/machineTypes/{type}`` reference (or names a type the fake was
told does not exist), label keys or values Compute rejects, and spot
scheduling with ``onHostMaintenance: MIGRATE`` or ``automaticRestart: true``
(also an e2 machine told to TERMINATE on host maintenance without being spot).
Then a name that is taken answers 409 ``alreadyExists``, before any reply
scripted for the zone is used.

Errors are byte-faithful to Google's JSON error format; the bodies, the rules
and where their texts come from are in ``compute_rules.py`` (re-exported here).
Operations carry the fields Compute's do (``kind``, ``id``, ``name``, ``zone``,
``operationType``, ``targetLink``, ``targetId``, ``status``, ``progress``,
``insertTime``, ``startTime``, ``endTime``, ``selfLink``), in the API's order.

Instances carry a reachable SSH address: ``networkInterfaces[0].networkIP``
(:attr:`FakeCompute.network_ip`, or ``10.128.0.N`` in order) and, when the
insert asked for an external IP (``accessConfigs``), ``accessConfigs[0].natIP``
(:attr:`FakeCompute.nat_ip`, default 127.0.0.1) while the VM is up; no natIP
without ``accessConfigs``.  Metadata items (``ssh-keys``, ``startup-script``)
are kept as sent: :meth:`FakeCompute.metadata`.

What a zone answers to insert is programmed per zone (:meth:`FakeCompute.program`,
:meth:`FakeCompute.always`); any route can be made to fail a number of times
(:meth:`FakeCompute.fail`), before or after the request took effect.  Every
request is recorded (:attr:`FakeCompute.requests`) with its parsed JSON body.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import importlib.util
import json
import re
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs, urlsplit


def _load_rules() -> ModuleType:
    """``compute_rules.py`` beside this file, under one name however this module was loaded
    (as ``gcp.fake_server`` by the GCP tests, by path from the executor and fault suites),
    so every loader shares the same reply classes."""
    name = "gcp_compute_rules"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("compute_rules.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_rules = _load_rules()
API = _rules.API
Created = _rules.Created
OpError = _rules.OpError
SyncError = _rules.SyncError
Reply = _rules.Reply
dumps = _rules.dumps
error_info = _rules.error_info
detail_only = _rules.detail_only
invalid_field = _rules.invalid_field
exhausted = _rules.exhausted
quota_op = _rules.quota_op
quota_sync = _rules.quota_sync
quota_detail_only = _rules.quota_detail_only
not_ready = _rules.not_ready
unavailable = _rules.unavailable
unauthenticated = _rules.unauthenticated
forbidden = _rules.forbidden
not_found = _rules.not_found
already_exists = _rules.already_exists
request_id_violation = _rules.request_id_violation
insert_violations = _rules.insert_violations
gpu_machine_zones = _rules.gpu_machine_zones
combined = _rules.combined
NAME_REGEX = _rules.NAME_REGEX
ZERO_UUID = _rules.ZERO_UUID


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
    id: str
    zone: str
    polls_left: int
    outcome: Created | OpError
    instance: str
    kind: str  # operationType: insert / delete
    insert_time: str
    target_id: str | None = None
    status: str = "PENDING"
    start_time: str | None = None
    end_time: str | None = None


@dataclass
class _Zone:
    script: deque[Reply] = field(default_factory=deque)
    otherwise: Reply = field(default_factory=Created)
    deletes: deque[OpError] = field(default_factory=deque)  # delete operations that end in an error
    starts: deque[OpError] = field(default_factory=deque)  # start operations that end in an error


_BASE = r"/compute/v1/projects/(?P<project>[^/]+)"
_ROUTES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("POST", re.compile(_BASE + r"/zones/(?P<zone>[^/]+)/instances"), "insert"),
    ("GET", re.compile(_BASE + r"/zones/(?P<zone>[^/]+)/instances"), "list"),
    ("GET", re.compile(_BASE + r"/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)/serialPort"), "serial"),
    ("GET", re.compile(_BASE + r"/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)"), "get"),
    ("DELETE", re.compile(_BASE + r"/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)"), "delete"),
    ("POST", re.compile(_BASE + r"/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)/start"), "start_instance"),
    ("GET", re.compile(_BASE + r"/zones/(?P<zone>[^/]+)/operations/(?P<op>[^/]+)"), "op_get"),
    ("POST", re.compile(_BASE + r"/zones/(?P<zone>[^/]+)/operations/(?P<op>[^/]+)/wait"), "op_wait"),
    ("GET", re.compile(_BASE + r"/aggregated/instances"), "aggregated"),
)

# One term of a Compute list filter: ``labels.k = "v"``, ``labels.k != v``, ``labels.k:*``.
_TERM = re.compile(r'\(?\s*labels\.(?P<key>[a-z][a-z0-9_-]*)\s*(?P<op>!=|=|:)\s*"?(?P<value>[^"\s()]*)"?\s*\)?')
#: Instance states in which an ephemeral external IP is attached (released when the VM stops).
_UP = frozenset({"STAGING", "RUNNING", "STOPPING", "SUSPENDING", "REPAIRING"})


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


def _utc_now() -> datetime:
    return datetime.now(UTC)


class FakeCompute:
    """The server's state and its programming interface; thread-safe.

    ``nat_ip``: the external address every VM that asked for one (``accessConfigs``)
    reports as ``natIP`` while up; ``network_ip``: the internal ``networkIP`` of every
    VM (None: ``10.128.0.2``, ``.3``, ... in order of creation).  Both are attributes
    a test may change.  ``machine_types``: the types that exist (None: any).
    ``machine_zones``: each GPU machine type's zones (default: every GPU family's, GCP's
    own table, :func:`gpu_machine_zones`; None: any zone); a GPU type in a zone that lacks
    it is refused as Compute refuses it.
    ``error_details``: field validation errors carry an ErrorInfo in ``details`` too.
    ``networks``: the project's VPC networks (a default project has ``default``; None: any).
    ``clock``: the time operations are stamped with."""

    def __init__(
        self,
        project: str = "test-project",
        *,
        nat_ip: str = "127.0.0.1",
        network_ip: str | None = None,
        machine_types: frozenset[str] | set[str] | None = None,
        machine_zones: dict[str, frozenset[str]] | str | None = "gcp",
        error_details: bool = True,
        networks: frozenset[str] | set[str] | None = frozenset({"default"}),
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.project = project
        self.nat_ip = nat_ip
        self.network_ip = network_ip
        self.machine_types = frozenset(machine_types) if machine_types is not None else None
        self.machine_zones = gpu_machine_zones() if machine_zones == "gcp" else machine_zones
        self.error_details = error_details
        self.networks = frozenset(networks) if networks is not None else None
        self.clock = clock
        self._pending: dict[tuple[str, str], list[Any]] = {}  # flex-start VMs waiting: [reads left, then]
        self.requests: list[Recorded] = []
        self.instances: dict[tuple[str, str], dict[str, Any]] = {}  # (zone, name) -> instance JSON
        self.serial: dict[tuple[str, str], str] = {}  # (zone, name) -> serial port 1 output
        self._ops: dict[str, _Operation] = {}
        self._request_ids: dict[str, str] = {}  # requestId -> operation name
        self._zones: dict[str, _Zone] = {}
        self._faults: list[_Fault] = []
        self._truncations: list[list[Any]] = []
        self._counter = 0  # instance ids
        self._op_counter = 0  # operation names: operation-1, operation-2, ...
        self._nics = 0
        self._ephemeral: set[int] = set()  # id() of accessConfigs whose natIP comes and goes
        self._lock = threading.RLock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- programming ------------------------------------------------------

    def program(self, zone: str, *replies: Reply) -> None:
        """The next inserts into ``zone`` get these replies, in order, then ``always``'s."""
        with self._lock:
            self._zone(zone).script.extend(replies)

    def program_deletes(self, zone: str, *errors: OpError) -> None:
        """The next deletes in ``zone`` are accepted and their operations end DONE with these
        errors, in order (the instance stays); later deletes go through."""
        with self._lock:
            self._zone(zone).deletes.extend(errors)

    def program_starts(self, zone: str, *errors: OpError) -> None:
        """The next ``instances.start`` calls in ``zone`` are accepted and their operations
        end DONE with these errors, in order (the VM stays TERMINATED): a stopped VM that
        finds no capacity to boot again (``ZONE_RESOURCE_POOL_EXHAUSTED``)."""
        with self._lock:
            self._zone(zone).starts.extend(errors)

    def always(self, zone: str, reply: Reply) -> None:
        with self._lock:
            self._zone(zone).otherwise = reply

    def fail(self, method: str, path_regex: str, reply: SyncError, times: int = 1, *, after: bool = False) -> None:
        """The next ``times`` requests matching answer ``reply``.  ``after``: the request
        takes effect first (the answer is lost on the way back)."""
        with self._lock:
            self._faults.append(_Fault(method, re.compile(path_regex), reply, times, after))

    def truncate(self, method: str, path_regex: str, times: int = 1) -> None:
        """The next ``times`` requests matching take effect, and their answer is cut short
        (half of the JSON body, status 200): a connection dropped mid-answer."""
        with self._lock:
            self._truncations.append([method, re.compile(path_regex), times])

    def preempt(self, zone: str, name: str) -> None:
        """Take a spot VM back as GCE does: action DELETE removes it, STOP leaves it TERMINATED."""
        with self._lock:
            instance = self.instances[(zone, name)]
            action = instance.get("scheduling", {}).get("instanceTerminationAction", "STOP")
            if action == "DELETE":
                del self.instances[(zone, name)]
            else:
                self._set_status(instance, "TERMINATED")

    def set_status(self, zone: str, name: str, status: str) -> None:
        with self._lock:
            self._set_status(self.instances[(zone, name)], status)

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

    def metadata(self, zone: str, name: str) -> dict[str, str]:
        """The instance's metadata items as ``{key: value}`` (``ssh-keys``, ``startup-script``, ...)."""
        with self._lock:
            items = self.instances[(zone, name)].get("metadata", {}).get("items", [])
            return {item["key"]: item.get("value", "") for item in items}

    def ssh_address(self, zone: str, name: str) -> str | None:
        """Where ssh would reach the VM now: its ``natIP``, else None."""
        with self._lock:
            nics = self.instances[(zone, name)].get("networkInterfaces") or [{}]
            configs = nics[0].get("accessConfigs") or [{}]
            return configs[0].get("natIP")

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
        try:
            body = json.loads(raw_body) if raw_body else None
        except ValueError:
            body = None
            bad_json = True
        else:
            bad_json = False
        with self._lock:
            self.requests.append(Recorded(method, parts.path, query, body))
            if bad_json:
                return _error(SyncError(400, "parseError", "Parse Error"))
            fault = self._take_fault(method, parts.path)
            if fault is not None and not fault.after:
                return fault.reply.status, dumps(fault.reply.body())
            status, payload = self._route(method, parts.path, query, body)
            if fault is not None:
                return fault.reply.status, dumps(fault.reply.body())
            for cut in self._truncations:
                if cut[2] > 0 and cut[0] == method and cut[1].search(parts.path):
                    cut[2] -= 1
                    return status, payload[: len(payload) // 2]
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
        if (answered := self._replayed(request_id)) is not None:
            return answered
        violations = insert_violations(
            zone,
            body,
            machine_types=self.machine_types,
            machine_zones=self.machine_zones,  # type: ignore[arg-type]
            details=self.error_details,
            networks=self.networks,
        )
        if violations:
            return _error(combined(violations))
        name = body["name"]
        if (zone, name) in self.instances:  # a clash is found before the zone is asked
            return _error(already_exists(f"projects/{self.project}/zones/{zone}/instances/{name}"))
        reply = self._next_reply(zone)
        if isinstance(reply, SyncError):
            return _error(reply)
        target_id = None
        if isinstance(reply, Created):
            instance = self._materialize(zone, body, "PROVISIONING")
            self.instances[(zone, name)] = instance
            target_id = instance["id"]
        op = self._new_op(zone, reply, name, "insert", target_id)
        if request_id is not None:
            self._request_ids[request_id] = op.name
        return 200, dumps(self._op_json(op))

    def _replayed(self, request_id: str | None) -> tuple[int, bytes] | None:
        """A mutation's ``requestId``: refused when malformed; the first call's operation when
        it was seen before (GCE's idempotency); ``None``: go on and apply the call."""
        refused = request_id_violation(request_id, details=self.error_details)
        if refused is not None:
            return _error(refused)
        if request_id is not None and request_id in self._request_ids:
            return 200, dumps(self._op_json(self._ops[self._request_ids[request_id]]))
        return None

    def _delete(self, zone: str, name: str, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        request_id = query.get("requestId")
        if (answered := self._replayed(request_id)) is not None:
            return answered
        instance = self.instances.get((zone, name))
        if instance is None:
            return _error(not_found(f"projects/{self.project}/zones/{zone}/instances/{name}"))
        refusals = self._zone(zone).deletes
        if refusals:
            op = self._new_op(zone, refusals.popleft(), name, "delete", instance["id"])
        else:
            self._set_status(instance, "STOPPING")
            op = self._new_op(zone, Created(), name, "delete", instance["id"])
        if request_id is not None:
            self._request_ids[request_id] = op.name
        return 200, dumps(self._op_json(op))

    def _start_instance(self, zone: str, name: str, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        """``instances.start``: a stopped (TERMINATED) VM boots again with its disk (STAGING,
        then RUNNING when the operation is done); starting a running VM is a no-op; one that
        is still stopping is not ready (``resourceNotReady``)."""
        request_id = query.get("requestId")
        if (answered := self._replayed(request_id)) is not None:
            return answered
        instance = self.instances.get((zone, name))
        if instance is None:
            return _error(not_found(f"projects/{self.project}/zones/{zone}/instances/{name}"))
        if instance["status"] in ("STOPPING", "SUSPENDING", "PROVISIONING"):
            resource = f"projects/{self.project}/zones/{zone}/instances/{name}"
            return _error(SyncError(400, "resourceNotReady", f"The resource '{resource}' is not ready"))
        refusals = self._zone(zone).starts
        if refusals and instance["status"] in ("TERMINATED", "STOPPED", "SUSPENDED"):
            op = self._new_op(zone, refusals.popleft(), name, "start", instance["id"])
        else:
            if instance["status"] in ("TERMINATED", "STOPPED", "SUSPENDED"):
                self._set_status(instance, "STAGING")
            op = self._new_op(zone, Created(), name, "start", instance["id"])
        if request_id is not None:
            self._request_ids[request_id] = op.name
        return 200, dumps(self._op_json(op))

    def _get(self, zone: str, name: str, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        waiting = self._pending.get((zone, name))
        if waiting is not None and (zone, name) in self.instances:
            if waiting[0] <= 0:
                del self._pending[(zone, name)]
                if waiting[1] is None:
                    del self.instances[(zone, name)]
                else:
                    self._set_status(self.instances[(zone, name)], waiting[1])
            else:
                waiting[0] -= 1
        instance = self.instances.get((zone, name))
        if instance is None:
            return _error(not_found(f"projects/{self.project}/zones/{zone}/instances/{name}"))
        self._come_up(zone, name)
        return 200, dumps(self.instances.get((zone, name), instance))

    def _come_up(self, zone: str, name: str) -> None:
        """A VM comes up whether or not anyone waits on its insert operation (a walk that died
        right after the insert leaves an operation nobody ever polls): reading the VM (or a
        list that shows it) finishes such an insert, as the time that passed would have."""
        instance = self.instances.get((zone, name))
        if instance is None or instance["status"] != "PROVISIONING":
            return
        for op in list(self._ops.values()):
            unpolled = op.status != "DONE" and op.start_time is None
            mine = (op.kind, op.zone, op.instance) == ("insert", zone, name)
            if mine and unpolled and isinstance(op.outcome, Created):
                self._finish(op)

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
                "selfLink": f"{API}/projects/{self.project}/zones/{zone}/instances/{name}/serialPort",
            }
        )

    def _list(self, zone: str, query: dict[str, str], body: Any) -> tuple[int, bytes]:
        for z, name in list(self.instances):
            if z == zone:
                self._come_up(z, name)
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
        for z, name in list(self.instances):
            self._come_up(z, name)
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

    def _stamp(self) -> str:
        """RFC 3339 with milliseconds and an offset, as Compute writes ``insertTime``."""
        return self.clock().isoformat(timespec="milliseconds")

    def _new_op(
        self, zone: str, outcome: Created | OpError, instance: str, kind: str, target_id: str | None
    ) -> _Operation:
        self._op_counter += 1
        name = f"operation-{self._op_counter}"
        op_id = str(4_000_000_000_000_000_000 + self._op_counter)  # a uint64, sent as a string
        op = _Operation(name, op_id, zone, outcome.polls, outcome, instance, kind, self._stamp(), target_id)
        self._ops[op.name] = op
        return op

    def _advance(self, zone: str, name: str) -> tuple[int, bytes]:
        op = self._ops.get(name)
        if op is None or op.zone != zone:
            return _error(not_found(f"projects/{self.project}/zones/{zone}/operations/{name}"))
        if op.status != "DONE":
            op.start_time = op.start_time or self._stamp()
            op.polls_left = max(0, op.polls_left - 1)
            if op.polls_left == 0:
                self._finish(op)
            else:
                op.status = "RUNNING"
        return 200, dumps(self._op_json(op))

    def _finish(self, op: _Operation) -> None:
        op.status = "DONE"
        op.end_time = self._stamp()
        key = (op.zone, op.instance)
        if op.kind == "delete" and isinstance(op.outcome, Created):
            self.instances.pop(key, None)
        elif isinstance(op.outcome, Created) and key in self.instances:
            if op.outcome.pending_gets:
                self._set_status(self.instances[key], "PENDING")
                self._pending[key] = [op.outcome.pending_gets, op.outcome.then]
            else:
                self._set_status(self.instances[key], op.outcome.status)

    def _op_json(self, op: _Operation) -> dict[str, Any]:
        """A ``compute#operation`` with the members Compute sends, in the API's order."""
        zone_url = f"{API}/projects/{self.project}/zones/{op.zone}"
        body: dict[str, Any] = {
            "kind": "compute#operation",
            "id": op.id,
            "name": op.name,
            "zone": zone_url,
            "operationType": op.kind,
            "targetLink": f"{zone_url}/instances/{op.instance}",
        }
        if op.target_id is not None:
            body["targetId"] = op.target_id
        body["status"] = op.status
        body["progress"] = 100 if op.status == "DONE" else 0
        body["insertTime"] = op.insert_time
        if op.start_time is not None:
            body["startTime"] = op.start_time
        if op.end_time is not None:
            body["endTime"] = op.end_time
        if op.status == "DONE" and isinstance(op.outcome, OpError):
            body.update(op.outcome.fields())
        body["selfLink"] = f"{zone_url}/operations/{op.name}"
        return body

    def _materialize(self, zone: str, body: dict[str, Any], status: str) -> dict[str, Any]:
        """The instance resource Compute keeps for an insert ``body`` (which stays as recorded)."""
        self._counter += 1
        zone_url = f"{API}/projects/{self.project}/zones/{zone}"
        region = zone.rsplit("-", 1)[0]
        instance: dict[str, Any] = {"kind": "compute#instance", "id": str(1000 + self._counter)}
        instance.update(copy.deepcopy(body))
        machine = body.get("machineType", "")
        instance["machineType"] = f"{zone_url}/machineTypes/{machine.rsplit('/', 1)[-1]}"
        instance["zone"] = zone_url
        instance["selfLink"] = f"{zone_url}/instances/{body['name']}"
        nics = instance.get("networkInterfaces") or []
        for index, nic in enumerate(nics):
            network = nic.get("network") or "global/networks/default"
            nic["kind"] = "compute#networkInterface"
            nic["network"] = network if network.startswith("https://") else f"{API}/projects/{self.project}/{network}"
            nic.setdefault("subnetwork", f"{API}/projects/{self.project}/regions/{region}/subnetworks/default")
            nic.setdefault("networkIP", self._next_network_ip())
            nic["name"] = f"nic{index}"
            for config in nic.get("accessConfigs") or []:
                config["kind"] = "compute#accessConfig"
                config.setdefault("networkTier", "PREMIUM")
                if "natIP" in config:  # a static address stays as asked
                    self._ephemeral.discard(id(config))
                else:
                    self._ephemeral.add(id(config))
        if "metadata" in instance:
            instance["metadata"] = {
                "kind": "compute#metadata",
                "fingerprint": _fingerprint(instance["metadata"]),
                **instance["metadata"],
            }
        if "labels" in instance:
            instance["labelFingerprint"] = _fingerprint(instance["labels"])
        self._set_status(instance, status)
        return instance

    def _next_network_ip(self) -> str:
        if self.network_ip is not None:
            return self.network_ip
        self._nics += 1
        return f"10.128.{(self._nics + 1) // 256}.{(self._nics + 1) % 256}"

    def _set_status(self, instance: dict[str, Any], status: str) -> None:
        """Set ``status``; an ephemeral external IP is attached while the VM is up."""
        instance["status"] = status
        for nic in instance.get("networkInterfaces") or []:
            for config in nic.get("accessConfigs") or []:
                if id(config) not in self._ephemeral:
                    continue
                config.pop("natIP", None)
                if status in _UP:
                    config["natIP"] = self.nat_ip

    def _filtered(self, filter_text: str, zone: str) -> list[dict[str, Any]]:
        out = []
        for (z, _), instance in sorted(self.instances.items()):
            if z == zone and (not filter_text or _matches(filter_text, instance.get("labels", {}))):
                out.append(instance)
        return out


def _fingerprint(value: object) -> str:
    return base64.b64encode(hashlib.sha256(dumps(value)).digest()[:8]).decode()


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
def running(project: str = "test-project", **options: Any) -> Iterator[FakeCompute]:
    server = FakeCompute(project, **options).start()
    try:
        yield server
    finally:
        server.stop()
