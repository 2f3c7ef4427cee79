"""Fixtures for the fault-injection suite: the local GCP and RunPod servers with traps,
``eps`` as child processes against them, and (for tests marked ``slurm``) the real
local SLURM cluster reached through ``slurm_wrap.sh``.

The SLURM fixtures skip when not root or when the cluster cannot be brought up,
except under ``CI=true``, where they fail (as tests/shell/slurm does).  The cluster
may be shared with other suites: this one cancels only the jobs it made (names
``eps-f...`` and ``faults-blocker-...``), never every job of the user.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from faults_support import (
    KEY,
    PROJECT,
    SHELL,
    TEAM_LEASE_S,
    DetachedEps,
    Eps,
    GcpTrap,
    RunpodTrap,
    SlurmTrap,
    Team,
    gcp_fake,
    runpod_fake,
    s3_storage,
    scancel_names,
    slurm_qos_caps,
    squeue,
    ssh_support,
    team_host,
    wait_until,
)
from storage_support import S3Server


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


@pytest.fixture
def detached_eps(request: pytest.FixtureRequest, tmp_path: Path, gtrap: GcpTrap, rtrap: RunpodTrap,
                 sshd: Path) -> Iterator[DetachedEps]:  # fmt: skip
    """``detached_eps()``: ``eps`` in detached mode (a supervisor walks each dispatch) on the
    lanes of this suite: the GCP and RunPod test servers (their machines the test sshd); with
    ``slurm=True`` the real cluster too, behind ``slurm_wrap.sh``, with park caps ``caps``
    (rung 1, then every later rung); with ``storage=(s3, bucket)`` its ``[storage]`` on the
    local S3 server (:func:`faults_support.s3_storage`).  At the end: closed (its supervisor
    and its jobs on the sshd ended) and, with the cluster, this suite's jobs there cancelled."""
    made: list[Eps] = []
    on_cluster = False

    def make(*, slurm: bool = False, caps: tuple[int, int] = (2, 1), storage: tuple[Any, str] | None = None) -> Eps:
        nonlocal on_cluster
        if slurm:
            request.getfixturevalue("slurm_cluster")
            on_cluster = True
        e = Eps(tmp_path, gtrap.fake, rtrap.fake, slurm=slurm, caps=caps, detached=True)
        made.append(e)
        return s3_storage(e, *storage) if storage else e

    yield make
    for e in made:
        e.close()
    if on_cluster:
        scancel_names("eps-f")


@pytest.fixture
def team_of_two(request: pytest.FixtureRequest, tmp_path: Path, gtrap: GcpTrap, rtrap: RunpodTrap, pg_url: str,
                sshd: Path) -> Iterator[Team]:  # fmt: skip
    """``team_of_two(lease_s, a={...}, b={...})``: hosts A and B of a team on the session's
    PostgreSQL (:func:`faults_support.team_host`: each its own HOME, state dir, config and
    supervisors; the machines and the cluster theirs together), ``a`` and ``b`` each one's
    :class:`Eps` options (``slurm=True`` needs the cluster).  At the end both are closed
    (their supervisors stopped, whatever became of their HOMEs), the jobs on the team's
    machines ended and, with the cluster, this suite's jobs there cancelled."""
    made: list[Eps] = []
    on_cluster = False

    def make(lease_s: int, a: dict[str, Any] | None = None, b: dict[str, Any] | None = None) -> tuple[Eps, Eps]:
        nonlocal on_cluster
        for name, options in (("a", a or {}), ("b", b or {})):
            if options.get("slurm"):
                request.getfixturevalue("slurm_cluster")
                on_cluster = True
            made.append(team_host(tmp_path, name, gtrap, rtrap, pg_url, lease_s, **options))
        return made[-2], made[-1]

    yield make
    for e in made:
        with contextlib.suppress(Exception):
            e.close()
    ssh_support.stop_machine_jobs(tmp_path / "machines")
    if on_cluster:
        scancel_names("eps-f")


@pytest.fixture
def team_s3(team_of_two: Team, s3: S3Server, bucket: str) -> tuple[Eps, Eps]:
    """Hosts A and B, each with ``[storage]`` on the local S3 server."""
    a, b = team_of_two(TEAM_LEASE_S)
    return s3_storage(a, s3, bucket), s3_storage(b, s3, bucket)


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


@contextlib.contextmanager
def _blocking_job(gpus: int, *, required: bool) -> Iterator[str]:
    """A job of this suite (no eps name) holding ``gpus`` GPUs under high-eur, which no tier
    preempts, running until the end: its id.  Not submitted: the test fails when ``required``,
    else it skips (fails under CI=true)."""
    name = f"faults-blocker-{uuid.uuid4().hex[:6]}"
    try:
        out = subprocess.run(
            ["sbatch", "--parsable", "-J", name, "--qos=high-eur", "--partition=general",
             f"--gres=gpu:{gpus}", "--time=10", "-o", "/dev/null", "--wrap", "sleep 600"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if out.returncode != 0:
            assert not required, f"cannot submit the blocker job: {out.stderr.strip()}"
            _unavailable(f"cannot submit the blocker job: {out.stderr.strip()}")
        job_id = out.stdout.strip().split(";")[0]
        wait_until(lambda: any(j == job_id and s == "RUNNING" for j, s, *_ in squeue(name)), 20, "the blocker to run")
        yield job_id
    finally:
        scancel_names(name)


@pytest.fixture
def blocker(slurm_cluster: Path, tmp_path: Path) -> Iterator[str]:
    """A job of this suite holding one GPU (no eps name), so a gpu-8 job pends on every tier
    (reason Resources) until the test cancels it.  No QoS is changed.  Under high-eur, which no
    tier preempts (a low-eur one would be preempted by the gpu-8 job's high-eur rung)."""
    with _blocking_job(1, required=False) as job_id:
        yield job_id


#: ``gpu_cap("high-eur", 2)``: a tier's per-user GPU cap lowered until the test ends, each
#: change waited for in slurmctld, the SPEC value put back (tests/shell/slurm/qos_caps.py).
gpu_cap = slurm_qos_caps().gpu_cap


@pytest.fixture
def high_eur_full(slurm_cluster: Path, gpu_cap: Callable[[str, int], None]) -> Iterator[str]:
    """high-eur full the way a busy user's is: its per-user cap lowered to 2 GPUs (``gpu_cap``)
    and held by a 2-GPU job of this suite, so a further GPU job pends there
    (QOSMaxGRESPerUser) while normal-eur has room: the blocker's id.  The cap is restored at
    the end, after the blocker is gone."""
    gpu_cap("high-eur", 2)
    with _blocking_job(2, required=True) as job_id:
        yield job_id
