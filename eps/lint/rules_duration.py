"""Rule EPS116: what happens to a job without a duration is stated, and is what the code plans.

A job without ``--duration`` has an unknown duration.  The docs must say the policy for
it (never trivial, P2; no spot unless restartable, P11; no MaxWall rules it out, P9; the
time limit is the lane's maximum, with ``[jobs] max_time_limit``'s default), and
``plan()`` on the code tables must do each thing stated: the rule plans every intent with
no duration and checks the rungs and skips.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import ClassVar, NamedTuple, final

from eps.core.model import CapacitySnapshot, Job, JobError, Provisioning, RoutePlan, SkipCode
from eps.lint.context import Context, Finding, Rule


class _Claim(NamedTuple):
    name: str  # what the docs must say, in words (the finding names it)
    pattern: re.Pattern[str]


_FLAGS = re.IGNORECASE
#: The statements, each matched across line wraps anywhere in CLAUDE.md or .claude/rules/.
CLAIMS: tuple[_Claim, ...] = (
    _Claim("is never trivial (P2)", re.compile(r"never\s+trivial", _FLAGS)),
    _Claim("gets no spot unless restartable (P11)", re.compile(r"no\s+spot\s+unless\s+`?(?:--)?restartable", _FLAGS)),
    _Claim(
        "is ruled out by no MaxWall (P9)",
        re.compile(r"MaxWall\s+(?:cannot|can\s+not|never)\s+rules?\s+(?:\w+\s+)?out", _FLAGS),
    ),
    _Claim(
        "has the lane's maximum as its time limit",
        re.compile(r"time\s+limit\s+is\s+(?:the|its|each)\s+lane'?s\s+(?:own\s+)?maximum", _FLAGS),
    ),
)
#: A paragraph about a job without a duration: the claims are looked for in these only.
UNKNOWN = re.compile(
    r"without\s+(?:a\s+)?`?(?:--)?duration|unknown[\s-]+(?:duration|length)|duration\s+(?:is\s+)?unknown", _FLAGS
)
#: ``[jobs] max_time_limit`` ... default 7 days.
DEFAULT_LIMIT = re.compile(
    r"max_time_limit`?[^.]{0,120}?default\s+(?:of\s+)?(?P<n>\d+)\s*(?P<unit>days?|d|hours?|h)\b", _FLAGS
)
_UNIT_S = {"d": 86_400, "day": 86_400, "days": 86_400, "h": 3600, "hour": 3600, "hours": 3600}


def _plans(ctx: Context) -> list[tuple[str, RoutePlan]]:
    """Every intent of the code tables planned with no duration (not restartable, nothing known)."""
    from eps.core.router import plan

    facts = ctx.facts
    out = []
    for intent in facts.policy.intents:
        try:
            out.append(
                (intent.name, plan(Job(intent.name), CapacitySnapshot(), facts.grants, None, policy=facts.policy))
            )
        except JobError:  # an intent the tables cannot plan is another rule's matter
            continue
    return out


def _broken(claim: int, plans: list[tuple[str, RoutePlan]], trivial_lane: str) -> str | None:
    """What the code plans against claim ``claim`` (its index in :data:`CLAIMS`), or ``None``."""
    for name, p in plans:
        for r in p.rungs:
            if claim == 0 and r.lane == trivial_lane:
                return f"{name} on the shared VM"
            if claim == 1 and r.provisioning is Provisioning.SPOT:
                return f"a spot rung for {name}"
            if claim == 3 and r.time_limit_s is None:
                return f"no time limit on {r.key} for {name}"
        if claim == 2:
            for s in p.skipped:
                if s.code is SkipCode.QOS_MAX_WALL:
                    return f"{name} skipped on {s.target} by its MaxWall"
    return None


@final
class UnknownDuration(Rule):
    """The policy for a job without a duration is stated, and plan() does what it says.

    Why: agents leave `--duration` out; the docs must say what eps then assumes
    (unknown is long: never trivial, no spot unless restartable, no tier ruled
    out by its MaxWall, the time limit the lane's maximum), and the code must
    plan exactly that, so a forgotten flag never costs a job its machine or its
    run.
    Checks: each statement is in a paragraph of CLAUDE.md or .claude/rules/ about
    a job without a duration (`without --duration`, `unknown duration`); the default of
    `[jobs] max_time_limit`, where stated, equals the code's; every intent
    planned with no duration on the code tables keeps each statement.
    Fix: state the missing rule in CLAUDE.md (see its "A job without a duration"
    bullet), correct the default, or make the router keep the rule.
    """

    code = "EPS116"
    name = "unknown-duration"
    messages: ClassVar[dict[str, str]] = {
        "missing": "no statement that a job without a duration {claim}",
        "code": "the docs say a job without a duration {claim}, but the code plans {what}",
        "default": "[jobs] max_time_limit's default says {doc}, code has {code}",
    }

    def check(self, ctx: Context) -> Iterator[Finding]:
        from eps.core.durations import format_duration

        plans = _plans(ctx)
        for i, claim in enumerate(CLAIMS):
            found = [
                (d, at + m.start())
                for d in ctx.policy_docs
                for at, para in d.paragraphs()
                if UNKNOWN.search(para)
                for m in claim.pattern.finditer(para)
            ]
            if not found:
                yield self.finding(*ctx.anchor, "missing", claim=claim.name)
                continue
            what = _broken(i, plans, ctx.facts.policy.trivial_lane)
            if what is not None:
                doc, at = found[0]
                yield self.finding(doc.path, doc.line_at(at), "code", claim=claim.name, what=what)
        code_s = ctx.facts.policy.max_time_limit_s
        for doc in ctx.docs:
            for m in doc.finditer(DEFAULT_LIMIT):
                if int(m["n"]) * _UNIT_S[m["unit"].lower()] != code_s:
                    have = f"{m['n']}{m['unit']}"
                    yield self.finding(doc.path, doc.line_at(m.start()), doc=have, code=format_duration(code_s))
