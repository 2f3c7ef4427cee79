"""Structuring user files (capacity snapshot, QoS grants, config) into records, strictly.

One private cattrs converter for every user file, with ``forbid_extra_keys`` and no coercion: a
bool is ``true``/``false`` (never ``"false"``), a whole number is an integer (never ``"7"``,
``true`` or ``2.9``), a list is a list (never a string to split into characters), numbers are
finite.  Values are then checked against their ranges (:data:`RANGES`).  Every failure is one
:class:`ConfigError` line naming the file and the path, such as ``@ $.gcp.zones``; nothing runs
before the files are read.  The files must be regular files of at most :data:`MAX_FILE_BYTES`, in UTF-8.
Imported lazily: ``eps plan`` without files never pays for cattrs.
"""

from __future__ import annotations

import json
import keyword
import math
import os
import re
import stat
import tomllib
import typing
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import cattrs
from attrs import frozen
from cattrs.cols import is_namedtuple, namedtuple_dict_structure_factory
from cattrs.errors import IterableValidationError, IterableValidationNote
from cattrs.gen import make_dict_structure_fn, override

from eps.core.model import ClusterConfig, Policy, Stock, Thresholds, VmCapacity, evolve
from eps.core.records import is_record
from eps.shell.config import lane_settings
from eps.shell.config.errors import ConfigError, duration_setting
from eps.shell.config.lane_settings import ClusterDoc
from eps.shell.config.notify import NotifyDoc, NotifySettings, notify_settings
from eps.shell.config.runpod_section import RunpodDoc, runpod_policy, runpod_settings
from eps.shell.config.settings import ClusterAccess, GcpSettings, JobsSettings, RunpodSettings, Settings
from eps.shell.config.ssh import SshDoc, key_exchange
from eps.shell.config.state import StateDoc, state_url, team
from eps.shell.config.storage import StorageDoc, StorageSettings, storage_settings

if TYPE_CHECKING:
    from attrs import AttrsInstance
    from cattrs.dispatch import StructureHook

T = TypeVar("T")

#: The largest user file eps reads (a snapshot of every zone is a few hundred KiB).
MAX_FILE_BYTES = 4 * 2**20
#: Lane names a cluster may not take.
_LANE_NAMES = ("vm", "gcp", "runpod")

# --- the converter ------------------------------------------------------------------------------


def _strict_int(value: object, _: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a whole number, got {value!r}")
    return value


def _strict_float(value: object, _: type) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    return float(value)


def _strict_bool(value: object, _: type) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _strict_str(value: object, target: type) -> str | Enum:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    if target is str:
        return value
    if issubclass(target, Enum):  # a StrEnum field: one of its own words
        words = ", ".join(str(m.value) for m in target)
        try:
            return target(value)
        except ValueError:
            raise ValueError(f"expected one of {words}, got {value!r}") from None
    raise TypeError(f"no strict hook for {target!r}")


def _is_sequence(t: object) -> bool:
    return typing.get_origin(t) in (list, tuple)


def _converter() -> cattrs.Converter:
    # The records are written with postponed annotations; resolve them so cattrs
    # sees real types instead of strings.
    for cls in (_ThresholdsDoc, ClusterDoc, _GcpDoc, RunpodDoc, _VmDoc, _FanoutDoc, _JobsDoc, _LanesDoc, _ConfigDoc):
        attrs.resolve_types(cls)
    conv = cattrs.Converter(forbid_extra_keys=True)
    # The core's records are NamedTuples (eps.core.records'): structure them from dicts, strictly, too.
    conv.register_structure_hook_factory(
        lambda cl: is_namedtuple(cl) or is_record(cl),
        lambda cl, c: namedtuple_dict_structure_factory(cl, c, "from_converter", True),  # forbid extra keys
    )

    def stock(value: object, _: type) -> Stock:
        if not isinstance(value, str):
            raise ValueError(f"expected a stock word, got {value!r}")
        return Stock(value.lower())

    def sequence(value: object, target: type) -> list[object] | tuple[object, ...]:
        """A JSON/TOML array, never a string or an object that happens to be iterable."""
        if not isinstance(value, list):
            raise ValueError(f"expected a list, got {value!r}")
        args = typing.get_args(target)
        item = args[0] if args else Any
        made: list[object] = []
        errors: list[Exception] = []
        for i, v in enumerate(value):
            try:
                made.append(conv.structure(v, item))
            except Exception as exc:  # re-raised below with its index, as cattrs does
                exc.__notes__ = [*getattr(exc, "__notes__", []), IterableValidationNote(f"@ index {i}", i, item)]
                errors.append(exc)
        if errors:
            raise IterableValidationError(f"While structuring {target!r}", errors, target)
        return tuple(made) if typing.get_origin(target) is tuple else made

    # cattrs looks primitives up by class first (singledispatch): override them there.
    # str's hook also serves the StrEnums (their own words only); Stock keeps its own.
    for prim, hook in ((bool, _strict_bool), (int, _strict_int), (float, _strict_float), (str, _strict_str)):
        conv.register_structure_hook(prim, hook)
    conv.register_structure_hook(Stock, stock)
    conv.register_structure_hook_func(_is_sequence, sequence)

    def wall(value: object, target: object) -> str | float | None:  # a duration: text, or seconds
        if value is None or isinstance(value, str):
            return value
        return _strict_int(value, int) if int in typing.get_args(target) else _strict_float(value, float)

    conv.register_structure_hook(str | int | None, wall)
    conv.register_structure_hook(str | float | None, wall)

    def line_or_argv(value: object, _: type) -> str | list[str] | None:
        if value is None or isinstance(value, str):
            return value
        return typing.cast("list[str]", sequence(value, list[str]))  # a list hook's list

    conv.register_structure_hook(str | list[str] | None, line_or_argv)

    # A field named after a Python keyword and "_" (``for_``) is the key itself in the file (``for``).
    def keyword_keys(cl: type[AttrsInstance]) -> StructureHook:
        renames: dict[str, Any] = {f: override(rename=f[:-1]) for f in _keyword_fields(cl)}
        return make_dict_structure_fn(cl, conv, **renames)

    conv.register_structure_hook_factory(lambda cl: attrs.has(cl) and bool(_keyword_fields(cl)), keyword_keys)
    return conv


def _keyword_fields(cl: type[AttrsInstance]) -> list[str]:
    attrs.resolve_types(cl)
    return [a.name for a in attrs.fields(cl) if a.name.endswith("_") and keyword.iskeyword(a.name[:-1])]


def _keyword_key(m: re.Match[str]) -> str:
    return f".{m[1]}" if keyword.iskeyword(m[1]) else m[0]


_CONV: cattrs.Converter | None = None


def structure(data: object, cls: type[T], source: str) -> T:
    """``data`` as ``cls``, strictly; one :class:`ConfigError` line naming ``source`` and the path."""
    if attrs.has(cls):
        attrs.resolve_types(cls)
    return _structure(data, cls, source)


def _structure(data: object, cls: type[T], source: str) -> T:
    global _CONV  # noqa: PLW0603  (built on first use, after every record class exists)
    if _CONV is None:
        _CONV = _converter()
    try:
        return _CONV.structure(data, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError, AttributeError) as exc:
        msgs = cattrs.transform_error(exc) if isinstance(exc, cattrs.BaseValidationError) else [str(exc)]
        first = re.sub(r"\.([a-z]+)_\b", _keyword_key, msgs[0] if msgs else str(exc))  # $.retry.for_ -> .for
        first = re.sub(r"\$\.intents\['([a-z][a-z0-9-]*)'\]", r"$.intents.\1", first)  # ['lora-7b'] -> .lora-7b
        more = f" (+{len(msgs) - 1} more)" if len(msgs) > 1 else ""
        raise ConfigError(f"{source}: {first}{more}") from None


# --- reading a file -------------------------------------------------------------------------------


def read_data(path: str) -> object:
    """A JSON or TOML file (by suffix) as data: a regular file (no device, FIFO or
    directory), at most :data:`MAX_FILE_BYTES`, UTF-8, not nested absurdly deep."""
    kind = "TOML" if path.lower().endswith(".toml") else "JSON"
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{path}: not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{path}: {info.st_size} bytes, more than the {MAX_FILE_BYTES} a file may have")
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: more than the {MAX_FILE_BYTES} bytes a file may have")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        return tomllib.loads(text) if kind == "TOML" else json.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid {kind}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid {kind}: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of thousands of digits
        raise ConfigError(f"{path}: not valid {kind}: {exc}") from None


# --- range checks -----------------------------------------------------------------------------

#: What a number may be, by where it is: (lowest, highest, lowest excluded).
RANGES: dict[str, tuple[float, float, bool]] = {
    "thresholds.trivial_op_s": (0, 86_400, False),
    "thresholds.big_footprint_gb": (0, 10**6, False),
    "thresholds.spot_max_s": (0, 30 * 86_400, False),
    "thresholds.vm_disk_margin_gb": (0, 10**6, False),
    "gcp.poll_interval_s": (0, 3600, True),
    "gcp.flex_start_wait_s": (0, 7200, False),
    "runpod.poll_interval_s": (0, 3600, True),
    "runpod.concurrency": (1, 256, False),
    "fanout.concurrency": (1, 256, False),
    "jobs.linger_s": (0, 7 * 86_400, False),
    "jobs.wait_poll_s": (0, 3600, True),
    "jobs.sync_every_s": (0, 7 * 86_400, False),
    "jobs.wedge_s": (0, 7 * 86_400, True),
    "jobs.stall_after_s": (0, 30 * 86_400, False),
    "jobs.capacity_wait_s": (1, 86_400, False),
    "vm.vcpus": (0, 10**5, False),
    "vm.mem_gb": (0, 10**7, False),
    "vm.free_disk_gb": (0, 10**9, False),
    "clusters.first_park_cap_s": (0, 7 * 86_400, False),
    "clusters.next_park_cap_s": (0, 7 * 86_400, False),
    "clusters.gpus_per_node": (1, 1024, False),
    # Never 0: --mem=0 takes a whole node's memory from everyone else on it.
    "clusters.mem_per_gpu_gb": (0, 10**4, True),
    "clusters.mem_max_gb": (0, 10**5, True),
    "clusters.mem_max_per_gpu_gb": (0, 10**4, True),
    "clusters.cpus_per_gpu": (0, 1024, True),
    "clusters.cpus_max": (0, 10**5, True),
    "clusters.submit_gap_s": (0, 60, False),  # 20 dispatches at once, a minute apart, already wait 20 min
}


def _in_range(source: str, where: str, key: str, value: float | None) -> None:
    if value is None:
        return
    lo, hi, open_low = RANGES[key]
    if value < 0 <= lo and not open_low:
        raise ConfigError(f"{source}: must not be negative @ $.{where} (got {_num(value)})")
    if value > hi or value < lo or (open_low and value == lo):
        low = f"more than {_num(lo)}" if open_low else f"at least {_num(lo)}"
        raise ConfigError(f"{source}: must be {low} and at most {_num(hi)}, got {_num(value)} @ $.{where}")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _listed(source: str, where: str, items: list[str] | None) -> None:
    if items is None:
        return
    if not items:
        raise ConfigError(f"{source}: must not be empty @ $.{where}")
    for i, item in enumerate(items):
        if not item.strip():
            raise ConfigError(f"{source}: must not be blank @ $.{where}[{i}]")


def _base_url(source: str, where: str, url: str | None) -> None:
    """https, or plain http only to this machine (a test server): keys never cross a network in clear."""
    if url is None:
        return
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1"):
        return
    raise ConfigError(f"{source}: must be an https:// URL (http:// only to 127.0.0.1), got {url!r} @ $.{where}")


def _vm_sizes(vm: VmCapacity, source: str) -> None:
    for name, value in vm._asdict().items():
        _in_range(source, f"vm.{name}", f"vm.{name}", value)


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
class _LanesDoc:
    gpu: list[str] | None = None
    cpu: list[str] | None = None


@frozen
class _GcpDoc:
    project: str | None = None
    zones: list[str] | None = None
    image: str | None = None
    gpu_image: str | None = None
    endpoint: str | None = None
    network: str | None = None
    subnetwork: str | None = None
    external_ip: bool | None = None
    disk_type: str | None = None
    service_account: str | None = None
    scopes: list[str] | None = None
    tags: list[str] | None = None
    flex_start_wait_s: int | None = None
    poll_interval_s: float | None = None
    ssh_user: str | None = None
    work_root: str | None = None


@frozen
class _JobsDoc:
    keeper: bool | None = None  # retired: a supervisor owns each dispatch (a note says so)
    supervise: str | None = None
    supervisor_idle_s: float | None = None
    linger_s: int | None = None
    wait_poll_s: float | None = None
    max_time_limit: str | int | None = None
    sync_every_s: int | None = None
    wedge_s: int | None = None
    capacity_wait_s: int | None = None
    stall_after_s: int | None = None
    on_stall: typing.Literal["notify", "stop"] | None = None


@frozen
class _FanoutDoc:
    concurrency: int | None = None  # --count N: copies walked at once, on every lane


@frozen
class _ConfigDoc:
    fanout: _FanoutDoc | None = None
    ssh: SshDoc | None = None
    jobs: _JobsDoc | None = None
    thresholds: _ThresholdsDoc | None = None
    gcp: _GcpDoc | None = None
    runpod: RunpodDoc | None = None
    vm: _VmDoc | None = None
    clusters: list[ClusterDoc] | None = None
    lanes: _LanesDoc | None = None
    storage: StorageDoc | None = None
    notify: NotifyDoc | None = None
    intents: dict[str, Any] | None = None  # each structured by eps.shell.config.intents
    state: StateDoc | None = None


def _set(obj: T, **changes: object) -> T:
    real = {k: (tuple(v) if isinstance(v, list) else v) for k, v in changes.items() if v is not None}
    return evolve(obj, **real) if real else obj


def _section(doc: AttrsInstance, name: str, source: str, where: str | None = None) -> None:
    """Range-check every number of one config section (at ``where``, an entry of a list of
    them) against :data:`RANGES`."""
    for field in attrs.fields(type(doc)):
        key = f"{name}.{field.name}"
        if key in RANGES:
            _in_range(source, f"{where or name}.{field.name}", key, getattr(doc, field.name))


def _thresholds(policy: Policy, t: _ThresholdsDoc, source: str) -> Policy:
    _section(t, "thresholds", source)
    th: Thresholds = _set(
        policy.thresholds,
        trivial_op_s=t.trivial_op_s,
        big_footprint_gb=t.big_footprint_gb,
        spot_max_s=t.spot_max_s,
        vm_disk_margin_gb=t.vm_disk_margin_gb,
    )
    return evolve(policy, thresholds=th)


#: A GCE network tag (RFC 1035 label: what Compute accepts in ``tags.items``).
_NETWORK_TAG = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
#: A scope given by its short name (``cloud-platform``) is this URL plus the name.
_SCOPE_BASE = "https://www.googleapis.com/auth/"


#: A login name eps may create on its VMs (what GCE's guest agent accepts from ssh-keys).
_LOGIN = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


def _work_root(source: str, key: str, value: str | None) -> None:
    """A work root is one line of path: absolute, or relative to the login's home."""
    if value is not None and (not value.strip() or any(c in value for c in "\0\n\r") or value.startswith("-")):
        raise ConfigError(f"{source}: must be a one-line path @ $.{key} (got {value!r})")


def _gcp(base: GcpSettings, g: _GcpDoc, source: str) -> GcpSettings:
    _section(g, "gcp", source)
    _base_url(source, "gcp.endpoint", g.endpoint)
    for key in ("image", "gpu_image", "network", "subnetwork", "disk_type", "service_account"):
        value = getattr(g, key)
        if value is not None and (not value.strip() or any(c.isspace() for c in value)):
            raise ConfigError(f"{source}: must be one word, not blank @ $.gcp.{key} (got {value!r})")
    _listed(source, "gcp.scopes", g.scopes)
    if g.tags is not None:
        for i, tag in enumerate(g.tags):
            if not _NETWORK_TAG.fullmatch(tag):
                raise ConfigError(
                    f"{source}: a network tag is 1-63 of a-z, 0-9 and -, starting with a letter @ $.gcp.tags[{i}]"
                    f" (got {tag!r})"
                )
    if g.ssh_user is not None and not _LOGIN.fullmatch(g.ssh_user):
        raise ConfigError(
            f"{source}: a login name is 1-32 of a-z, 0-9, _ and -, starting with a letter or _ @ $.gcp.ssh_user"
            f" (got {g.ssh_user!r})"
        )
    _work_root(source, "gcp.work_root", g.work_root)
    wait = g.flex_start_wait_s
    if wait is not None and 0 < wait < 90:
        raise ConfigError(f"{source}: must be 0 (only capacity there now) or 90..7200 s @ $.gcp.flex_start_wait_s")
    scopes = None if g.scopes is None else [s if "://" in s else _SCOPE_BASE + s for s in g.scopes]
    return _set(base, project=g.project, image=g.image, gpu_image=g.gpu_image, endpoint=g.endpoint, network=g.network,
                subnetwork=g.subnetwork, external_ip=g.external_ip, disk_type=g.disk_type, scopes=scopes, tags=g.tags,
                service_account=g.service_account, flex_start_wait_s=g.flex_start_wait_s, ssh_user=g.ssh_user,
                poll_interval_s=g.poll_interval_s, work_root=g.work_root)  # fmt: skip


def _runpod(base: RunpodSettings, r: RunpodDoc, source: str) -> RunpodSettings:
    _section(r, "runpod", source)
    _base_url(source, "runpod.base_url", r.base_url)
    _listed(source, "runpod.data_centers", r.data_centers)
    _work_root(source, "runpod.work_root", r.work_root)
    return runpod_settings(base, r)


def _clusters(
    policy: Policy, access: list[ClusterAccess], docs: list[ClusterDoc], source: str
) -> tuple[Policy, list[ClusterAccess]]:
    clusters = list(policy.clusters)
    for i, c in enumerate(docs):
        _section(c, "clusters", source, f"clusters[{i}]")
        gap = lane_settings.submit_gap(c.submit_gap, f"clusters[{i}]", source)
        _in_range(source, f"clusters[{i}].submit_gap", "clusters.submit_gap_s", gap)
        if c.name in _LANE_NAMES:
            raise ConfigError(f"{source}: {c.name!r} is a lane name, not a cluster @ $.clusters[{i}].name")
        if not c.name.strip():
            raise ConfigError(f"{source}: a cluster needs a name @ $.clusters[{i}].name")
        _listed(source, f"clusters[{i}].login", c.login)
        _listed(source, f"clusters[{i}].qos_ladder", c.qos_ladder)
        existing = next((k for k, x in enumerate(clusters) if x.name == c.name), None)
        current = clusters[existing] if existing is not None else ClusterConfig(name=c.name)
        updated = _set(
            current,
            partition=c.partition or None,  # "" (none) is cleared by lane_settings.facts
            account=c.account or None,
            qos_ladder=c.qos_ladder,
            dev_qos=c.dev_qos,
            dev_qos_for_debug=c.dev_qos_for_debug,
            first_park_cap_s=c.first_park_cap_s,
            next_park_cap_s=c.next_park_cap_s,
            advance_on_self_cap=c.advance_on_self_cap,
            gpus_per_node=c.gpus_per_node,
            gpu_model=c.gpu_model,
            mem_per_gpu_gb=c.mem_per_gpu_gb,
            mem_max_gb=c.mem_max_gb,
            mem_max_per_gpu_gb=c.mem_max_per_gpu_gb,
            cpus_per_gpu=c.cpus_per_gpu,
            cpus_max=c.cpus_max,
            user_in_job_name=c.user_in_job_name,
            access=c.access,
            submit_gap_s=gap,
            cleanup_trap=c.cleanup_trap,
        )
        updated = lane_settings.per_tier(updated, c.tier_partition, c.tier_account, f"clusters[{i}]", source)
        updated = lane_settings.facts(updated, c, f"clusters[{i}]", source)
        if existing is None:
            clusters.append(updated)
        else:
            clusters[existing] = updated
        before = next((a for a in access if a.name == c.name), None)
        access = [a for a in access if a.name != c.name]
        master = c.login_master if c.login_master is not None else before.master if before else None
        login = tuple(c.login or ())
        access.append(ClusterAccess(c.name, login, c.user, c.work_root, lane_settings.master(
            login, master, f"clusters[{i}]", source), lane_settings.grants_file(c.grants, f"clusters[{i}]", source)))
    return evolve(policy, clusters=tuple(clusters)), access


def _jobs(jobs: JobsSettings, doc: _JobsDoc, source: str) -> JobsSettings:
    if doc.supervise not in (None, "detached", "inline"):
        raise ConfigError(f'{source}: supervise must be "detached" or "inline" @ $.jobs.supervise')
    if doc.supervisor_idle_s is not None and not 0 < doc.supervisor_idle_s <= 86400:
        raise ConfigError(f"{source}: supervisor_idle_s must be in (0, 86400] @ $.jobs.supervisor_idle_s")
    return _set(jobs, linger_s=doc.linger_s, wait_poll_s=doc.wait_poll_s, supervise=doc.supervise, wedge_s=doc.wedge_s,
                supervisor_idle_s=doc.supervisor_idle_s, sync_every_s=doc.sync_every_s, on_stall=doc.on_stall,
                capacity_wait_s=doc.capacity_wait_s, stall_after_s=doc.stall_after_s)  # fmt: skip


def settings_from_config(data: object, base: Settings, source: str) -> Settings:
    """The settings with ``data`` (a parsed config file) applied over ``base``; one
    :class:`ConfigError` line for the first thing wrong in it."""
    doc: _ConfigDoc = _structure(data, _ConfigDoc, source)
    policy: Policy = base.policy
    notes: tuple[str, ...] = base.notes
    if doc.thresholds is not None:
        policy = _thresholds(policy, doc.thresholds, source)
    if doc.vm is not None:
        vm = VmCapacity(doc.vm.vcpus, doc.vm.mem_gb, doc.vm.free_disk_gb)
        _vm_sizes(vm, source)
        policy = evolve(policy, vm=vm)
    gcp = base.gcp
    if doc.gcp is not None:
        if doc.gcp.zones == []:
            raise ConfigError(f"{source}: at least one zone is needed @ $.gcp.zones")
        _listed(source, "gcp.zones", doc.gcp.zones)
        if doc.gcp.zones is not None:
            policy = evolve(policy, gcp_zones=tuple(doc.gcp.zones))
        gcp = _gcp(gcp, doc.gcp, source)
    runpod = base.runpod
    if doc.runpod is not None:
        runpod = _runpod(runpod, doc.runpod, source)
        policy = runpod_policy(policy, doc.runpod, source)
    fanout = base.fanout_concurrency
    if doc.fanout is not None:
        _section(doc.fanout, "fanout", source)
        fanout = doc.fanout.concurrency or fanout
    jobs = base.jobs
    if doc.jobs is not None:
        _section(doc.jobs, "jobs", source)
        jobs = _jobs(jobs, doc.jobs, source)
        if doc.jobs.keeper is not None:
            notes = (*notes, f"{source}: [jobs] keeper is retired (a supervisor owns every dispatch): remove it")
        jobs = _set(jobs, max_time_limit_s=duration_setting(source, "jobs.max_time_limit", doc.jobs.max_time_limit))
    access = list(base.access)
    if doc.clusters is not None:
        policy, access = _clusters(policy, access, doc.clusters, source)
    if doc.intents is not None:  # its module only for a file that has [intents]
        from eps.shell.config.intents import IntentsDoc, apply

        policy = apply(policy, _structure({"intents": doc.intents}, IntentsDoc, source).intents, source)
    if doc.lanes is not None:  # after the clusters: the orders name them
        policy = lane_settings.apply(policy, doc.lanes.gpu, doc.lanes.cpu, source)
    kex = base.ssh_kex if doc.ssh is None else key_exchange(doc.ssh.key_exchange, source)
    storage = doc.storage and storage_settings(base.storage or StorageSettings(), doc.storage, source)
    notify = doc.notify and notify_settings(base.notify or NotifySettings(), doc.notify, source)
    url = base.state_url if doc.state is None else state_url(base.state_url, doc.state, source)
    host, lease = (base.state_host, base.state_lease_s) if doc.state is None else team(
        base.state_host, base.state_lease_s, doc.state, source)  # fmt: skip
    return evolve(base, policy=policy, gcp=gcp, runpod=runpod, access=tuple(access), fanout_concurrency=fanout,
                  jobs=jobs, notes=notes, ssh_kex=kex, storage=storage or base.storage,
                  notify=notify or base.notify, state_url=url, state_host=host, state_lease_s=lease)  # fmt: skip
