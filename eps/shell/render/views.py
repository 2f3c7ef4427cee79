"""How plans and intents look to people: plain-text tables (:mod:`eps.shell.render.table`:
they fit the width, and cost a few milliseconds).  Their ``--json`` documents are made in
:mod:`eps.shell.render.documents`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from eps.core.durations import human
from eps.core.healing import policy_of
from eps.core.model import Job, LaneDown, Policy, RoutePlan, Rung
from eps.core.tables import HEALING, Healing
from eps.core.usable import can_start, mark, terminal_text, unusable_lanes
from eps.shell.render.documents import inputs_list, intent_dict
from eps.shell.render.table import Column, render

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO


def key_label(key: str) -> str:
    """A rung key (``fellows/high-eur/-/queue``) as people read it: ``fellows high-eur (queue)``."""
    lane, target, zone, how = ([*key.split("/"), "", "", ""])[:4]
    where = " ".join(x for x in (target, "@ " + zone if zone not in ("", "-") else "") if x and x != "-")
    return f"{lane} {where} ({how})".replace("  ", " ") if how else key


def _target(r: Rung) -> str:
    if r.qos:
        return f"{r.qos} ({r.machine})"
    if r.zone:
        return f"{r.machine} @ {r.zone}"
    return r.machine or "local"


def _money(x: float) -> str:
    return "free" if x == 0 else f"${x:,.3f}" if x < 1 else f"${x:,.2f}"


class Out:
    """Where a view writes, how wide it may be, and whether it may be bold."""

    def __init__(self, file: TextIO, width: int | None, *, bold: bool = False) -> None:
        self.file = file
        self.width = width
        self.bold = bold

    def line(self, text: str = "") -> None:
        """A line of prose, wrapped to the width (continuations indented under it)."""
        if self.width is None or len(text) <= self.width:
            self.file.write(text + "\n")
            return
        import textwrap

        lead = " " * (len(text) - len(text.lstrip()) + 4)
        wrapped = textwrap.wrap(text, self.width, subsequent_indent=lead, break_on_hyphens=False)
        self.file.write("\n".join(wrapped) + "\n")

    def table(self, cols: Sequence[Column], rows: Sequence[Sequence[str]]) -> None:
        self.file.write(render(cols, rows, self.width, bold=self.bold))


_PLAN_COLS = (
    Column("#", right=True),
    Column("lane"),
    Column("target"),
    Column("how"),
    Column("park cap", right=True),
    Column("$/h", right=True),
    Column("here"),
    Column("why", flex=True),
)


def print_plan(plan: RoutePlan, job: Job, out: Out, down: Sequence[LaneDown] = (), healing: Healing = HEALING) -> None:
    head = plan.intent if plan.resolved_intent == plan.intent else f"{plan.intent} -> {plan.resolved_intent}"
    extra = f", {plan.count} independent copies" if plan.count > 1 else ""
    extra += f", a sweep of {job.sweep} tasks" if job.sweep > 1 else ""
    pin = f", pinned to {job.pin}" if job.pin else ""
    length = "duration unknown" if job.duration_s is None else human(job.duration_s)
    out.line(f"{head}  ({plan.resource.value}, {length}{', restartable' if job.restartable else ''}"
             f"{extra}{pin})")  # fmt: skip
    for note in plan.notes:
        out.line(f"  note: {note}")
    if plan.park is not None:
        p = plan.park
        out.line(f"  parked on {key_label(p.rung)}: {p.action.value} ({p.reason})")
    marked = mark(plan, down)
    if marked:
        rows = []
        for i, s in enumerate(marked, 1):
            r = s.rung
            cap = "-" if r.park_cap_s is None else human(r.park_cap_s)
            if r.kind.value == "slurm" and r.park_cap_s is None:
                cap = "pin"
            here = "yes" if s.runnable else "no"
            if r.fault is not None:
                here = "MISCONFIGURED"
            money = _money(r.price_per_hour)
            rows.append([str(i), r.lane, _target(r), r.provisioning.value, cap, money, here, r.reason])
        out.table(_PLAN_COLS, rows)
    wait = f"{plan.worst_case_wait_s} s ({human(plan.worst_case_wait_s)})"
    paid = any(r.provisioning.value in ("spot", "on-demand", "flex-start") for r in plan.rungs)
    queued = any(r.provisioning.value == "queue" for r in plan.rungs)
    if paid:
        out.line(f"worst-case wait before a paid lane: {wait}")
    elif queued:
        out.line(f"worst-case queue wait: {wait}; no paid lane follows (see skipped)")
    _print_job_lines(job, healing, out)
    if plan.skipped:
        out.line("skipped:")
        for sk in plan.skipped:
            target = f" {sk.target}" if sk.target else ""
            out.line(f"  {sk.lane}{target}: {sk.code.value}: {sk.detail}")
    unusable = unusable_lanes(plan, down)
    if unusable:
        out.line("not usable on this machine now (`eps check` shows every lane):")
        for d in unusable:
            out.line(f"  {d.lane}: {d.reason}")
            if d.fix:
                out.line(f"    fix: {d.fix}")
    faulted = [r for r in plan.rungs if r.fault is not None]
    if faulted:
        out.line("misconfigured: eps execute stops at the first of these and starts nothing on a paid lane "
                 "(--fall-through skips them):")  # fmt: skip
        for r in faulted:
            out.line(f"  {r.key}: {r.fault}")
    if plan.terminal is not None:
        out.line(f"terminal: {terminal_text(plan, down)}")
    elif not can_start(plan, down):
        out.line("nothing here can start this job now: eps execute would end with no_usable_lane")
    out.line("prices are list prices, information only; eps never limits work by dollars (P12)")


def _print_job_lines(job: Job, healing: Healing, out: Out) -> None:
    """The job's retry and stall policies, and what its machine copies from storage before
    setup, and where (not sized here)."""
    out.line(policy_of(job, healing).describe())
    out.line(policy_of(job, healing).describe_stall())
    inputs = inputs_list(job)
    if inputs:
        out.line(f"inputs (copied on the machine before setup; {inputs[0]['size']}):")
        for item in inputs:
            out.line(f"  {item['url']} -> {item['dest']}")


_INTENT_COLS = (
    Column("intent"),
    Column("kind"),
    Column("lanes (auto)"),
    Column("GCP machine"),
    Column("RunPod", flex=True),
    Column("from", flex=True),
    Column("what for", flex=True),
)
#: Where an intent comes from, in words (``eps intents``; the JSON's ``source`` is the word in brackets).
_SOURCE_WORDS = {"built-in": "built-in", "config": "config", "override": "config (overrides built-in)"}


def print_intents(policy: Policy, out: Out) -> None:
    rows = []
    for it in policy.intents:
        d = intent_dict(it, policy)
        machine = d["gcp_machine"] or ", ".join(d["gcp_gpu_machines"]) or "-"
        machine += "" if d["gcp_spot"] else " (on-demand)"
        runpod = ", ".join(d["runpod"]) + (" (pin only)" if d["runpod_needs_pin"] else "")
        least = f" of {it.gpu_mem_gb}+ GB" if it.gpu_mem_gb else ""
        kind = f"{it.gpus} GPU{least}" if it.gpus else f"{it.vcpus} vCPU"
        if it.disk_gb is not None:
            kind += f", {it.disk_gb} GB disk"
        source = _SOURCE_WORDS[d["source"]]
        if it.duration_s is not None:
            source += f"; {human(it.duration_s)} when a job gives no --duration"
        rows.append([it.name, kind, " -> ".join(d["lanes"]), machine, runpod, source, it.description])
    out.table(_INTENT_COLS, rows)


def out_for(stream: TextIO, env: Mapping[str, str], *, wide: bool = False) -> Out:
    from eps.shell.render.table import styled, width_for

    return Out(stream, width_for(stream, env, wide=wide), bold=styled(stream, env))
