"""One job request, whichever door it came in by.

:class:`JobRequest` is the record every operation of the service takes: the core's job
(what ``plan()`` reads), how it ships (:class:`~eps.shell.request.shipping.Shipping`), its
own notification targets, and where a job file gave its values.  It is made by one of three
constructors, each checking what its door gives with that door's messages:

- :meth:`JobRequest.from_flags`: the command line's options (already read by argparse), over
  a job file's (``--job``), over the defaults;
- :meth:`JobRequest.from_file`: a job file alone;
- :meth:`JobRequest.from_mapping`: keyword values as the Python API and the MCP server take
  them (durations as ``"2h"`` or seconds, the retry policy as words, the command as a shell
  line or an argv).

None of them plans: whether the job can be planned (its intent, its pin, its GPUs) is the
service's check, made once (:meth:`JobRequest.named` says a refused value by the name its
door gave it).  :class:`eps.shell.request.keywords.Job` is the Python API's spelling of
:meth:`JobRequest.from_mapping`.  Cheap to import: ``eps plan`` builds one (no ``typing``,
no ``dataclasses``).
"""

from __future__ import annotations

from eps.core.model import Job as CoreJob
from eps.core.model import JobError
from eps.core.records import NamedTuple
from eps.shell.request.shipping import Shipping

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence
    from types import SimpleNamespace
    from typing import Any

    from eps.shell.request.jobfile import JobFile
    from eps.shell.request.keywords import Job

__all__ = ["CORE_FIELDS", "DEFAULTS", "FILE_KEYS", "FLAGS", "JobRequest"]


#: A job file's key for a field of the core's job (where it differs from the field's name).
FILE_KEYS = {"pin": "backend", "duration_s": "duration", "time_limit_s": "time_limit", "retry": "retry.on",
             "retry_for_s": "retry.for", "max_restarts": "retry.max_restarts", "sync_every_s": "sync_every",
             "stall_after_s": "stall_after", "gpu_models": "gpu", "gpu_mem_gb": "gpu_mem"}  # fmt: skip
#: The core job's fields a request carries (the rest are set at execute: workdir, env names, ...).
CORE_FIELDS = ("intent", "duration_s", "restartable", "footprint_gb", "gradient_fit", "count", "pin", "command",
               "retry", "retry_for_s", "max_restarts", "sync_every_s", "stall_after_s", "on_stall", "fall_through",
               "gpu_models", "gpu_mem_gb", "sweep", "sweep_parallel")  # fmt: skip
#: The command line's flags (their ``argparse`` names) and the core job's field each gives.
FLAGS = {"intent": "intent", "duration": "duration_s", "restartable": "restartable", "footprint_gb": "footprint_gb",
         "gradient_fit": "gradient_fit", "count": "count", "pin": "pin", "retry": "retry",
         "retry_for": "retry_for_s", "max_restarts": "max_restarts", "sync_every": "sync_every_s",
         "stall_after": "stall_after_s", "on_stall": "on_stall", "fall_through": "fall_through",
         "gpu": "gpu_models", "gpu_mem": "gpu_mem_gb", "sweep": "sweep",
         "sweep_parallel": "sweep_parallel"}  # fmt: skip
#: What a job is when nothing gives a value (argparse leaves every job option ``None``).
DEFAULTS: dict[str, object] = {"restartable": False, "footprint_gb": 0.0, "gradient_fit": False, "count": 1,
                               "fall_through": False, "command": (), "gpu_models": (), "sweep": 1}  # fmt: skip


class JobRequest(NamedTuple):
    """A job as asked for: ``job``, the core's record (what ``plan()`` reads); ``shipping``,
    its execute-only parts; ``notify``, its own notification targets (URLs carry tokens: not
    in ``repr``) and ``notify_where``, where they were given (the one line a bad one gets
    names it); ``file``, the job file it was read from (``--job``) and ``file_gave``, the
    core fields whose value that file gave."""

    job: CoreJob
    shipping: Shipping = Shipping()
    notify: tuple[str, ...] = ()
    notify_where: str = "notify"
    file: str | None = None
    file_gave: frozenset[str] = frozenset()

    @classmethod
    def from_flags(cls, ns: argparse.Namespace | SimpleNamespace, command: Sequence[str] = ()) -> JobRequest:
        """The command line's job: each flag given, else the job file's value (``--job``), else
        the default; the command after ``--`` wins over the file's."""
        path = getattr(ns, "job", None) or None
        given = {name: value for flag, name in FLAGS.items() if (value := getattr(ns, flag, None)) is not None}
        if command:
            given["command"] = tuple(command)
        for flag, name in (("workdir", "workdir"), ("setup", "setup"), ("env", "env"), ("time_limit", "time_limit"),
                           ("storage", "storage"), ("input", "inputs"), ("notify", "notify")):  # fmt: skip
            if (value := getattr(ns, flag, None)) is not None:
                given[name] = tuple(value) if isinstance(value, list) else value
        if path is None:
            return cls._built(given, None, "--notify")
        from eps.shell.request.jobfile import load_job_file

        in_file = _file_values(load_job_file(path))
        where = "--notify" if "notify" in given or "notify" not in in_file else f"{path}: notify"
        return cls._built({**in_file, **given}, path, where, frozenset(in_file) - frozenset(given))

    @classmethod
    def from_file(cls, path: str) -> JobRequest:
        """A job file's job (``ConfigError``, one line naming the file and the key, if anything in it is wrong)."""
        from types import SimpleNamespace

        return cls.from_flags(SimpleNamespace(job=path))

    @classmethod
    def of_file(cls, values: JobFile, notify_where: str) -> JobRequest:
        """The request of a job file's checked ``values`` alone (a pipeline's phase: no flags)."""
        in_file = _file_values(values)
        return cls._built(in_file, values.path, notify_where, frozenset(in_file))

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> JobRequest:
        """The job of keyword values as :class:`Job` names them (the Python API's and the MCP
        server's): each checked, with the command line's messages (:class:`JobError`)."""
        from eps.shell.request.keywords import Job

        return cls.of(Job(**values))  # type: ignore[arg-type]  # each value is checked by Job

    @classmethod
    def of(cls, job: Job) -> JobRequest:
        """The request of the Python API's :class:`~eps.shell.request.keywords.Job` (checked when it was made)."""
        return cls(job.core(), job.shipping(), tuple(job.notify))

    @classmethod
    def _built(cls, values: Mapping[str, object], file: str | None, notify_where: str,
               file_gave: frozenset[str] = frozenset()) -> JobRequest:  # fmt: skip
        """The request of checked ``values`` (the core's field names, and the shipping's)."""
        if not values.get("intent"):
            raise JobError("usage", "eps: an intent is needed (see `eps intents`), or a job file with one (--job)")
        core: dict[str, Any] = {name: values.get(name, DEFAULTS.get(name)) for name in CORE_FIELDS}
        got: dict[str, Any] = dict(values)
        shipping = Shipping(got.get("workdir"), got.get("setup"), tuple(got.get("env") or ()), got.get("time_limit"),
                            got.get("storage"), tuple(got.get("inputs") or ()))  # fmt: skip
        return cls(CoreJob(**core), shipping, tuple(got.get("notify") or ()), notify_where, file, file_gave)

    def __repr__(self) -> str:  # the notification URLs carry tokens: never in a repr
        return (f"JobRequest(job={self.job!r}, shipping={self.shipping!r}, notify=<{len(self.notify)}>, "
                f"notify_where={self.notify_where!r}, file={self.file!r}, file_gave={self.file_gave!r})")

    def named(self, exc: JobError) -> JobError:
        """``exc`` as this request's door names the value it refused: a job file's value is
        ``FILE: ... @ $.KEY``, as every other bad value of a user file is; else ``exc``."""
        if self.file is None or exc.field is None or exc.field not in self.file_gave:
            return exc
        return JobError(exc.code, f"{self.file}: {exc.plain} @ $.{FILE_KEYS.get(exc.field, exc.field)}", exc.job)


def _file_values(values: JobFile) -> dict[str, object]:
    """What a job file gives, by the request's names (``None``: it says nothing of it)."""
    given = {k: v for k, v in values._asdict().items() if v is not None and k != "path"}
    if "time_limit_s" in given:
        given["time_limit"] = given.pop("time_limit_s")
    return given
