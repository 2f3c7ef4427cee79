"""Property-based contract run: schemathesis drives the RunPod test server from the vendored
API document and checks every answer against it (status codes, content types, headers,
response schemas, negative data rejected, valid data accepted, auth enforced, undocumented
methods answered 405 with ``Allow``).

Deterministic (derandomized Hypothesis, no example database, fixed seed), offline (the
document is the vendored copy, the server is local) and quick: a few dozen examples per
operation.  Only the operations the test server implements are driven; the others answer
501 by design.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from runpod_testkit import KEY, FakeRunpod, answer_violations, fake_server, openapi

SERVED = r"^/v2/(pods(/\{id\}/action)?|catalog/(cpus|gpus)|account/ssh-keys)(/\{id\})?$"
CONFIG = schemathesis.Config.from_dict(
    {
        "seed": 20260301,
        "generation": {"max-examples": 25, "deterministic": True, "database": "none", "mode": "all"},
        "auth": {"openapi": {"bearerAuth": {"bearer": KEY}}},
        "checks": {
            # 400 is the document's "valid body, refused by a handler rule or for capacity";
            # 404: ids drawn at random name no pod or catalog entry; 409: a pod action its
            # status does not allow now (podAction).
            "positive_data_acceptance": {"expected-statuses": ["2xx", 400, 404, 409]},
        },
        "phases": {"stateful": {"enabled": False}},
    }
)
schema = schemathesis.openapi.from_path(openapi.DOCUMENT, config=CONFIG).include(path_regex=SERVED)
DRIVEN: set[str] = set()  # operations the run drove (all of them, unless -k picked some)


@pytest.fixture(scope="module")
def contract_server() -> Iterator[FakeRunpod]:
    """One server for the whole run, with stock in every state and pods to find: the
    document's example id (``pod_abc123``, drawn by the examples phase), a CPU and a GPU pod."""
    with FakeRunpod(api_key=KEY, stock={"cpu3c": 0, "cpu5g": 2}) as server:
        gpu = {"name": "example", "image": "runpod/pytorch", "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1}}
        server.add_pod({**gpu, "ports": ["8888/http", "22/tcp"]}, pod_id="pod_abc123")
        # the id of podAction's example answer, stopped: the example action (start) applies to it
        server.add_pod(gpu, pod_id="7h9k2m4n6p", status="EXITED")
        server.add_pod({"name": "cpu", "image": "ubuntu:24.04", "cpu": {"id": "cpu3g", "vcpuCount": 4}})
        server.add_pod(gpu, status="STARTING")
        yield server
    if len(DRIVEN) == len(list(schema.get_all_operations())):  # the whole run, not a -k slice
        seen = {(a.method, fake_server._route(a.path), a.status // 100) for a in server.answers}
        missing = [(m, t) for t, methods in fake_server.SERVED.items() for m in methods if (m, t, 2) not in seen]
        assert missing == [], f"the run never got a 2xx from {missing}"
    found = answer_violations([server])
    assert found == [], "\n".join(found[:20])
    if server in fake_server.STARTED:
        fake_server.STARTED.remove(server)


def test_the_run_covers_every_served_operation() -> None:
    labels = {op.ok().label for op in schema.get_all_operations()}
    assert labels == {
        "GET /v2/pods",
        "POST /v2/pods",
        "GET /v2/pods/{id}",
        "PATCH /v2/pods/{id}",
        "DELETE /v2/pods/{id}",
        "POST /v2/pods/{id}/action",
        "GET /v2/catalog/cpus",
        "GET /v2/catalog/cpus/{id}",
        "GET /v2/catalog/gpus",
        "GET /v2/catalog/gpus/{id}",
        "GET /v2/account/ssh-keys",
        "PUT /v2/account/ssh-keys",
    }
    assert set(fake_server.SERVED) == {op.ok().path for op in schema.get_all_operations()}


@schema.parametrize()
@settings(
    max_examples=25,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
def test_the_server_keeps_its_contract(case: schemathesis.Case, contract_server: FakeRunpod) -> None:
    DRIVEN.add(case.operation.label)
    case.call_and_validate(base_url=contract_server.url)
