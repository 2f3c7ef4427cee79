"""Fixtures for the GCP lane: a fresh fake Compute server per test and lanes that use
the real google-cloud-compute client against it (plain HTTP, anonymous credentials)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from eps.core.model import Job, LaneKind, Provisioning, Rung
from eps.shell.lanes.gcp.client import GcpClient
from eps.shell.util.retry import RetryPolicy

from .fake_server import FakeCompute

PROJECT = "test-project"
IMAGE = "projects/debian-cloud/global/images/family/debian-12"
FAST_RETRY = RetryPolicy(attempts=3, timeout_s=20.0, wait_initial_s=0.0, wait_max_s=0.0, wait_jitter_s=0.0)


@pytest.fixture
def server() -> Iterator[FakeCompute]:
    fake = FakeCompute(PROJECT).start()
    yield fake
    fake.stop()


@pytest.fixture
def sleeps() -> list[float]:
    """What the lane's operation wait loop slept, in order (it never really sleeps)."""
    return []


@pytest.fixture
def make_lane(server: FakeCompute, sleeps: list[float]) -> Iterator[Callable[..., GcpClient]]:
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials

    made: list[GcpClient] = []

    def make(**overrides: Any) -> GcpClient:
        options: dict[str, Any] = {
            "image": IMAGE,
            "credentials": AnonymousCredentials(),
            "client_options": ClientOptions(api_endpoint=server.endpoint),
            "transport": "rest",
            "retry": FAST_RETRY,
            "request_timeout_s": 10.0,
            "poll_interval_s": 0.5,
            "sleep": sleeps.append,
        }
        options.update(overrides)
        lane = GcpClient(PROJECT, **options)
        made.append(lane)
        return lane

    yield make
    for lane in made:
        lane.close()


@pytest.fixture
def instances_client(server: FakeCompute) -> Iterator[Any]:
    """The real ``compute_v1.InstancesClient`` against the fake, for requests eps would never send."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1

    client = compute_v1.InstancesClient(
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=server.endpoint),
        transport="rest",
    )
    yield client
    client.transport.close()


@pytest.fixture
def lane(make_lane: Callable[..., GcpClient]) -> GcpClient:
    return make_lane()


@pytest.fixture
def gcp_rung() -> Callable[..., Rung]:
    def make(
        machine: str = "e2-standard-4",
        zone: str = "us-central1-a",
        provisioning: Provisioning = Provisioning.SPOT,
        *,
        gpus: int = 0,
        disk_gb: int | None = None,
    ) -> Rung:
        return Rung(
            lane="gcp",
            kind=LaneKind.GCP,
            provisioning=provisioning,
            reason="test rung",
            machine=machine,
            zone=zone,
            gpus=gpus,
            disk_gb=disk_gb,
        )

    return make


@pytest.fixture
def job() -> Job:
    return Job(
        intent="cpu-small",
        duration_s=1800,
        restartable=True,
        command=("python", "train.py", "--note", "it's $HOME; rm -rf /"),
    )
