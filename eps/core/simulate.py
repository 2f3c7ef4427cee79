"""``eps simulate``: the cluster's own queue history replayed against other park caps (P8).

The rules of the replay, all of them here:

- A **wait** is one SLURM job's time in the queue on one QoS tier: from submit to start
  (``started``), or from submit to the moment it left the queue unstarted (cancelled at a
  park cap, or still pending when history was read): a *censored* wait, a lower bound.
- A **dispatch** is what eps walks down the ladder: the jobs named ``eps-<dispatch>`` (one
  per tier it tried).  With ``all_jobs`` every other job on a ladder tier is a dispatch of
  its own too.
- Replaying a dispatch under caps ``(first, next)``: on tier *i* of the ladder, with cap
  ``first`` on rung 1 and ``min(first, next)`` on rungs 2+ (P8's effective cap), the job
  starts when its wait there is at most the cap, else it parks the whole cap and moves to
  the next tier; past the last tier it goes to the paid lanes.  A cap of 0 skips the tier;
  an unbounded cap (``None``) never moves on, so a job whose wait there has no end in
  history never starts (reported as ``never``), and never reaches a paid lane.
- Which wait: an observed start is used as it is.  An observed censored wait ``c`` is
  enough when the cap is at most ``c`` (it did not start within the cap); under a longer cap
  the wait is drawn from the tier's history conditioned on ``W > c``.  A tier the dispatch
  never reached gets a wait drawn from that tier's history for similar jobs: the same GPU
  count and time of day (four 6-hour parts of the cluster's own clock), widened to the same
  GPU count, then to the whole tier, while a group holds fewer than :data:`MIN_GROUP` waits.
- The estimator: Kaplan-Meier on each group's waits, censored waits included as lower
  bounds.  A draw past the largest wait at which a job started (the curve's tail, which
  history cannot place) is taken as "does not start within any cap": honest, never
  optimistic.  Waits are assumed not to depend on when the dispatch reached the tier (no
  drift within the window), and a paid lane is taken to start at once (its own start time is
  not in this history).
- Deterministic and order-free: history is put in canonical order first, and every draw is a
  hash of (seed, dispatch, tier, round), not a random generator's state.  Each dispatch is
  replayed :attr:`rounds` times; a dispatch that needs no draw gives the same answer each
  round.

Pure: no clock, no I/O; the shell reads ``sacct`` and the ledger and hands in :class:`Wait` s.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterable, Sequence
from enum import StrEnum

from attrs import field, frozen

#: The estimator, as the output states it.
ESTIMATOR = (
    "Kaplan-Meier per tier on the waits of similar jobs (same GPU count and 6-hour part of the day, widened "
    "while a group holds fewer than 5 waits); censored waits (cancelled or still pending) are lower bounds; "
    "a draw beyond the longest wait that ended in a start counts as not starting within any cap; "
    "a paid lane is taken to start at once"
)

#: A group of waits smaller than this is widened (same GPUs, then the whole tier).
MIN_GROUP = 5
#: Fewer waits than this on a ladder tier, or fewer dispatches, and the output warns.
SMALL_TIER = 30
SMALL_DISPATCHES = 20
DAY_PART_S = 6 * 3600


class Lane(StrEnum):
    """Where a replayed dispatch ends besides a tier: the paid lanes, or nowhere (an unbounded cap)."""

    PAID = "paid"
    NEVER = "never"


@frozen
class Wait:
    """One SLURM job's wait on one tier (seconds on the cluster's own clock)."""

    job_id: str
    tier: str
    dispatch: str | None  # the eps dispatch id its name carries; None for a job eps did not make
    gpus: int
    submit_s: int
    wait_s: int  # to its start when ``started``; else to when it left the queue (a lower bound)
    started: bool
    run_s: int | None = None  # how long it ran, when it started and ended


def ledger_wait(state: str, outcome: str | None, submitted: float, changed: float, seen_started: float | None,
                now: float) -> tuple[int, bool] | None:  # fmt: skip
    """One SLURM attempt of the ledger (every host's, on a ledger a team shares) as a wait:
    ``(seconds, started)``, or ``None`` when it says nothing of the queue.  Times are epochs:
    ``submitted`` (the attempt recorded), ``changed`` (its row's last change),
    ``seen_started`` (when eps saw its dispatch started), ``now`` (when the ledger is read).

    - started (``running``, ``ended``, or outcome ``started``/``ended``): to when it was seen
      started, else to its row's last change;
    - left at its park cap (outcome ``park_timeout``): to then, not started (a lower bound);
    - parked now (``pending``, on any host): to ``now``, not started (a lower bound);
    - anything else (never queued, failed, cancelled by hand): ``None``."""
    if outcome in ("started", "ended") or state in ("running", "ended"):
        return max(0, round((seen_started if seen_started is not None else changed) - submitted)), True
    if outcome == "park_timeout":
        return max(0, round(changed - submitted)), False
    if state == "pending":
        return max(0, round(now - submitted)), False
    return None


@frozen
class Caps:
    """One park-cap setting: rung 1's cap and the rungs-2+ setting (``None``: unbounded)."""

    first_s: int | None
    next_s: int | None

    def __attrs_post_init__(self) -> None:
        for v in (self.first_s, self.next_s):
            if v is not None and v < 0:
                raise ValueError(f"a park cap cannot be negative, got {v}")

    @property
    def effective_next_s(self) -> int | None:
        """P8: rungs 2+ never wait longer than rung 1 (the smaller of the two; ``None`` is unbounded)."""
        given = [v for v in (self.first_s, self.next_s) if v is not None]
        return min(given) if given else None

    def cap(self, rung: int) -> int | None:
        return self.first_s if rung == 0 else self.effective_next_s

    def worst_case_s(self, tiers: int) -> int | None:
        """The bound on the wait before a job leaves the ladder (P8), ``None`` when a cap is unbounded."""
        caps = [self.cap(i) for i in range(tiers)]
        return None if any(c is None for c in caps) else sum(c or 0 for c in caps)

    def label(self) -> str:
        return "/".join("inf" if v is None else str(v) for v in (self.first_s, self.next_s))


@frozen
class Survival:
    """A Kaplan-Meier curve: ``surv[k]`` is P(W > ``times[k]``) at each distinct start time."""

    times: tuple[int, ...]
    surv: tuple[float, ...]
    _neg: tuple[float, ...] = field(init=False, eq=False, repr=False)  # -surv, rising: for bisect

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_neg", tuple(-s for s in self.surv))

    @classmethod
    def of(cls, waits: Iterable[tuple[int, bool]]) -> Survival:
        data = sorted(waits)
        times: list[int] = []
        surv: list[float] = []
        s = 1.0
        at_risk = len(data)
        i = 0
        while i < len(data):
            t = data[i][0]
            j = i
            while j < len(data) and data[j][0] == t:
                j += 1
            events = sum(1 for _, started in data[i:j] if started)
            if events:  # events before censorings at a tie: the censored are still at risk at t
                s *= 1.0 - events / at_risk
                times.append(t)
                surv.append(s)
            at_risk -= j - i
            i = j
        return cls(tuple(times), tuple(surv))

    def at(self, t: int) -> float:
        """P(W > t)."""
        k = bisect.bisect_right(self.times, t)
        return self.surv[k - 1] if k else 1.0

    def draw(self, u: float, above: int | None = None) -> int | None:
        """The wait at quantile ``u`` (0 <= u < 1), given W > ``above``; ``None`` in the tail."""
        s0 = 1.0 if above is None else self.at(above)
        target = s0 * (1.0 - u)
        # surv never rises: the times at or under the target are a suffix; the first of it after ``above``
        k = bisect.bisect_left(self._neg, -target)
        if above is not None:
            k = max(k, bisect.bisect_right(self.times, above))
        return self.times[k] if k < len(self.times) else None


@frozen
class Outcome:
    """One dispatch replayed once: the tier it started on (or paid/never) and its time to start."""

    dispatch: str
    lane: str  # a tier name, or a Lane value
    start_s: int | None  # None: never starts
    drawn: bool  # a wait of history's (not the dispatch's own) decided it
    gpus: int
    run_s: int | None


@frozen
class SettingResult:
    caps: Caps
    worst_case_s: int | None
    jobs: int  # dispatches replayed
    replays: int  # jobs x rounds
    median_start_s: int | None
    p90_start_s: int | None
    max_start_s: int | None
    paid_share: float
    never_share: float
    paid_gpu_hours: float  # per round, known run lengths only
    paid_unknown_runs: int  # paid replays whose run length history does not hold
    paid_list_usd: float  # paid_gpu_hours at the list price: information only (P12)
    lanes: tuple[tuple[str, float], ...]  # share of replays per tier / paid / never
    first_round: tuple[Outcome, ...]  # each dispatch's replay in round 0, by dispatch


@frozen
class TierHistory:
    tier: str
    waits: int
    started: int
    censored: int


@frozen
class Simulation:
    estimator: str
    seed: int
    rounds: int
    ladder: tuple[str, ...]
    settings: tuple[SettingResult, ...]
    tiers: tuple[TierHistory, ...]
    dispatches: int
    other_qos_jobs: int
    warning: str | None


@frozen
class _Dispatch:
    key: str
    gpus: int
    part: int
    own: dict[str, Wait]  # tier -> its first wait there
    run_s: int | None


def _canonical(waits: Iterable[Wait]) -> list[Wait]:
    def key(w: Wait) -> tuple[object, ...]:  # every field: equal keys are equal waits
        return (w.submit_s, w.job_id, w.tier, w.wait_s, w.started, w.gpus, w.dispatch is None, w.dispatch or "",
                w.run_s is None, w.run_s or 0)  # fmt: skip

    return sorted(set(waits), key=key)


def _dispatches(waits: Sequence[Wait], ladder: tuple[str, ...], all_jobs: bool) -> list[_Dispatch]:
    groups: dict[str, list[Wait]] = {}
    for w in waits:
        if w.tier not in ladder:
            continue
        if w.dispatch is not None:
            groups.setdefault(w.dispatch, []).append(w)
        elif all_jobs:
            groups[f"job:{w.job_id}"] = [w]
    out = []
    for key in sorted(groups):
        ws = groups[key]  # already in canonical (submit) order
        own: dict[str, Wait] = {}
        for w in ws:
            own.setdefault(w.tier, w)
        ran = [w.run_s for w in ws if w.started and w.run_s is not None]
        first = ws[0]
        part = (first.submit_s % 86_400) // DAY_PART_S
        out.append(_Dispatch(key, first.gpus, part, own, ran[0] if ran else None))
    return out


class _History:
    """The tiers' waits, and their Kaplan-Meier curves per group of similar jobs (cached)."""

    def __init__(self, waits: Sequence[Wait]) -> None:
        self._waits = waits
        self._cache: dict[tuple[str, int | None, int | None], Survival] = {}

    def _group(self, tier: str, gpus: int | None, part: int | None) -> list[Wait]:
        return [
            w for w in self._waits
            if w.tier == tier and (gpus is None or w.gpus == gpus)
            and (part is None or (w.submit_s % 86_400) // DAY_PART_S == part)
        ]  # fmt: skip

    def curve(self, tier: str, gpus: int, part: int) -> Survival:
        """The curve of the narrowest group of jobs like this one that holds :data:`MIN_GROUP` waits."""
        asked = (tier, gpus, part)
        if asked not in self._cache:
            for key in (asked, (tier, gpus, None), (tier, None, None)):
                group = self._group(*key)
                if len(group) >= MIN_GROUP or key[1] is None:
                    self._cache[asked] = Survival.of((w.wait_s, w.started) for w in group)
                    break
        return self._cache[asked]


def _uniform(seed: int, key: str, tier: str, round_: int) -> float:
    digest = hashlib.sha256(f"{seed}|{key}|{tier}|{round_}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def _replay(
    d: _Dispatch, caps: Sequence[int | None], ladder: tuple[str, ...], history: _History, seed: int, round_: int
) -> Outcome:
    """One dispatch walked down the ladder under ``caps`` (one per rung; the rules in the module docstring)."""
    t = 0
    drawn = False
    for tier, cap in zip(ladder, caps, strict=True):
        if cap == 0:
            continue
        seen = d.own.get(tier)
        wait: int | None
        if seen is not None and seen.started:
            wait = seen.wait_s
        elif seen is not None and cap is not None and cap <= seen.wait_s:
            wait = None  # it waited the whole cap there and did not start
        else:
            above = seen.wait_s if seen is not None else None
            wait = history.curve(tier, d.gpus, d.part).draw(_uniform(seed, d.key, tier, round_), above)
            drawn = True
        if wait is not None and (cap is None or wait <= cap):
            return Outcome(d.key, tier, t + wait, drawn, d.gpus, d.run_s)
        if cap is None:
            return Outcome(d.key, Lane.NEVER.value, None, drawn, d.gpus, d.run_s)
        t += cap
    return Outcome(d.key, Lane.PAID.value, t, drawn, d.gpus, d.run_s)


def _quantile(values: Sequence[float], q: float) -> int | None:
    """The nearest-rank ``q`` quantile; ``None`` when empty or when it is a never-start."""
    if not values:
        return None
    ordered = sorted(values)
    v = ordered[max(0, math.ceil(q * len(ordered)) - 1)]
    return None if math.isinf(v) else int(v)


def _setting(
    caps: Caps, ds: Sequence[_Dispatch], ladder: tuple[str, ...], history: _History, seed: int, rounds: int,
    price_per_gpu_hour: float,
) -> SettingResult:  # fmt: skip
    per_rung = [caps.cap(i) for i in range(len(ladder))]
    first = [_replay(d, per_rung, ladder, history, seed, 0) for d in ds]
    outcomes = list(first)
    for r in range(1, rounds):  # a dispatch that drew nothing in round 0 replays the same every round
        outcomes.extend(
            _replay(d, per_rung, ladder, history, seed, r) if o.drawn else o for d, o in zip(ds, first, strict=True)
        )
    starts = [math.inf if o.start_s is None else float(o.start_s) for o in outcomes]
    n = len(outcomes)
    paid = [o for o in outcomes if o.lane == Lane.PAID]
    gpu_hours = sum(o.gpus * o.run_s / 3600 for o in paid if o.run_s is not None) / rounds
    finite = [s for s in starts if not math.isinf(s)]
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.lane] = counts.get(o.lane, 0) + 1
    order = [*ladder, Lane.PAID.value, Lane.NEVER.value]
    return SettingResult(
        caps=caps,
        worst_case_s=caps.worst_case_s(len(ladder)),
        jobs=len(ds),
        replays=n,
        median_start_s=_quantile(starts, 0.5),
        p90_start_s=_quantile(starts, 0.9),
        max_start_s=int(max(finite)) if finite else None,
        paid_share=len(paid) / n if n else 0.0,
        never_share=counts.get(Lane.NEVER.value, 0) / n if n else 0.0,
        paid_gpu_hours=round(gpu_hours, 3),
        paid_unknown_runs=sum(1 for o in paid if o.run_s is None),
        paid_list_usd=round(gpu_hours * price_per_gpu_hour, 2),
        lanes=tuple((lane, counts.get(lane, 0) / n if n else 0.0) for lane in order),
        first_round=tuple(first),
    )


def _warning(tiers: Sequence[TierHistory], dispatches: int) -> str | None:
    thin = [t.tier for t in tiers if t.waits < SMALL_TIER]
    if dispatches >= SMALL_DISPATCHES and not thin:
        return None
    parts = []
    if dispatches < SMALL_DISPATCHES:
        parts.append(f"{dispatches} dispatches (fewer than {SMALL_DISPATCHES})")
    if thin:
        parts.append(f"fewer than {SMALL_TIER} waits on {', '.join(thin)}")
    return "small sample: " + "; ".join(parts) + ": the figures are anecdotes, not estimates"


def simulate(
    waits: Iterable[Wait],
    ladder: Sequence[str],
    settings: Sequence[Caps],
    *,
    seed: int = 0,
    rounds: int = 50,
    all_jobs: bool = False,
    price_per_gpu_hour: float = 0.0,
) -> Simulation:
    """Replay the dispatches of ``waits`` down ``ladder`` under each of ``settings``."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    tiers = tuple(ladder)
    history = _canonical(waits)
    on_ladder = [w for w in history if w.tier in tiers]
    ds = _dispatches(on_ladder, tiers, all_jobs)
    cached = _History(on_ladder)
    results = tuple(_setting(c, ds, tiers, cached, seed, rounds, price_per_gpu_hour) for c in settings)
    per_tier = tuple(
        TierHistory(
            t,
            sum(1 for w in on_ladder if w.tier == t),
            sum(1 for w in on_ladder if w.tier == t and w.started),
            sum(1 for w in on_ladder if w.tier == t and not w.started),
        )
        for t in tiers
    )
    return Simulation(
        estimator=ESTIMATOR,
        seed=seed,
        rounds=rounds,
        ladder=tiers,
        settings=results,
        tiers=per_tier,
        dispatches=len(ds),
        other_qos_jobs=len(history) - len(on_ladder),
        warning=_warning(per_tier, len(ds)),
    )


def default_settings(first_s: int, next_s: int) -> tuple[Caps, ...]:
    """Today's setting first, then a small grid around it (half and double rung 1, half rungs 2+)."""
    grid = [Caps(first_s, next_s)]
    for f in (first_s // 2, first_s, first_s * 2):
        for n in (next_s // 2, next_s):
            c = Caps(f, n)
            if c not in grid:
                grid.append(c)
    return tuple(grid)


def parse_caps(text: str) -> Caps:
    """``600,300`` (rung 1, rungs 2+), ``600`` (both), ``inf`` or ``none`` for unbounded; durations
    are seconds.  Raises ValueError with one line."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2:
        raise ValueError(f"caps must be FIRST,NEXT in seconds (e.g. 600,300), got {text!r}")
    values: list[int | None] = []
    for p in parts:
        if p.lower() in ("inf", "none", "unbounded"):
            values.append(None)
        elif p.isdigit():
            values.append(int(p))
        else:
            raise ValueError(f"caps must be FIRST,NEXT in whole seconds or inf (e.g. 600,300), got {text!r}")
    return Caps(values[0], values[1])
