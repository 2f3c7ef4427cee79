"""Events are typed: the closed set of :mod:`eps.core.events` is what the shell emits, what
the shipped schema lists, what progress renders and what the agent guide names.

- the schema's ``event`` enum is :class:`Event`, in order, and its per-event ``required``
  are :data:`REQUIRED`;
- every ``.emit(...)`` in ``eps/shell`` (read with :mod:`ast`) names an ``Event`` member,
  never a free string, with keyword fields the kind may carry (:data:`FIELDS`);
- what the supervisor adds to an end, an interruption or a wedge is in :data:`FIELDS` too;
- progress has a line (or a deliberate ``None``) for every kind, and an unknown kind read
  from a newer log is skipped, not a crash.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from eps.core.events import FIELDS, REQUIRED, SAYS, Event
from eps.shell.render.progress import human_line

ROOT = Path(__file__).resolve().parents[2]


def _schema() -> dict:
    return json.loads((ROOT / "eps/schemas/events.json").read_text())


def test_the_schema_lists_every_event_in_order() -> None:
    assert _schema()["properties"]["event"]["enum"] == [e.value for e in Event]
    assert set(SAYS) == set(Event) == set(FIELDS)


def test_the_schemas_required_fields_are_the_tables() -> None:
    got: dict[Event, set[str]] = {}
    for rule in _schema()["allOf"]:
        cond = rule["if"]["properties"]["event"]
        for name in cond.get("enum", [cond.get("const")]):
            got.setdefault(Event(name), set()).update(rule["then"]["required"])
    assert got == {e: set(r) for e, r in REQUIRED.items()}
    for e, required in REQUIRED.items():
        assert required <= FIELDS[e], e


def _emits() -> list[tuple[str, int, ast.Call]]:
    out = []
    for f in sorted((ROOT / "eps/shell").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "emit":
                out.append((str(f.relative_to(ROOT)), node.lineno, node))
    return out


def _kinds(arg: ast.expr) -> list[Event] | None:
    """The Event members an emit's first argument names (``None``: not a member)."""
    if isinstance(arg, ast.IfExp):
        a, b = _kinds(arg.body), _kinds(arg.orelse)
        return None if a is None or b is None else a + b
    if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "Event":
        return [Event[arg.attr]]
    return None


def test_every_emit_names_an_event_and_only_its_fields() -> None:
    emits = _emits()
    assert len(emits) >= 25  # the walker, the supervisor, the follow, the stall watch, the service
    wrong = []
    for where, line, call in emits:
        if not call.args:
            wrong.append(f"{where}:{line}: no event")
            continue
        kinds = _kinds(call.args[0])
        if kinds is None:
            wrong.append(f"{where}:{line}: {ast.unparse(call.args[0])} is not an Event member")
            continue
        names = {k.arg for k in call.keywords if k.arg is not None}
        for kind in kinds:
            if extra := names - FIELDS[kind]:
                wrong.append(f"{where}:{line}: {kind} carries no {sorted(extra)}")
    assert not wrong, "\n".join(wrong)


def test_what_the_supervisor_adds_is_in_the_tables() -> None:
    source = (ROOT / "eps/shell/run/supervisor.py").read_text()
    facts = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "facts")
    added = {k.value for n in ast.walk(facts) if isinstance(n, ast.Dict)
             for k in n.keys if isinstance(k, ast.Constant)}  # fmt: skip
    assert added == {"lane", "exit_code", "job_status", "result", "pulled", "outputs"}
    assert added <= FIELDS[Event.ENDED] and "lane" in FIELDS[Event.INTERRUPTED] and "lane" in FIELDS[Event.WEDGED]


SAMPLES: dict[Event, dict] = {
    Event.DISPATCH: {"intent": "gpu-1", "rungs": 3, "worst_case_wait_s": 60},
    Event.INPUTS: {"inputs": [{"url": "s3://b/p", "dest": "data", "objects": 2, "bytes": 2048}]},
    Event.FANOUT: {"children": ["a", "b"]},
    Event.ATTEMPT: {"rung": "vm", "reason": {"code": "fits", "text": "fits"}},
    Event.SUBMITTED: {"rung": "slurm:fellows:high-eur", "id": "7"},
    Event.PARKED: {"rung": "slurm:fellows:high-eur", "elapsed_s": 5.0, "cap_s": 60, "pending_reason": "Priority"},
    Event.ADVANCED: {"rung": "slurm:fellows:high-eur", "elapsed_s": 61.0, "reason": {"code": "c", "text": "cap"}},
    Event.WITHDRAWN: {"rung": "slurm:fellows:high-eur", "reason": {"code": "c", "text": "better"}},
    Event.FAILED: {"rung": "gcp:a3-highgpu-1g", "kind": "capacity", "message": "no stock"},
    Event.STARTED: {"handle": {"lane": "vm", "id": "1"}},
    Event.HELD: {"handle": {"lane": "slurm", "qos": "high-eur", "id": "7"}},
    Event.TERMINAL: {"terminal": "exhausted", "message": "every rung exhausted"},
    Event.STOPPED: {"message": "cancelled"},
    Event.ENDED: {"message": "exit 0"},
    Event.SUPERVISED: {"pid": 1, "state": "walking", "revived": False},
    Event.STILL_RUNNING: {"state": "started", "why": "Ctrl-C"},
    Event.RELAUNCHED: {"restart": 1, "message": "preempted"},
    Event.SYNC_FAILED: {"message": "rsync failed"},
    Event.WEDGED: {"message": "no ssh"},
    Event.WAITING: {"next_try_at": 0, "message": "no capacity"},
    Event.TRYING_AGAIN: {"round": 2},
    Event.INTERRUPTED: {"message": "preempted"},
    Event.STALLED: {"message": "silent 30 min"},
    Event.STALL_OVER: {"message": "busy again"},
}
QUIET = {Event.FANOUT, Event.SUPERVISED, Event.STILL_RUNNING}  # shown another way, or not at all


@pytest.mark.parametrize("kind", list(Event))
def test_progress_renders_every_kind(kind: Event) -> None:
    line = human_line({"event": kind.value, "dispatch": "d1", **SAMPLES[kind]})
    if kind in QUIET:
        assert line is None
    else:
        assert line is not None and line.startswith("[d1] ")


def test_a_kind_this_eps_does_not_know_is_skipped() -> None:
    assert human_line({"event": "from_a_newer_eps", "dispatch": "d1"}) is None
