"""Rules EPS107-EPS114: the reversal, the terminal and skip codes, the asks P1-P13 stated and
tested, no dollar caps, generated blocks, the policy files, and codes the code produces."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, final

from eps.lint import money
from eps.lint.blocks import BLOCK_NAMES, stale_blocks
from eps.lint.context import Context, Finding, Rule
from eps.lint.docs import FAILOVER_MD, REQUIRED_DOCS, Doc, clean, display
from eps.lint.facts import ASKS, RETIRED_TERMINAL

_REVERSAL_WORDS = re.compile(r"\brevers(?:e|ed|es|al|ing)\b|\bretired\b|\bno longer\b|\bused to\b", re.IGNORECASE)


@final
class TerminalReversal(Rule):
    """The reversal of the retired `cpu_exhausted_no_runpod_lane` hard terminal is stated where it must be.

    Why: P3 reverses an older rule (exhausted GCP CPU was terminal); readers of
    the router and of the failover rules must not follow the old one.
    Checks: the router docstring and .claude/rules/compute-backend-failover.md
    each have a paragraph naming `cpu_exhausted_no_runpod_lane` with a reversal
    word (reversed, retired, no longer, used to); and no Terminal is still
    called that.
    Fix: add or restore that paragraph; remove the terminal from the enum.
    """

    code = "EPS107"
    name = "terminal-reversal"
    messages: ClassVar[dict[str, str]] = {
        "default": "does not state the reversal of the retired hard terminal `" + RETIRED_TERMINAL + "`",
        "alive": "`" + RETIRED_TERMINAL + "` is still a Terminal in the code",
    }

    def check(self, ctx: Context) -> Iterator[Finding]:
        router = ctx.router
        router_path = router.path if router else display(ctx.facts.router_path, ctx.root)
        targets: list[tuple[str, Doc | None]] = [(router_path, router), (FAILOVER_MD, ctx.doc(FAILOVER_MD))]
        for path, doc in targets:
            if doc is None or not any(
                RETIRED_TERMINAL in text and _REVERSAL_WORDS.search(text) for _, text in doc.paragraphs()
            ):
                line = doc.first_line if doc else 1
                yield self.finding(path, line)
        if RETIRED_TERMINAL in ctx.facts.terminals:
            yield self.finding(router_path, router.first_line if router else 1, "alive")


@final
class TerminalAndSkipCodes(Rule):
    """Every terminal reason and skip code of the code is explained in the failover rules; no unknown code is.

    Why: `eps plan` and `--json` show these codes; the failover rules file is
    where a reader looks them up.
    Checks: each Terminal and SkipCode value appears in
    .claude/rules/compute-backend-failover.md; a table there whose first column
    is `terminal`, `skip code` or `code` lists only codes the code has.
    Fix: add a row for the new code, or drop the row of a removed one.
    """

    code = "EPS108"
    name = "terminal-skip-codes"
    messages: ClassVar[dict[str, str]] = {
        "default": "{what} `{value}` is not explained here",
        "unknown": "`{value}` is neither a terminal reason nor a skip code in the code",
    }

    def check(self, ctx: Context) -> Iterator[Finding]:
        doc = ctx.doc(FAILOVER_MD)
        if doc is None:
            return  # EPS113
        facts = ctx.facts
        for what, values in (("terminal reason", facts.terminals), ("skip code", facts.skip_codes)):
            for value in values:
                if not re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-])", doc.text):
                    yield self.finding(doc.path, 1, what=what, value=value)
        known = {*facts.terminals, *facts.skip_codes}
        for table in doc.tables():
            if clean(table.header[0]).lower() not in ("terminal", "terminal reason", "skip code", "code"):
                continue
            for line, cells in table.rows:
                value = clean(cells[0])
                if value not in known:
                    yield self.finding(doc.path, doc.file_line(line), "unknown", value=value)


@final
class CodeProduced(Rule):
    """Every skip code and terminal reason the docs document can be produced by the code.

    Why: a documented code that no code path emits is a promise the plan never
    keeps (`dev_qos_debug_only` was documented long before anything produced it);
    a reader who waits for it waits forever.
    Checks: each code of a table in .claude/rules/compute-backend-failover.md
    whose first column is `terminal`, `skip code` or `code`, and each code named
    in backticks in CLAUDE.md or .claude/rules/, is produced somewhere in
    eps/core: an AST scan finds `SkipCode.X` or `Terminal.X` used other than as
    an operand of a comparison (a test of a code does not produce it).
    Fix: make the code path that should produce it real, or drop the code from
    the enum and its row from the docs.
    """

    code = "EPS114"
    name = "code-produced"
    messages: ClassVar[dict[str, str]] = {
        "default": "{what} `{value}` is documented here but no code path produces it",
    }

    def check(self, ctx: Context) -> Iterator[Finding]:
        facts = ctx.facts
        if facts.produced is None:
            return
        kinds = {**dict.fromkeys(facts.skip_codes, "skip code"), **dict.fromkeys(facts.terminals, "terminal reason")}
        missing = {v for v in kinds if v not in facts.produced}
        if not missing:
            return
        for doc in ctx.policy_docs:
            seen: set[str] = set()
            for table in doc.tables() if doc.path == FAILOVER_MD else []:
                if clean(table.header[0]).lower() not in ("terminal", "terminal reason", "skip code", "code"):
                    continue
                for line, cells in table.rows:
                    value = clean(cells[0])
                    if value in missing and value not in seen:
                        seen.add(value)
                        yield self.finding(doc.path, doc.file_line(line), what=kinds[value], value=value)
            for m in doc.finditer(_BACKTICKED):
                value = m["code"]
                if value in missing and value not in seen:
                    seen.add(value)
                    yield self.finding(doc.path, doc.line_at(m.start()), what=kinds[value], value=value)


_BACKTICKED = re.compile(r"`(?P<code>[a-z][a-z0-9_]*)`")


@final
class AskStated(Rule):
    """Every ask P1-P13 is stated, with its id, in CLAUDE.md or .claude/rules/; no other id is.

    Why: the asks are the standing policy; readers and this linter find each by
    its stable id.
    A statement is a line that starts with the id: a heading (`### P3 ...`), a
    list item, a table row or a bold lead-in (`**P3**`).
    Fix: add the missing rule under its id; renumber nothing.
    """

    code = "EPS109"
    name = "ask-stated"
    messages: ClassVar[dict[str, str]] = {
        "default": "{ask} is stated nowhere in CLAUDE.md or .claude/rules/",
        "unknown": "{ask} is not one of the asks P1-P{last}",
    }

    def check(self, ctx: Context) -> Iterator[Finding]:
        for ask in ASKS:
            if ask not in ctx.ask_lines:
                yield self.finding(*ctx.anchor, ask=ask)
        for ask, (path, line) in ctx.ask_lines.items():
            if ask not in ASKS:
                yield self.finding(path, line, "unknown", ask=ask, last=len(ASKS))


@final
class AskTested(Rule):
    """Every ask P1-P13 is covered by at least one test that names it.

    Why: an ask nobody tests is a wish.  A test names `P7` when the token
    appears in a test file under tests/ (outside tests/lint/): `P7` as a word
    (docstring, comment, id) or `p7_` in any case (`test_p7_...`), or when a
    scenario file tests/**/scenarios/*.json lists it in a `rules` array.
    Fix: add a test named `test_p7_...`, or list the ask in a scenario's `rules`.
    """

    code = "EPS110"
    name = "ask-tested"
    messages: ClassVar[dict[str, str]] = {
        "default": '{ask} is covered by no test (name it: test_{low}_..., or a scenario\'s "rules")',
    }

    def check(self, ctx: Context) -> Iterator[Finding]:
        tested = ctx.tested_asks
        for ask in ASKS:
            if ask not in tested:
                path, line = ctx.ask_lines.get(ask, ctx.anchor)
                yield self.finding(path, line, ask=ask, low=ask.lower())


#: The linter's own package (``eps.lint``), as a folder under a repository root: ``eps/lint``.
_LINT_PACKAGE = __name__.rpartition(".")[0]


@final
class NoDollarCap(Rule):
    """No code path, config key or doc sentence sets a dollar-budget cap (P12).

    Why: eps never limits or refuses work by dollars; prices are information.
    Checks (see eps/lint/money.py for the exact heuristics): names such as
    `budget`, `max_cost`, `spend_limit` in code (outside tests/ and the
    linter), in TOML keys and in docs; comparisons of a money-named value
    against a limit in a test that refuses work (`if price > X: continue`);
    doc sentences that set a limit (`budget`, `dollar cap`, `at most $100`)
    unless they deny one (`no dollar caps`).  A price table, `price_per_hour`,
    and the provider's own spending limit (`RunPod's own ... limit`) are fine.
    Fix: remove the cap; show the price instead.
    """

    code = "EPS111"
    name = "no-dollar-cap"
    messages: ClassVar[dict[str, str]] = {"default": "{what} (P12: no dollar caps)"}

    def check(self, ctx: Context) -> Iterator[Finding]:
        for doc in ctx.docs:
            for line, what in money.scan_doc(doc):
                yield self.finding(doc.path, line, what=what)
        # The linter names the words it hunts: skip its own folder, both where this code runs
        # from (an editable install: inside the root) and where the root keeps it (a plain or
        # wheel install runs from site-packages, and the root's eps/lint is then just files).
        skip = (Path(__file__).parent, ctx.root.joinpath(*_LINT_PACKAGE.split(".")))
        for path, line, what in money.scan_tree(ctx.root, skip):
            yield self.finding(display(path, ctx.root), line, what=what)
        extra = ctx.facts.tables_path  # a code-table module outside the root is code too
        if extra is not None and ctx.root.resolve() not in extra.parents and extra.is_file():
            for line, what in money.scan_python(extra.read_text(encoding="utf-8")):
                yield self.finding(display(extra, ctx.root), line, what=what)


@final
class GeneratedBlocks(Rule):
    """Generated blocks are well formed, known, and equal to what the code tables render now.

    Why: a block between `<!-- eps:begin NAME -->` and `<!-- eps:end NAME -->`
    (in CLAUDE.md, the rules files and the agent guide, eps/guide.md) is rendered
    from the tables (like cog); hand edits inside it are lost and a stale one
    misstates the policy.
    Fix: `workflow_lint --fix` rewrites every stale block in place; for a
    broken marker, repair the marker lines.
    """

    code = "EPS112"
    name = "generated-block"
    messages: ClassVar[dict[str, str]] = {
        "default": "generated block {name!r} is out of date; run `workflow_lint --fix`",
        "marker": "{problem}",
        "unknown": "unknown generated block {name!r} (known: {known})",
    }

    def check(self, ctx: Context) -> Iterator[Finding]:
        for doc in ctx.block_docs:
            blocks, errors = doc.blocks()
            for e in errors:
                yield self.finding(doc.path, doc.file_line(e.line), "marker", problem=e.message)
            for b in blocks:
                if b.name not in BLOCK_NAMES:
                    known = ", ".join(sorted(BLOCK_NAMES))
                    yield self.finding(doc.path, doc.file_line(b.begin), "unknown", name=b.name, known=known)
            for begin, name, _, _ in stale_blocks(doc, ctx.facts, ctx.rule_rows):
                yield self.finding(doc.path, doc.file_line(begin), name=name)


@final
class PolicyFiles(Rule):
    """The policy documents exist: CLAUDE.md and the two rules files of .claude/rules/.

    Why: agents read them before they dispatch; every other rule checks them.
    Fix: restore the file (its generated blocks come back with `workflow_lint --fix`).
    """

    code = "EPS113"
    name = "policy-files"
    messages: ClassVar[dict[str, str]] = {"default": "missing policy document"}

    def check(self, ctx: Context) -> Iterator[Finding]:
        for path in REQUIRED_DOCS:
            if not (ctx.root / path).is_file():
                yield self.finding(path, 1)


#: The registry, in code order.  Codes are stable: never renumber, never reuse.
