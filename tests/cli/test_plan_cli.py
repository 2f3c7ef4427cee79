"""`eps plan` and `eps intents` through main(argv): output shapes, settings, and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eps.shell.cli import main


def run(capsys: pytest.CaptureFixture[str], argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    rc = main(argv, env=env if env is not None else {})
    out, err = capsys.readouterr()
    return rc, out, err


def plan_json(capsys: pytest.CaptureFixture[str], *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    rc, out, err = run(capsys, ["plan", *args, "--json"], env)
    data: dict[str, Any] = json.loads(out)
    # 1 only for a terminal (the policy leaves no rung); can_start says whether this machine can run one
    assert rc == (1 if data["terminal"] else 0), err
    return data


def test_p6_p7_plan_json_has_the_documented_fields(capsys: pytest.CaptureFixture[str]) -> None:
    d = plan_json(capsys, "gpu-1", "--duration", "3h")
    for key in ("intent", "rungs", "skipped", "terminal", "worst_case_wait_s"):
        assert key in d
    assert d["intent"] == "gpu-1"
    r = d["rungs"][0]
    for key in ("lane", "qos", "machine", "zone", "provisioning", "park_cap_s", "price_per_hour", "reason"):
        assert key in r
    assert r["lane"] == "fellows" and r["qos"] == "high-eur" and r["provisioning"] == "queue"
    assert r["park_cap_s"] == 600
    assert d["worst_case_wait_s"] == 1200
    assert all(s["lane"] and s["reason"]["code"] and s["reason"]["text"] for s in d["skipped"])
    assert {x["lane"] for x in d["rungs"]} <= {"vm", "fellows", "gcp", "runpod"}
    assert {x["provisioning"] for x in d["rungs"]} <= {"local", "queue", "spot", "on-demand", "flex-start"}


def test_p8_env_park_caps_reach_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    env = {"EPS_FELLOWS_QUEUE_WAIT_SECONDS": "120", "EPS_FELLOWS_NEXT_QUEUE_WAIT_SECONDS": "30"}
    d = plan_json(capsys, "gpu-2", "--duration", "1h", env=env)
    assert [r["park_cap_s"] for r in d["rungs"] if r["lane"] == "fellows"] == [120, 30, 30]
    assert d["worst_case_wait_s"] == 180


def test_p8_rungs_2_plus_never_wait_longer_than_rung_1(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 14.1: EPS_FELLOWS_QUEUE_WAIT_SECONDS=120 gave caps 120, 300, 300 (720 s); now 120 x 3 = 360 s."""
    d = plan_json(capsys, "gpu-1", "--duration", "1h", env={"EPS_FELLOWS_QUEUE_WAIT_SECONDS": "120"})
    assert [r["park_cap_s"] for r in d["rungs"] if r["lane"] == "fellows"] == [120, 120, 120]
    assert d["worst_case_wait_s"] == 360


def test_p8_config_file_then_env_override(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('[[clusters]]\nname = "fellows"\nfirst_park_cap_s = 900\nnext_park_cap_s = 200\n')
    d = plan_json(capsys, "gpu-2", env={"EPS_CONFIG": str(cfg)})
    assert [r["park_cap_s"] for r in d["rungs"] if r["lane"] == "fellows"] == [900, 200, 200]
    d = plan_json(capsys, "gpu-2", env={"EPS_CONFIG": str(cfg), "EPS_FELLOWS_QUEUE_WAIT_SECONDS": "60"})
    # rungs 2+ never wait longer than rung 1 (P8, issue 14.1): min(60, 200) = 60
    assert [r["park_cap_s"] for r in d["rungs"] if r["lane"] == "fellows"] == [60, 60, 60]


def test_p7_dev_switch_in_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[clusters]]\nname = "fellows"\ndev_qos_for_debug = true\n')
    d = plan_json(capsys, "debug", "--duration", "20m", env={"EPS_CONFIG": str(cfg)})
    assert [r["qos"] for r in d["rungs"] if r["lane"] == "fellows"] == ["high-eur", "dev-eur", "normal-eur", "low-eur"]


def test_p2_thresholds_in_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[thresholds]\ntrivial_op_s = 300\n")
    d = plan_json(capsys, "cpu-small", "--duration", "4m", env={"EPS_CONFIG": str(cfg)})
    assert [r["lane"] for r in d["rungs"]] == ["vm"]


def test_p3_snapshot_file_exhausted_gcp_fails_over(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    snap = tmp_path / "snap.toml"
    snap.write_text('[[gcp]]\nmachine = "e2-standard-4"\nzone = "*"\nstate = "exhausted"\n')
    d = plan_json(capsys, "cpu-small", "--duration", "2h", "--snapshot", str(snap))
    assert {r["lane"] for r in d["rungs"]} == {"runpod"}
    assert d["terminal"] is None


def test_p9_grants_file_with_slurm_times(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    g = tmp_path / "grants.json"
    g.write_text(
        json.dumps(
            {
                "fellows": [
                    {"name": "high-eur", "priority": 100000, "max_wall": "1-00:00:00", "max_gpus_per_user": 16},
                    {"name": "low-eur", "priority": 10000, "max_wall": "14-00:00:00"},
                ]
            }
        )
    )
    d = plan_json(capsys, "gpu-1", "--duration", "2d", "--restartable", "--grants", str(g))
    assert [r["qos"] for r in d["rungs"] if r["lane"] == "fellows"] == ["low-eur"]
    assert {"lane": "fellows", "reason": "qos_max_wall"}.items() <= next(
        {**s, "reason": s["reason"]["code"]} for s in d["skipped"] if s["reason"]["code"] == "qos_max_wall"
    ).items()


def test_p8_park_option_advances(capsys: pytest.CaptureFixture[str]) -> None:
    d = plan_json(capsys, "gpu-1", "--park", "high-eur=11m")
    assert d["park"]["action"] == "advance"
    assert d["rungs"][0]["qos"] == "normal-eur"
    d = plan_json(capsys, "gpu-1", "--park", "fellows:normal-eur=100", "--park-reason", "Priority")
    assert d["park"] == {
        "action": "wait",
        "rung": "fellows/normal-eur/-/queue",
        "remaining_s": 200,
        "reason": {"code": "wait", "text": "P8: 100 s of 300 s parked (Priority)"},
    }


def test_p7_a_dry_run_parked_lower_never_proposes_a_higher_tier(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 14.2: --park normal-eur=6m with grants that lack normal-eur: low-eur, then GCP; never high-eur."""
    grants = tmp_path / "grants.json"
    grants.write_text(
        json.dumps(
            {
                "fellows": [
                    {"name": "high-eur", "priority": 100000, "max_wall": "7-00:00:00", "max_gpus_per_user": 16},
                    {"name": "low-eur", "priority": 10000, "max_wall": "14-00:00:00"},
                ]
            }
        )
    )
    d = plan_json(capsys, "gpu-1", "--duration", "1h", "--park", "normal-eur=6m", "--grants", str(grants))
    assert d["park"]["action"] == "advance"
    assert [r["qos"] for r in d["rungs"] if r["lane"] == "fellows"] == ["low-eur"]
    assert ("fellows", "ladder_passed") in {(s["lane"], s["reason"]["code"]) for s in d["skipped"]}


def test_p2_vm_capacity_from_the_snapshot_and_the_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Issue 14.5: the VM's size comes from --snapshot ({"vm": {...}}), else the config's [vm]."""
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"vm": {"vcpus": 4, "mem_gb": 16, "free_disk_gb": 30}}))
    d = plan_json(capsys, "cpu-bigmem", "--duration", "30s", "--snapshot", str(snap))
    assert d["rungs"][0]["lane"] == "gcp"
    assert ("vm", "vm_too_small") in {(s["lane"], s["reason"]["code"]) for s in d["skipped"]}
    d = plan_json(capsys, "cpu-small", "--duration", "30s", "--snapshot", str(snap))
    assert [r["lane"] for r in d["rungs"]] == ["vm"]
    cfg = tmp_path / "c.toml"
    cfg.write_text("[vm]\nvcpus = 2\nmem_gb = 8\nfree_disk_gb = 100\n\n[thresholds]\nvm_disk_margin_gb = 20\n")
    d = plan_json(capsys, "cpu-small", "--duration", "30s", env={"EPS_CONFIG": str(cfg)})
    assert d["rungs"][0]["lane"] == "gcp"  # 16 GB > 8 GB
    bad = tmp_path / "bad.json"
    for doc, says in (({"vm": {"mem_gb": -1}}, "must not be negative @ $.vm.mem_gb"), ({"vm": {"disk": 1}}, "disk")):
        bad.write_text(json.dumps(doc))
        rc, _, err = run(capsys, ["plan", "cpu-small", "--duration", "30s", "--snapshot", str(bad)])
        assert rc == 2 and says in err and err.count("\n") == 1


def test_p5_count_on_gpu_and_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    d = plan_json(capsys, "gpu-1", "--count", "2")
    assert d["resolved_intent"] == "gpu-2" and d["count"] == 1
    d = plan_json(capsys, "cpu-small", "--count", "5", "--duration", "2h")
    assert d["count"] == 5


def test_human_table_shows_rungs_caps_prices_and_worst_case(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, ["plan", "gpu-4", "--duration", "1h", "--restartable"])
    assert rc in (0, 1)
    for text in (
        "high-eur",
        "normal-eur",
        "low-eur",
        "a3-highgpu-4g",
        "10m",
        "5m",
        "worst-case wait",
        "1200 s",
        "runpod_gpu_needs_pin",
        "P12",
    ):
        assert text in out


def test_intents_human_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, ["intents", "--json"])
    assert rc == 0
    doc = json.loads(out)
    assert doc["schema_version"] == 1
    names = [i["name"] for i in doc["intents"]]
    for name in ("cpu-small", "cpu-bigmem", "debug", "gpu-1", "gpu-2", "gpu-4", "gpu-8", "capture-7b"):
        assert name in names
    rc, out2, _ = run(capsys, ["intents"])
    assert rc == 0 and "n2-highmem-16" in out2
    rc, out3, _ = run(capsys, ["plan", "--list-intents"])
    assert rc == 0 and "capture-7b" in out3
    rc, out4, _ = run(capsys, ["--list-intents"])
    assert rc == 0 and "capture-7b" in out4


BAD_PLAN_INPUTS = [
    (["plan", "tpu-64"], "unknown intent"),
    (["plan"], "an intent is needed"),
    (["plan", "gpu-1", "--duration", "-3h"], "must not be negative"),
    (["plan", "gpu-1", "--duration", "soon"], "bad duration"),
    (["plan", "gpu-1", "--duration", ""], "bad duration"),
    (["plan", "gpu-1", "--duration", "3 weeks"], "bad duration"),
    (["plan", "gpu-1", "--pin", "vm"], "has none"),
    (["plan", "cpu-small", "--pin", "fellows"], "GPU cluster"),
    (["plan", "cpu-small", "--pin", "aws"], "unknown lane"),
    (["plan", "gpu-1", "--count", "3"], "no machine has 3"),
    (["plan", "gpu-1", "--count", "0"], "at least 1"),
    (["plan", "gpu-1", "--count", "two"], "whole number"),
    (["plan", "cpu-small", "--footprint-gb", "-5"], "finite number >= 0"),
    (["plan", "cpu-small", "--footprint-gb", "nan"], "finite number"),
    (["plan", "cpu-small", "--footprint-gb", "lots"], "number of GB"),
    (["plan", "gpu-1", "--park", "high-eur"], "QOS=SECONDS"),
    (["plan", "gpu-1", "--park", "gold=10"], "no cluster has a QoS"),
    (["plan", "gpu-1", "--park", "mars:high-eur=10"], "unknown cluster"),
    (["plan", "gpu-1", "--park", "high-eur=later"], "bad duration"),
    (["plan", "gpu-1", "--park-reason", "Priority"], "needs --park"),
    (["plan", "gpu-1", "--snapshot", "/nonexistent/snap.json"], "cannot read"),
    (["plan", "gpu-1", "--grants", "/nonexistent/g.json"], "cannot read"),
    (["plan", "gpu-1", "--frobnicate"], "unrecognized arguments"),
    (["plan", "gpu-1", "--", "python", "x.py"], "for `eps execute`"),
    ([], "a command is needed"),
    (["launch"], "invalid choice"),
]


@pytest.mark.parametrize(("argv", "needle"), BAD_PLAN_INPUTS, ids=[" ".join(a) or "<none>" for a, _ in BAD_PLAN_INPUTS])
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    rc, out, err = run(capsys, argv)
    assert rc == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("eps: error: ")
    assert needle in lines[0]
    assert "Traceback" not in err


BAD_FILES = [
    (
        "snap.json",
        '{"gcp": [{"machine": "e2-standard-4", "zone": "z", "state": "bogus"}]}',
        "--snapshot",
        "$.gcp[0].state",
    ),
    (
        "snap.json",
        '{"gcp": [{"machine": "e2-standard-4", "zone": "z", "state": "exhausted", "x": 1}]}',
        "--snapshot",
        "extra fields",
    ),
    ("snap.json", '{"gcp": [{"zone": "z", "state": "exhausted"}]}', "--snapshot", "$.gcp[0].machine"),
    ("snap.json", '{"runpod": [{"id": "cpu3g", "stock": 3}]}', "--snapshot", "$.runpod[0].stock"),
    (
        "snap.json",
        '{"queues": [{"cluster": "fellows", "qos": "high-eur", "free_gpus": "many"}]}',
        "--snapshot",
        "$.queues[0].free_gpus",
    ),
    ("snap.json", "[1, 2]", "--snapshot", "is an object"),
    ("snap.json", "{not json", "--snapshot", "not valid JSON"),
    ("snap.toml", "gcp = [", "--snapshot", "not valid TOML"),
    ("g.json", '{"fellows": [{"name": "high-eur", "priority": "high"}]}', "--grants", ".priority"),
    ("g.json", '{"fellows": [{"name": "high-eur", "max_wall": "7 days"}]}', "--grants", "bad SLURM time"),
    ("g.json", '{"fellows": {"name": "high-eur"}}', "--grants", "fellows"),
]


@pytest.mark.parametrize(("name", "text", "flag", "needle"), BAD_FILES)
def test_bad_files_name_the_path_of_the_bad_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str, flag: str, needle: str
) -> None:
    f = tmp_path / name
    f.write_text(text)
    rc, out, err = run(capsys, ["plan", "gpu-1", flag, str(f)])
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert needle in err, err


BAD_CONFIG = [
    ("[thresholds]\ntrivial_op_s = -1\n", "must not be negative"),
    ("[thresholds]\nbogus = 1\n", "extra fields"),
    ('[[clusters]]\nname = "fellows"\nfirst_park_cap_s = "ten"\n', "$.clusters[0].first_park_cap_s"),
    ('[[clusters]]\nname = "gcp"\n', "is a lane name"),
    ("[gcp]\nzones = []\n", "at least one zone"),
    ("[runpod]\nconcurrency = 0\n", "at least 1"),
    ("this is = = not toml", "not valid TOML"),
    ("[gcp]\nbudget = 100\n", "extra fields"),
]


@pytest.mark.parametrize(("text", "needle"), BAD_CONFIG)
def test_bad_config_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, needle: str) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(text)
    rc, out, err = run(capsys, ["plan", "gpu-1"], env={"EPS_CONFIG": str(cfg)})
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert needle in err, err


def test_bad_env_values(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, _, err = run(capsys, ["plan", "gpu-1"], env={"EPS_FELLOWS_QUEUE_WAIT_SECONDS": "ten"})
    assert rc == 2 and "EPS_FELLOWS_QUEUE_WAIT_SECONDS" in err
    rc, _, err = run(capsys, ["plan", "gpu-1"], env={"EPS_FELLOWS_NEXT_QUEUE_WAIT_SECONDS": "-4"})
    assert rc == 2 and "must not be negative" in err
    rc, _, err = run(capsys, ["plan", "gpu-1"], env={"EPS_CONFIG": str(tmp_path / "missing.toml")})
    assert rc == 2 and "no such file" in err
