"""Where a job's files live and how eps runs commands there: this machine, a machine
eps reaches with its own key over ssh, or a login command prefix (a SLURM login
node, ``ssh fellows-login``).

Rules of this module:

- Commands are one shell line (``shlex``-quoted by the caller), run by the
  remote login shell; locally by ``bash -c``.  Data (an env file) goes on stdin,
  never in ``argv``; nothing here logs.
- eps's own ssh options: ``-F none`` (neither the user's nor the system ssh
  config: eps's machines are eps's), eps's key only (``IdentitiesOnly``),
  ``BatchMode`` (never a prompt), ``ConnectTimeout``, keep-alives,
  ``StrictHostKeyChecking=accept-new`` against eps's own ``known_hosts`` (a
  new machine is trusted on first use; a changed key is refused), no agent or X11
  forwarding.  A machine eps made is known by its id, not its address
  (``HostKeyAlias``): a new machine that got an address an earlier one had is a
  new machine, trusted on first use; its entry is forgotten when it is released
  (:func:`eps.shell.remote.keys.forget_host`).  A login prefix is the user's own ssh setup and is used as given.
- A robot login (``Remote.via(login, robot=True)``, ``[[clusters]] access = "robot"``) runs
  no shell line at all: :func:`run_remote` and :func:`stream_remote` refuse it without running
  anything (a COMMAND failure), and :func:`remote_argv` raises; its files move by rsync only
  (:mod:`eps.shell.remote.robot`).
- One master connection per machine eps made (:mod:`eps.shell.remote.mux`): every ssh and
  rsync to it shares it.  A command that failed in transport through a master closes that
  master and is tried once more at once (connecting afresh), whatever the patience: a dead
  master never fails a step.
- ssh exits 255 for its own failures; those are classified by its stderr into
  unreachable / auth / host key.  An unreachable host (a fresh machine whose
  sshd is not up yet) is retried with backoff while :class:`Patience` allows;
  so is a refused key when ``Patience.retry_auth`` (a fresh GCP VM's guest
  agent installs the key a little after sshd starts).
"""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from attrs import frozen
from returns.result import Failure, Result, Success

from eps.shell.remote import mux
from eps.shell.remote.errors import RemoteErrorKind, RemoteFailure
from eps.shell.remote.keys import KeyPair
from eps.shell.remote.process import NOT_FOUND, Completed, Runner, Streamer, run_process, stream_process

#: ssh's own exit code for its failures (a remote command's codes pass through).
SSH_FAILED = 255
CONNECT_TIMEOUT_S = 10
_HOST = re.compile(r"[A-Za-z0-9_.:\[\]%-]+")
_USER = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*")
_ALIAS = re.compile(r"[A-Za-z0-9_.-]{1,200}")

#: stderr fragments of ssh (OpenSSH 8-9) and what they mean.  First match wins.
SSH_ERRORS: tuple[tuple[str, RemoteErrorKind], ...] = (
    ("REMOTE HOST IDENTIFICATION HAS CHANGED", RemoteErrorKind.HOST_KEY),
    ("Host key verification failed", RemoteErrorKind.HOST_KEY),
    ("Permission denied", RemoteErrorKind.AUTH),
    ("Too many authentication failures", RemoteErrorKind.AUTH),
    ("no mutual signature", RemoteErrorKind.AUTH),
    ("Connection refused", RemoteErrorKind.UNREACHABLE),
    ("Connection timed out", RemoteErrorKind.UNREACHABLE),
    ("Operation timed out", RemoteErrorKind.UNREACHABLE),
    ("No route to host", RemoteErrorKind.UNREACHABLE),
    ("Network is unreachable", RemoteErrorKind.UNREACHABLE),
    ("Could not resolve hostname", RemoteErrorKind.UNREACHABLE),
    ("Connection closed by", RemoteErrorKind.UNREACHABLE),
    ("Connection reset", RemoteErrorKind.UNREACHABLE),
    ("kex_exchange_identification", RemoteErrorKind.UNREACHABLE),
    ("banner exchange", RemoteErrorKind.UNREACHABLE),
    ("Broken pipe", RemoteErrorKind.UNREACHABLE),
)


class Patience(NamedTuple):
    """How long to keep trying a host that does not answer (yet)."""

    within_s: float = 0.0  # total time for retries; 0 = one try
    first_delay_s: float = 0.5
    max_delay_s: float = 5.0
    retry_auth: bool = False  # also retry a refused key (a fresh VM installs it late)


ONCE = Patience()
#: Ordinary calls: ride out a dropped connection or a restarting sshd.
BRIEF = Patience(within_s=5.0)
#: A machine that was just created: its sshd (and its copy of our key) comes up within minutes.
FRESH_MACHINE = Patience(within_s=300.0, first_delay_s=1.0, max_delay_s=10.0, retry_auth=True)


@frozen
class Remote:
    """A target: this machine (``host is None and not login``), an ssh host reached
    with eps's key, or a login prefix (``login=("ssh", "fellows-login")``) that
    runs a command line given as its last argument."""

    host: str | None = None
    port: int = 22
    user: str | None = None
    key_path: str | None = None
    known_hosts: str | None = None
    login: tuple[str, ...] = ()
    connect_timeout_s: int = CONNECT_TIMEOUT_S
    host_key_alias: str | None = None  # the machine's id: its known_hosts entry is keyed by it
    control_path: str | None = None  # the socket of the machine's shared master connection (mux)
    kex_algorithms: str | None = None  # ssh's KexAlgorithms ([ssh] key_exchange); None: ssh's default
    robot: bool = False  # a robot login: rsync through it, never a shell line (see the module docstring)

    def __attrs_post_init__(self) -> None:
        if self.host is not None and self.login:
            raise ValueError("a remote is an ssh host or a login prefix, not both")

    @classmethod
    def local(cls) -> Remote:
        return cls()

    @classmethod
    def ssh(
        cls, host: str, key: KeyPair, *, user: str | None = None, port: int = 22, machine: str | None = None,
        kex: str = "",
    ) -> Remote:
        """A machine eps made (GCP VM, RunPod pod): eps's key and eps's known_hosts, its host
        key recorded under ``machine`` (its id) when given, else under its address.  ``kex``:
        the key exchange algorithms to offer (``[ssh] key_exchange``; empty: ssh's default)."""
        if _HOST.fullmatch(host) is None or host.startswith("-"):
            raise ValueError(f"not a host name or address: {host!r}")
        if machine is not None and (_ALIAS.fullmatch(machine) is None or machine.startswith("-")):
            raise ValueError(f"not a machine id: {machine!r}")
        if user is not None and _USER.fullmatch(user) is None:
            raise ValueError(f"not a user name: {user!r}")
        if not 0 < port < 65536:
            raise ValueError(f"not a port: {port}")
        shared = mux.control_path(os.path.dirname(key.private_path), machine or host, user, host, port)
        return cls(
            host=host, port=port, user=user, key_path=key.private_path, known_hosts=key.known_hosts,
            host_key_alias=machine, control_path=shared, kex_algorithms=kex or None,
        )  # fmt: skip

    @classmethod
    def via(cls, login: Sequence[str], *, robot: bool = False) -> Remote:
        """A login node reached by the user's own command prefix (SLURM clusters).
        An empty prefix is this machine.  ``robot``: the login's key runs only sbatch,
        scancel, squeue, scp and rsync (files move by rsync; no shell line is ever run)."""
        return cls(login=tuple(login), robot=robot)

    @property
    def is_local(self) -> bool:
        return self.host is None and not self.login

    @property
    def destination(self) -> str:
        """``user@host`` for ssh; the prefix for a login target; ``local`` here."""
        if self.login:
            return shlex.join(self.login)
        if self.host is None:
            return "local"
        return f"{self.user}@{self.host}" if self.user else self.host

    def describe(self) -> str:
        if self.host is not None and self.port != 22:
            return f"{self.destination} port {self.port}"
        return self.destination


# ----------------------------------------------------------------- argv ---


def ssh_options(remote: Remote) -> list[str]:
    """eps's options for ssh to ``remote`` (also rsync's ``-e``); empty for a login prefix."""
    if remote.host is None:
        return []
    opts = ["-F", "none", "-p", str(remote.port)]
    if remote.key_path is not None:
        opts += ["-i", remote.key_path, "-o", "IdentitiesOnly=yes"]
    if remote.known_hosts is not None:
        opts += ["-o", f"UserKnownHostsFile={remote.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null"]
    if remote.host_key_alias is not None:
        opts += ["-o", f"HostKeyAlias={remote.host_key_alias}"]
    opts += [
        "-o", "StrictHostKeyChecking=accept-new",
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={remote.connect_timeout_s}",
        "-o", "ServerAliveInterval=15",
        "-o", "ServerAliveCountMax=4",
        "-o", "ForwardAgent=no",
        "-o", "ForwardX11=no",
        "-o", "LogLevel=ERROR",
    ]  # fmt: skip
    if remote.kex_algorithms is not None:
        opts += ["-o", f"KexAlgorithms={remote.kex_algorithms}"]
    if remote.control_path is not None:
        opts += mux.master_options(remote.control_path)
    return opts


def remote_argv(remote: Remote, command: str, *, tty: bool = False) -> list[str]:
    """The argv that runs the shell line ``command`` on ``remote``.  A robot login runs none:
    ``ValueError`` (a caller that got here skipped the refusal of :func:`run_remote`)."""
    if remote.robot:
        raise ValueError(robot_refusal(remote))
    if remote.login:
        prefix = list(remote.login)
        if tty and os.path.basename(prefix[0]) == "ssh":
            prefix.insert(1, "-t")
        return [*prefix, command]
    if remote.host is None:
        return ["bash", "-c", command]
    return ["ssh", *(["-t"] if tty else []), *ssh_options(remote), remote.destination, command]


def shell_argv(remote: Remote, directory: str, inner: Sequence[str] | None = None) -> list[str]:
    """The argv of an interactive shell in ``directory`` on ``remote`` (``eps ssh``):
    ``ssh -t ... 'cd DIR && exec bash -l'``; ``inner`` replaces ``bash -l``
    (SLURM: ``srun --jobid=ID --overlap --pty bash``)."""
    run = shlex.join(inner) if inner else "bash -l"
    return remote_argv(remote, f"cd -- {shlex.quote(directory)} && exec {run}", tty=True)


# ------------------------------------------------------------------ running ---


def run_remote(
    remote: Remote,
    command: str,
    *,
    stdin: bytes | None = None,
    timeout_s: float | None = 600,
    patience: Patience = BRIEF,
    runner: Runner = run_process,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Result[Completed, RemoteFailure]:
    """Run ``command`` on ``remote``.  Success carries whatever the command left,
    whatever its exit code; Failure is a transport failure (unreachable, auth, host
    key, no ssh here), after the retries ``patience`` allows.  A robot login: a COMMAND
    failure, nothing run."""
    if remote.robot:
        return Failure(RemoteFailure.of(RemoteErrorKind.COMMAND, robot_refusal(remote)))
    argv = remote_argv(remote, command)
    path = remote.control_path if runner is run_process else None

    def once() -> Completed:
        if path is not None and mux.has_socket(path):  # the master takes it without an ssh process
            from eps.shell.remote import muxclient

            shared = muxclient.run(path, command, stdin=stdin, timeout_s=timeout_s)
            if shared is not None:
                return shared
        return runner(argv, stdin=stdin, timeout_s=timeout_s)

    attempt = through_master(remote, lambda: _classified(remote, once(), timeout_s))
    return retrying(attempt, patience, sleep=sleep, clock=clock)


def check_remote(
    remote: Remote,
    command: str,
    what: str,
    *,
    stdin: bytes | None = None,
    timeout_s: float | None = 600,
    patience: Patience = BRIEF,
    runner: Runner = run_process,
    sleep: Callable[[float], None] = time.sleep,
) -> Result[str, RemoteFailure]:
    """:func:`run_remote`, and a non-zero exit is a COMMAND failure naming ``what``; the stdout."""
    ran = run_remote(remote, command, stdin=stdin, timeout_s=timeout_s, patience=patience, runner=runner, sleep=sleep)
    match ran:
        case Success(done) if done.returncode != 0:
            why = last_line(done.stderr) or last_line(done.stdout) or "no message"
            failure = f"{what} on {remote.describe()} exited {done.returncode}: {why}"
            return Failure(RemoteFailure.of(RemoteErrorKind.COMMAND, failure))
    return ran.map(lambda done: done.stdout)


def wait_reachable(
    remote: Remote,
    *,
    patience: Patience = FRESH_MACHINE,
    runner: Runner = run_process,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Result[None, RemoteFailure]:
    """Wait until ``remote`` runs a command (``true``) for us: a fresh VM or pod."""
    ran = run_remote(remote, "true", timeout_s=60, patience=patience, runner=runner, sleep=sleep, clock=clock)
    return ran.map(lambda _: None)


def stream_remote(
    remote: Remote, command: str, sink: Callable[[bytes], None], *, streamer: Streamer = stream_process
) -> Result[int, RemoteFailure]:
    """Run ``command`` on ``remote`` and hand its stdout to ``sink`` as it comes
    (``eps logs -f``); the command's exit code, or UNREACHABLE when ssh itself failed.
    A robot login: a COMMAND failure, nothing run."""
    if remote.robot:
        return Failure(RemoteFailure.of(RemoteErrorKind.COMMAND, robot_refusal(remote)))
    code = streamer(remote_argv(remote, command), sink)
    if code == NOT_FOUND and not remote.is_local:
        return Failure(RemoteFailure.of(RemoteErrorKind.MISSING_TOOL, f"cannot run {remote_argv(remote, '')[0]}"))
    if code == SSH_FAILED and remote.host is not None:
        if remote.control_path is not None:
            mux.reset(remote.control_path)  # the next command connects afresh
        return Failure(RemoteFailure.of(RemoteErrorKind.UNREACHABLE, f"lost the connection to {remote.describe()}"))
    return Success(code)


def through_master(
    remote: Remote, attempt: Callable[[], Result[Completed, RemoteFailure]]
) -> Callable[[], Result[Completed, RemoteFailure]]:
    """``attempt`` (one ssh or rsync to ``remote``), and when it failed in transport while the
    machine's master was there, that master closed and ``attempt`` once more at once: a master
    that died (or hangs) is replaced by a fresh connection instead of failing the step."""
    path = remote.control_path
    if path is None:
        return attempt

    def shared() -> Result[Completed, RemoteFailure]:
        had_master = mux.has_socket(path)
        result = attempt()
        match result:
            case Failure(failure) if failure.kind is RemoteErrorKind.UNREACHABLE and had_master:
                mux.reset(path)
                return attempt()
        return result

    return shared


def retrying(
    attempt: Callable[[], Result[Completed, RemoteFailure]],
    patience: Patience,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Result[Completed, RemoteFailure]:
    """Call ``attempt`` until it succeeds, fails for a reason retrying cannot fix, or
    ``patience`` runs out (exponential backoff, capped)."""
    deadline = clock() + patience.within_s
    delay = patience.first_delay_s
    while True:
        result = attempt()
        match result:
            case Failure(failure) if _retryable(failure, patience) and clock() + delay <= deadline:
                sleep(delay)
                delay = min(delay * 2, patience.max_delay_s)
            case _:
                return result


def classify_ssh(stderr: str) -> RemoteErrorKind | None:
    """What an ssh failure's stderr says went wrong, or None when it names nothing known."""
    for needle, kind in SSH_ERRORS:
        if needle in stderr:
            return kind
    return None


def _retryable(failure: RemoteFailure, patience: Patience) -> bool:
    return failure.kind is RemoteErrorKind.UNREACHABLE or (patience.retry_auth and failure.kind is RemoteErrorKind.AUTH)


def _classified(remote: Remote, done: Completed, timeout_s: float | None) -> Result[Completed, RemoteFailure]:
    where = remote.describe()
    if done.timed_out:
        return Failure(RemoteFailure.of(RemoteErrorKind.UNREACHABLE, f"{where}: no answer within {timeout_s} s"))
    if remote.is_local:
        return Success(done)
    if done.returncode == NOT_FOUND and "command not found" in done.stderr and not done.stdout:
        tool = remote_argv(remote, "")[0]
        if done.stderr.startswith(f"{tool}:"):
            return Failure(RemoteFailure.of(RemoteErrorKind.MISSING_TOOL, f"{tool} is not installed on this machine"))
    if done.returncode == SSH_FAILED:
        kind = classify_ssh(done.stderr)
        if kind is not None or remote.host is not None:
            message = last_line(done.stderr) or "ssh failed without a message" + (
                f" (does the machine's sshd offer a key exchange of [ssh] key_exchange, {remote.kex_algorithms}?)"
                if remote.kex_algorithms else ""
            )  # ssh logs "no matching key exchange method" below LogLevel=ERROR
            return Failure(RemoteFailure.of(kind or RemoteErrorKind.UNREACHABLE, f"{where}: {message}"))
    return Success(done)


def robot_refusal(remote: Remote) -> str:
    """What is said when a shell line is asked of a robot login (one line)."""
    from eps.core.clusters import ROBOT_COMMANDS

    allowed = ", ".join(ROBOT_COMMANDS)
    return f"{remote.describe()} is a robot login ({allowed} only): eps runs no shell line through it"


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
