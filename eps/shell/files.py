"""Structuring user files (capacity snapshot, QoS grants, config) into core records.

One private, strict cattrs converter per boundary (``forbid_extra_keys``);
``cattrs.transform_error`` turns a failure into a path such as
``$.gcp[2].state`` and we raise one :class:`ConfigError` line from it.
Imported lazily: ``eps plan`` without files never pays for cattrs.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import attrs
import cattrs
from attrs import frozen
from cattrs.cols import is_namedtuple, namedtuple_dict_structure_factory

from eps.core.durations import parse_slurm_time
from eps.core.model import (
    CapacitySnapshot,
    ClusterConfig,
    Policy,
    QosGrants,
    QosTier,
    Stock,
    Thresholds,
    VmCapacity,
    evolve,
)
from eps.shell.settings import ClusterAccess, ConfigError, GcpSettings, RunpodSettings, Settings


def _converter() -> cattrs.Converter:
    # The records are written with postponed annotations; resolve them so cattrs
    # sees real types (and rejects "bogus" for an enum) instead of strings.
    for cls in (_TierDoc, _ThresholdsDoc, _ClusterDoc, _GcpDoc, _RunpodDoc, _VmDoc, _FanoutDoc, _ConfigDoc):
        attrs.resolve_types(cls)
    conv = cattrs.Converter(forbid_extra_keys=True)
    # The core's records are NamedTuples: structure them from dicts, strictly, too.
    conv.register_structure_hook_factory(
        is_namedtuple,
        lambda cl, c: namedtuple_dict_structure_factory(cl, c, "from_converter", True),  # forbid extra keys
    )

    def stock(value: Any, _: type) -> Stock:
        if not isinstance(value, str):
            raise ValueError(f"expected a stock word, got {value!r}")
        return Stock(value.lower())

    conv.register_structure_hook(Stock, stock)

    def strict_int(value: Any, _: type) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number, got {value!r}")
        return value

    def strict_str(value: Any, _: type) -> str:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        return value

    def strict_bool(value: Any, _: type) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value

    def strict_float(value: Any, _: type) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"expected a number, got {value!r}")
        return float(value)

    def wall(value: Any, _: type) -> str | int | None:
        if value is None or isinstance(value, str):
            return value
        return strict_int(value, int)

    # Exact-type predicates: a plain ``str`` hook would also catch StrEnum fields.
    conv.register_structure_hook_func(lambda t: t is int, strict_int)
    conv.register_structure_hook_func(lambda t: t is str, strict_str)
    conv.register_structure_hook_func(lambda t: t is bool, strict_bool)
    conv.register_structure_hook_func(lambda t: t is float, strict_float)
    conv.register_structure_hook(str | int | None, wall)
    return conv


_CONV: cattrs.Converter | None = None


def _structure(data: Any, cls: type, source: str) -> Any:
    global _CONV  # noqa: PLW0603  (built on first use, after every record class exists)
    if _CONV is None:
        _CONV = _converter()
    try:
        return _CONV.structure(data, cls)
    except Exception as exc:  # cattrs raises ExceptionGroups of many kinds; all mean "bad file"
        msgs = cattrs.transform_error(exc) if isinstance(exc, cattrs.BaseValidationError) else [str(exc)]
        first = msgs[0] if msgs else str(exc)
        more = f" (+{len(msgs) - 1} more)" if len(msgs) > 1 else ""
        raise ConfigError(f"{source}: {first}{more}") from None


def read_data(path: str) -> Any:
    """Read a JSON or TOML file (by suffix; ``-`` is JSON on stdin is not supported)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        if p.suffix.lower() == ".toml":
            return tomllib.loads(text)
        return json.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        kind = "TOML" if p.suffix.lower() == ".toml" else "JSON"
        raise ConfigError(f"{path}: not valid {kind}: {exc}") from None


def load_snapshot(path: str) -> CapacitySnapshot:
    data = read_data(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a capacity snapshot is an object @ $")
    snap: CapacitySnapshot = _structure(data, CapacitySnapshot, path)
    for i, g in enumerate(snap.gcp):
        if not g.zone:
            raise ConfigError(f"{path}: zone must not be empty @ $.gcp[{i}].zone")
    _no_negative_vm(snap.vm, path)
    return snap


def _no_negative_vm(vm: VmCapacity, source: str) -> None:
    for name, value in vm._asdict().items():
        if value is not None and value < 0:
            raise ConfigError(f"{source}: must not be negative @ $.vm.{name}")


@frozen
class _TierDoc:
    name: str
    priority: int = 0
    max_wall: str | int | None = None
    max_gpus_per_user: int | None = None


def _tier(doc: _TierDoc, where: str) -> QosTier:
    if isinstance(doc.max_wall, str):
        try:
            wall = parse_slurm_time(doc.max_wall)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc} @ max_wall") from None
    else:
        wall = doc.max_wall
    if (wall is not None and wall < 0) or (doc.max_gpus_per_user is not None and doc.max_gpus_per_user < 0):
        raise ConfigError(f"{where}: limits must not be negative")
    return QosTier(doc.name, doc.priority, wall, doc.max_gpus_per_user)


def grants_from_data(data: Any, source: str) -> QosGrants:
    """``{"fellows": [{"name": "high-eur", "priority": 100000, "max_wall": "7-00:00:00",
    "max_gpus_per_user": 16}, ...]}`` -> QosGrants."""
    docs: dict[str, list[_TierDoc]] = _structure(data, dict[str, list[_TierDoc]], source)
    clusters = tuple(
        (name, tuple(_tier(d, f"{source} @ $.{name}[{i}]") for i, d in enumerate(tiers)))
        for name, tiers in docs.items()
    )
    return QosGrants(clusters=clusters)


def load_grants(path: str) -> QosGrants:
    return grants_from_data(read_data(path), path)


# --- config file ----------------------------------------------------------------------------


@frozen
class _ThresholdsDoc:
    trivial_op_s: int | None = None
    big_footprint_gb: int | None = None
    spot_max_s: int | None = None
    vm_disk_margin_gb: int | None = None


@frozen
class _VmDoc:
    """The shared VM's size when nothing measured it (P2): ``[vm]`` in the config."""

    vcpus: int | None = None
    mem_gb: float | None = None
    free_disk_gb: float | None = None


@frozen
class _ClusterDoc:
    name: str
    login: list[str] | None = None
    user: str | None = None
    partition: str | None = None
    account: str | None = None
    qos_ladder: list[str] | None = None
    dev_qos: str | None = None
    dev_qos_for_debug: bool | None = None
    first_park_cap_s: int | None = None
    next_park_cap_s: int | None = None
    advance_on_self_cap: bool | None = None
    gpus_per_node: int | None = None
    gpu_model: str | None = None


@frozen
class _GcpDoc:
    project: str | None = None
    zones: list[str] | None = None
    image: str | None = None
    endpoint: str | None = None
    service_account: str | None = None
    poll_interval_s: float | None = None


@frozen
class _RunpodDoc:
    base_url: str | None = None
    image: str | None = None
    gpu_image: str | None = None
    data_centers: list[str] | None = None
    concurrency: int | None = None
    poll_interval_s: float | None = None


@frozen
class _FanoutDoc:
    concurrency: int | None = None  # --count N: copies walked at once, on every lane


@frozen
class _ConfigDoc:
    fanout: _FanoutDoc | None = None
    thresholds: _ThresholdsDoc | None = None
    gcp: _GcpDoc | None = None
    runpod: _RunpodDoc | None = None
    vm: _VmDoc | None = None
    clusters: list[_ClusterDoc] | None = None


def _set(obj: Any, **changes: Any) -> Any:
    real = {k: (tuple(v) if isinstance(v, list) else v) for k, v in changes.items() if v is not None}
    return evolve(obj, **real) if real else obj


def settings_from_config(data: Any, base: Settings, source: str) -> Settings:
    doc: _ConfigDoc = _structure(data, _ConfigDoc, source)
    policy: Policy = base.policy
    if doc.thresholds is not None:
        t = doc.thresholds
        for name in ("trivial_op_s", "big_footprint_gb", "spot_max_s", "vm_disk_margin_gb"):
            v = getattr(t, name)
            if v is not None and v < 0:
                raise ConfigError(f"{source}: must not be negative @ $.thresholds.{name}")
        th: Thresholds = _set(
            policy.thresholds,
            trivial_op_s=t.trivial_op_s,
            big_footprint_gb=t.big_footprint_gb,
            spot_max_s=t.spot_max_s,
            vm_disk_margin_gb=t.vm_disk_margin_gb,
        )
        policy = evolve(policy, thresholds=th)
    if doc.vm is not None:
        vm = VmCapacity(doc.vm.vcpus, doc.vm.mem_gb, doc.vm.free_disk_gb)
        _no_negative_vm(vm, source)
        policy = evolve(policy, vm=vm)
    gcp = base.gcp
    if doc.gcp is not None:
        g = doc.gcp
        if g.zones is not None:
            if not g.zones:
                raise ConfigError(f"{source}: at least one zone is needed @ $.gcp.zones")
            policy = evolve(policy, gcp_zones=tuple(g.zones))
        gcp = _set(
            GcpSettings() if gcp is None else gcp,
            project=g.project,
            image=g.image,
            endpoint=g.endpoint,
            service_account=g.service_account,
            poll_interval_s=g.poll_interval_s,
        )
    runpod = base.runpod
    if doc.runpod is not None:
        r = doc.runpod
        for name, v in (("gcp.poll_interval_s", doc.gcp.poll_interval_s if doc.gcp else None),
                        ("runpod.poll_interval_s", r.poll_interval_s)):  # fmt: skip
            if v is not None and v <= 0:
                raise ConfigError(f"{source}: must be positive @ $.{name}")
        if r.concurrency is not None and r.concurrency < 1:
            raise ConfigError(f"{source}: must be at least 1 @ $.runpod.concurrency")
        runpod = _set(
            RunpodSettings() if runpod is None else runpod,
            base_url=r.base_url,
            image=r.image,
            gpu_image=r.gpu_image,
            data_centers=r.data_centers,
            concurrency=r.concurrency,
            poll_interval_s=r.poll_interval_s,
        )
    fanout = base.fanout_concurrency
    if doc.fanout is not None and doc.fanout.concurrency is not None:
        if not 1 <= doc.fanout.concurrency <= 256:
            raise ConfigError(f"{source}: must be 1..256 @ $.fanout.concurrency")
        fanout = doc.fanout.concurrency
    access = list(base.access)
    if doc.clusters is not None:
        clusters = list(policy.clusters)
        for i, c in enumerate(doc.clusters):
            for name in ("first_park_cap_s", "next_park_cap_s", "gpus_per_node"):
                v = getattr(c, name)
                if v is not None and v < 0:
                    raise ConfigError(f"{source}: must not be negative @ $.clusters[{i}].{name}")
            if c.name in ("vm", "gcp", "runpod"):
                raise ConfigError(f"{source}: {c.name!r} is a lane name, not a cluster @ $.clusters[{i}].name")
            existing = next((k for k, x in enumerate(clusters) if x.name == c.name), None)
            current = clusters[existing] if existing is not None else ClusterConfig(name=c.name)
            updated = _set(
                current,
                partition=c.partition,
                account=c.account,
                qos_ladder=c.qos_ladder,
                dev_qos=c.dev_qos,
                dev_qos_for_debug=c.dev_qos_for_debug,
                first_park_cap_s=c.first_park_cap_s,
                next_park_cap_s=c.next_park_cap_s,
                advance_on_self_cap=c.advance_on_self_cap,
                gpus_per_node=c.gpus_per_node,
                gpu_model=c.gpu_model,
            )
            if existing is None:
                clusters.append(updated)
            else:
                clusters[existing] = updated
            access = [a for a in access if a.name != c.name]
            access.append(ClusterAccess(c.name, tuple(c.login or ()), c.user))
        policy = evolve(policy, clusters=tuple(clusters))
    return evolve(base, policy=policy, gcp=gcp, runpod=runpod, access=tuple(access), fanout_concurrency=fanout)
