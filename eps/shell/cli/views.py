"""How plans and intents look: plain dicts for ``--json`` and rich tables for people.

``rich`` is imported only inside the table functions, so ``--json`` output never
pays for it.
"""

from __future__ import annotations

from typing import Any

from eps.core.durations import human
from eps.core.model import Intent, Job, Policy, RoutePlan, Rung, Skip


def rung_dict(r: Rung) -> dict[str, Any]:
    return {
        "lane": r.lane,
        "kind": r.kind.value,
        "qos": r.qos,
        "machine": r.machine,
        "zone": r.zone,
        "provisioning": r.provisioning.value,
        "gpus": r.gpus,
        "vcpus": r.vcpus,
        "mem_gb": r.mem_gb,
        "disk_gb": r.disk_gb,
        "park_cap_s": r.park_cap_s,
        "price_per_hour": r.price_per_hour,
        "reason": r.reason,
        "key": r.key,
    }


def skip_dict(s: Skip) -> dict[str, Any]:
    return {"lane": s.lane, "reason": s.code.value, "detail": s.detail, "target": s.target}


def job_dict(job: Job) -> dict[str, Any]:
    return {
        "intent": job.intent,
        "duration_s": job.duration_s,
        "restartable": job.restartable,
        "footprint_gb": job.footprint_gb,
        "gradient_fit": job.gradient_fit,
        "count": job.count,
        "pin": job.pin,
        "command": list(job.command),
    }


def plan_dict(plan: RoutePlan, job: Job) -> dict[str, Any]:
    park = None
    if plan.park is not None:
        p = plan.park
        park = {"action": p.action.value, "rung": p.rung, "remaining_s": p.remaining_s, "reason": p.reason}
    return {
        "intent": plan.intent,
        "resolved_intent": plan.resolved_intent,
        "resource": plan.resource.value,
        "count": plan.count,
        "job": job_dict(job),
        "rungs": [rung_dict(r) for r in plan.rungs],
        "skipped": [skip_dict(s) for s in plan.skipped],
        "terminal": plan.terminal.value if plan.terminal else None,
        "worst_case_wait_s": plan.worst_case_wait_s,
        "notes": list(plan.notes),
        "park": park,
    }


def intent_dict(it: Intent, policy: Policy) -> dict[str, Any]:
    from eps.core.tables import BIG_VOLUME_INTENT

    gpu = it.resource.value == "gpu"
    return {
        "name": it.name,
        "resource": it.resource.value,
        "description": it.description,
        "gpus": it.gpus,
        "vcpus": it.vcpus,
        "mem_gb": it.mem_gb,
        "lanes": list(policy.gpu_lane_order if gpu else policy.cpu_lane_order),
        "gcp_machine": it.gcp_machine,
        "gcp_spot": it.spot_eligible,
        "runpod": list(it.runpod_gpu if gpu else it.runpod_cpu),
        "runpod_needs_pin": gpu,
        "dev_qos": it.dev_qos_ok,
        "big_volume": it.name == BIG_VOLUME_INTENT,
    }


def _target(r: Rung) -> str:
    if r.qos:
        return f"{r.qos}  ({r.machine})"
    if r.zone:
        return f"{r.machine} @ {r.zone}"
    return r.machine or "local"


def _money(x: float) -> str:
    return "free" if x == 0 else f"${x:,.3f}" if x < 1 else f"${x:,.2f}"


def _console(file: Any) -> Any:
    import shutil

    from rich.console import Console

    # Wide enough that reasons do not wrap into unreadable columns when piped.
    width = max(shutil.get_terminal_size((140, 24)).columns, 120)
    return Console(file=file, highlight=False, width=width)


def print_plan(plan: RoutePlan, job: Job, *, file: Any = None) -> None:
    from rich.table import Table

    console = _console(file)
    head = f"[bold]{plan.intent}[/bold]"
    if plan.resolved_intent != plan.intent:
        head += f" -> [bold]{plan.resolved_intent}[/bold]"
    extra = f", {plan.count} independent copies" if plan.count > 1 else ""
    console.print(
        f"{head}  ({plan.resource.value}, {human(job.duration_s)}"
        f"{', restartable' if job.restartable else ''}{extra}"
        f"{', pinned to ' + job.pin if job.pin else ''})"
    )
    for note in plan.notes:
        console.print(f"  note: {note}")
    if plan.park is not None:
        p = plan.park
        console.print(f"  parked on {p.rung}: [bold]{p.action.value}[/bold] ({p.reason})")
    if plan.rungs:
        table = Table(title=None, box=None, pad_edge=False, header_style="bold")
        for col in ("#", "lane", "target", "how", "park cap", "$/h", "why"):
            table.add_column(col, justify="right" if col in ("#", "park cap", "$/h") else "left")
        for i, r in enumerate(plan.rungs, 1):
            cap = "-" if r.park_cap_s is None else human(r.park_cap_s)
            if r.kind.value == "slurm" and r.park_cap_s is None:
                cap = "pin"
            table.add_row(str(i), r.lane, _target(r), r.provisioning.value, cap, _money(r.price_per_hour), r.reason)
        console.print(table)
    wait = f"{plan.worst_case_wait_s} s ({human(plan.worst_case_wait_s)})"
    paid = any(r.provisioning.value in ("spot", "on-demand", "flex-start") for r in plan.rungs)
    queued = any(r.provisioning.value == "queue" for r in plan.rungs)
    if paid:
        console.print(f"worst-case wait before a paid lane: {wait}")
    elif queued:
        console.print(f"worst-case queue wait: {wait}; no paid lane follows (see skipped)")
    if plan.skipped:
        console.print("skipped:")
        for s in plan.skipped:
            target = f" {s.target}" if s.target else ""
            console.print(f"  {s.lane}{target}: {s.code.value}: {s.detail}")
    if plan.terminal is not None:
        console.print(f"[bold red]terminal: {plan.terminal.value}[/bold red] (no rung left to try)")
    console.print("prices are list prices, information only; eps never limits work by dollars (P12)")


def print_intents(policy: Policy, *, file: Any = None) -> None:
    from rich.table import Table

    console = _console(file)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("intent", "kind", "lanes (auto)", "GCP machine", "RunPod", "what for"):
        table.add_column(col)
    for it in policy.intents:
        d = intent_dict(it, policy)
        machine = (d["gcp_machine"] or "-") + ("" if d["gcp_spot"] else " (on-demand)")
        runpod = ", ".join(d["runpod"]) + (" (pin only)" if d["runpod_needs_pin"] else "")
        kind = f"{it.gpus} GPU" if it.gpus else f"{it.vcpus} vCPU"
        table.add_row(it.name, kind, " -> ".join(d["lanes"]), machine, runpod, it.description)
    console.print(table)
