"""A local RunPod REST v2 server that answers as ``runpod-openapi-v2.json`` says.

Threaded (one thread per connection, HTTP/1.1 keep-alive, a deep listen backlog), so it
holds hundreds of concurrent connections.  What it does, per the document:

- ``POST /v2/pods`` validates the body against ``CreatePodRequest`` (422 with ``errors``),
  applies the handler rules (exactly one of gpu/cpu, vcpuCount valid for the flavor,
  container disk within the flavor's limit: 400), checks access (403), balance (402) and
  stock (400 "There are no longer any instances available ..."), then answers 201 with a
  full ``Pod`` whose status is PROVISIONING.
- ``GET /v2/pods/{id}`` moves the pod one step per GET: PROVISIONING -> STARTING -> RUNNING
  (or ERROR for flavors told to fail); ``GET /v2/pods`` lists; ``DELETE`` answers 204.
- Missing or wrong bearer token: 401.  Errors are ``application/problem+json``.
- Faults can be queued per route: any status (429 with ``Retry-After``, 5xx, ...), slow
  answers, or "do the work, then answer slowly" (a create whose answer is lost).
- ``latency_s`` delays every answer (the benchmark uses 100 ms).

Run standalone for the benchmark: ``python fake_server.py --latency 0.1`` prints
``LISTENING <url>`` and serves until stdin closes.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

DOCUMENT = Path(__file__).with_name("runpod-openapi-v2.json")
NO_CAPACITY = (
    "There are no longer any instances available with the requested specifications. Please refresh and try again."
)

# Flavor facts (RunPod catalog / docs): RAM per vCPU (c 2, g 4, m 8), container disk per vCPU
# (gen 3: 10 GB, cpu5c: 15 GB), vCPU 2-32.  Kept here, independent of eps's own tables.
FLAVORS: dict[str, tuple[int, int]] = {
    "cpu3c": (2, 10),
    "cpu3g": (4, 10),
    "cpu3m": (8, 10),
    "cpu5c": (2, 15),
    "cpu5g": (4, 10),
    "cpu5m": (8, 10),
}
VCPUS = (2, 4, 8, 16, 32)


def schema_validator(name: str, document: Path = DOCUMENT) -> Draft202012Validator:
    """A JSON Schema 2020-12 validator for ``#/components/schemas/<name>`` of the document."""
    doc = json.loads(document.read_text(encoding="utf-8"))
    registry = Registry().with_resource("urn:runpod-v2", Resource(contents=doc, specification=DRAFT202012))
    return Draft202012Validator({"$ref": f"urn:runpod-v2#/components/schemas/{name}"}, registry=registry)


@dataclass(frozen=True)
class Fault:
    """One scripted answer: wait ``delay_s``, then answer ``status`` (None: answer normally).
    ``process`` True does the work first (a pod is created), then waits and answers: the
    client sees a slow or failed create that in fact succeeded."""

    status: int | None = None
    detail: str | None = None
    retry_after: int | None = None
    delay_s: float = 0.0
    process: bool = False


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class _Pod:
    doc: dict[str, Any]
    steps: int = 0
    fail: bool = False
    stuck: bool = False


@dataclass
class FakeRunpod:
    """The server's state and knobs; all access goes through ``lock``."""

    api_key: str = "test-key-0123456789"
    latency_s: float = 0.0
    gets_to_running: int = 2  # GETs after create until RUNNING (PROVISIONING -> STARTING -> RUNNING)
    stock: dict[str, int] = field(default_factory=dict)  # flavor, instance id or GPU id -> pods left
    forbidden: set[str] = field(default_factory=set)  # flavor / GPU ids -> 403
    rule_violation: dict[str, str] = field(default_factory=dict)  # flavor / GPU id -> 400 detail
    fail_start: set[str] = field(default_factory=set)  # flavor / GPU ids whose pods go to ERROR
    stuck: set[str] = field(default_factory=set)  # flavor / GPU ids whose pods stay PROVISIONING
    insufficient_balance: bool = False
    echo_key_in_401: bool = False  # a hostile server that quotes the token back
    pods: dict[str, _Pod] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    faults: dict[tuple[str, str], deque[Fault]] = field(default_factory=dict)
    in_flight: int = 0
    peak_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    validator: Draft202012Validator = field(default_factory=lambda: schema_validator("CreatePodRequest"))
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    # -- lifecycle --

    def start(self) -> FakeRunpod:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeRunpod:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- scripting and inspection --

    def queue(self, method: str, route: str, *faults: Fault) -> None:
        """Answer the next requests to ``route`` (``/v2/pods`` or ``/v2/pods/{id}``) with ``faults``."""
        with self.lock:
            self.faults.setdefault((method, route), deque()).extend(faults)

    def created_bodies(self) -> list[Any]:
        with self.lock:
            return [r.body for r in self.requests if r.method == "POST" and r.path == "/v2/pods"]

    def count(self, method: str, route: str) -> int:
        with self.lock:
            return sum(1 for r in self.requests if r.method == method and _route(r.path) == route)

    def live_pods(self) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(p.doc) for p in self.pods.values()]

    # -- the API --

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], Any]:
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                return _problem(400, "Bad Request", "request body is not JSON")
        route = _route(path)
        with self.lock:
            self.requests.append(Recorded(method, path, headers, body))
            queued = self.faults.get((method, route))
            fault = queued.popleft() if queued else None
        if fault is not None and not fault.process:  # slow or failing before any work
            time.sleep(fault.delay_s)
            if fault.status is not None:
                return self._fault(fault)
        auth = headers.get("authorization", "")
        if auth != f"Bearer {self.api_key}":
            detail = "missing bearer token" if not auth else "invalid bearer token"
            if self.echo_key_in_401 and auth:
                detail = f"invalid bearer token {auth.removeprefix('Bearer ')}"
            return _problem(401, "Unauthorized", detail)
        answer = self._route(method, route, path, body)
        if fault is not None and fault.process:  # the work is done; the answer is slow or replaced
            time.sleep(fault.delay_s)
            if fault.status is not None:
                return self._fault(fault)
        return answer

    def _fault(self, fault: Fault) -> tuple[int, dict[str, str], Any]:
        titles = {
            429: "Too Many Requests",
            500: "Internal Server Error",
            502: "Bad Gateway",
            503: "Service Unavailable",
        }
        status, header, body = _problem(
            fault.status or 500, titles.get(fault.status or 500, "Error"), fault.detail or "scripted failure"
        )
        if fault.retry_after is not None:
            header["Retry-After"] = str(fault.retry_after)
        return status, header, body

    def _route(self, method: str, route: str, path: str, body: Any) -> tuple[int, dict[str, str], Any]:
        if route == "/v2/pods":
            if method == "POST":
                return self._create(body)
            if method == "GET":
                with self.lock:
                    return 200, {}, {"pods": [dict(p.doc) for p in self.pods.values()]}
            return _problem(405, "Method Not Allowed", "The requested method is not allowed for this path.")
        if route == "/v2/pods/{id}":
            pod_id = path.rsplit("/", 1)[1]
            if method == "GET":
                return self._get(pod_id)
            if method == "DELETE":
                with self.lock:
                    gone = self.pods.pop(pod_id, None)
                return (204, {}, None) if gone else _problem(404, "Not Found", "pod not found")
            return _problem(405, "Method Not Allowed", "The requested method is not allowed for this path.")
        return _problem(404, "Not Found", "resource not found")

    def _create(self, body: Any) -> tuple[int, dict[str, str], Any]:
        errors = sorted(self.validator.iter_errors(body), key=lambda e: list(e.absolute_path))
        if errors:
            lines = ["$" + "".join(f".{p}" for p in e.absolute_path) + ": " + e.message for e in errors]
            return _problem(422, "Unprocessable Entity", "Request validation failed.", lines)
        if ("gpu" in body) == ("cpu" in body):
            return _problem(400, "Bad Request", "exactly one of gpu or cpu must be set")
        if "cpu" in body:
            flavor, vcpus = body["cpu"]["id"], body["cpu"]["vcpuCount"]
            if flavor not in FLAVORS:
                return _problem(400, "Bad Request", f"unknown cpu flavor {flavor}")
            ram, disk_per_vcpu = FLAVORS[flavor]
            if vcpus not in VCPUS:
                return _problem(400, "Bad Request", f"vcpuCount {vcpus} is not valid for {flavor}")
            if body.get("disk", 10) > vcpus * disk_per_vcpu:
                return _problem(
                    400, "Bad Request", f"container disk exceeds the {vcpus * disk_per_vcpu} GB limit for {flavor}"
                )
            if (body.get("mounts") or {}).get("persistent"):
                return _problem(400, "Bad Request", "mounts.persistent is invalid for CPU pods")
            keys = (flavor, f"{flavor}-{vcpus}-{vcpus * ram}")
            machine = {"cpu": {"id": flavor, "vcpuCount": vcpus, "memory": vcpus * ram}}
        else:
            keys = (body["gpu"]["id"],)
            machine = {"gpu": {"id": body["gpu"]["id"], "count": body["gpu"].get("count", 1)}}
        with self.lock:
            if any(k in self.forbidden for k in keys):
                return _problem(403, "Forbidden", "access denied")
            for k in keys:
                if k in self.rule_violation:
                    return _problem(400, "Bad Request", self.rule_violation[k])
            if self.insufficient_balance:
                return _problem(402, "Payment Required", "insufficient balance to deploy this pod")
            limited = [k for k in keys if k in self.stock]
            if any(self.stock[k] <= 0 for k in limited):
                return _problem(400, "Bad Request", NO_CAPACITY)
            for k in limited:
                self.stock[k] -= 1
            pod_id = secrets.token_hex(7)
            doc = _pod_doc(pod_id, body, machine)
            self.pods[pod_id] = _Pod(
                doc, fail=any(k in self.fail_start for k in keys), stuck=any(k in self.stuck for k in keys)
            )
            return 201, {}, dict(doc)

    def _get(self, pod_id: str) -> tuple[int, dict[str, str], Any]:
        with self.lock:
            pod = self.pods.get(pod_id)
            if pod is None:
                return _problem(404, "Not Found", "pod not found")
            if not pod.stuck and pod.doc["status"] in ("PROVISIONING", "STARTING"):
                pod.steps += 1
                if pod.steps >= self.gets_to_running:
                    _set_status(pod.doc, "ERROR" if pod.fail else "RUNNING")
                else:
                    _set_status(pod.doc, "STARTING")
            return 200, {}, dict(pod.doc)


_ACTIONS = {
    "PROVISIONING": ["stop", "terminate"],
    "STARTING": ["stop", "terminate"],
    "RUNNING": ["stop", "restart", "terminate"],
    "EXITED": ["start", "terminate"],  # podAction: "EXITED and ERROR allow start/terminate"
    "ERROR": ["start", "terminate"],
}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _set_status(doc: dict[str, Any], status: str) -> None:
    doc["status"] = status
    doc["actions"] = _ACTIONS[status]
    if status == "RUNNING":
        doc["startedAt"] = _now()
        doc["runtime"] = {"uptime": 0, "ports": []}


def _pod_doc(pod_id: str, body: dict[str, Any], machine: dict[str, Any]) -> dict[str, Any]:
    """A ``Pod`` with every required field, as the 201 example shows it."""
    count = machine["cpu"]["vcpuCount"] if "cpu" in machine else machine["gpu"]["count"]
    return {
        "id": pod_id,
        "name": body["name"],
        "image": body.get("image", ""),
        "args": body.get("args", ""),
        "disk": body.get("disk", 10 if "cpu" in machine else 50),
        "ports": body.get("ports", []),
        "env": body.get("env", {}),
        "registry": body.get("registry"),
        "status": "PROVISIONING",
        "actions": _ACTIONS["PROVISIONING"],
        "mounts": body.get("mounts", {}),
        **machine,
        "cloud": body.get("cloud", "SECURE"),
        "dataCenterId": (body.get("dataCenterIds") or ["EU-RO-1"])[0],
        "cudaVersion": None if "cpu" in machine else "12.8",
        "ssh": {"proxy": None, "direct": None},
        "template": None,
        "cost": round(0.04 * count, 4),
        "locked": False,
        "globalNetworking": {"enabled": False},
        "runtime": None,
        "createdAt": _now(),
        "startedAt": None,
    }


def _route(path: str) -> str:
    path = path.split("?", 1)[0].rstrip("/")
    if path.startswith("/v2/pods/") and path.count("/") == 3:
        return "/v2/pods/{id}"
    return path


def _problem(status: int, title: str, detail: str, errors: list[str] | None = None) -> tuple[int, dict[str, str], Any]:
    body: dict[str, Any] = {"title": title, "status": status, "detail": detail}
    if errors:
        body["errors"] = errors
    return status, {"Content-Type": "application/problem+json"}, body


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # the listen backlog: hundreds of clients connect at once
    fake: FakeRunpod


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body leave at once, no delayed-ACK stall
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the request log would print the path of every poll

    def _serve(self) -> None:
        fake = self.server.fake
        with fake.lock:
            fake.in_flight += 1
            fake.peak_in_flight = max(fake.peak_in_flight, fake.in_flight)
        try:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if fake.latency_s:
                time.sleep(fake.latency_s)
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, extra, body = fake.handle(self.command, self.path, headers, raw)
        finally:
            with fake.lock:
                fake.in_flight -= 1
        payload = b"" if body is None else json.dumps(body).encode()
        try:
            self.send_response(status)
            if body is not None:
                self.send_header("Content-Type", extra.pop("Content-Type", "application/json"))
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (timeout); the work stands

    do_GET = do_POST = do_DELETE = do_PATCH = _serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every answer")
    parser.add_argument("--api-key", default=FakeRunpod.api_key)
    parser.add_argument("--gets-to-running", type=int, default=2)
    args = parser.parse_args(argv)
    fake = FakeRunpod(api_key=args.api_key, latency_s=args.latency, gets_to_running=args.gets_to_running)
    with fake:
        print(f"LISTENING {fake.url}", flush=True)
        sys.stdin.read()  # serve until the parent closes our stdin
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
