"""Issue 20 (items 1 and 3): the retry policy wherever a job is described: the flags, the
job file's ``[retry]`` table and ``sync_every``, the Python API, ``[jobs] sync_every_s``
in the config (job's own > config > table), ``[jobs] wedge_s``, and ``eps plan`` showing
the policy in effect.  A refused value is one line, exit 2, and nothing recorded."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from test_usability import bare_env, run, set_up_env, valid

from eps import api
from eps.core.healing import RetryOn, job_max_restarts, job_retry, policy_of
from eps.core.model import Job
from eps.core.tables import HEALING
from eps.shell.cli.main import request_of
from eps.shell.cli.parser import build
from eps.shell.config.load import load_settings
from eps.shell.config.settings import ConfigError
from eps.shell.request.jobfile import load_job_file
from eps.shell.run.follow import sync_every

RETRY_FILE = """intent = "cpu-small"
duration = "30m"
sync_every = "5m"

[retry]
on = ["interruption", "error"]
for = "6h"
max_restarts = 5
"""


def _job(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(text)
    return path


def _config(tmp_path: Path, text: str) -> dict[str, str]:
    cfg = tmp_path / "config.toml"
    cfg.write_text(text)
    return bare_env(tmp_path, EPS_CONFIG=str(cfg))


# --- the core checks every front door shares ------------------------------------------------


def test_events_are_a_comma_string_or_a_list_and_not_yet_retried_ones_are_refused() -> None:
    assert job_retry("error, interruption") == ("error", "interruption")
    assert job_retry(["interruption", "error", "interruption"]) == ("interruption", "error")
    for bad, says in [("preempt", "unknown retry event 'preempt'"), ([], "no retry event given"),
                      (["interruption,error"], "a list of them"), (3, "a list of them")]:  # fmt: skip
        with pytest.raises(ValueError, match=says):
            job_retry(bad)  # type: ignore[arg-type]
    assert job_max_restarts(0) == 0 and job_max_restarts(1000) == 1000
    for n in (-1, 1001, True, "3"):
        with pytest.raises(ValueError, match="max restarts"):
            job_max_restarts(n)  # type: ignore[arg-type]


def test_sync_every_is_the_jobs_own_then_the_configs_then_the_tables() -> None:
    config = HEALING._replace(sync_every_s=120)
    assert sync_every(Job("cpu-small")) == HEALING.sync_every_s == 600
    assert sync_every(Job("cpu-small"), config) == 120
    assert sync_every(Job("cpu-small", sync_every_s=30), config) == 30
    assert sync_every(Job("cpu-small", sync_every_s=0), config) == 0  # the job turned it off
    assert sync_every(Job("cpu-small"), HEALING._replace(sync_every_s=0)) == 0  # the config turned it off


@pytest.mark.parametrize(
    ("job", "line"),
    [
        (Job("cpu-small", restartable=True), "retry: interruption (restartable), at most 3 restarts within 1d; "
         "outputs synced every 10m"),
        (Job("cpu-small"), "retry: nothing (not restartable); outputs synced every 10m"),
        (Job("cpu-small", retry=("error", "interruption"), max_restarts=1, retry_for_s=7200, sync_every_s=0),
         "retry: interruption, error, at most 1 restart within 2h; outputs not synced while it runs"),
    ],
)  # fmt: skip
def test_the_policy_in_one_line(job: Job, line: str) -> None:
    assert policy_of(job).describe() == line


# --- the job file ---------------------------------------------------------------------------


def test_a_job_files_retry_table_and_sync_every(tmp_path: Path) -> None:
    f = load_job_file(str(_job(tmp_path, RETRY_FILE)))
    assert (f.retry, f.retry_for_s, f.max_restarts, f.sync_every_s) == (("interruption", "error"), 21600, 5, 300)
    f = load_job_file(str(_job(tmp_path, 'intent = "cpu-small"\nsync_every = 0\n[retry]\nmax_restarts = 0\n')))
    assert (f.retry, f.retry_for_s, f.max_restarts, f.sync_every_s) == (None, None, 0, 0)
    assert load_job_file(str(_job(tmp_path, 'intent = "cpu-small"\n'))).retry is None


def test_flags_override_the_files_retry_keys_one_by_one(tmp_path: Path) -> None:
    path = str(_job(tmp_path, RETRY_FILE))

    def knobs(*flags: str) -> tuple[object, ...]:
        job = request_of(build().parse_args(["plan", "--job", path, *flags])).job
        return job.retry, job.retry_for_s, job.max_restarts, job.sync_every_s

    assert knobs() == (("interruption", "error"), 21600, 5, 300)
    assert knobs("--retry", "error", "--sync-every", "0") == (("error",), 21600, 5, 0)
    assert knobs("--retry-for", "1h", "--max-restarts", "2") == (("interruption", "error"), 3600, 2, 300)


BAD_RETRY_FILES = [
    ('[retry]\non = ["preempt"]\n', "unknown retry event 'preempt'", "@ $.retry.on"),
    ('[retry]\non = "interruption"\n', "expected list[str]", "@ $.retry.on"),
    ("[retry]\non = []\n", "no retry event given", "@ $.retry.on"),
    ('[retry]\nevents = ["error"]\n', "extra fields found (events)", "@ $.retry"),
    ('[retry]\nfor_ = "1h"\n', "extra fields found (for_)", "@ $.retry"),
    ('[retry]\nfor = "soon"\n', "bad duration 'soon'", "@ $.retry.for"),
    ("[retry]\nfor = true\n", "expected str | int | None", "@ $.retry.for"),
    ("[retry]\nmax_restarts = -1\n", "max restarts must be 0..1000", "@ $.retry.max_restarts"),
    ('[retry]\nmax_restarts = "3"\n', "expected int", "@ $.retry.max_restarts"),
    ("retry = 3\n", "retry is a table", "@ $.retry"),
    ('sync_every = "often"\n', "bad duration 'often'", "@ $.sync_every"),
    ('sync_every = "-5m"\n', "must not be negative", "@ $.sync_every"),
]


@pytest.mark.parametrize(("text", "says", "where"), BAD_RETRY_FILES)
def test_a_bad_retry_in_a_job_file_is_one_line_naming_the_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, says: str, where: str
) -> None:
    job = _job(tmp_path, 'intent = "cpu-small"\n' + text)
    rc, out, err = run(capsys, ["plan", "--job", str(job)], set_up_env(tmp_path))
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert says in err and err.rstrip().endswith(where) and str(job) in err


@pytest.mark.parametrize(
    ("text", "flags", "says"),
    [
        ("[retry]\nmax_restarts = 1001\n", [], "max restarts must be 0..1000"),
        ('[retry]\non = ["preempt"]\n', [], "unknown retry event 'preempt'"),
        ("", ["--retry", "interruption,preempt"], "unknown retry event 'preempt'"),
        ("", ["--sync-every", "soon"], "bad duration 'soon'"),
    ],
)
def test_execute_refuses_a_bad_retry_and_records_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, flags: list[str], says: str
) -> None:
    env = _config(tmp_path, '[jobs]\nsupervise = "inline"\n')  # nothing configured: nothing could start anyway
    job = _job(tmp_path, 'intent = "cpu-small"\nduration = "20s"\n' + text)
    rc, out, err = run(capsys, ["execute", "--job", str(job), *flags, "--", "true"], env)
    assert rc == 2 and out == "" and err.count("\n") == 1 and says in err, err
    _nothing_recorded(tmp_path)


def test_no_capacity_is_taken_at_every_front_door_and_needs_a_supervisor(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The flag, the job file and the API take ``no-capacity``; waiting for capacity needs a
    supervisor, so an inline config refuses the execute in one line and records nothing."""
    assert job_retry("interruption,no-capacity") == ("interruption", "no-capacity")
    env = _config(tmp_path, '[jobs]\nsupervise = "inline"\n')
    rc, out, err = run(capsys, ["plan", "cpu-small", "--duration", "10m", "--retry", "no-capacity"], env)
    assert rc == 0 and "retry: no-capacity" in out, (out, err)
    job = _job(tmp_path, 'intent = "cpu-small"\nduration = "20s"\n[retry]\non = ["no-capacity"]\n')
    rc, out, err = run(capsys, ["execute", "--job", str(job), "--", "true"], env)
    assert rc == 2 and out == "" and err.count("\n") == 1 and "needs a supervisor" in err, err
    _nothing_recorded(tmp_path)
    assert api.Job("cpu-small", retry=("no-capacity",), settings_env=env).retry == ("no-capacity",)


def _nothing_recorded(tmp_path: Path) -> None:
    ledger = tmp_path / "state" / "ledger.sqlite3"
    if ledger.exists():
        with sqlite3.connect(ledger) as db:
            assert db.execute("SELECT count(*) FROM dispatches").fetchone()[0] == 0


# --- the config -----------------------------------------------------------------------------


def test_jobs_sync_every_s_in_the_config_is_the_default_a_job_overrides(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert load_settings(bare_env(tmp_path)).jobs.sync_every_s == HEALING.sync_every_s
    env = _config(tmp_path, "[jobs]\nsync_every_s = 120\n")
    assert load_settings(env).jobs.healing().sync_every_s == 120
    rc, out, _ = run(capsys, ["plan", "cpu-small", "--duration", "30m", "--json"], env)
    assert rc == 0 and json.loads(out)["retry"]["sync_every_s"] == 120
    rc, out, _ = run(capsys, ["plan", "cpu-small", "--duration", "30m", "--sync-every", "30s", "--json"], env)
    assert rc == 0 and json.loads(out)["retry"]["sync_every_s"] == 30
    env = _config(tmp_path, "[jobs]\nsync_every_s = 0\n")
    rc, out, _ = run(capsys, ["plan", "cpu-small", "--duration", "30m"], env)
    assert rc == 0 and "retry: nothing (not restartable); outputs not synced while it runs" in out


@pytest.mark.parametrize(
    ("value", "says"),
    [("-1", "must not be negative"), ("700000", "at most 604800"), ('"10m"', "expected int"), ("true", "expected int")],
)
def test_a_bad_jobs_sync_every_s_is_one_line(tmp_path: Path, value: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(_config(tmp_path, f"[jobs]\nsync_every_s = {value}\n"))
    text = str(info.value)
    assert says in text and "$.jobs.sync_every_s" in text and "\n" not in text


def test_jobs_wedge_s_in_the_config_is_the_wedge_the_supervisor_waits(tmp_path: Path) -> None:
    assert load_settings(bare_env(tmp_path)).jobs.healing().wedge_s == HEALING.wedge_s == 900
    assert load_settings(_config(tmp_path, "[jobs]\nwedge_s = 5\n")).jobs.healing().wedge_s == 5


def test_jobs_capacity_wait_s_is_the_first_wait_for_capacity(tmp_path: Path) -> None:
    from eps.core.healing import WaitThenPlan, after_no_capacity
    from eps.core.model import Job

    job = Job("cpu-small", 600, retry=("no-capacity",))
    healing = load_settings(_config(tmp_path, "[jobs]\ncapacity_wait_s = 5\n")).jobs.healing()
    got = [after_no_capacity(job, waits=n, elapsed_s=0, table=healing) for n in range(4)]
    assert [g.seconds for g in got if isinstance(g, WaitThenPlan)] == [5, 10, 20, 40]
    assert load_settings(bare_env(tmp_path)).jobs.healing().capacity_wait_first_s == HEALING.capacity_wait_first_s
    big = load_settings(_config(tmp_path, "[jobs]\ncapacity_wait_s = 3600\n")).jobs.healing()
    assert after_no_capacity(job, waits=0, elapsed_s=0, table=big) == WaitThenPlan(
        3600, "no capacity now; planning again in 3600 s (round 1)")  # the maximum is never below the first wait


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("wedge_s", "0", "must be more than 0"),
        ("wedge_s", "700000", "at most 604800"),
        ("wedge_s", '"15m"', "expected int"),
        ("capacity_wait_s", "0", "at least 1"),
        ("capacity_wait_s", "100000", "at most 86400"),
        ("capacity_wait_s", '"1m"', "expected int"),
    ],
)
def test_a_bad_jobs_wait_setting_is_one_line(tmp_path: Path, key: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(_config(tmp_path, f"[jobs]\n{key} = {value}\n"))
    text = str(info.value)
    assert says in text and f"$.jobs.{key}" in text and "\n" not in text


# --- eps plan -------------------------------------------------------------------------------


def test_plan_shows_the_policy_in_effect(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    env = set_up_env(tmp_path)
    rc, out, _ = run(capsys, ["plan", "cpu-small", "--duration", "3h", "--restartable", "--wide"], env)
    assert rc == 0
    assert "retry: interruption (restartable), at most 3 restarts within 1d; outputs synced every 10m" in out
    rc, out, _ = run(capsys, ["plan", "--job", str(_job(tmp_path, RETRY_FILE)), "--json"], env)
    doc = json.loads(out)
    valid(doc, "plan")
    assert rc == 0
    assert doc["retry"] == {"on": ["interruption", "error"], "retry_for_s": 21600, "max_restarts": 5,
                            "sync_every_s": 300}  # fmt: skip
    # a terminal plan has one too (H100/H200 only: an A100 80GB on-demand would hold a 30-day job)
    rc, out, _ = run(capsys, ["plan", "gpu-1", "--duration", "30d", "--gpu", "h100,h200", "--json"], env)
    doc = json.loads(out)
    valid(doc, "plan")
    assert rc == 1 and doc["retry"] == {"on": [], "retry_for_s": HEALING.retry_for_s,
                                        "max_restarts": HEALING.max_restarts, "sync_every_s": 600}  # fmt: skip


def test_the_plan_schema_knows_every_event() -> None:
    from test_usability import schema

    on = schema("plan")["properties"]["retry"]["properties"]["on"]["items"]["enum"]
    assert on == [e.value for e in RetryOn]


# --- the Python API -------------------------------------------------------------------------


def test_the_api_takes_the_retry_policy(tmp_path: Path) -> None:
    env = _config(tmp_path, "[jobs]\nsync_every_s = 120\n")
    job = api.Job("cpu-small", duration="30m", retry=("interruption", "error"), retry_for="2h", max_restarts=4,
                  sync_every="5m", command="true", settings_env=env)  # fmt: skip
    core = job.core()
    assert (core.retry, core.retry_for_s, core.max_restarts, core.sync_every_s) == (
        ("interruption", "error"), 7200, 4, 300)  # fmt: skip
    argv = job.argv()
    assert argv[argv.index("--retry") :][:8] == ["--retry", "interruption,error", "--retry-for", "7200",
                                                 "--max-restarts", "4", "--sync-every", "300"]  # fmt: skip
    assert request_of(build().parse_args(["execute", *argv[: argv.index("--")]])).job.retry == core.retry  # same job
    assert api.plan(job, env=env).to_dict()["retry"]["sync_every_s"] == 300
    plain = api.Job("cpu-small", duration="30m", restartable=True, settings_env=env)
    assert "--retry" not in plain.argv() and "--sync-every" not in plain.argv()
    p = api.plan(plain, env=env)
    assert p.to_dict()["retry"] == {"on": ["interruption"], "retry_for_s": 86400, "max_restarts": 3,
                                    "sync_every_s": 120}  # fmt: skip
    assert "retry: interruption (restartable), at most 3 restarts within 1d; outputs synced every 2m" in str(p)
    assert api.Job("cpu-small", retry="error", retry_for=3600, sync_every=0, settings_env=env).core().sync_every_s == 0


@pytest.mark.parametrize(
    ("kw", "code", "says"),
    [
        ({"retry": "preempt"}, "bad_retry", "unknown retry event"),
        ({"retry": 5}, "bad_retry", "a list of them"),
        ({"retry_for": "soon"}, "bad_retry_for", "bad duration 'soon'"),
        ({"retry_for": True}, "bad_retry_for", "must be a duration"),
        ({"max_restarts": -1}, "bad_max_restarts", "0..1000"),
        ({"max_restarts": 2.0}, "bad_max_restarts", "whole number"),
        ({"sync_every": float("inf")}, "bad_sync_every", "finite"),
        ({"sync_every": "-1m"}, "bad_sync_every", "must not be negative"),
    ],
)
def test_the_api_refuses_a_bad_retry_policy(tmp_path: Path, kw: dict[str, object], code: str, says: str) -> None:
    with pytest.raises(api.JobError) as info:
        api.Job("cpu-small", duration="30m", settings_env=bare_env(tmp_path), **kw)  # type: ignore[arg-type]
    assert info.value.code == code and says in str(info.value)
