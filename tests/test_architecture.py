"""The rooms of eps and the one-way order of their arrows (README, "Architecture").

Every ``import`` of every module under ``eps/`` is read with :mod:`ast` (the lazy ones inside
functions too) and checked against :data:`RANK`: a room may import its own modules and the
rooms ranked below it, never one above; a front door (the CLI, the MCP server, the Python
API) imports only :data:`DOOR_MAY`, never another front door.  :data:`PENDING` lists the
arrows that break the rule today, each with why; the test fails on a new one and on one
that has gone (take it off the list), so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Low to high.  Rooms of one rank may import each other (run/ walks with notify/'s pump,
#: notify/ reads a dispatch's settings through run/).
RANK: tuple[frozenset[str], ...] = tuple(frozenset(r.split()) for r in (
    "core _version schemas",
    "lint",
    "shell.util",
    "shell.config",
    "shell.state",
    "shell.remote",
    "shell.lanes",
    "shell.run shell.notify",
    "shell.request",
    "shell.render",
    "shell.service",
    "shell.cli shell.mcp api eps",
))  # fmt: skip

DOORS = frozenset({"shell.cli", "shell.mcp", "api"})
#: What a front door may import: it parses its input, calls the service, renders.
DOOR_MAY = frozenset({"core", "_version", "shell.util", "shell.config", "shell.request", "shell.render",
                      "shell.service"})  # fmt: skip

#: Arrows that break the rule today: (importing module, imported module) -> why it is left.
PENDING: dict[tuple[str, str], str] = {}


def room(module: str) -> str | None:
    """The room of a dotted module name (``eps.shell.run.walker`` -> ``shell.run``)."""
    parts = module.split(".")
    if parts[0] != "eps":
        return None
    if len(parts) == 1:
        return "eps"
    if parts[1] == "shell":
        return "shell." + parts[2] if len(parts) > 2 else "shell"
    return parts[1]


def rank(r: str) -> int:
    return next(i for i, rooms in enumerate(RANK) if r in rooms)


def imports(module: str, source: str) -> set[str]:
    """The eps modules ``source`` (the text of ``module``) imports, by their dotted names."""
    out: set[str] = set()
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "eps")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            if base.split(".")[0] != "eps":
                continue
            for a in node.names:  # ``from eps.shell.run import walker`` imports the module walker
                sub = f"{base}.{a.name}"
                out.add(sub if _is_module(sub) else base)
    return out


def _is_module(dotted: str) -> bool:
    p = ROOT.joinpath(*dotted.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def wrong(module: str, target: str) -> str | None:
    """Why ``module`` may not import ``target`` (``None``: it may)."""
    a, b = room(module), room(target)
    if a is None or b is None or a == b:
        return None
    if a in DOORS:
        return None if b in DOOR_MAY else f"a front door ({a}) imports {b}"
    if a == "shell" or b == "shell":
        return None
    if rank(b) > rank(a):
        return f"{a} imports {b}, a room above it"
    return None


def modules() -> dict[str, str]:
    out = {}
    for f in sorted((ROOT / "eps").rglob("*.py")):
        parts = f.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f.read_text()
    return out


def breaks(sources: dict[str, str]) -> dict[tuple[str, str], str]:
    found: dict[tuple[str, str], str] = {}
    for module, source in sources.items():
        for target in imports(module, source):
            why = wrong(module, target)
            if why:
                found[(module, target)] = why
    return found


def test_every_room_is_known() -> None:
    rooms = {room(m) for m in modules()} - {"shell"}
    known = set().union(*RANK)
    assert rooms <= known, f"rooms without a rank: {sorted(r for r in rooms if r not in known)}"


def test_the_arrows_go_one_way() -> None:
    found = breaks(modules())
    new = {k: v for k, v in found.items() if k not in PENDING}
    gone = sorted(k for k in PENDING if k not in found)
    assert not new, "imports against the rooms' order:\n" + "\n".join(f"{a} -> {b}: {w}" for (a, b), w in new.items())
    assert not gone, f"these no longer break the order: take them off PENDING: {gone}"


def test_a_wrong_import_is_caught() -> None:
    """The check is not vacuous: a walker import in the MCP door, a front door in run/, the
    shell in the core, each fails."""
    bad = {
        "eps.shell.mcp.server": "from eps.shell.run.walker import Walker\n",
        "eps.shell.run.walker": "def f():\n    from eps.shell.cli import main\n",
        "eps.core.router": "import eps.shell.config.settings\n",
        "eps.shell.state.ledger": "from eps.shell.run import walker\n",
        "eps.api": "from eps.shell.cli.main import entry\n",
    }
    found = breaks(bad)
    assert set(found) == {
        ("eps.shell.mcp.server", "eps.shell.run.walker"),
        ("eps.shell.run.walker", "eps.shell.cli.main"),
        ("eps.core.router", "eps.shell.config.settings"),
        ("eps.shell.state.ledger", "eps.shell.run.walker"),
        ("eps.api", "eps.shell.cli.main"),
    }, found
    assert breaks({"eps.shell.service.operations": "from eps.shell.run.walker import Walker\n"}) == {}
