"""Where a RunPod GPU pod is asked for: its cloud (supply) and its data centre.

A pinned GPU job (P6, P10) gets, for each GPU type that fits it, one rung per place to
try, in order: every cloud of ``[runpod] supply`` (``secure``, then ``community`` when the
user allows it), and within a cloud every data centre of ``[runpod] data_centers``, or,
without that list, RunPod's own choice first and then "any data centre but those that
failed" (the lane lists them from ``GET /v2/catalog/gpus/{id}?include=AVAILABILITY``).

A pod that was made but never came up (never RUNNING, or no public ssh port within its
wait) is terminated, and its data centre is learned as a fact of the dispatch
(``RunpodState("<gpu type>@<data centre>", NONE)``, :func:`eps.core.outcome.absorb`): that
type is not asked for there again, and after ``MAX_POD_CREATES`` such pods the dispatch
makes no more GPU pods (skip code ``runpod_rotation_spent``).  A create RunPod answers with
400 (no stock there) makes no pod and does not count.

The place travels in the rung's ``zone`` (so the ledger, the rung key and ``eps plan``
carry it without new columns):

=============================== =================================================
zone                            asked for
=============================== =================================================
``None``                        secure cloud, RunPod's scheduler chooses
``US-TX-3``                     secure cloud, data centre US-TX-3
``!EU-RO-1,US-KS-2``            secure cloud, any data centre but these
``community``                   community cloud, RunPod chooses
``community:US-TX-3``           community cloud, US-TX-3
``community:!EU-RO-1``          community cloud, any data centre but EU-RO-1
=============================== =================================================
"""

from __future__ import annotations

from eps.core.model import RunpodState, Stock
from eps.core.records import NamedTuple

#: At most this many RunPod GPU pods are made per dispatch (a pod that does not come up is
#: terminated, confirmed gone, and the next place is tried; the original lane's #2184).
MAX_POD_CREATES = 3
SUPPLIES = ("secure", "community")
DEFAULT_SUPPLY: tuple[str, ...] = ("secure",)
_COMMUNITY = "community"


class Placement(NamedTuple):
    cloud: str = "secure"  # "secure" | "community"
    data_center: str | None = None  # one data centre; None: see ``avoid``
    avoid: tuple[str, ...] = ()  # any data centre but these (empty: RunPod chooses)

    @property
    def api_cloud(self) -> str:
        """``CreatePodRequest.cloud``: ``SECURE`` or ``COMMUNITY``."""
        return self.cloud.upper()

    def words(self) -> str:
        """How the plan says it: ``secure cloud, RunPod chooses the data centre``."""
        if self.data_center is not None:
            where = f"data centre {self.data_center}"
        elif self.avoid:
            where = "any data centre but " + ", ".join(self.avoid)
        else:
            where = "RunPod chooses the data centre"
        return f"{self.cloud} cloud, {where}"


def zone_of(place: Placement) -> str | None:
    """The rung ``zone`` that names ``place`` (see the module's table)."""
    where = place.data_center or ("!" + ",".join(place.avoid) if place.avoid else "")
    if place.cloud == _COMMUNITY:
        return f"{_COMMUNITY}:{where}" if where else _COMMUNITY
    return where or None


def placement(zone: str | None) -> Placement:
    """The place a rung's ``zone`` names (the inverse of :func:`zone_of`)."""
    if not zone:
        return Placement()
    cloud, sep, where = zone.partition(":")
    if cloud == _COMMUNITY:
        if not sep:
            return Placement(_COMMUNITY)
    else:
        cloud, where = "secure", zone
    if where.startswith("!"):
        return Placement(cloud, None, tuple(d for d in where[1:].split(",") if d))
    return Placement(cloud, where or None)


def failed_here(states: tuple[RunpodState, ...]) -> tuple[tuple[str, str], ...]:
    """The (GPU type, data centre) pairs whose pod this dispatch made and lost, in order."""
    found: list[tuple[str, str]] = []
    for st in states:
        gpu, at, dc = st.id.rpartition("@")
        if at and gpu and dc and st.stock is Stock.NONE and (gpu, dc) not in found:
            found.append((gpu, dc))
    return tuple(found)


def lost_pod(gpu: str, data_center: str) -> RunpodState:
    """The fact a pod of ``gpu`` that was made in ``data_center`` and never came up teaches."""
    return RunpodState(f"{gpu}@{data_center}", Stock.NONE)


def places(
    gpu: str, supply: tuple[str, ...], data_centers: tuple[str, ...], lost: tuple[tuple[str, str], ...]
) -> list[Placement]:
    """Where to ask for a pod of ``gpu``, in order, given the pods already ``lost``."""
    bad = tuple(dc for g, dc in lost if g == gpu)
    out: list[Placement] = []
    for cloud in supply:
        if data_centers:
            out.extend(Placement(cloud, dc) for dc in data_centers if dc not in bad)
        else:
            out.append(Placement(cloud, None, bad))
    return out
