"""`next_events` through the MCP SDK's stdio client, for two real VM-lane jobs under the
supervisor: the events of both come back, a call with the returned cursor only newer ones,
an event the supervisor writes while a call waits is returned (every event of both logs is
returned exactly once over the calls), the timeout bounds a call (with progress meanwhile),
an unknown dispatch is `unknown_dispatch`; and the cursor against a writer appending (and
tearing lines) while calls are in progress, in this process, without the SDK."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from test_mcp_server import SLACK_S, Call, Setup, valid, with_server

from eps.shell.service.operations import Service
from eps.shell.state.events import EventLog, log_path


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    s = Setup(tmp_path)
    yield s
    s.end_supervisor()


def _logged(state: Path, d: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(log_path(str(state), d)).read_text().splitlines() if line.strip()]


def test_next_events_of_two_dispatches_from_a_cursor_bounded_and_never_losing_one(setup: Setup) -> None:
    async def scenario(session: ClientSession, call: Call) -> None:
        failed, doc = await call("execute", {"intent": "cpu-small", "duration": "20s", "command": "sleep 6"})
        assert not failed, doc
        slow = doc["dispatch"]
        failed, doc = await call("execute", {"intent": "cpu-small", "duration": "20s", "command": "exit 4"})
        assert not failed, doc
        quick = doc["dispatch"]

        got: list[dict[str, Any]] = []
        cursor = None
        while not any(e["event"] == "ended" and e["dispatch"] == quick for e in got):  # every dispatch of the dir
            failed, doc = await call("next_events", {"cursor": cursor, "timeout": 20})
            assert not failed and doc["events"], doc
            valid(doc, "next_events")
            assert set(doc["dispatches"]) == {slow, quick}
            got += doc["events"]
            cursor = doc["next_cursor"]
        assert {e["dispatch"] for e in got} == {slow, quick}
        assert not any(e["event"] == "ended" and e["dispatch"] == slow for e in got), "the slow one still sleeps"

        t = time.monotonic()  # the slow one's end is written while this call waits: it returns it
        while not any(e["event"] == "ended" and e["dispatch"] == slow for e in got):
            failed, doc = await call("next_events", {"dispatches": [slow, quick], "cursor": cursor, "timeout": 20})
            assert not failed and doc["events"], doc
            assert {e["dispatch"] for e in doc["events"]} <= {slow}  # the quick one had nothing newer
            got += doc["events"]
            cursor = doc["next_cursor"]
        assert time.monotonic() - t < 20
        ended = next(e for e in got if e["event"] == "ended" and e["dispatch"] == quick)
        assert ended["exit_code"] == 4
        for d in (slow, quick):  # once each, in the log's order: none lost, none twice
            assert [e for e in got if e["dispatch"] == d] == _logged(setup.state, d)
            assert cursor[d] == os.path.getsize(log_path(str(setup.state), d))
        for e in got:
            valid(e, "events")

        seen: list[tuple[float, float | None, str | None]] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            seen.append((done, total, message))

        t = time.monotonic()
        res = await session.call_tool("next_events", {"dispatches": quick, "cursor": cursor, "timeout": 6},
                                      progress_callback=progress)  # fmt: skip
        took = time.monotonic() - t
        doc = res.structured_content
        assert not res.is_error and doc is not None and doc["events"] == [], doc
        assert doc["timeout_s"] == 6 and doc["waited_s"] >= 6 and took < 6 + SLACK_S, (doc, took)
        assert doc["next_cursor"][quick] == cursor[quick]
        assert seen and seen[0][1] == 6, seen  # a progress notification while it waited

        failed, doc = await call("next_events", {"dispatches": [quick, "e0000000000"], "timeout": 1})
        assert failed and doc["error"]["code"] == "unknown_dispatch" and doc["exit_code"] == 2, doc
        failed, doc = await call("next_events", {"cursor": {quick: -1}, "timeout": 1})
        assert failed and doc["error"]["code"] == "next_events", doc
        failed, doc = await call("next_events", {"max_events": 0})
        assert failed and doc["error"]["code"] == "next_events", doc

        listed = await session.list_tools()  # execute's own notification targets: env:NAME of the server's env
        assert "notify" in next(t for t in listed.tools if t.name == "execute").input_schema["properties"]
        failed, doc = await call("execute", {"intent": "cpu-small", "duration": "20s", "command": "true",
                                             "notify": ["env:NO_SUCH_HOOK"]})  # fmt: skip
        assert failed and doc["error"]["code"] == "notify" and doc["exit_code"] == 2, doc
        assert "notify env:NO_SUCH_HOOK: NO_SUCH_HOOK is not set" in doc["error"]["text"], doc
        failed, doc = await call("next_events", {"cursor": cursor, "timeout": 0})
        assert not failed and doc["events"] == [] and doc["dispatches"] == sorted([slow, quick]), doc  # none recorded

    with_server(setup.env, scenario)


def test_a_cursor_loses_no_event_a_writer_appends_or_tears_while_calls_run(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text("[jobs]\nsupervise = 'inline'\n")  # no supervisor: this test is the writer
    env = {"HOME": str(tmp_path), "EPS_STATE_DIR": str(tmp_path / "s"), "EPS_CONFIG": str(tmp_path / "c.toml")}
    svc = Service(env)
    from eps.core.model import Job

    with svc.opened() as ctx:
        for d in ("a1", "b2"):
            ctx.ledger.new_dispatch(d, Job(intent="cpu-small", duration_s=60, command=("true",)))
    logs = {d: EventLog(str(tmp_path / "s"), d) for d in ("a1", "b2")}
    n = 150

    def write() -> None:
        for i in range(n):
            for d, log in logs.items():
                if i % 10 == 5:  # a line written in two pieces: a reader in between must not take half
                    line = json.dumps({"schema_version": 1, "event": "parked", "ts": time.time(), "dispatch": d,
                                       "i": i}) + "\n"  # fmt: skip
                    with open(log.path, "ab", buffering=0) as fh:
                        fh.write(line[:20].encode())
                        time.sleep(0.003)
                        fh.write(line[20:].encode())
                else:
                    log.emit("parked", dispatch=d, i=i)  # same ts to the ms, often: the cursor is no timestamp
            time.sleep(0.001)

    writer = threading.Thread(target=write)
    writer.start()
    got: list[dict[str, Any]] = []
    cursor: dict[str, int] | None = None
    pages = 0
    deadline = time.monotonic() + 30
    while len(got) < 2 * n:
        assert time.monotonic() < deadline, f"{len(got)} of {2 * n} events came back"
        doc = svc.next_events(None, cursor, timeout_s=2, max_events=7)
        assert doc["events"] or writer.is_alive(), f"{len(got)} of {2 * n} events came back"
        assert len(doc["events"]) <= 7
        got += doc["events"]
        cursor = doc["next_cursor"]
        pages += 1
    writer.join()
    assert pages > 2 * n // 7 - 1  # bounded pages, each at most max_events
    for d in logs:
        assert [e["i"] for e in got if e["dispatch"] == d] == list(range(n)), d  # every one, once, in order
    t = time.monotonic()
    doc = svc.next_events(["a1"], cursor, timeout_s=1)
    assert doc["events"] == [] and 1.0 <= time.monotonic() - t < 1.0 + SLACK_S
    late = threading.Timer(0.5, lambda: logs["b2"].emit("ended", dispatch="b2", exit_code=0))
    late.start()
    t = time.monotonic()
    doc = svc.next_events(["b2", "a1"], cursor, timeout_s=10)  # written while this call waits
    late.join()
    assert [e["event"] for e in doc["events"]] == ["ended"] and time.monotonic() - t < 5, doc
