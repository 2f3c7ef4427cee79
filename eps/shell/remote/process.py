"""Running a local process: the one place this package calls ``subprocess``.

Every function of the package takes a ``runner`` (and, to follow a log, a
``streamer``) with these as production defaults, so tests pass a recording or
failing fake instead of patching anything.  Data meant for the remote side (an
env file) travels on stdin, never in ``argv``.
"""

from __future__ import annotations

import os
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


def run_process(
    argv: Sequence[str],
    *,
    stdin: bytes | None = None,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
) -> Completed:
    """The production runner: ``subprocess.run``, stdin closed unless data is given;
    ``env`` replaces the environment (default: this process's)."""
    try:
        proc = subprocess.run(
            list(argv),
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
    """The production streamer: stdout chunks to ``sink`` as they arrive; stderr inherited."""
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
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
        code = proc.wait()
    return code


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode(errors="replace")
