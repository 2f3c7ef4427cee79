"""Issue 25 at the command line, in job files, the config and the Python API: a job without
a duration has an unknown one (``duration_s: null``), taken as long, each rung's time
limit its lane's maximum; the help says so; ``[jobs] max_time_limit`` sets that maximum."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_usability import bare_env, run, set_up_env, valid

from eps import api
from eps.shell.cli.parser import build
from eps.shell.config.load import load_settings
from eps.shell.config.settings import ConfigError

DAY = 86_400


def test_cpu_small_without_a_duration_plans_gcp_on_demand_first(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rc, out, _ = run(capsys, ["plan", "cpu-small", "--json"], set_up_env(tmp_path))
    assert rc == 0
    doc = json.loads(out)
    valid(doc, "plan")
    assert doc["job"]["duration_s"] is None
    first = doc["rungs"][0]
    assert (first["lane"], first["provisioning"]) == ("gcp", "on-demand")
    assert {r["provisioning"] for r in doc["rungs"]} == {"on-demand"}
    assert all(r["lane"] != "vm" and r["time_limit_s"] == 7 * DAY for r in doc["rungs"])
    assert "duration unknown" in first["reason"]["text"]
    assert any("duration unknown (no --duration): taken as long" in n for n in doc["notes"])
    spot = next(s for s in doc["skipped"] if s["reason"]["code"] == "spot_too_long")
    assert "duration unknown" in spot["reason"]["text"]


def test_gpu_1_without_a_duration_plans_the_fellows_tiers_then_flex_start(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # H100/H200 only (issue 35: without --gpu, a2-ultragpu-1g on-demand comes before the flex-start rungs)
    rc, out, _ = run(capsys, ["plan", "gpu-1", "--gpu", "h100,h200", "--json"], set_up_env(tmp_path))
    assert rc == 0
    doc = json.loads(out)
    valid(doc, "plan")  # the schema knows flex-start and time_limit_s
    lanes = [(r["lane"], r["qos"] or r["provisioning"]) for r in doc["rungs"]]
    assert lanes[:3] == [("fellows", "high-eur"), ("fellows", "normal-eur"), ("fellows", "low-eur")]
    assert {p for lane, p in lanes[3:]} == {"flex-start"} and {lane for lane, _ in lanes[3:]} == {"gcp"}
    assert [r["time_limit_s"] for r in doc["rungs"][:3]] == [7 * DAY - 90, 7 * DAY - 90, 14 * DAY - 90]


def test_with_a_duration_the_json_is_as_before(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, _ = run(capsys, ["plan", "cpu-small", "--duration", "30m", "--json"], set_up_env(tmp_path))
    assert rc == 0
    doc = json.loads(out)
    assert doc["job"]["duration_s"] == 1800 and doc["rungs"][0]["provisioning"] == "spot"
    assert all(r["time_limit_s"] is None for r in doc["rungs"]) and doc["notes"] == []


def test_the_table_says_duration_unknown(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, _ = run(capsys, ["plan", "cpu-small", "--wide"], set_up_env(tmp_path))
    assert rc == 0
    assert out.splitlines()[0] == "cpu-small  (cpu, duration unknown)"
    assert "time limit 7d, the lane's maximum ([jobs] max_time_limit)" in out


def test_the_help_says_what_happens_without_a_duration() -> None:
    for cmd in ("plan", "execute"):
        text = " ".join(build()._subparsers._group_actions[0].choices[cmd].format_help().split())  # type: ignore[union-attr]
        assert "without it the duration is unknown and taken as long" in text
        assert "never the shared VM, no spot unless --restartable" in text
        assert "the time limit is the lane's maximum" in text
    execute = build()._subparsers._group_actions[0].choices["execute"].format_help()  # type: ignore[union-attr]
    assert "without --duration, the lane's maximum" in " ".join(execute.split())


def test_max_time_limit_in_the_config_reaches_the_plan(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('[jobs]\nmax_time_limit = "20s"\n')
    env = bare_env(tmp_path, EPS_CONFIG=str(cfg))
    settings = load_settings(env)
    assert settings.jobs.max_time_limit_s == 20 == settings.policy.max_time_limit_s
    rc, out, _ = run(capsys, ["plan", "cpu-small", "--json"], env)
    assert rc == 0
    assert {r["time_limit_s"] for r in json.loads(out)["rungs"]} == {20}
    rc, out, _ = run(capsys, ["plan", "gpu-1", "--json"], env)  # a tier's MaxWall and flex-start keep theirs
    assert rc == 0
    assert json.loads(out)["rungs"][0]["time_limit_s"] == 7 * DAY - 90
    assert load_settings(bare_env(tmp_path)).policy.max_time_limit_s == 7 * DAY  # the default


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('"soon"', "bad duration 'soon'"),
        ("0", "must be positive @ $.jobs.max_time_limit"),
        ('"-1h"', "must not be negative"),
        ("true", "@ $.jobs.max_time_limit"),
    ],
)
def test_a_bad_max_time_limit_is_one_line(tmp_path: Path, value: str, message: str) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f"[jobs]\nmax_time_limit = {value}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(bare_env(tmp_path, EPS_CONFIG=str(cfg)))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_job_file_without_a_duration(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = tmp_path / "job.toml"
    job.write_text('intent = "cpu-small"\ncommand = "true"\n')
    rc, out, _ = run(capsys, ["plan", "--job", str(job), "--json"], set_up_env(tmp_path))
    assert rc == 0
    doc = json.loads(out)
    assert doc["job"]["duration_s"] is None and doc["rungs"][0]["provisioning"] == "on-demand"
    rc, out, _ = run(capsys, ["plan", "--job", str(job), "--duration", "30m", "--json"], set_up_env(tmp_path))
    assert rc == 0
    assert json.loads(out)["rungs"][0]["provisioning"] == "spot"  # the flag fills in what the file left out


def test_the_python_api_takes_no_duration(tmp_path: Path) -> None:
    env = set_up_env(tmp_path)
    job = api.Job("cpu-small", command="true", settings_env=env)
    assert job.core().duration_s is None
    assert "--duration" not in job.argv()
    p = api.plan(job, env=env)
    assert p.to_dict()["job"]["duration_s"] is None
    assert p.rungs[0].rung.provisioning.value == "on-demand"
    assert api.Job("cpu-small", duration="30m", settings_env=env).argv()[:3] == ["cpu-small", "--duration", "1800"]
