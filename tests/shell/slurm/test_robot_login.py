"""A robot login to the real SLURM cluster (``[[clusters]] access = "robot"``, issue 31).

The login is a key in the test sshd's authorized_keys whose forced command is
``tests/shell/ssh/robot_login.sh``: it logs every command it is asked to run and runs only
sbatch, scancel, squeue, scp and rsync (through ``bash -c``), refusing the rest and anything
holding a shell metacharacter, as a DRAC automation key does.  eps reaches the cluster only
through it (its config's ``login``), and ``eps check``, ``eps plan``, ``eps execute --wait``
(the outputs back), ``eps logs``, ``eps cancel`` and ``eps status`` must all work, ``eps ssh``
must say in one line that there is no shell, and the login's log must hold allowlisted
commands only.  The dispatch roots are under the test's own directory: this machine is also
the cluster's compute node, and root's batch jobs read them there.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from slurm_support import FIRST_CAP_S, NEXT_CAP_S, live_jobs

from eps.core.clusters import ROBOT_COMMANDS
from eps.core.tables import DEFAULT_GRANTS
from eps.shell.cli import main
from eps.shell.config.snapshots import grants_to_data

pytestmark = pytest.mark.slurm

SSH_DIR = Path(__file__).parents[1] / "ssh"
ROBOT_SH = SSH_DIR / "robot_login.sh"
#: What the forced command refuses anywhere in a command line.
METACHARACTERS = (";", "|", "&", "`", "$(")


def _ssh_support() -> ModuleType:
    if "ssh_support" in sys.modules:
        return sys.modules["ssh_support"]
    spec = importlib.util.spec_from_file_location("ssh_support", SSH_DIR / "ssh_support.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ssh_support"] = module
    spec.loader.exec_module(module)
    return module


class RobotLogin:
    """eps in ``tmp`` with one cluster, ``fellows``, reached only through the robot key."""

    def __init__(self, tmp: Path, key: Path, log: Path) -> None:
        self.tmp, self.log = tmp, log
        ssh = _ssh_support()
        login = ["ssh", "-F", "none", "-p", str(ssh.LOGIN_PORT), "-i", str(key), "-o", "IdentitiesOnly=yes",
                 "-o", f"UserKnownHostsFile={tmp / 'known_hosts'}", "-o", "GlobalKnownHostsFile=/dev/null",
                 "-o", "StrictHostKeyChecking=accept-new", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                 "-o", "LogLevel=ERROR", f"{ssh.USER}@{ssh.LOGIN_HOST}"]  # fmt: skip
        (tmp / "grants.json").write_text(json.dumps(grants_to_data(DEFAULT_GRANTS)))
        self.config = tmp / "config.toml"
        self.config.write_text(
            "[jobs]\nsupervise = 'inline'\nwait_poll_s = 0.2\n"
            f'[[clusters]]\nname = "fellows"\naccess = "robot"\nlogin = {json.dumps(login)}\n'
            f'work_root = "{tmp / "shared"}"\ngrants = "grants.json"\nsubmit_gap = 0.2\n'
        )
        self.env = {
            "EPS_STATE_DIR": str(tmp / "state"),
            "EPS_CONFIG": str(self.config),
            "HOME": str(tmp),
            "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
            "USER": "root",
            "EPS_FELLOWS_QUEUE_WAIT_SECONDS": str(FIRST_CAP_S),
            "EPS_FELLOWS_NEXT_QUEUE_WAIT_SECONDS": str(NEXT_CAP_S),
        }

    def eps(self, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(argv), env=self.env)
        return rc, out.getvalue(), err.getvalue()

    def commands(self) -> list[str]:
        """Every command the robot login was asked to run, in order."""
        return self.log.read_text().splitlines() if self.log.exists() else []

    def only_allowed(self) -> list[str]:
        """The login's log holds allowlisted commands only (none refused); the first words seen."""
        lines = self.commands()
        assert lines, "the robot login was never used"
        for line in lines:
            assert shlex.split(line)[0] in ROBOT_COMMANDS, line
            assert not any(c in line for c in METACHARACTERS), line
        return sorted({shlex.split(line)[0] for line in lines})


@pytest.fixture
def robot(slurm_cluster: Path, tmp_path: Path) -> Iterator[RobotLogin]:
    ssh = _ssh_support()
    ssh.start_sshd()
    key, log = tmp_path / "robot_key", tmp_path / "robot.log"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "eps-robot-test", "-f", str(key)],
                   check=True, capture_output=True, timeout=30)  # fmt: skip
    public = Path(f"{key}.pub").read_text().strip()
    line = f'restrict,command="bash {ROBOT_SH} {log}",{ssh.PLAIN_LOGIN.strip()} {public}'
    ssh.authorize(line)
    try:
        yield RobotLogin(tmp_path, key, log)
    finally:
        ssh.revoke(line)


def test_the_forced_command_refuses_what_is_not_allowed(robot: RobotLogin) -> None:
    login = json.loads(robot.config.read_text().split("login = ", 1)[1].split("\n", 1)[0])
    for command in ("sacct -X", "bash -c date", "squeue -h; date", "squeue -o '%i|%T'"):
        done = subprocess.run([*login, command], capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 1 and done.stderr.startswith("robot login: refused"), (command, done)
        assert done.stderr.count("\n") == 1
    done = subprocess.run([*login, "squeue -h --me"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done
    assert robot.commands() == ["sacct -X", "bash -c date", "squeue -h; date", "squeue -o '%i|%T'", "squeue -h --me"]


def test_check_plan_and_simulate_through_a_robot_login(robot: RobotLogin) -> None:
    rc, out, err = robot.eps("check", "--json", "--timeout", "60")
    doc = json.loads(out)
    (row,) = [r for r in doc["lanes"] if r["lane"] == "fellows"]
    assert row["usable"] and row["reachable"] and row["problem"] is None, (row, err)
    assert [(t["qos"], t["ok"]) for t in row["tiers"]] == [("high-eur", True), ("normal-eur", True), ("low-eur", True)]
    assert "robot login: squeue answered" in row["detail"]
    assert any("no sacctmgr" in n and "grants.json" in n for n in row["not_checked"]), row
    assert doc["usable"]["gpu"] == ["fellows"]
    assert rc == 1  # no CPU lane (GCP, RunPod) is set up in this test: check is not ok for that alone

    rc, out, err = robot.eps("plan", "gpu-1", "--duration", "10m", "--json")
    assert rc == 0, err
    plan = json.loads(out)
    assert [(r["lane"], r["qos"]) for r in plan["rungs"]][:3] == [
        ("fellows", "high-eur"), ("fellows", "normal-eur"), ("fellows", "low-eur")]  # fmt: skip
    assert plan["can_start"] is True

    rc, out, err = robot.eps("simulate", "--json")
    assert rc == 0, err
    assert json.loads(out)["source"]["kind"] == "ledger"
    assert robot.only_allowed() == ["sbatch", "squeue"]  # check's squeue and sbatch --test-only; nothing more


def test_execute_wait_brings_the_output_back(robot: RobotLogin) -> None:
    rc, out, err = robot.eps("execute", "gpu-1", "--duration", "10m", "--wait", "--",
                             "echo hi > $EPS_OUTPUT_DIR/out.txt; echo done")  # fmt: skip
    assert rc == 0, (out, err)
    rc, out, err = robot.eps("status", "--json")
    assert rc == 0, err
    [row] = json.loads(out)["dispatches"]
    d = row["dispatch"]
    assert row["state"] == "ended" and row["handle"]["lane"] == "fellows", row
    assert (robot.tmp / "state" / "outputs" / d / "out.txt").read_text() == "hi\n"
    rc, log, err = robot.eps("logs", d)
    assert rc == 0 and "done" in log, (log, err)
    assert live_jobs(f"eps-{d}") == []
    seen = robot.only_allowed()
    assert {"rsync", "sbatch", "squeue"} <= set(seen), seen
    assert any(line.startswith("rsync --server") for line in robot.commands())


def test_cancel_a_running_job_and_no_shell(robot: RobotLogin) -> None:
    rc, out, err = robot.eps("execute", "gpu-1", "--duration", "10m", "--", "echo started; sleep 300")
    assert rc == 0, (out, err)
    d = out.split()[0]
    assert [state for _, state, _ in live_jobs(f"eps-{d}")] == ["RUNNING"]
    rc, out, err = robot.eps("logs", d)
    assert rc == 0, err
    rc, out, err = robot.eps("ssh", d)
    assert rc != 0 and "robot login" in err and "no shell" in err and err.strip().count("\n") == 0, (rc, out, err)
    rc, out, err = robot.eps("cancel", d)
    assert rc == 0, (out, err)
    assert live_jobs(f"eps-{d}") == []
    rc, out, err = robot.eps("status", d, "--json")
    assert rc == 0, err
    [row] = json.loads(out)["dispatches"]
    assert row["state"] == "cancelled", row
    assert "started" in (robot.tmp / "state" / "logs" / f"{d}.log").read_text()
    seen = robot.only_allowed()
    assert {"rsync", "sbatch", "scancel", "squeue"} <= set(seen), seen
