"""A local RunPod REST v2 server that answers as ``runpod-openapi-v2.json`` says, as strictly.

Threaded (one thread per connection, HTTP/1.1 keep-alive, a deep listen backlog), so it
holds hundreds of concurrent connections.  What it serves, per the document:

- ``POST /v2/pods`` validates the body against ``CreatePodRequest`` (422 with ``errors``),
  applies the handler rules (exactly one of gpu/cpu; a CPU flavor's vCPU range from the
  catalog and a power of two; a GPU type's ``maxCount`` for the cloud; container disk
  within the flavor's limit; no persistent mount on CPU pods, not both mount kinds; known
  data centers; global networking only with a GPU: 400; an unknown ``templateId``: 404),
  checks access (403), balance (402) and stock (400 "There are no longer any instances
  available ..."), then answers 201 with a full ``Pod`` whose status is PROVISIONING.
- ``GET /v2/pods/{id}`` moves the pod one step per GET: PROVISIONING -> STARTING -> RUNNING
  (or ERROR for flavors told to fail); ``GET /v2/pods`` lists; ``PATCH`` updates
  (``UpdatePodRequest``); ``DELETE`` answers 204.
- ``GET /v2/catalog/cpus[/{id}]`` and ``/v2/catalog/gpus[/{id}]`` serve the catalog the
  create rules use (``runpod_catalog.py``), with ``include=AVAILABILITY`` from the stock.
- ``GET``/``PUT /v2/account/ssh-keys``: the account's keys; a pod created with
  ``startSsh`` gets them as ``PUBLIC_KEY`` in its ``env`` (one key a line) unless the body
  set one.
- With :attr:`FakeRunpod.authorized_keys` set (the sshd that plays every pod), a pod that
  comes up RUNNING does with its ``PUBLIC_KEY`` what RunPod's images' start script does
  (``echo "$PUBLIC_KEY" >> ~/.ssh/authorized_keys``): every line of it lets that key in.
  The pod takes back what it added when it is terminated or deleted (its disk goes with
  it), unless a live pod holds the same key; :meth:`FakeRunpod.stop` takes back the rest.
- Query parameters are read and checked as the document declares them (422).
- Missing or wrong bearer token: 401.  Every error is ``application/problem+json`` (also
  malformed requests), a 405 names the path's methods in ``Allow``, a 429 always carries
  ``Retry-After``; ``OPTIONS`` answers 204 with ``Allow``.
- Faults can be queued per route: any status (429 with ``Retry-After``, 5xx, ...), slow
  answers, or "do the work, then answer slowly" (a create whose answer is lost).
- ``latency_s`` delays every answer (the benchmark uses 100 ms).
- Every answer on the wire is kept in :attr:`FakeRunpod.answers`; the RunPod tests check
  each one against the document (``runpod_openapi.answer_violations``).

SSH, as the document shapes it (the ``Pod`` schema has ``ssh`` and ``runtime.ports``,
no ``publicIp``/``portMappings``): when the create body's ``ports`` has ``22/tcp``, a
RUNNING pod has ``ssh.direct = {host: public_ip, port, username: root, command}`` and
``runtime.ports`` holds ``{private: 22, public: port, type: tcp, ip: public_ip}``;
``ssh.proxy`` is set once the pod has a machine (STARTING).  ``public_ip`` and
``ssh_port`` are knobs (None: 40000, 40001, ... per pod).

Run standalone for the benchmark: ``python fake_server.py --latency 0.1`` prints
``LISTENING <url>`` and serves until stdin closes.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.util
import json
import secrets
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import unquote, urlsplit

from jsonschema import Draft202012Validator


def _sibling(name: str) -> ModuleType:
    """``<name>.py`` beside this file, under one module name however this file was loaded
    (``runpod_fake_server``, by path from other suites, or as ``__main__``)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


openapi = _sibling("runpod_openapi")
catalog = _sibling("runpod_catalog")

DOCUMENT = openapi.DOCUMENT
NO_CAPACITY = (
    "There are no longer any instances available with the requested specifications. Please refresh and try again."
)
#: The routes this server implements; other paths of the document answer 501.
SERVED: dict[str, dict[str, str]] = {
    "/v2/pods": {"GET": "_list", "POST": "_create"},
    "/v2/pods/{id}": {"GET": "_get", "PATCH": "_update", "DELETE": "_delete"},
    "/v2/pods/{id}/action": {"POST": "_action"},
    "/v2/catalog/cpus": {"GET": "_cpus"},
    "/v2/catalog/cpus/{id}": {"GET": "_cpu"},
    "/v2/catalog/gpus": {"GET": "_gpus"},
    "/v2/catalog/gpus/{id}": {"GET": "_gpu"},
    "/v2/account/ssh-keys": {"GET": "_keys", "PUT": "_set_keys"},
}


def schema_validator(name: str) -> Draft202012Validator:
    """A JSON Schema 2020-12 validator for ``#/components/schemas/<name>`` of the document."""
    return openapi.schema_validator(name)


@dataclass(frozen=True)
class Fault:
    """One scripted answer: wait ``delay_s``, then answer ``status`` (None: answer normally).
    ``process`` True does the work first (a pod is created), then waits and answers: the
    client sees a slow or failed create that in fact succeeded.  A 429 without
    ``retry_after`` carries the server's :attr:`FakeRunpod.retry_after_s`."""

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


@dataclass(frozen=True)
class Answer:
    """One answer as it went on the wire."""

    method: str
    path: str
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class _Pod:
    doc: dict[str, Any]
    steps: int = 0
    fail: bool = False
    stuck: bool = False
    network: tuple[str, dict[int, tuple[str, int | None]]] | None = None  # ip, private -> (type, public)


Reply = tuple[int, dict[str, str], Any]

#: every server started in this process, in order (the RunPod tests check their answers)
STARTED: list[FakeRunpod] = []


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
    no_restart: set[str] = field(default_factory=set)  # pod ids whose host has no capacity to start them again
    stuck: set[str] = field(default_factory=set)  # flavor / GPU ids whose pods stay PROVISIONING
    insufficient_balance: bool = False
    echo_key_in_401: bool = False  # a hostile server that quotes the token back
    cpus: list[dict[str, Any]] = field(default_factory=catalog.default_cpus)  # CpuType documents
    gpus: list[dict[str, Any]] = field(default_factory=catalog.default_gpus)  # GpuType documents
    data_centers: tuple[str, ...] = tuple(i for i, _, _ in catalog.DATA_CENTERS)
    public_ip: str = "127.0.0.1"  # the pods' public address (ssh.direct.host, runtime.ports[].ip)
    ssh_port: int | None = None  # the public port of 22/tcp (None: 40000 + n per pod)
    ssh_keys: list[str] = field(default_factory=list)  # the account's registered public keys
    #: the pods' sshd's authorized_keys (None: the pods' keys let nobody in anywhere)
    authorized_keys: Path | None = None
    #: data centres whose pods never get a public port for 22/tcp (``ssh.direct`` stays null)
    no_port_in: set[str] = field(default_factory=set)
    peak_live: int = 0  # the most pods that existed at once
    retry_after_s: int = 1  # Retry-After of a 429 fault that names none
    pods: dict[str, _Pod] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    faults: dict[tuple[str, str], deque[Fault]] = field(default_factory=dict)
    in_flight: int = 0
    peak_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    _ports: int = 0
    _let_in: dict[str, list[str]] = field(default_factory=dict)  # pod id -> the lines it added
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    # -- lifecycle --

    def start(self) -> FakeRunpod:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        STARTED.append(self)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self.lock:
            for pod_id in list(self._let_in):
                self._keys_gone(pod_id, every=True)

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
            return [r.body for r in self.requests if r.method == "POST" and _route(r.path) == "/v2/pods"]

    def count(self, method: str, route: str) -> int:
        with self.lock:
            return sum(1 for r in self.requests if r.method == method and _route(r.path) == route)

    def live_pods(self) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(p.doc) for p in self.pods.values()]

    def add_pod(self, body: dict[str, Any], *, pod_id: str | None = None, status: str = "RUNNING") -> str:
        """Put a pod in place as if it had been created from ``body`` (a valid create body)
        and had reached ``status``; returns its id."""
        rule = self._create_rule(body)
        if isinstance(rule, str):
            raise ValueError(rule)
        _, machine, cost = rule
        with self.lock:
            pod_id = pod_id or secrets.token_hex(7)
            pod = _Pod(_pod_doc(pod_id, body, machine, cost, self._env(body)), network=self._network(body))
            if status != "PROVISIONING":
                _set_status(pod.doc, status, pod.network)
            self.pods[pod_id] = pod
            if status == "RUNNING":
                self._keys_in(pod_id)
            return pod_id

    def env_of(self, pod_id: str) -> dict[str, str]:
        """The pod's ``env`` as RunPod keeps it (what the body sent, plus an injected ``PUBLIC_KEY``)."""
        with self.lock:
            return dict(self.pods[pod_id].doc["env"])

    def ssh_address(self, pod_id: str) -> tuple[str, int] | None:
        """Where ``ssh.direct`` points now: (host, port), or None."""
        with self.lock:
            direct = self.pods[pod_id].doc["ssh"]["direct"]
            return (direct["host"], direct["port"]) if direct else None

    # -- the API --

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        route = _route(path)
        with self.lock:
            self.requests.append(Recorded(method, path, headers, _json_or_none(raw)))
            queued = self.faults.get((method, route))
            fault = queued.popleft() if queued else None
        if fault is not None and not fault.process:  # slow or failing before any work
            time.sleep(fault.delay_s)
            if fault.status is not None:
                return self._fault(fault)
        template = openapi.path_template(path.split("?", 1)[0].rstrip("/") or "/")
        if method == "OPTIONS" and template is not None:
            return 204, {"Allow": ", ".join(openapi.allowed(template))}, None
        auth = headers.get("authorization", "")
        if auth != f"Bearer {self.api_key}":
            detail = "missing bearer token" if not auth else "invalid bearer token"
            if self.echo_key_in_401 and auth:
                detail = f"invalid bearer token {auth.removeprefix('Bearer ')}"
            return _problem(401, detail)
        answer = self._dispatch(method, template, path, raw)
        if fault is not None and fault.process:  # the work is done; the answer is slow or replaced
            time.sleep(fault.delay_s)
            if fault.status is not None:
                return self._fault(fault)
        return answer

    def _fault(self, fault: Fault) -> Reply:
        status = fault.status or 500
        _, header, body = _problem(status, fault.detail or "scripted failure")
        if status == 429 or fault.retry_after is not None:
            header["Retry-After"] = str(fault.retry_after if fault.retry_after is not None else self.retry_after_s)
        return status, header, body

    def _dispatch(self, method: str, template: str | None, path: str, raw: bytes) -> Reply:
        if template is None:
            return _problem(404, "resource not found")
        if method not in openapi.allowed(template):
            _, header, body = _problem(405, "The requested method is not allowed for this path.")
            header["Allow"] = ", ".join(openapi.allowed(template))
            return 405, header, body
        handler = SERVED.get(template, {}).get(method)
        if handler is None:
            return _problem(501, f"the test server does not implement {method} {template}")
        values, errors = openapi.query_values(method, template, urlsplit(path).query)
        if errors:
            return _problem(422, "Request validation failed.", errors)
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                return _problem(400, "request body is not JSON")
        item = None
        if "{id}" in template:  # the path's segment where the template has {id}
            where = template.split("/").index("{id}")
            item = unquote(urlsplit(path).path.rstrip("/").split("/")[where])
        return getattr(self, handler)(body=body, values=values, item=item)

    # -- pods --

    def _list(self, body: Any, values: dict[str, Any], item: None) -> Reply:
        with self.lock:
            return 200, {}, {"pods": [dict(p.doc) for p in self.pods.values()]}

    def _create(self, body: Any, values: dict[str, Any], item: None) -> Reply:
        lines = openapi.request_errors("CreatePodRequest", body)
        if lines:
            return _problem(422, "Request validation failed.", lines)
        if "templateId" in body:
            return _problem(404, f"template {body['templateId']} not found")
        refusal = self._create_rule(body)
        if isinstance(refusal, str):
            return _problem(400, refusal)
        keys, machine, cost = refusal
        with self.lock:
            if any(k in self.forbidden for k in keys):
                return _problem(403, "access denied")
            for k in keys:
                if k in self.rule_violation:
                    return _problem(400, self.rule_violation[k])
            if self.insufficient_balance:
                return _problem(402, "insufficient balance to deploy this pod")
            where = self._place(body, keys)
            if where is None:
                return _problem(400, NO_CAPACITY)
            limited = [k for k in (*keys, f"{keys[0]}@{where}", f"{keys[0]}@{body.get('cloud', 'SECURE')}")
                       if k in self.stock]  # fmt: skip
            if any(self.stock[k] <= 0 for k in limited):
                return _problem(400, NO_CAPACITY)
            for k in limited:
                self.stock[k] -= 1
            pod_id = secrets.token_hex(7)
            doc = _pod_doc(pod_id, body, machine, cost, self._env(body))
            doc["dataCenterId"] = where
            self.pods[pod_id] = _Pod(
                doc,
                fail=any(k in self.fail_start for k in keys),
                stuck=any(k in self.stuck for k in keys),
                network=self._network(body, where),
            )
            self.peak_live = max(self.peak_live, len(self.pods))
            return 201, {}, dict(doc)

    def _place(self, body: dict[str, Any], keys: tuple[str, ...]) -> str | None:
        """The data centre RunPod's scheduler puts the pod in: the first of ``dataCenterIds``
        (else of all it has) with stock of the type there (``stock["<type>@<dc>"]``)."""
        for dc in body.get("dataCenterIds") or (["EU-RO-1"] if "EU-RO-1" in self.data_centers else self.data_centers):
            if self.stock.get(f"{keys[0]}@{dc}", 1) > 0:
                return dc
        return None

    def _create_rule(self, body: dict[str, Any]) -> str | tuple[tuple[str, ...], dict[str, Any], float]:
        """The handler rules: a 400 detail, or (stock keys, machine block, cost per hour)."""
        if ("gpu" in body) == ("cpu" in body):
            return "exactly one of gpu or cpu must be set"
        mounts = body.get("mounts") or {}
        if mounts.get("persistent") and mounts.get("network"):
            return "mounts.persistent and mounts.network are mutually exclusive"
        unknown = [d for d in body.get("dataCenterIds") or [] if d not in self.data_centers]
        if unknown:
            return f"unknown data center {unknown[0]}"
        if "cpu" in body:
            flavor, vcpus = body["cpu"]["id"], body["cpu"]["vcpuCount"]
            why = catalog.cpu_refusal(self.cpus, flavor, vcpus)
            if why is not None:
                return why
            limit = vcpus * catalog.DISK_GB_PER_VCPU.get(flavor, 10)
            if body.get("disk", 10) > limit:
                return f"container disk exceeds the {limit} GB limit for {flavor}"
            if mounts.get("persistent"):
                return "mounts.persistent is invalid for CPU pods"
            if body.get("globalNetworking"):
                return "global networking requires an NVIDIA GPU"
            cpu = catalog.find(self.cpus, flavor)
            memory = round(vcpus * cpu["ramGbPerVcpu"])
            machine = {"cpu": {"id": flavor, "vcpuCount": vcpus, "memory": memory}}
            return (flavor, f"{flavor}-{vcpus}-{memory}"), machine, vcpus * cpu["price"]["securePerVcpu"]
        gpu_id, count = body["gpu"]["id"], body["gpu"].get("count", 1)
        if body["gpu"].get("allowedCudaVersions") and "minCudaVersion" in body["gpu"]:
            return "allowedCudaVersions and minCudaVersion are mutually exclusive"
        cloud = body.get("cloud", "SECURE")
        why = catalog.gpu_refusal(self.gpus, gpu_id, count, cloud)
        if why is not None:
            return why
        price = catalog.find(self.gpus, gpu_id)["price"][cloud.lower()]
        return (gpu_id,), {"gpu": {"id": gpu_id, "count": count}}, count * price

    def _env(self, body: dict[str, Any]) -> dict[str, str]:
        env = dict(body.get("env") or {})
        if body.get("startSsh") and self.ssh_keys and "PUBLIC_KEY" not in env:
            env["PUBLIC_KEY"] = "\n".join(self.ssh_keys)  # what startSsh injects (CreatePodRequest)
        return env

    def _network(
        self, body: dict[str, Any], where: str | None = None
    ) -> tuple[str, dict[int, tuple[str, int | None]]] | None:
        """The public side of the pod's ``ports`` once it runs: TCP ports get a public port."""
        mapping: dict[int, tuple[str, int | None]] = {}
        for entry in body.get("ports") or []:
            number, _, kind = entry.partition("/")
            if not number.isdigit():
                continue
            public = None
            if kind == "tcp" and int(number) == 22 and where in self.no_port_in:
                public = None  # this host never maps the port: no ssh.direct
            elif kind == "tcp":
                if int(number) == 22 and self.ssh_port is not None:
                    public = self.ssh_port
                else:
                    public = 40000 + self._ports
                    self._ports += 1
            mapping[int(number)] = (kind or "http", public)
        return (self.public_ip, mapping) if mapping else None

    def _get(self, body: Any, values: dict[str, Any], item: str) -> Reply:
        with self.lock:
            pod = self.pods.get(item)
            if pod is None:
                return _problem(404, "pod not found")
            if not pod.stuck and pod.doc["status"] in ("PROVISIONING", "STARTING"):
                pod.steps += 1
                if pod.steps >= self.gets_to_running:
                    _set_status(pod.doc, "ERROR" if pod.fail else "RUNNING", pod.network)
                    if not pod.fail:
                        self._keys_in(item)
                else:
                    _set_status(pod.doc, "STARTING", pod.network)
            return 200, {}, dict(pod.doc)

    def _action(self, body: Any, values: dict[str, Any], item: str) -> Reply:
        """``podAction``: ``start`` boots an EXITED/ERROR pod back toward RUNNING (STARTING,
        then RUNNING on later reads, its disk kept), ``stop`` releases its compute (EXITED),
        ``restart`` restarts a RUNNING pod's container, ``terminate`` deletes it (204).  An
        action the pod's ``actions`` do not list is 409."""
        lines = openapi.request_errors("PodActionRequest", body)
        if lines:
            return _problem(422, "Request validation failed.", lines)
        action = body["action"]
        with self.lock:
            pod = self.pods.get(item)
            if pod is None:
                return _problem(404, "pod not found")
            if action not in pod.doc["actions"]:
                return _problem(409, f"cannot {action} a pod that is {pod.doc['status']}")
            if action == "terminate":
                del self.pods[item]
                self._keys_gone(item)
                return 204, {}, None
            if action == "start" and item in self.no_restart:
                return _problem(400, NO_CAPACITY)
            if action == "stop":
                _set_status(pod.doc, "EXITED", pod.network)
            else:  # start, restart: the container comes up again on later reads
                pod.steps, pod.fail = 0, False
                _set_status(pod.doc, "STARTING", pod.network)
            return 200, {}, dict(pod.doc)

    def _update(self, body: Any, values: dict[str, Any], item: str) -> Reply:
        lines = openapi.request_errors("UpdatePodRequest", body)
        if lines:
            return _problem(422, "Request validation failed.", lines)
        with self.lock:
            pod = self.pods.get(item)
            if pod is None:
                return _problem(404, "pod not found")
            if "templateId" in body:
                return _problem(404, f"template {body['templateId']} not found")
            mounts = body.get("mounts") or {}
            if mounts.get("persistent") and "cpu" in pod.doc:
                return _problem(400, "mounts.persistent is invalid for CPU pods")
            if mounts.get("persistent") and mounts.get("network"):
                return _problem(400, "mounts.persistent and mounts.network are mutually exclusive")
            for name in ("name", "image", "args", "disk", "ports", "env", "registry", "locked"):
                if name in body:
                    pod.doc[name] = body[name]
            if mounts:
                pod.doc["mounts"] = {**pod.doc["mounts"], **mounts}
            return 200, {}, dict(pod.doc)

    def _delete(self, body: Any, values: dict[str, Any], item: str) -> Reply:
        with self.lock:
            gone = self.pods.pop(item, None)
            self._keys_gone(item)
        return (204, {}, None) if gone else _problem(404, "pod not found")

    # -- the image's start script: PUBLIC_KEY into authorized_keys (under ``lock``) --

    def _keys_in(self, pod_id: str) -> None:
        """``echo "$PUBLIC_KEY" >> ~/.ssh/authorized_keys``: each line of the pod's
        ``PUBLIC_KEY`` lets that key in (a line already there is left as it is)."""
        if self.authorized_keys is None:
            return
        added = _append_lines(self.authorized_keys, _public_keys(self.pods[pod_id].doc))
        self._let_in.setdefault(pod_id, []).extend(added)

    def _keys_gone(self, pod_id: str, *, every: bool = False) -> None:
        """The pod is gone: the lines it added go too, but those a live pod also holds stay,
        now that pod's to take back (``every``: the server stops, its pods with it)."""
        added = self._let_in.pop(pod_id, [])
        if self.authorized_keys is None or not added:
            return
        gone = []
        for line in added:
            holder = None if every else next((i for i, p in self.pods.items() if line in _public_keys(p.doc)), None)
            if holder is None:
                gone.append(line)
            else:
                self._let_in.setdefault(holder, []).append(line)
        _remove_lines(self.authorized_keys, gone)

    # -- catalog --

    def _cpus(self, body: Any, values: dict[str, Any], item: None) -> Reply:
        return self._catalog("cpus", values, None)

    def _cpu(self, body: Any, values: dict[str, Any], item: str) -> Reply:
        return self._catalog("cpus", values, item)

    def _gpus(self, body: Any, values: dict[str, Any], item: None) -> Reply:
        return self._catalog("gpus", values, None)

    def _gpu(self, body: Any, values: dict[str, Any], item: str) -> Reply:
        return self._catalog("gpus", values, item)

    def _catalog(self, kind: str, values: dict[str, Any], item: str | None) -> Reply:
        why = catalog.query_refusal(kind, values)
        if why is not None:
            return _problem(400, why)
        items = self.cpus if kind == "cpus" else self.gpus
        if item is not None:
            found = catalog.find(items, item)
            if found is None:
                return _problem(404, f"{kind[:-1]} type not found")
            items = [found]
        if "AVAILABILITY" in (values.get("include") or []):
            with self.lock:
                shown = [self._available(kind, doc, values, listing=item is None) for doc in items]
            items = [doc for doc in shown if doc is not None]
        if item is not None:
            return 200, {}, items[0]
        return 200, {}, {kind: items}

    def _available(self, kind: str, doc: dict[str, Any], values: dict[str, Any], *, listing: bool) -> Any:
        left = self.stock.get(doc["id"])
        if kind == "cpus" and "vcpuCount" in values:
            vcpus = values["vcpuCount"]
            instance = f"{doc['id']}-{vcpus}-{round(vcpus * doc['ramGbPerVcpu'])}"
            in_range = doc["vcpu"]["min"] <= vcpus <= doc["vcpu"]["max"]
            left = 0 if not in_range else self.stock.get(instance, left)
        if kind == "gpus":
            cloud = values.get("cloud", "SECURE").lower()
            if values.get("count", 1) > doc["maxCount"][cloud] or not doc[cloud]:
                left = 0
        out = catalog.with_availability(doc, left, values, gpu=kind == "gpus", listing=listing)
        if out is not None and kind == "gpus" and out.get("dataCenters"):
            tier = values.get("cloud", "SECURE")
            shown = []
            for d in out["dataCenters"]:
                counts = (self.stock.get(f"{doc['id']}@{d['id']}"), left, self.stock.get(f"{doc['id']}@{tier}"))
                here = min((x for x in counts if x is not None), default=10**6)
                if d["id"] in self.data_centers and here > 0:
                    shown.append({**d, "availability": catalog.level(here)})
            if shown:
                out["dataCenters"] = shown
            else:
                del out["dataCenters"]  # "omitted entirely when the configuration is unavailable everywhere"
        return out

    # -- account --

    def _keys(self, body: Any, values: dict[str, Any], item: None) -> Reply:
        with self.lock:
            return 200, {}, {"keys": list(self.ssh_keys)}

    def _set_keys(self, body: Any, values: dict[str, Any], item: None) -> Reply:
        lines = openapi.request_errors("UpdateSshKeysRequest", body)
        if lines:
            return _problem(422, "Request validation failed.", lines)
        with self.lock:
            self.ssh_keys = list(body["keys"])
            return 200, {}, {"keys": list(self.ssh_keys)}


_ACTIONS = {
    "PROVISIONING": ["stop", "terminate"],
    "STARTING": ["stop", "terminate"],
    "RUNNING": ["stop", "restart", "terminate"],
    "EXITED": ["start", "terminate"],  # podAction: "EXITED and ERROR allow start/terminate"
    "ERROR": ["start", "terminate"],
}


def _public_keys(doc: dict[str, Any]) -> list[str]:
    """The lines of a pod's ``PUBLIC_KEY`` (its ``env``), each stripped, the empty ones left out."""
    return [k.strip() for k in str(doc["env"].get("PUBLIC_KEY") or "").splitlines() if k.strip()]


def _append_lines(path: Path, lines: list[str]) -> list[str]:
    """Append each of ``lines`` that ``path`` does not hold yet (under an exclusive flock:
    other test sessions write the same file): the lines appended."""
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        there = set(fh.read().splitlines())
        new = list(dict.fromkeys(k for k in lines if k not in there))
        fh.write("".join(k + "\n" for k in new))
        return new


def _remove_lines(path: Path, lines: list[str]) -> None:
    """Take ``lines`` out of ``path`` again (under an exclusive flock)."""
    if not lines:
        return
    with contextlib.suppress(FileNotFoundError), open(path, "r+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        kept = [k for k in fh.read().splitlines() if k not in lines]
        fh.seek(0)
        fh.truncate()
        fh.write("".join(k + "\n" for k in kept))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _set_status(
    doc: dict[str, Any], status: str, network: tuple[str, dict[int, tuple[str, int | None]]] | None = None
) -> None:
    """Move a ``Pod`` document to ``status``, with what the document says goes with it:
    ``ssh.proxy`` once the pod has a machine, ``ssh.direct`` and ``runtime`` while RUNNING."""
    doc["status"] = status
    doc["actions"] = _ACTIONS[status]
    ssh = doc.setdefault("ssh", {"proxy": None, "direct": None})
    if status in ("STARTING", "RUNNING") and ssh.get("proxy") is None:
        user = f"{doc['id']}-{hashlib.sha256(doc['id'].encode()).hexdigest()[:8]}"
        ssh["proxy"] = {"host": "ssh.runpod.io", "port": 22, "username": user, "command": f"ssh {user}@ssh.runpod.io"}
    ssh["direct"] = None
    if status == "RUNNING":
        doc["startedAt"] = _now()
        ports: list[dict[str, Any]] = []
        if network is not None:
            ip, mapping = network
            for private, (kind, public) in sorted(mapping.items()):
                ports.append({"private": private, "public": public, "type": kind, "ip": ip if public else None})
            kind, port = mapping.get(22, ("", None))
            if kind == "tcp" and port is not None:
                ssh["direct"] = {"host": ip, "port": port, "username": "root", "command": f"ssh root@{ip} -p {port}"}
        doc["runtime"] = {"uptime": 0, "ports": ports}
    elif status in ("EXITED", "ERROR", "TERMINATED"):
        doc["runtime"] = None
        if status != "ERROR":
            doc["cost"] = 0.0  # "0.0 when EXITED or TERMINATED"


def _pod_doc(pod_id: str, body: dict[str, Any], machine: dict[str, Any], cost: float, env: dict[str, str]) -> Any:
    """A ``Pod`` with every required field, as the 201 example shows it."""
    return {
        "id": pod_id,
        "name": body["name"],
        "image": body.get("image", ""),
        "args": body.get("args", ""),
        "disk": body.get("disk", 10 if "cpu" in machine else 50),
        "ports": body.get("ports", []),
        "env": env,
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
        "cost": round(cost, 4),
        "locked": False,
        "globalNetworking": {"enabled": False},
        "runtime": None,
        "createdAt": _now(),
        "startedAt": None,
    }


def _route(path: str) -> str:
    path = urlsplit(path).path.rstrip("/") or "/"
    return openapi.path_template(path) or path


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


_TITLES = {422: "Unprocessable Entity"}  # the document's title (newer Pythons say "Unprocessable Content")


def _problem(status: int, detail: str, errors: list[str] | None = None) -> Reply:
    """An RFC 9457 problem document (``ErrorResponse``)."""
    title = _TITLES.get(status) or HTTPStatus(status).phrase
    body: dict[str, Any] = {"title": title, "status": status, "detail": detail}
    if errors:
        body["errors"] = errors
    return status, {"Content-Type": openapi.PROBLEM}, body


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
        self._reply(status, dict(extra), body)

    def _reply(self, status: int, extra: dict[str, str], body: Any) -> None:
        payload = b"" if body is None else json.dumps(body).encode()
        sent: dict[str, str] = {}
        if body is not None:
            sent["Content-Type"] = extra.pop("Content-Type", "application/json")
        sent.update(extra)
        if status != 204:
            sent["Content-Length"] = str(len(payload))
        if self.command == "HEAD":
            payload = b""
        fake = self.server.fake
        with fake.lock:
            fake.answers.append(Answer(self.command or "", getattr(self, "path", ""), status, dict(sent), payload))
        try:
            self.send_response(status)
            for name, value in sent.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (timeout); the work stands

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Malformed requests (bad request line, oversized headers, unknown methods) get a
        problem document too, never http.server's HTML page."""
        words = getattr(self, "raw_requestline", b"").decode("latin-1").split()
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            if not words or not words[-1].startswith("HTTP/"):  # a real HTTP/0.9 line: no headers
                super().send_error(code, message, explain)
                return
            self.request_version = "HTTP/1.1"  # a 1.x-looking line with a bad version: answer in 1.1
        self.close_connection = True
        status, extra, body = _problem(code, message or HTTPStatus(code).phrase)
        self._reply(status, {**extra, "Connection": "close"}, body)

    def __getattr__(self, name: str) -> Any:
        """Every method, documented or not (``do_QUERY``, ``do_FOO``), is served: the answer is
        the API's (404, 401, or 405 with ``Allow``), never http.server's 501 page."""
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every answer")
    parser.add_argument("--api-key", default=FakeRunpod.api_key)
    parser.add_argument("--gets-to-running", type=int, default=2)
    parser.add_argument("--public-ip", default="127.0.0.1", help="where the pods' ssh.direct leads")
    parser.add_argument("--ssh-port", type=int, default=None, help="the pods' public port of 22/tcp")
    args = parser.parse_args(argv)
    fake = FakeRunpod(
        api_key=args.api_key, latency_s=args.latency, gets_to_running=args.gets_to_running,
        public_ip=args.public_ip, ssh_port=args.ssh_port,
    )  # fmt: skip
    with fake:
        print(f"LISTENING {fake.url}", flush=True)
        sys.stdin.read()  # serve until the parent closes our stdin
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
