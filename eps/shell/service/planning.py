"""``eps plan``: the route plan for a job and what this machine can run of it
(:func:`plan`), from the inputs the front doors parse (:func:`given`, :func:`park_state`).

The plan path of :mod:`eps.shell.service.operations`, kept apart so that ``eps plan`` loads the pure
core and this, not the operations on dispatches (the ledger, the lanes, the walker, the
supervisor) nor what they import; :mod:`eps.shell.service.operations` re-exports these names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from eps.core.model import CapacitySnapshot, Job, JobError, LaneDown, ParkState, Policy, QosGrants, RoutePlan
from eps.core.records import NamedTuple
from eps.core.tables import HEALING, Healing

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from eps.core.usable import RungStatus
    from eps.shell.config.settings import Settings
    from eps.shell.request.job import JobRequest

__all__ = ["Planned", "given", "park_state", "plan", "planned", "with_inputs", "world"]


class Planned(NamedTuple):
    """A route plan and what this machine can run of it; :meth:`to_dict` is ``eps plan --json``
    (the Python API's :class:`eps.Plan` prints as the table of ``eps plan``)."""

    route: RoutePlan
    job: Job
    down: tuple[LaneDown, ...]
    healing: Healing = HEALING  # with the config's numbers ([jobs] sync_every_s)

    @property
    def rungs(self) -> tuple[RungStatus, ...]:
        """Each rung (``.rung``) with ``.runnable`` and, when not, ``.down`` (why, and the fix)."""
        from eps.core.usable import mark

        return mark(self.route, self.down)

    @property
    def can_start(self) -> bool:
        """Whether ``execute`` of this job could start anything on this machine now."""
        from eps.core.usable import can_start

        return can_start(self.route, self.down)

    @property
    def terminal(self) -> str | None:
        return None if self.route.terminal is None else self.route.terminal.value

    def to_dict(self) -> dict[str, Any]:
        from eps.shell.render.documents import plan_dict

        return plan_dict(self.route, self.job, self.down, self.healing)


def plan(settings: Settings, env: Mapping[str, str], job: Job | JobRequest, snapshot: CapacitySnapshot | None = None,
         grants: QosGrants | None = None, park: ParkState | None = None) -> Planned:  # fmt: skip
    """The route plan for ``job`` (a request, or the core's job), each rung marked runnable
    here or not (why, and the fix).  Nothing is created or called; boot loops are remembered
    as ``execute`` sees them.  A refused value is named as the request's door gave it."""
    if isinstance(job, Job):
        return _plan(settings, env, job, snapshot, grants, park)
    try:
        return _plan(settings, env, with_inputs(job.job, job.shipping.inputs), snapshot, grants, park)
    except JobError as exc:
        raise job.named(exc) from None


def _plan(settings: Settings, env: Mapping[str, str], job: Job, snapshot: CapacitySnapshot | None,
          grants: QosGrants | None, park: ParkState | None) -> Planned:  # fmt: skip
    from eps.core.router import plan as route
    from eps.core.router import with_intent_duration

    job = with_intent_duration(job, settings.policy)  # as execute runs it (prepare)
    snap, granted = world(settings, snapshot, grants)
    if park is not None and not _could_park(route(job, snap, granted, None, policy=settings.policy), park):
        raise JobError(
            "usage", f"eps plan: --park: this job never queues on {park.cluster} (no rung of its plan is on it)"
        )
    result = route(job, snap, granted, park, policy=settings.policy)
    return planned(settings, env, snap, result, job)


def world(settings: Settings, snapshot: CapacitySnapshot | None,
          grants: QosGrants | None) -> tuple[CapacitySnapshot, QosGrants]:  # fmt: skip
    """What a plan here is made with: ``snapshot`` with the boot loops and cluster faults this
    machine remembers, and ``grants`` (``None``: the config's, else the built-in ones)."""
    from eps.core.tables import DEFAULT_GRANTS
    from eps.shell.run.cluster_faults import known
    from eps.shell.state.lives import remembered_here

    snap = remembered_here(snapshot or CapacitySnapshot(), settings.state_dir, settings.state_url)
    return known(snap, settings.state_dir, settings.policy), grants or configured_grants(settings, DEFAULT_GRANTS)


def planned(settings: Settings, env: Mapping[str, str], snap: CapacitySnapshot, route: RoutePlan, job: Job) -> Planned:
    """``route`` of ``job``, each of its lanes that cannot be used here marked (why, and the fix)."""
    from eps.shell.config.availability import down_here

    lanes = tuple(dict.fromkeys(r.lane for r in route.rungs))
    return Planned(route, job, (*snap.unavailable, *down_here(settings, env, lanes)), settings.jobs.healing())


def _could_park(unparked: RoutePlan, park: ParkState) -> bool:
    """Whether the job's plan before any park has a rung on the cluster ``park`` names (its tier
    may be one the grants no longer list: the ladder rule still holds for it, P7)."""
    return any(r.lane == park.cluster for r in unparked.rungs)


def configured_grants(settings: Settings, grants: QosGrants) -> QosGrants:
    """``grants`` with the tiers of every cluster whose config names a grants file
    (``[[clusters]] grants``) from that file, as ``eps execute`` takes them; the file is read
    only when one is named (a plan on a fresh machine reads nothing)."""
    if not any(a.grants for a in settings.access):
        return grants
    from eps.shell.config.snapshots import with_configured

    return with_configured(settings, grants)


def park_state(text: str | None, reason: str | None, policy: Policy) -> ParkState | None:
    """``--park [CLUSTER:]QOS=DURATION`` (and ``--park-reason``) as the core's park state."""
    from eps.core.durations import parse_duration

    if text is None:
        if reason is not None:
            raise JobError("usage", "eps plan: --park-reason needs --park")
        return None
    spec, sep, secs = text.partition("=")
    if not sep:
        raise JobError("usage", f"eps plan: --park wants [CLUSTER:]QOS=SECONDS, got {text!r}")
    try:
        elapsed = parse_duration(secs)
    except ValueError as exc:
        raise JobError("usage", f"eps plan: --park: {exc}") from None
    cluster_name, _, qos = spec.rpartition(":")
    if cluster_name:
        cluster = policy.cluster(cluster_name)
        if cluster is None:
            raise JobError("usage", f"eps plan: --park: unknown cluster {cluster_name!r}")
    else:
        cluster = next((c for c in policy.clusters if qos in c.qos_ladder or qos in (c.dev_qos, c.name)), None)
        if cluster is None:
            raise JobError("usage", f"eps plan: --park: no cluster has a QoS {qos!r}")
    q: str | None = None if qos == cluster.name and not cluster.qos_ladder else qos
    return ParkState(cluster.name, q, elapsed, reason)


def with_inputs(job: Job, texts: Sequence[str]) -> Job:
    """``job`` with its ``--input`` (``texts``: the flags', else the job file's ``inputs``), each
    checked as ``eps execute`` checks it before it lists them (a bad one: :class:`JobError`, one
    line).  Nothing is listed or sized here: no network, no storage client."""
    if not texts:
        return job
    from eps.core.model import evolve
    from eps.core.storage import StorageError, inputs_of

    try:
        inputs_of(texts)
    except StorageError as exc:
        raise JobError("storage", str(exc), job) from None
    return evolve(job, inputs=tuple(texts))


def given(snapshot: str | None, grants: str | None) -> tuple[CapacitySnapshot, QosGrants]:
    """The ``--snapshot`` and ``--grants`` files when given (strict: a bad file is one line),
    else an empty snapshot and the default grants."""
    from eps.core.tables import DEFAULT_GRANTS

    snap, granted = CapacitySnapshot(), DEFAULT_GRANTS
    if snapshot or grants:
        from eps.shell.config import snapshots as files
        if snapshot:
            snap = files.load_snapshot(snapshot)
        if grants:
            granted = files.load_grants(grants)
    return snap, granted
