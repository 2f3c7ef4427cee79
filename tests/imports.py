"""Which modules an eps command loads, in one place (the plan path's and the status path's
tests pin what each does without)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence


def loaded_by(argv: Sequence[str], env: Mapping[str, str], among: Sequence[str]) -> list[str]:
    """The modules of ``among`` that ``eps ARGV`` (run by ``eps.shell.cli.main`` in a fresh
    interpreter, with ``env`` as its environment) loads, besides those the interpreter started
    with (an editable install's finder brings contextlib).  The command must exit 0."""
    code = (
        "import sys, io\n"
        "started = set(sys.modules)\n"
        "from eps.shell.cli import main\n"
        "out, sys.stdout = sys.stdout, io.StringIO()\n"
        f"rc = main({list(argv)!r}, env={dict(env)!r})\n"
        "sys.stdout = out\n"
        "assert rc == 0, rc\n"
        f"print(','.join(m for m in {tuple(among)!r} if m in sys.modules and m not in started))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]
