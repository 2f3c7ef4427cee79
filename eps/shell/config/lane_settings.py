"""The lane settings that name other settings, checked against them, one line each.

``[[clusters]]``: one cluster's row (:class:`ClusterDoc`), each field over the tables' row
of that name.  ``tier_partition`` / ``tier_account``: a ladder tier's own partition and
account (each key a tier of that cluster); ``preemptible``: tiers of it too.  The facts
that render into a batch script are checked here, before anything is submitted: the
environment's names and values, the memory asked per GPU against the cluster's ceiling,
the access word (``robot``: a login that runs sbatch, scancel, squeue, scp and rsync only;
its QoS grants then come from ``grants``, a grants file, or the built-in table, never
sacctmgr).  ``[lanes] gpu`` and ``[lanes] cpu``: the
automatic lane orders (defaults: the tables' ``DEFAULT_AUTO_LANE_ORDER`` and
``CPU_LANE_ORDER``).  A wrong name, a duplicate, RunPod in the automatic GPU order (P6), a
cluster in the CPU order (P1) or the VM in either (P2 chooses it) is refused.  A configured
cluster left out of the GPU order is not dropped in silence: ``eps plan`` skips it with
``not_in_lane_order`` and ``eps check`` names it."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from attrs import frozen

from eps.core.durations import parse_duration
from eps.core.model import ClusterConfig, Policy, evolve
from eps.core.router import did_you_mean
from eps.core.sbatch import FORBIDDEN_ENV
from eps.shell.config.settings import ConfigError

#: A name the batch script's body can ``export``.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: What ``access`` may say: any command through the login, or a forced-command key's few.
ACCESS = ("full", "robot")


@frozen
class ClusterDoc:
    """One ``[[clusters]]`` entry as written (structured strictly by :mod:`eps.shell.config.convert`).
    A field left out keeps the tables' row of that name (a new cluster: the defaults)."""

    name: str
    login: list[str] | None = None
    user: str | None = None
    work_root: str | None = None
    # "" clears the row's value (TOML has no null): no --partition / --account at all, so
    # SLURM applies the user's default (fellows takes no --account).
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
    tier_partition: dict[str, str] | None = None
    tier_account: dict[str, str] | None = None
    login_master: str | None = None
    mem_per_gpu_gb: int | None = None
    mem_max_gb: int | None = None
    mem_max_per_gpu_gb: int | None = None
    cpus_per_gpu: int | None = None
    cpus_max: int | None = None
    # A table replaces the row's whole environment ({} clears it): what a job gets is then
    # exactly what the file says.
    env: dict[str, str] | None = None
    multi_gpu_env: dict[str, str] | None = None
    user_in_job_name: bool | None = None
    preemptible: list[str] | None = None
    access: str | None = None
    submit_gap: str | float | None = None  # seconds (0.5), or a duration read to whole seconds ("2s")
    cleanup_trap: bool | None = None
    grants: str | None = None  # a grants file (the format of --grants); relative: to the config file


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
    got = {}
    for key, table in (("tier_partition", partitions), ("tier_account", accounts)):
        for qos, value in (table or {}).items():
            what = f"@ $.{where}.{key}.{qos}"
            _a_tier(cluster, qos, what, source)
            if not value.strip():
                raise ConfigError(f"{source}: the {key.removeprefix('tier_')} of {qos} is empty {what}")
        if table is not None:
            got["tier_partitions" if key == "tier_partition" else "tier_accounts"] = tuple(sorted(table.items()))
    return evolve(cluster, **got) if got else cluster


def _a_tier(cluster: ClusterConfig, qos: str, what: str, source: str) -> None:
    """Refuse ``qos`` unless it is a tier of ``cluster``'s ladder (or its dev QoS)."""
    tiers = [*cluster.qos_ladder, *([cluster.dev_qos] if cluster.dev_qos else [])]
    if qos not in tiers:
        known = ", ".join(tiers) or "none: the cluster has no QoS ladder"
        raise ConfigError(f"{source}: {qos!r} is not a tier of {cluster.name} (tiers: {known}) {what}")


def submit_gap(value: str | float | None, where: str, source: str) -> float | None:
    """``submit_gap`` in seconds: a number as it is, text read like ``--duration`` (``"2s"``;
    whole seconds).  Its range is the caller's (``RANGES``); ``None`` when absent."""
    if value is None or not isinstance(value, str):
        return value
    try:
        return float(parse_duration(value))
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc} @ $.{where}.submit_gap") from None


def facts(cluster: ClusterConfig, doc: ClusterDoc, where: str, source: str) -> ClusterConfig:
    """``cluster`` with the row facts of ``doc`` that name or bound each other (the numbers and
    switches are already in it): a cleared partition or account, the environments, the
    preemptible tiers, the access word; and the memory asked per GPU within the ceiling."""
    got: dict[str, object] = {}
    for key in ("partition", "account"):
        value = getattr(doc, key)
        if value == "":
            got[key] = None
        elif value is not None and (not value.strip() or any(c.isspace() for c in value)):
            raise ConfigError(f'{source}: the {key} must be one word, or "" for none @ $.{where}.{key} (got {value!r})')
    for key, field in (("env", "job_env"), ("multi_gpu_env", "multi_gpu_env")):
        table = getattr(doc, key)
        if table is not None:
            got[field] = _environment(table, f"{where}.{key}", source)
    if doc.preemptible is not None:
        for i, qos in enumerate(doc.preemptible):
            what = f"@ $.{where}.preemptible[{i}]"
            if qos in doc.preemptible[:i]:
                raise ConfigError(f"{source}: {qos!r} is listed twice {what}")
            _a_tier(cluster, qos, what, source)
        got["preemptible"] = tuple(doc.preemptible)
    if doc.access is not None and doc.access not in ACCESS:
        raise ConfigError(f'{source}: access must be "full" or "robot" @ $.{where}.access (got {doc.access!r})')
    per_gpu, ceiling = cluster.mem_per_gpu_gb, cluster.mem_max_per_gpu_gb
    asked = doc.mem_per_gpu_gb is not None or doc.mem_max_per_gpu_gb is not None
    if asked and per_gpu is not None and ceiling is not None and per_gpu > ceiling:
        key = "mem_per_gpu_gb" if doc.mem_per_gpu_gb is not None else "mem_max_per_gpu_gb"
        raise ConfigError(f"{source}: {per_gpu} GB per GPU is above {cluster.name}'s ceiling of {ceiling} GB per GPU"
                          f" (mem_max_per_gpu_gb) @ $.{where}.{key}")  # fmt: skip
    return evolve(cluster, **got) if got else cluster


def _environment(table: dict[str, str], where: str, source: str) -> tuple[tuple[str, str], ...]:
    """An environment table as ``(name, value)`` pairs sorted by name: each name one the script
    body can export and SLURM's own left alone, each value one line."""
    for name, value in table.items():
        what = f"@ $.{where}.{name}"
        if _ENV_NAME.fullmatch(name) is None:
            raise ConfigError(f"{source}: {name!r} is not a shell variable name ([A-Za-z_][A-Za-z0-9_]*) {what}")
        if name in FORBIDDEN_ENV:
            raise ConfigError(f"{source}: {name} is SLURM's to set (the job's own GPUs), never the config's {what}")
        if any(c in value for c in "\0\n\r"):
            raise ConfigError(f"{source}: the value of {name} must be one line, without NUL {what}")
    return tuple(sorted(table.items()))


def grants_file(path: str | None, where: str, source: str) -> str | None:
    """``grants``: the path of a grants file (the format of ``--grants``) that gives the
    cluster's QoS tiers instead of sacctmgr; ``~`` expanded, a relative path taken from the
    config file's directory.  Read when the grants are needed, not here."""
    if path is None:
        return None
    if not path.strip() or any(c in path for c in "\0\n\r"):
        raise ConfigError(f"{source}: grants must be a one-line path @ $.{where}.grants (got {path!r})")
    path = os.path.expanduser(path)
    return path if os.path.isabs(path) else os.path.join(os.path.dirname(source), path)


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
