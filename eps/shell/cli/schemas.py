"""The JSON Schemas of eps's ``--json`` outputs, shipped in the package (``eps/schemas``):
``eps schema NAME`` prints one; tests validate real outputs against them."""

from __future__ import annotations

import os

from eps.shell.service.errors import UsageError

_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "schemas")


def names() -> list[str]:
    """Every schema's name (``plan``, ``intents``, ``status``, ``events``, ``check``, ...)."""
    return sorted(f[: -len(".json")] for f in os.listdir(_DIR) if f.endswith(".json"))


def path(name: str) -> str:
    if name not in names():
        from eps.core.router import did_you_mean

        known = names()
        raise UsageError(f"eps schema: no schema {name!r}{did_you_mean(name, known)} (known: {', '.join(known)})")
    return os.path.join(_DIR, f"{name}.json")


def schema_text(name: str) -> str:
    with open(path(name), encoding="utf-8") as fh:
        return fh.read()
