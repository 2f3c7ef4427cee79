"""The rules of ``workflow_lint --check-asks``: a registry of small final classes.

Each rule has a stable ``code`` (never reused), a ``name``, message templates
and a docstring whose first line says what it checks and whose body says why
and how to fix.  ``RULES`` is the registry, in code order; CLAUDE.md lists it
in a generated block (``lint-rules``).

A rule reads a :class:`Context` (the root, the code facts, the documents) and
yields :class:`Finding` values; it never writes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import ClassVar, final

from attrs import frozen

from eps.lint import money
from eps.lint.blocks import RENDERERS, provisioning_words, runpod_words, stale_blocks
from eps.lint.docs import CLAUDE_MD, FAILOVER_MD, REQUIRED_DOCS, Doc, Table, clean, display, load_docs
from eps.lint.facts import ASKS, RETIRED_TERMINAL, PolicyFacts, env_stem, park_cap_settings


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

    def __init__(self, root: Path, facts: PolicyFacts) -> None:
        self.root = root
        self.facts = facts
        self.docs: list[Doc] = load_docs(root, facts)

    @property
    def policy_docs(self) -> list[Doc]:
        return [d for d in self.docs if d.is_policy]

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


def _tuple(items: tuple[str, ...] | list[str]) -> str:
    return "(" + ", ".join(items) + ")"


def _intent_tables(ctx: Context) -> list[tuple[Doc, Table]]:
    return [(d, t) for d in ctx.policy_docs for t in d.tables() if t.column("intent") == 0]


@final
class IntentCoverage(Rule):
    """Every intent of the code table is in the docs' intent table, and the docs list no other.

    Why: agents pick an intent from CLAUDE.md; an intent the docs lack is never
    used, one the code lacks fails with `unknown intent`.
    Fix: run `workflow_lint --fix` (the `intents` block), or edit the table whose
    first column is `intent`.
    """

    code = "EPS101"
    name = "intent-coverage"
    messages: ClassVar[dict[str, str]] = {
        "missing": "intent table lacks {intent!r}, which the code table has",
        "extra": "intent table lists {intent!r}, which the code table lacks",
        "none": "no intent table (a table whose first column is 'intent') in CLAUDE.md or .claude/rules/",
    }

    def check(self, ctx: Context) -> Iterator[Finding]:
        tables = _intent_tables(ctx)
        if not tables:
            yield self.finding(*ctx.anchor, "none")
            return
        code = [i.name for i in ctx.facts.policy.intents]
        for doc, table in tables:
            listed = {clean(cells[0]): line for line, cells in table.rows}
            for name in code:
                if name not in listed:
                    yield self.finding(doc.path, doc.file_line(table.header_line), "missing", intent=name)
            for name, line in listed.items():
                if name not in code:
                    yield self.finding(doc.path, doc.file_line(line), "extra", intent=name)


def _split_list(cell: str) -> tuple[str, ...]:
    parts = (clean(p) for p in re.split(r"\s*(?:->|\N{RIGHTWARDS ARROW}|,)\s*", cell))
    return tuple(x for x in parts if x and x != "-")


@final
class IntentRow(Rule):
    """Each intent-table row states the code's auto lanes, GCP machine, spot/on-demand and RunPod flavors.

    Why: the row is what a researcher reads to know where `eps execute` will put
    a job (P3, P4, P6, P11).
    Fix: run `workflow_lint --fix`, or correct the row from `eps intents`.
    """

    code = "EPS102"
    name = "intent-row"
    messages: ClassVar[dict[str, str]] = {
        "default": "intent {intent!r}: {what} says {doc}, code has {code}",
    }

    def check(self, ctx: Context) -> Iterator[Finding]:
        facts = ctx.facts
        for doc, table in _intent_tables(ctx):
            cols = {
                "lanes": table.column("auto lanes", "lanes", "lanes (auto)"),
                "machine": table.column("gcp machine", "gcp machine type"),
                "provisioning": table.column("gcp provisioning", "spot or on-demand", "provisioning"),
                "runpod": table.column("runpod", "runpod flavors"),
            }
            for line, cells in table.rows:
                intent = facts.policy.intent(clean(cells[0]))
                if intent is None:
                    continue  # EPS101's finding
                want = {
                    "lanes": _tuple(facts.intent_lanes(intent)),
                    "machine": intent.gcp_machine or "-",
                    "provisioning": provisioning_words(intent, facts),
                    "runpod": runpod_words(intent),
                }
                for what, col in cols.items():
                    if col is None or col >= len(cells):
                        continue
                    cell = cells[col]
                    if what == "lanes":
                        have = _tuple(_split_list(cell))
                    elif what == "machine":
                        have = clean(cell) or "-"
                    else:
                        have = re.sub(r"\s+", " ", clean(cell))
                        want[what] = re.sub(r"[`*]", "", want[what])
                    if have != want[what]:
                        yield self.finding(
                            doc.path, doc.file_line(line), intent=intent.name, what=what, doc=have, code=want[what]
                        )


LANE_ORDER = re.compile(
    r"(?:(?P<kind>GPU|CPU)(?:\s+auto(?:matic)?)?\s+lane\s+order|`?(?P<const>DEFAULT_AUTO_LANE_ORDER|CPU_LANE_ORDER)`?)"
    r"\s*(?:is\s*)?[:=]?\s*`*\((?P<lanes>[^)\n]*)\)"
)


@final
class LaneOrder(Rule):
    """Stated GPU and CPU lane orders equal DEFAULT_AUTO_LANE_ORDER and CPU_LANE_ORDER.

    Why: P3 and P6 are lane orders; a doc that states another order sends
    agents (and reviewers) the wrong way.
    Statements read: `GPU auto lane order: (a, b)`, `CPU lane order: (a, b)`,
    `DEFAULT_AUTO_LANE_ORDER = (a, b)`, `CPU_LANE_ORDER = (a, b)`, in CLAUDE.md,
    .claude/rules/ and the router docstring; each order must be stated at least
    once in CLAUDE.md or .claude/rules/.
    Fix: correct the statement, or run `workflow_lint --fix` (`lane-orders` block).
    """

    code = "EPS103"
    name = "lane-order"
    messages: ClassVar[dict[str, str]] = {
        "default": "{kind} lane order says {doc}, code has {code}",
        "missing": "{kind} lane order is stated nowhere in CLAUDE.md or .claude/rules/ (code has {code})",
    }

    def check(self, ctx: Context) -> Iterator[Finding]:
        p = ctx.facts.policy
        code = {"GPU": p.gpu_lane_order, "CPU": p.cpu_lane_order}
        stated: set[str] = set()
        for doc in ctx.docs:
            for m in doc.finditer(LANE_ORDER):
                kind = m["kind"] or ("GPU" if m["const"] == "DEFAULT_AUTO_LANE_ORDER" else "CPU")
                have = tuple(x.strip(" '\"`") for x in m["lanes"].split(",") if x.strip(" '\"`"))
                if doc.is_policy:
                    stated.add(kind)
                if have != code[kind]:
                    yield self.finding(
                        doc.path, doc.line_at(m.start()), kind=kind, doc=_tuple(have), code=_tuple(code[kind])
                    )
        for kind in ("GPU", "CPU"):
            if kind not in stated:
                yield self.finding(*ctx.anchor, "missing", kind=kind, code=_tuple(code[kind]))


QOS_LADDER = re.compile(
    r"(?:\b(?P<cluster>[A-Za-z][\w-]*)\s+)?QoS\s+ladder\s*(?:is\s*)?[:=]\s*"
    r"(?P<tiers>`?[\w-]+`?(?:\s*(?:->|\N{RIGHTWARDS ARROW})\s*`?[\w-]+`?)+)"
)


@final
class QosLadder(Rule):
    """Stated QoS ladders equal each cluster's qos_ladder, and each ladder is stated.

    Why: P7: every fellows dispatch starts under the top tier and walks down only
    after park timeouts; the order is the policy.
    Statements read: `<cluster> QoS ladder: a -> b -> c` (the cluster name is
    optional when only one cluster has a ladder).
    Fix: correct the statement, or run `workflow_lint --fix` (`qos-ladder` block).
    """

    code = "EPS104"
    name = "qos-ladder"
    messages: ClassVar[dict[str, str]] = {
        "default": "{cluster} QoS ladder says {doc}, code has {code}",
        "missing": "{cluster} QoS ladder is stated nowhere in CLAUDE.md or .claude/rules/ (code has {code})",
    }

    def check(self, ctx: Context) -> Iterator[Finding]:
        ladders = {c.name: c.qos_ladder for c in ctx.facts.ladder_clusters}
        stated: set[str] = set()
        for doc in ctx.docs:
            for m in doc.finditer(QOS_LADDER):
                have = tuple(clean(t) for t in re.split(r"\s*(?:->|\N{RIGHTWARDS ARROW})\s*", m["tiers"]))
                name = m["cluster"] if m["cluster"] in ladders else None
                if name is None:
                    matching = [n for n, lad in ladders.items() if lad == have]
                    name = matching[0] if matching else (next(iter(ladders)) if len(ladders) == 1 else None)
                if name is None:
                    continue
                if doc.is_policy:
                    stated.add(name)
                if have != ladders[name]:
                    yield self.finding(
                        doc.path,
                        doc.line_at(m.start()),
                        cluster=name,
                        doc=" -> ".join(have),
                        code=" -> ".join(ladders[name]),
                    )
        for name, ladder in ladders.items():
            if name not in stated:
                yield self.finding(*ctx.anchor, "missing", cluster=name, code=" -> ".join(ladder))


PARK_SETTING = re.compile(r"\bEPS_(?P<stem>[A-Z0-9_]+?)_(?P<next>NEXT_)?QUEUE_WAIT_SECONDS\b")
_SECONDS_AFTER = re.compile(r"^[`)\s,:=(]*(?:default\s*[:=]?\s*)?(?P<n>\d[\d_]*)\s*s\b")
_SECONDS_BEFORE = re.compile(r"(?P<n>\d[\d_]*)\s*s\b[^\d\n]{0,12}$")


@final
class ParkCaps(Rule):
    """Stated park caps equal the tables: rung 1 and rungs 2+ per cluster, named by their settings.

    Why: P8: the caps bound how long a job waits in a queue before eps moves on.
    Statements read: a setting `EPS_<CLUSTER>_QUEUE_WAIT_SECONDS` or
    `EPS_<CLUSTER>_NEXT_QUEUE_WAIT_SECONDS` with a number of seconds right
    before or after it (`600 s (EPS_...)`, `EPS_... (default 600 s)`).  Each
    setting of each laddered cluster must be stated with its value.
    Fix: correct the number, or run `workflow_lint --fix` (`qos-ladder` block).
    """

    code = "EPS105"
    name = "park-cap"
    messages: ClassVar[dict[str, str]] = {
        "default": "{setting} says {doc} s, code has {code} s",
        "unknown": "{setting} names no configured SLURM cluster",
        "missing": "{setting} and its default ({code} s) are stated nowhere in CLAUDE.md or .claude/rules/",
    }

    def check(self, ctx: Context) -> Iterator[Finding]:
        settings: dict[str, int] = {}
        for c in ctx.facts.policy.clusters:
            settings.update(park_cap_settings(c))
        stems = {env_stem(c.name).removeprefix("EPS_") for c in ctx.facts.policy.clusters}
        stated: set[str] = set()
        for doc in ctx.docs:
            for m in doc.finditer(PARK_SETTING):
                setting = m.group(0)
                line = doc.line_at(m.start())
                if m["stem"] not in stems:
                    yield self.finding(doc.path, line, "unknown", setting=setting)
                    continue
                value = self._value(doc.text, m.start(), m.end())
                if value is None:
                    continue
                if doc.is_policy:
                    stated.add(setting)
                if value != settings[setting]:
                    yield self.finding(doc.path, line, setting=setting, doc=value, code=settings[setting])
        for c in ctx.facts.ladder_clusters:
            for setting, value in park_cap_settings(c):
                if setting not in stated:
                    yield self.finding(*ctx.anchor, "missing", setting=setting, code=value)

    @staticmethod
    def _value(text: str, start: int, end: int) -> int | None:
        after = _SECONDS_AFTER.match(text[end : end + 40])
        if after:
            return int(after["n"].replace("_", ""))
        line_start = text.rfind("\n", 0, start) + 1
        before = _SECONDS_BEFORE.search(text[max(line_start, start - 40) : start])
        return int(before["n"].replace("_", "")) if before else None


WORST_CASE = re.compile(
    r"worst[- ]case(?:\s+(?:wait|time))?[^.]{0,80}?"
    r"(?:(?P<first>\d+)\s*\+\s*(?P<k>\d+)\s*[x\N{MULTIPLICATION SIGN}*]\s*(?P<next>\d+)\s*=\s*)?(?P<total>\d+)\s*s\b",
    re.IGNORECASE,
)


@final
class WorstCase(Rule):
    """Stated worst-case waits equal ladder_worst_case_s(cluster), and their arithmetic holds.

    Why: P8: the worst case (600 + 2 x 300 = 1200 s on fellows) is what a user
    waits before a job reaches GCP; it must be computed from the tables, not typed.
    Rungs 2+ never wait longer than rung 1: in `a + k x b`, `a` is the rung-1 cap,
    `k` the number of further tiers and `b` the smaller of the two cap settings
    (`ClusterConfig.later_park_cap_s`), so a formula that uses a larger
    rungs-2+ setting as it stands is wrong.
    Statements read: `worst-case ... N s` or `worst-case ... a + k x b = N s`
    (cluster: the one named in the sentence, else the only laddered one).
    Fix: run `workflow_lint --fix` (`qos-ladder` block), or correct the number.
    """

    code = "EPS106"
    name = "worst-case"
    messages: ClassVar[dict[str, str]] = {
        "default": "worst-case wait on {cluster} says {doc} s, tables compute {code} s",
        "formula": "worst-case formula on {cluster} says {doc}, tables give {code}",
        "missing": "the worst-case wait on {cluster} ({code} s) is stated nowhere in CLAUDE.md or .claude/rules/",
    }

    def check(self, ctx: Context) -> Iterator[Finding]:
        clusters = ctx.facts.ladder_clusters
        stated: set[str] = set()
        for doc in ctx.docs:
            for m in doc.finditer(WORST_CASE):
                named = [c for c in clusters if re.search(rf"\b{re.escape(c.name)}\b", m.group(0))]
                if not named and len(clusters) != 1:
                    continue
                c = (named or list(clusters))[0]
                code = ctx.facts.worst_case_s(c.name)
                if code is None:
                    continue
                line = doc.line_at(m.start())
                if doc.is_policy:
                    stated.add(c.name)
                if m["first"] is not None:
                    have = f"{m['first']} + {m['k']} x {m['next']}"
                    want = f"{c.first_park_cap_s} + {len(c.qos_ladder) - 1} x {c.later_park_cap_s}"
                    if have != want:
                        yield self.finding(doc.path, line, "formula", cluster=c.name, doc=have, code=want)
                        continue
                if int(m["total"]) != code:
                    yield self.finding(doc.path, line, cluster=c.name, doc=m["total"], code=code)
        for c in clusters:
            if c.name not in stated:
                yield self.finding(*ctx.anchor, "missing", cluster=c.name, code=ctx.facts.worst_case_s(c.name))


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
    is rendered from the tables (like cog); hand edits inside it are lost and a
    stale one misstates the policy.
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
        for doc in ctx.policy_docs:
            blocks, errors = doc.blocks()
            for e in errors:
                yield self.finding(doc.path, doc.file_line(e.line), "marker", problem=e.message)
            for b in blocks:
                if b.name not in RENDERERS:
                    known = ", ".join(sorted(RENDERERS))
                    yield self.finding(doc.path, doc.file_line(b.begin), "unknown", name=b.name, known=known)
            for begin, name, _, _ in stale_blocks(doc, ctx.facts):
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
RULES: tuple[type[Rule], ...] = (
    IntentCoverage,
    IntentRow,
    LaneOrder,
    QosLadder,
    ParkCaps,
    WorstCase,
    TerminalReversal,
    TerminalAndSkipCodes,
    AskStated,
    AskTested,
    NoDollarCap,
    GeneratedBlocks,
    PolicyFiles,
    CodeProduced,
)


def run_rules(ctx: Context, rules: tuple[type[Rule], ...] = RULES) -> list[Finding]:
    findings: set[Finding] = set()
    for rule in rules:
        findings.update(rule().check(ctx))
    return sorted(findings)
