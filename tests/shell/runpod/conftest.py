"""Fixtures for the RunPod lane: a live local server, settings that point at it, fast retries.

The test directories are not packages and other lanes have their own ``fake_server.py``,
so ``fake_server.py`` is loaded under the unique name ``runpod_fake_server`` and this
module registers itself as ``runpod_testkit``: test modules import helpers from there.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from eps.core.model import LaneKind, Provisioning, Rung
from eps.shell.lanes.runpod.wire import ApiKey, RunpodSettings
from eps.shell.retry import RetryPolicy

_HERE = Path(__file__).parent


def _load_fake_server() -> ModuleType:
    name = "runpod_fake_server"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _HERE / "fake_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


fake_server = _load_fake_server()

sys.modules.setdefault("runpod_testkit", sys.modules[__name__])
FakeRunpod = fake_server.FakeRunpod
Fault = fake_server.Fault
schema_validator = fake_server.schema_validator
NO_CAPACITY = fake_server.NO_CAPACITY

KEY = "rpa_TESTKEY_5f3c9a1e7d2b4c6e8f0a"


class SleepRecorder:
    """An injected ``sleep``: records each wait and yields without waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def fake() -> Iterator[FakeRunpod]:
    with fake_server.FakeRunpod(api_key=KEY) as server:
        yield server


@pytest.fixture
def api_key() -> ApiKey:
    return ApiKey(KEY)


@pytest.fixture
def settings(fake: FakeRunpod) -> RunpodSettings:
    return fast_settings(fake.url)


@pytest.fixture
def sleeper() -> SleepRecorder:
    return SleepRecorder()


def fast_settings(url: str, **overrides: object) -> RunpodSettings:
    values: dict[str, object] = {
        "base_url": url,
        "request_timeout_s": 2.0,
        "poll_interval_s": 0.5,
        "poll_timeout_s": 5.0,
        "retry": RetryPolicy(attempts=3, timeout_s=10.0, wait_initial_s=0.001, wait_max_s=0.005, wait_jitter_s=0.0),
    }
    values.update(overrides)
    return RunpodSettings(**values)


def cpu_rung(instance: str = "cpu3g-4-16", disk_gb: int | None = None) -> Rung:
    _flavor, vcpus, mem = instance.split("-")
    return Rung(
        "runpod",
        LaneKind.RUNPOD,
        Provisioning.ON_DEMAND,
        "test",
        machine=instance,
        vcpus=int(vcpus),
        mem_gb=int(mem),
        disk_gb=disk_gb,
    )


def gpu_rung(gpu: str = "NVIDIA H100 80GB HBM3", count: int = 2) -> Rung:
    return Rung("runpod", LaneKind.RUNPOD, Provisioning.ON_DEMAND, "pinned", machine=gpu, gpus=count, vcpus=16)
