"""``json.dumps(obj, indent=2)``, the text of every ``--json`` document, without importing
:mod:`json` (its decoder and scanner compile regular expressions on import: about 1.5 ms of
every ``eps plan --json``, which never reads JSON).

:func:`dumps` writes what ``json.dumps(obj, indent=2)`` writes, byte for byte, for the data
documents are made of (dicts, lists, tuples, strings, numbers, booleans, ``None``, their
subclasses such as ``StrEnum`` and ``IntEnum`` members); for anything else (an object json
cannot serialize, a cycle) it hands the whole document to :func:`json.dumps`, so the result
and the error are json's own.
"""

__all__ = ["dumps"]

_INF = float("inf")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


class _NotPlain(Exception):
    """Something json.dumps itself should write (or refuse)."""


def dumps(obj: object) -> str:
    """``json.dumps(obj, indent=2)``."""
    out: list[str] = []
    try:
        _value(obj, out, "\n", set())
    except _NotPlain:
        import json

        return json.dumps(obj, indent=2)
    return "".join(out)


def _string(s: str) -> str:
    """json's ``encode_basestring_ascii`` (``ensure_ascii``): ``"`` and ``\\`` escaped, and
    every character outside printable ASCII as its short escape or ``\\uXXXX``."""
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    parts = ['"']
    for ch in s:
        if " " <= ch <= "~" and ch not in '"\\':
            parts.append(ch)
        elif ch in _ESCAPES:
            parts.append(_ESCAPES[ch])
        else:
            n = ord(ch)
            if n < 0x10000:
                parts.append(f"\\u{n:04x}")
            else:  # a surrogate pair
                n -= 0x10000
                parts.append(f"\\u{0xD800 | ((n >> 10) & 0x3FF):04x}\\u{0xDC00 | (n & 0x3FF):04x}")
    parts.append('"')
    return "".join(parts)


def _float(x: float) -> str:
    if x != x:  # noqa: PLR0124  (NaN, as json tests it)
        return "NaN"
    if x == _INF:
        return "Infinity"
    if x == -_INF:
        return "-Infinity"
    return float.__repr__(x)


def _key(k: object) -> str:
    """A dict key as json writes it: strings as they are, numbers, booleans and ``None`` in words."""
    if isinstance(k, str):
        return _string(k)
    if isinstance(k, float):
        return _string(_float(k))
    if k is True:
        return '"true"'
    if k is False:
        return '"false"'
    if k is None:
        return '"null"'
    if isinstance(k, int):
        return _string(int.__repr__(k))
    raise _NotPlain


def _value(o: object, out: list[str], nl: str, open_: set[int]) -> None:
    """``o`` onto ``out``, its lines indented as ``nl`` (a newline and the indent) says;
    ``open_``: the containers being written (a cycle is json's to report)."""
    if isinstance(o, str):
        out.append(_string(o))
    elif o is None:
        out.append("null")
    elif o is True:
        out.append("true")
    elif o is False:
        out.append("false")
    elif isinstance(o, int):
        out.append(int.__repr__(o))
    elif isinstance(o, float):
        out.append(_float(o))
    elif isinstance(o, list | tuple | dict):
        if not o:
            out.append("{}" if isinstance(o, dict) else "[]")
            return
        if id(o) in open_:
            raise _NotPlain
        open_.add(id(o))
        inner = nl + "  "
        if isinstance(o, dict):
            out.append("{")
            sep = inner
            for k, v in o.items():
                out.append(sep)
                out.append(_key(k))
                out.append(": ")
                _value(v, out, inner, open_)
                sep = "," + inner
            out.append(nl + "}")
        else:
            out.append("[")
            sep = inner
            for v in o:
                out.append(sep)
                _value(v, out, inner, open_)
                sep = "," + inner
            out.append(nl + "]")
        open_.discard(id(o))
    else:
        raise _NotPlain
