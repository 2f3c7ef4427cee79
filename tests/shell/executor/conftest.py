"""Fixtures for the executor tests; the helpers live in executor_support.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from executor_support import KEY, PROJECT, Eps, gcp_fake, runpod_fake, ssh_support


@pytest.fixture
def gcp() -> Iterator[Any]:
    fake = gcp_fake.FakeCompute(PROJECT).start()
    yield fake
    fake.stop()


@pytest.fixture
def runpod() -> Iterator[Any]:
    fake = runpod_fake.FakeRunpod(api_key=KEY, gets_to_running=1).start()
    yield fake
    fake.stop()
    found = [
        f"{a.method} {a.path} -> {a.status}: {problem}"
        for a in list(fake.answers)
        for problem in runpod_fake.openapi.answer_violations(a.method, a.path, a.status, a.headers, a.body)
    ]
    assert found == [], "the RunPod test server answered outside its API document:\n" + "\n".join(found[:20])


@pytest.fixture(scope="session")
def sshd() -> Path:
    """The test sshd: the fake providers' machines (GCP natIP, RunPod ssh.direct) are it."""
    return ssh_support.start_sshd()


@pytest.fixture
def eps(tmp_path: Path, gcp: Any, runpod: Any, sshd: Path) -> Iterator[Eps]:
    yield Eps(tmp_path, gcp, runpod)
    ssh_support.stop_machine_jobs(tmp_path)
