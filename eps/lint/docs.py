"""The written policy as the rules read it: documents, their tables, their marked blocks.

A :class:`Doc` is one text with a display path and the file line its first line
sits on, so a finding inside the router's docstring points at
``eps/core/router.py:LINE`` like any other.  Statements are matched across
line wraps (patterns use ``\\s+``); :meth:`Doc.line_at` maps an offset back to
a file line.

Generated blocks sit between ``<!-- eps:begin NAME -->`` and
``<!-- eps:end NAME -->`` lines, each marker alone on its line.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from pathlib import Path

from attrs import field, frozen

from eps.lint.facts import PolicyFacts

CLAUDE_MD = "CLAUDE.md"
RULES_DIR = ".claude/rules"
FAILOVER_MD = ".claude/rules/compute-backend-failover.md"
LADDER_MD = ".claude/rules/fellows-qos-ladder.md"
README_MD = "README.md"
#: The agent guide, shipped in the package and printed by ``eps guide``.
GUIDE_MD = "eps/guide.md"
#: The policy documents that must exist.
REQUIRED_DOCS: tuple[str, ...] = (CLAUDE_MD, FAILOVER_MD, LADDER_MD)

BEGIN = re.compile(r"^\s*<!--\s*eps:begin\s+(?P<name>[\w-]+)\s*-->\s*$")
END = re.compile(r"^\s*<!--\s*eps:end\s+(?P<name>[\w-]+)\s*-->\s*$")


@frozen
class Block:
    name: str
    begin: int  # index (0-based) of the begin-marker line in Doc.lines
    end: int  # index of the end-marker line

    @property
    def body_slice(self) -> slice:
        return slice(self.begin + 1, self.end)


@frozen
class MarkerError:
    line: int  # 0-based line index
    message: str


@frozen
class Table:
    """A markdown table: the header cells and each body row with its 0-based line index."""

    header_line: int
    header: tuple[str, ...]
    rows: tuple[tuple[int, tuple[str, ...]], ...]

    def column(self, *names: str) -> int | None:
        wanted = {n.lower() for n in names}
        for i, cell in enumerate(self.header):
            if clean(cell).lower() in wanted:
                return i
        return None


@frozen
class Doc:
    """One document.  ``kind`` is ``claude``, ``rules``, ``router`` or ``readme``."""

    path: str  # as shown in findings: relative to the root when inside it
    text: str
    kind: str
    first_line: int = 1  # file line of text line 1
    lines: tuple[str, ...] = field(init=False)
    _starts: tuple[int, ...] = field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        lines = tuple(self.text.split("\n"))
        starts, pos = [], 0
        for line in lines:
            starts.append(pos)
            pos += len(line) + 1
        object.__setattr__(self, "lines", lines)
        object.__setattr__(self, "_starts", tuple(starts))

    @property
    def is_policy(self) -> bool:
        """CLAUDE.md and .claude/rules/: where asks are stated and statements are required."""
        return self.kind in ("claude", "rules")

    @property
    def has_blocks(self) -> bool:
        """The documents whose generated blocks are checked and regenerated: the policy
        documents and the agent guide."""
        return self.is_policy or self.kind == "guide"

    def line_at(self, offset: int) -> int:
        """The file line of a character offset into ``text``."""
        return bisect.bisect_right(self._starts, offset) - 1 + self.first_line

    def file_line(self, index: int) -> int:
        """The file line of a 0-based line index."""
        return index + self.first_line

    def finditer(self, pattern: re.Pattern[str]) -> Iterator[re.Match[str]]:
        return pattern.finditer(self.text)

    def paragraphs(self) -> Iterator[tuple[int, str]]:
        """(offset, text) of each blank-line separated paragraph."""
        for m in re.finditer(r"(?:[^\n]*\S[^\n]*(?:\n|$))+", self.text):
            yield m.start(), m.group(0)

    def tables(self) -> list[Table]:
        out: list[Table] = []
        i, n = 0, len(self.lines)
        while i < n - 1:
            if _is_row(self.lines[i]) and _is_rule(self.lines[i + 1]):
                header = split_row(self.lines[i])
                rows = []
                j = i + 2
                while j < n and _is_row(self.lines[j]):
                    rows.append((j, split_row(self.lines[j])))
                    j += 1
                out.append(Table(i, header, tuple(rows)))
                i = j
            else:
                i += 1
        return out

    def blocks(self) -> tuple[list[Block], list[MarkerError]]:
        blocks: list[Block] = []
        errors: list[MarkerError] = []
        open_at: tuple[str, int] | None = None
        for i, line in enumerate(self.lines):
            if m := BEGIN.match(line):
                if open_at is not None:
                    errors.append(MarkerError(i, f"block {m['name']!r} begins inside block {open_at[0]!r}"))
                open_at = (m["name"], i)
            elif m := END.match(line):
                if open_at is None:
                    errors.append(MarkerError(i, f"end of block {m['name']!r} without a begin"))
                elif open_at[0] != m["name"]:
                    errors.append(MarkerError(i, f"end of block {m['name']!r} closes block {open_at[0]!r}"))
                    open_at = None
                else:
                    blocks.append(Block(open_at[0], open_at[1], i))
                    open_at = None
        if open_at is not None:
            errors.append(MarkerError(open_at[1], f"block {open_at[0]!r} has no end marker"))
        return blocks, errors


def _is_row(line: str) -> bool:
    s = line.strip()
    return s.startswith("|") and s.endswith("|") and len(s) > 1


def _is_rule(line: str) -> bool:
    return bool(re.fullmatch(r"\s*\|(?:\s*:?-{3,}:?\s*\|)+\s*", line))


def split_row(line: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in line.strip().strip("|").split("|"))


def clean(cell: str) -> str:
    """A table cell without markdown emphasis and code ticks."""
    return re.sub(r"[`*]", "", cell).strip()


def display(path: Path, root: Path) -> str:
    """How a finding names ``path``: relative to the root; for a module of the installed
    ``eps`` package outside the root (a plain or wheel install), relative to the folder
    that holds the package (``eps/core/router.py``), so every kind of install prints the
    same; anything else as it is."""
    resolved = path.resolve()
    try:
        return resolved.relative_to(root.resolve()).as_posix()
    except ValueError:
        pass
    package = Path(__file__).resolve().parents[1]  # the eps package (eps/lint/docs.py)
    if package in resolved.parents:
        return resolved.relative_to(package.parent).as_posix()
    return str(path)


def load_docs(root: Path, facts: PolicyFacts) -> list[Doc]:
    """CLAUDE.md, every ``*.md`` in .claude/rules/ (sorted), the README, the agent guide and
    the router docstring."""
    docs: list[Doc] = []
    claude = root / CLAUDE_MD
    if claude.is_file():
        docs.append(Doc(CLAUDE_MD, claude.read_text(encoding="utf-8"), "claude"))
    rules_dir = root / RULES_DIR
    if rules_dir.is_dir():
        for path in sorted(rules_dir.glob("*.md")):
            docs.append(Doc(display(path, root), path.read_text(encoding="utf-8"), "rules"))
    readme = root / README_MD
    if readme.is_file():
        docs.append(Doc(README_MD, readme.read_text(encoding="utf-8"), "readme"))
    guide = root / GUIDE_MD
    if guide.is_file():
        docs.append(Doc(GUIDE_MD, guide.read_text(encoding="utf-8"), "guide"))
    if facts.router_doc:
        docs.append(Doc(display(facts.router_path, root), facts.router_doc, "router", facts.router_line))
    return docs
