"""Shell completion: ``eps completion bash|zsh`` prints a script (made by shtab from the
one argument parser, so it knows every subcommand and option), whose hooks ask
``eps _complete WHAT`` for what changes: intents, lanes, dispatch ids (from the
ledger, read-only) and schema names."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

_WHATS = ("intents", "lanes", "dispatches", "schemas")

_BASH = "\n".join(
    f'_eps_complete_{w}() {{ compgen -W "$(eps _complete {w} 2>/dev/null)" -- "$1"; }}' for w in _WHATS
)
_ZSH = "\n".join(
    f'_eps_complete_{w}() {{ local -a items; items=(${{(f)"$(eps _complete {w} 2>/dev/null)"}}); '
    f"compadd -a items; }}"
    for w in _WHATS
)


def script(shell: str) -> str:
    """The completion script for ``shell`` (bash or zsh)."""
    import shtab

    from eps.shell.cli.parser import build

    text: str = shtab.complete(build(), shell=shell, preamble={"bash": _BASH, "zsh": _ZSH})  # type: ignore[arg-type]
    return text if text.endswith("\n") else text + "\n"


def words(what: str, env: Mapping[str, str]) -> list[str]:
    """What completes for ``what``; nothing (never an error) when it cannot be known."""
    from eps.shell.config.load import load_settings
    from eps.shell.config.settings import ConfigError

    if what == "schemas":
        from eps.shell.cli.schemas import names

        return names()
    try:
        settings = load_settings(env)
    except ConfigError:
        return []
    if what == "intents":
        return [i.name for i in settings.policy.intents]
    if what == "lanes":
        from eps.shell.config.availability import lane_names

        return list(lane_names(settings))
    if what == "dispatches":
        return _dispatch_ids(os.path.join(settings.state_dir, "ledger.sqlite3"))
    return []


def _dispatch_ids(path: str, limit: int = 500) -> list[str]:
    """The newest dispatch ids, read-only (completion never creates or changes a ledger)."""
    import sqlite3

    if not os.path.isfile(path):
        return []
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)
        try:
            rows = db.execute("SELECT id FROM dispatches ORDER BY created_at DESC LIMIT ?", (limit,)).fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return []
    return [str(r[0]) for r in rows]


def answer(args: Sequence[str], env: Mapping[str, str]) -> int:
    """``eps _complete WHAT``: one candidate per line."""
    if len(args) != 1 or args[0] not in _WHATS:
        sys.stderr.write(f"eps _complete: one of {', '.join(_WHATS)}\n")
        return 2
    found = words(args[0], env)
    if found:
        sys.stdout.write("\n".join(found) + "\n")
    return 0
