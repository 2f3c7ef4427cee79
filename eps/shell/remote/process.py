"""Running a local process: the one place this package calls ``subprocess``.

Every function of the package takes a ``runner`` (and, to follow a log, a
``streamer``) with these as production defaults, so tests pass a recording or
failing fake instead of patching anything.  Data meant for the remote side (an
env file) travels on stdin, never in ``argv``.

A process started here does not outlive the eps that started it: it runs under
``setpriv --pdeathsig TERM`` (util-linux; where it is missing, nothing is added), so
a SIGKILLed ``eps pull`` takes its rsync with it.  A streamed command gets a stdin
pipe that eps never writes and that closes when eps ends, however it ends: the
remote side of ``eps logs -f`` watches it (:mod:`eps.shell.remote.job`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, Protocol

#: Exit code reported for a command that could not be started (as a shell does).
NOT_FOUND = 127


class Completed(NamedTuple):
    """What a finished process left: its code and its output, decoded leniently."""

    returncode: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


class Runner(Protocol):
    def __call__(self, argv: Sequence[str], *, stdin: bytes | None = None, timeout_s: float | None = None) -> Completed:
        """Run ``argv`` to its end, ``stdin`` fed to it, and return what it left."""
        ...


class Streamer(Protocol):
    def __call__(self, argv: Sequence[str], sink: Callable[[bytes], None]) -> int:
        """Run ``argv``, hand each chunk of its stdout to ``sink`` as it comes, return its exit code."""
        ...


@functools.cache
def _pdeathsig() -> tuple[str, ...]:
    setpriv = shutil.which("setpriv")
    return (setpriv, "--pdeathsig", "TERM", "--") if setpriv else ()


def _tied(argv: Sequence[str]) -> list[str] | None:
    """``argv`` under the parent-death signal; None when its program is not installed."""
    if shutil.which(argv[0]) is None:
        return None
    return [*_pdeathsig(), *argv]


def run_process(
    argv: Sequence[str],
    *,
    stdin: bytes | None = None,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
) -> Completed:
    """The production runner: ``subprocess.run``, stdin closed unless data is given;
    ``env`` replaces the environment (default: this process's)."""
    tied = _tied(argv)
    if tied is None:
        return Completed(NOT_FOUND, "", f"{argv[0]}: command not found")
    try:
        proc = subprocess.run(
            tied,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout_s,
            check=False,
            env=None if env is None else dict(env),
        )
    except FileNotFoundError:
        return Completed(NOT_FOUND, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired as exc:
        return Completed(-1, _text(exc.stdout), _text(exc.stderr), timed_out=True)
    return Completed(proc.returncode, _text(proc.stdout), _text(proc.stderr))


def stream_process(argv: Sequence[str], sink: Callable[[bytes], None]) -> int:
    """The production streamer: stdout chunks to ``sink`` as they arrive; stderr inherited;
    stdin a pipe left open until the end (its closing tells the command eps is gone)."""
    tied = _tied(argv)
    if tied is None:
        return NOT_FOUND
    try:
        proc = subprocess.Popen(tied, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    except FileNotFoundError:
        return NOT_FOUND
    stdout = proc.stdout
    if stdout is None:  # pragma: no cover - stdout=PIPE always gives one
        proc.wait()
        return NOT_FOUND
    try:
        fd = stdout.fileno()
        while chunk := os.read(fd, 65536):
            sink(chunk)
    except BaseException:  # the reader went away (Ctrl-C, a closed pipe): stop following
        proc.terminate()
        raise
    finally:
        stdout.close()
        if proc.stdin is not None:
            proc.stdin.close()
        code = proc.wait()
    return code


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode(errors="replace")
