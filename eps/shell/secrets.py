"""What a secret may look like, checked before it is used anywhere.

A credential travels in an HTTP header; a control character in it (a pasted newline)
would break the header and surface in error messages in an escaped form that plain
redaction misses.  Such a value is refused up front, naming only where it came from.
"""

from __future__ import annotations


def secret_problem(value: str) -> str | None:
    """Why ``value`` cannot be a credential, or ``None``."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return "holds a control character (a pasted newline?)"
    if not value.isascii():
        return "holds a non-ASCII character"
    return None
