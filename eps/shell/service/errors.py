"""What every front door (the ``eps`` command, the MCP server, the Python API) says of an
error, in one place: its code word and exit code (:func:`failure`, the codes from
:class:`eps.core.contract.Exit`), its one line (:func:`one_line`), its JSON object
(:func:`error_doc`), and, for a bug in eps, the file that keeps the details
(:func:`crash_line`).

Light on purpose: ``eps plan`` imports it (through :mod:`eps.shell.cli.main`); the crash
path alone loads ``tempfile`` and ``traceback``.
"""

from __future__ import annotations

from eps.core.contract import SCHEMA_VERSION, Exit
from eps.core.model import JobError
from eps.core.records import NamedTuple
from eps.shell.config.errors import ConfigError
from eps.shell.state.errors import StateUnreachable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["BAD_INPUT", "EXPECTED", "ONE_LINE", "Failure", "NotTaken", "StateUnreachable", "UsageError",
           "crash_line", "error_doc", "failure", "one_line"]  # fmt: skip


class UsageError(Exception):
    """Bad command line: one line, exit 2."""


class NotTaken(Exception):
    """The dispatch is recorded but no supervisor took it on (exit 1: it stays recorded)."""

    def __init__(self, dispatch: str, why: str) -> None:
        super().__init__(f"{dispatch}: {why}")
        self.dispatch, self.why = dispatch, why

    @property
    def said(self) -> str:
        """What is said of it, after the dispatch id."""
        return f"{self.why}; it stays recorded: eps supervise takes it on"


#: The errors of the input: exit 2, one line, nothing changed.
BAD_INPUT: tuple[type[Exception], ...] = (UsageError, JobError, ConfigError)
#: What eps answers as an error, not a bug: bad input, and a dispatch no supervisor took on.
EXPECTED: tuple[type[Exception], ...] = (*BAD_INPUT, NotTaken, StateUnreachable)
#: What the command line says in one line, no crash file: bad input, and the state's database down.
ONE_LINE: tuple[type[Exception], ...] = (*BAD_INPUT, StateUnreachable)


class Failure(NamedTuple):
    """An error as the front doors say it: its code word, its one line and its exit code
    (``error_doc(*failure(exc))`` is its JSON object)."""

    code: str
    text: str
    exit_code: Exit


def one_line(exc: BaseException) -> str:
    """The error's message on one line, without the ``eps: `` the command line adds itself."""
    return str(exc).strip().replace("\n", " ").removeprefix("eps: ")


def failure(exc: BaseException) -> Failure:
    """The code word, exit code and one line of ``exc``: bad input (2), a dispatch no
    supervisor took on (1), else a bug in eps (70: the traceback written to a file the line
    names; call it while ``exc`` is being handled)."""
    if isinstance(exc, JobError):
        return Failure(exc.code, one_line(exc), Exit.BAD_INPUT)
    if isinstance(exc, UsageError):
        return Failure("usage", one_line(exc), Exit.BAD_INPUT)
    if isinstance(exc, ConfigError):
        return Failure("bad_file", one_line(exc), Exit.BAD_INPUT)
    if isinstance(exc, NotTaken):
        return Failure("not_supervised", f"{exc.dispatch}: {exc.said}", Exit.NOTHING_STARTS)
    if isinstance(exc, StateUnreachable):  # the environment, not the input: nothing was done
        return Failure("state_unreachable", one_line(exc), Exit.NOTHING_STARTS)
    return Failure("internal", crash_line(exc), Exit.INTERNAL)


def crash_line(exc: BaseException) -> str:
    """A bug in eps: its traceback in a new ``eps-crash-*.txt`` file, and the one line that
    names it."""
    import os
    import tempfile
    import traceback

    fd, path = tempfile.mkstemp(prefix="eps-crash-", suffix=".txt")
    with os.fdopen(fd, "w") as fh:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=fh)
    return f"{type(exc).__name__}: {one_line(exc)} (details in {path})"


def error_doc(code: str, text: str, exit_code: int) -> dict[str, Any]:
    """What ``--json`` puts on stderr for an error (and the MCP server's tool error): one
    object, one line."""
    return {"schema_version": SCHEMA_VERSION, "error": {"code": code, "text": text}, "exit_code": exit_code}
