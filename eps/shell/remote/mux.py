"""One OpenSSH master connection per machine eps made: every later ssh (and rsync's ``-e``
ssh) to it rides on that one connection instead of a handshake of its own.

The rules, and why:

- ``ControlMaster=auto``: the first ssh to a machine becomes its master, every later one a
  client of it.  OpenSSH itself replaces a dead master: a socket whose master is gone
  (connect refused) is unlinked and the ssh connects directly, becoming the new master.
  A master that is there but does not carry a command through (a connection its peer
  dropped, a hung process) is closed by :func:`reset` before the command is tried again.
- ``ControlPersist``: the master goes to the background and ends by itself after
  :data:`PERSIST_S` seconds without a client, so none outlives eps for long; eps closes
  it (``ssh -O exit``, :func:`close_machine`) when the machine is released or its
  dispatch settles.
- ``ControlPath``: ``<state>/ssh/cm/<machine hash>-<address hash>``: one socket per
  (machine id, user, address, port); a machine id is never reused, and a new address of
  the same machine is a new master.  A unix socket's path has a hard limit (104 bytes on
  BSDs, 108 on Linux, and ssh binds ``<path>.<16 random characters>`` first), so when the
  state dir's path is too long (or holds characters ssh's option parser would split on),
  the sockets go to a private short directory ``/tmp/eps-<uid>/<state hash>/`` instead,
  which names its state dir in a file ``owner``.  No usable directory: no sharing (each
  ssh connects on its own, as before).
"""

from __future__ import annotations

import base64
import contextlib
import glob
import hashlib
import os
import re
import signal
import stat
import time
from collections.abc import Iterable

#: A master with no client for this long ends by itself (``ControlPersist``).
PERSIST_S = 300
#: The longest socket path every platform binds (BSD/macOS ``sun_path``: 104 bytes, its NUL included).
SUN_PATH_MAX = 103
#: ssh binds ``<path>.<16 random characters>`` and renames it into place.
TEMP_SUFFIX = 17
CONTROL_DIR = "cm"
SHORT_BASE = "/tmp"  # noqa: S108  (a private 0700 directory of ours is checked before use)
OWNER_FILE = "owner"
_SAFE = re.compile(r"[A-Za-z0-9_./-]+")


def _digest(text: str, n: int) -> str:
    return base64.b32encode(hashlib.sha256(text.encode()).digest()).decode().lower()[:n]


def _machine_part(machine: str) -> str:
    return _digest(f"machine:{machine}", 13)


def socket_name(machine: str, user: str | None, host: str, port: int) -> str:
    """The socket's file name: 13 characters for the machine, 7 for where it is."""
    where = f"{user or ''}@{host}:{port}"
    return f"{_machine_part(machine)}-{_digest(where, 7)}"


def _fits(directory: str) -> bool:
    longest = len(os.path.join(directory, socket_name("x", None, "x", 1))) + TEMP_SUFFIX
    return longest <= SUN_PATH_MAX and _SAFE.fullmatch(directory) is not None


def control_dir(key_dir: str) -> str | None:
    """Where the masters of the state dir whose key dir is ``key_dir`` keep their sockets
    (made, mode 0700), or None when no directory is safe to use."""
    key_dir = os.path.abspath(key_dir)
    here = os.path.join(key_dir, CONTROL_DIR)
    if _fits(here) and _private_dir(here):
        return here
    base = os.path.join(SHORT_BASE, f"eps-{os.geteuid()}")
    short = os.path.join(base, _digest(key_dir, 13))
    if not (_fits(short) and _private_dir(base) and _private_dir(short)):
        return None
    owner = os.path.join(short, OWNER_FILE)
    with contextlib.suppress(OSError):
        if not os.path.exists(owner):
            tmp = f"{owner}.{os.getpid()}.tmp"
            with open(tmp, "w") as fh:
                fh.write(key_dir + "\n")
            os.replace(tmp, owner)
    return short


def control_path(key_dir: str, machine: str, user: str | None, host: str, port: int) -> str | None:
    """The ``ControlPath`` of the master to ``machine`` at ``user@host:port``, or None (no sharing)."""
    directory = control_dir(key_dir)
    return None if directory is None else os.path.join(directory, socket_name(machine, user, host, port))


def master_options(path: str) -> list[str]:
    """ssh's options that share the master at ``path`` (and make it when there is none)."""
    return ["-o", "ControlMaster=auto", "-o", f"ControlPath={path}", "-o", f"ControlPersist={PERSIST_S}"]


def master_pid(path: str) -> int | None:
    """The pid of the master listening at ``path`` (the mux protocol's alive check, in this
    process: :mod:`eps.shell.remote.muxclient`), or None: no socket, a stale one, or a
    master that does not answer."""
    if not _is_socket(path):
        return None
    from eps.shell.remote import muxclient

    return muxclient.alive(path)


def close(path: str) -> None:
    """End the master at ``path`` (the mux protocol's terminate request); a stale socket is
    removed, a master that does not answer is killed.  Nothing when there is none."""
    if not _is_socket(path):
        return
    from eps.shell.remote import muxclient

    pids = masters_at([path])
    if muxclient.terminate(path):  # it agreed; it ends (and removes its socket) a moment later
        left = wait_gone(pids, within_s=2.0)
        deadline = time.monotonic() + 0.5
        while not left and _is_socket(path) and time.monotonic() < deadline:
            time.sleep(0.01)
        if not left and not _is_socket(path):
            return
    for pid in masters_at([path]):  # a master that would not answer (or end): it goes all the same
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        if _is_socket(path):
            os.unlink(path)


def reset(path: str) -> None:
    """A command through the master at ``path`` failed in transport: close it, so that the next
    try connects afresh (and becomes the new master).  A socket without a master is removed."""
    close(path)


def close_machine(key_dir: str, machine: str) -> None:
    """The machine is released (or eps is done with it for now): end each of its masters,
    whatever address it had."""
    directory = control_dir(key_dir)
    if directory is None:
        return
    for path in sorted(glob.glob(os.path.join(glob.escape(directory), f"{_machine_part(machine)}-*"))):
        close(path)
    tidy(directory)


def tidy(directory: str) -> None:
    """Remove a short private socket directory (``/tmp/eps-<uid>/<hash>``) that holds no
    socket any more, its ``owner`` file with it; the state dir's own is kept.  A master that
    binds meanwhile keeps it (``rmdir`` fails on a directory that is not empty)."""
    if os.path.basename(directory) == CONTROL_DIR or not directory.startswith(SHORT_BASE + os.sep):
        return
    with contextlib.suppress(OSError):
        if set(os.listdir(directory)) <= {OWNER_FILE}:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, OWNER_FILE))
            os.rmdir(directory)


def masters_at(paths: Iterable[str]) -> list[int]:
    """The pids of the ssh masters serving any of ``paths`` (their process title is
    ``ssh: PATH [mux]``), read from ``/proc``; empty where there is no ``/proc``."""
    wanted = {f"ssh: {p} [mux]".encode() for p in paths}
    return [pid for pid, title in _mux_titles() if title in wanted]


def masters_under(directories: Iterable[str]) -> dict[int, str]:
    """pid -> control path of every live ssh master whose socket is in one of ``directories``
    (``/proc``; for the tests' leak check and for diagnostics)."""
    dirs = tuple(os.path.abspath(d).rstrip("/") + "/" for d in directories)
    found = {}
    for pid, title in _mux_titles():
        path = title.decode(errors="replace").removeprefix("ssh: ").removesuffix(" [mux]")
        if path.startswith(dirs):
            found[pid] = path
    return found


def wait_gone(pids: Iterable[int], within_s: float = 5.0) -> list[int]:
    """Wait until ``pids`` have ended; those still alive then."""
    left = list(pids)
    deadline = time.monotonic() + within_s
    while left and time.monotonic() < deadline:
        left = [p for p in left if _alive(p)]
        if left:
            time.sleep(0.02)
    return left


def _mux_titles() -> list[tuple[int, bytes]]:
    found = []
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    title = fh.read().rstrip(b"\0")
            except OSError:
                continue
            if title.startswith(b"ssh: ") and title.endswith(b" [mux]"):
                found.append((int(name), title))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return False


def has_socket(path: str) -> bool:
    """Whether a socket file is at ``path`` (a master, or a stale one)."""
    return _is_socket(path)


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def _private_dir(path: str) -> bool:
    """``path`` is (made if missing) a real directory of ours that nobody else can enter."""
    with contextlib.suppress(FileExistsError, OSError):
        os.mkdir(path, 0o700)
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not stat.S_IMODE(st.st_mode) & 0o077
