"""The test server itself: faithful documents, and hundreds of connections at once."""

from __future__ import annotations

import asyncio
import time

import httpx
from runpod_testkit import KEY, NO_CAPACITY, FakeRunpod, schema_validator

POD = schema_validator("Pod")
LIST = schema_validator("ListPodsResponse")
PROBLEM = schema_validator("ErrorResponse")
AUTH = {"Authorization": f"Bearer {KEY}"}
BODY = {"name": "eps-x-1", "image": "ubuntu:24.04", "cpu": {"id": "cpu3g", "vcpuCount": 4}}


def test_documents_match_the_schemas(fake: FakeRunpod) -> None:
    with httpx.Client(base_url=fake.url, headers=AUTH) as http:
        created = http.post("/v2/pods", json=BODY)
        assert created.status_code == 201
        assert list(POD.iter_errors(created.json())) == []
        pod_id = created.json()["id"]
        states = [http.get(f"/v2/pods/{pod_id}").json()["status"] for _ in range(3)]
        assert states == ["STARTING", "RUNNING", "RUNNING"]
        assert list(POD.iter_errors(http.get(f"/v2/pods/{pod_id}").json())) == []
        assert list(LIST.iter_errors(http.get("/v2/pods").json())) == []
        fake.stock["cpu3g"] = 0
        refused = http.post("/v2/pods", json={**BODY, "name": "eps-x-2"})
        assert refused.status_code == 400
        assert refused.json()["detail"] == NO_CAPACITY
        assert list(PROBLEM.iter_errors(refused.json())) == []
        assert http.delete(f"/v2/pods/{pod_id}").status_code == 204
        assert http.get(f"/v2/pods/{pod_id}").status_code == 404
        assert httpx.get(f"{fake.url}/v2/pods").status_code == 401


async def _raw_get(port: int) -> int:
    """One request on its own connection, below httpx (whose pool is the bottleneck here)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET /v2/pods HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nConnection: close\r\n\r\n".encode()
    )
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return int(answer.split(b" ", 2)[1])


def test_holds_250_concurrent_connections() -> None:
    with FakeRunpod(api_key=KEY, latency_s=0.5) as fake:
        port = int(fake.url.rsplit(":", 1)[1])

        async def go() -> list[int]:
            return list(await asyncio.gather(*(_raw_get(port) for _ in range(250))))

        began = time.perf_counter()
        statuses = asyncio.run(go())
        elapsed = time.perf_counter() - began
    assert statuses == [200] * 250
    assert fake.peak_in_flight >= 200  # they really were in flight together
    assert elapsed < 10.0  # 250 x 0.5 s one after another would be 125 s
