"""``eps status``'s rows, from the ledger (reconcile has asked the providers first): each
dispatch's state and result, its times and the list price of its runtime (information only,
P12), whether a stall watch hears nothing from it, whether its machine is kept for
``eps pull``, where its outputs live now, and its attempts."""

from __future__ import annotations

import time
from typing import Any

from eps.core.ends import result_word
from eps.core.model import JobError, Policy, Provisioning
from eps.core.prices import list_cost, list_price_per_hour
from eps.core.states import SETTLED_DISPATCH_STATES, DispatchState, Outcome
from eps.shell.run.outputs_at import outputs_of
from eps.shell.run.reconcile import ACTIVE_STATES
from eps.shell.run.stalls import stall_fields
from eps.shell.state import codec
from eps.shell.state.ledger import DispatchRow, Ledger


def status(
    ledger: Ledger,
    dispatch: str | None,
    *,
    limit: int | None = 20,
    active: bool = False,
    since: float | None = None,
    intent: str | None = None,
    policy: Policy | None = None,
    now: float | None = None,
    host: str | None = None,
) -> list[dict[str, Any]]:
    """The status rows: one dispatch; or, with a filter (``active``, submitted at or after
    ``since``, of ``intent``), the newest ``limit`` that match (all: ``None``); or else the
    active ones plus the ``limit`` newest.  Each row has its times (submitted, started,
    ended, runtime) and, as information only (P12), the list price of its runtime.  ``host``
    (a team's ledger): only the dispatches that host owns, the newest ``limit`` of them."""
    if dispatch is not None:
        row = ledger.dispatch(dispatch)
        if row is None:
            raise JobError("unknown_dispatch", f"no dispatch {dispatch!r} in the ledger", None)
        rows = [row]
    elif host is not None:  # that host's newest matches, chosen by the database (the owner is the root's)
        rows = ledger.select(states=ACTIVE_STATES if active else None, since=since, intent=intent, limit=limit,
                             owner_host=host)  # fmt: skip
    elif active or since is not None or intent is not None:
        rows = ledger.select(states=ACTIVE_STATES if active else None, since=since, intent=intent, limit=limit)
    else:
        rows = ledger.recent(ACTIVE_STATES, limit)
    if dispatch is None:
        rows = _sweeps_folded(ledger, rows)
    now = time.time() if now is None else now
    owned, started, cancels = _owners(ledger, rows)
    if host is not None:  # a sweep's row its tasks brought in is that host's too (the owner is the root's)
        rows = [r for r in rows if (owned.get(r.id) or {}).get("host") == host]
    out = []
    attempts_of = ledger.attempts_of([r.id for r in rows])  # one query, not one per row
    phases = _phase_fields(ledger, rows)  # one query, not one per row
    for r in rows:
        attempts = attempts_of.get(r.id, [])  # none: an attempt row cannot be read (quarantined)
        out.append(
            {
                "dispatch": r.id,
                "parent": r.parent,
                "intent": r.intent,
                "state": r.state.value,
                "result": result_word(r.state, r.job_status, r.exit_code),
                **stall_fields(ledger.state_dir, r),  # a running job its stall watch hears nothing from
                "exit_code": r.exit_code,
                "terminal": r.terminal,
                "message": r.message,
                "handle": codec.to_data(r.handle) if r.handle else None,
                "created_at": r.created_at,
                **_times(r, now, policy),
                "kept_since": (kept := next((a.updated_at for a in attempts if a.outcome == Outcome.KEPT), None)),
                "outputs": outputs_of(ledger.state_dir, r, kept=kept is not None),  # where they live now
                "restarts": r.job.restart,
                "next_try_at": r.next_try_at if r.state is DispatchState.WAITING else None,
                **_sweep_fields(ledger, r),
                **phases.get(r.id, {}),  # a pipeline: its phases (eps.shell.run.pipelines)
                **({"owner": owned.get(r.id)} if ledger.shared else {}),  # a team's ledger: which host has it now
                **({"started_by": started.get(r.id)} if ledger.shared else {}),  # and who started it, from where
                **({"cancelled_by": by} if (by := cancels.get(r.id)) else {}),  # a team's: who cancelled it
                "attempts": [
                    {
                        "seq": a.seq,
                        "rung": a.rung,
                        "state": a.state.value,
                        "handle": a.handle,
                        "outcome": a.outcome,
                        "reason": a.reason,
                    }
                    for a in attempts
                ],
            }
        )
    return out


def _sweeps_folded(ledger: Ledger, rows: list[DispatchRow]) -> list[DispatchRow]:
    """A sweep is one row in a listing: its tasks are in that row (``tasks``, ``task_states``),
    not rows of their own (``eps status D-task`` still shows one); a task listed without its
    sweep brings the sweep's row in.  A ``--count`` fan-out's copies stay listed."""
    tops: dict[str, DispatchRow | None] = {}
    kept = {r.id: r for r in rows}
    for r in rows:
        if r.parent is None:
            continue
        if r.parent not in tops:
            tops[r.parent] = kept.get(r.parent) or ledger.dispatch(r.parent)
        top = tops[r.parent]
        if top is not None and top.job.sweep > 1:
            del kept[r.id]
            kept.setdefault(top.id, top)
    return sorted(kept.values(), key=lambda r: r.created_at)


def _sweep_fields(ledger: Ledger, r: DispatchRow) -> dict[str, Any]:
    """A sweep's row: how far its tasks are (``tasks``) and each task's state (``task_states``)."""
    if r.job.sweep <= 1 or r.parent is not None:
        return {}
    from eps.core.sweep import task_progress

    tasks = [(c, result_word(c.state, c.job_status, c.exit_code)) for c in ledger.children(r.id)]
    return {"tasks": task_progress((c.state, word) for c, word in tasks),
            "task_states": [{"task": c.job.task_index, "dispatch": c.id, "state": c.state.value, "result": word,
                             "exit_code": c.exit_code} for c, word in tasks]}  # fmt: skip


def _phase_fields(ledger: Ledger, rows: list[DispatchRow]) -> dict[str, dict[str, Any]]:
    """Each pipeline's row among ``rows``: its phases' states (``{"phases": [...]}``), the
    pipelines' records read in one query; no entry for any other row."""
    from eps.shell.state.phases import read_many

    records = read_many(ledger, [r.id for r in rows if r.parent is None])
    if not records:  # no pipeline among them: its module is not loaded
        return {}
    from eps.shell.run.pipelines import status_of

    return {d: {"phases": status_of(ledger, d, record)} for d, record in records.items()}


def _owners(ledger: Ledger, rows: list[DispatchRow]) -> tuple[dict[str, dict[str, str | None] | None],
                                                              dict[str, dict[str, str | None] | None],
                                                              dict[str, dict[str, str]]]:  # fmt: skip
    """On a ledger hosts share: each root's owner host and user (``None``: recorded before
    leases), who started it (user, host; ``None``: recorded before eps kept that), and who
    cancelled each row (user, host) where one did.  A copy's owner and starter are its root's."""
    if not ledger.shared or not rows:
        return {}, {}, {}
    import json

    from eps.shell.state.team import owners

    found = owners(ledger, {r.parent or r.id for r in rows} | {r.id for r in rows})
    out: dict[str, dict[str, str | None] | None] = {}
    started: dict[str, dict[str, str | None] | None] = {}
    cancels: dict[str, dict[str, str]] = {}
    for r in rows:
        o = found.get(r.parent or r.id)
        out[r.id] = None if o is None or o.host is None else {"host": o.host, "user": o.user}
        started[r.id] = None if o is None or o.started_host is None else {"host": o.started_host,
                                                                          "user": o.started_user}  # fmt: skip
        by = found.get(r.id)
        if by is not None and by.cancelled_by:
            cancels[r.id] = json.loads(by.cancelled_by)
    return out, started, cancels


def _times(r: DispatchRow, now: float, policy: Policy | None) -> dict[str, Any]:
    """Submitted, started, ended, runtime, and the runtime's list price (information only, P12)."""
    ended = r.ended_at
    if ended is None and r.state in SETTLED_DISPATCH_STATES and r.started_at is not None:
        ended = r.updated_at
    runtime = None
    if r.started_at is not None:
        runtime = max(0.0, (ended if ended is not None else now) - r.started_at)
    per_hour = None
    if r.handle is not None and policy is not None:
        how = r.handle.rung.rsplit("/", 1)[-1]
        prov = Provisioning(how) if how in {p.value for p in Provisioning} else None
        gpus = getattr(policy.intent(r.intent), "gpus", 0) * max(1, r.job.count)
        per_hour = list_price_per_hour(policy, r.handle.kind, r.handle.machine, prov, gpus)
    return {
        "submitted_at": r.created_at,
        "started_at": r.started_at,
        "ended_at": ended,
        "runtime_s": None if runtime is None else round(runtime, 1),
        "list_price_per_hour": per_hour,
        "list_cost": list_cost(per_hour, runtime),
    }
