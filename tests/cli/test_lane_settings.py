"""Issue 23 (item 1): the lane orders are settings (``[lanes] gpu`` / ``cpu``), checked
strictly; a configured cluster that no order names is skipped with a code by ``eps plan``
and named by ``eps check``, never dropped in silence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_usability import bare_env, run, valid

from eps.core.model import CapacitySnapshot, Job
from eps.core.router import plan
from eps.core.tables import CPU_LANE_ORDER, DEFAULT_AUTO_LANE_ORDER, DEFAULT_GRANTS
from eps.shell.config.load import load_settings
from eps.shell.config.settings import ConfigError

NIBI = '[[clusters]]\nname = "nibi"\nlogin = ["ssh", "nibi-login"]\n'


def _env(tmp_path: Path, text: str) -> dict[str, str]:
    cfg = tmp_path / "config.toml"
    cfg.write_text('[[clusters]]\nname = "fellows"\nlogin = ["ssh", "login"]\n' + text)
    return bare_env(tmp_path, EPS_CONFIG=str(cfg))


def _skips(doc: dict[str, object], code: str) -> list[str]:
    return [s["lane"] for s in doc["skipped"] if s["reason"]["code"] == code]  # type: ignore[attr-defined, index]


def test_the_defaults_are_the_tables(tmp_path: Path) -> None:
    policy = load_settings(bare_env(tmp_path)).policy
    assert (policy.gpu_lane_order, policy.cpu_lane_order) == (DEFAULT_AUTO_LANE_ORDER, CPU_LANE_ORDER)


def test_a_second_cluster_in_no_order_is_skipped_with_a_code_and_named_by_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env = _env(tmp_path, NIBI)
    rc, out, _ = run(capsys, ["plan", "gpu-1", "--duration", "3h", "--json"], env)
    doc = json.loads(out)
    valid(doc, "plan")
    assert rc == 0 and _skips(doc, "not_in_lane_order") == ["nibi"]
    assert not [r for r in doc["rungs"] if r["lane"] == "nibi"]
    rc, out, _ = run(capsys, ["plan", "gpu-1", "--duration", "3h", "--pin", "nibi", "--json"], env)
    assert [r["lane"] for r in json.loads(out)["rungs"]] == ["nibi"]  # a pin still reaches it
    rc, out, _ = run(capsys, ["check", "--json", "--timeout", "1"], env)
    doc = json.loads(out)
    valid(doc, "check")
    [left] = doc["left_out"]
    assert left["lane"] == "nibi" and left["code"] == "not_in_lane_order"
    assert '[lanes] gpu = ["fellows", "nibi", "gcp"]' in left["fix"] and env["EPS_CONFIG"] in left["fix"]
    rc, out, _ = run(capsys, ["check", "--timeout", "1"], env)
    assert "nibi: not_in_lane_order:" in out


def test_an_order_that_names_the_second_cluster_walks_it_before_gcp(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env = _env(tmp_path, NIBI + '[lanes]\ngpu = ["fellows", "nibi", "gcp"]\n')
    rc, out, _ = run(capsys, ["plan", "gpu-1", "--duration", "3h", "--json"], env)
    lanes = list(dict.fromkeys(r["lane"] for r in json.loads(out)["rungs"]))
    assert lanes == ["fellows", "nibi", "gcp"]
    assert _skips(json.loads(out), "not_in_lane_order") == []
    rc, out, _ = run(capsys, ["check", "--json", "--timeout", "1"], env)
    assert rc in (0, 1) and json.loads(out)["left_out"] == []


def test_a_cpu_order_without_runpod_names_runpod_in_the_skips(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env = _env(tmp_path, '[lanes]\ncpu = ["gcp"]\n')
    rc, out, _ = run(capsys, ["plan", "cpu-small", "--duration", "3h", "--json"], env)
    doc = json.loads(out)
    assert rc == 0 and _skips(doc, "not_in_lane_order") == ["runpod"]
    assert {r["lane"] for r in doc["rungs"]} == {"gcp"}


@pytest.mark.parametrize(
    ("lanes", "says", "where"),
    [
        ('gpu = ["fellows", "runpod"]', "P6: RunPod takes GPU work only when pinned", "$.lanes.gpu[1]"),
        ('gpu = ["fellows", "fellows"]', "'fellows' is listed twice", "$.lanes.gpu[1]"),
        ('gpu = ["fellow"]', "unknown lane 'fellow'; did you mean fellows?", "$.lanes.gpu[0]"),
        ("gpu = []", "needs at least one lane", "$.lanes.gpu"),
        ('gpu = ["vm"]', "the vm lane has no GPU", "$.lanes.gpu[0]"),
        ('cpu = ["fellows"]', "P1: CPU work never holds a GPU", "$.lanes.cpu[0]"),
        ('cpu = ["vm", "gcp"]', "takes trivial ops by P2", "$.lanes.cpu[0]"),
        ('cpu = ["gcp", "aws"]', "unknown lane 'aws'", "$.lanes.cpu[1]"),
        ('gpu = "fellows"', "expected", "lanes"),
        ('order = ["gcp"]', "order", "lanes"),
    ],
)
def test_a_bad_lane_order_is_one_line_naming_the_setting(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lanes: str, says: str, where: str
) -> None:
    env = _env(tmp_path, f"[lanes]\n{lanes}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(env)
    text = str(info.value)
    assert says in text and where in text and "\n" not in text, text
    rc, out, err = run(capsys, ["plan", "gpu-1", "--duration", "3h"], env)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_the_core_skips_a_lane_the_order_leaves_out(tmp_path: Path) -> None:
    """Pure: the same policy object the shell builds, planned directly."""
    policy = load_settings(_env(tmp_path, NIBI)).policy
    route = plan(Job("gpu-1", 3600), CapacitySnapshot(), DEFAULT_GRANTS, None, policy=policy)
    assert [s.lane for s in route.skipped if s.code.value == "not_in_lane_order"] == ["nibi"]


# --- a tier's own partition and account (item 3) ------------------------------------------------

LADDER = '[[clusters]]\nname = "fellows"\n'


def test_a_tier_takes_its_own_partition_and_account_from_the_config(tmp_path: Path) -> None:
    env = _env(tmp_path, LADDER + 'partition = "general"\ntier_partition = { "low-eur" = "general,overflow" }\n'
                                  'tier_account = { "low-eur" = "fellows-low" }\n')  # fmt: skip
    fellows = load_settings(env).policy.cluster("fellows")
    assert fellows is not None
    assert [fellows.partition_for(q) for q in ("high-eur", "normal-eur", "low-eur", None)] == [
        "general", "general", "general,overflow", "general"]  # fmt: skip
    assert fellows.account_for("low-eur") == "fellows-low" and fellows.account_for("high-eur") == fellows.account


@pytest.mark.parametrize(
    ("table", "says", "where"),
    [
        ('tier_partition = { "top-eur" = "x" }', "'top-eur' is not a tier of fellows", ".tier_partition.top-eur"),
        ('tier_account = { "low-eur" = " " }', "the account of low-eur is empty", ".tier_account.low-eur"),
        ('tier_partition = { "low-eur" = 3 }', "expected", "tier_partition"),
    ],
)
def test_a_bad_tier_setting_is_one_line(tmp_path: Path, table: str, says: str, where: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(_env(tmp_path, LADDER + table + "\n"))
    text = str(info.value)
    assert says in text and where in text and "\n" not in text, text


# --- a login usable only through the user's own ssh master (item 4) -------------------------------

FAKE_SSH = """#!/bin/sh
echo "$*" >> "{log}"
case "$*" in *"-O check"*) exit {check_rc};; esac
echo "the fake ssh was asked to connect" >&2
exit 255
"""


def _master_env(tmp_path: Path, *, check_rc: int = 0) -> tuple[dict[str, str], Path, Path]:
    (tmp_path / "fakebin").mkdir()
    ssh, log = tmp_path / "fakebin" / "ssh", tmp_path / "ssh.log"
    ssh.write_text(FAKE_SSH.format(log=log, check_rc=check_rc))
    ssh.chmod(0o755)
    master = tmp_path / "cm-nibi"
    env = _env(tmp_path, f'[[clusters]]\nname = "nibi"\nlogin = ["{ssh}", "nibi-login"]\nlogin_master = "{master}"\n'
                         '[lanes]\ngpu = ["fellows", "nibi", "gcp"]\n')  # fmt: skip
    return env, log, master


def test_a_master_only_login_without_its_master_is_skipped_and_never_connected_to(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env, log, master = _master_env(tmp_path)
    rc, out, _ = run(capsys, ["plan", "gpu-1", "--duration", "3h", "--json"], env)
    doc = json.loads(out)
    valid(doc, "plan")
    [nibi] = [r for r in doc["rungs"] if r["lane"] == "nibi"]
    assert nibi["runnable"] is False and nibi["not_runnable"]["code"] == "no_master"
    rc, out, _ = run(capsys, ["check", "--json", "--timeout", "2"], env)
    doc = json.loads(out)
    valid(doc, "check")
    [row] = [r for r in doc["lanes"] if r["lane"] == "nibi"]
    opening = f"ssh -M -S {master} -o ControlPersist=yes -fN nibi-login"
    assert row["problem"]["code"] == "no_master" and opening in row["fix"]
    rc, out, err = run(capsys, ["execute", "gpu-1", "--duration", "1h", "--pin", "nibi", "--", "true"], env)
    assert rc == 1 and "no_usable_lane" in out + err and "ssh master" in out + err
    assert not log.exists()  # not one ssh: not even a check, with no socket there


def test_a_stale_master_is_checked_locally_and_a_live_one_is_the_only_way_in(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env, log, master = _master_env(tmp_path, check_rc=255)
    master.write_text("")  # a socket left behind by a master that died
    rc, out, _ = run(capsys, ["plan", "gpu-1", "--duration", "3h", "--pin", "nibi", "--json"], env)
    [nibi] = json.loads(out)["rungs"]
    assert rc == 0 and nibi["not_runnable"]["code"] == "no_master" and "open it again" in nibi["not_runnable"]["fix"]
    assert log.read_text().splitlines() == [f"-S {master} -O check nibi-login"]  # local: no connection
    from eps.shell.config.load import load_settings as settings_of

    access = settings_of(env).cluster_access("nibi")
    assert access.prefix[1:] == ("-o", f"ControlPath={master}", "-o", "ControlMaster=no", "-o", "BatchMode=yes",
                                 "nibi-login")  # fmt: skip


@pytest.mark.parametrize(
    ("cluster", "says"),
    [
        ('login = ["nibi-wrapper"]\nlogin_master = "/tmp/cm"', 'login_master needs login = ["ssh", "LOGIN-HOST"]'),
        ('login = ["ssh", "nibi"]\nlogin_master = "~/.ssh/cm-%h"', "without ssh's % tokens"),
        ('login = ["ssh", "nibi"]\nlogin_master = " "', "login_master is empty"),
    ],
)
def test_a_bad_login_master_is_one_line(tmp_path: Path, cluster: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(_env(tmp_path, f'[[clusters]]\nname = "nibi"\n{cluster}\n'))
    text = str(info.value)
    assert says in text and "login_master" in text and "\n" not in text, text
