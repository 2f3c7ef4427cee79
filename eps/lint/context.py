"""What every rule of ``workflow_lint`` reads and returns: :class:`Context` (the root, the
code facts, the documents), :class:`Finding`, and the :class:`Rule` base class."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import ClassVar

from attrs import frozen

from eps.lint.docs import CLAUDE_MD, Doc, load_docs
from eps.lint.facts import PolicyFacts


@frozen(order=True)
class Finding:
    path: str
    line: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.code} {self.message}"


class Context:
    """What the rules read.  Expensive parts are computed once, on first use."""

    def __init__(self, root: Path, facts: PolicyFacts, rule_rows: tuple[tuple[str, str, str], ...] = ()) -> None:
        self.root = root
        self.facts = facts
        self.rule_rows = rule_rows  # the rule registry, as the lint-rules block lists it
        self.docs: list[Doc] = load_docs(root, facts)

    @property
    def policy_docs(self) -> list[Doc]:
        return [d for d in self.docs if d.is_policy]

    @property
    def block_docs(self) -> list[Doc]:
        return [d for d in self.docs if d.has_blocks]

    def doc(self, path: str) -> Doc | None:
        return next((d for d in self.docs if d.path == path), None)

    @property
    def router(self) -> Doc | None:
        return next((d for d in self.docs if d.kind == "router"), None)

    @property
    def anchor(self) -> tuple[str, int]:
        """Where a finding about something missing from the docs points: CLAUDE.md line 1."""
        return CLAUDE_MD, 1

    @cached_property
    def ask_lines(self) -> dict[str, tuple[str, int]]:
        """Where each ask id is stated (first place): ask -> (path, line)."""
        out: dict[str, tuple[str, int]] = {}
        for d in self.policy_docs:
            for i, line in enumerate(d.lines):
                if m := ASK_DEF.match(line):
                    out.setdefault(f"P{m['n']}", (d.path, d.file_line(i)))
        return out

    @cached_property
    def tested_asks(self) -> set[str]:
        """Ask ids named by tests: ``P7`` (word) or ``p7_`` (any case) in tests/**/*.py outside
        tests/lint/, or listed in the ``rules`` array of a tests/**/scenarios/*.json file."""
        tests = self.root / "tests"
        found: set[str] = set()
        if not tests.is_dir():
            return found
        lint_dir = (tests / "lint").resolve()
        for path in tests.rglob("*.py"):
            if lint_dir in path.resolve().parents:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            found |= {f"P{n}" for n in TEST_ASK_UPPER.findall(text)}
            found |= {f"P{n}" for n in TEST_ASK_LOWER.findall(text)}
        for path in tests.rglob("scenarios/*.json"):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            found |= {r.upper() for r in _rules_lists(data)}
        return found


def _rules_lists(obj: object) -> Iterator[str]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "rules" and isinstance(v, list):
                yield from (x for x in v if isinstance(x, str))
            else:
                yield from _rules_lists(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _rules_lists(v)


#: A line that states an ask: a heading, list item, table row or bold lead-in starting with ``Pn``.
ASK_DEF = re.compile(r"^\s*(?:#{1,6}\s+|[-*+]\s+|\|\s*)?(?:\*\*)?P(?P<n>\d+)\b")
TEST_ASK_UPPER = re.compile(r"\bP(\d+)\b")
TEST_ASK_LOWER = re.compile(r"(?<![A-Za-z0-9])[pP](\d+)_")


class Rule:
    """Base of every rule: a code, a name, message templates, and ``check``."""

    code: ClassVar[str]
    name: ClassVar[str]
    messages: ClassVar[dict[str, str]]

    def check(self, ctx: Context) -> Iterator[Finding]:
        raise NotImplementedError

    def finding(self, path: str, line: int, message: str = "default", /, **fields: object) -> Finding:
        """A finding at ``path:line`` from the template ``messages[message]`` filled with ``fields``."""
        return Finding(path, line, self.code, self.messages[message].format(**fields))

    @classmethod
    def summary(cls) -> str:
        return (cls.__doc__ or "").strip().split("\n", 1)[0]


