"""``D/phase``: a pipeline's phase addressed by its name (docs/design/pipelines.md), resolved
here once for every door: the command line, MCP's tools and the Python API
(:class:`eps.shell.service.operations.Service`)."""

from __future__ import annotations

from eps.core.model import JobError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from eps.shell.service.context import Ctx
    from eps.shell.state.phases import PhaseRecord

__all__ = ["phases_of", "resolve"]


def phases_of(ctx: Ctx, dispatch: str) -> tuple[PhaseRecord, ...]:
    """The phases of pipeline ``dispatch`` (its name, child row, needs); none for another dispatch."""
    from eps.shell.run.pipelines import read_record

    return read_record(ctx.ledger, dispatch) or ()


def resolve(ctx: Ctx, address: str) -> str:
    """The row of ``D/phase`` (a pipeline's phase), or ``unknown_dispatch`` in one line naming
    the pipeline's phases; a plain dispatch id is itself."""
    if "/" not in address:
        return address
    dispatch, _, name = address.partition("/")
    phases = phases_of(ctx, dispatch)
    found = next((p.id for p in phases if p.name == name), None)
    if found is None:
        known = f"its phases: {', '.join(p.name for p in phases)}" if phases else f"{dispatch} is no pipeline"
        raise JobError("unknown_dispatch", f"no phase {address!r} ({known})", None)
    return found
