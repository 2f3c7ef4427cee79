"""Fixtures for the executor tests; the helpers live in executor_support.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from executor_support import Eps, fakes, ssh_support


@pytest.fixture
def both() -> Iterator[tuple[Any, Any]]:
    yield from fakes()


@pytest.fixture
def gcp(both: tuple[Any, Any]) -> Any:
    return both[0]


@pytest.fixture
def runpod(both: tuple[Any, Any]) -> Any:
    return both[1]


@pytest.fixture(scope="session")
def sshd() -> Path:
    """The test sshd: the fake providers' machines (GCP natIP, RunPod ssh.direct) are it."""
    return ssh_support.start_sshd()


@pytest.fixture
def eps(tmp_path: Path, gcp: Any, runpod: Any, sshd: Path) -> Iterator[Eps]:
    yield Eps(tmp_path, gcp, runpod)
    ssh_support.stop_machine_jobs(tmp_path)
