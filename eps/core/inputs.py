"""A job's local inputs on a team's ledger (issue 37): whether the host about to launch a
dispatch has them, and what it may do when it does not.

A dispatch's ``--workdir`` is a path on the host that executed it, and its ``--env`` values
are kept only in that host's state directory (never in the ledger).  A host that took the
dispatch over has neither.  That is not the user's error: the inputs are *elsewhere*, on the
starting host.  A launch there can still go ahead where the executing host staged them on a
filesystem every host reaches and the stage is complete (a SLURM cluster's dispatch root:
its ``.staged`` mark, written last); anywhere else nothing is made and the dispatch fails,
saying where its inputs stayed (reason :data:`INPUTS_LOST`).

On the host that started the dispatch (or on a ledger no other host shares) a missing or
unreadable workdir is still the user's error, reported as before: :func:`elsewhere` is
``None`` there.  Pure: the shell says what it found.
"""

from __future__ import annotations

from collections.abc import Collection

from attrs import frozen

from eps.core.model import Job, LaneKind

#: The reason code of a dispatch that had to be launched by a host lacking its inputs.
INPUTS_LOST = "inputs_lost"

#: Lanes whose dispatch root is on a filesystem every host reaches (a cluster's shared one),
#: so a complete stage made by the lost host can be submitted again as it is.
_STAGE_OUTLIVES_HOST = frozenset({LaneKind.SLURM})


@frozen
class Elsewhere:
    """The inputs ``host`` (the starting host) kept and this host lacks: the workdir (its
    path) and the names of the ``--env`` values (never a value)."""

    host: str
    workdir: str | None
    env_names: tuple[str, ...]

    def what(self) -> str:
        parts = []
        if self.workdir is not None:
            parts.append(f"its workdir {self.workdir}")
        if self.env_names:
            parts.append(f"the values of --env {', '.join(self.env_names)}")
        return " and ".join(parts)

    def lost(self) -> str:
        """The one line of a dispatch that cannot be launched here."""
        return (
            f"{self.what()} stayed on host {self.host}, and this host has no complete stage of them to"
            " launch from: a team needs `storage` (or the job executed again) for a takeover before launch"
        )


def elsewhere(
    job: Job, *, workdir_here: bool, env_here: Collection[str], started_host: str | None, this_host: str | None
) -> Elsewhere | None:
    """What of ``job``'s inputs stayed on the host that started it, when this host took the
    dispatch over and lacks some; ``None`` when they are all here, or this host (or an
    unshared ledger, ``this_host`` ``None``) started it: then they are read as ever."""
    if started_host is None or this_host is None or started_host == this_host:
        return None
    workdir = job.workdir if job.workdir is not None and not workdir_here else None
    missing = tuple(n for n in job.env_names if n not in env_here)
    if workdir is None and not missing:
        return None
    return Elsewhere(started_host, workdir, missing)


def may_reuse_stage(kind: LaneKind) -> bool:
    """Whether a launch on a lane of ``kind`` may go ahead from the lost host's complete stage
    (else a host lacking the inputs makes nothing there)."""
    return kind in _STAGE_OUTLIVES_HOST
