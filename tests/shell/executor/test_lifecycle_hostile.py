"""A job's outputs and log are hostile input (issue 19): nothing a job writes makes eps
write outside its pull target or its state dir, or show a local file; ``eps logs`` passes
bytes on as they are, a chunk at a time.  On the VM lane and on a GCP VM (the test sshd),
through ``eps`` commands, the way a user runs it."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

#: cpu-small for 30 s stays on the shared VM (P2); for 30 min it goes to GCP (P3).
ON = {"vm": "30s", "gcp": "30m"}


def _run(eps: Any, lane: str, line: str, *, wait: bool = True) -> str:
    """Run ``line`` on ``lane``; with ``wait``, as ``execute --wait`` (the machine is released
    after the pull), else started and left running (its machine stays for ``pull --to``)."""
    _, _, err = eps("execute", "cpu-small", "--duration", ON[lane], *(["--wait"] if wait else []), "--", line)
    assert "Traceback" not in err, err
    rows = eps.status()
    assert rows[0]["handle"]["lane"] == lane, rows
    dispatch: str = rows[0]["dispatch"]
    return dispatch


def _pull_to(eps: Any, dispatch: str, target: Path) -> tuple[int, str, str]:
    """``eps pull --to`` once the job has ended."""
    for _ in range(200):
        rc, out, err = eps("pull", dispatch, "--to", str(target))
        if "has not ended yet" not in err:
            return rc, out, err
        time.sleep(0.1)
    raise AssertionError(f"{dispatch} did not end")


@pytest.mark.parametrize("lane", ["vm", "gcp"])
def test_pull_to_writes_nothing_outside_its_target(eps: Any, tmp_path: Path, lane: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    line = (
        'echo result > "$EPS_OUTPUT_DIR/result.txt"; echo mine > "$EPS_OUTPUT_DIR/notes.log"; '
        f'ln -s {outside} "$EPS_OUTPUT_DIR/job.log"; ln -s /etc/passwd "$EPS_OUTPUT_DIR/passwd"; '
        'mkdir -p "$EPS_OUTPUT_DIR/a"; ln -s ../../../../../../etc/shadow "$EPS_OUTPUT_DIR/a/up"; '
        'ln -s result.txt "$EPS_OUTPUT_DIR/alias"; echo the log; sleep 2'
    )
    d = _run(eps, lane, line, wait=False)
    target = tmp_path / "pulled"
    rc, out, err = _pull_to(eps, d, target)
    assert rc == 0, (out, err)
    assert list(outside.iterdir()) == []  # the log did not follow the planted link
    assert (target / "result.txt").read_text() == "result\n"
    for planted in ("job.log", "passwd", "a/up"):
        assert not os.path.lexists(target / planted), planted
    assert os.readlink(target / "alias") == "result.txt"  # a link inside the outputs stays a link
    rc, log, err = eps("logs", d)
    assert rc == 0 and "the log" in log, (log, err)


@pytest.mark.parametrize("lane", ["vm", "gcp"])
def test_an_output_named_job_log_is_not_overwritten_by_the_log(eps: Any, tmp_path: Path, lane: str) -> None:
    d = _run(eps, lane, 'echo mine > "$EPS_OUTPUT_DIR/job.log"; echo the real log; sleep 2', wait=False)
    rc, out, err = _pull_to(eps, d, tmp_path / "pulled")
    assert rc == 0, (out, err)
    assert (tmp_path / "pulled" / "job.log").read_text() == "mine\n"
    rc, log, err = eps("logs", d)
    assert rc == 0 and "the real log" in log, (log, err)


@pytest.mark.parametrize("lane", ["vm", "gcp"])
@pytest.mark.parametrize("kind", ["file", "directory"])
def test_a_planted_log_link_never_shows_a_local_file(eps: Any, tmp_path: Path, lane: str, kind: str) -> None:
    secret = tmp_path / "secret"
    if kind == "file":
        secret.write_text("LOCAL-SECRET-CONTENT\n")
    else:
        secret.mkdir()
        (secret / "inner").write_text("LOCAL-SECRET-CONTENT\n")
    d = _run(eps, lane, f'echo hello; ln -sfn {secret} "$EPS_OUTPUT_DIR/../job.log"')
    rc, out, err = eps("logs", d)
    assert rc in (0, 2), (rc, out, err)  # never 70
    assert "LOCAL-SECRET-CONTENT" not in out + err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, err
    kept = eps.state / "logs" / f"{d}.log"
    assert not kept.is_symlink()
    for f in (eps.state / "logs").iterdir():
        assert not f.is_symlink()


def test_a_kept_log_that_is_a_link_is_refused_in_one_line(eps: Any, tmp_path: Path) -> None:
    d = _run(eps, "vm", "echo hello")
    kept = eps.state / "logs" / f"{d}.log"
    kept.unlink()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", kept)  # however it got there, it is not shown, and not a crash
    rc, out, err = eps("logs", d)
    assert rc == 2 and "not shown" in err and len(err.strip().splitlines()) == 1, (rc, out, err)


class _Chunks:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.chunks.append(bytes(data))

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("lane", ["vm", "gcp"])
def test_live_logs_stream_bytes_as_they_are(eps: Any, lane: str) -> None:
    """``eps logs`` (not -f) of a running job: invalid UTF-8 passes through untouched, and a
    log of several MiB is handed on in pieces, never held whole."""
    from eps.shell.config.load import load_settings
    from eps.shell.lanes import Lanes
    from eps.shell.service import lifecycle as life
    from eps.shell.state.ledger import Ledger

    line = "python3 -c 'import sys; sys.stdout.buffer.write(b\"\\xff\\xfe\\x00bin\\n\" * 1500000)'; sleep 60"
    rc, _, err = eps("execute", "cpu-small", "--duration", ON[lane], "--", line)
    assert rc == 0, err
    d = eps.status()[0]["dispatch"]
    settings = load_settings(eps.env)
    ledger, lanes = Ledger(settings.state_dir), Lanes(settings, eps.options)
    sink = _Chunks()
    want = b"\xff\xfe\x00bin\n" * 1500000
    try:
        for _ in range(100):
            sink.chunks.clear()
            assert life.logs(ledger, lanes, d, follow=False, out=sink) == 0
            if want in b"".join(sink.chunks):
                break
            time.sleep(0.1)
    finally:
        lanes.close()
        ledger.close()
    got = b"".join(sink.chunks)
    assert want in got
    assert len(sink.chunks) > 1 and max(len(c) for c in sink.chunks) <= 1 << 20
    rc, _, err = eps("cancel", d)
    assert rc == 0, err


def test_a_workdir_holding_the_state_dir_ships_none_of_it(eps: Any, tmp_path: Path) -> None:
    """``--workdir`` a directory that holds eps's state dir (here: ``tmp/state``): eps's key,
    another dispatch's kept env values and dispatch roots stay home; the note says so."""
    rc, _, err = eps("execute", "cpu-small", "--duration", "30s", "--env", "TOKEN=VERY-SECRET-VALUE", "--", "sleep 30")
    assert rc == 0, err
    running = eps.status()[0]["dispatch"]
    assert (eps.state / "env" / f"{running}.env").exists() and (eps.state / "ssh" / "id_ed25519").exists()
    (tmp_path / "project.py").write_text("print('p')\n")
    line = 'find . > "$EPS_OUTPUT_DIR/files"; cat -- $(find . -type f) > "$EPS_OUTPUT_DIR/all" 2>&1; true'
    rc, out, err = eps("execute", "cpu-small", "--duration", "30s", "--workdir", str(tmp_path), "--wait", "--", line)
    assert rc == 0, (out, err)
    d = next(r["dispatch"] for r in eps.status() if r["dispatch"] != running)
    shipped = (eps.state / "outputs" / d / "files").read_text().splitlines()
    assert "./project.py" in shipped
    assert not [p for p in shipped if p.startswith("./state")], shipped
    everything = (eps.state / "outputs" / d / "all").read_bytes()
    assert b"VERY-SECRET-VALUE" not in everything and b"PRIVATE KEY" not in everything
    notes = [line for line in err.splitlines() if "left out of workdir" in line]
    assert len(notes) == 1 and "eps state directories: state" in notes[0], err
    eps("cancel", running)


def test_the_state_dir_is_the_users_alone(eps: Any) -> None:
    """Another user of the shared VM reads nothing: state dir 0700 (tightened when an older
    eps made it 0755), ledger and its WAL 0600, logs 0700."""
    os.chmod(eps.state, 0o755)  # noqa: S103 - what an older eps left
    rc, _, err = eps("execute", "cpu-small", "--duration", "30s", "--wait", "--", "echo hi")
    assert rc == 0, err
    mode = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (eps.state, eps.state / "logs", eps.state / "runs")}
    assert mode == {"state": 0o700, "logs": 0o700, "runs": 0o700}
    for f in eps.state.glob("ledger.sqlite3*"):
        assert stat.S_IMODE(f.stat().st_mode) & 0o077 == 0, f


@pytest.mark.parametrize("count", ["1", "2"])
def test_the_secret_values_go_when_the_job_ended(eps: Any, count: str) -> None:
    """The job's own ``env`` file in its VM-lane dispatch root and the kept values in the state
    dir live only while the dispatch does (a fan-out parent's too, once its copies ended)."""
    rc, _, err = eps("execute", "cpu-small", "--duration", "30s", "--count", count, "--env", "TOK=SEKRET-VALUE",
                     "--wait", "--", 'test "${#TOK}" = 12')  # fmt: skip
    assert rc == 0, (err, [p.read_text() for p in (eps.state / "logs").iterdir()])
    assert list((eps.state / "runs").glob("*/*/env")) == []
    parent = next(r["dispatch"] for r in eps.status() if r["parent"] is None)
    rc, _, err = eps("logs", parent)
    assert rc == 0, err
    assert list((eps.state / "env").glob("*.env")) == []
    found = [p for p in eps.state.rglob("*") if p.is_file() and b"SEKRET-VALUE" in p.read_bytes()]
    assert found == []


def test_a_new_machine_at_a_reused_address_is_a_new_machine(eps: Any, gcp: Any, tmp_path: Path) -> None:
    """A VM that an earlier one's address was given to, with another host key: the dispatch
    runs (trust on first use, per machine), and the VM's entry goes when it is released."""
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "hk")], check=True)
    other = " ".join((tmp_path / "hk.pub").read_text().split()[:2])
    known = eps.state / "ssh" / "known_hosts"
    known.write_text(f"{gcp.nat_ip} {other}\n")
    rc, out, err = eps("execute", "cpu-small", "--duration", "30m", "--wait", "--", 'echo ok > "$EPS_OUTPUT_DIR/o"')
    assert rc == 0, (out, err)
    [row] = eps.status()
    assert row["handle"]["lane"] == "gcp"
    assert (eps.state / "outputs" / row["dispatch"] / "o").read_text() == "ok\n"
    assert known.read_text().splitlines() == [f"{gcp.nat_ip} {other}"]  # the released VM's entry is gone
