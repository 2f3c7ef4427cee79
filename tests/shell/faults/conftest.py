"""Fixtures for the fault-injection suite: the local GCP and RunPod servers with traps,
``eps`` as child processes against them, and (for tests marked ``slurm``) the real
local SLURM cluster reached through ``slurm_wrap.sh``.

The SLURM fixtures skip when not root or when the cluster cannot be brought up,
except under ``CI=true``, where they fail (as tests/shell/slurm does).  The cluster
may be shared with other suites: this one cancels only the jobs it made (names
``eps-f...`` and ``faults-blocker-...``), never every job of the user.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults_support import (
    KEY,
    PROJECT,
    SHELL,
    Eps,
    GcpTrap,
    RunpodTrap,
    SlurmTrap,
    gcp_fake,
    runpod_fake,
    scancel_names,
    squeue,
    ssh_support,
    wait_until,
)


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


@pytest.fixture
def gtrap(gcp: Any) -> GcpTrap:
    return GcpTrap(gcp)


@pytest.fixture
def rtrap(runpod: Any) -> RunpodTrap:
    return RunpodTrap(runpod)


@pytest.fixture(scope="session")
def sshd() -> Path:
    """The test sshd: the fake providers' machines (GCP natIP, RunPod ssh.direct) are it."""
    return ssh_support.start_sshd()


@pytest.fixture
def eps(tmp_path: Path, gtrap: GcpTrap, rtrap: RunpodTrap, sshd: Path) -> Iterator[Eps]:
    e = Eps(tmp_path, gtrap.fake, rtrap.fake)
    yield e
    e.close()


# --- SLURM -------------------------------------------------------------------------------


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the real SLURM cluster is required under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_cluster() -> Path:
    cluster_sh = SHELL / "slurm" / "cluster.sh"
    if os.geteuid() != 0:
        _unavailable("the SLURM test cluster needs root: tests/shell/slurm/cluster.sh installs and starts daemons")
    try:
        proc = subprocess.run(
            ["bash", str(cluster_sh), "start"], check=False, capture_output=True, text=True, timeout=900
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        _unavailable(f"cluster.sh start did not finish: {exc}")
        raise
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        _unavailable(f"SLURM could not be installed or started (cluster.sh start exited {proc.returncode}): {tail}")
    return cluster_sh


@pytest.fixture
def seps(tmp_path: Path, gtrap: GcpTrap, rtrap: RunpodTrap, slurm_cluster: Path, sshd: Path) -> Iterator[Eps]:
    """``eps`` with the real cluster behind ``slurm_wrap.sh`` (park caps 2 s, then 1 s)."""
    e = Eps(tmp_path, gtrap.fake, rtrap.fake, slurm=True, caps=(2, 1))
    yield e
    e.close()
    scancel_names("eps-f")


@pytest.fixture
def strap(seps: Eps) -> SlurmTrap:
    return SlurmTrap(seps.faults)


@pytest.fixture
def blocker(slurm_cluster: Path, tmp_path: Path) -> Iterator[str]:
    """A job of this suite holding one GPU (no eps name), so a gpu-8 job pends on every tier
    (reason Resources) until the test cancels it.  No QoS is changed.  Under high-eur, which no
    tier preempts (a low-eur one would be preempted by the gpu-8 job's high-eur rung)."""
    name = f"faults-blocker-{uuid.uuid4().hex[:6]}"
    out = subprocess.run(
        ["sbatch", "--parsable", "-J", name, "--qos=high-eur", "--partition=general",
         "--gres=gpu:1", "--time=10", "-o", "/dev/null", "--wrap", "sleep 600"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        _unavailable(f"cannot submit the blocker job: {out.stderr.strip()}")
    job_id = out.stdout.strip().split(";")[0]
    try:
        wait_until(lambda: any(j == job_id and s == "RUNNING" for j, s, *_ in squeue(name)), 20, "the blocker to run")
        yield job_id
    finally:
        scancel_names(name)
