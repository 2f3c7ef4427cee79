"""The bounded retries and waits of every Compute call: stamina's retries for transport
errors and 5xx, and for rate refusals (Compute's rate-quota documentation: wait and retry)
bounded, doubling waits that are reported first through ``on_wait(seconds, why)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from eps.core.model import evolve
from eps.core.outcome import FailureKind, LaneFailure
from eps.shell.lanes.gcp.wire import classify_exception, rate_limited, retryable
from eps.shell.util.retry import RetryPolicy

T = TypeVar("T")


def no_wait(seconds: float, why: str) -> None:
    """The default ``on_wait``: nobody is told."""


class RateLimitOutlasted(Exception):
    """Every bounded wait for a rate refusal is spent: the last refusal, and the waits made."""

    def __init__(self, cause: Exception, waits: int, waited_s: float, next_s: float) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.waits = waits
        self.waited_s = waited_s
        self.next_s = next_s

    def failure(self) -> LaneFailure:
        return outlasted(classify_exception(self.cause), self.waits, self.waited_s, self.next_s)


def outlasted(failure: LaneFailure, waits: int, waited_s: float, next_s: float) -> LaneFailure:
    """The rate refusal that outlasted every wait, saying how long eps waited."""
    return evolve(
        failure,
        kind=FailureKind.RATE_LIMITED,
        message=f"{failure.message} (still refused after {waits} waits, {waited_s:g} s in all)",
        retry_after_s=next_s,
    )


class Calls:
    """One client's retry policy, rate-limit waits, sleep and wait reporting."""

    def __init__(
        self,
        retry: RetryPolicy,
        sleep: Callable[[float], None],
        on_wait: Callable[[float, str], None],
        waits: int,
        wait_s: float,
        wait_max_s: float,
    ) -> None:
        self._retry = retry
        self._sleep = sleep
        self._on_wait = on_wait
        self._waits = waits
        self._wait_s = wait_s
        self._wait_max_s = wait_max_s

    def call(self, fn: Callable[[], T]) -> T:
        """``fn`` with bounded retries: stamina's for transport errors and 5xx, and bounded,
        reported waits for rate refusals (then :class:`RateLimitOutlasted`)."""
        import stamina

        policy = self._retry
        caller = stamina.RetryingCaller(
            attempts=policy.attempts,
            timeout=policy.timeout_s,
            wait_initial=policy.wait_initial_s,
            wait_max=policy.wait_max_s,
            wait_jitter=policy.wait_jitter_s,
        )
        waits, waited = 0, 0.0
        while True:
            try:
                return caller(retryable, fn)
            except Exception as exc:
                if not rate_limited(exc):
                    raise
                wait = self.rate_wait(waits + 1, exc)
                if waits >= self._waits:
                    raise RateLimitOutlasted(exc, waits, waited, wait) from exc
                code = classify_exception(exc).code
                self.wait(wait, f"GCP rate limit ({code}); the same call again")
                waits += 1
                waited += wait

    def rate_wait(self, n: int, exc: Exception | None) -> float:
        """The ``n``-th wait: Compute's ``Retry-After`` when it sent one, else doubling from
        ``rate_limit_wait_s``; never more than ``rate_limit_wait_max_s``."""
        asked = None
        response = getattr(exc, "response", None)
        header = getattr(response, "headers", {}).get("Retry-After") if response is not None else None
        if header is not None:
            try:
                asked = float(header)
            except ValueError:
                asked = None
        wait = asked if asked is not None and asked >= 0 else self._wait_s * 2 ** (n - 1)
        return float(min(self._wait_max_s, wait))

    def wait(self, seconds: float, why: str) -> None:
        """Wait ``seconds`` with the injected sleep, and say so first (``on_wait``)."""
        self._on_wait(seconds, why)
        self._sleep(seconds)
