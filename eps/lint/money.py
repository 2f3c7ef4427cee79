"""Heuristics for dollar-budget caps (P12): in identifiers, in code that refuses work, in sentences.

What counts as a cap, and what does not:

- an identifier (code name, attribute, argument, dict or config key, TOML key,
  a snake_case word in a doc) that contains ``budget``, or a money word
  (cost, price, spend, dollar, usd) together with a limit word (max, limit,
  cap, ceiling, allowance, threshold): ``max_cost``, ``spend_limit``,
  ``priceCap``.  ``price_per_hour`` and ``max_rate_limit_waits`` are fine;
- an ordering comparison of a money-named value against something that is not
  money-named (``rung.price_per_hour > 5``, ``cost >= limit``) in the test of
  an ``if``/``while`` whose body refuses work (``raise``, ``return``,
  ``continue``, ``break``), in an ``assert``, or in a comprehension filter.
  Sorting or comparing two prices, and formatting (``x < 1`` in a conditional
  expression), are not caps;
- a doc sentence with ``budget``, ``dollar cap``/``spending limit``-like
  phrases, ``max cost``-like phrases, or "limits/refuses/stops ... by
  dollars", unless the sentence is negated (``no``, ``never``, ``not``...)
  and does not tell the reader not to *exceed* something; a limit with an
  amount (``at most $100``, ``budget of $50``, ``stay under $20``) is a cap
  even when negated.  An amount per hour (``$0.03 per vCPU-hour``) is a price.
  A sentence about the provider's own limit (``RunPod's own spending limit``,
  ``provider-side``, ``account balance``) is fine.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eps.lint.docs import Doc

MONEY = frozenset(
    {"cost", "costs", "price", "prices", "spend", "spending", "spent", "dollar", "dollars", "usd", "money"}
)
LIMIT = frozenset(
    {"max", "maximum", "limit", "limits", "cap", "caps", "capped", "ceiling", "allowance", "threshold"}
)
BUDGET = frozenset({"budget", "budgets", "budgeted", "budgeting"})

_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def words(identifier: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(identifier)]


def capped_identifier(identifier: str) -> bool:
    """Does this name read as a dollar cap?"""
    ws = set(words(identifier))
    return bool(ws & BUDGET) or bool(ws & MONEY and ws & LIMIT)


def _money_named(node: ast.AST) -> bool:
    for n in ast.walk(node):
        name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None
        if name is not None and set(words(name)) & MONEY:
            return True
    return False


_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _money_limit_compare(test: ast.AST) -> ast.Compare | None:
    for n in ast.walk(test):
        if isinstance(n, ast.Compare) and any(isinstance(op, _ORDER) for op in n.ops):
            sides = [_money_named(x) for x in (n.left, *n.comparators)]
            if any(sides) and not all(sides):
                return n
    return None


_REFUSE = (ast.Raise, ast.Return, ast.Continue, ast.Break)


def scan_python(source: str) -> Iterator[tuple[int, str]]:
    """(line, what) for each cap-like identifier and each comparison of money against a limit that refuses work."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    seen: set[tuple[int, str]] = set()

    def hit(line: int, what: str) -> Iterator[tuple[int, str]]:
        if (line, what) not in seen:
            seen.add((line, what))
            yield line, what

    for node in ast.walk(tree):
        name: str | None = None
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.arg | ast.keyword):
            name = node.arg
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = node.name
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", node.value)
        ):
            name = node.value  # a dict or config key spelled as a string
        if name and capped_identifier(name):
            yield from hit(getattr(node, "lineno", 1), f"name `{name}` reads as a dollar cap")
        tests: list[ast.AST] = []
        refuses = isinstance(node, ast.If | ast.While) and any(isinstance(s, _REFUSE) for s in node.body)
        if refuses or isinstance(node, ast.Assert):
            tests.append(node.test)  # type: ignore[attr-defined]
        elif isinstance(node, ast.comprehension):
            tests.extend(node.ifs)
        for t in tests:
            cmp = _money_limit_compare(t)
            if cmp is not None:
                yield from hit(cmp.lineno, f"`{ast.unparse(cmp)}` refuses work by a dollar amount")


def scan_toml(text: str) -> Iterator[tuple[int, str]]:
    """(line, what) for each cap-like key of a TOML file (a config key)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    lines = text.split("\n")

    def walk(obj: Any) -> Iterator[str]:
        if isinstance(obj, dict):
            for k, v in obj.items():
                yield str(k)
                yield from walk(v)
        elif isinstance(obj, list):
            for v in obj:
                yield from walk(v)

    for key in sorted(set(walk(data))):
        if capped_identifier(key):
            line = next((i for i, s in enumerate(lines, 1) if key in s), 1)
            yield line, f"config key `{key}` reads as a dollar cap"


# --- sentences ------------------------------------------------------------------------------

_I = re.IGNORECASE
_MONEY_RE = r"(?:dollars?|usd|costs?|spend(?:ing)?|prices?|\$)"
_PHRASES = (
    re.compile(r"\bbudget(?:s|ed|ing)?\b", _I),
    re.compile(rf"\b{_MONEY_RE}[\s-]+(?:caps?|capped|limits?|ceilings?|budgets?)\b", _I),
    re.compile(
        rf"\b(?:max(?:imum)?|caps?|capped|limits?|limited|ceiling)\s+(?:(?:on|of|to|at)\s+)?(?:the\s+)?{_MONEY_RE}\b",
        _I,
    ),
    re.compile(
        rf"\b(?:limits?|limited|refuses?|refused|caps?|capped|stops?|stopped)\b[^.;]{{0,40}}?\bby\s+(?:an?\s+)?"
        rf"{_MONEY_RE}",
        _I,
    ),
)
_PER_HOUR = r"\s*(?:/\s*h(?:r|our)?\b|per\s+(?:hour|h\b|vcpu|gpu|vcpu-hour|gpu-hour|second)|an\s+hour|/\s*vcpu|/\s*gpu)"
#: A limit with an amount: a cap even when the sentence is negated.
_AMOUNT = re.compile(
    r"\b(?:more\s+than|at\s+most|up\s+to|over|exceed(?:s|ing|ed)?|above|under|below|within|capped\s+at|"
    r"cap\s+of|limit\s+of|limited\s+to|budget\s+of)\s+(?:an?\s+|the\s+)?(?:US)?\$\s?\d[\d,]*(?:\.\d+)?"
    rf"(?!\d|{_PER_HOUR})",
    _I,
)
_DIRECTIVE = re.compile(
    r"(?:\b(?:not|never)\s+|n't\s+)(?:to\s+)?(?:exceed|go\s+over|overspend|surpass|spend\s+more|cost\s+more)\b"
    r"|\b(?:stay|keep|remain)s?\b[^.;]{0,30}\b(?:under|within|below)\b[^.;]{0,20}(?:budget|\$\s?\d|dollar)",
    _I,
)
_NEGATION = re.compile(r"\b(?:no|never|not|nothing|none|without|neither|nor)\b|n't\b", _I)
_PROVIDER = re.compile(
    r"\b(?:runpod|gcp|google|the\s+provider)['\N{RIGHT SINGLE QUOTATION MARK}]s\s+own\b"
    r"|\bprovider[- ]side\b|\baccount\s+balance\b",
    _I,
)
_SNAKE = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b|\b[a-z]+(?:[A-Z][a-z0-9]+)+\b")
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n(?=\s*(?:[-*+]\s|\d+\.\s|\||#|<!--))|\n\s*\n")


def sentences(text: str) -> Iterator[tuple[int, str]]:
    """(offset, sentence) pieces: split at sentence ends, list items, table rows and blank lines."""
    start = 0
    for m in _SENTENCE_END.finditer(text):
        if text[start : m.end()].strip():
            yield start, text[start : m.end()]
        start = m.end()
    if text[start:].strip():
        yield start, text[start:]


def sentence_cap(sentence: str) -> str | None:
    """Why this sentence sets a dollar cap, or ``None``."""
    if _PROVIDER.search(sentence):
        return None
    if m := _AMOUNT.search(sentence):
        return f"'{_squash(m.group(0))}' sets a dollar limit"
    if m := _DIRECTIVE.search(sentence):
        return f"'{_squash(m.group(0))}' sets a dollar limit"
    negated = bool(_NEGATION.search(sentence))
    for pattern in _PHRASES:
        if (m := pattern.search(sentence)) and not negated:
            return f"'{_squash(m.group(0))}' reads as a dollar cap"
    for m in _SNAKE.finditer(sentence):
        if capped_identifier(m.group(0)) and not negated:
            return f"`{m.group(0)}` reads as a dollar cap"
    return None


def _squash(s: str) -> str:
    return " ".join(s.split())


def scan_doc(doc: Doc) -> Iterator[tuple[int, str]]:
    for offset, sentence in sentences(doc.text):
        why = sentence_cap(sentence)
        if why is not None:
            lead = len(sentence) - len(sentence.lstrip())
            yield doc.line_at(offset + lead), why


def scan_tree(root: Path, skip: tuple[Path, ...]) -> Iterator[tuple[Path, int, str]]:
    """Python and TOML files under ``root`` (not tests/, hidden or build dirs, nor ``skip``)."""
    skipped = {p.resolve() for p in skip}
    for path in sorted(_files(root)):
        rp = path.resolve()
        if rp in skipped or any(s in rp.parents for s in skipped):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        hits = scan_python(text) if path.suffix == ".py" else scan_toml(text)
        for line, what in hits:
            yield path, line, what


_PRUNE = frozenset({"tests", "build", "dist", "node_modules", "__pycache__", "venv"})


def _files(root: Path) -> Iterator[Path]:
    for entry in root.iterdir():
        if entry.name.startswith(".") or entry.name in _PRUNE or entry.name.endswith(".egg-info"):
            continue
        if entry.is_dir():
            yield from _files(entry)
        elif entry.suffix in (".py", ".toml"):
            yield entry
