"""A pipeline file (``eps plan --job pipeline.toml``): a job file of ``[[phases]]``, each phase
a job of its own, the phases it needs, and whether it is CPU work.

```toml
[[phases]]
name = "prep"              # a lowercase letter, then lowercase letters, digits, - or _ (at most 32)
cpu = true                 # CPU work: refused if its job would hold a GPU (P1)
intent = "cpu-small"
duration = "1h"
command = "python prep.py --out $EPS_OUTPUT_DIR"

[[phases]]
name = "train"
needs = ["prep"]           # the phases it runs after (their outputs will be its inputs)
intent = "gpu-1"
duration = "3h"
restartable = true
command = "python train.py"
```

Each phase takes every key a job file takes (:mod:`eps.shell.request.jobfile`: ``duration``,
``backend``, ``workdir`` relative to this file, ``[phases.retry]``, ...), checked by the same
code, plus ``name`` (required), ``needs`` (a list of phase names) and ``cpu`` (true: the phase
is CPU work).  The file holds ``[[phases]]`` and nothing else.  A bad value is one line naming
the file and its path (``pipeline.toml: ... @ $.phases[1].duration``), as in a job file; what
the core refuses of the pipeline (:func:`eps.core.pipeline.plan_pipeline`: cycles, unknown
needs, a CPU phase that would hold a GPU, a phase's own refusals) is said the same way by
:meth:`PipelineRequest.named`.
"""

from __future__ import annotations

import re

from eps.core.model import JobError
from eps.core.pipeline import Phase, Pipeline
from eps.core.records import NamedTuple
from eps.shell.config.errors import ConfigError
from eps.shell.request.job import FILE_KEYS, JobRequest

__all__ = ["PhaseRequest", "PipelineRequest", "pipeline_file"]

#: A phase's own keys; every other key of a phase is a job file's.
PHASE_KEYS = ("name", "needs", "cpu")
_FIELD = re.compile(r"phases\[(\d+)\](?:\.(\w+))?")


class PhaseRequest(NamedTuple):
    """One phase as asked for: its name, needs, ``cpu`` flag, and its job's request."""

    name: str
    needs: tuple[str, ...]
    cpu: bool
    request: JobRequest


class PipelineRequest(NamedTuple):
    """A pipeline as a file asked for it: ``file``, and its phases in the file's order."""

    file: str
    phases: tuple[PhaseRequest, ...]

    @classmethod
    def from_file(cls, path: str) -> PipelineRequest:
        """The pipeline of a pipeline file (:class:`ConfigError`, one line naming the file and the path)."""
        from eps.shell.config.convert import read_data

        return cls.from_data(path, read_data(path))

    @classmethod
    def from_data(cls, path: str, data: object) -> PipelineRequest:
        """The pipeline of ``data``, a pipeline file's table as read from ``path``."""
        if not isinstance(data, dict) or "phases" not in data:
            raise ConfigError(f"{path}: a pipeline file is a list of [[phases]] @ $")
        for key in data:
            if key != "phases":
                raise ConfigError(f"{path}: a pipeline file holds [[phases]] only: {key} goes in each phase "
                                  f"@ $.{key}")  # fmt: skip
        tables = data["phases"]
        if not isinstance(tables, list):
            raise ConfigError(f"{path}: phases is a list of tables ([[phases]]) @ $.phases")
        return cls(path, tuple(_phase(path, i, t) for i, t in enumerate(tables)))

    @property
    def pipeline(self) -> Pipeline:
        """The core's pipeline: each phase's job as its request gives it."""
        return Pipeline(tuple(Phase(p.name, p.request.job, p.needs, p.cpu) for p in self.phases))

    def named(self, exc: JobError) -> JobError:
        """``exc`` (the core's refusal, its ``field`` a path such as ``phases[1].pin``) as this
        file names the value: ``FILE: ... @ $.phases[1].backend``; a phase's key its file did not
        give is named by the phase (``@ $.phases[1]``)."""
        match = _FIELD.fullmatch(exc.field or "")
        if match is None:
            return JobError(exc.code, f"{self.file}: {exc.plain} @ $.{exc.field or 'phases'}", exc.job)
        i, field = int(match[1]), match[2]
        at = f"phases[{i}]"
        if field in PHASE_KEYS:
            at += f".{field}"
        elif field is not None and field in self.phases[i].request.file_gave:
            at += f".{FILE_KEYS.get(field, field)}"
        return JobError(exc.code, f"{self.file}: {exc.plain} @ $.{at}", exc.job)


def pipeline_file(path: str) -> PipelineRequest | None:
    """The pipeline of the job file ``path`` if it is one (it has ``phases``), else ``None`` (a
    one-job file, read again by :meth:`JobRequest.from_flags`)."""
    from eps.shell.config.convert import read_data

    data = read_data(path)
    if not holds_phases(data):
        return None
    return PipelineRequest.from_data(path, data)


def holds_phases(data: object) -> bool:
    """Whether a job file's data is a pipeline (it has ``phases``), not one job."""
    return isinstance(data, dict) and "phases" in data


def _phase(path: str, i: int, table: object) -> PhaseRequest:
    """Phase ``i``: its own keys checked here, the rest as a job file's (its paths under ``$.phases[i]``)."""
    at = f"$.phases[{i}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: a phase is a table of job options ([[phases]]) @ {at}")
    name, needs, cpu = table.get("name"), table.get("needs", []), table.get("cpu", False)
    if not isinstance(name, str):
        raise ConfigError(f"{path}: every phase needs a name (a string) @ {at}.name")
    if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
        raise ConfigError(f"{path}: phase {name!r}: needs is a list of phase names @ {at}.needs")
    if not isinstance(cpu, bool):
        raise ConfigError(f"{path}: phase {name!r}: cpu is true or false @ {at}.cpu")
    rest = {k: v for k, v in table.items() if k not in PHASE_KEYS}
    if "intent" not in rest:
        raise ConfigError(f"{path}: phase {name!r} needs an intent (see `eps intents`) @ {at}.intent")
    from eps.shell.request.jobfile import job_file_of

    try:
        values = job_file_of(path, rest)
    except ConfigError as exc:  # its path in the phase: `@ $.duration` is `@ $.phases[i].duration`
        head, sep, tail = str(exc).rpartition(" @ $")
        raise ConfigError(f"{head} @ {at}{tail}" if sep else str(exc)) from None
    return PhaseRequest(name, tuple(needs), cpu, JobRequest.of_file(values, f"{path}: phases[{i}].notify"))
