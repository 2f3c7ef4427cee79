"""A job file's intent or backend that names nothing is one line naming the file and the
field, as every other bad value of a user file is (``job.toml: ... @ $.intent``); the same
value given as a flag keeps the flag's line; nothing is planned, recorded or created."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.cli.test_usability import run, set_up_env


@pytest.mark.parametrize("cmd", [["plan"], ["plan", "--json"], ["execute"], ["execute", "--json"]])
@pytest.mark.parametrize(("body", "key", "says"), [
    ('intent = "nope"\n', "intent", "unknown intent 'nope'"),
    ('intent = "cpu-small"\nbackend = "nowhere"\n', "backend", "unknown lane 'nowhere'"),
])  # fmt: skip
def test_a_bad_intent_or_backend_in_a_job_file_names_the_file_and_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cmd: list[str], body: str, key: str, says: str
) -> None:
    job = tmp_path / "job.toml"
    job.write_text(body)
    env = set_up_env(tmp_path)
    rc, out, err = run(capsys, [*cmd, "--job", str(job), *(["--", "true"] if cmd[0] == "execute" else [])], env)
    assert rc == 2
    line = f"{job}: {says}"
    if "--json" in cmd:
        doc = json.loads(err)
        assert doc["error"]["text"].startswith(line) and doc["error"]["text"].endswith(f"@ $.{key}"), doc
    else:
        assert err.startswith(f"eps: error: {line}") and err.rstrip().endswith(f"@ $.{key}"), err
        assert err.count("\n") == 1 and "--pin" not in err
    assert out == ""
    ledger = Path(env["EPS_STATE_DIR"]) / "ledger.sqlite3"
    if ledger.exists():  # execute opens its ledger first: not one row in it
        with sqlite3.connect(ledger) as db:
            assert db.execute("SELECT count(*) FROM dispatches").fetchone() == (0,)


def test_the_same_value_as_a_flag_keeps_the_flags_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = tmp_path / "job.toml"
    job.write_text('intent = "cpu-small"\nbackend = "vm"\n')
    rc, _, err = run(capsys, ["plan", "--job", str(job), "--pin", "nowhere"], set_up_env(tmp_path))
    assert rc == 2 and err.startswith("eps: error: unknown lane 'nowhere' for --pin") and str(job) not in err
    rc, _, err = run(capsys, ["plan", "nope", "--job", str(job)], set_up_env(tmp_path))
    assert rc == 2 and err.startswith("eps: error: unknown intent 'nope'") and str(job) not in err
