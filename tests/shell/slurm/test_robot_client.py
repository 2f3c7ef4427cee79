"""A robot login without a cluster (``[[clusters]] access = "robot"``): the allowlist, the
estimate without the cluster's clock, the squeue formats a forced command accepts, the grants
from the config, ``eps check`` and ``eps simulate`` through a recording runner, and the job's
files moved by a real (local) rsync.  ``test_robot_login.py`` runs the same against the real
cluster through a forced-command key on the test sshd."""

from __future__ import annotations

import json
import shlex
import stat
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from returns.result import Failure, Success

from eps.core.clusters import ROBOT_COMMANDS, robot_refusal
from eps.core.jobscript import LAYOUT, JobSpec, render_jobscript
from eps.core.model import CapacitySnapshot, ClusterState, Job, evolve
from eps.core.outcome import FailureKind
from eps.core.router import plan
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY, FELLOWS
from eps.shell.cli import main
from eps.shell.config.load import load_settings
from eps.shell.config.snapshots import grants_to_data
from eps.shell.lanes import LaneOptions, Lanes
from eps.shell.lanes.slurm.cli import GONE, NOT_ALLOWED, SlurmClient, start_estimate_s
from eps.shell.remote import robot
from eps.shell.remote.errors import RemoteErrorKind
from eps.shell.remote.process import Completed
from eps.shell.remote.ssh import Remote, remote_argv, run_remote, stream_remote
from eps.shell.remote.sync import upload_argv

ROOT = Path(__file__).parents[3]
#: What a forced command refuses in a command line (tests/shell/ssh/robot_login.sh).
FORBIDDEN = (";", "|", "&", "`", "$(")


class Robot:
    """A runner behind a robot login: records each command line the login would receive and
    answers from a script keyed by its first word; anything else fails the test."""

    def __init__(self, answers: dict[str, list[tuple[int, str, str]]]) -> None:
        self.answers = answers
        self.lines: list[str] = []

    def __call__(self, argv: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]:
        assert argv[0] == "ssh", argv
        line = argv[-1]
        self.lines.append(line)
        first = shlex.split(line)[0]
        assert first in ROBOT_COMMANDS and not any(c in line for c in FORBIDDEN), line
        return self.answers[first].pop(0)


def never(argv: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]:
    raise AssertionError(f"nothing may run here: {argv}")


# --- the allowlist -----------------------------------------------------------------------------


def test_the_allowlist_is_one_table_and_refuses_everything_else() -> None:
    assert ROBOT_COMMANDS == ("sbatch", "scancel", "squeue", "scp", "rsync")
    for command in ROBOT_COMMANDS:
        assert robot_refusal([command, "-h"], "nibi") is None
    for argv in (["sacct", "-X"], ["sacctmgr", "show", "qos"], ["bash", "-c", "date"], ["date"], []):
        said = robot_refusal(argv, "nibi")
        assert said is not None and said.startswith("nibi is a robot login") and "\n" not in said


@pytest.mark.parametrize(
    ("call", "command"),
    [
        (lambda c: c.history_by_name("eps-d1", 0.0), "sacct"),
        (lambda c: c.accounting(["-X"]), "sacct"),
        (lambda c: c.discover_grants("me"), "sacctmgr"),
    ],
)
def test_the_client_refuses_a_forbidden_command_without_running_it(call: Any, command: str) -> None:
    result = call(SlurmClient(never, prefix=("ssh", "nibi-robot"), robot="nibi"))
    assert isinstance(result, Failure)
    failure = result.failure()
    assert (failure.kind, failure.code) == (FailureKind.INVALID_REQUEST, "robot_login")
    assert f"never runs {command!r}" in failure.message


def test_a_forbidden_command_is_not_run_even_by_the_runner_itself() -> None:
    client = SlurmClient(never, prefix=("ssh", "nibi-robot"), robot="nibi")
    rc, out, err = client._run(["bash", "-c", "sbatch --test-only; date"])
    assert (rc, out) == (NOT_ALLOWED, "") and "robot login" in err


def test_squeue_through_a_robot_login_holds_no_bar_and_a_gone_job_asks_no_sacct() -> None:
    listed = "5@RUNNING@None@high-eur@eps-abc-me\n6@PENDING@Priority@low-eur@other@x\n"
    runner = Robot({"squeue": [(0, "12@PENDING@QOSMaxGRESPerUser@high-eur\n", ""),
                               (1, "", "slurm_load_jobs error: Invalid job id specified"), (0, listed, "")]})
    client = SlurmClient(runner, prefix=("ssh", "nibi-robot"), robot="nibi")
    status = client.poll("12").unwrap()
    assert (status.state, status.reason, status.qos) == ("PENDING", "QOSMaxGRESPerUser", "high-eur")
    assert client.poll("13").unwrap().state == GONE  # no sacct: the wrapper's files tell the end
    (found,) = client.list_by_name("eps-abc").unwrap()
    assert (found.job_id, found.state, found.name) == ("5", "RUNNING", "eps-abc-me")
    assert runner.lines[0] == "squeue -h -j 12 -o %i@%T@%r@%q"
    assert runner.lines[2] == "squeue -h -r --me -o %i@%T@%r@%q@%j"


# --- the start estimate without the cluster's clock --------------------------------------------


def test_the_estimate_is_sbatch_test_only_alone_against_this_machines_clock() -> None:
    said = "sbatch: Job 7 to start at 2026-03-01T10:05:00 using 1 processors on nodes n1 in partition general"
    runner = Robot({"sbatch": [(0, "", said)]})
    now = datetime(2026, 3, 1, 10, 0, 0).timestamp()
    client = SlurmClient(runner, prefix=("ssh", "nibi-robot"), robot="nibi", wall=lambda: now)
    assert client.start_estimate("#!/bin/bash\ntrue\n") == 300
    assert runner.lines == ["sbatch --test-only"]  # no bash -c, no date


def test_the_estimate_against_a_given_clock_is_never_negative_and_needs_a_start() -> None:
    text = "sbatch: Job 7 to start at 2026-03-01T10:05:00 using 1 processors"
    assert start_estimate_s(text, now=datetime(2026, 3, 1, 10, 4, 30)) == 30
    assert start_estimate_s(text, now=datetime(2026, 3, 1, 11, 0, 0)) == 0  # a clock ahead: at once
    assert start_estimate_s("sbatch: error: no estimate", now=datetime(2026, 3, 1)) is None
    assert start_estimate_s(text) is None  # the full login's form needs the cluster's own time after it
    assert start_estimate_s(text + "\n2026-03-01T10:04:00\n") == 60


def test_the_plan_says_a_robot_logins_estimate_has_no_clock_correction() -> None:
    nibi = evolve(FELLOWS, name="nibi", access="robot")
    policy = evolve(DEFAULT_POLICY, clusters=(FELLOWS, nibi), gpu_lane_order=("fellows", "nibi", "gcp"))
    grants = evolve(DEFAULT_GRANTS, clusters=(*DEFAULT_GRANTS.clusters, ("nibi", DEFAULT_GRANTS.tiers("fellows"))))
    snap = CapacitySnapshot(clusters=(ClusterState("fellows", start_estimate_s=900),
                                      ClusterState("nibi", start_estimate_s=60)))  # fmt: skip
    route = plan(Job("gpu-1", 3600), snap, grants, None, policy=policy)
    (note,) = [n for n in route.notes if "start estimates" in n]
    assert "nibi in 60 s (no clock correction" in note
    assert "fellows in 900 s," in note or note.endswith("fellows in 900 s")
    assert route.rungs[0].lane == "nibi"


# --- the transport: no shell line, rsync that makes its own tree ------------------------------


def test_a_robot_remote_runs_no_shell_line() -> None:
    remote = Remote.via(["ssh", "nibi-robot"], robot=True)
    ran: list[Sequence[str]] = []

    def runner(argv: Sequence[str], *, stdin: bytes | None = None, timeout_s: float | None = None) -> Completed:
        ran.append(argv)
        return Completed(0)

    failed = run_remote(remote, "cat run.sh", runner=runner)
    assert isinstance(failed, Failure) and failed.failure().kind is RemoteErrorKind.COMMAND
    assert "robot login" in failed.failure().message
    assert isinstance(stream_remote(remote, "tail -F job.log", lambda _: None, streamer=lambda *_: 0), Failure)
    with pytest.raises(ValueError, match="robot login"):
        remote_argv(remote, "true")
    assert ran == []


def test_an_upload_through_a_robot_login_runs_rsync_alone() -> None:
    full = upload_argv(Remote.via(["ssh", "login"]), "/src", "/dst/d/0")
    assert any(a.startswith("--rsync-path=mkdir -p") for a in full)
    argv = upload_argv(Remote.via(["ssh", "login"], robot=True), "/src", "/", implied_dirs=False)
    assert not any(a.startswith("--rsync-path") for a in argv) and "--no-implied-dirs" in argv


def test_the_tree_lands_where_a_destination_always_exists() -> None:
    assert robot.anchor("/scratch/me/eps-runs/d1/0") == ("/", "scratch/me/eps-runs/d1/0")
    assert robot.anchor("eps-runs/d1/0.r1") == (".", "eps-runs/d1/0.r1")
    assert robot.anchor("~/eps-runs/d1/0") == (".", "eps-runs/d1/0")


def test_stage_probe_follow_and_cancel_by_rsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a robot site on this machine (a real rsync, no login): the dispatch root and the
    directories above it are made by the transfer; the record, the log and the cancel mark
    move by rsync alone."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir(mode=0o751)
    remote = Remote.via([], robot=True)
    root = "runs/deep/er1/0"
    spec = JobSpec(("true",), "er1", 60)
    files = [(LAYOUT.script, render_jobscript(spec).encode(), 0o644), (LAYOUT.env, b"A=1\n", 0o600)]
    assert robot.stage(remote, root, files) == Success(None)
    here = tmp_path / root
    assert (here / LAYOUT.script).read_bytes() == files[0][1]
    assert stat.S_IMODE((here / LAYOUT.env).stat().st_mode) == 0o600
    assert stat.S_IMODE(here.stat().st_mode) == stat.S_IMODE(here.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "runs").stat().st_mode) == 0o751  # a directory that was there: as it was

    assert robot.probe(remote, "runs/deep/nothing/0").unwrap().exists is False
    before = robot.probe(remote, root).unwrap()
    assert before.exists and not before.launched and not before.ended
    (here / LAYOUT.pid).write_text("4242\n")
    (here / LAYOUT.started_at).write_text("1700000000\n")
    (here / LAYOUT.log).write_bytes(b"line 1\n")
    running = robot.probe(remote, root).unwrap()
    assert (running.pid, running.started_at, running.alive, running.ended) == (4242, 1700000000, False, False)
    assert robot.started_since(remote, "runs/deep/er1", 1_699_999_000).unwrap() is True
    assert robot.started_since(remote, "runs/deep/er1", 1_700_000_100).unwrap() is False
    assert robot.started_since(remote, "runs/deep/never", 0).unwrap() is False

    assert robot.leave_cancel_mark(remote, root) == Success(None)
    assert (here / LAYOUT.cancel).exists()

    got: list[bytes] = []
    rounds = iter([b"line 2\n", b"line 3\n"])

    def sleep(_: float) -> None:  # the job writes on between two looks, then ends
        chunk = next(rounds, None)
        if chunk is None:
            (here / LAYOUT.status).write_text("exited\n")
            (here / LAYOUT.exit_code).write_text("0\n")
            return
        with open(here / LAYOUT.log, "ab") as fh:
            fh.write(chunk)

    assert robot.follow(remote, root, got.append, poll_s=0, sleep=sleep) == Success(0)
    assert b"".join(got) == b"line 1\nline 2\nline 3\n"
    ended = robot.probe(remote, root).unwrap()
    assert (ended.exit_code, ended.ended) == (0, True)


# --- the grants come from the config, never sacctmgr -------------------------------------------


def _config(tmp: Path, body: str) -> dict[str, str]:
    cfg = tmp / "config.toml"
    cfg.write_text(body)
    return {"HOME": str(tmp), "PATH": "/usr/bin:/bin", "EPS_STATE_DIR": str(tmp / "state"), "EPS_CONFIG": str(cfg),
            "USER": "me"}  # fmt: skip


NIBI = """\
[lanes]
gpu = ["nibi", "gcp"]
[[clusters]]
name = "nibi"
login = ["ssh", "nibi-robot"]
access = "robot"
qos_ladder = ["def-me", "rrg-me"]
partition = ""
grants = "nibi-grants.json"
"""


def test_a_robot_clusters_grants_come_from_its_file_else_the_built_in_ones(tmp_path: Path) -> None:
    (tmp_path / "nibi-grants.json").write_text(json.dumps(
        {"nibi-slurm": [{"name": "def-me", "priority": 10, "max_wall": "7-00:00:00"}]}))  # fmt: skip
    env = _config(tmp_path, NIBI + '[[clusters]]\nname = "fellows"\nlogin = ["ssh", "f-robot"]\naccess = "robot"\n')
    settings = load_settings(env)
    assert settings.cluster_access("nibi").grants == str(tmp_path / "nibi-grants.json")  # beside the config
    lanes = Lanes(settings, LaneOptions(slurm_runner=never, env=env))
    grants, down = lanes.discover_grants(DEFAULT_GRANTS)
    assert down == ()
    assert [t.name for t in grants.tiers("nibi")] == ["def-me"]  # the file's only entry, under our name
    assert grants.tiers("fellows") == DEFAULT_GRANTS.tiers("fellows")  # no file: the built-in table
    rc = main(["plan", "gpu-1", "--duration", "1h", "--json"], env=env)
    assert rc == 0
    (tmp_path / "nibi-grants.json").write_text("{not json")
    grants, down = Lanes(settings, LaneOptions(slurm_runner=never, env=env)).discover_grants(DEFAULT_GRANTS)
    assert [d.lane for d in down] == ["nibi"] and "grants" in (down[0].fix or "")


def test_the_plan_reads_the_configured_grants(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "nibi-grants.json").write_text(json.dumps(
        {"nibi": [{"name": "def-me", "priority": 10}, {"name": "rrg-me", "priority": 20}]}))  # fmt: skip
    env = _config(tmp_path, NIBI)
    assert main(["plan", "gpu-1", "--duration", "1h", "--json"], env=env) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(r["lane"], r["qos"]) for r in doc["rungs"] if r["lane"] == "nibi"] == [("nibi", "def-me"),
                                                                                   ("nibi", "rrg-me")]  # fmt: skip


# --- eps check and eps simulate through a robot login ------------------------------------------


def test_check_asks_squeue_and_sbatch_test_only_and_says_what_it_cannot_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grants = tmp_path / "g.json"
    grants.write_text(json.dumps(grants_to_data(DEFAULT_GRANTS)))
    env = _config(tmp_path, f'[[clusters]]\nname = "fellows"\nlogin = ["ssh", "f-robot"]\naccess = "robot"\n'
                            f'grants = "{grants}"\n')  # fmt: skip
    ok = (0, "", "sbatch: Job 3 to start at 2026-01-01T00:00:00 using 1 processors on nodes n1")
    runner = Robot({"squeue": [(0, "", "")], "sbatch": [ok, ok, ok]})
    rc = main(["check", "--json"], env=env, lane_options=LaneOptions(slurm_runner=runner))
    doc = json.loads(capsys.readouterr().out)
    schema = json.loads((ROOT / "eps" / "schemas" / "check.json").read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    (row,) = [r for r in doc["lanes"] if r["lane"] == "fellows"]
    assert row["usable"] and row["reachable"] and row["problem"] is None, row
    assert [t["qos"] for t in row["tiers"]] == ["high-eur", "normal-eur", "low-eur"]
    assert "robot login" in row["detail"] and str(grants) in row["detail"]
    assert any("sacctmgr" in line and str(grants) in line for line in row["not_checked"])
    assert [shlex.split(line)[0] for line in runner.lines] == ["squeue", "sbatch", "sbatch", "sbatch"]
    assert rc == 1 and doc["usable"]["gpu"] == ["fellows"]  # no CPU lane is set up in this test


def test_check_without_grants_for_a_laddered_robot_cluster_names_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = _config(tmp_path, NIBI.replace('grants = "nibi-grants.json"\n', ""))
    runner = Robot({"squeue": [(0, "", "")]})
    main(["check", "--json"], env=env, lane_options=LaneOptions(slurm_runner=runner))
    (row,) = [r for r in json.loads(capsys.readouterr().out)["lanes"] if r["lane"] == "nibi"]
    assert not row["usable"] and row["problem"]["code"] == "misconfigured"
    assert 'grants = "PATH"' in row["fix"]


def test_simulate_on_a_robot_cluster_uses_the_ledger_alone_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = _config(tmp_path, '[[clusters]]\nname = "fellows"\nlogin = ["ssh", "f-robot"]\naccess = "robot"\n')
    rc = main(["simulate", "--json"], env=env, lane_options=LaneOptions(slurm_runner=never))
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    schema = json.loads((ROOT / "eps" / "schemas" / "simulate.json").read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    assert doc["source"]["kind"] == "ledger" and "no sacct" in doc["source"]["note"]
    assert main(["simulate"], env=env, lane_options=LaneOptions(slurm_runner=never)) == 0
    assert "the ledger alone (a robot login runs no sacct" in capsys.readouterr().out
    assert main(["simulate", "--no-ledger"], env=env, lane_options=LaneOptions(slurm_runner=never)) != 0
    assert "robot login" in capsys.readouterr().err


def test_a_config_refuses_an_unknown_access_word_and_a_blank_grants_path(tmp_path: Path) -> None:
    from eps.shell.config.settings import ConfigError

    for line, said in (('access = "shell"', "access must be"), ('grants = " "', "grants must be")):
        env = _config(tmp_path, f'[[clusters]]\nname = "nibi"\n{line}\n')
        with pytest.raises(ConfigError, match=said):
            load_settings(env)
