"""The capacity snapshot (``--snapshot``) and QoS grants (``--grants``, and a cluster's
``[[clusters]] grants``) files, read strictly through the same converter as the config
(:mod:`eps.shell.config.convert`): one line naming the file and the path for anything wrong."""

from __future__ import annotations

from typing import Any

import attrs
from attrs import frozen

from eps.core.durations import parse_duration, parse_slurm_time
from eps.core.model import CapacitySnapshot, QosGrants, QosTier
from eps.shell.config.convert import _structure, _vm_sizes, read_data
from eps.shell.config.settings import ConfigError, Settings


def load_snapshot(path: str) -> CapacitySnapshot:
    return snapshot_from_data(read_data(path), path)


def snapshot_from_data(data: object, path: str) -> CapacitySnapshot:
    """A capacity snapshot from its parsed document (``path``: where it came from, for errors)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a capacity snapshot is an object @ $")
    snap: CapacitySnapshot = _structure(data, CapacitySnapshot, path)
    for i, g in enumerate(snap.gcp):
        if not g.zone:
            raise ConfigError(f"{path}: zone must not be empty @ $.gcp[{i}].zone")
    for i, q in enumerate(snap.queues):
        if q.free_gpus is not None and q.free_gpus < 0:
            raise ConfigError(f"{path}: must not be negative @ $.queues[{i}].free_gpus")
    _vm_sizes(snap.vm, path)
    return snap


@frozen
class _TierDoc:
    name: str
    priority: int = 0
    max_wall: str | int | None = None
    max_gpus_per_user: int | None = None
    preempts: list[str] | None = None  # sacctmgr's Preempt: the tiers a job of this one may preempt
    preempt_mode: str | None = None  # PreemptMode: "requeue", "cancel", ...; "cluster": the cluster's default
    grace: str | int | None = None  # GraceTime: seconds, or a duration ("3m", "00:03:00")


attrs.resolve_types(_TierDoc)  # postponed annotations: cattrs needs the real types


def _tier(doc: _TierDoc, source: str, where: str) -> QosTier:
    if isinstance(doc.max_wall, str):
        try:
            wall = parse_slurm_time(doc.max_wall)
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc} @ $.{where}.max_wall") from None
    else:
        wall = doc.max_wall
    if (wall is not None and wall < 0) or (doc.max_gpus_per_user is not None and doc.max_gpus_per_user < 0):
        raise ConfigError(f"{source}: limits must not be negative @ $.{where}")
    for i, name in enumerate(doc.preempts or ()):
        if not name.strip():
            raise ConfigError(f"{source}: must not be blank @ $.{where}.preempts[{i}]")
    mode = (doc.preempt_mode or "").strip().lower()
    return QosTier(doc.name, doc.priority, wall, doc.max_gpus_per_user, preempts=tuple(doc.preempts or ()),
                   preempt_mode=None if mode in ("", "cluster") else mode,
                   grace_s=_grace(doc.grace, source, f"{where}.grace"))  # fmt: skip


def _grace(value: str | int | None, source: str, where: str) -> int | None:
    """A SIGTERM grace in whole seconds: a number, or text read like ``--duration``."""
    try:
        grace = parse_duration(value) if isinstance(value, str) else value
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc} @ $.{where}") from None
    if grace is not None and grace < 0:
        raise ConfigError(f"{source}: must not be negative @ $.{where} (got {grace})")
    return grace


def grants_from_data(data: object, source: str) -> QosGrants:
    """``{"fellows": [{"name": "high-eur", "priority": 100000, "max_wall": "7-00:00:00",
    "max_gpus_per_user": 16, "preempts": ["normal-eur", "low-eur"]}, {"name": "low-eur",
    ..., "preempt_mode": "requeue", "grace": "3m"}, ...]}`` -> QosGrants."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: QoS grants are an object of clusters @ $")
    docs: dict[str, list[_TierDoc]] = _structure(data, dict[str, list[_TierDoc]], source)
    clusters = tuple(
        (name, tuple(_tier(d, source, f"{name}[{i}]") for i, d in enumerate(tiers))) for name, tiers in docs.items()
    )
    return QosGrants(clusters=clusters)


def grants_to_data(grants: QosGrants) -> dict[str, list[dict[str, Any]]]:
    """``grants`` in the grants file's format, read back by :func:`grants_from_data` to the
    same record: times in whole seconds, a field without a value left out."""
    out: dict[str, list[dict[str, Any]]] = {}
    for cluster, tiers in grants.clusters:
        out[cluster] = []
        for t in tiers:
            fields = {"name": t.name, "priority": t.priority, "max_wall": t.max_wall_s,
                      "max_gpus_per_user": t.max_gpus_per_user, "preempts": list(t.preempts) or None,
                      "preempt_mode": t.preempt_mode, "grace": t.grace_s}  # fmt: skip
            out[cluster].append({k: v for k, v in fields.items() if v is not None})
    return out


def load_grants(path: str) -> QosGrants:
    return grants_from_data(read_data(path), path)


def configured_tiers(settings: Settings, cluster: str) -> tuple[QosTier, ...] | None:
    """The QoS tiers of ``cluster`` from its ``[[clusters]] grants`` file: the file's entry of
    that name, or its only entry (SLURM's own name for the cluster may differ, as with
    sacctmgr).  ``None`` when the config names no file.  :class:`ConfigError`: the file cannot
    be read, or names other clusters only."""
    path = settings.cluster_access(cluster).grants
    if path is None:
        return None
    grants = load_grants(path)
    tiers = dict(grants.clusters).get(cluster)
    if tiers is None and len(grants.clusters) == 1:
        tiers = grants.clusters[0][1]
    if tiers is None:
        named = ", ".join(name for name, _ in grants.clusters) or "none"
        raise ConfigError(f"{path}: no grants of cluster {cluster!r} (the file has: {named}) @ $")
    return tiers


def with_configured(settings: Settings, grants: QosGrants) -> QosGrants:
    """``grants`` with each cluster whose config names a grants file taking its tiers from it."""
    given = dict(grants.clusters)
    for c in settings.policy.clusters:
        tiers = configured_tiers(settings, c.name)
        if tiers is not None:
            given[c.name] = tiers
    return QosGrants(clusters=tuple(given.items()))
