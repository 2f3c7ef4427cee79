"""`eps mcp` with one real machine: a CPU job on GCP (the real google-cloud-compute client
against the local Compute server, the job shipped over ssh to the test sshd), driven
through the SDK's stdio client: `execute` back at once, `wait` in bounded calls until the
job ended, its log from an offset, its outputs pulled, its VM deleted once it settled."""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_mcp_server import SLACK_S, Call, valid, with_server

ROOT = Path(__file__).resolve().parents[2]


#: The fault suite's helpers: eps as separate processes against the fakes (none of its tests
#: run here), imported by the name its own conftest uses.
sys.path.insert(0, str(ROOT / "tests" / "shell" / "faults"))
faults: Any = importlib.import_module("faults_support")


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Any]:
    with faults.cloud(tmp_path, detached=True) as eps:
        yield eps


def test_a_gcp_job_through_mcp(cloud: Any) -> None:
    async def scenario(_session: Any, call: Call) -> None:
        line = "echo on-gcp; echo $EPS_TASK_COUNT > $EPS_OUTPUT_DIR/n; exit 7"
        t = time.monotonic()
        failed, doc = await call("execute", {"intent": "cpu-small", "duration": "30m", "command": line})
        assert not failed, doc
        assert time.monotonic() - t < 2.0 + SLACK_S
        valid(doc, "execute")
        d = doc["dispatch"]
        deadline = time.monotonic() + 240
        while True:  # bounded calls, as an agent makes them
            t = time.monotonic()
            failed, doc = await call("wait", {"dispatch": d, "timeout": 5})
            assert not failed and time.monotonic() - t < 5 + SLACK_S, doc
            valid(doc, "wait")
            if doc["ended"] or time.monotonic() > deadline:
                break
        assert doc["ended"] and doc["exit_code"] == 7, doc
        [job] = doc["jobs"]
        assert (Path(job["outputs"]) / "n").read_text().strip() == "1"
        failed, doc = await call("status", {"dispatch": d})
        [row] = doc["dispatches"]
        assert row["handle"]["lane"] == "gcp", row
        failed, doc = await call("logs", {"dispatch": d, "offset": 0, "max_bytes": 4})
        [piece] = doc["logs"]
        failed, rest = await call("logs", {"dispatch": d, "offset": piece["next_offset"]})
        assert "on-gcp" in piece["text"] + rest["logs"][0]["text"]
        assert json.dumps(rest)  # a plain JSON document

    with_server(cloud.env, scenario)
    assert cloud.gcp.instances == {}  # the outputs came back, the VM is deleted: nothing keeps billing


@pytest.fixture
def slow_cloud(tmp_path: Path) -> Iterator[Any]:
    with faults.cloud(tmp_path, detached=True, runpod_latency_s=12.0) as eps:  # cleaned up at full speed
        yield eps


def test_every_tool_returns_within_its_bound_while_the_provider_is_slow(slow_cloud: Any) -> None:
    """RunPod answers every request after 12 s (more than any bound plus its slack): the tools
    still answer within their bounds (execute at once, check and status within their timeout,
    wait within its timeout, logs at once with no log yet)."""

    async def scenario(_session: Any, call: Call) -> None:
        async def timed(name: str, args: dict[str, Any], bound_s: float) -> dict[str, Any]:
            t = time.monotonic()
            failed, doc = await call(name, args)
            took = time.monotonic() - t
            assert not failed, doc
            assert took < bound_s + SLACK_S, (name, took)
            valid(doc, name)
            return doc

        job = {"intent": "cpu-small", "duration": "30m", "pin": "runpod", "command": "sleep 30"}
        d = (await timed("execute", job, 2.0))["dispatch"]
        doc = await timed("check", {"timeout": 1}, 1 + 2.0)
        [runpod] = [r for r in doc["lanes"] if r["lane"] == "runpod"]
        assert not runpod["reachable"] and "no answer within 1 s" in runpod["detail"], runpod
        await timed("status", {"timeout": 1}, 1 + 2.0)
        doc = await timed("wait", {"dispatch": d, "timeout": 2}, 2 + 2.0)
        assert not doc["ended"]
        doc = await timed("logs", {"dispatch": d}, 2.0)
        assert doc["logs"][0]["source"] in ("none", "live")

    with_server(slow_cloud.env, scenario)
