"""Benchmark: cold `eps plan` as a table against `--json` (issue 15: the text plan may cost
at most 20 ms more).  Prints figures; asserts nothing (not a timed test).

    python benchmarks/plan_text.py [--runs 30]

Runs whole processes of this checkout (``python -c 'from eps.shell.cli import entry;
entry()'`` with this folder first on PYTHONPATH), piped, with a fresh HOME (nothing
configured), for a CPU and a GPU plan; then ``eps status`` on an empty ledger and
``import eps``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EPS = [sys.executable, "-c", "from eps.shell.cli import entry; entry()"]


def median_ms(argv: list[str], env: dict[str, str], runs: int) -> float:
    subprocess.run(argv, env=env, capture_output=True, check=False)  # warm .pyc files and the page cache
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    runs = ap.parse_args().runs
    with tempfile.TemporaryDirectory() as home:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": home, "PYTHONPATH": str(ROOT), "EPS_STATE_DIR": home}
        for job in (["cpu-small", "--duration", "30m"], ["gpu-1", "--duration", "3h"]):
            text = median_ms([*EPS, "plan", *job], env, runs)
            js = median_ms([*EPS, "plan", *job, "--json"], env, runs)
            print(f"cold `eps plan {' '.join(job)}`: text {text:.1f} ms, --json {js:.1f} ms, "
                  f"text costs {text - js:+.1f} ms (bar +20 ms) [median of {runs}]")  # fmt: skip
        floor = median_ms([sys.executable, "-c", "pass"], env, runs)
        imp = median_ms([sys.executable, "-c", "import eps"], env, runs)
        print(f"python -c pass: {floor:.1f} ms; python -c 'import eps': {imp:.1f} ms (+{imp - floor:.1f} ms)")
        status = median_ms([*EPS, "status"], env, runs)
        print(f"cold `eps status` on an empty ledger, nothing configured: {status:.1f} ms")


if __name__ == "__main__":
    main()
