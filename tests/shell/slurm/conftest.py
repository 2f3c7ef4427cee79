"""Fixtures for the SLURM lane against a real single-node SLURM cluster.

The session fixture runs ``cluster.sh start`` (install if missing, configure,
start the daemons, wait until every QoS accepts ``sbatch --test-only``).  Not
root, or SLURM cannot be installed/started: the tests skip with the reason,
except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from qos_caps import gpu_cap  # noqa: F401 (the fixture, shared with tests/shell/faults)
from slurm_support import (
    CLUSTER_SH,
    FIRST_CAP_S,
    NEXT_CAP_S,
    USER,
    Recorder,
    live_jobs,
    unavailable,
    wait_until,
)

from eps.core.model import ClusterConfig, Policy, QosGrants, evolve
from eps.core.tables import DEFAULT_POLICY, FELLOWS
from eps.shell.lanes.slurm.cli import SlurmClient


@pytest.fixture(scope="session")
def slurm_cluster() -> Path:
    """The cluster is up and ready; the path of ``cluster.sh``."""
    if os.geteuid() != 0:
        unavailable("the SLURM test cluster needs root: tests/shell/slurm/cluster.sh installs and starts daemons")
    try:
        proc = subprocess.run(
            ["bash", str(CLUSTER_SH), "start"], capture_output=True, text=True, timeout=900, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        unavailable(f"cluster.sh start did not finish: {exc}")
        raise  # unreachable: _unavailable skips or fails
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        unavailable(f"SLURM could not be installed or started (cluster.sh start exited {proc.returncode}): {tail}")
    return CLUSTER_SH


@pytest.fixture
def client(slurm_cluster: Path) -> SlurmClient:
    return SlurmClient()


@pytest.fixture
def grants(client: SlurmClient) -> QosGrants:
    return client.discover_grants(USER).unwrap()


@pytest.fixture
def fellows() -> ClusterConfig:
    # the real row, with short park caps and a short submission gap (its pacing has its own tests)
    return evolve(FELLOWS, first_park_cap_s=FIRST_CAP_S, next_park_cap_s=NEXT_CAP_S, submit_gap_s=0.2)


@pytest.fixture
def policy(fellows: ClusterConfig) -> Policy:
    return evolve(DEFAULT_POLICY, clusters=(fellows,))


def _cancel_all() -> None:
    subprocess.run(["scancel", "--quiet", "-u", USER], check=False, capture_output=True, timeout=60)
    wait_until(lambda: not live_jobs(), 30, "every test job to leave the queue")


@pytest.fixture(autouse=True)
def no_jobs_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test marked ``slurm`` starts with no job of the user and cancels all of its
    jobs at teardown (tests without the marker need no cluster)."""
    if request.node.get_closest_marker("slurm") is None:
        yield
        return
    request.getfixturevalue("slurm_cluster")
    _cancel_all()
    yield
    _cancel_all()


@pytest.fixture
def workdir(tmp_path: Path) -> str:
    """Where test jobs write their output (sbatch would otherwise write into the cwd)."""
    return str(tmp_path / "%j.out")


@pytest.fixture
def recorder() -> Recorder:
    dispatch_id = "t" + uuid.uuid4().hex[:10]
    return Recorder(dispatch_id, [], [])
