"""Fixtures of the notification tests: the loopback targets (:mod:`notify_support`), and for
the dispatch tests the fault suite's harness (``Eps`` against the local GCP and RunPod
servers, each job run on the test sshd: run these under ``flock /tmp/eps-slurm-tests.lock``)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from notify_support import HttpReceiver, SmtpReceiver  # noqa: E402


def _faults() -> ModuleType:
    """The fault suite's support module (one module, whichever suite loads it first)."""
    if "faults_support" in sys.modules:
        return sys.modules["faults_support"]
    spec = importlib.util.spec_from_file_location("faults_support", HERE.parent / "faults" / "faults_support.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["faults_support"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def http() -> Iterator[HttpReceiver]:
    r = HttpReceiver().start()
    yield r
    r.stop()


@pytest.fixture
def smtp() -> Iterator[SmtpReceiver]:
    r = SmtpReceiver().start()
    yield r
    r.stop()


@pytest.fixture
def fs() -> ModuleType:
    return _faults()


@pytest.fixture
def gcp(fs: ModuleType) -> Iterator[Any]:
    fake = fs.gcp_fake.FakeCompute(fs.PROJECT).start()
    yield fake
    fake.stop()


@pytest.fixture
def runpod(fs: ModuleType) -> Iterator[Any]:
    fake = fs.runpod_fake.FakeRunpod(api_key=fs.KEY, gets_to_running=1).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def sshd() -> Path:
    path: Path = _faults().ssh_support.start_sshd()
    return path


@pytest.fixture
def eps(tmp_path: Path, fs: ModuleType, gcp: Any, runpod: Any, sshd: Path) -> Iterator[Any]:
    """``eps`` with a supervisor (detached), idle after 2 s."""
    e = fs.Eps(tmp_path, gcp, runpod, detached=True)
    e._gcp = gcp  # the preemption test takes its VM back
    yield e
    e.close()
