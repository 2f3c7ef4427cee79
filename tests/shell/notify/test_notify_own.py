"""A job's own targets (``--notify``, ``notify =`` in a job file, ``Job(notify=...)``): told
the dispatch's ``[notify] events`` by the supervisor, once each, beside the config's targets;
their URLs only in a mode-0600 file of the state directory while a notice is owed, gone after,
and nowhere else (argv, the state directory's other files, the events, the output); a bad one
is one line, exit 2, nothing recorded.

The GCP test runs its job on the test sshd (``flock /tmp/eps-slurm.lock``); the rest need no
lock (the shared-VM lane, or nothing runs at all)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from notify_support import TOKEN, HttpReceiver, notify_config, wait_for
from notify_support import token_nowhere as _token_nowhere

from eps.shell.cli import main

ENTRY = "from eps.shell.cli import entry; entry()"


def _own_file(state: Path, d: str) -> Path:
    return state / "notify" / f"{d}.json"


def _rows(state: Path) -> int:
    db = state / "ledger.sqlite3"
    if not db.exists():
        return 0
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
        return int(c.execute("SELECT count(*) FROM dispatches").fetchone()[0])


def test_a_gcp_job_with_notify_env_tells_its_own_target_started_and_ended_once(eps: Any, http: HttpReceiver) -> None:
    other = HttpReceiver().start()  # the config's own target: told the same, with its own cursor
    try:
        eps.config.write_text(eps.config.read_text() + notify_config([other.url]))
        d = "n" + uuid.uuid4().hex[:10]
        child = eps.start("execute", "--json", "--wait", "--dispatch-id", d, "cpu-small", "--duration", "10m",
                          "--pin", "gcp", "--notify", "env:HOOK", "--", "sleep 4", env={"HOOK": http.url})  # fmt: skip
        wait_for(lambda: f"eps {d}: started on gcp" in http.titles(), 90, "the started notice")
        kept = _own_file(eps.state, d)
        assert kept.exists() and stat.S_IMODE(kept.stat().st_mode) == 0o600, "kept while a notice is owed"
        assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
        assert json.loads(kept.read_text()) == {"urls": [http.url]}
        _token_nowhere(eps.state, but=kept)  # while it runs: ps, the ledger, events, logs, inputs
        assert child.wait(120) == 0, child.err
        want = [f"eps {d}: started on gcp", f"eps {d}: ended 0"]
        for r in (http, other):
            wait_for(lambda r=r: sorted(r.titles()) == sorted(want), 20, "both notices at each target")
        wait_for(lambda: eps.supervisor_pid() is None, 60, "the supervisor to leave")
        assert http.titles() == want and other.titles() == want  # once each, in order
        assert not kept.exists(), "gone once the dispatch owes no more notices"
        body = http.got[1]["message"]
        assert "exit code: 0" in body and "lane: gcp" in body, body
        _token_nowhere(eps.state, "".join(child.lines), child.err)
    finally:
        other.stop()


def _vm_env(tmp: Path, config: str = "", jobs: str = "", **more: str) -> dict[str, str]:
    (tmp / "config.toml").write_text("[jobs]\nsupervisor_idle_s = 1\nwait_poll_s = 0.1\n" + jobs + config)
    return {**{k: v for k, v in os.environ.items() if not k.startswith("EPS_")}, "HOME": str(tmp),
            "EPS_STATE_DIR": str(tmp / "state"), "EPS_CONFIG": str(tmp / "config.toml"), **more}  # fmt: skip


def test_a_vm_job_file_s_own_target_gets_the_dispatch_s_events_setting(tmp_path: Path, http: HttpReceiver) -> None:
    env = _vm_env(tmp_path, '[notify]\nevents = ["failed"]\n', MY_HOOK=http.url)
    job = tmp_path / "job.toml"
    job.write_text('intent = "cpu-small"\nduration = "20s"\ncommand = "echo hi; exit 3"\nnotify = ["env:MY_HOOK"]\n')
    d = "v" + uuid.uuid4().hex[:9]
    p = subprocess.run([sys.executable, "-c", ENTRY, "execute", "--wait", "--dispatch-id", d, "--job", str(job)],
                       env=env, capture_output=True, text=True, timeout=90, check=False)  # fmt: skip
    assert p.returncode == 3, (p.stdout, p.stderr)
    wait_for(lambda: http.titles() == [f"eps {d}: failed (exit 3)"], 20, "the failed notice")
    state = tmp_path / "state"
    wait_for(lambda: not _own_file(state, d).exists(), 20, "the kept URLs to go")
    assert http.titles() == [f"eps {d}: failed (exit 3)"]  # only what [notify] events says
    _token_nowhere(state, p.stdout, p.stderr)


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (["--notify", "nosuch://127.0.0.1/" + TOKEN], "--notify nosuch://127.0.0.1: apprise cannot read this URL"),
        (["--notify", "hook-" + TOKEN], "--notify not scheme://...: apprise cannot read"),
        (["--notify", "env:UNSET_HOOK"], "--notify env:UNSET_HOOK: UNSET_HOOK is not set (or empty)"),
        (["--notify", "env:EMPTY_HOOK"], "--notify env:EMPTY_HOOK: EMPTY_HOOK is not set (or empty)"),
        (["--notify", "env:BAD_HOOK"], "--notify env:BAD_HOOK (nosuch://***): apprise cannot read"),
        (["--notify", "env:EPS_HOOK"], "eps keeps its settings' variables (EPS_HOOK)"),
        (["--notify", " "], "--notify: a target may not be blank"),
        (["--notify", "json://127.0.0.1:9/" + TOKEN, "--notify", "env:UNSET_HOOK"], "env:UNSET_HOOK"),
    ],
)
def test_a_bad_notify_is_one_line_exit_2_and_nothing_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: list[str], says: str
) -> None:
    env = _vm_env(tmp_path, EMPTY_HOOK="", BAD_HOOK=f"nosuch://{TOKEN}", EPS_HOOK="json://127.0.0.1:9/x")
    rc = main(["execute", "--dispatch-id", "vbad", "cpu-small", "--duration", "20s", *given, "--", "true"], env=env)
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert says in err and err.count("\n") == 1 and TOKEN not in err + out, err
    state = tmp_path / "state"
    assert _rows(state) == 0
    for kept in ("notify", "inputs", "events", "env", "supervisor.pid"):
        assert not (state / kept).exists(), kept


def test_the_python_api_and_a_job_file_refuse_a_bad_target_the_same_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import eps

    env = _vm_env(tmp_path)
    bad = eps.execute(eps.Job("cpu-small", duration="20s", command="true", notify=["env:NOPE"], settings_env=env),
                      detach=True, env=env)  # fmt: skip
    assert bad.exit_code == 2 and bad.error is not None and "notify env:NOPE: NOPE is not set" in bad.error, bad
    assert "NOPE" not in repr(eps.Job("cpu-small", notify=["env:NOPE"], settings_env=env))
    job = tmp_path / "job.toml"
    job.write_text(f'intent = "cpu-small"\nduration = "20s"\ncommand = "true"\nnotify = ["nosuch://h/{TOKEN}"]\n')
    rc = main(["execute", "--job", str(job)], env=env)
    err = capsys.readouterr().err
    assert rc == 2 and f"{job}: notify nosuch://***: apprise cannot read" in err and TOKEN not in err, err
    assert _rows(tmp_path / "state") == 0
    inline = _vm_env(tmp_path, jobs="supervise = 'inline'\n", HOOK="json://127.0.0.1:9/x")
    rc = main(["execute", "cpu-small", "--duration", "20s", "--notify", "env:HOOK", "--", "true"], env=inline)
    assert rc == 2 and "--notify needs a supervisor" in capsys.readouterr().err
    assert _rows(tmp_path / "state") == 0
    rc = main(["execute", "--resume", "vgone", "--notify", "env:HOOK"], env=env)
    assert rc == 2 and "--resume DISPATCH takes no --notify" in capsys.readouterr().err
