"""Benchmark of the plan path.  Prints figures; asserts nothing (not a timed test).

    python benchmarks/plan_bench.py [--runs 30]

1. cold `eps plan gpu-1 --duration 3h --json`: median wall time of whole-process
   runs of the installed console script (the one beside this interpreter);
2. in-process `plan()` per call for typical jobs;
3. peak memory: max RSS of the cold process, and tracemalloc peak of 1000 plans.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import time
import timeit
import tracemalloc
from pathlib import Path

from bench_support import eps_env


def _eps() -> list[str]:
    here = Path(sys.executable).parent / "eps"
    if here.exists():
        return [str(here)]
    found = shutil.which("eps")
    if found:
        return [found]
    return [sys.executable, "-m", "eps.shell"]


def cold(runs: int) -> tuple[float, float, float]:
    argv = [*_eps(), "plan", "gpu-1", "--duration", "3h", "--json"]
    env = {k: v for k, v in eps_env().items() if not k.startswith("EPS_")}
    times = []
    subprocess.run(argv, check=True, capture_output=True, env=env)  # warm the page cache and .pyc files
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, env=env)
        times.append(time.perf_counter() - t)
    rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    floor = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        floor.append(time.perf_counter() - t)
    return statistics.median(times) * 1000, statistics.median(floor) * 1000, rss_kb / 1024


def in_process() -> list[tuple[str, float]]:
    from eps.core.model import CapacitySnapshot, Job, ParkState
    from eps.core.router import plan
    from eps.core.tables import DEFAULT_GRANTS

    snap = CapacitySnapshot()
    cases = [
        ("gpu-1 3h", Job("gpu-1", 3 * 3600), None),
        ("gpu-8 1h restartable", Job("gpu-8", 3600, restartable=True), None),
        ("cpu-small 30m", Job("cpu-small", 1800), None),
        ("cpu-bigmem 300 GB", Job("cpu-small", 5 * 3600, footprint_gb=300), None),
        ("gpu-1 parked 700 s", Job("gpu-1", 3600), ParkState("fellows", "high-eur", 700, "Priority")),
    ]
    out = []
    for name, job, park in cases:
        n = 20_000
        per = min(timeit.repeat(lambda j=job, p=park: plan(j, snap, DEFAULT_GRANTS, p), number=n, repeat=3)) / n
        out.append((name, per * 1e6))
    return out


def memory() -> float:
    from eps.core.model import CapacitySnapshot, Job
    from eps.core.router import plan
    from eps.core.tables import DEFAULT_GRANTS

    tracemalloc.start()
    for i in range(1000):
        plan(Job("cpu-small", 120 + i), CapacitySnapshot(), DEFAULT_GRANTS, None)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ns = ap.parse_args()
    med, floor, rss = cold(ns.runs)
    print(
        f"cold `eps plan gpu-1 --duration 3h --json`: median {med:.1f} ms over {ns.runs} runs "
        f"(python -c pass: {floor:.1f} ms; bar 100 ms)"
    )
    print(f"peak RSS of an `eps plan` process: {rss:.1f} MiB")
    for name, us in in_process():
        print(f"plan() in-process, {name}: {us:.1f} us/call (bar 50 us)")
    print(f"tracemalloc peak over 1000 plans with distinct durations: {memory():.0f} KiB")


if __name__ == "__main__":
    main()
