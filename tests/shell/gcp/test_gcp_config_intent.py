"""A config's own intent executes for real (issue 35 item 3): ``[intents.lora-7b]`` (one
A100 80GB, 6 h by default) is planned from the config and ``eps execute lora-7b --pin gcp
--wait`` runs the job on the GCP fake's ``a2-ultragpu-1g``, on-demand (6 h, not restartable:
P11), shipped over ssh to the test sshd; its exit code comes back, and the machine the plan
named first is the one created.  eps runs as child processes (the fault suite's helpers);
nothing it started outlives the test."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "shell" / "faults"))
faults: Any = importlib.import_module("faults_support")

LORA = """
[intents.lora-7b]
resource = "gpu"
gpus = 1
gpu_models = ["a100-80"]
duration = "6h"
description = "LoRA fine-tuning of a 7B model"
"""


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Any]:
    faults.ssh_support.start_sshd()
    gcp = faults.gcp_fake.FakeCompute(faults.PROJECT).start()
    runpod = faults.runpod_fake.FakeRunpod(api_key=faults.KEY, gets_to_running=1).start()
    eps = faults.Eps(tmp_path, gcp, runpod)
    eps.config.write_text(eps.config.read_text() + LORA)
    eps.gcp = gcp
    yield eps
    eps.run("cancel", "--all")
    eps.close()
    gcp.stop()
    runpod.stop()


def test_a_config_intent_plans_and_executes_on_the_machine_it_names(cloud: Any) -> None:
    rc, out, err = cloud.run("plan", "lora-7b", "--pin", "gcp", "--json")
    assert rc == 0, err
    planned = json.loads(out)
    assert planned["job"]["duration_s"] == 6 * 3600  # the intent's default duration
    first = planned["rungs"][0]
    assert (first["machine"], first["zone"], first["provisioning"]) == ("a2-ultragpu-1g", "us-central1-a", "on-demand")
    assert {r["machine"] for r in planned["rungs"]} == {"a2-ultragpu-1g"}  # a100-80 only
    assert first["runnable"], first

    line = 'echo lora-on-an-a100; echo 1 > "$EPS_OUTPUT_DIR/adapter"; exit 3'
    rc, out, err = cloud.run("execute", "lora-7b", "--pin", "gcp", "--wait", "--", "bash", "-c", line, timeout_s=240)
    assert rc == 3, (out, err)  # the job's own exit code
    inserts = cloud.gcp.bodies("POST", r"/zones/[^/]+/instances$")
    assert [b["machineType"].rsplit("/", 1)[-1] for b in inserts] == ["a2-ultragpu-1g"]
    assert inserts[0]["scheduling"].get("provisioningModel", "STANDARD") == "STANDARD"  # on-demand (P11)
    [d] = cloud.dispatch_ids()
    [attempt] = cloud.attempts(d)
    assert attempt["rung"] == first["key"]
    assert cloud.dispatch(d)["handle"]["machine"] == "a2-ultragpu-1g"
    assert "lora-on-an-a100" in cloud.run("logs", d)[1]
    assert cloud.gcp.instances == {}  # pulled and deleted: nothing keeps billing
