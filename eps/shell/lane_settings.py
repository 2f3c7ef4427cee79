"""The lane settings that name other settings, checked against them, one line each.

``[[clusters]] tier_partition`` / ``tier_account``: a ladder tier's own partition and
account (each key a tier of that cluster).  ``[lanes] gpu`` and ``[lanes] cpu``: the
automatic lane orders (defaults: the tables' ``DEFAULT_AUTO_LANE_ORDER`` and
``CPU_LANE_ORDER``).  A wrong name, a duplicate, RunPod in the automatic GPU order (P6), a
cluster in the CPU order (P1) or the VM in either (P2 chooses it) is refused.  A configured
cluster left out of the GPU order is not dropped in silence: ``eps plan`` skips it with
``not_in_lane_order`` and ``eps check`` names it."""

from __future__ import annotations

import os
from collections.abc import Sequence

from eps.core.model import ClusterConfig, Policy, evolve
from eps.core.router import did_you_mean
from eps.shell.settings import ConfigError


def _why(kind: str, name: str, clusters: Sequence[str], trivial: str) -> str | None:
    """What is wrong with ``name`` in the ``kind`` order, or ``None``."""
    if kind == "gpu":
        if name == "runpod":
            return "P6: RunPod takes GPU work only when pinned (--pin runpod), never in the automatic GPU order"
        if name == trivial:
            return f"the {trivial} lane has no GPU"
        known = [*clusters, "gcp"]
    else:
        if name in clusters:
            return f"P1: CPU work never holds a GPU: {name} is a GPU cluster, not a CPU lane"
        if name == trivial:
            return f"the {trivial} lane takes trivial ops by P2, not by the lane order"
        known = ["gcp", "runpod"]
    if name in known:
        return None
    return f"unknown lane {name!r}{did_you_mean(name, known)} (known: {', '.join(known)})"


def apply(policy: Policy, gpu: list[str] | None, cpu: list[str] | None, source: str) -> Policy:
    """``policy`` with the lane orders a ``[lanes]`` section gives (``None``: as it was)."""
    clusters = [c.name for c in policy.clusters]
    orders = {}
    for kind, names in (("gpu", gpu), ("cpu", cpu)):
        if names is None:
            continue
        if not names:
            raise ConfigError(f"{source}: the {kind.upper()} lane order needs at least one lane @ $.lanes.{kind}")
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ConfigError(f"{source}: {name!r} is listed twice @ $.lanes.{kind}[{i}]")
            why = _why(kind, name, clusters, policy.trivial_lane)
            if why is not None:
                raise ConfigError(f"{source}: {why} @ $.lanes.{kind}[{i}]")
        orders[f"{kind}_lane_order"] = tuple(names)
    return evolve(policy, **orders) if orders else policy


def left_out(policy: Policy) -> list[str]:
    """The configured clusters that are in no lane order (reached only with ``--pin``)."""
    return [c.name for c in policy.clusters if c.name not in policy.gpu_lane_order]


def per_tier(
    cluster: ClusterConfig, partitions: dict[str, str] | None, accounts: dict[str, str] | None, where: str, source: str
) -> ClusterConfig:
    """``cluster`` with its tiers' own partitions and accounts (``tier_partition = {
    "low-eur" = "general,overflow" }``): each key a tier of its ladder (or its dev QoS),
    each value a non-empty name."""
    tiers = [*cluster.qos_ladder, *([cluster.dev_qos] if cluster.dev_qos else [])]
    got = {}
    for key, table in (("tier_partition", partitions), ("tier_account", accounts)):
        for qos, value in (table or {}).items():
            what = f"@ $.{where}.{key}.{qos}"
            if qos not in tiers:
                known = ", ".join(tiers) or "none: the cluster has no QoS ladder"
                raise ConfigError(f"{source}: {qos!r} is not a tier of {cluster.name} (tiers: {known}) {what}")
            if not value.strip():
                raise ConfigError(f"{source}: the {key.removeprefix('tier_')} of {qos} is empty {what}")
        if table is not None:
            got["tier_partitions" if key == "tier_partition" else "tier_accounts"] = tuple(sorted(table.items()))
    return evolve(cluster, **got) if got else cluster


def master(login: tuple[str, ...], path: str | None, where: str, source: str) -> str | None:
    """``login_master``: the ControlPath (``~`` expanded) of the ssh master the user opens to
    a login that asks for a second factor; it needs an ssh login prefix."""
    if path is None:
        return None
    if not path.strip():
        raise ConfigError(f"{source}: login_master is empty @ $.{where}.login_master")
    if not login or os.path.basename(login[0]) != "ssh":
        raise ConfigError(f'{source}: login_master needs login = ["ssh", "LOGIN-HOST"] @ $.{where}.login_master')
    if "%" in path:
        raise ConfigError(f"{source}: login_master is a path, without ssh's % tokens @ $.{where}.login_master")
    return os.path.expanduser(path)
