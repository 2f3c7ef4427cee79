"""How long `workflow_lint --check-asks` takes on this repository (median of N runs, in-process).

    python benchmarks/lint_bench.py [--n 10]

Prints figures; asserts nothing (timings belong here, not in the test run)."""

from __future__ import annotations

import argparse
import io
import statistics
import time
from pathlib import Path

from eps.lint.cli import main

REPO = Path(__file__).resolve().parents[1]


def run(n: int) -> None:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        main(["--check-asks", "--root", str(REPO)], out=io.StringIO())
        times.append(time.perf_counter() - start)
    print(f"workflow_lint --check-asks: median {statistics.median(times) * 1000:.0f} ms, "
          f"min {min(times) * 1000:.0f} ms over {n} runs")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10)
    run(ap.parse_args().n)
