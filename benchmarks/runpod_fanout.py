"""Fan-out benchmark: N CPU pods against the local RunPod test server with 100 ms per call.

    python benchmarks/runpod_fanout.py [--n 200] [--latency 0.1] [--concurrency 32]
                                       [--sequential-n 20]

The server runs in its own process (tests/shell/runpod/fake_server.py), so the figures are
the client's: wall time until every pod is RUNNING (create + two polls each: PROVISIONING
-> STARTING -> RUNNING), peak RSS (ru_maxrss) and the peak of Python allocations
(tracemalloc, measured in a second run because tracing slows the loop).  The sequential
figure starts pods one after another; by default it times ``--sequential-n`` pods and
scales to N (pass ``--sequential-n 200`` to time them all).  Bar: <= 3 s, <= 150 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

from eps.shell.runpod import ApiKey, RunpodClient, RunpodSettings, fan_out, pod_name

from eps.core.model import Job, LaneKind, Provisioning, Rung

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "shell" / "runpod" / "fake_server.py"
KEY = "bench-key-not-a-secret"
RUNGS = (
    Rung("runpod", LaneKind.RUNPOD, Provisioning.ON_DEMAND, "bench", machine="cpu3g-4-16", vcpus=4, mem_gb=16),
    Rung("runpod", LaneKind.RUNPOD, Provisioning.ON_DEMAND, "bench", machine="cpu5g-4-16", vcpus=4, mem_gb=16),
)


async def parallel(settings: RunpodSettings, n: int, label: str) -> tuple[float, int]:
    job = Job("cpu-small", 3600, count=n, command=("python", "shard.py"))
    async with RunpodClient(ApiKey(KEY), settings) as client:
        began = time.perf_counter()
        results = await fan_out([(f"{label}{i}", RUNGS) for i in range(n)], job, client=client)
        elapsed = time.perf_counter() - began
    running = sum(1 for r in results if r.result.map(lambda h: h.state == "running").value_or(False))
    return elapsed, running


async def sequential(settings: RunpodSettings, n: int) -> float:
    async with RunpodClient(ApiKey(KEY), settings) as client:
        began = time.perf_counter()
        for i in range(n):
            await client.start(RUNGS[0], pod_name(f"seq{i}", 1))
        return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per call on the server")
    parser.add_argument("--concurrency", type=int, default=RunpodSettings().concurrency)
    parser.add_argument("--poll-interval", type=float, default=0.1)
    parser.add_argument("--sequential-n", type=int, default=20)
    args = parser.parse_args(argv)

    server = subprocess.Popen(
        [sys.executable, str(SERVER), "--latency", str(args.latency), "--api-key", KEY],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split()[1]
        settings = RunpodSettings(base_url=url, concurrency=args.concurrency, poll_interval_s=args.poll_interval)

        wall, running = asyncio.run(parallel(settings, args.n, "par"))
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

        tracemalloc.start()
        traced_wall, _ = asyncio.run(parallel(settings, args.n, "trace"))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()

        seq = asyncio.run(sequential(settings, args.sequential_n))
        seq_n = seq * args.n / args.sequential_n
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=10)

    print(f"pods: {args.n}, server latency {args.latency * 1000:.0f} ms/call, concurrency {args.concurrency}")
    print(f"parallel wall time to all RUNNING: {wall:.2f} s ({running}/{args.n} running)")
    print(f"peak RSS (ru_maxrss): {rss_mb:.1f} MB")
    print(f"peak Python allocations (tracemalloc): {peak / 2**20:.1f} MB (traced run took {traced_wall:.2f} s)")
    scaled = "" if args.sequential_n == args.n else f" (timed {args.sequential_n} pods: {seq:.2f} s, scaled)"
    print(f"sequential, one pod after another: {seq_n:.1f} s{scaled}; speed-up x{seq_n / wall:.0f}")
    ok = wall <= 3.0 and rss_mb <= 150 and running == args.n
    print("bar (<= 3 s, <= 150 MB, all running):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
