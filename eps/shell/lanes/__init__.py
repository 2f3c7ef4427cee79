"""The lanes: one interface (:class:`Lane`), one adapter per provider, one registry."""

from eps.shell.lanes.base import Lane, LaneOptions
from eps.shell.lanes.registry import Lanes

__all__ = ["Lane", "LaneOptions", "Lanes"]
