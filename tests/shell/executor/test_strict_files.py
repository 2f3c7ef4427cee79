"""Config, snapshot and grants files of every wrong type: exit 2, one line, no provider call,
no ledger row (issue 11).  Hypothesis picks a field and a value of the wrong type for it."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

#: Every config field and the kind of value it takes.
CONFIG_FIELDS: dict[tuple[str, str], str] = {
    ("thresholds", "trivial_op_s"): "int",
    ("thresholds", "big_footprint_gb"): "int",
    ("thresholds", "spot_max_s"): "int",
    ("gcp", "project"): "str",
    ("gcp", "zones"): "list",
    ("gcp", "image"): "str",
    ("gcp", "poll_interval_s"): "float",
    ("runpod", "image"): "str",
    ("runpod", "data_centers"): "list",
    ("runpod", "concurrency"): "int",
    ("runpod", "poll_interval_s"): "float",
    ("fanout", "concurrency"): "int",
    ("vm", "vcpus"): "int",
    ("vm", "mem_gb"): "float",
    ("clusters", "login"): "list",
    ("clusters", "qos_ladder"): "list",
    ("clusters", "dev_qos_for_debug"): "bool",
    ("clusters", "advance_on_self_cap"): "bool",
    ("clusters", "first_park_cap_s"): "int",
    ("clusters", "gpus_per_node"): "int",
    ("clusters", "partition"): "str",
}

#: Values of the wrong type for each kind (and, for numbers, values out of range).
WRONG: dict[str, list[Any]] = {
    "int": ["7", True, 2.9, [1], {"a": 1}, math.inf, -5, 10**9],
    "float": ["1.5", True, [1.0], {"a": 1}, math.inf, math.nan, -1.0, 1e9],
    "bool": ["false", "true", 0, 1, ["x"], {"a": True}],
    "str": [7, True, 1.5, ["x"], {"a": "b"}],
    "list": ["us-central1-a", "ssh x", 3, True, {"a": "b"}, [1, 2], [], ["", "x"]],
}


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "inf" if v == math.inf else "nan" if math.isnan(v) else repr(v)
    if isinstance(v, int | str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"


def _config(section: str, key: str, value: Any, base: str) -> str:
    if section == "clusters":
        return base + f'[[clusters]]\nname = "fellows"\n{key} = {_toml_value(value)}\n'
    if section in ("gcp", "runpod"):  # these tables are in the base file already
        lines = [line for line in base.splitlines() if not line.startswith(f"{key} = ")]
        return "\n".join(lines).replace(f"[{section}]", f"[{section}]\n{key} = {_toml_value(value)}") + "\n"
    return f"[{section}]\n{key} = {_toml_value(value)}\n" + base


def _rows(state: Path) -> int:
    path = state / "ledger.sqlite3"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM dispatches").fetchone()[0])


def _refused_without_effect(eps: Any, gcp: Any, runpod: Any, env: dict[str, str], *argv: str) -> str:
    before = (len(gcp.requests), len(runpod.requests), _rows(eps.state))
    rc, out, err = eps("execute", "cpu-small", "--duration", "30m", *argv, "--", "true", env=env)
    assert rc == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("eps: error: ") and "Traceback" not in err, err
    assert (len(gcp.requests), len(runpod.requests), _rows(eps.state)) == before
    return err


FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(st.sampled_from(sorted(CONFIG_FIELDS)), st.data())
def test_a_config_value_of_the_wrong_type_changes_nothing(eps: Any, gcp: Any, runpod: Any, field, data) -> None:
    section, key = field
    value = data.draw(st.sampled_from(WRONG[CONFIG_FIELDS[field]]))
    bad = eps.config.parent / "bad-config.toml"
    bad.write_text(_config(section, key, value, eps.config.read_text()))
    err = _refused_without_effect(eps, gcp, runpod, {"EPS_CONFIG": str(bad)})
    assert key in err, err


SNAPSHOT_FIELDS: dict[tuple[str, str], str] = {
    ("clusters", "reachable"): "bool",
    ("clusters", "cluster"): "str",
    ("queues", "free_gpus"): "int",
    ("queues", "qos"): "str",
    ("gcp", "zone"): "str",
    ("runpod", "id"): "str",
}
VALID_SNAPSHOT: dict[str, dict[str, Any]] = {
    "clusters": {"cluster": "fellows", "reachable": True},
    "queues": {"cluster": "fellows", "qos": "high-eur", "free_gpus": 2},
    "gcp": {"machine": "e2-standard-4", "zone": "us-central1-a", "state": "available"},
    "runpod": {"id": "cpu3g", "stock": "high"},
}


@FAST
@given(st.sampled_from(sorted(SNAPSHOT_FIELDS)), st.data())
def test_a_snapshot_value_of_the_wrong_type_changes_nothing(eps: Any, gcp: Any, runpod: Any, field, data) -> None:
    section, key = field
    kind = SNAPSHOT_FIELDS[field]
    value = data.draw(st.sampled_from([v for v in WRONG[kind] if not (kind == "int" and isinstance(v, int))]))
    doc = {section: [{**VALID_SNAPSHOT[section], key: value}]}
    snap = eps.config.parent / "bad-snapshot.json"
    snap.write_text(json.dumps(doc))
    err = _refused_without_effect(eps, gcp, runpod, {}, "--snapshot", str(snap))
    assert f"$.{section}[0].{key}" in err, err


@FAST
@given(st.sampled_from(["priority", "max_gpus_per_user", "name"]), st.data())
def test_a_grants_value_of_the_wrong_type_changes_nothing(eps: Any, gcp: Any, runpod: Any, key, data) -> None:
    kind = "str" if key == "name" else "int"
    value = data.draw(st.sampled_from([v for v in WRONG[kind] if not (kind == "int" and isinstance(v, int))]))
    tier = {"name": "high-eur", "priority": 100, "max_gpus_per_user": 8, key: value}
    grants = eps.config.parent / "bad-grants.json"
    grants.write_text(json.dumps({"fellows": [tier]}))
    _refused_without_effect(eps, gcp, runpod, {}, "--grants", str(grants))
