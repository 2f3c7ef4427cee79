"""The ``--json`` documents of plans and intents: plain dicts, each with ``schema_version``
(their JSON Schemas are in ``eps/schemas``).  Made here for every front door (the CLI's
``--json``, the Python API's ``to_dict``, the MCP server's results); rendered for people
in :mod:`eps.shell.render.views`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from eps.core.contract import SCHEMA_VERSION
from eps.core.healing import RetryOn, RetryPolicy, policy_of
from eps.core.model import Intent, Job, LaneDown, Policy, RoutePlan, Rung, Skip
from eps.core.tables import HEALING, Healing
from eps.core.usable import can_start, mark, terminal_text, unusable_lanes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def reason(code: str | None, text: str) -> dict[str, Any]:
    """Every reason in eps's JSON: a stable code and the words."""
    return {"code": code, "text": text}


def down_dict(d: LaneDown) -> dict[str, Any]:
    return {"lane": d.lane, "code": d.code.value, "text": d.reason, "fix": d.fix}


def rung_dict(r: Rung, down: LaneDown | None = None) -> dict[str, Any]:
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
        "time_limit_s": r.time_limit_s,
        "reason": reason(r.why.value if r.why else None, r.reason),
        "key": r.key,
        "runnable": down is None,
        "not_runnable": None if down is None else {"code": down.code.value, "text": down.reason, "fix": down.fix},
        "misconfigured": r.fault,
    }


def skip_dict(s: Skip) -> dict[str, Any]:
    return {"lane": s.lane, "reason": reason(s.code.value, s.detail), "target": s.target}


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
        "fall_through": job.fall_through,
        "gpu_models": list(job.gpu_models),
        "gpu_mem_gb": job.gpu_mem_gb,
        "sweep": job.sweep,
        "sweep_parallel": job.sweep_parallel,
    }


#: What a plan says of an input's size: it is listed when the dispatch is submitted, not here.
UNSIZED = "sized at submission"


def inputs_list(job: Job) -> list[dict[str, Any]]:
    """The plan's ``inputs``: each ``--input`` with where it goes, not sized (no network here)."""
    if not job.inputs:
        return []
    from eps.core.storage import inputs_of

    return [{"url": str(i.source), "dest": i.dest, "objects": None, "bytes": None, "size": UNSIZED}
            for i in inputs_of(job.inputs)]  # fmt: skip


def retry_dict(p: RetryPolicy) -> dict[str, Any]:
    return {
        "on": [e.value for e in RetryOn if e in p.on],
        "retry_for_s": p.retry_for_s,
        "max_restarts": p.max_restarts,
        "sync_every_s": p.sync_every_s,
    }


def plan_dict(plan: RoutePlan, job: Job, down: Sequence[LaneDown] = (), healing: Healing = HEALING) -> dict[str, Any]:
    """``eps plan --json``; ``healing``: the table with the config's numbers (``[jobs] sync_every_s``)."""
    park = None
    if plan.park is not None:
        p = plan.park
        park = {
            "action": p.action.value,
            "rung": p.rung,
            "remaining_s": p.remaining_s,
            "reason": reason(p.action.value, p.reason),
        }
    terminal = None
    if plan.terminal is not None:
        terminal = reason(plan.terminal.value, terminal_text(plan, down))
    return {
        "schema_version": SCHEMA_VERSION,
        "intent": plan.intent,
        "resolved_intent": plan.resolved_intent,
        "resource": plan.resource.value,
        "count": plan.count,
        "tasks": job.sweep,
        "tasks_at_once": None if job.sweep_parallel is None else min(job.sweep_parallel, job.sweep),
        "job": job_dict(job),
        "rungs": [rung_dict(s.rung, s.down) for s in mark(plan, down)],
        "skipped": [skip_dict(s) for s in plan.skipped],
        "terminal": terminal,
        "can_start": can_start(plan, down),
        "unusable_lanes": [down_dict(d) for d in unusable_lanes(plan, down)],
        "worst_case_wait_s": plan.worst_case_wait_s,
        "retry": retry_dict(policy_of(job, healing)),
        "stall": {"after_s": policy_of(job, healing).stall_after_s, "on_stall": policy_of(job, healing).on_stall},
        "notes": list(plan.notes),
        "park": park,
        "inputs": inputs_list(job),
    }


def intent_dict(it: Intent, policy: Policy) -> dict[str, Any]:
    from eps.core.gpus import GpuNeed, gcp_gpu_machines, runpod_gpu_types
    from eps.core.tables import BIG_VOLUME_INTENT

    gpu = it.resource.value == "gpu"
    need = GpuNeed(it.gpu_models, it.gpu_mem_gb)
    pods = [g.id for g in runpod_gpu_types(policy, need, it.gpus)] if gpu else list(it.runpod_cpu)
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
        "runpod": pods,
        "runpod_needs_pin": gpu,
        "dev_qos": it.dev_qos_ok,
        "big_volume": it.name == BIG_VOLUME_INTENT,
        "disk_gb": it.disk_gb,
        "gpu_models": list(it.gpu_models),
        "gpu_mem_gb": it.gpu_mem_gb,
        "gcp_gpu_machines": [m.name for m in gcp_gpu_machines(policy, need, it.gpus)] if gpu else [],
        "duration_s": it.duration_s,
        "source": it.source.value,
    }


def intents_doc(policy: Policy) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "intents": [intent_dict(it, policy) for it in policy.intents]}


def guide_text() -> str:
    """The agent guide shipped in the package (``eps/guide.md``; ``eps guide`` prints it)."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(package, "guide.md")) as fh:
        return fh.read()
