"""eps's own client of an ssh master's control socket (eps.shell.remote.muxclient), against
real OpenSSH masters to the test sshd, and against hand-written sockets for the answers a real
master gives only when something is wrong: once a machine's master is up, a command goes
through it without an ``ssh`` process (none can be found on PATH and the command still runs),
with its exit code, stdout, stderr and stdin intact; nothing runs when the master refuses or
is not there; a master that hangs or dies mid-command is a lost connection."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from returns.result import Success
from ssh_support import USER, VM_IP

from eps.shell.remote import mux, muxclient
from eps.shell.remote.keys import KeyPair
from eps.shell.remote.ssh import ONCE, Remote, check_remote, run_remote


@pytest.fixture
def machine(plain_key: KeyPair) -> Iterator[Remote]:
    # a plain login: the stderr compared byte for byte below is the command's alone
    remote = Remote.ssh(VM_IP, plain_key, user=USER, port=22, machine=f"m-{uuid.uuid4().hex[:12]}")
    assert check_remote(remote, "true", "first contact") == Success("")  # ssh itself: the master
    assert remote.control_path is not None and mux.master_pid(remote.control_path) is not None
    yield remote
    mux.close_machine(os.path.dirname(plain_key.private_path), remote.host_key_alias or "")


def test_a_command_through_the_master_starts_no_ssh(
    machine: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no ssh (nor anything else) can be started from here on
    assert check_remote(machine, "echo hi; echo there >&2", "probe") == Success("hi\n")
    done = run_remote(machine, "printf out; printf err >&2; exit 7", patience=ONCE).unwrap()
    assert (done.returncode, done.stdout, done.stderr) == (7, "out", "err")
    data = os.urandom(3 * 1024 * 1024)
    counted = run_remote(machine, "wc -c", stdin=data, patience=ONCE).unwrap()
    assert counted.stdout.strip() == str(len(data))
    big = run_remote(machine, "head -c 5000000 /dev/zero | tr '\\0' x", patience=ONCE).unwrap()
    assert big.stdout == "x" * 5_000_000


def test_alive_and_terminate_speak_to_a_real_master(machine: Remote) -> None:
    path = machine.control_path or ""
    pid = muxclient.alive(path)
    assert pid is not None and pid == mux.masters_at([path])[0]
    assert muxclient.terminate(path)
    assert mux.wait_gone([pid]) == []
    assert muxclient.alive(path) is None
    assert muxclient.run(path, "true") is None  # no master: nothing ran, the caller runs ssh


def test_the_deadline_bounds_a_command_through_the_master(machine: Remote) -> None:
    began = time.monotonic()
    done = muxclient.run(machine.control_path or "", "sleep 5", timeout_s=0.5)
    assert done is not None and done.timed_out and time.monotonic() - began < 2.5
    assert muxclient.run(machine.control_path or "", "echo still") == muxclient.Completed(0, "still\n")


def test_a_master_killed_mid_command_is_a_lost_connection(machine: Remote) -> None:
    path = machine.control_path or ""
    pid = muxclient.alive(path)
    assert pid is not None
    threading.Timer(0.4, os.kill, (pid, signal.SIGKILL)).start()
    done = muxclient.run(path, "echo begun; sleep 3; echo never")
    assert done is not None and done.returncode == muxclient.LOST
    assert "closed before the command ended" in done.stderr


# --- sockets that answer as a master does only when something is wrong ----------------------


def _packet(*words: int, text: bytes | None = None) -> bytes:
    body = b"".join(struct.pack(">I", w) for w in words)
    if text is not None:
        body += struct.pack(">I", len(text)) + text
    return struct.pack(">I", len(body)) + body


def _serve(path: str, answer: Callable[[socket.socket], None]) -> threading.Thread:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def once() -> None:
        with server:
            conn, _ = server.accept()
            with conn:
                answer(conn)

    thread = threading.Thread(target=once, daemon=True)
    thread.start()
    return thread


def _hello_then(reply: bytes) -> Callable[[socket.socket], None]:
    def answer(conn: socket.socket) -> None:
        conn.recv(64)
        conn.sendall(_packet(muxclient.MUX_MSG_HELLO, muxclient.VERSION))
        conn.recv(4096)  # the session request
        conn.sendall(reply)
        conn.settimeout(2)
        with contextlib.suppress(OSError):
            while conn.recv(4096):  # until the client hangs up
                pass

    return answer


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(_hello_then(_packet(0x80000003, 1, text=b"session request failed")), id="failure"),
        pytest.param(_hello_then(_packet(0x80000002, 1, text=b"permission denied")), id="refused"),
        pytest.param(lambda conn: None, id="closes-at-once"),
        pytest.param(lambda conn: (conn.recv(64), conn.sendall(_packet(muxclient.MUX_MSG_HELLO, 3))), id="version-3"),
    ],
)
def test_nothing_runs_when_the_master_does_not_open_a_session(
    tmp_path: Path, answer: Callable[[socket.socket], None]
) -> None:
    path = str(tmp_path / "cm")
    thread = _serve(path, answer)
    assert muxclient.run(path, "true") is None
    thread.join(5)
    assert not thread.is_alive()


def test_a_master_that_says_nothing_is_a_lost_connection(tmp_path: Path) -> None:
    path = str(tmp_path / "cm")
    gate = threading.Event()
    thread = _serve(path, lambda conn: gate.wait(10))
    began = time.monotonic()
    done = muxclient.run(path, "true")
    gate.set()
    thread.join(5)
    assert done is not None and done.returncode == muxclient.LOST and "did not answer" in done.stderr
    assert time.monotonic() - began < muxclient.HANDSHAKE_S + 1.5


def test_a_stale_socket_is_no_master(tmp_path: Path) -> None:
    path = str(tmp_path / "cm")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()  # the file stays, nobody listens
    assert muxclient.run(path, "true") is None
    assert muxclient.alive(path) is None and not muxclient.terminate(path)
