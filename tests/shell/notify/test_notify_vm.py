"""The whole path on the shared-VM lane (a local job, no sshd, no cluster: no lock needed):
``eps execute --wait`` of a job that ends 0 and of one that fails, each end told once by
the real supervisor to the HTTP receiver and the SMTP server, the start not (a free lane,
no park); a supervisor killed while the target was down tells the end after ``eps status``
revives one, once; the token nowhere in the state directory or the output."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from notify_support import TOKEN, HttpReceiver, SmtpReceiver, notify_config, wait_for

ENTRY = "from eps.shell.cli import entry; entry()"


def _env(tmp: Path, section: str) -> dict[str, str]:
    (tmp / "config.toml").write_text("[jobs]\nsupervisor_idle_s = 1\nwait_poll_s = 0.1\n" + section)
    return {**{k: v for k, v in os.environ.items() if not k.startswith("EPS_")}, "HOME": str(tmp),
            "EPS_STATE_DIR": str(tmp / "state"), "EPS_CONFIG": str(tmp / "config.toml")}  # fmt: skip


def _eps(env: dict[str, str], *argv: str, timeout_s: float = 90) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-c", ENTRY, *argv], env=env, capture_output=True, text=True,
                       timeout=timeout_s, check=False)  # fmt: skip
    return p.returncode, p.stdout, p.stderr


def _supervisor(state: Path) -> int | None:
    try:
        pid = int((state / "supervisor.pid").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def _no_token(state: Path, *outputs: str) -> None:
    for path in state.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    assert not any(TOKEN in o for o in outputs)


def test_vm_jobs_ends_are_told_once_each_and_their_starts_not(
    tmp_path: Path, http: HttpReceiver, smtp: SmtpReceiver
) -> None:
    env = _env(tmp_path, notify_config([http.url, smtp.url]))
    ok, bad = "v" + uuid.uuid4().hex[:9], "v" + uuid.uuid4().hex[:9]
    rc, out, err = _eps(env, "execute", "--wait", "--dispatch-id", ok, "cpu-small", "--duration", "20s", "--",
                        'echo hi > "$EPS_OUTPUT_DIR/o"')  # fmt: skip
    assert rc == 0, (out, err)
    rc2, out2, err2 = _eps(env, "execute", "--wait", "--dispatch-id", bad, "cpu-small", "--duration", "20s", "--",
                           "exit 5")  # fmt: skip
    assert rc2 == 5, (out2, err2)
    want = [f"eps {ok}: ended 0", f"eps {bad}: failed (exit 5)"]
    for r in (http, smtp):
        wait_for(lambda r=r: sorted(r.titles()) == sorted(want), 20, f"both ends at {type(r).__name__}")
    body = next(g["message"] for g in http.got if g["title"] == want[0])
    assert "lane: vm" in body and f"outputs in {tmp_path / 'state' / 'outputs' / ok}" in body, body
    wait_for(lambda: _supervisor(tmp_path / "state") is None, 30, "the supervisor to leave")
    assert sorted(http.titles()) == sorted(want) and sorted(smtp.titles()) == sorted(want)
    _no_token(tmp_path / "state", out, err, out2, err2)


def test_a_supervisor_killed_with_the_end_untold_tells_it_once_after_a_revival(
    tmp_path: Path, http: HttpReceiver
) -> None:
    env = _env(tmp_path, notify_config([http.url]))
    d = "v" + uuid.uuid4().hex[:9]
    http.mode = "refuse"
    rc, out, err = _eps(env, "execute", "--wait", "--dispatch-id", d, "cpu-small", "--duration", "20s", "--", "true")
    assert rc == 0, (out, err)
    wait_for(lambda: http.tried >= 1, 20, "the end's notice to be tried")
    pid = _supervisor(tmp_path / "state")
    assert pid is not None  # it stays: a notice is owed
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: _supervisor(tmp_path / "state") is None, 10, "the supervisor to die")
    time.sleep(0.5)
    assert http.got == []
    http.mode = "ok"
    rc, out, err = _eps(env, "status")  # revives a supervisor: a notice is owed
    assert rc == 0, err
    wait_for(lambda: http.titles() == [f"eps {d}: ended 0"], 20, "the end after the revival")
    wait_for(lambda: _supervisor(tmp_path / "state") is None, 30, "the supervisor to leave")
    assert http.titles() == [f"eps {d}: ended 0"]
    with contextlib.suppress(FileNotFoundError):
        assert TOKEN not in (tmp_path / "state" / "logs" / "supervisor.log").read_text()
    _no_token(tmp_path / "state", out, err)
