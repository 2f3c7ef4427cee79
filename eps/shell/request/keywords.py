"""A job as the front doors that take keyword arguments give it (the Python API, the MCP
server): durations as ``"2h"`` or seconds, the retry policy as words, the command as a
shell line or an argv.  :class:`Job`'s values are checked when it is made, with the
messages the command line gives (:class:`~eps.core.model.JobError`, a ``ValueError``);
``JobRequest.of(job)`` is the service's record of it (:class:`~eps.shell.request.job.JobRequest`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from eps.core.durations import parse_duration
from eps.core.gpus import parse_gpu_mem, parse_gpu_models
from eps.core.healing import job_max_restarts, job_retry
from eps.core.model import Job as CoreJob
from eps.core.model import JobError, Resource
from eps.core.stall import check_on_stall, parse_stall_after
from eps.core.sweep import check_sweep
from eps.shell.request.shipping import Shipping

__all__ = ["Job", "seconds"]

V = TypeVar("V")
T = TypeVar("T")


def seconds(value: str | float, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise JobError(f"bad_{what}", f"{what} must be a duration such as '2h' or a number of seconds, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise JobError(f"bad_{what}", f"bad {what} {value!r}: a finite number of seconds")
    try:
        return parse_duration(str(value))
    except ValueError as exc:
        raise JobError(f"bad_{what}", str(exc)) from None


def _checked(what: str, check: Callable[[V], T], value: V) -> T:
    """``check(value)``; its ValueError as :class:`JobError` ``bad_<what>``."""
    try:
        return check(value)
    except ValueError as exc:
        raise JobError(f"bad_{what}", str(exc)) from None



@dataclass(frozen=True)
class Job:
    """A job for :func:`eps.plan` and :func:`eps.execute`: its values are checked when it is
    made (the rules and messages of ``eps plan``/``execute``'s flags); whether it can be
    planned (its intent, its pin, its GPUs) is said by ``plan()``/``execute()``, which check
    it once, as the command line does.  ``JobRequest.of(job)`` is the service's record of it.

    ``intent`` (see ``eps intents``), ``duration`` (``"1h30m"``, ``"90min"``,
    ``"01:30:00"`` or seconds; ``None``, the default: unknown, taken as long: never the
    shared VM, no spot unless restartable, the time limit the lane's maximum),
    ``restartable``, ``footprint_gb``, ``gradient_fit``, ``count`` (parallel copies),
    ``backend`` (pin a lane: ``"fellows"``, ``"gcp"``, ...), and for :func:`execute`:
    ``command`` (one string is a shell line, a list an argv), ``workdir``, ``setup``,
    ``env`` (``"KEY"`` or ``"KEY=VALUE"``), ``time_limit``.  The retry policy (README,
    "Jobs that heal"): ``retry`` (events: ``("interruption", "error")`` or
    ``"interruption,error"``; ``None``: the default), ``retry_for`` (a duration),
    ``max_restarts`` (0..1000), ``sync_every`` (a duration; 0: never; ``None``: ``[jobs]
    sync_every_s``), ``stall_after`` (a duration; 0 or ``"off"``: not watched; ``None``: ``[jobs]
    stall_after_s``) and ``on_stall`` (``"notify"`` or ``"stop"``).
    ``fall_through``: a free cluster that says it is set up wrong is skipped
    instead of ending the dispatch.  ``gpu`` (GPU models: ``"l4,a100-80"`` or a list; ``"any"``)
    and ``gpu_mem`` (least GB per GPU; ``None``: the intent's), as ``--gpu`` and ``--gpu-mem``.
    ``sweep`` (N independent tasks of the job, one dispatch; ``EPS_TASK_INDEX`` 0..N-1) and
    ``sweep_parallel`` (at most K of them at once), as ``--sweep`` and ``--sweep-parallel``.
    ``storage`` (an ``s3://``/``gs://`` URL, ``"none"``; ``None``: the
    config's ``[storage] url``) and ``inputs`` (``URL[:DEST]`` each), for :func:`execute`.  ``notify``: the
    job's own notification targets, each an apprise URL or ``env:NAME`` (the URL in that variable: the
    token-safe form), for :func:`execute`.  ``settings_env``:
    the environment ``plan()`` and ``execute()`` read the settings from when they are given
    no ``env`` (``None``: ``os.environ``).
    """

    intent: str
    duration: str | int | float | None = None  # None: unknown, taken as long (see ``eps plan --help``)
    restartable: bool = False
    footprint_gb: float = 0.0
    gradient_fit: bool = False
    count: int = 1
    backend: str | None = None
    command: str | Sequence[str] = ()
    workdir: str | None = None
    setup: str | None = None
    env: Sequence[str] = ()
    time_limit: str | int | None = None
    retry: str | Sequence[str] | None = None
    retry_for: str | int | float | None = None
    max_restarts: int | None = None
    sync_every: str | int | float | None = None
    stall_after: str | int | None = None
    on_stall: str | None = None
    fall_through: bool = False
    storage: str | None = None
    inputs: Sequence[str] = ()
    gpu: str | Sequence[str] | None = None
    gpu_mem: int | None = None
    sweep: int = 1
    sweep_parallel: int | None = None
    notify: Sequence[str] = field(default=(), repr=False)  # URLs carry tokens: not in repr
    settings_env: Mapping[str, str] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int):
            raise JobError("bad_count", f"count must be a whole number, got {self.count!r}")
        if self.count < 1:
            raise JobError("bad_count", f"count must be at least 1, got {self.count}")
        fp = self.footprint_gb
        if isinstance(fp, bool) or not isinstance(fp, int | float) or fp < 0 or not math.isfinite(fp):
            raise JobError("bad_footprint", f"footprint must be a finite number >= 0, got {fp!r}")
        if self.time_limit is not None and seconds(self.time_limit, "time_limit") <= 0:
            raise JobError("time_limit", "--time-limit must be positive")
        if self.max_restarts is not None:
            _checked("max_restarts", job_max_restarts, self.max_restarts)
        check_sweep(self.core(), Resource.GPU)  # every value of the core's job, checked (a CPU --count: at plan)
        self.shipping()

    def core(self) -> CoreJob:
        """The core's record of this job (what ``plan()`` reads)."""
        command = (self.command,) if isinstance(self.command, str) else tuple(self.command)
        return CoreJob(
            intent=self.intent,
            duration_s=None if self.duration is None else seconds(self.duration, "duration"),
            restartable=bool(self.restartable),
            footprint_gb=float(self.footprint_gb),
            gradient_fit=bool(self.gradient_fit),
            count=self.count,
            pin=self.backend,
            command=command,
            retry=None if self.retry is None else _checked("retry", job_retry, self.retry),
            retry_for_s=None if self.retry_for is None else seconds(self.retry_for, "retry_for"),
            max_restarts=self.max_restarts,
            sync_every_s=None if self.sync_every is None else seconds(self.sync_every, "sync_every"),
            stall_after_s=None if self.stall_after is None else _checked(
                "stall_after", parse_stall_after, self.stall_after),
            on_stall=None if self.on_stall is None else _checked("on_stall", check_on_stall, self.on_stall),
            fall_through=bool(self.fall_through),
            gpu_models=() if self.gpu is None else _checked("gpu", parse_gpu_models, self.gpu),
            gpu_mem_gb=None if self.gpu_mem is None else _checked("gpu_mem", parse_gpu_mem, self.gpu_mem),
            sweep=self.sweep,
            sweep_parallel=self.sweep_parallel,
        )

    def shipping(self) -> Shipping:
        """Its execute-only parts (workdir, setup, env, time limit) as the service takes them."""
        limit = None if self.time_limit is None else seconds(self.time_limit, "time_limit")
        return Shipping(self.workdir, self.setup, tuple(self.env), limit, self.storage, tuple(self.inputs))

    def argv(self) -> list[str]:
        """The same job as ``eps`` job options (and ``-- COMMAND``)."""
        core = self.core()
        out = [core.intent, *([] if core.duration_s is None else ["--duration", str(core.duration_s)]),
               "--footprint-gb", repr(core.footprint_gb), "--count", str(core.count)]  # fmt: skip
        out += ["--restartable"] if core.restartable else []
        out += ["--gradient-fit"] if core.gradient_fit else []
        out += ["--pin", core.pin] if core.pin else []
        out += ["--workdir", self.workdir] if self.workdir else []
        out += ["--setup", self.setup] if self.setup else []
        for item in self.env:
            out += ["--env", item]
        out += ["--storage", self.storage] if self.storage else []
        for item in self.inputs:
            out += ["--input", item]
        if self.time_limit is not None:
            out += ["--time-limit", str(seconds(self.time_limit, "time_limit"))]
        out += ["--retry", ",".join(core.retry)] if core.retry is not None else []
        out += ["--retry-for", str(core.retry_for_s)] if core.retry_for_s is not None else []
        out += ["--max-restarts", str(core.max_restarts)] if core.max_restarts is not None else []
        out += ["--sync-every", str(core.sync_every_s)] if core.sync_every_s is not None else []
        out += ["--stall-after", str(core.stall_after_s)] if core.stall_after_s is not None else []
        out += ["--on-stall", core.on_stall] if core.on_stall is not None else []
        out += ["--fall-through"] if core.fall_through else []
        out += ["--gpu", ",".join(core.gpu_models)] if core.gpu_models else []
        out += ["--gpu-mem", str(core.gpu_mem_gb)] if core.gpu_mem_gb is not None else []
        out += ["--sweep", str(core.sweep)] if core.sweep != 1 else []
        out += ["--sweep-parallel", str(core.sweep_parallel)] if core.sweep_parallel is not None else []
        return [*out, "--", *core.command] if core.command else out
