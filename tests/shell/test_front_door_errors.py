"""The three front doors (the ``eps`` command, the MCP server, the Python API) say an error
the same way: one code word, one line, one exit code (:mod:`eps.shell.service.errors`); and a bug in
eps is one line naming the one file that keeps its traceback."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest

import eps
from eps.shell.cli.main import main
from eps.shell.mcp.server import build
from eps.shell.service.operations import Service


def _env(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "config.toml"
    config.write_text("[jobs]\nsupervise = 'detached'\n")
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "EPS_STATE_DIR": str(tmp_path / "state"),
            "EPS_CONFIG": str(config)}  # fmt: skip


def _cli(argv: list[str], env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    rc = main(argv, env=dict(env))
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, (out, err)
    return rc, json.loads(err)


def _tool(env: dict[str, str], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = anyio.run(build(Service(dict(env))).call_tool, name, arguments)
    assert result.is_error, result
    doc: dict[str, Any] = result.structured_content
    assert json.loads(result.content[0].text) == doc
    return doc


def test_an_unknown_intent_is_the_same_code_line_and_exit_at_every_door(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = _env(tmp_path)
    rc, doc = _cli(["plan", "gpu1", "--duration", "2h", "--json"], env, capsys)
    assert rc == doc["exit_code"] == 2 and doc["error"]["code"] == "unknown_intent", doc
    assert "did you mean gpu-1?" in doc["error"]["text"] and not doc["error"]["text"].startswith("eps:")
    assert _tool(env, "plan", {"intent": "gpu1", "duration": "2h"}) == doc
    with pytest.raises(eps.JobError) as raised:
        eps.plan(eps.Job("gpu1", duration="2h", settings_env=env), env=env)
    from eps.shell.service.errors import failure

    assert tuple(failure(raised.value)) == (doc["error"]["code"], doc["error"]["text"], doc["exit_code"])


def test_a_bad_dispatch_id_is_the_same_at_every_door_and_records_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = _env(tmp_path)
    argv = ["execute", "cpu-small", "--duration", "20s", "--dispatch-id", "x y", "--json", "--", "true"]
    rc, doc = _cli(argv, env, capsys)
    assert rc == doc["exit_code"] == 2 and doc["error"]["code"] == "bad_dispatch_id", doc
    tool = _tool(env, "execute", {"intent": "cpu-small", "duration": "20s", "command": "true", "dispatch_id": "x y"})
    assert tool == doc
    run = eps.execute(eps.Job("cpu-small", duration="20s", command="true", settings_env=env), dispatch_id="x y",
                      detach=True, env=env)  # fmt: skip
    assert run == eps.Execution(2, (), (), doc["error"]["text"]) and type(run.exit_code) is int
    assert main(["status", "--json"], env=dict(env)) == 0
    assert json.loads(capsys.readouterr().out)["dispatches"] == []


def test_a_bug_in_eps_is_one_line_naming_the_one_file_with_its_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No honest input makes eps crash (the state dir, ledger, config and file readers all
    refuse in one line), so the intent table's document and view are made to raise, here only."""
    from eps.shell.render import documents, views
    def broken(*_: Any) -> dict[str, Any]:
        raise RuntimeError("eps: the table\nis broken")

    monkeypatch.setattr(documents, "intents_doc", broken)
    monkeypatch.setattr(views, "print_intents", broken)
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(crashes))
    env = _env(tmp_path)
    texts = []
    rc, doc = _cli(["intents", "--json"], env, capsys)
    assert rc == doc["exit_code"] == 70 and doc["error"]["code"] == "internal", doc
    texts.append(doc["error"]["text"])
    assert main(["intents"], env=dict(env)) == 70
    err = capsys.readouterr().err
    assert err.startswith("eps: internal error: RuntimeError: ") and err.count("\n") == 1, err
    texts.append(err.removeprefix("eps: internal error: ").rstrip("\n"))
    tool = _tool(env, "intents", {})
    assert tool["exit_code"] == 70 and tool["error"]["code"] == "internal", tool
    texts.append(tool["error"]["text"])
    files = sorted(crashes.iterdir())
    assert len(files) == 3
    for text in texts:  # each line names its own file (mkstemp's names are random)
        [named] = [p for p in files if text == f"RuntimeError: the table is broken (details in {p})"]
        trace = named.read_text()
        assert trace.startswith("Traceback (most recent call last):") and "in broken" in trace
        assert trace.rstrip().endswith("RuntimeError: eps: the table\nis broken")
    assert len(set(texts)) == 3
