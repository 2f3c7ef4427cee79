"""``eps execute debug --pin gcp --wait`` for real on the GCP fake (issue 35): the job runs
on an L4 machine type (``g2-standard-4``, the cheapest GPU of at least 24 GB), shipped over
ssh to the test sshd, and its exit code comes back; when spot L4s are exhausted in every
zone, the walk moves to the next family (A100 40GB spot), not to the end of the plan; a
config's own intent (the README's ``[intents.lora-7b]``) plans and executes the same way.  eps
runs as child processes (the fault suite's helpers); nothing it started outlives the test."""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "shell" / "faults"))
faults: Any = importlib.import_module("faults_support")


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Any]:
    with faults.cloud(tmp_path) as eps:
        yield eps


def _execute(cloud: Any, line: str) -> tuple[int, str, str]:
    argv = ("execute", "debug", "--duration", "30m", "--pin", "gcp", "--wait", "--", "bash", "-c", line)
    return cloud.run(*argv, timeout_s=240)  # type: ignore[no-any-return]


def _machines(cloud: Any) -> list[tuple[str, str, str]]:
    """(machine type, zone, provisioning model) of each insert eps sent, in order."""
    out = []
    for body in cloud.gcp.bodies("POST", r"/zones/[^/]+/instances$"):
        _, zone, _, kind = body["machineType"].rsplit("/", 3)
        out.append((kind, zone, body["scheduling"].get("provisioningModel", "STANDARD")))
    return out


def test_debug_pinned_to_gcp_runs_on_an_l4(cloud: Any) -> None:
    rc, out, err = _execute(cloud, 'echo on-an-l4; echo 1 > "$EPS_OUTPUT_DIR/ran"; exit 4')
    assert rc == 4, (out, err)
    assert _machines(cloud) == [("g2-standard-4", "us-central1-a", "SPOT")]
    [d] = cloud.dispatch_ids()
    assert cloud.dispatch(d)["handle"]["machine"] == "g2-standard-4"
    assert "on-an-l4" in cloud.run("logs", d)[1]
    assert cloud.gcp.instances == {}  # pulled and deleted: nothing keeps billing


def test_spot_l4s_exhausted_everywhere_move_to_the_next_family(cloud: Any) -> None:
    for zone in faults.ZONES:  # the next insert in each zone: out of resources
        cloud.gcp.program(zone, faults.gcp_fake.exhausted(cloud.gcp.project, zone))
    rc, out, err = _execute(cloud, "echo on-an-a100; exit 0")
    assert rc == 0, (out, err)
    assert _machines(cloud) == [
        ("g2-standard-4", "us-central1-a", "SPOT"),
        ("g2-standard-4", "us-central1-b", "SPOT"),
        ("a2-highgpu-1g", "us-central1-a", "SPOT"),
    ]
    [d] = cloud.dispatch_ids()
    outcomes = [(a["rung"], a["outcome"]) for a in cloud.attempts(d)]
    assert [rung for rung, _ in outcomes] == [
        "gcp/g2-standard-4/us-central1-a/spot",
        "gcp/g2-standard-4/us-central1-b/spot",
        "gcp/a2-highgpu-1g/us-central1-a/spot",
    ], json.dumps(outcomes)


def test_a_zone_the_tables_name_that_does_not_sell_the_type_is_skipped_not_a_stop(cloud: Any) -> None:
    """The tables say us-central1-a sells g2-standard-4; this Compute says it does not exist
    there (its 400): that zone is out for the rung, and the job runs in the next one."""
    zones = dict(cloud.gcp.machine_zones)
    zones["g2-standard-4"] = zones["g2-standard-4"] - {"us-central1-a"}
    cloud.gcp.machine_zones = zones
    rc, out, err = _execute(cloud, "echo in-the-next-zone; exit 0")
    assert rc == 0, (out, err)
    [d] = cloud.dispatch_ids()
    outcomes = [(a["rung"], a["outcome"]) for a in cloud.attempts(d)]
    assert outcomes[0] == ("gcp/g2-standard-4/us-central1-a/spot", "zone_exhausted"), outcomes
    assert _machines(cloud)[-1] == ("g2-standard-4", "us-central1-b", "SPOT")


def _readme_intents() -> str:
    """The README's ``[intents.lora-7b]`` example (one A100 80GB, 6 h by default)."""
    [block] = re.findall(r"```toml\n(\[intents\..*?)```", (ROOT / "README.md").read_text(), re.S)
    return block


def test_the_readme_config_intent_plans_and_executes_on_the_machine_it_names(cloud: Any) -> None:
    """Issue 35 item 3: a config's own intent, planned from the config and run for real:
    ``a2-ultragpu-1g`` on-demand (6 h, not restartable: P11), the plan's first rung."""
    cloud.config.write_text(cloud.config.read_text() + _readme_intents())
    rc, out, err = cloud.run("plan", "lora-7b", "--pin", "gcp", "--json")
    assert rc == 0, err
    planned = json.loads(out)
    assert planned["job"]["duration_s"] == 6 * 3600  # the intent's default duration
    first = planned["rungs"][0]
    assert (first["machine"], first["zone"], first["provisioning"]) == ("a2-ultragpu-1g", "us-central1-a", "on-demand")
    assert {r["machine"] for r in planned["rungs"]} == {"a2-ultragpu-1g"} and first["runnable"]  # a100-80 only

    line = 'echo lora-on-an-a100; echo 1 > "$EPS_OUTPUT_DIR/adapter"; exit 3'
    rc, out, err = cloud.run("execute", "lora-7b", "--pin", "gcp", "--wait", "--", "bash", "-c", line, timeout_s=240)
    assert rc == 3, (out, err)  # the job's own exit code
    assert _machines(cloud) == [("a2-ultragpu-1g", "us-central1-a", "STANDARD")]  # on-demand (P11)
    [d] = cloud.dispatch_ids()
    assert [a["rung"] for a in cloud.attempts(d)] == [first["key"]]
    assert "lora-on-an-a100" in cloud.run("logs", d)[1]
    assert cloud.gcp.instances == {}  # pulled and deleted: nothing keeps billing
