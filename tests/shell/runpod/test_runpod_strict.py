"""The RunPod test server refuses what the API refuses, the way its document says, and
takes every body eps builds today.

Each rule: a bad request over raw httpx and the exact answer (status, headers, problem
document); then eps's own requests, all accepted.  (Every answer of every test is also
checked against the document when the test ends: conftest.every_answer_is_documented.)"""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest
from returns.result import Failure, Success
from runpod_testkit import (
    KEY,
    FakeRunpod,
    Fault,
    SleepRecorder,
    catalog,
    cpu_rung,
    fast_settings,
    gpu_rung,
    openapi,
)

from eps.core.outcome import FailureKind
from eps.core.tables import RUNPOD_CPU_FLAVORS, RUNPOD_GPU_TYPES
from eps.shell.lanes.runpod.client import RunpodClient
from eps.shell.lanes.runpod.wire import ApiKey, RunpodSettings, pod_request

AUTH = {"Authorization": f"Bearer {KEY}"}
PROBLEM = "application/problem+json"
CPU = {"name": "eps-x-1", "image": "ubuntu:24.04", "cpu": {"id": "cpu3g", "vcpuCount": 4}}
GPU = {"name": "eps-g-1", "image": "runpod/pytorch", "gpu": {"id": "NVIDIA H100 80GB HBM3", "count": 1}}


def client(fake: FakeRunpod, **headers: str) -> httpx.Client:
    return httpx.Client(base_url=fake.url, headers={**AUTH, **headers}, timeout=5)


def refused(response: httpx.Response, status: int, title: str, detail: str) -> None:
    """``response`` is exactly the problem document the API sends for this refusal."""
    assert response.status_code == status
    assert response.headers["content-type"] == PROBLEM
    assert response.json() == {"title": title, "status": status, "detail": detail}


# --- CPU flavors: vCPU range from the catalog -------------------------------------------------


@pytest.mark.parametrize(
    ("vcpus", "detail"),
    [
        (64, "vcpuCount 64 is outside 2-32 for cpu flavor cpu3g"),
        (6, "vcpuCount 6 is not a power of two"),
        (12, "vcpuCount 12 is not a power of two"),
    ],
)
def test_vcpu_count_outside_the_flavors_range_is_refused(fake: FakeRunpod, vcpus: int, detail: str) -> None:
    with client(fake) as http:
        response = http.post("/v2/pods", json={**CPU, "cpu": {"id": "cpu3g", "vcpuCount": vcpus}})
    refused(response, 400, "Bad Request", detail)
    assert fake.live_pods() == []


def test_the_range_is_the_catalogs(fake: FakeRunpod) -> None:
    narrow = catalog.find(fake.cpus, "cpu5m")
    narrow["vcpu"] = {"min": 4, "max": 16}
    with client(fake) as http:
        assert http.get("/v2/catalog/cpus/cpu5m").json()["vcpu"] == {"min": 4, "max": 16}
        body = {**CPU, "cpu": {"id": "cpu5m", "vcpuCount": 32}}
        refused(
            http.post("/v2/pods", json=body), 400, "Bad Request", "vcpuCount 32 is outside 4-16 for cpu flavor cpu5m"
        )
        body = {**CPU, "cpu": {"id": "cpu5m", "vcpuCount": 2}}
        refused(
            http.post("/v2/pods", json=body), 400, "Bad Request", "vcpuCount 2 is outside 4-16 for cpu flavor cpu5m"
        )
        created = http.post("/v2/pods", json={**CPU, "cpu": {"id": "cpu5m", "vcpuCount": 16}})
    assert created.status_code == 201
    assert created.json()["cpu"] == {"id": "cpu5m", "vcpuCount": 16, "memory": 128}


def test_an_unknown_flavor_is_refused(fake: FakeRunpod) -> None:
    with client(fake) as http:
        response = http.post("/v2/pods", json={**CPU, "cpu": {"id": "cpu9x", "vcpuCount": 4}})
    refused(response, 400, "Bad Request", "cpu flavor cpu9x was not found")


def test_eps_moves_on_when_the_catalog_no_longer_offers_its_size(fake: FakeRunpod) -> None:
    catalog.find(fake.cpus, "cpu3m")["vcpu"]["max"] = 16  # eps's table still offers 32
    settings = fast_settings(fake.url)

    with RunpodClient(ApiKey(KEY), settings, sleep=SleepRecorder()) as c:
        _result = c.start(cpu_rung("cpu3m-32-256"), "eps-d1-1")
    failure = _result.result.failure()
    assert failure.kind is FailureKind.INVALID_REQUEST
    assert failure.code == "400"
    assert "vcpuCount 32 is outside 2-16" in failure.message


# --- GPU types: maxCount per cloud from the catalog -------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "cloud", "detail"),
    [
        (
            {"id": "NVIDIA H100 80GB HBM3", "count": 9},
            "SECURE",
            "gpu.count 9 exceeds maxCount 8 for NVIDIA H100 80GB HBM3 on SECURE cloud",
        ),
        (
            {"id": "NVIDIA A100-SXM4-80GB", "count": 8},
            "COMMUNITY",
            "gpu.count 8 exceeds maxCount 4 for NVIDIA A100-SXM4-80GB on COMMUNITY cloud",
        ),
        ({"id": "NVIDIA H200", "count": 1}, "COMMUNITY", "gpu type NVIDIA H200 is not offered on COMMUNITY cloud"),
        ({"id": "NVIDIA B300", "count": 1}, "SECURE", "gpu type NVIDIA B300 was not found"),
    ],
)
def test_gpu_counts_beyond_the_types_max_are_refused(fake: FakeRunpod, gpu: dict, cloud: str, detail: str) -> None:
    with client(fake) as http:
        response = http.post("/v2/pods", json={**GPU, "gpu": gpu, "cloud": cloud})
    refused(response, 400, "Bad Request", detail)


def test_the_max_is_the_catalogs(fake: FakeRunpod) -> None:
    catalog.find(fake.gpus, "NVIDIA H100 80GB HBM3")["maxCount"]["secure"] = 4
    with client(fake) as http:
        assert http.get("/v2/catalog/gpus/NVIDIA H100 80GB HBM3").json()["maxCount"] == {"secure": 4, "community": 8}
        body = {**GPU, "gpu": {"id": "NVIDIA H100 80GB HBM3", "count": 8}}
        detail = "gpu.count 8 exceeds maxCount 4 for NVIDIA H100 80GB HBM3 on SECURE cloud"
        refused(http.post("/v2/pods", json=body), 400, "Bad Request", detail)
        ok = http.post("/v2/pods", json={**GPU, "gpu": {"id": "NVIDIA H100 80GB HBM3", "count": 4}})
    assert ok.status_code == 201
    assert ok.json()["gpu"] == {"id": "NVIDIA H100 80GB HBM3", "count": 4}
    assert ok.json()["cost"] == round(4 * 2.69, 4)


# --- other handler rules ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        ({**CPU, "gpu": GPU["gpu"]}, 400, "exactly one of gpu or cpu must be set"),
        ({**CPU, "dataCenterIds": ["MARS-1"]}, 400, "unknown data center MARS-1"),
        ({**CPU, "globalNetworking": True}, 400, "global networking requires an NVIDIA GPU"),
        (
            {**CPU, "mounts": {"persistent": {"size": 20, "path": "/w"}}},
            400,
            "mounts.persistent is invalid for CPU pods",
        ),
        (
            {**GPU, "mounts": {"persistent": {"size": 20, "path": "/w"}, "network": [{"volumeId": "v", "path": "/n"}]}},
            400,
            "mounts.persistent and mounts.network are mutually exclusive",
        ),
        (
            {**GPU, "gpu": {**GPU["gpu"], "allowedCudaVersions": ["12.8"], "minCudaVersion": "12.4"}},
            400,
            "allowedCudaVersions and minCudaVersion are mutually exclusive",
        ),
        ({**CPU, "disk": 41}, 400, "container disk exceeds the 40 GB limit for cpu3g"),
        ({"name": "x", "templateId": "tpl123", "cpu": CPU["cpu"]}, 404, "template tpl123 not found"),
    ],
)
def test_handler_rules(fake: FakeRunpod, body: dict, status: int, detail: str) -> None:
    with client(fake) as http:
        response = http.post("/v2/pods", json=body)
    refused(response, status, {400: "Bad Request", 404: "Not Found"}[status], detail)


def test_a_body_off_the_schema_is_422_with_each_violation(fake: FakeRunpod) -> None:
    with client(fake) as http:
        response = http.post("/v2/pods", json={**CPU, "bogus": 1, "cpu": {"id": "cpu3g", "vcpuCount": 1}})
    assert response.status_code == 422
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert (problem["title"], problem["status"], problem["detail"]) == (
        "Unprocessable Entity",
        422,
        "Request validation failed.",
    )
    assert problem["errors"] == [
        "$: additional properties 'bogus' not allowed",  # the document's own example
        "$.cpu.vcpuCount: 1 is less than the minimum of 2",
    ]


def test_query_parameters_are_read_the_documents_way(fake: FakeRunpod) -> None:
    with client(fake) as http:
        assert http.get("/v2/pods", params={"includeClusterPods": "true"}).status_code == 200
        response = http.get("/v2/pods", params={"includeClusterPods": "maybe"})
    assert response.status_code == 422
    assert response.json()["errors"] == ["query.includeClusterPods: 'maybe' is not of type 'boolean'"]


# --- 405 names the methods; every error is a problem document ---------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/v2/pods", "GET, POST"),
        ("DELETE", "/v2/pods", "GET, POST"),
        ("POST", "/v2/pods/abc", "GET, PATCH, DELETE"),
        ("PUT", "/v2/pods/abc", "GET, PATCH, DELETE"),
        ("POST", "/v2/catalog/gpus", "GET"),
        ("QUERY", "/v2/pods", "GET, POST"),
        ("TRACE", "/v2/account/ssh-keys", "GET, PUT"),
    ],
)
def test_405_names_the_paths_methods(fake: FakeRunpod, method: str, path: str, allow: str) -> None:
    with client(fake) as http:
        response = http.request(method, path)
    refused(response, 405, "Method Not Allowed", "The requested method is not allowed for this path.")
    assert response.headers["allow"] == allow


def test_head_and_options(fake: FakeRunpod) -> None:
    with client(fake) as http:
        head = http.head("/v2/pods")
        options = http.options("/v2/pods/abc")
    assert (head.status_code, head.headers["allow"], head.content) == (405, "GET, POST", b"")
    assert (options.status_code, options.headers["allow"], options.content) == (204, "GET, PATCH, DELETE", b"")


def test_every_error_is_a_problem_document(fake: FakeRunpod) -> None:
    fake.forbidden.add("cpu5c")
    with client(fake) as http:
        answers = [
            httpx.get(f"{fake.url}/v2/pods"),  # 401
            http.post("/v2/pods", content=b"{not json", headers={"Content-Type": "application/json"}),  # 400
            http.post("/v2/pods", json={**CPU, "cpu": {"id": "cpu5c", "vcpuCount": 4}}),  # 403
            http.get("/v2/pods/nope"),  # 404
            http.get("/v2/nowhere"),  # 404, no such path
            http.put("/v2/pods"),  # 405
            http.post("/v2/pods", json={}),  # 422
            http.get("/v2/templates"),  # 501: documented, not served by the test server
        ]
        fake.insufficient_balance = True
        answers.append(http.post("/v2/pods", json=CPU))  # 402
        fake.queue("GET", "/v2/pods", Fault(429), Fault(503))
        answers += [http.get("/v2/pods"), http.get("/v2/pods")]
    assert [a.status_code for a in answers] == [401, 400, 403, 404, 404, 405, 422, 501, 402, 429, 503]
    problem = openapi.schema_validator("ErrorResponse")
    for answer in answers:
        assert answer.headers["content-type"] == PROBLEM, answer
        assert list(problem.iter_errors(answer.json())) == []
        assert answer.json()["status"] == answer.status_code


def _raw(fake: FakeRunpod, request: bytes) -> tuple[bytes, dict[str, str], bytes]:
    """One raw request on its own connection: the status line, headers and body."""
    port = int(fake.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    headers = {k.decode().lower(): v.decode().strip() for k, _, v in (line.partition(b":") for line in lines)}
    return status, headers, body


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /v2/pods HTTP/9.9\r\n\r\n", 505),
        (b"GET /v2/pods HTTP/x\r\n\r\n", 400),
        (b"GET /v2/pods HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", 431),
    ],
)
def test_malformed_requests_get_problem_documents_too(fake: FakeRunpod, request_bytes: bytes, status: int) -> None:
    line, headers, body = _raw(fake, request_bytes)
    assert line.split()[1] == str(status).encode()
    assert headers["content-type"] == PROBLEM
    assert json.loads(body)["status"] == status


# --- 429 always says when to come back --------------------------------------------------------


def test_429_always_carries_retry_after(fake: FakeRunpod) -> None:
    fake.queue("GET", "/v2/pods", Fault(429), Fault(429, retry_after=12))
    with client(fake) as http:
        first, second = http.get("/v2/pods"), http.get("/v2/pods")
        fake.retry_after_s = 7
        fake.queue("POST", "/v2/pods", Fault(429, detail="rate limit exceeded for the minute window"))
        third = http.post("/v2/pods", json=CPU)
    assert [r.headers["retry-after"] for r in (first, second, third)] == ["1", "12", "7"]
    refused(third, 429, "Too Many Requests", "rate limit exceeded for the minute window")


def test_eps_waits_what_retry_after_says(fake: FakeRunpod, sleeper: SleepRecorder) -> None:
    fake.queue("POST", "/v2/pods", Fault(429))  # names no wait: the server's default, 1 s

    with RunpodClient(ApiKey(KEY), fast_settings(fake.url), sleep=sleeper) as c:
        _result = c.create_pod(cpu_rung(), "eps-d1-1")
    assert isinstance(_result, Success)
    assert sleeper.waits == [1.0]


# --- the catalog endpoints ----------------------------------------------------------------------


def test_catalog_listing_and_availability(fake: FakeRunpod) -> None:
    fake.stock.update({"cpu3c": 0, "NVIDIA H200": 2})
    with client(fake) as http:
        cpus = http.get("/v2/catalog/cpus").json()["cpus"]
        assert [c["id"] for c in cpus] == ["cpu3c", "cpu3g", "cpu3m", "cpu5c", "cpu5g", "cpu5m"]
        assert "availability" not in cpus[0]
        stocked = http.get("/v2/catalog/cpus", params={"include": "AVAILABILITY", "product": "POD"}).json()["cpus"]
        assert stocked[0]["availability"] == "NONE" and "dataCenters" not in stocked[0]
        assert stocked[1]["availability"] == "HIGH" and stocked[1]["dataCenters"][0]["id"] == "EU-RO-1"
        h200 = http.get("/v2/catalog/gpus/NVIDIA H200", params={"include": "AVAILABILITY", "product": "POD"}).json()
        assert h200["availability"] == "LOW"
        assert h200["cudaVersions"] == [{"version": v, "available": True} for v in ("12.4", "12.6", "12.8")]
        french = http.get(
            "/v2/catalog/gpus", params={"include": "AVAILABILITY", "product": "POD", "countryCodes": "FR"}
        )
        assert french.json() == {"gpus": []}


@pytest.mark.parametrize(
    ("path", "params", "status", "detail"),
    [
        ("/v2/catalog/cpus", {"include": "AVAILABILITY"}, 400, "product is required with include=AVAILABILITY"),
        ("/v2/catalog/cpus", {"product": "POD"}, 400, "product is valid only with include=AVAILABILITY"),
        ("/v2/catalog/gpus", {"count": "2"}, 400, "count is valid only with include=AVAILABILITY"),
        (
            "/v2/catalog/gpus",
            {"include": "AVAILABILITY", "product": "POD", "cudaVersions": "12.8", "minCudaVersion": "12"},
            400,
            "cudaVersions and minCudaVersion are mutually exclusive",
        ),
        (
            "/v2/catalog/cpus",
            {"include": "AVAILABILITY", "product": "POD", "vcpuCount": "6"},
            400,
            "vcpuCount 6 is not a power of two",
        ),
        ("/v2/catalog/cpus/cpu9x", {}, 404, "cpu type not found"),
    ],
)
def test_catalog_query_rules(fake: FakeRunpod, path: str, params: dict, status: int, detail: str) -> None:
    with client(fake) as http:
        refused(http.get(path, params=params), status, {400: "Bad Request", 404: "Not Found"}[status], detail)


def test_malformed_catalog_parameters_are_422(fake: FakeRunpod) -> None:
    with client(fake) as http:
        response = http.get("/v2/catalog/gpus", params={"include": "AVAILABILITY", "product": "POD", "count": "x"})
        countries = http.get(
            "/v2/catalog/gpus", params={"include": "AVAILABILITY", "product": "POD", "countryCodes": "fr"}
        )
    assert response.status_code == 422
    assert response.json()["errors"] == ["query.count: 'x' is not of type 'integer'"]
    assert countries.json()["errors"] == ["query.countryCodes: 'fr' does not match '^[A-Z]{2}$'"]


def test_patch_updates_and_checks(fake: FakeRunpod) -> None:
    pod_id = fake.add_pod(CPU)
    with client(fake) as http:
        renamed = http.patch(f"/v2/pods/{pod_id}", json={"name": "eps-x-2", "env": {"A": "1"}})
        bogus = http.patch(f"/v2/pods/{pod_id}", json={"cpu": {"id": "cpu3g", "vcpuCount": 8}})
        missing = http.patch("/v2/pods/nope", json={"name": "y"})
    assert renamed.status_code == 200
    assert (renamed.json()["name"], renamed.json()["env"]) == ("eps-x-2", {"A": "1"})
    assert bogus.status_code == 422
    refused(missing, 404, "Not Found", "pod not found")


# --- the answer check has teeth -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "status", "headers", "body", "expected"),
    [
        ("POST", "/v2/pods", 429, {"Content-Type": PROBLEM}, b'{"title":"x","status":429,"detail":"d"}', "Retry-After"),
        ("PUT", "/v2/pods", 405, {"Content-Type": PROBLEM}, b'{"title":"x","status":405,"detail":"d"}', "Allow"),
        (
            "GET",
            "/v2/pods/x",
            404,
            {"Content-Type": "application/json"},
            b'{"title":"x","status":404,"detail":"d"}',
            "not",
        ),
        ("GET", "/v2/pods/x", 200, {"Content-Type": "application/json"}, b'{"id":"x"}', "required property"),
        ("DELETE", "/v2/pods/x", 200, {"Content-Type": "application/json"}, b"{}", "not a documented answer"),
        ("DELETE", "/v2/pods/x", 204, {}, b"{}", "no body documented"),
        ("GET", "/v2/nowhere", 200, {"Content-Type": "application/json"}, b"{}", "no such path"),
        ("GET", "/v2/pods", 400, {"Content-Type": PROBLEM}, b'{"title":"x","status":"400"}', "body"),
    ],
)
def test_the_answer_check_catches(
    method: str, path: str, status: int, headers: dict, body: bytes, expected: str
) -> None:
    found = openapi.answer_violations(method, path, status, headers, body)
    assert any(expected in line for line in found), found


def test_the_answer_check_passes_the_documents_own_examples() -> None:
    doc = openapi.document()
    example = doc["paths"]["/v2/pods/{id}"]["get"]["responses"]["200"]["content"]["application/json"]["examples"]
    body = json.dumps(example["pod"]["value"]).encode()
    assert (
        openapi.answer_violations("GET", "/v2/pods/7h9k2m4n6p", 200, {"Content-Type": "application/json"}, body) == []
    )


def test_patterns_are_read_as_ecma_262() -> None:
    key = openapi.ecma(r"^(ssh|ecdsa|sk)-[^\s]+ [^\s]+([ \t][^\n\r]*)?$")
    assert key.search("ssh-ed25519 AAAA me@host")
    assert key.search("ecdsa-x o\x85")  # U+0085 is no ECMA whitespace
    assert not key.search("ssh-ed25519 AAAA me@host\n")  # ECMA $ is the end, not before a final newline
    assert not key.search("ssh-ed25519\xa0AAAA")  # U+00A0 is
    cuda = openapi.ecma(r"^\d+\.\d+$")
    assert cuda.search("12.8")
    assert not cuda.search("\u0661\u0662.\u0668")  # ECMA \d is ASCII


# --- what eps sends today is taken ---------------------------------------------------------------


def _cpu_bodies() -> list[tuple[str, dict[str, Any]]]:
    bodies = []
    for flavor in RUNPOD_CPU_FLAVORS:
        for vcpus in flavor.vcpu_options:
            instance = f"{flavor.name}-{vcpus}-{vcpus * flavor.gb_per_vcpu}"
            for disk in (None, vcpus * flavor.disk_gb_per_vcpu):
                rung = cpu_rung(instance, disk_gb=disk)
                bodies.append((f"{instance}/{disk}", pod_request(rung, "eps-d1-1", RunpodSettings())))
    return bodies


def _gpu_bodies() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{gpu.id}x{n}", pod_request(gpu_rung(gpu.id, n), "eps-g-1", RunpodSettings()))
        for gpu in RUNPOD_GPU_TYPES
        for n in range(1, gpu.max_count + 1)
    ]


def test_every_body_eps_builds_today_is_created(fake: FakeRunpod) -> None:
    settings = RunpodSettings(data_center_ids=("EU-RO-1", "US-KS-2"))
    bodies = [*_cpu_bodies(), *_gpu_bodies()]
    bodies.append(("data centers", pod_request(cpu_rung(), "eps-d1-2", settings)))
    assert len(bodies) > 50
    with client(fake) as http:
        for label, body in bodies:
            response = http.post("/v2/pods", json=body)
            assert response.status_code == 201, (label, response.json())


def test_eps_starts_a_pod_of_every_cpu_flavor(fake: FakeRunpod, sleeper: SleepRecorder) -> None:
    with RunpodClient(ApiKey(KEY), fast_settings(fake.url), sleep=sleeper) as c:
        rungs = [cpu_rung(f"{f.name}-4-{4 * f.gb_per_vcpu}") for f in RUNPOD_CPU_FLAVORS]
        _result = [c.start(rung, f"eps-d{i}-1", dispatch_id=f"d{i}") for i, rung in enumerate(rungs)]
    attempts = _result
    assert all(isinstance(a.result, Success) for a in attempts), [a.result for a in attempts]
    assert not any(isinstance(a.result, Failure) for a in attempts)
