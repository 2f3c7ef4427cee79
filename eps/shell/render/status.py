"""``eps status`` for people: one row per dispatch that fits the width (the note wraps),
with its times and, as information only (P12), the list price of its runtime; on a ledger
hosts share, who started it and from which host (``started by``, ``user@host``), and the
host that holds it now when another took it over (``alice@vm-a (now vm-b)``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from eps.core.durations import human
from eps.shell.render.table import Column, render, styled, width_for

_COLS = (
    Column("dispatch", keep=True),
    Column("started by"),  # a team's ledger only: who started it (user@host), and who holds it now if another
    Column("intent"),
    Column("result"),
    Column("outputs"),
    Column("where"),
    Column("submitted"),
    Column("started"),
    Column("ended"),
    Column("runtime", right=True),
    Column("list $", right=True),
    Column("note", flex=True),
)
#: Narrower than this, the started and ended columns are left out (``--json`` and ``--wide`` keep them).
FULL_WIDTH = 140


def _outputs(outputs: dict[str, Any] | None) -> str:
    """Where the outputs live (``none``: ``-``)."""
    where = (outputs or {}).get("where", "none")
    return "-" if where == "none" else str(where)


def _who(started: dict[str, Any] | None, owner: dict[str, Any] | None) -> str:
    """Who started a dispatch of a team's ledger and from which host, and the host (user@host
    when another user's) that holds it now when that is another: ``alice@vm-a (now vm-b)``.
    A row recorded before eps kept who started it: its owner; recorded before leases: ``-``."""
    def at(who: dict[str, Any]) -> str:
        return f"{who.get('user') or '?'}@{who.get('host') or '?'}"

    if not started:
        return at(owner) if owner else "-"
    if not owner or owner.get("host") == started.get("host"):
        return at(started)
    now = owner.get("host") if owner.get("user") == started.get("user") else at(owner)
    return f"{at(started)} (now {now})"


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%m-%d %H:%M", time.localtime(ts))


def print_status(
    rows: list[dict[str, Any]], notes: list[dict[str, Any]], env: Mapping[str, str], *, wide: bool
) -> None:
    import textwrap

    out = sys.stdout
    width = width_for(out, env, wide=wide)
    keep = [c.header for c in _COLS if width is None or width >= FULL_WIDTH or c.header not in ("started", "ended")]
    if not any("owner" in r for r in rows):  # a ledger no other host shares: every dispatch is this host's
        keep.remove("started by")
    table = []
    for r in rows:
        h = r["handle"] or {}
        runtime = "-" if r["runtime_s"] is None else human(round(r["runtime_s"]))
        cost = r["list_cost"]
        money = "-" if cost is None else "free" if r["list_price_per_hour"] == 0 else f"{cost:.2f}"
        where = " ".join(x for x in (h.get("lane", ""), h.get("qos") or h.get("zone") or "") if x) or "-"
        note = r["terminal"] or r["message"] or ""
        if r.get("tasks"):  # a sweep: how far its tasks are, not its copies' message
            from eps.core.sweep import progress_line

            note = progress_line(r["tasks"])
        if r.get("phases"):  # a pipeline: each phase's state (eps.shell.run.pipelines)
            note = ", ".join(f"{p['phase']} {p['state']}" for p in r["phases"])
        held = r.get("held_back")
        if held and held["line"] not in note:  # a sync skipped while it runs, or a newer pull's sizes
            note = f"outputs {held['line']}; {note}" if note else f"outputs {held['line']}"
        if r.get("kept_since") is not None:  # a machine kept (or stopped) with outputs not pulled
            note = f"waiting {human(max(0, round(time.time() - r['kept_since'])))} for eps pull: {note}"
        if r.get("next_try_at") is not None:
            note = f"next try in {human(max(0, round(r['next_try_at'] - time.time())))}: {note}"
        if r.get("stalled_since") is not None:  # its stall watch hears nothing from it (it still runs)
            silent = human(max(0, round(time.time() - r["stalled_since"])))
            note = f"stalled since {_when(r['stalled_since'])} (silent {silent}): {note}" if note else (
                f"stalled since {_when(r['stalled_since'])} (silent {silent})")  # fmt: skip
        if r.get("restarts"):
            note = f"restart {r['restarts']}: {note}"
        cells = {
            "dispatch": r["dispatch"], "started by": _who(r.get("started_by"), r.get("owner")), "intent": r["intent"],
            "result": r["result"], "where": where,
            "outputs": _outputs(r.get("outputs")),
            "submitted": _when(r["submitted_at"]), "started": _when(r["started_at"]), "ended": _when(r["ended_at"]),
            "runtime": runtime, "list $": money, "note": note,
        }  # fmt: skip
        table.append([cells[k] for k in keep])
    if table:
        cols = [c for c in _COLS if c.header in keep]
        out.write(render(cols, table, width, bold=styled(out, env)))
    else:
        out.write("no dispatches\n")
    for n in notes:
        text = f"note: {n['lane']}: {n['text']}"
        out.write(("\n".join(textwrap.wrap(text, width, subsequent_indent="    ")) if width else text) + "\n")
    if any(r["list_cost"] for r in rows):
        out.write("list $: list price x runtime, information only; eps never limits work by dollars (P12)\n")
