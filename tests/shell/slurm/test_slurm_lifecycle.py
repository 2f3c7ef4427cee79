"""A real job on the real SLURM cluster through ``eps`` (issue 12): its workdir shipped to the
shared filesystem, run under the wrapper by the batch step, its log, outputs and exit code
back, and ``eps ssh`` lands in the job's allocation."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from slurm_support import FIRST_CAP_S, NEXT_CAP_S, live_jobs

from eps.shell.cli import main

pytestmark = pytest.mark.slurm

SCRIPT = """\
import os, sys
data = open("data/input.txt").read()
with open(os.path.join(os.environ["EPS_OUTPUT_DIR"], "result.txt"), "w") as fh:
    fh.write(data * 100)
for i in range(100_000):
    print(f"line {i}")
sys.exit(3)
"""


def _eps(tmp: Path, *argv: str) -> tuple[int, str, str]:
    config = tmp / "config.toml"
    if not config.exists():
        config.write_text(
            "[jobs]\nsupervise = 'inline'\nwait_poll_s = 0.2\n"
            f'[[clusters]]\nname = "fellows"\nwork_root = "{tmp / "shared"}"\n'
        )
    env = {
        "EPS_STATE_DIR": str(tmp / "state"),
        "EPS_CONFIG": str(config),
        "HOME": str(tmp),
        "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
        "USER": "root",
        "EPS_FELLOWS_QUEUE_WAIT_SECONDS": str(FIRST_CAP_S),
        "EPS_FELLOWS_NEXT_QUEUE_WAIT_SECONDS": str(NEXT_CAP_S),
    }
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv), env=env)
    return rc, out.getvalue(), err.getvalue()


def test_a_real_job_on_the_cluster_end_to_end(slurm_cluster: Path, tmp_path: Path) -> None:
    wd = tmp_path / "project"
    (wd / "data").mkdir(parents=True)
    (wd / "job.py").write_text(SCRIPT)
    (wd / "data" / "input.txt").write_text("from the shared filesystem\n")
    rc, out, err = _eps(tmp_path, "execute", "gpu-1", "--duration", "10m", "--workdir", str(wd), "--wait", "--",
                        "python3", "job.py")  # fmt: skip
    assert rc == 3, (out, err)
    rc, out, err = _eps(tmp_path, "status", "--json")
    assert rc == 0, err
    import json

    [row] = json.loads(out)["dispatches"]
    d = row["dispatch"]
    assert row["handle"]["lane"] == "fellows" and row["handle"]["qos"] == "high-eur"
    assert row["message"].startswith("failed (exit 3)")
    rc, log, err = _eps(tmp_path, "logs", d)
    assert rc == 0, err
    assert [x for x in log.splitlines() if x.startswith("line ")] == [f"line {i}" for i in range(100_000)]
    result = tmp_path / "state" / "outputs" / d / "result.txt"
    assert result.read_text() == "from the shared filesystem\n" * 100
    assert live_jobs(f"eps-{d}") == []


def test_ssh_runs_in_the_jobs_allocation(slurm_cluster: Path, tmp_path: Path) -> None:
    rc, out, err = _eps(tmp_path, "execute", "gpu-1", "--duration", "10m", "--", "sleep 60")
    assert rc == 0, (out, err)
    d = out.split()[0]
    rc, out, err = _eps(tmp_path, "ssh", d, "--", "echo $SLURM_JOB_ID; pwd")
    assert rc == 0, (out, err)
    rc, out, err = _eps(tmp_path, "cancel", d)
    assert rc == 0, (out, err)
    assert live_jobs(f"eps-{d}") == []
