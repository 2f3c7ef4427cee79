"""Rules EPS101-EPS106 and EPS115: the written tables (intents, lane orders, QoS ladders, park
caps, worst-case waits, flex-start's maximum run duration) equal the code's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import ClassVar, final

from eps.lint.blocks import machine_words, provisioning_words, runpod_words
from eps.lint.context import Context, Finding, Rule
from eps.lint.docs import Doc, Table, clean
from eps.lint.facts import env_stem, park_cap_settings


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
                    "machine": machine_words(intent, facts),
                    "provisioning": provisioning_words(intent, facts),
                    "runpod": runpod_words(intent, facts),
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




FLEX_START_LIMIT = re.compile(
    r"flex-start(?P<poss>'s)?(?(poss)\s+|\b[^.]{0,160}?"
    r"(?:up to|at most|maximum run duration(?: of)?|max run duration(?: of)?)\s*\(?\s*)"
    r"(?P<n>\d+)\s*(?P<unit>days?|d|hours?|h)\b",
    re.IGNORECASE,
)
_UNIT_S = {"d": 86_400, "day": 86_400, "days": 86_400, "h": 3600, "hour": 3600, "hours": 3600}


@final
class FlexStartLimit(Rule):
    """Stated flex-start maximum run durations equal FLEX_START_MAX_RUN_S, and one is stated.

    Why: P11: a long job that cannot restart gets flex-start rungs on machine
    types GCP sells as spot/flex-start only, and only while it fits flex-start's
    maximum run duration; a doc with another limit promises rungs eps never plans
    (or hides ones it does).
    Statements read: `flex-start ... up to 7d`, `flex-start ... at most 7 days`,
    `flex-start ... maximum run duration of 7d`, `flex-start's 7d`.  When the
    tables have a machine type sold as flex-start but not on-demand, the limit
    must be stated at least once in CLAUDE.md or .claude/rules/.
    Fix: correct the number, or run `workflow_lint --fix` (`intents` block).
    """

    code = "EPS115"
    name = "flex-start"
    messages: ClassVar[dict[str, str]] = {
        "default": "flex-start's maximum run duration says {doc}, code has {code}",
        "missing": "flex-start's maximum run duration ({code}) is stated nowhere in CLAUDE.md or .claude/rules/",
    }

    def check(self, ctx: Context) -> Iterator[Finding]:
        from eps.core.durations import format_duration

        code_s = ctx.facts.flex_start_max_s
        stated = False
        for doc in ctx.docs:
            for m in doc.finditer(FLEX_START_LIMIT):
                seconds = int(m["n"]) * _UNIT_S[m["unit"].lower()]
                stated = stated or doc.is_policy
                if seconds != code_s:
                    have = f"{m['n']}{m['unit']}"
                    yield self.finding(
                        doc.path, doc.line_at(m.start()), doc=have, code=format_duration(code_s)
                    )
        flex_only = any(m.flex_start_offered and not m.on_demand_offered for m in ctx.facts.policy.gcp_machines)
        if flex_only and not stated:
            yield self.finding(*ctx.anchor, "missing", code=format_duration(code_s))
