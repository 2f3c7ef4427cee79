"""The job file (``eps plan --job job.toml``, ``eps execute --job job.toml``): the job's
options in one TOML (or JSON) file, for a job dispatched again and again.

```toml
intent = "cpu-small"
duration = "2h"            # any duration eps reads, or whole seconds
restartable = true
footprint_gb = 20
gradient_fit = false
count = 4                  # parallel copies
sweep = 6                  # N independent tasks, one dispatch (EPS_TASK_INDEX 0..N-1); not with a CPU count
sweep_parallel = 2         # at most K of the sweep's tasks at once
backend = "gcp"            # a pin (P10): vm, a cluster (fellows), gcp, runpod
workdir = "."              # relative to this file's folder
setup = "pip install -r requirements.txt"
env = ["HF_TOKEN", "MODE=fast"]
time_limit = "3h"
command = "python analyse.py --out $EPS_OUTPUT_DIR/result.csv"   # a shell line, or a list: an argv
sync_every = "10m"         # pull $EPS_OUTPUT_DIR this often while the job runs (0: never)
stall_after = "30m"        # silent log and outputs (a GPU job: idle GPUs) this long is stalled (0/"off": not watched)
on_stall = "notify"        # what a stall does: notify, or stop the job (exit 125)
fall_through = false       # a free cluster that says it is set up wrong: skip it (true) or stop (false)
storage = "s3://my-bucket/runs"   # outputs, checkpoints, log straight from the machine ("none": not this job)
inputs = ["s3://my-bucket/data/shards:shards"]   # URL[:DEST] copied into the workdir before setup
notify = ["env:SLACK_URL"]   # this job's own targets: apprise URLs, or env:NAME (the URL in variable NAME)
gpu = ["a100-80", "h100"]  # a GPU job's allowed GPU models (l4, a100-40, a100-80, h100, h200, b200, any)
gpu_mem = 80               # least memory per GPU, GB (default: the intent's)

[retry]                    # the retry policy (see "Jobs that heal" in the README)
on = ["interruption", "error"]   # a list of events: no-capacity, interruption, error
for = "6h"                 # keep retrying this long from submission
max_restarts = 5           # relaunch the job at most this many times (0..1000)
```

Every field is optional; the command line overrides each one (``--retry``, ``--retry-for``,
``--max-restarts`` and ``--sync-every`` one key each of ``[retry]`` and ``sync_every``).
``[retry] on`` is a list of events, never a comma string.  Parsed by the same strict
converter as every other user file (:mod:`eps.shell.config.convert`): no coercion, no unknown key,
and one line naming the file and the path of the first bad value, such as
``job.toml: bad duration 'soon': ... @ $.duration``; the events, restarts and durations
are checked by the same functions as the flags'.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple, TypeVar

from attrs import frozen

from eps.core.durations import parse_duration
from eps.core.healing import job_max_restarts, job_retry
from eps.core.stall import check_on_stall, parse_stall_after
from eps.shell.config.convert import read_data, structure
from eps.shell.config.settings import ConfigError

V = TypeVar("V")
T = TypeVar("T")


@frozen
class _RetryDoc:
    on: list[str] | None = None
    for_: str | int | None = None  # the key ``for`` (a Python keyword)
    max_restarts: int | None = None


@frozen
class _JobDoc:
    intent: str | None = None
    duration: str | int | None = None
    restartable: bool | None = None
    footprint_gb: float | None = None
    gradient_fit: bool | None = None
    count: int | None = None
    sweep: int | None = None
    sweep_parallel: int | None = None
    backend: str | None = None
    workdir: str | None = None
    setup: str | None = None
    env: list[str] | None = None
    time_limit: str | int | None = None
    command: str | list[str] | None = None
    sync_every: str | int | None = None
    stall_after: str | int | None = None
    on_stall: str | None = None
    fall_through: bool | None = None
    storage: str | None = None
    inputs: list[str] | None = None
    notify: list[str] | None = None
    gpu: str | list[str] | None = None
    gpu_mem: int | None = None
    retry: _RetryDoc | None = None


class JobFile(NamedTuple):
    """A job file's values, checked; ``None`` where the file says nothing."""

    path: str
    intent: str | None = None
    duration_s: int | None = None
    restartable: bool | None = None
    footprint_gb: float | None = None
    gradient_fit: bool | None = None
    count: int | None = None  # type: ignore[assignment]  # shadows tuple.count on purpose
    pin: str | None = None
    workdir: str | None = None  # absolute (relative paths are taken from the file's folder)
    setup: str | None = None
    env: tuple[str, ...] | None = None
    time_limit_s: int | None = None
    command: tuple[str, ...] | None = None
    retry: tuple[str, ...] | None = None
    retry_for_s: int | None = None
    max_restarts: int | None = None
    sync_every_s: int | None = None
    stall_after_s: int | None = None
    on_stall: str | None = None
    fall_through: bool | None = None
    storage: str | None = None  # a URL or "none"
    inputs: tuple[str, ...] | None = None  # URL[:DEST] each
    notify: tuple[str, ...] | None = None  # an apprise URL or env:NAME each (resolved at execute)
    gpu_models: tuple[str, ...] | None = None  # ``gpu``: the GPU models allowed (eps.core.gpus)
    gpu_mem_gb: int | None = None  # ``gpu_mem``: least memory per GPU, GB
    sweep: int | None = None  # N tasks of the job (eps.core.sweep)
    sweep_parallel: int | None = None  # at most K of them at once


def _seconds(path: str, field: str, value: str | int | None, *, positive: bool = False) -> int | None:
    if value is None:
        return None
    try:
        seconds = parse_duration(value) if isinstance(value, str) else parse_duration(str(value))
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc} @ $.{field}") from None
    if positive and seconds <= 0:
        raise ConfigError(f"{path}: must be positive @ $.{field}")
    return seconds


def _gpus(path: str, doc: _JobDoc) -> tuple[tuple[str, ...] | None, int | None]:
    """The file's ``gpu`` and ``gpu_mem``, checked as ``--gpu`` and ``--gpu-mem`` are."""
    from eps.core.gpus import parse_gpu_mem, parse_gpu_models

    try:
        gpus = None if doc.gpu is None else parse_gpu_models(doc.gpu)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc} @ $.gpu") from None
    try:
        mem = None if doc.gpu_mem is None else parse_gpu_mem(doc.gpu_mem)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc} @ $.gpu_mem") from None
    return gpus, mem


def _sweep(path: str, doc: _JobDoc) -> None:
    """The file's ``sweep`` and ``sweep_parallel``, checked as ``--sweep`` and ``--sweep-parallel`` are
    (that K is at most N, with the rest of the job, when it is planned)."""
    from eps.core.sweep import sweep_parallel_value, sweep_value

    _checked(path, "sweep", sweep_value, doc.sweep)
    _checked(path, "sweep_parallel", sweep_parallel_value, doc.sweep_parallel)


def load_job_file(path: str) -> JobFile:
    """Read and check a job file; :class:`ConfigError` (one line, with the path) if anything is wrong."""
    return job_file_of(path, read_data(path))


def job_file_of(path: str, data: object) -> JobFile:
    """Check ``data``, a job file's table as read from ``path`` (a pipeline's phase too)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a job file is a table of job options @ $")
    if not isinstance(data.get("retry", {}), dict):
        raise ConfigError(f"{path}: retry is a table ([retry] with on, for, max_restarts) @ $.retry")
    doc: _JobDoc = structure(data, _JobDoc, path)
    if doc.count is not None and doc.count < 1:
        raise ConfigError(f"{path}: count must be at least 1, got {doc.count} @ $.count")
    _sweep(path, doc)
    if doc.footprint_gb is not None and doc.footprint_gb < 0:
        raise ConfigError(f"{path}: must not be negative @ $.footprint_gb (got {doc.footprint_gb:g})")
    for field in ("intent", "backend", "setup", "workdir"):
        value = getattr(doc, field)
        if value is not None and not value.strip():
            raise ConfigError(f"{path}: must not be blank @ $.{field}")
    command: tuple[str, ...] | None = None
    if isinstance(doc.command, str):
        if not doc.command.strip():
            raise ConfigError(f"{path}: must not be blank @ $.command")
        command = (doc.command,)
    elif doc.command is not None:
        if not doc.command:
            raise ConfigError(f"{path}: must not be empty @ $.command")
        command = tuple(doc.command)
    gpus, gpu_mem = _gpus(path, doc)
    retry = doc.retry or _RetryDoc()
    workdir = doc.workdir
    if workdir is not None:
        workdir = os.path.join(os.path.dirname(os.path.abspath(path)), os.path.expanduser(workdir))
    return JobFile(
        path=path,
        intent=doc.intent,
        duration_s=_seconds(path, "duration", doc.duration),
        restartable=doc.restartable,
        footprint_gb=doc.footprint_gb,
        gradient_fit=doc.gradient_fit,
        count=doc.count,
        pin=doc.backend,
        workdir=workdir,
        setup=doc.setup,
        env=None if doc.env is None else tuple(doc.env),
        time_limit_s=_seconds(path, "time_limit", doc.time_limit, positive=True),
        command=command,
        fall_through=doc.fall_through,
        storage=doc.storage,
        inputs=None if doc.inputs is None else tuple(doc.inputs),
        notify=None if doc.notify is None else tuple(doc.notify),
        gpu_models=gpus,
        gpu_mem_gb=gpu_mem,
        sweep=doc.sweep,
        sweep_parallel=doc.sweep_parallel,
        retry=_checked(path, "retry.on", job_retry, retry.on),
        retry_for_s=_seconds(path, "retry.for", retry.for_),
        max_restarts=_checked(path, "retry.max_restarts", job_max_restarts, retry.max_restarts),
        sync_every_s=_seconds(path, "sync_every", doc.sync_every),
        stall_after_s=_checked(path, "stall_after", parse_stall_after, doc.stall_after),
        on_stall=_checked(path, "on_stall", check_on_stall, doc.on_stall),
    )


def _checked(path: str, field: str, check: Callable[[V], T], value: V | None) -> T | None:
    """``check(value)`` (``None`` stays ``None``), its ValueError one line naming the key."""
    if value is None:
        return None
    try:
        return check(value)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc} @ $.{field}") from None
