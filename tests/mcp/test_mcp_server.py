"""`eps mcp` driven through the MCP SDK's own stdio client, as an agent's client would:
initialize, list the tools, `plan` equal to `eps plan --json` for a table of jobs, a bad
intent as a tool error with the did-you-mean, and a VM-lane job under the supervisor:
`execute` back in under 2 s, `wait` within its bound, `logs` from an offset, `cancel`.
Every result is validated against the shipped JSON Schema of its document."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from eps.core.contract import TOOLS
from eps.shell.cli import main
from eps.shell.render.documents import guide_text

ROOT = Path(__file__).resolve().parents[2]
ENTRY = "from eps.shell.cli.main import entry; entry()"
#: Slack on every documented time bound: a loaded 2-core machine (a CI run) adds seconds of
#: process start; the bound proven is "answers, does not wait for the job or the provider".
SLACK_S = 6.0

JOBS = [
    ["gpu-1", "--duration", "3h"],
    ["cpu-small", "--duration", "20s"],
    ["cpu-small", "--duration", "2h", "--count", "3", "--restartable"],
    ["cpu-bigmem", "--duration", "5h", "--footprint-gb", "80"],
    ["debug", "--duration", "1h", "--count", "2"],
    ["gpu-2", "--pin", "runpod", "--duration", "30m"],
    ["gpu-1", "--duration", "1h", "--park", "high-eur=700"],
    ["cpu-small"],
    ["gpu-1", "--duration", "2h", "--gpu", "a100-80"],
    ["debug", "--duration", "30m", "--gpu-mem", "40"],
    ["gpu-1", "--duration", "2h", "--sweep", "6", "--sweep-parallel", "2"],
]


def _args(argv: list[str]) -> dict[str, Any]:
    """The CLI's job options as the tool's arguments (named as the long options)."""
    args: dict[str, Any] = {"intent": argv[0]}
    i = 1
    while i < len(argv):
        name = argv[i].removeprefix("--").replace("-", "_")
        if name == "restartable":
            args[name] = True
            i += 1
            continue
        value: Any = argv[i + 1]
        whole = name in ("count", "gpu_mem", "sweep", "sweep_parallel")
        args[name] = int(value) if whole else float(value) if name == "footprint_gb" else value
        i += 2
    return args


def valid(doc: Any, name: str) -> None:
    schema = json.loads((ROOT / "eps" / "schemas" / f"{name}.json").read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)


class Setup:
    """A state directory and a config of its own: the VM lane for real, under a supervisor."""

    def __init__(self, tmp: Path) -> None:
        self.state = tmp / "state"
        config = tmp / "config.toml"
        config.write_text("[jobs]\nsupervise = 'detached'\nsupervisor_idle_s = 2\nwait_poll_s = 0.05\n")
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("EPS_", "RUNPOD_", "GOOGLE_"))},
            "EPS_STATE_DIR": str(self.state),
            "EPS_CONFIG": str(config),
            "HOME": str(tmp),
        }

    def end_supervisor(self) -> None:
        """The test ends what it started: every dispatch cancelled, the supervisor killed."""
        main(["cancel", "--all"], env=dict(self.env))
        pid_file = self.state / "supervisor.pid"
        pid = int(pid_file.read_text() or 0) if pid_file.exists() else 0
        if pid <= 0:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.02)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    s = Setup(tmp_path)
    yield s
    s.end_supervisor()


Call = Callable[[str, dict[str, Any]], Awaitable[tuple[bool, dict[str, Any]]]]


def with_server(env: dict[str, str], scenario: Callable[[ClientSession, Call], Awaitable[None]]) -> None:
    """Start `eps mcp` through the SDK's stdio client and run ``scenario`` against it."""

    async def run() -> None:
        params = StdioServerParameters(command=sys.executable, args=["-c", ENTRY, "mcp"], env=env, cwd=str(ROOT))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()

            async def call(name: str, arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
                res = await session.call_tool(name, arguments)
                doc = res.structured_content
                assert isinstance(doc, dict), res
                assert json.loads(res.content[0].text) == doc  # type: ignore[union-attr]
                if res.is_error:
                    valid(doc, "error")
                return res.is_error, doc

            await scenario(session, call)

    anyio.run(run)


def test_tools_plan_equals_the_cli_and_errors_are_the_clis_error_object(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = []
    for argv in JOBS:
        main(["plan", *argv, "--json"], env=dict(setup.env))
        expected.append(json.loads(capsys.readouterr().out))

    async def scenario(session: ClientSession, call: Call) -> None:
        listed = await session.list_tools()
        assert [t.name for t in listed.tools] == [name for name, _ in TOOLS]
        schemas = {t.name: t.input_schema for t in listed.tools}
        assert "gpu-1" in schemas["plan"]["properties"]["intent"]["enum"]
        assert "vm" in schemas["execute"]["properties"]["pin"]["enum"]
        for name in ("plan", "execute", "status", "cancel"):  # named as the CLI's long options
            assert set(schemas[name]["properties"]) >= {"plan": {"intent", "duration", "footprint_gb", "park"},
                                                        "execute": {"command", "workdir", "env", "time_limit"},
                                                        "status": {"dispatch", "active", "since", "all"},
                                                        "cancel": {"dispatch", "all"}}[name]  # fmt: skip
        for argv, want in zip(JOBS, expected, strict=True):
            failed, doc = await call("plan", _args(argv))
            assert not failed and doc == want, argv
            valid(doc, "plan")
        failed, doc = await call("plan", {"intent": "gpu1", "duration": "2h"})
        assert failed and doc["error"]["code"] == "unknown_intent" and doc["exit_code"] == 2
        assert "did you mean gpu-1?" in doc["error"]["text"]
        failed, doc = await call("plan", {"intent": "gpu-1", "duration": "soon"})
        assert failed and doc["error"]["code"] == "bad_duration"
        failed, doc = await call("wait", {"dispatch": "e0000000000"})
        assert failed and doc["error"]["code"] == "unknown_dispatch"
        failed, doc_intents = await call("intents", {})  # the server keeps answering after errors
        assert not failed
        valid(doc_intents, "intents")
        failed, doc = await call("check", {"timeout": "5s"})
        assert not failed
        valid(doc, "check")
        listed_docs = await session.list_resources()
        assert {str(r.uri) for r in listed_docs.resources} == {"eps://guide", "eps://intents"}
        guide = await session.read_resource("eps://guide")
        assert guide.contents[0].text == guide_text()  # type: ignore[union-attr]
        table = await session.read_resource("eps://intents")
        assert json.loads(table.contents[0].text) == doc_intents  # type: ignore[union-attr]

    with_server(setup.env, scenario)


def test_a_vm_job_detached_bounded_wait_logs_from_an_offset_and_cancel(setup: Setup) -> None:
    async def scenario(session: ClientSession, call: Call) -> None:
        line = "for i in 1 2 3 4 5; do echo line-$i; done; echo $EPS_TASK_COUNT > $EPS_OUTPUT_DIR/n; exit 3"
        t = time.monotonic()
        failed, doc = await call("execute", {"intent": "cpu-small", "duration": "20s", "command": line})
        took = time.monotonic() - t
        assert not failed, doc
        assert took < 2.0 + SLACK_S, took
        valid(doc, "execute")
        quick = doc["dispatch"]

        t = time.monotonic()
        failed, doc = await call("wait", {"dispatch": quick, "timeout": "30s"})
        assert not failed and doc["ended"] and doc["exit_code"] == 3, doc
        assert time.monotonic() - t < 30
        valid(doc, "wait")
        [job] = doc["jobs"]
        assert job["outputs"] and (Path(job["outputs"]) / "n").read_text().strip() == "1"

        failed, whole = await call("logs", {"dispatch": quick})
        assert not failed
        valid(whole, "logs")
        [log] = whole["logs"]
        assert log["source"] == "kept" and log["offset"] == 0 and log["next_offset"] == log["size"]
        assert all(f"line-{i}\n" in log["text"] for i in range(1, 6))
        text, offset = "", 0
        while offset < log["size"]:  # 10 bytes at a time, each call from where the last one ended
            failed, piece = await call("logs", {"dispatch": quick, "offset": offset, "max_bytes": 10})
            [part] = piece["logs"]
            assert not failed and part["offset"] == offset and len(part["text"].encode()) <= 10
            text, offset = text + part["text"], part["next_offset"]
        assert text == log["text"]
        failed, piece = await call("logs", {"dispatch": quick, "offset": offset})
        assert piece["logs"][0]["text"] == "" and piece["logs"][0]["next_offset"] == offset
        failed, tail = await call("logs", {"dispatch": quick, "lines": 2})
        assert tail["logs"][0]["text"] == "".join(log["text"].splitlines(keepends=True)[-2:])
        failed, doc = await call("logs", {"dispatch": quick, "max_bytes": 0})
        assert failed and doc["error"]["code"] == "logs"

        failed, doc = await call("execute", {"intent": "cpu-small", "duration": "20s", "command": ["sleep", "60"]})
        assert not failed
        slow = doc["dispatch"]
        t = time.monotonic()
        failed, doc = await call("wait", {"dispatch": slow, "timeout": 1})
        waited = time.monotonic() - t
        assert not failed and not doc["ended"] and doc["exit_code"] is None, doc
        assert 0.9 <= waited < 1.0 + SLACK_S, waited
        assert doc["timeout_s"] == 1

        seen: list[tuple[float, float | None, str | None]] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            seen.append((done, total, message))

        res = await session.call_tool("wait", {"dispatch": slow, "timeout": 6}, progress_callback=progress)
        assert not res.is_error and not res.structured_content["ended"]  # type: ignore[index]
        assert res.structured_content["timeout_s"] == 6 and res.structured_content["waited_s"] >= 6  # type: ignore[index]
        assert seen and seen[0][1] == 6 and slow in str(seen[0][2]), seen  # a progress notification while it waited

        failed, doc = await call("status", {"dispatch": slow})
        assert not failed and doc["dispatches"][0]["state"] in ("walking", "started")
        valid(doc, "status")
        failed, doc = await call("cancel", {"dispatch": slow})
        assert not failed and slow in doc["cancelled"], doc
        valid(doc, "cancel")
        failed, doc = await call("wait", {"dispatch": slow, "timeout": 20})
        assert doc["ended"] and doc["exit_code"] == 130, doc
        failed, doc = await call("wait", {"dispatch": quick, "timeout": 10_000})  # cut to its bound
        assert doc["timeout_s"] == 600
        failed, doc = await call("pull", {"dispatch": quick, "to": str(setup.state.parent / "out")})
        assert not failed, doc
        valid(doc, "pull")
        assert (setup.state.parent / "out" / "n").read_text().strip() == "1"

    with_server(setup.env, scenario)


def test_the_plan_path_never_imports_the_mcp_sdk_nor_the_ledger(tmp_path: Path) -> None:
    """On a machine with no ledger yet (a state dir that holds one is read for boot loops)."""
    import subprocess

    code = ("import sys; from eps.shell.cli.main import main; "
            "main(['plan', 'gpu-1', '--duration', '3h', '--json']); "
            "print([m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'pydantic', 'sqlite3') "
            "or m in ('eps.shell.state.ledger', 'eps.shell.mcp.server', 'eps.shell.lanes')])")  # fmt: skip
    env = {**os.environ, "EPS_STATE_DIR": str(tmp_path / "state")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_python_api_detaches_and_waits_within_a_bound(setup: Setup) -> None:
    import eps

    env = setup.env
    t = time.monotonic()
    run = eps.execute(eps.Job("cpu-small", duration="20s", command="sleep 60", settings_env=env), detach=True, env=env)
    assert time.monotonic() - t < 2.0 + SLACK_S
    assert run.exit_code == 0 and run.error is None and run.state in ("walking", "started"), run
    [slow] = run.dispatches
    t = time.monotonic()
    got = eps.wait(slow, timeout=1, env=env)
    assert not got["ended"] and 0.9 <= time.monotonic() - t < 5.0
    valid(got, "wait")
    late = eps.execute(eps.Job("cpu-small", duration="20s", command="sleep 60", settings_env=env), wait=True,
                       timeout=1, env=env)  # fmt: skip
    assert late.exit_code == 75 and late.state in ("walking", "started"), late
    done = eps.execute(eps.Job("cpu-small", duration="20s", command="exit 4", settings_env=env), wait=True,
                       timeout="30s", env=env)  # fmt: skip
    assert done.exit_code == 4, done
    assert any(e["event"] == "ended" for e in done.events)
    for e in done.events:
        valid(e, "events")
    assert eps.wait(done.dispatches[0], env=env)["exit_code"] == 4
    bad = eps.execute(eps.Job("cpu-small", duration="20s", settings_env=env), detach=True, env=env)
    assert bad.exit_code == 2 and bad.error is not None and "no command" in bad.error
    assert [r["state"] for r in eps.status(active=True, env=env)] != []


def test_execute_pipeline_takes_the_pipeline_document_and_wait_names_a_failed_phase(setup: Setup) -> None:
    """The same table a pipeline file holds, as a document: one dispatch, each phase on the VM lane,
    the second given the first's outputs; a failed first phase ends the second dependency_failed."""

    def doc(first: str) -> dict[str, Any]:
        return {"phases": [
            {"name": "prep", "cpu": True, "intent": "cpu-small", "duration": "20s", "command": first},
            {"name": "report", "needs": ["prep"], "cpu": True, "intent": "cpu-small", "duration": "20s",
             "command": 'cp "$EPS_INPUT_DIR/prep/x" "$EPS_OUTPUT_DIR/got"'},
        ]}  # fmt: skip

    async def scenario(session: ClientSession, call: Call) -> None:
        failed, got = await call("execute_pipeline", {"pipeline": doc('echo hi > "$EPS_OUTPUT_DIR/x"'),
                                                      "dispatch_id": "mcppipe"})  # fmt: skip
        assert not failed, got
        valid(got, "execute")
        failed, got = await call("wait", {"dispatch": "mcppipe", "timeout": "60s"})
        assert not failed and got["ended"] and got["exit_code"] == 0, got
        report = next(j for j in got["jobs"] if j["dispatch"] == "mcppipen2")
        assert (Path(report["outputs"]) / "got").read_text() == "hi\n"
        # D/phase at every tool that names a dispatch: the phase's own row
        failed, got = await call("wait", {"dispatch": "mcppipe/report", "timeout": "10s"})
        assert not failed and (got["dispatch"], got["exit_code"]) == ("mcppipen2", 0), got
        failed, got = await call("status", {"dispatch": "mcppipe/prep"})
        assert not failed and [r["dispatch"] for r in got["dispatches"]] == ["mcppipen1"], got
        failed, got = await call("logs", {"dispatch": "mcppipe/report"})
        assert not failed and "exit code 0" in got["logs"][0]["text"], got
        failed, got = await call("pull", {"dispatch": "mcppipe/prep", "to": str(Path(setup.env["HOME"]) / "prep")})
        assert not failed and (Path(setup.env["HOME"]) / "prep" / "x").read_text() == "hi\n", got
        for tool in ("wait", "status", "logs", "pull", "cancel"):  # an unknown phase: the CLI's one line, at each
            failed, got = await call(tool, {"dispatch": "mcppipe/nope"})
            assert failed and got["error"] == {"code": "unknown_dispatch",
                                               "text": "no phase 'mcppipe/nope' (its phases: prep, report)"}, got
        failed, got = await call("execute_pipeline", {"pipeline": doc("exit 6"), "dispatch_id": "mcpbad"})
        assert not failed, got
        failed, got = await call("wait", {"dispatch": "mcpbad", "timeout": "60s"})
        assert not failed and got["ended"] and got["exit_code"] == 3, got
        assert [j["message"].startswith("dependency_failed") for j in got["jobs"]] == [False, True], got
        failed, got = await call("execute_pipeline", {"pipeline": {"phases": []}})
        assert failed and got["error"]["code"] == "pipeline_empty", got

    with_server(setup.env, scenario)
