"""Every exit status of ``eps``, in one table (:mod:`eps.core.contract`; README's "Exit
codes" repeats it, and a test keeps the two equal), and the one JSON shape of an error
under ``--json`` (:func:`eps.shell.service.errors.error_doc`, the MCP server's too).

``eps wait`` and ``eps execute --wait`` are the exception by design: they leave with the
job's own exit code (0-255), so a script can treat eps like the job itself.
"""

from __future__ import annotations

from eps.core.contract import EXIT_TABLE, SCHEMA_VERSION, WAIT_CODES, Exit
from eps.shell.service.errors import error_doc

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO

__all__ = ["EXIT_TABLE", "SCHEMA_VERSION", "WAIT_CODES", "Exit", "error_doc", "write_error"]


def write_error(stream: TextIO, *, as_json: bool, code: str, text: str, exit_code: int, prefix: str) -> None:
    if as_json:
        import json

        stream.write(json.dumps(error_doc(code, text, exit_code)) + "\n")
    else:
        stream.write(f"{prefix}{text}\n")
