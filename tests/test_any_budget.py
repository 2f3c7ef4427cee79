"""The shell says what its functions take and return (issue 32): a bare ``Any`` as a parameter
or return annotation of a function in ``eps/shell`` is counted, and the count may only go down.
``dict[str, Any]`` (a JSON document), ``*args: Any`` / ``**kwargs: Any`` and ``Any`` in a
variable's annotation are not counted: only what a signature hides."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELL = ROOT / "eps" / "shell"

#: At most this many bare ``Any`` in the shell's signatures (issue 32 asks for at most 20;
#: about 105 by its count, 135 by this one, before the types pass; the last, cli/main's
#: ``make_job.pick``, went with the one job request).  Never raise it.
BUDGET = 0


def _is_bare_any(annotation: ast.expr | None) -> bool:
    if isinstance(annotation, ast.Name):
        return annotation.id == "Any"
    return isinstance(annotation, ast.Constant) and annotation.value == "Any"


def bare_any(source: str, name: str = "<source>") -> list[str]:
    """Each bare ``Any`` parameter or return annotation of a function in ``source``, as
    ``name:line function(parameter)`` (``return`` for the return annotation)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            pairs = [(p.arg, p.annotation) for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]]
            for param, annotation in [*pairs, ("return", node.returns)]:
                if _is_bare_any(annotation):
                    found.append(f"{name}:{node.lineno} {node.name}({param})")
    return found


def shell_bare_any() -> list[str]:
    found = []
    for path in sorted(SHELL.rglob("*.py")):
        found += bare_any(path.read_text(), str(path.relative_to(ROOT)))
    return found


def test_the_counter_sees_a_bare_any_and_only_that() -> None:
    source = '''
from typing import Any

def hidden(x: Any, /, y: "Any", *args: Any, z: Any = None, **kw: Any) -> Any: ...
async def also(self) -> "Any": ...
def said(doc: dict[str, Any], xs: list[Any]) -> dict[str, Any]:
    v: Any = doc
    return v
class C:
    def m(self, other: Any) -> None: ...
'''
    assert bare_any(source, "s.py") == [
        "s.py:4 hidden(x)", "s.py:4 hidden(y)", "s.py:4 hidden(z)", "s.py:4 hidden(return)",
        "s.py:5 also(return)", "s.py:10 m(other)",
    ]


def test_the_shell_keeps_within_its_any_budget() -> None:
    found = shell_bare_any()
    assert len(found) <= BUDGET, f"{len(found)} bare Any in eps/shell signatures (budget {BUDGET}):\n" + "\n".join(
        found
    )
