"""A command through an OpenSSH master's control socket without starting an ``ssh`` process.

OpenSSH's connection-sharing protocol (``PROTOCOL.mux`` in OpenSSH, version 4, unchanged
since OpenSSH 5.x): after both sides say hello, a passenger client asks for a session
(``MUX_C_NEW_SESSION``: the command, no tty, no forwarding), hands over its stdin, stdout
and stderr (three ``SCM_RIGHTS`` messages of one byte each), and reads the master's
``MUX_S_SESSION_OPENED``, then ``MUX_S_EXIT_MESSAGE`` with the command's exit code; the
master closes the socket when the session is over.  The master runs the command on its
connection exactly as ``ssh -o ControlPath=...`` would have asked it to, so the remote
side cannot tell the difference; eps saves starting ``ssh`` (about 6 ms of CPU each time:
its libraries and OpenSSL's set-up) on every probe, log read and command a supervisor runs.

The rules:

- Nothing ran unless the master opened the session: no socket, a stale one, another
  protocol version, a refusal (``MUX_S_PERMISSION_DENIED``/``MUX_S_FAILURE``) are
  ``None``, and the caller runs ``ssh`` as before (which replaces a dead master).  A
  master that accepts the connection but says nothing for :data:`HANDSHAKE_S` is a lost
  connection (255), so the caller closes it and connects afresh.
- Once the session is open, the answer is the command's: its exit code and output, or,
  when the master went away before the exit message, ssh's own code for a lost
  connection (255, with a line saying so), as ``ssh`` itself reports it.
- ``timeout_s`` bounds the whole exchange; at the deadline the socket is closed (the
  master ends the session, as when an ``ssh`` client is killed) and the result is
  ``timed_out``, as :func:`~eps.shell.remote.process.run_process` reports it.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import struct
import time

from eps.shell.remote.process import Completed

MUX_MSG_HELLO = 0x00000001
MUX_C_NEW_SESSION = 0x10000002
MUX_C_ALIVE_CHECK = 0x10000004
MUX_C_TERMINATE = 0x10000005
MUX_S_OK = 0x80000001
MUX_S_EXIT_MESSAGE = 0x80000004
MUX_S_ALIVE = 0x80000005
MUX_S_SESSION_OPENED = 0x80000006
MUX_S_TTY_ALLOC_FAIL = 0x80000008
VERSION = 4
NO_ESCAPE = 0xFFFFFFFF
LOST = 255  # ssh's own exit code when the connection went away
#: How long the master may take to say hello and to open a session (it answers in
#: milliseconds; one that does not is treated as absent and ``ssh`` is run instead).
HANDSHAKE_S = 2.0
_MAX_PACKET = 256 * 1024
_U32 = struct.Struct(">I")


def _u32(value: int) -> bytes:
    return _U32.pack(value)


def _string(data: bytes) -> bytes:
    return _u32(len(data)) + data


class _Protocol(Exception):
    """The master said something this client does not understand, or nothing."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise _Protocol("the master closed the socket")
        data += chunk
    return data


def _read_packet(sock: socket.socket) -> tuple[int, bytes]:
    (length,) = _U32.unpack(_recv_exact(sock, 4))
    if not 4 <= length <= _MAX_PACKET:
        raise _Protocol(f"a packet of {length} bytes")
    body = _recv_exact(sock, length)
    return _U32.unpack_from(body)[0], body[4:]


def _send_packet(sock: socket.socket, body: bytes) -> None:
    sock.sendall(_u32(len(body)) + body)


class _Hung(Exception):
    """A master is listening but did not say hello in time."""


def _connect(path: str, timeout_s: float) -> socket.socket | None:
    """A socket to the master at ``path`` that has said hello (version 4), or None (no
    master there: no socket, a stale one, another protocol).  :class:`_Hung` when one
    accepted the connection but did not answer within ``timeout_s``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        sock.connect(path)
        _send_packet(sock, _u32(MUX_MSG_HELLO) + _u32(VERSION))
        kind, body = _read_packet(sock)
        if kind != MUX_MSG_HELLO or len(body) < 4 or _U32.unpack_from(body)[0] != VERSION:
            raise _Protocol("not a version 4 hello")
    except TimeoutError:
        sock.close()
        raise _Hung from None
    except (OSError, _Protocol, struct.error):
        sock.close()
        return None
    return sock


def _request(path: str, kind: int) -> tuple[int, bytes] | None:
    """One request without a session (alive check, terminate): the answer's kind and its body
    after the request id; ``(0, b"")`` when the master closed the socket instead of
    answering; None when no master took the request."""
    try:
        sock = _connect(path, HANDSHAKE_S)
    except _Hung:
        return None
    if sock is None:
        return None
    with sock:
        try:
            _send_packet(sock, _u32(kind) + _u32(1))
        except OSError:
            return None
        try:
            got, body = _read_packet(sock)
        except _Protocol:
            return 0, b""
        except (OSError, struct.error):
            return None
    if len(body) < 4 or _U32.unpack_from(body)[0] != 1:
        return None
    return got, body[4:]


def alive(path: str) -> int | None:
    """The pid of the master at ``path`` (``MUX_C_ALIVE_CHECK``), or None when none answers."""
    answer = _request(path, MUX_C_ALIVE_CHECK)
    if answer is None or answer[0] != MUX_S_ALIVE or len(answer[1]) < 4:
        return None
    return int(_U32.unpack_from(answer[1])[0])


def terminate(path: str) -> bool:
    """Ask the master at ``path`` to end now (``MUX_C_TERMINATE``): whether it agreed (its
    ``MUX_S_OK``, or the socket closed as it went)."""
    answer = _request(path, MUX_C_TERMINATE)
    return answer is not None and answer[0] in (MUX_S_OK, 0)


def run(path: str, command: str, *, stdin: bytes | None = None, timeout_s: float | None = None) -> Completed | None:
    """Run the shell line ``command`` in a new session of the master at ``path``; None when
    no session was opened (nothing ran: run ``ssh`` instead)."""
    began = time.monotonic()
    deadline = None if timeout_s is None else began + timeout_s
    try:
        sock = _connect(path, HANDSHAKE_S if timeout_s is None else min(HANDSHAKE_S, timeout_s))
    except _Hung:  # a transport failure, as ssh would have met it: the caller replaces the master
        return Completed(LOST, "", f"eps: the shared ssh connection did not answer within {HANDSHAKE_S:g} s")
    if sock is None:
        return None
    with contextlib.ExitStack() as stack:
        stack.callback(sock.close)
        fds: list[int] = []
        stack.callback(_close_all, fds)
        if stdin is None:
            their_in = os.open(os.devnull, os.O_RDONLY)
            fds.append(their_in)
            our_in = None
        else:
            their_in, our_in = os.pipe()
            fds += [their_in, our_in]
        out_r, their_out = os.pipe()
        err_r, their_err = os.pipe()
        fds += [out_r, their_out, err_r, their_err]
        request = (
            _u32(MUX_C_NEW_SESSION) + _u32(1) + _string(b"")
            + _u32(0) + _u32(0) + _u32(0) + _u32(0)  # no tty, no X11, no agent, not a subsystem
            + _u32(NO_ESCAPE) + _string(b"") + _string(command.encode())
        )  # fmt: skip
        try:
            _send_packet(sock, request)
            for fd in (their_in, their_out, their_err):
                sock.sendmsg([b"\0"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])
            kind, body = _read_packet(sock)
        except (OSError, _Protocol, struct.error):
            return None
        if kind != MUX_S_SESSION_OPENED or len(body) < 8:
            return None  # refused: nothing ran
        session = _U32.unpack_from(body, 4)[0]
        for fd in (their_in, their_out, their_err):  # the master has its own copies now
            fds.remove(fd)
            _close(fd)
        return _follow(sock, session, our_in, stdin or b"", out_r, err_r, deadline, fds)
    return None  # pragma: no cover - the with block always returns


def _follow(
    sock: socket.socket,
    session: int,
    our_in: int | None,
    data: bytes,
    out_r: int,
    err_r: int,
    deadline: float | None,
    fds: list[int],
) -> Completed:
    """Feed stdin, collect stdout and stderr, read the exit message, until the master has
    closed the socket and both pipes are at their end (or the deadline)."""
    sock.setblocking(False)
    out, err, wire = bytearray(), bytearray(), bytearray()
    code: int | None = None
    sent = 0
    with selectors.DefaultSelector() as sel:
        sel.register(sock, selectors.EVENT_READ, "sock")
        sel.register(out_r, selectors.EVENT_READ, out)
        sel.register(err_r, selectors.EVENT_READ, err)
        if our_in is not None:
            os.set_blocking(our_in, False)
            sel.register(our_in, selectors.EVENT_WRITE, "in")
        while sel.get_map():
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                return Completed(-1, _text(out), _text(err), timed_out=True)
            for key, _ in sel.select(wait):
                if key.data == "in":
                    try:
                        sent += os.write(key.fd, data[sent : sent + 65536])
                    except BrokenPipeError:
                        sent = len(data)  # the command does not read its stdin
                    if sent >= len(data):
                        sel.unregister(key.fd)
                        fds.remove(key.fd)
                        _close(key.fd)
                    continue
                if key.data == "sock":
                    got = _recv(sock)
                    if got is None:
                        continue
                    if not got:
                        sel.unregister(sock)
                        continue
                    wire += got
                    code = _exit_code(wire, session, code)
                    continue
                chunk = os.read(key.fd, 65536)
                if chunk:
                    key.data.extend(chunk)
                else:
                    sel.unregister(key.fd)
    if code is None:
        note = "eps: the shared ssh connection closed before the command ended"
        return Completed(LOST, _text(out), (_text(err) + "\n" + note).lstrip("\n"))
    return Completed(code, _text(out), _text(err))


def _recv(sock: socket.socket) -> bytes | None:
    """What the master sent (empty: it closed the socket); None: nothing yet."""
    try:
        return sock.recv(65536)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""


def _exit_code(wire: bytearray, session: int, code: int | None) -> int | None:
    """Consume the whole packets in ``wire``; the exit code once the exit message came."""
    while len(wire) >= 4:
        (length,) = _U32.unpack_from(wire)
        if len(wire) < 4 + length:
            break
        body = bytes(wire[4 : 4 + length])
        del wire[: 4 + length]
        if len(body) < 4:
            continue
        kind = _U32.unpack_from(body)[0]
        if kind == MUX_S_EXIT_MESSAGE and len(body) >= 12 and _U32.unpack_from(body, 4)[0] == session:
            code = _U32.unpack_from(body, 8)[0] & 0xFF
    return code


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        _close(fd)


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _text(data: bytes | bytearray) -> str:
    return bytes(data).decode(errors="replace")
