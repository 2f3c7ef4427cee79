"""eps's own ssh key pair, in its state dir: ``<state>/ssh/id_ed25519`` (+ ``.pub``)
and eps's own ``known_hosts`` beside it.

The private key is made by ``ssh-keygen`` (ed25519, no passphrase: eps runs
unattended), is mode 0600 and never leaves the state dir; only the public key
travels (GCP instance metadata ``ssh-keys``, RunPod's ``PUBLIC_KEY`` env).  A
private key that others could read is refused, not silently fixed: someone
changed it, and the user should know.  Two eps processes making the key at once
end with one key: each generates under a temporary name and the first hard link
to the final name wins.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from typing import NamedTuple

from returns.result import Failure, Result, Success

from eps.shell.remote.errors import RemoteErrorKind, RemoteFailure
from eps.shell.remote.process import NOT_FOUND, Runner, run_process

KEY_DIR = "ssh"
PRIVATE_NAME = "id_ed25519"
KNOWN_HOSTS_NAME = "known_hosts"
KEY_COMMENT = "eps"


class KeyPair(NamedTuple):
    private_path: str
    public_path: str
    known_hosts: str  # eps's own known_hosts: hosts eps met, never the user's ~/.ssh/known_hosts
    public_key: str  # "ssh-ed25519 AAAA... eps": what goes into metadata / env


def key_dir(state_dir: str) -> str:
    return os.path.join(state_dir, KEY_DIR)


def ensure_key(state_dir: str, *, runner: Runner = run_process) -> Result[KeyPair, RemoteFailure]:
    """eps's key pair: loaded when it exists, made with ssh-keygen when it does not."""
    directory = key_dir(state_dir)
    private = os.path.join(directory, PRIVATE_NAME)
    if not os.path.lexists(private):
        made = _generate(directory, private, runner)
        if made is not None:
            return Failure(made)
    return load_key(state_dir, runner=runner)


def load_key(state_dir: str, *, runner: Runner = run_process) -> Result[KeyPair, RemoteFailure]:
    """eps's existing key pair, checked: the private key must be a regular file of
    ours that nobody else can read or write (0600 or stricter)."""
    directory = key_dir(state_dir)
    private = os.path.join(directory, PRIVATE_NAME)
    public = private + ".pub"
    try:
        st = os.stat(private)
    except FileNotFoundError:
        return Failure(RemoteFailure.of(RemoteErrorKind.KEY, f"no eps ssh key at {private}"))
    except OSError as exc:
        return Failure(RemoteFailure.of(RemoteErrorKind.KEY, f"cannot read {private}: {exc.strerror}"))
    if not stat.S_ISREG(st.st_mode):
        return Failure(RemoteFailure.of(RemoteErrorKind.KEY, f"{private} is not a regular file"))
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return Failure(
            RemoteFailure.of(
                RemoteErrorKind.KEY,
                f"{private} is mode {mode:04o}: others may read it, so eps will not use it"
                f" (chmod 600 {private}, or delete it and eps makes a new key)",
            )
        )
    if st.st_uid != os.geteuid():
        return Failure(RemoteFailure.of(RemoteErrorKind.KEY, f"{private} belongs to uid {st.st_uid}, not to you"))
    text = _read_public(public)
    if text is None:
        derived = runner(["ssh-keygen", "-y", "-f", private], timeout_s=30)
        text = derived.stdout.strip()
        if not derived.ok or not _looks_public(text):
            why = "ssh-keygen is not installed" if derived.returncode == NOT_FOUND else derived.stderr
            return Failure(RemoteFailure.of(RemoteErrorKind.KEY, f"cannot read the public half of {private}: {why}"))
        text = f"{text.split()[0]} {text.split()[1]} {KEY_COMMENT}"
        _write_public(public, text)
    return Success(KeyPair(private, public, os.path.join(directory, KNOWN_HOSTS_NAME), text))


def gcp_ssh_keys_entry(key: KeyPair, user: str) -> str:
    """One line of GCE's ``ssh-keys`` metadata: ``USER:ssh-ed25519 AAAA... eps``."""
    return f"{user}:{key.public_key}"


def runpod_env(key: KeyPair) -> dict[str, str]:
    """The pod environment that makes RunPod's images authorize our key (``PUBLIC_KEY``)."""
    return {"PUBLIC_KEY": key.public_key}


def forget_host(known_hosts: str, name: str) -> None:
    """Remove every entry of ``known_hosts`` recorded under ``name`` (a machine's id, its
    ``HostKeyAlias``): the machine is gone, and whatever answers under that name next is a
    new machine.  Rewritten atomically under a lock (many machines are released at once, by
    threads of one eps and by other eps processes); a missing file is nothing to forget."""
    import fcntl

    if not os.path.exists(known_hosts):
        return
    with open(f"{known_hosts}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(known_hosts, "rb") as fh:
                lines = fh.read().splitlines(keepends=True)
        except FileNotFoundError:
            return
        target = name.encode()
        kept = [line for line in lines if target not in line.split(b" ", 1)[0].split(b",")]
        if len(kept) == len(lines):
            return
        tmp = f"{known_hosts}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.writelines(kept)
        os.replace(tmp, known_hosts)


def _generate(directory: str, private: str, runner: Runner) -> RemoteFailure | None:
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)
    except OSError as exc:
        return RemoteFailure.of(RemoteErrorKind.KEY, f"cannot create {directory}: {exc.strerror}")
    tmp = os.path.join(directory, f".{PRIVATE_NAME}.{os.getpid()}.tmp")
    for leftover in (tmp, tmp + ".pub"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)
    made = runner(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", KEY_COMMENT, "-f", tmp], timeout_s=60)
    if not made.ok:
        why = (
            "ssh-keygen is not installed" if made.returncode == NOT_FOUND else made.stderr or f"exit {made.returncode}"
        )
        kind = RemoteErrorKind.MISSING_TOOL if made.returncode == NOT_FOUND else RemoteErrorKind.KEY
        return RemoteFailure.of(kind, f"cannot make an ssh key in {directory}: {why}")
    try:
        os.chmod(tmp, 0o600)
        try:
            os.link(tmp, private)  # atomic and exclusive: the first of two racing processes wins
        except FileExistsError:
            return None  # another eps made it first; load theirs
        os.replace(tmp + ".pub", private + ".pub")
    except OSError as exc:
        return RemoteFailure.of(RemoteErrorKind.KEY, f"cannot store the ssh key in {directory}: {exc.strerror}")
    finally:
        for leftover in (tmp, tmp + ".pub"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
    return None


def _read_public(path: str) -> str | None:
    try:
        with open(path) as fh:
            text = fh.read().strip()
    except OSError:
        return None
    return text if _looks_public(text) else None


def _looks_public(text: str) -> bool:
    parts = text.split()
    return len(parts) >= 2 and parts[0] == "ssh-ed25519" and parts[1].startswith("AAAA") and "\n" not in text


def _write_public(path: str, text: str) -> None:
    with contextlib.suppress(OSError):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            fh.write(text + "\n")
        os.replace(tmp, path)
