"""What the operations of :mod:`eps.shell.service` share: the context one operation works
in (:class:`Ctx`), the shape of every document they return (:func:`doc`), and how often a
bounded wait reads the ledger."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from eps.core.contract import SCHEMA_VERSION

if TYPE_CHECKING:
    from eps.shell.config.settings import Settings
    from eps.shell.lanes import Lanes
    from eps.shell.state.events import Events
    from eps.shell.state.ledger import DispatchRow, Ledger

__all__ = ["LOOK_S", "Ctx", "DispatchRow", "doc"]  # DispatchRow: the type of the rows the doors are given

#: How often a bounded wait reads the ledger.
LOOK_S = 0.2


class Ctx(NamedTuple):
    """What the operations on dispatches work with: the settings, an open ledger, the lanes,
    where events go, and where notes for people go."""

    settings: Settings
    ledger: Ledger
    lanes: Lanes
    events: Events
    err: Callable[[str], object]


def doc(**fields: Any) -> dict[str, Any]:
    """A document of an operation: its fields, under the schema version."""
    return {"schema_version": SCHEMA_VERSION, **fields}
