"""Issue 31 (item 1): every fact of a cluster row (memory and CPUs per GPU, the job's
environment, the user in job names, the preemptible tiers, the access, the submit gap, the
cleanup trap, a cleared account or partition) can be set per ``[[clusters]]`` in the
config, and a bad value is one line naming its path; the QoS grants file carries each
tier's preemption (``preempts``, ``preempt_mode``, ``grace``) both ways."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from test_usability import bare_env, run

from eps.core.model import ClusterConfig, QosGrants, QosTier
from eps.core.tables import DEFAULT_GRANTS, FELLOWS
from eps.shell.config.lane_settings import ClusterDoc
from eps.shell.config.load import load_settings
from eps.shell.config.settings import ConfigError
from eps.shell.config.snapshots import grants_from_data, grants_to_data, load_grants


def _env(tmp_path: Path, text: str) -> dict[str, str]:
    """A config whose first ``[[clusters]]`` is fellows with ``text`` in it."""
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[[clusters]]\nname = "fellows"\n{text}\n')
    return bare_env(tmp_path, EPS_CONFIG=str(cfg))


def _fellows(tmp_path: Path, text: str) -> ClusterConfig:
    fellows = load_settings(_env(tmp_path, text)).policy.cluster("fellows")
    assert fellows is not None
    return fellows


# --- every field overrides the fellows row ----------------------------------------------------

#: (the config's line, the row's field, what the field becomes): never the row's own value.
OVERRIDES: list[tuple[str, str, Any]] = [
    ('partition = "batch"', "partition", "batch"),
    ('partition = ""', "partition", None),
    ('account = "fellows-lab"', "account", "fellows-lab"),
    ("mem_per_gpu_gb = 96", "mem_per_gpu_gb", 96),
    ("mem_max_gb = 1000", "mem_max_gb", 1000),
    ("mem_max_per_gpu_gb = 200", "mem_max_per_gpu_gb", 200),
    ("cpus_per_gpu = 8", "cpus_per_gpu", 8),
    ("cpus_max = 64", "cpus_max", 64),
    ('env = { "TMPDIR" = "/scratch/{user}", "HF_HOME" = "/shared/hf" }', "job_env",
     (("HF_HOME", "/shared/hf"), ("TMPDIR", "/scratch/{user}"))),
    ("env = {}", "job_env", ()),
    ('multi_gpu_env = { "NCCL_SOCKET_IFNAME" = "eth0" }', "multi_gpu_env", (("NCCL_SOCKET_IFNAME", "eth0"),)),
    ("user_in_job_name = false", "user_in_job_name", False),
    ('preemptible = ["low-eur"]', "preemptible", ("low-eur",)),
    ("preemptible = []", "preemptible", ()),
    ('access = "robot"', "access", "robot"),
    ("submit_gap = 0.5", "submit_gap_s", 0.5),
    ('submit_gap = "5s"', "submit_gap_s", 5.0),
    ("submit_gap = 0", "submit_gap_s", 0.0),
    ("cleanup_trap = false", "cleanup_trap", False),
]  # fmt: skip


@pytest.mark.parametrize(("line", "field", "value"), OVERRIDES)
def test_a_config_value_overrides_that_field_of_the_fellows_row_alone(
    tmp_path: Path, line: str, field: str, value: Any
) -> None:
    assert getattr(FELLOWS, field) != value  # the case changes something
    assert _fellows(tmp_path, line) == FELLOWS._replace(**{field: value})


def test_every_new_row_key_has_an_override_case() -> None:
    older = {"name", "login", "user", "work_root", "qos_ladder", "dev_qos", "dev_qos_for_debug", "first_park_cap_s",
             "next_park_cap_s", "advance_on_self_cap", "gpus_per_node", "gpu_model", "tier_partition", "tier_account",
             "login_master"}  # fmt: skip
    reach = {"grants"}  # how eps reads the cluster (its grants file), like login: not a field of the row
    keys = {a.name for a in attrs.fields(ClusterDoc)} - older - reach
    assert keys == {line.split(" = ")[0] for line, _, _ in OVERRIDES}


def test_an_empty_account_clears_the_one_an_earlier_entry_set(tmp_path: Path) -> None:
    """TOML has no null: ``account = ""`` says the cluster takes no ``--account`` at all."""
    fellows = _fellows(tmp_path, 'account = "lab"\ntier_account = { "low-eur" = "lab-low" }\n'
                                 '[[clusters]]\nname = "fellows"\naccount = ""')  # fmt: skip
    assert fellows.account is None
    assert fellows.account_for("high-eur") is None and fellows.account_for("low-eur") == "lab-low"


def test_a_new_cluster_takes_the_facts_over_the_defaults(tmp_path: Path) -> None:
    nibi_row = ('[[clusters]]\nname = "nibi"\nqos_ladder = ["normal", "low"]\nmem_per_gpu_gb = 64\n'
                'mem_max_per_gpu_gb = 128\ncpus_per_gpu = 6\npreemptible = ["low"]\naccess = "robot"\n'
                'submit_gap = "1m"')  # fmt: skip
    policy = load_settings(_env(tmp_path, nibi_row)).policy
    assert policy.cluster("fellows") == FELLOWS
    nibi = policy.cluster("nibi")
    assert nibi == ClusterConfig(name="nibi", qos_ladder=("normal", "low"), mem_per_gpu_gb=64, mem_max_per_gpu_gb=128,
                                 cpus_per_gpu=6, preemptible=("low",), access="robot", submit_gap_s=60.0)  # fmt: skip
    assert nibi.resources(4) == (256, 24)


# --- a bad value is one line naming its path ------------------------------------------------------

W = "$.clusters[0]"

#: (the config's lines, what the line says, the path it names).
BAD: list[tuple[str, str, str]] = [
    ("mem_per_gpu_gb = 0", "must be more than 0", f"{W}.mem_per_gpu_gb"),
    ("mem_max_gb = 0", "must be more than 0", f"{W}.mem_max_gb"),
    ("mem_max_per_gpu_gb = -1", "must be more than 0", f"{W}.mem_max_per_gpu_gb"),
    ("cpus_per_gpu = 0", "must be more than 0", f"{W}.cpus_per_gpu"),
    ("cpus_max = 0", "must be more than 0", f"{W}.cpus_max"),
    ("cpus_per_gpu = 5000", "at most 1024", f"{W}.cpus_per_gpu"),
    ('mem_per_gpu_gb = "128"', "expected int", f"{W}.mem_per_gpu_gb"),
    ("mem_per_gpu_gb = 300", "300 GB per GPU is above fellows's ceiling of 250 GB per GPU", f"{W}.mem_per_gpu_gb"),
    ("mem_max_per_gpu_gb = 100", "128 GB per GPU is above fellows's ceiling of 100 GB", f"{W}.mem_max_per_gpu_gb"),
    ('env = { "1X" = "a" }', "'1X' is not a shell variable name", f"{W}.env.1X"),
    ('env = { "A-B" = "a" }', "'A-B' is not a shell variable name", f"{W}.env.A-B"),
    ('env = { "CUDA_VISIBLE_DEVICES" = "0" }', "CUDA_VISIBLE_DEVICES is SLURM's to set", f"{W}.env.CUDA_VISIBLE"),
    ('multi_gpu_env = { "CUDA_VISIBLE_DEVICES" = "0,1" }', "SLURM's to set", f"{W}.multi_gpu_env.CUDA_VISIBLE"),
    ('env = { "A" = "x\\ny" }', "the value of A must be one line, without NUL", f"{W}.env.A"),
    ('multi_gpu_env = { "A" = "x\\u0000y" }', "must be one line, without NUL", f"{W}.multi_gpu_env.A"),
    ('env = { "A" = 1 }', "expected str", f"{W}.env"),
    ('env = ["A=1"]', "expected a mapping", f"{W}.env"),
    ('preemptible = ["top-eur"]', "'top-eur' is not a tier of fellows (tiers: high-eur, normal-eur, low-eur, dev-eur)",
     f"{W}.preemptible[0]"),
    ('preemptible = ["low-eur", "low-eur"]', "'low-eur' is listed twice", f"{W}.preemptible[1]"),
    ('preemptible = "low-eur"', "expected list", f"{W}.preemptible"),
    ('access = "root"', 'access must be "full" or "robot"', f"{W}.access"),
    ("access = true", "expected str", f"{W}.access"),
    ("submit_gap = 61", "must be at least 0 and at most 60, got 61", f"{W}.submit_gap"),
    ("submit_gap = -1", "must not be negative", f"{W}.submit_gap"),
    ('submit_gap = "-2s"', "duration must not be negative", f"{W}.submit_gap"),
    ('submit_gap = "2 fortnights"', "bad duration", f"{W}.submit_gap"),
    ('submit_gap = "2m"', "at most 60, got 120", f"{W}.submit_gap"),
    ("submit_gap = true", "expected str | float", f"{W}.submit_gap"),
    ('user_in_job_name = "yes"', "expected bool", f"{W}.user_in_job_name"),
    ("cleanup_trap = 1", "expected bool", f"{W}.cleanup_trap"),
    ('account = " "', 'the account must be one word, or "" for none', f"{W}.account"),
    ('partition = "general overflow"', 'the partition must be one word, or "" for none', f"{W}.partition"),
    ('[[clusters]]\nname = "nibi"\npreemptible = ["low"]', "none: the cluster has no QoS ladder",
     "$.clusters[1].preemptible[0]"),
    ("first_park_cap_s = -1", "must not be negative", f"{W}.first_park_cap_s"),
]  # fmt: skip


@pytest.mark.parametrize(("lines", "says", "where"), BAD)
def test_a_bad_row_value_is_one_line_naming_its_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: str, says: str, where: str
) -> None:
    env = _env(tmp_path, lines)
    with pytest.raises(ConfigError) as info:
        load_settings(env)
    text = str(info.value)
    assert says in text and f"@ {where}" in text and "\n" not in text, text
    assert text.startswith(f"{env['EPS_CONFIG']}: ")
    rc, out, err = run(capsys, ["plan", "gpu-1", "--duration", "3h"], env)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and where in err, err


# --- the QoS grants file carries preemption -------------------------------------------------------


def test_the_grants_file_round_trips_the_tables_preemption(tmp_path: Path) -> None:
    path = tmp_path / "grants.json"
    path.write_text(json.dumps(grants_to_data(DEFAULT_GRANTS)))
    assert load_grants(str(path)) == DEFAULT_GRANTS
    [high, _normal, low, _dev] = load_grants(str(path)).tiers("fellows")
    assert high.preempts == ("low-eur", "normal-eur") and (low.preempt_mode, low.grace_s) == (None, 180)


def test_a_grants_tier_without_preemption_fields_reads_as_before() -> None:
    doc = {"fellows": [{"name": "high-eur", "priority": 100, "max_wall": "1-00:00:00", "max_gpus_per_user": 8}]}
    assert grants_from_data(doc, "g.json") == QosGrants((("fellows", (QosTier("high-eur", 100, 86_400, 8),)),))
    assert grants_to_data(grants_from_data(doc, "g.json")) == {
        "fellows": [{"name": "high-eur", "priority": 100, "max_wall": 86_400, "max_gpus_per_user": 8}]}  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "tier"),
    [
        ({"grace": 180}, QosTier("low-eur", 0, grace_s=180)),
        ({"grace": "3m"}, QosTier("low-eur", 0, grace_s=180)),
        ({"grace": "00:03:00"}, QosTier("low-eur", 0, grace_s=180)),  # sacctmgr's GraceTime
        ({"grace": 0}, QosTier("low-eur", 0, grace_s=0)),
        ({"preempt_mode": "REQUEUE"}, QosTier("low-eur", 0, preempt_mode="requeue")),  # as sacctmgr prints it
        ({"preempt_mode": "cluster"}, QosTier("low-eur", 0)),  # the cluster's default
        ({"preempts": ["normal-eur", "low-eur"]}, QosTier("low-eur", 0, preempts=("normal-eur", "low-eur"))),
        ({"preempts": []}, QosTier("low-eur", 0)),
    ],
)
def test_a_grants_tier_reads_its_preemption(fields: dict[str, Any], tier: QosTier) -> None:
    grants = grants_from_data({"fellows": [{"name": "low-eur", **fields}]}, "g.json")
    assert grants.tiers("fellows") == (tier,)
    assert grants_from_data(grants_to_data(grants), "again") == grants


@pytest.mark.parametrize(
    ("fields", "says", "where"),
    [
        ({"grace": -1}, "must not be negative", "$.fellows[0].grace"),
        ({"grace": "-3m"}, "duration must not be negative", "$.fellows[0].grace"),
        ({"grace": "soon"}, "bad duration", "$.fellows[0].grace"),
        ({"grace": 1.5}, "expected str | int", "grace"),
        ({"grace": True}, "expected str | int", "grace"),
        ({"preempts": "low-eur"}, "expected list", "preempts"),
        ({"preempts": ["low-eur", " "]}, "must not be blank", "$.fellows[0].preempts[1]"),
        ({"preempt_mode": 3}, "expected str", "preempt_mode"),
        ({"preempted_by": ["high-eur"]}, "preempted_by", "$"),
    ],
)
def test_a_bad_grants_preemption_is_one_line(tmp_path: Path, fields: dict[str, Any], says: str, where: str) -> None:
    path = tmp_path / "grants.json"
    path.write_text(json.dumps({"fellows": [{"name": "low-eur", **fields}]}))
    with pytest.raises(ConfigError) as info:
        load_grants(str(path))
    text = str(info.value)
    assert text.startswith(f"{path}: ") and says in text and where in text and "\n" not in text, text
