"""Bounded retries for provider calls, one shape for every lane (stamina's parameters)."""

from __future__ import annotations

from attrs import frozen


@frozen
class RetryPolicy:
    """How often and how long one API call is retried on transport errors, 429 and 5xx:
    ``attempts`` in all, within ``timeout_s``, exponential waits from ``wait_initial_s``
    up to ``wait_max_s`` plus up to ``wait_jitter_s`` of jitter (seconds)."""

    attempts: int = 5
    timeout_s: float = 60.0
    wait_initial_s: float = 0.5
    wait_max_s: float = 10.0
    wait_jitter_s: float = 1.0
