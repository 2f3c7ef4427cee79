"""``python -m eps.shell.mcp``: the MCP server on stdin/stdout (what ``eps mcp`` runs).

``eps mcp`` reads its command line and the settings (a bad config is its one line, exit 2),
then replaces its process with this one: the command line never imports the MCP door, and
the client's pipes, the pid and the environment are the same."""

from __future__ import annotations

import os
import sys

from eps.core.contract import Exit
from eps.shell.mcp.server import serve
from eps.shell.service.errors import EXPECTED, failure


def main() -> int:
    try:
        return serve(os.environ)
    except EXPECTED as exc:
        said = failure(exc)
        sys.stderr.write(f"eps: error: {said.text}\n")
        return int(said.exit_code)
    except KeyboardInterrupt:
        return int(Exit.INTERRUPTED)


if __name__ == "__main__":
    sys.exit(main())
