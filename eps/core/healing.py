"""Jobs that heal: what eps does when a dispatch is interrupted, finds no capacity, or its
job fails, and which rungs a boot loop rules out.  Pure: the supervisor observes and
carries out; these functions decide.

The retry policy of a job (:func:`policy_of`):

- ``retry``: the events retried, any of ``no-capacity`` (every rung ended exhausted),
  ``interruption`` (the machine was taken back or lost: a spot or flex VM preempted, a pod
  that vanished, a SLURM job ended PREEMPTED, NODE_FAIL or BOOT_FAIL, a wedged machine) and
  ``error`` (the job exited non-zero) and ``stalled`` (its stall watch stopped it,
  ``--on-stall stop``: :mod:`eps.core.stall`; only ``stalled`` retries it, never ``error``);
- ``retry_for_s``: how long eps keeps trying, from submission;
- ``max_restarts``: how many relaunches at most (interruptions and errors together).

Without a policy of its own, a restartable job retries ``interruption`` (at most
:attr:`~eps.core.tables.Healing.restartable_restarts` times) and every other job
retries nothing: an interrupted job that is not restartable is never relaunched unless
its user asked for it.

A relaunch plans again from what the interrupted rung taught (P11 still holds), ships the
workdir and the last synced outputs, and sets ``EPS_RESTART_COUNT``.

Boot loops (:func:`boot_looped`): a machine lost within ``early_death_s`` of coming up is an
early death of its rung; ``boot_loop_deaths`` of them within ``boot_loop_window_s`` rule the
rung out for every dispatch (skip ``boot_loop``, with the deaths as its evidence:
:func:`boot_loop_evidence`) until the window has passed.  Pins are exempt (the router does
not skip a pinned rung for it).  The ledger remembers the machines; the shell passes the
recent ones in (``CapacitySnapshot.lives``, read at ``lives_at``), as it does capacity.

Wedged machines (:func:`wedged`): a machine the provider reports running that eps cannot
reach over ssh for ``wedge_s`` while its job should run is released and handled as an
interruption (its attempt ``gone``, outcome ``wedged``: a lost machine, boot loops count it).
"""

from collections.abc import Iterable, Sequence
from enum import StrEnum

from eps.core.durations import format_duration
from eps.core.model import Job, MachineLife, Terminal
from eps.core.records import NamedTuple
from eps.core.tables import HEALING, Healing

TYPE_CHECKING = False
if TYPE_CHECKING:  # the states load with the functions that take them: eps plan needs none
    from eps.core.states import DispatchState, HandleState


class RetryOn(StrEnum):
    NO_CAPACITY = "no-capacity"
    INTERRUPTION = "interruption"
    ERROR = "error"
    STALLED = "stalled"


class RetryPolicy(NamedTuple):
    """The policy in effect for one job; ``because``, for a job without a ``retry`` of its
    own, says why the default is what it is (``restartable``, ``not restartable``)."""

    on: frozenset[RetryOn]
    retry_for_s: int
    max_restarts: int
    sync_every_s: int = HEALING.sync_every_s
    because: str = ""
    stall_after_s: int = HEALING.stall_after_s  # the stall watch (0: off)
    on_stall: str = HEALING.on_stall

    def describe_stall(self) -> str:
        """The stall rule in effect, one line (``eps plan``, under the retry line)."""
        from eps.core.stall import describe

        return describe(self.stall_after_s, self.on_stall)

    def describe(self) -> str:
        """One line, as ``eps plan`` shows it: ``retry: interruption (restartable), at most 3
        restarts within 1d; outputs synced every 10m``."""
        why = f" ({self.because})" if self.because else ""
        if self.on:
            events = ", ".join(e.value for e in RetryOn if e in self.on)
            n, within = self.max_restarts, format_duration(self.retry_for_s)
            head = f"{events}{why}, at most {n} restart{'' if n == 1 else 's'} within {within}"
        else:
            head = f"nothing{why}"
        sync = f"synced every {format_duration(self.sync_every_s)}" if self.sync_every_s else "not synced while it runs"
        return f"retry: {head}; outputs {sync}"


def parse_events(text: str) -> tuple[RetryOn, ...]:
    """``no-capacity,interruption`` -> the events; raises ValueError naming a bad one."""
    out: list[RetryOn] = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        try:
            out.append(RetryOn(word))
        except ValueError:
            known = ", ".join(e.value for e in RetryOn)
            raise ValueError(f"unknown retry event {word!r} (known: {known})") from None
    if not out:
        raise ValueError("no retry event given")
    return tuple(dict.fromkeys(out))


#: ``--max-restarts`` (job file ``max_restarts``, API ``max_restarts=``) at most.
MAX_RESTARTS_LIMIT = 1000


def job_retry(value: str | Sequence[str]) -> tuple[str, ...]:
    """A job's ``retry`` as its user wrote it (``"interruption,error"``, or a list of
    events) -> the events' words; ValueError (one line) for an unknown event or none at all."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, list | tuple) and all(isinstance(w, str) and "," not in w for w in value):
        text = ",".join(value)
    else:
        raise ValueError(f"retry takes events such as 'interruption,error' or a list of them, got {value!r}")
    return tuple(e.value for e in parse_events(text))


def job_max_restarts(value: int) -> int:
    """``max_restarts`` checked: a whole number 0..:data:`MAX_RESTARTS_LIMIT`; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"max restarts must be a whole number, got {value!r}")
    if not 0 <= value <= MAX_RESTARTS_LIMIT:
        raise ValueError(f"max restarts must be 0..{MAX_RESTARTS_LIMIT}, got {value}")
    return value


def policy_of(job: Job, table: Healing = HEALING) -> RetryPolicy:
    """The retry policy in effect for ``job``: its own values, else the default above
    (``table``: :data:`~eps.core.tables.HEALING` with the config's numbers in it, such as
    ``[jobs] sync_every_s``)."""
    if job.retry is None:
        on = frozenset({RetryOn.INTERRUPTION}) if job.restartable else frozenset()
        restarts = table.restartable_restarts
    else:
        on = frozenset(RetryOn(e) for e in job.retry)
        restarts = table.max_restarts
    return RetryPolicy(
        on,
        job.retry_for_s if job.retry_for_s is not None else table.retry_for_s,
        job.max_restarts if job.max_restarts is not None else restarts,
        job.sync_every_s if job.sync_every_s is not None else table.sync_every_s,
        ("restartable" if job.restartable else "not restartable") if job.retry is None else "",
        job.stall_after_s if job.stall_after_s is not None else table.stall_after_s,
        job.on_stall if job.on_stall is not None else table.on_stall,
    )


class Relaunch(NamedTuple):
    """Plan again and start the job anew (restart number ``restart``)."""

    restart: int
    reason: str


class WaitThenPlan(NamedTuple):
    """No capacity: wait ``seconds``, then plan again (capacity learnt as exhausted forgotten)."""

    seconds: int
    reason: str


class GiveUp(NamedTuple):
    """No retry: the dispatch ends as it would have without a policy."""

    reason: str


Decision = Relaunch | WaitThenPlan | GiveUp


def after_interruption(job: Job, *, restarts: int, elapsed_s: float, table: Healing = HEALING) -> Decision:
    """The machine was taken back or lost while the job ran (``restarts`` relaunches so far,
    ``elapsed_s`` since submission)."""
    return _relaunch(job, RetryOn.INTERRUPTION, "interrupted", restarts=restarts, elapsed_s=elapsed_s, table=table)


def after_error(
    job: Job, exit_code: int | None, *, restarts: int, elapsed_s: float, table: Healing = HEALING
) -> Decision:
    """The job exited non-zero (or its code is unknown)."""
    if exit_code == 0:
        return GiveUp("the job succeeded")
    what = f"exited {exit_code}" if exit_code is not None else "ended with its exit code unknown"
    return _relaunch(job, RetryOn.ERROR, what, restarts=restarts, elapsed_s=elapsed_s, table=table)


#: The terminals more time can fix: every rung ended exhausted (a pin's included).
CAPACITY_TERMINALS: frozenset[Terminal] = frozenset(
    {Terminal.CPU_EXHAUSTED, Terminal.GPU_EXHAUSTED, Terminal.PIN_EXHAUSTED}
)
#: How a rung fails when capacity, not the request, is the matter: quota in use frees too.
#: (``eps.core.outcome.FailureKind`` values, spelled out: the plan path stays free of attrs.)
CAPACITY_FAILURES: frozenset[str] = frozenset(
    {
        "zone_exhausted", "no_capacity", "rate_limited", "quota_region", "quota_global", "transient",
        "unreachable", "park_timeout", "preempted",
    }
)  # fmt: skip


def no_capacity(terminal: Terminal, outcomes: Iterable[str | None]) -> bool:
    """The walk ended with no capacity (what ``no-capacity`` retries): an exhausted terminal
    after at least one rung failed for capacity.  A plan that tried nothing (every lane
    unusable here) or a request that is broken (refused, forbidden, invalid) is not."""
    return terminal in CAPACITY_TERMINALS and any(o in CAPACITY_FAILURES for o in outcomes)


def after_no_capacity(job: Job, *, waits: int, elapsed_s: float, table: Healing = HEALING) -> Decision:
    """Every rung ended exhausted (``waits`` rounds waited so far): wait and plan again
    while ``retry_for_s`` lasts; the wait doubles each round up to its maximum and never
    runs past the end of ``retry_for_s``."""
    p = policy_of(job, table)
    if RetryOn.NO_CAPACITY not in p.on:
        return GiveUp("no-capacity is not retried")
    left = p.retry_for_s - elapsed_s
    if left <= 0:
        return GiveUp(f"no capacity, and the {p.retry_for_s} s of retrying have passed")
    wait = min(table.capacity_wait_max_s, table.capacity_wait_first_s * 2 ** min(waits, 20))
    seconds = max(1, int(min(wait, left)))
    return WaitThenPlan(seconds, f"no capacity now; planning again in {seconds} s (round {waits + 1})")


def after_run(
    job: Job, state: "DispatchState", job_status: str | None, exit_code: int | None, *, elapsed_s: float,
    table: Healing = HEALING,
) -> Decision | None:
    """What the retry policy says once a run is over: an interrupted dispatch (``preempted``:
    its machine taken back or lost) or one whose job failed (``ended`` non-zero, or with its
    code unknown; a cancel is never retried); ``None`` for any other state."""
    from eps.core.states import DispatchState

    if state is DispatchState.PREEMPTED:
        return after_interruption(job, restarts=job.restart, elapsed_s=elapsed_s, table=table)
    if state is DispatchState.ENDED and job_status == "stalled":  # its stall watch stopped it
        return _relaunch(job, RetryOn.STALLED, "stalled", restarts=job.restart, elapsed_s=elapsed_s, table=table)
    if state is DispatchState.ENDED and job_status not in (None, "cancelled") and exit_code != 0:
        return after_error(job, exit_code, restarts=job.restart, elapsed_s=elapsed_s, table=table)
    return None


def _relaunch(
    job: Job, event: RetryOn, what: str, *, restarts: int, elapsed_s: float, table: Healing
) -> Decision:
    p = policy_of(job, table)
    if event not in p.on:
        if event is RetryOn.INTERRUPTION and not job.restartable:
            return GiveUp(f"{what}; not restartable, and interruption is not retried (--retry interruption)")
        return GiveUp(f"{what}; {event.value} is not retried")
    if restarts >= p.max_restarts:
        return GiveUp(f"{what}; the {p.max_restarts} restarts allowed are used")
    if elapsed_s >= p.retry_for_s:
        return GiveUp(f"{what}; the {p.retry_for_s} s of retrying have passed")
    return Relaunch(restarts + 1, f"{what}; restart {restarts + 1} of at most {p.max_restarts}")


# --- SLURM interruptions ---------------------------------------------------------------------

#: How SLURM says the cluster, not the job, ended a run (sacct / squeue states).
SLURM_INTERRUPTIONS: frozenset[str] = frozenset({"PREEMPTED", "NODE_FAIL", "BOOT_FAIL"})


def slurm_interruption(job_id: str, state: "HandleState", slurm_state: str | None) -> str | None:
    """What a SLURM job's end was, when it was an interruption rather than the job's own end:
    the cluster preempted it or lost its node (``PREEMPTED``, ``NODE_FAIL``, ``BOOT_FAIL``),
    or requeued it (queued again under the same id, a second run eps did not ask for).
    ``None``: the job ended by itself (or was cancelled, or timed out)."""
    from eps.core.states import HandleState

    if state is HandleState.PENDING:  # a job that ended by itself is never queued again
        return f"SLURM job {job_id} was requeued by the cluster (its run was stopped)"
    if slurm_state in SLURM_INTERRUPTIONS:
        return f"SLURM job {job_id} ended {slurm_state}"
    return None


# --- boot loops --------------------------------------------------------------------------------


def early_deaths(lives: Iterable[MachineLife], table: Healing = HEALING) -> list[MachineLife]:
    return [m for m in lives if m.lost_at is not None and m.lost_at - m.up_at <= table.early_death_s]


def boot_looped(lives: Sequence[MachineLife], now: float, table: Healing = HEALING) -> dict[str, list[MachineLife]]:
    """Rung key -> its early deaths within the window, for each rung that has at least
    ``boot_loop_deaths`` of them: the rungs a plan skips (``boot_loop``) now."""
    recent = [m for m in early_deaths(lives, table) if now - (m.lost_at or 0.0) < table.boot_loop_window_s]
    by_rung: dict[str, list[MachineLife]] = {}
    for m in recent:
        by_rung.setdefault(m.rung, []).append(m)
    return {rung: deaths for rung, deaths in by_rung.items() if len(deaths) >= table.boot_loop_deaths}


def boot_loop_evidence(deaths: Sequence[MachineLife], now: float, table: Healing = HEALING) -> str:
    """A boot loop's early deaths (:func:`early_deaths`: each has a ``lost_at``) in words: how
    long ago each machine was lost and how soon after it came up, measured from ``now``."""
    lost = sorted((m.lost_at or 0.0, m.up_at) for m in deaths)
    each = "; ".join(f"one lost {_s(now - at)} ago, {_s(at - up)} after it came up" for at, up in lost)
    return (
        f"{len(lost)} machines died within {_s(table.early_death_s)} of coming up in the last "
        f"{_s(table.boot_loop_window_s)}: {each}"
    )


def boot_loop_lasts_s(deaths: Sequence[MachineLife], now: float, table: Healing = HEALING) -> int:
    """How much longer (from ``now``) a rung with these early deaths stays skipped: until
    fewer than ``boot_loop_deaths`` of them are within the window."""
    lost = sorted(m.lost_at or 0.0 for m in deaths)
    if len(lost) < table.boot_loop_deaths:
        return 0
    return max(0, int(lost[len(lost) - table.boot_loop_deaths] + table.boot_loop_window_s - now))


def _s(seconds: float) -> str:
    return format_duration(max(0, int(seconds)))


# --- wedged machines ---------------------------------------------------------------------------


def wedged(unreachable_since: float | None, now: float, provider_says_running: bool, table: Healing = HEALING) -> bool:
    """Whether a machine is wedged at ``now``: the provider says it is running, and eps has
    not reached it over ssh since ``unreachable_since`` (``None``: it answered last time),
    for at least ``wedge_s``.  A provider that says anything else (gone, preempted,
    stopped) is not a wedge: reconcile and the finisher handle those."""
    return provider_says_running and unreachable_since is not None and now - unreachable_since >= table.wedge_s


def wedge_reason(unreachable_s: float) -> str:
    """Why a wedged machine was released, as its attempt and the dispatch say it."""
    return f"unreachable over ssh for {int(unreachable_s)} s while the provider said running"
