"""Routing scenarios as data: every file in tests/core/scenarios/ is a list of
{name, rules, job, snapshot?, grants?, park?, cluster?, policy_vm?, expect}; a job without
"duration" has an unknown one (issue 25); one parametrized
test runs them all through the pure ``plan()``.  ``rules`` names the policy asks
(P1-P13) a scenario pins down; the linter counts them as coverage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eps.core.durations import parse_duration
from eps.core.model import CapacitySnapshot, Job, JobError, ParkState, RoutePlan, VmCapacity, evolve
from eps.core.router import plan
from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY
from eps.shell.config.snapshots import grants_from_data, load_snapshot

SCENARIOS = Path(__file__).parent / "scenarios"


def _load() -> list[Any]:
    cases = []
    for path in sorted(SCENARIOS.glob("*.json")):
        for case in json.loads(path.read_text())["scenarios"]:
            cases.append(pytest.param(case, id=f"{path.stem}: {case['name']}"))
    return cases


def _job(spec: dict[str, Any]) -> Job:
    spec = dict(spec)
    if "duration" in spec:
        spec["duration_s"] = parse_duration(spec.pop("duration"))
    return Job(**spec)


def _snapshot(spec: dict[str, Any] | None, tmp_path: Path) -> CapacitySnapshot:
    if spec is None:
        return CapacitySnapshot()
    f = tmp_path / "snapshot.json"
    f.write_text(json.dumps(spec))
    return load_snapshot(str(f))  # through the real strict converter


def _check(result: RoutePlan, expect: dict[str, Any]) -> None:
    rungs = result.rungs
    keys = [r.key for r in rungs]
    skipped = {(s.lane, s.code.value) for s in result.skipped}
    for name, want in expect.items():
        if name == "rung_keys":
            assert keys == want
        elif name == "lanes":
            assert [r.lane for r in rungs] == want
        elif name == "lanes_set":
            assert {r.lane for r in rungs} == set(want)
        elif name == "lanes_exclude":
            assert not {r.lane for r in rungs} & set(want)
        elif name == "first_lane":
            assert rungs and rungs[0].lane == want, keys
        elif name == "keys_exclude":
            assert not set(keys) & set(want), keys
        elif name == "first_key":
            assert keys and keys[0] == want, keys
        elif name == "first_machine":
            assert rungs and rungs[0].machine == want
        elif name == "first_provisioning":
            assert rungs and rungs[0].provisioning.value == want
        elif name == "first_reason_contains":
            assert rungs and want in rungs[0].reason
        elif name == "provisioning":
            assert [r.provisioning.value for r in rungs] == want
        elif name == "provisioning_set":
            assert {r.provisioning.value for r in rungs} == set(want)
        elif name == "after_fellows_provisioning":
            seen = [r.provisioning.value for r in rungs if r.lane != "fellows"]
            assert list(dict.fromkeys(seen)) == want
        elif name == "machines":
            assert [r.machine for r in rungs] == want
        elif name == "gcp_order":  # each GCP machine/provisioning once, in plan order
            seen = [f"{r.machine}/{r.provisioning.value}" for r in rungs if r.lane == "gcp"]
            assert list(dict.fromkeys(seen)) == want, seen
        elif name == "gcp_zones":  # machine -> its zones in the plan, in order
            for machine, zones in want.items():
                got = list(dict.fromkeys(r.zone for r in rungs if r.machine == machine))
                assert got == zones, (machine, got)
        elif name == "first_gcp_key":
            assert [k for k in keys if k.startswith("gcp/")][:1] == [want], keys
        elif name == "runpod_machines":
            assert [r.machine for r in rungs if r.lane == "runpod"] == want
        elif name == "disk_gb_set":
            assert {r.disk_gb for r in rungs if r.lane == "gcp"} == set(want)
        elif name == "gpus_set":
            assert {r.gpus for r in rungs} == set(want)
        elif name == "qos":
            assert [r.qos for r in rungs if r.lane == "fellows"] == want
        elif name == "qos_prefix":
            assert [r.qos for r in rungs][: len(want)] == want
        elif name == "time_limits":
            assert [r.time_limit_s for r in rungs] == want
        elif name == "time_limits_set":
            assert {r.time_limit_s for r in rungs} == set(want)
        elif name == "reasons_contain":
            assert rungs and all(want in r.reason for r in rungs), [r.reason for r in rungs]
        elif name == "skip_detail_contains":
            lane, code, text = want
            assert any(s.lane == lane and s.code.value == code and text in s.detail for s in result.skipped)
        elif name == "park_caps":
            assert [r.park_cap_s for r in rungs] == want
        elif name == "park_caps_prefix":
            assert [r.park_cap_s for r in rungs][: len(want)] == want
        elif name == "skipped":
            for lane, code in want:
                assert (lane, code) in skipped, sorted(skipped)
        elif name == "not_skipped":
            for lane, code in want:
                assert (lane, code) not in skipped
        elif name == "terminal":
            assert (result.terminal.value if result.terminal else None) == want
        elif name == "worst_case_wait_s":
            assert result.worst_case_wait_s == want
        elif name == "resolved_intent":
            assert result.resolved_intent == want
        elif name == "count":
            assert result.count == want
        elif name == "notes_contain":
            assert any(want in n for n in result.notes), result.notes
        elif name == "park_action":
            assert result.park is not None and result.park.action.value == want
        elif name == "park_remaining_s":
            assert result.park is not None and result.park.remaining_s == want
        else:
            raise AssertionError(f"unknown expectation {name!r}")


@pytest.mark.parametrize("case", _load())
def test_scenario(case: dict[str, Any], tmp_path: Path) -> None:
    job = _job(case["job"])
    snap = _snapshot(case.get("snapshot"), tmp_path)
    grants = grants_from_data(case["grants"], "scenario") if "grants" in case else DEFAULT_GRANTS
    policy = DEFAULT_POLICY
    if "cluster" in case:
        changes = {k: tuple(v) if isinstance(v, list) else v for k, v in case["cluster"].items()}
        fellows = evolve(policy.clusters[0], **changes)
        policy = evolve(policy, clusters=(fellows,))
    if "policy_vm" in case:  # the config's [vm] section: the VM's size when the snapshot says nothing
        policy = evolve(policy, vm=VmCapacity(**case["policy_vm"]))
    park = ParkState(**case["park"]) if "park" in case else None
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(JobError) as info:
            plan(job, snap, grants, park, policy=policy)
        assert info.value.code == expect["error"]
        for text in expect.get("error_contains", ()):
            assert text in str(info.value), str(info.value)
        assert "\n" not in str(info.value)
        return
    _check(plan(job, snap, grants, park, policy=policy), expect)


def test_there_are_enough_scenarios_and_every_rule_has_one() -> None:
    cases = [p.values[0] for p in _load()]
    assert len(cases) >= 30
    named = {r for c in cases for r in c["rules"]}
    missing = {f"P{i}" for i in range(1, 14)} - named
    assert not missing, f"no scenario for {sorted(missing)}"
