"""How long from a park-cap expiry to the next tier's job RUNNING, on the real test cluster.

Needs the cluster of tests/shell/slurm/cluster.sh up (run as root):

    bash tests/shell/slurm/cluster.sh start
    python benchmarks/slurm_ladder.py [--runs 5] [--cap 2] [--poll 0.1]

Each run: a blocker job holds 2 GPUs under high-eur, high-eur's per-user cap is
lowered to 2 GPUs (so a second 2-GPU job pends with QOSMaxGRESPerUser), and the
ladder walk dispatches a gpu-2 job with a first park cap of ``--cap`` seconds.
Measured from the cap's expiry (submit of the high-eur job + cap) to the moment
squeue first shows the normal-eur job RUNNING (a watcher polls squeue every
20 ms), split into: expiry -> the walk decides ADVANCE (poll granularity) and
-> the cancel of the parked job is confirmed, -> the next job is submitted, submit -> RUNNING.
The cap is restored and every job cancelled at the end.
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from typing import Any

from eps.core.model import CapacitySnapshot, Job, LaneKind, Provisioning, Rung, evolve
from eps.core.sbatch import render_sbatch
from eps.core.tables import DEFAULT_POLICY, FELLOWS
from eps.shell.config.settings import Settings
from eps.shell.lanes import LaneOptions, Lanes
from eps.shell.lanes.slurm.cli import SlurmClient
from eps.shell.render.progress import Reporter
from eps.shell.run.walker import Walker
from eps.shell.state.ledger import Ledger


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def set_cap(gpus: int) -> None:
    sh("sacctmgr", "-i", "modify", "qos", "where", "name=high-eur", "set", f"MaxTRESPerUser=gres/gpu={gpus}")


def cancel_all() -> None:
    subprocess.run(["scancel", "-u", "root"], check=False)
    while sh("squeue", "-h", "-u", "root", "-o", "%i").strip():
        time.sleep(0.05)


def one_run(client: SlurmClient, cap: int, poll: float) -> dict[str, float]:
    fellows = evolve(FELLOWS, first_park_cap_s=cap, next_park_cap_s=cap)
    policy = evolve(DEFAULT_POLICY, clusters=(fellows,))
    grants = client.discover_grants("root").unwrap()

    blocker = Job(intent="gpu-2", duration_s=600, command=("sleep", "300"))
    rung = Rung("fellows", LaneKind.SLURM, Provisioning.QUEUE, "blocker", qos="high-eur", gpus=2)
    bid = client.submit(render_sbatch(blocker, fellows, rung, dispatch_id="benchblocker", output="/dev/null")).unwrap()
    while client.poll(bid).unwrap().state != "RUNNING":
        time.sleep(0.05)

    dispatch = "bench" + uuid.uuid4().hex[:8]
    marks: dict[str, float] = {}
    running_seen: list[float] = []
    stop = threading.Event()

    def on_event(e: dict[str, Any]) -> None:
        now = time.monotonic()
        if e["event"] == "submitted":
            marks.setdefault(f"submitted:{e['qos']}", now)
        elif e["event"] == "advanced":
            marks["advanced"] = now
        elif e["event"] == "started":
            marks["started"] = now

    def watch() -> None:  # the RUNNING moment as squeue reports it, at 20 ms resolution
        while not stop.is_set():
            out = sh("squeue", "-h", "--name", f"eps-{dispatch}", "-o", "%T|%q")
            if "RUNNING|normal-eur" in out:
                running_seen.append(time.monotonic())
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    job = Job(intent="gpu-2", duration_s=600, command=("sleep", "300"))
    with tempfile.TemporaryDirectory() as state:  # the production walker, on the SLURM lane
        settings = Settings(policy=policy, state_dir=state)
        lanes = Lanes(settings, LaneOptions(slurm_poll_interval_s=poll, env={}))
        ledger = Ledger(state)
        reporter = Reporter(json_lines=True, out=io.StringIO(), hook=on_event)
        snapshot = CapacitySnapshot(unavailable=lanes.unavailable())
        walker = Walker(settings, ledger, lanes, reporter, grants=grants, snapshot=snapshot)
        (outcome,) = walker.execute(job, dispatch)
        ledger.close()
        lanes.close()
    watcher.join(timeout=30)
    stop.set()
    assert outcome.handle is not None and outcome.handle.qos == "normal-eur", outcome
    expiry = marks["submitted:high-eur"] + cap
    return {
        "expiry_to_running": running_seen[0] - expiry,
        "expiry_to_cancel_confirmed": marks["advanced"] - expiry,
        "cancel_confirmed_to_submit": marks["submitted:normal-eur"] - marks["advanced"],
        "submit_to_running": running_seen[0] - marks["submitted:normal-eur"],
        "expiry_to_walk_sees_running": marks["started"] - expiry,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cap", type=int, default=2, help="first park cap, seconds")
    ap.add_argument("--poll", type=float, default=0.1, help="the walk's poll interval, seconds")
    args = ap.parse_args()
    client = SlurmClient()
    results: list[dict[str, float]] = []
    cancel_all()
    set_cap(2)
    try:
        for _ in range(args.runs):
            results.append(one_run(client, args.cap, args.poll))
            cancel_all()
    finally:
        cancel_all()
        set_cap(16)
    print(f"park cap {args.cap} s, walk poll {args.poll} s, {args.runs} runs (seconds: median [min-max])")
    for key in results[0]:
        values = [r[key] for r in results]
        print(f"  {key:28s} {statistics.median(values):6.3f}  [{min(values):.3f}-{max(values):.3f}]")


if __name__ == "__main__":
    main()
