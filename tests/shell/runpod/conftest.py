"""Fixtures for the RunPod lane: a live local server, settings that point at it, fast retries.

The test directories are not packages and other lanes have their own ``fake_server.py``,
so ``fake_server.py`` is loaded under the unique name ``runpod_fake_server`` and this
module registers itself as ``runpod_testkit``: test modules import helpers from there.

Every answer any RunPod test server gives during a test, on the wire, is checked against
the vendored API document when the test ends (:func:`every_answer_is_documented`): a
test that passes while the server answered something the document does not allow fails.
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
from eps.shell.util.retry import RetryPolicy

_HERE = Path(__file__).parent


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


fake_server = _load("runpod_fake_server", _HERE / "fake_server.py")
ssh_support = _load("ssh_support", _HERE.parent / "ssh" / "ssh_support.py")

sys.modules.setdefault("runpod_testkit", sys.modules[__name__])
FakeRunpod = fake_server.FakeRunpod
Fault = fake_server.Fault
schema_validator = fake_server.schema_validator
NO_CAPACITY = fake_server.NO_CAPACITY
openapi = fake_server.openapi
catalog = fake_server.catalog

KEY = "rpa_TESTKEY_5f3c9a1e7d2b4c6e8f0a"


class SleepRecorder:
    """An injected ``sleep``: records each wait and yields without waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def answer_violations(fakes: list[FakeRunpod]) -> list[str]:
    """Every answer of ``fakes`` that the API document does not allow, one line each."""
    found = []
    for server in fakes:
        with server.lock:
            answers = list(server.answers)
        for a in answers:
            for problem in openapi.answer_violations(a.method, a.path, a.status, a.headers, a.body):
                found.append(f"{a.method} {a.path} -> {a.status}: {problem}")
    return found


@pytest.fixture(autouse=True)
def every_answer_is_documented() -> Iterator[None]:
    """After each test: every answer of every RunPod server it started matches the document."""
    first = len(fake_server.STARTED)
    yield
    started = fake_server.STARTED[first:]
    del fake_server.STARTED[first:]
    found = answer_violations(started)
    if found:
        pytest.fail("the RunPod test server answered outside its API document:\n" + "\n".join(found[:20]))


@pytest.fixture
def fake() -> Iterator[FakeRunpod]:
    with fake_server.FakeRunpod(api_key=KEY) as server:
        yield server


@pytest.fixture(scope="session")
def sshd() -> Path:
    """The test sshd: a pod's ssh.direct address leads there (see ``pods_reach_sshd``)."""
    return ssh_support.start_sshd()


@pytest.fixture
def pods_reach_sshd(fake: FakeRunpod, sshd: Path, tmp_path: Path) -> Iterator[Path]:
    """Every pod of ``fake`` answers ssh at the test sshd, so eps ships and launches its jobs
    for real; afterwards the jobs and watchers eps started there are stopped.  Yields the
    directory under which the pods' dispatch roots go."""
    fake.public_ip, fake.ssh_port = ssh_support.VM_IP, ssh_support.VM_PORT
    fake.authorized_keys = ssh_support.AUTHORIZED_KEYS  # a pod's PUBLIC_KEY lets its keys in, as its image does
    yield tmp_path
    ssh_support.stop_machine_jobs(tmp_path)


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
