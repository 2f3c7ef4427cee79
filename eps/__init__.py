"""eps: plan and run research compute jobs on the right lane (the shared VM, a SLURM
cluster, GCP, RunPod).

From Python (loaded on first use, so ``import eps`` stays light)::

    from eps import Job, plan, execute, status, wait
    p = plan(Job("gpu-1", duration="2h"))
    print(p)

See :mod:`eps.api`; the command line is ``eps`` (``eps --help``).
"""

from __future__ import annotations

from eps._version import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from eps.api import (
        ConfigError,
        Execution,
        Job,
        JobError,
        Plan,
        cancel,
        execute,
        execute_pipeline,
        plan,
        status,
        wait,
    )

__all__ = ["ConfigError", "Execution", "Job", "JobError", "Plan", "__version__", "cancel", "execute",
           "execute_pipeline", "plan", "status", "wait"]  # fmt: skip

_API = frozenset(__all__) - {"__version__"}


def __getattr__(name: str) -> Any:
    if name in _API:
        from eps import api

        return getattr(api, name)
    raise AttributeError(f"module 'eps' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
